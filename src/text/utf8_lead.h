// What the first byte of a UTF-8 character says about the rest (Unicode
// Table 3-7): the decoder (basic_tokenizer.cc) and the streaming decoder's
// wait for an incomplete character (bpe_stream_decoder.cc) read it the same way.
#pragma once

#include <cstddef>

namespace qkv::text::detail {

struct Utf8Lead {
  size_t length = 0;        // bytes of the character; 0: not a lead byte of 2-4 bytes
  unsigned char lo = 0x80;  // the allowed range of the second byte
  unsigned char hi = 0xBF;
};

// ASCII, continuation bytes and invalid leads (C0, C1, F5-FF) give length 0.
inline Utf8Lead utf8_lead(unsigned char b) {
  Utf8Lead lead;
  if (b >= 0xC2 && b <= 0xDF) {
    lead.length = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    lead.length = 3;
    if (b == 0xE0) lead.lo = 0xA0;
    if (b == 0xED) lead.hi = 0x9F;  // no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    lead.length = 4;
    if (b == 0xF0) lead.lo = 0x90;
    if (b == 0xF4) lead.hi = 0x8F;  // nothing above U+10FFFF
  }
  return lead;
}

}  // namespace qkv::text::detail
