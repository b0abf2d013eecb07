// text::BpeTokenizer on arbitrary bytes with a small vocabulary (the 256
// byte tokens, a few merges, control and user-defined tokens): ids are in
// range, decode(encode(text)) is the text with invalid UTF-8 replaced, and
// the stream decoder agrees with decode. The same bytes read as ids are
// decoded too (qkv::Error for ids out of range).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "qkv/error.h"
#include "qkv/text/bpe_tokenizer.h"

namespace {

qkv::text::BpeVocabulary vocabulary(const char* pre_tokenizer) {
  qkv::text::BpeVocabulary v;
  v.tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im"};
  v.token_types = {3, 3, 3, 4};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(qkv::text::BpeTokenizer::bytes_to_unicode(std::string(1, char(b))));
    v.token_types.push_back(1);
  }
  for (const char* merge :
       {"Ġ t", "h e", "Ġt he", "i n", "Ġ Ġ", "ĠĠ ĠĠ", "ä ¸", "ä¸ ĸ", "1 2", "Ċ Ċ", "' s"}) {
    const std::string m(merge);
    const size_t space = m.find(' ');
    v.tokens.push_back(m.substr(0, space) + m.substr(space + 1));
    v.token_types.push_back(1);
    v.merges.push_back(m);
  }
  v.tokens.push_back("<0x41>");
  v.token_types.push_back(6);
  v.pre_tokenizer = pre_tokenizer;
  v.bos = 1;
  v.eos = 2;
  v.add_bos = true;
  return v;
}

const qkv::text::BpeTokenizer& tokenizer(bool smollm) {
  static const qkv::text::BpeTokenizer gpt2(vocabulary("gpt2"));
  static const qkv::text::BpeTokenizer digits(vocabulary("smollm"));
  return smollm ? digits : gpt2;
}

// `text` with each maximal ill-formed UTF-8 subsequence as U+FFFD, computed
// through the tokenizer's own byte tokens (decode of the bytes one by one).
std::string replaced(const qkv::text::BpeTokenizer& tok, std::string_view text) {
  std::vector<int32_t> ids;
  for (const char c : text)
    ids.push_back(*tok.id_of(qkv::text::BpeTokenizer::bytes_to_unicode(std::string(1, c))));
  return tok.decode(ids);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool smollm = data[0] & 1;
  const bool parse_special = data[0] & 2;
  const auto& tok = tokenizer(smollm);
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const auto ids = tok.encode(text, true, parse_special);
    QKV_FUZZ_EXPECT(!ids.empty() && ids[0] == 1);
    for (int32_t id : ids) QKV_FUZZ_EXPECT(id >= 0 && id < tok.size());
    const std::span<const int32_t> body(ids.data() + 1, ids.size() - 1);
    QKV_FUZZ_EXPECT(tok.decode(body) == replaced(tok, text));
    qkv::text::BpeStreamDecoder stream(tok);
    std::string streamed;
    for (int32_t id : body) streamed += stream.push(id);
    streamed += stream.finish();
    QKV_FUZZ_EXPECT(streamed == tok.decode(body));
    std::string pieces;
    for (const auto& piece : tok.pre_tokenize(text)) {
      QKV_FUZZ_EXPECT(!piece.empty());
      pieces += piece;
    }
    QKV_FUZZ_EXPECT(pieces == replaced(tok, text));
  } catch (const qkv::Error&) {
    QKV_FUZZ_EXPECT(false);  // nothing in encode may throw
  }
  // The bytes as little-endian int32 ids, most of them out of range.
  std::vector<int32_t> ids((size - 1) / 4);
  if (!ids.empty()) std::memcpy(ids.data(), data + 1, ids.size() * 4);
  try {
    (void)tok.decode(ids, parse_special);
  } catch (const qkv::Error&) {
  }
  for (int32_t& id : ids) id = static_cast<int32_t>(static_cast<uint32_t>(id) % tok.size());
  qkv::text::BpeStreamDecoder stream(tok, parse_special);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.push(id);
  streamed += stream.finish();
  QKV_FUZZ_EXPECT(streamed == tok.decode(ids, parse_special));
  return 0;
}
