// Internal: the one JSON parser of every file qkv reads (tokenizer.json,
// config.json, safetensors headers, ...), with a nesting limit, and the short
// excerpts of JSON values that error messages quote.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::io {

// Deeper input is rejected while it is parsed: nlohmann's destructor and
// dump() recurse, so a value nested 100,000 deep would overflow the stack.
inline constexpr int kMaxJsonDepth = 64;

// The first key repeated within one object; `enclosing` holds the keys of the
// objects around it, outermost first (the top-level object has none).
struct JsonDuplicateKey {
  bool found = false;
  std::string key;
  std::vector<std::string> enclosing;
};

// Parses `text`. Every failure (syntax, a number out of double's range such as
// 1e400, NUL bytes, nesting deeper than kMaxJsonDepth) throws
// qkv::Error(kValue) "<source>: not valid JSON at line L, column C: <what>".
// A repeated key keeps its last value (as Python's json does) unless
// `duplicate` is given: then the first one is stored there.
nlohmann::json parse_json(std::string_view text, std::string_view source,
                          JsonDuplicateKey* duplicate = nullptr);

// `value` as JSON text for an error message, cut to about `max_chars`
// (bad UTF-8 replaced, containers expanded only as far as the cut).
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 60);

// The bytes of `path`; qkv::Error(kIO, errno) "<who>: cannot read '<path>': ..."
// when it cannot be read (ENOENT: "no such file").
std::string read_text_file(const std::filesystem::path& path, std::string_view who);

// qkv::Error(kIO, ENOENT or ENOTDIR) "<who>: '<dir>' is not a directory: ..."
// unless `dir` is a directory.
void require_directory(const std::filesystem::path& dir, std::string_view who);

}  // namespace qkv::io
