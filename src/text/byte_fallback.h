// tokenizers' ByteFallback decoder on one run of "<0xNN>" tokens: the bytes
// if they are valid UTF-8, else one U+FFFD per byte (not per maximal
// subpart, as decoding a byte-level token's bytes does).
#pragma once

#include <string>
#include <string_view>

#include "text/basic_tokenizer.h"

namespace qkv::text::detail {

inline void append_byte_run(std::string_view bytes, std::string& out) {
  std::u32string chars;
  decode_utf8(bytes, chars);
  std::string valid;
  valid.reserve(bytes.size());
  for (const char32_t cp : chars) append_utf8(cp, valid);
  // Valid exactly when decoding replaced nothing, i.e. it encodes back the same.
  if (valid == bytes) {
    out += valid;
    return;
  }
  for (size_t i = 0; i < bytes.size(); ++i) out += "\uFFFD";
}

}  // namespace qkv::text::detail
