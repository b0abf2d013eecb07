// Python's str methods on UTF-8 text (see jinja_strings.h).
#include "text/jinja_strings.h"

#include <utf8proc.h>

#include "qkv/error.h"
#include "text/basic_tokenizer.h"
#include "text/utf8_lead.h"

namespace qkv::text::jinja {

namespace {

constexpr char32_t kInvalid = 0xFFFFFFFF;  // a byte outside valid UTF-8

// The character at s[i] and its length in bytes.
std::pair<char32_t, size_t> decode_at(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return {b, 1};
  const detail::Utf8Lead lead = detail::utf8_lead(b);
  if (lead.length == 0 || i + lead.length > s.size()) return {kInvalid, 1};
  const auto second = static_cast<unsigned char>(s[i + 1]);
  if (second < lead.lo || second > lead.hi) return {kInvalid, 1};
  char32_t cp = b & (0xFF >> (lead.length + 1));
  for (size_t k = 1; k < lead.length; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return {kInvalid, 1};
    cp = (cp << 6) | (c & 0x3F);
  }
  return {cp, lead.length};
}

// str.isspace: the characters Python strips and splits on by default.
bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

struct Char {
  char32_t cp;
  size_t begin, end;  // bytes
};

std::vector<Char> chars_of(std::string_view s) {
  std::vector<Char> out;
  for (size_t i = 0; i < s.size();) {
    const auto [cp, n] = decode_at(s, i);
    out.push_back({cp, i, i + n});
    i += n;
  }
  return out;
}

// Each character mapped by `f` (invalid bytes kept as they are).
template <class F>
std::string map_chars(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  size_t index = 0;
  for (const Char& c : chars_of(s)) {
    if (c.cp == kInvalid)
      out.append(s.substr(c.begin, c.end - c.begin));
    else
      detail::append_utf8(f(c.cp, index), out);
    ++index;
  }
  return out;
}

char32_t upper(char32_t c) { return static_cast<char32_t>(utf8proc_toupper(c)); }
char32_t lower(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(c)); }
bool is_cased_letter(char32_t c) {
  if (c == kInvalid) return false;
  const utf8proc_category_t k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

}  // namespace

std::vector<size_t> char_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    offsets.push_back(i);
    i += decode_at(s, i).second;
  }
  offsets.push_back(s.size());
  return offsets;
}

size_t char_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += decode_at(s, i).second) ++n;
  return n;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right) {
  const std::vector<Char> cs = chars_of(s);
  std::vector<char32_t> set;
  if (chars)
    for (const Char& c : chars_of(*chars)) set.push_back(c.cp);
  const auto strips = [&](char32_t cp) {
    if (!chars) return is_space(cp);
    for (char32_t x : set)
      if (x == cp && cp != kInvalid) return true;
    return false;
  };
  size_t first = 0, last = cs.size();
  if (left)
    while (first < last && strips(cs[first].cp)) ++first;
  if (right)
    while (last > first && strips(cs[last - 1].cp)) --last;
  if (first == last) return "";
  return std::string(s.substr(cs[first].begin, cs[last - 1].end - cs[first].begin));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    QKV_CHECK(!sep->empty(), "str.split(): the separator is empty");
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t at = s.find(*sep, start);
      if (at == std::string_view::npos) break;
      parts.emplace_back(s.substr(start, at - start));
      start = at + sep->size();
    }
    parts.emplace_back(s.substr(start));
    return parts;
  }
  const std::vector<Char> cs = chars_of(s);
  size_t i = 0;
  while (true) {
    while (i < cs.size() && is_space(cs[i].cp)) ++i;
    if (i == cs.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.emplace_back(s.substr(cs[i].begin));  // the rest, as it is
      break;
    }
    const size_t begin = i;
    while (i < cs.size() && !is_space(cs[i].cp)) ++i;
    parts.emplace_back(s.substr(cs[begin].begin, cs[i - 1].end - cs[begin].begin));
  }
  return parts;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement,
                       int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts the replacement before each character and at the end.
    const std::vector<size_t> offsets = char_offsets(s);
    int64_t done = 0;
    for (size_t k = 0; k + 1 < offsets.size(); ++k) {
      if (count < 0 || done < count) {
        out.append(replacement);
        ++done;
      }
      out.append(s.substr(offsets[k], offsets[k + 1] - offsets[k]));
    }
    if (count < 0 || done < count) out.append(replacement);
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old, start);
    if (at == std::string_view::npos) break;
    out.append(s.substr(start, at - start)).append(replacement);
    start = at + old.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

std::string py_upper(std::string_view s) {
  return map_chars(s, [](char32_t c, size_t) { return upper(c); });
}

std::string py_lower(std::string_view s) {
  return map_chars(s, [](char32_t c, size_t) { return lower(c); });
}

std::string py_capitalize(std::string_view s) {
  return map_chars(s, [](char32_t c, size_t i) { return i == 0 ? upper(c) : lower(c); });
}

std::string py_title(std::string_view s) {
  bool previous_cased = false;
  std::string out;
  for (const Char& c : chars_of(s)) {
    if (c.cp == kInvalid) {
      out.append(s.substr(c.begin, c.end - c.begin));
      previous_cased = false;
      continue;
    }
    detail::append_utf8(previous_cased ? lower(c.cp) : upper(c.cp), out);
    previous_cased = is_cased_letter(c.cp);
  }
  return out;
}

std::string py_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (const char ch : s) {
    if (const char* escape = backslash_escape(ch, quote))
      out += escape;
    else
      out.push_back(ch);
  }
  out.push_back(quote);
  return out;
}

const char* backslash_escape(char ch, char quote) {
  switch (ch) {
    case '\n':
      return "\\n";
    case '\t':
      return "\\t";
    case '\r':
      return "\\r";
    case '\\':
      return "\\\\";
    case '\'':
      return quote == '\'' ? "\\'" : nullptr;
    case '"':
      return quote == '"' ? "\\\"" : nullptr;
    default:
      return nullptr;
  }
}

}  // namespace qkv::text::jinja
