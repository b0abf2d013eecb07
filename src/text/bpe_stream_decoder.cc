// Streaming decode: complete UTF-8 characters go out, the bytes of one that
// is still incomplete wait for the next token.
#include "qkv/text/bpe_tokenizer.h"
#include "text/basic_tokenizer.h"

namespace qkv::text {

namespace {

// Length of the longest suffix of `bytes` that is a proper prefix of a valid
// UTF-8 character (Unicode Table 3-7), i.e. could still be completed.
size_t incomplete_suffix(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  // A character is at most 4 bytes, so an incomplete one starts in the last 3.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t start = n - back;
    const unsigned char lead = s[start];
    size_t length = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
    } else if (lead >= 0x80 && lead <= 0xBF) {
      continue;  // a continuation byte: the lead may be further back
    } else {
      return 0;  // ASCII or an invalid lead: nothing after it can wait
    }
    if (back >= length) return 0;  // complete (or invalid) already
    for (size_t k = start + 1; k < n; ++k) {
      const unsigned char a = k == start + 1 ? lo : 0x80, b = k == start + 1 ? hi : 0xBF;
      if (s[k] < a || s[k] > b) return 0;
    }
    return back;
  }
  return 0;
}

std::string lossy(std::string_view bytes) {
  std::u32string chars;
  detail::decode_utf8(bytes, chars);
  std::string out;
  out.reserve(bytes.size());
  for (const char32_t cp : chars) detail::append_utf8(cp, out);
  return out;
}

}  // namespace

std::string BpeStreamDecoder::push(int32_t id) {
  const std::string& piece = tokenizer_->token_to_piece(id);  // checks the id
  if (skip_special_ && tokenizer_->token_type(id) == BpeTokenType::kControl) return {};
  pending_ += piece;
  const size_t keep = incomplete_suffix(pending_);
  std::string out = lossy(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string BpeStreamDecoder::finish() {
  std::string out = lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace qkv::text
