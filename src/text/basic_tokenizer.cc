// BERT's basic tokenization; the Unicode data comes from utf8proc, corrected
// where tokenizers' older tables differ (unicode_compat.h).
#include "text/basic_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>

#include "text/unicode_categories.h"
#include "text/unicode_compat.h"
#include "text/utf8_lead.h"

namespace qkv::text::detail {

namespace {

constexpr char32_t kReplacement = 0xFFFD;

bool is_ascii_punctuation(char32_t cp) {
  return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
         (cp >= 123 && cp <= 126);
}

// Cc, Cf or Co as tokenizers sees them, except \t \n \r (whitespace there).
bool is_control(char32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  if (cp < 0x80) return cp < 0x20 || cp == 0x7F;
  const utf8proc_category_t c = category(cp);
  const bool other = c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF ||
                     c == UTF8PROC_CATEGORY_CO || c == UTF8PROC_CATEGORY_CS;
  return other && !in_ranges(kNotHfOther, cp);
}

bool is_nonspacing_mark(char32_t cp) {
  if (cp < 0x300) return false;
  if (category(cp) == UTF8PROC_CATEGORY_MN) return !in_ranges(kNotHfNonspacing, cp);
  return in_ranges(kHfNonspacingExtra, cp);
}

// The code-point blocks BERT calls Chinese (CJK Unified Ideographs and
// their extensions, compatibility ideographs); kana and hangul are not.
bool is_chinese_char(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  return static_cast<uint8_t>(
      utf8proc_get_property(static_cast<utf8proc_int32_t>(cp))->combining_class);
}

// Appends the canonical decomposition (NFD, before reordering) of cp.
void append_decomposition(char32_t cp, std::u32string& out) {
  if (cp < 0xC0 || in_ranges(kHfNoDecomposition, cp)) {  // nothing below U+00C0 decomposes
    out.push_back(cp);
    return;
  }
  utf8proc_int32_t buffer[8];
  int boundclass = 0;
  const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), buffer, 8,
                                                     UTF8PROC_DECOMPOSE, &boundclass);
  if (n <= 0 || n > 8) {  // cannot happen for a valid code point; keep it unchanged
    out.push_back(cp);
    return;
  }
  for (utf8proc_ssize_t i = 0; i < n; ++i) out.push_back(static_cast<char32_t>(buffer[i]));
}

// Canonical ordering (the second half of NFD): a stable sort by combining
// class of each run of characters whose class is not 0.
void reorder_marks(std::u32string& s, size_t begin) {
  for (size_t i = begin + 1; i < s.size(); ++i) {
    const uint8_t ci = combining_class(s[i]);
    if (ci == 0) continue;
    for (size_t j = i; j > begin; --j) {
      const uint8_t cj = combining_class(s[j - 1]);
      if (cj == 0 || cj <= ci) break;
      std::swap(s[j - 1], s[j]);
    }
  }
}

// Rust's char::to_lowercase(cp) for every cp except U+0130 ('İ' -> "i̇",
// the one mapping to two code points).
char32_t lowercase(char32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
  const auto lower = static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
  return lower != cp ? lower : extra_lowercase(cp);
}

}  // namespace

void decode_utf8(std::string_view text, std::u32string& out) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  const auto cont = [&](size_t k, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return k < n && s[k] >= lo && s[k] <= hi;
  };
  size_t i = 0;
  while (i < n) {
    const unsigned char b = s[i];
    if (b < 0x80) {
      out.push_back(b);
      ++i;
      continue;
    }
    const Utf8Lead lead = utf8_lead(b);
    const size_t length = lead.length;
    if (length == 0) {
      out.push_back(kReplacement);
      ++i;
      continue;
    }
    // The longest valid prefix is replaced as a whole.
    size_t good = 1;
    if (cont(i + 1, lead.lo, lead.hi)) {
      ++good;
      while (good < length && cont(i + good)) ++good;
    }
    if (good < length) {
      out.push_back(kReplacement);
      i += good;
      continue;
    }
    char32_t cp = b & (length == 2 ? 0x1F : length == 3 ? 0x0F : 0x07);
    for (size_t k = 1; k < length; ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
    out.push_back(cp);
    i += length;
  }
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_whitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_punctuation(char32_t cp) {
  if (cp < 0x80) return is_ascii_punctuation(cp);
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return !in_ranges(kNotHfPunctuation, cp);
    default:
      return in_ranges(kHfPunctuationExtra, cp);
  }
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80)
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
           cp == '_';
  if (cp == 0x200C || cp == 0x200D) return true;  // joiners are \w too
  const utf8proc_category_t c = category(cp);
  if (is_letter_category(c)) return true;
  switch (c) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

void normalize(std::u32string_view text, const NormalizerOptions& options, std::u32string& out) {
  const size_t begin = out.size();
  bool reorder = false;  // whether canonical ordering has any work to do
  // Clean-up, CJK spacing and decomposition, in one pass.
  for (char32_t cp : text) {
    if (options.clean_text) {
      if (cp == 0 || cp == kReplacement || is_control(cp)) continue;
      if (is_whitespace(cp)) cp = ' ';
    }
    const bool spaced = options.split_chinese_chars && cp >= 0x3400 && is_chinese_char(cp);
    if (spaced) out.push_back(' ');
    if (options.strip_accents && cp >= 0xC0) {
      const size_t before = out.size();
      append_decomposition(cp, out);
      for (size_t k = before; k < out.size() && !reorder; ++k) reorder = combining_class(out[k]);
    } else {
      out.push_back(cp);
    }
    if (spaced) out.push_back(' ');
  }
  if (!options.strip_accents && !options.lowercase) return;
  if (reorder) reorder_marks(out, begin);
  // Mark removal and lower-casing, in place: both shorten the text or keep
  // its length, except lower-casing U+0130, which takes the slow path.
  size_t write = begin;
  for (size_t read = begin; read < out.size(); ++read) {
    const char32_t cp = out[read];
    if (options.strip_accents && is_nonspacing_mark(cp)) continue;
    if (!options.lowercase) {
      out[write++] = cp;
    } else if (cp != 0x130) {
      out[write++] = lowercase(cp);
    } else {
      std::u32string rest;
      for (size_t k = read; k < out.size(); ++k) {
        if (options.strip_accents && is_nonspacing_mark(out[k])) continue;
        if (out[k] == 0x130) {
          rest += U"i\u0307";
        } else {
          rest.push_back(lowercase(out[k]));
        }
      }
      out.resize(write);
      out += rest;
      return;
    }
  }
  out.resize(write);
}

}  // namespace qkv::text::detail
