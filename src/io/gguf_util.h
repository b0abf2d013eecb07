// Internal: what the GGUF reader's files share — the error helpers and the quoting of keys and
// names in messages.
#pragma once

#include <string>
#include <string_view>

#include "qkv/error.h"

namespace qkv::io::gguf_detail {

// `s` in double quotes for an error message: control bytes, '"', '\\' and (when `s` is not
// valid UTF-8) every byte >= 0x80 escaped as \xNN; cut after 80 bytes with "...".
std::string quoted(std::string_view s);

// Whether `s` is valid UTF-8 (no overlong forms, surrogates or code points above U+10FFFF);
// if not, `bad_at` is the offset of the first byte that is not.
bool valid_utf8(std::string_view s, size_t* bad_at = nullptr);

// qkv::Error(kValue) "invalid GGUF file '<source>': <parts>".
template <class... Parts>
[[noreturn]] void invalid(const std::string& source, const Parts&... parts) {
  throw Error(ErrorKind::kValue, detail::concat("invalid GGUF file '", source, "': ", parts...));
}

}  // namespace qkv::io::gguf_detail
