// Python's str methods on UTF-8 text, as chat templates call them through
// Jinja: lengths, indices and slices count characters (code points), and
// strip/split without arguments use Python's whitespace. A byte that is not
// part of valid UTF-8 counts as one character of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::text::jinja {

// The byte offset where each character starts, then s.size().
std::vector<size_t> char_offsets(std::string_view s);
size_t char_count(std::string_view s);

// str.strip / lstrip / rstrip: `chars` absent strips whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right);
// str.split(sep, maxsplit) (maxsplit < 0: no limit); sep absent splits on
// runs of whitespace and drops empty parts. An empty sep is an error.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit);
// str.replace(old, new, count) (count < 0: all).
std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement,
                       int64_t count);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
// str.capitalize: the first character upper case, the rest lower case.
std::string py_capitalize(std::string_view s);
// str.title: each run of letters starts upper case, the rest lower case.
std::string py_title(std::string_view s);
// Python's repr of a str: quoted, with \n, \t, \\ and the quote escaped.
std::string py_repr(std::string_view s);
// The backslash escape that Python's repr and JSON both write for `ch` in a
// string quoted with `quote` (\n, \t, \r, \\ and the quote), or nullptr.
const char* backslash_escape(char ch, char quote);

}  // namespace qkv::text::jinja
