// Internal: the one JSON parser of every file qkv reads (json_document.h).
#include "io/json_document.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "qkv/error.h"

namespace qkv::io {

namespace {

using nlohmann::json;
using qkv::detail::concat;

// "line L, column C" of the byte at `offset`.
std::string where(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  const std::string_view before = text.substr(0, offset);
  const size_t newline = before.rfind('\n');
  const size_t line = 1 + std::count(before.begin(), before.end(), '\n');
  const size_t column = newline == std::string_view::npos ? offset + 1 : offset - newline;
  return concat("line ", line, ", column ", column);
}

// The offset of the bracket that opens level kMaxJsonDepth + 1 (outside strings).
size_t too_deep_at(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return text.size();
}

// nlohmann's message without its "[json.exception...] parse error at ...: "
// prefix, ASCII only (the last token read may hold any bytes) and short.
std::string plain_message(const char* what) {
  std::string_view s(what);
  if (s.starts_with("[json.exception.")) s.remove_prefix(std::min(s.size(), s.find("] ") + 2));
  if (s.starts_with("parse error")) s.remove_prefix(std::min(s.size(), s.find(": ") + 2));
  std::string out(s.substr(0, 160));
  for (char& c : out)
    if (static_cast<unsigned char>(c) >= 0x80 || static_cast<unsigned char>(c) < 0x20) c = '?';
  if (s.size() > 160) out += "...";
  return out;
}

// An nlohmann SAX handler that builds the value as json::parse would, but
// stops at kMaxJsonDepth, notes the first repeated key and keeps the error
// position for every error (json::parse drops it for a number like 1e400).
class Builder {
 public:
  explicit Builder(json& root) : root_(root) {}

  bool null() { return add(nullptr); }
  bool boolean(bool v) { return add(v); }
  bool number_integer(json::number_integer_t v) { return add(v); }
  bool number_unsigned(json::number_unsigned_t v) { return add(v); }
  bool number_float(json::number_float_t v, const json::string_t&) { return add(v); }
  bool string(json::string_t& v) { return add(std::move(v)); }
  bool binary(json::binary_t& v) { return add(json::binary(std::move(v))); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    Frame& frame = stack_.back();
    if (!duplicate.found && frame.value->contains(k)) {
      duplicate.found = true;
      duplicate.key = k;
      for (size_t i = 0; i + 1 < stack_.size(); ++i)
        if (stack_[i].value->is_object()) duplicate.enclosing.push_back(stack_[i].key);
    }
    frame.key = std::move(k);
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const json::exception& e) {
    error_position = position;
    error = plain_message(e.what());
    return false;
  }

  bool too_deep = false;
  std::size_t error_position = 0;
  std::string error;
  JsonDuplicateKey duplicate;

 private:
  struct Frame {
    json* value;
    std::string key;  // of the member being read, in an object
  };

  // Stores `v` in the open container (or as the root); its address stays
  // valid while it is open, since nothing else is added to its parent.
  json* put(json&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& frame = stack_.back();
    if (frame.value->is_array()) {
      frame.value->push_back(std::move(v));
      return &frame.value->back();
    }
    json& slot = (*frame.value)[frame.key];
    slot = std::move(v);
    return &slot;
  }
  bool add(json&& v) {
    put(std::move(v));
    return true;
  }
  bool open(json&& v) {
    if (stack_.size() >= static_cast<size_t>(kMaxJsonDepth)) {
      too_deep = true;
      return false;
    }
    json* slot = put(std::move(v));
    stack_.push_back({slot, {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  json& root_;
  std::vector<Frame> stack_;
};

}  // namespace

json parse_json(std::string_view text, std::string_view source, JsonDuplicateKey* duplicate) {
  // nlohmann's lexer would take a NUL byte for the end of the input.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    throw Error(ErrorKind::kValue, concat(source, ": not valid JSON at ", where(text, nul),
                                          ": NUL byte (byte ", nul, ")"));
  json root;
  Builder builder(root);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &builder);
  } catch (const json::exception& e) {  // not expected: the SAX handler takes the errors
    builder.error = plain_message(e.what());
  }
  if (builder.too_deep) {
    root = nullptr;  // at most kMaxJsonDepth deep: freed without deep recursion
    throw Error(ErrorKind::kValue,
                concat(source, ": not valid JSON at ", where(text, too_deep_at(text)),
                       ": arrays and objects nest more than ", kMaxJsonDepth, " levels deep"));
  }
  if (!ok) {
    const size_t at = builder.error_position > 0 ? builder.error_position - 1 : 0;
    throw Error(ErrorKind::kValue,
                concat(source, ": not valid JSON at ", where(text, at), ": ", builder.error));
  }
  if (duplicate) *duplicate = std::move(builder.duplicate);
  return root;
}

namespace {

void append_excerpt(const json& value, size_t limit, std::string& out) {
  constexpr auto replace = json::error_handler_t::replace;
  if (value.is_string() && value.get_ref<const std::string&>().size() > limit) {
    out += json(value.get_ref<const std::string&>().substr(0, limit)).dump(-1, ' ', false, replace);
    return;
  }
  if (!value.is_structured()) {
    out += value.dump(-1, ' ', false, replace);
    return;
  }
  // Each level adds a bracket, so this recurses at most `limit` deep.
  out += value.is_array() ? '[' : '{';
  bool first = true;
  for (auto it = value.begin(); it != value.end() && out.size() <= limit; ++it) {
    if (!first) out += ',';
    first = false;
    if (value.is_object()) {
      append_excerpt(json(it.key()), limit, out);
      out += ':';
    }
    append_excerpt(*it, limit, out);
  }
  out += value.is_array() ? ']' : '}';
}

}  // namespace

std::string json_excerpt(const json& value, size_t max_chars) {
  max_chars = std::max<size_t>(max_chars, 8);
  std::string out;
  append_excerpt(value, max_chars, out);
  if (out.size() > max_chars) {
    size_t cut = max_chars - 3;  // not inside a UTF-8 character
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
    out.resize(cut);
    out += "...";
  }
  return out;
}

std::string read_text_file(const std::filesystem::path& path, std::string_view who) {
  const auto fail = [&](int error) {
    const std::string why = error == ENOENT   ? "no such file"
                            : error == EISDIR ? "it is a directory"
                                              : std::strerror(error);
    throw Error(ErrorKind::kIO, concat(who, ": cannot read '", path.string(), "': ", why), error);
  };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(EISDIR);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(errno ? errno : EIO);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(EIO);
  return text.str();
}

void require_directory(const std::filesystem::path& dir, std::string_view who) {
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) return;
  const bool exists = std::filesystem::exists(dir, ec);
  throw Error(ErrorKind::kIO,
              concat(who, ": '", dir.string(), "' is not a directory",
                     exists ? " (it is a file)" : ": it does not exist"),
              exists ? ENOTDIR : ENOENT);
}

}  // namespace qkv::io
