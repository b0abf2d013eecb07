// Streaming decode: complete UTF-8 characters go out, the bytes of one that
// is still incomplete wait for the next token ("llama": a run of byte tokens
// waits for its end, which decides whether it is valid as a whole).
#include "qkv/text/bpe_tokenizer.h"
#include "text/basic_tokenizer.h"
#include "text/byte_fallback.h"
#include "text/utf8_lead.h"

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
    const detail::Utf8Lead lead = detail::utf8_lead(s[start]);
    if (lead.length == 0) {
      // A continuation byte: the lead may be further back. ASCII or an invalid
      // lead: nothing after it can wait.
      if (s[start] >= 0x80 && s[start] <= 0xBF) continue;
      return 0;
    }
    if (back >= lead.length) return 0;  // complete (or invalid) already
    for (size_t k = start + 1; k < n; ++k) {
      const unsigned char a = k == start + 1 ? lead.lo : 0x80, b = k == start + 1 ? lead.hi : 0xBF;
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
  const std::string_view piece = tokenizer_->token_to_piece(id);  // checks the id
  if (skip_special_ && tokenizer_->token_type(id) == BpeTokenType::kControl) return {};
  if (tokenizer_->is_sentencepiece()) {
    if (tokenizer_->is_byte_token(id)) {
      pending_ += piece;
      return {};
    }
    std::string out;
    detail::append_byte_run(pending_, out);
    pending_.clear();
    out += piece;
    return strip_prefix_space(std::move(out));
  }
  pending_ += piece;
  const size_t keep = incomplete_suffix(pending_);
  std::string out = lossy(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string BpeStreamDecoder::finish() {
  std::string out;
  if (tokenizer_->is_sentencepiece()) {
    detail::append_byte_run(pending_, out);
    out = strip_prefix_space(std::move(out));
  } else {
    out = lossy(pending_);
  }
  pending_.clear();
  started_ = false;
  return out;
}

// "llama" with add_space_prefix: decode drops the text's leading space.
std::string BpeStreamDecoder::strip_prefix_space(std::string text) {
  if (started_ || text.empty()) return text;
  started_ = true;
  if (tokenizer_->add_space_prefix() && text[0] == ' ') text.erase(0, 1);
  return text;
}

}  // namespace qkv::text
