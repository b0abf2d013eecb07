// text::BpeTokenizer on arbitrary bytes with small vocabularies (byte-level:
// the 256 byte tokens, a few merges, control and user-defined tokens, with
// each pre-tokenizer; SentencePiece-style: characters, "▁" pieces and the 256
// "<0xNN>" tokens): ids are in range, decode(encode(text)) is the text with
// invalid UTF-8 replaced ("▁" a space), and the stream decoder agrees with
// decode. The same bytes read as ids are decoded too (qkv::Error for ids out
// of range).
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

// The same control and user-defined tokens, then SentencePiece pieces.
qkv::text::BpeVocabulary sentencepiece_vocabulary() {
  qkv::text::BpeVocabulary v;
  v.model = "llama";
  v.pre_tokenizer = "default";
  v.tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im"};
  v.token_types = {3, 3, 3, 4};
  v.scores = {0, 0, 0, 0};
  float score = 0;
  for (const char* piece : {"\u2581", "t", "h", "e", "\u2581t", "he", "\u2581the", "\u2581\u2581",
                            "1", "2", "12", "\xE4\xB8\x96", "a", "aa", "aaa"}) {
    v.tokens.push_back(piece);
    v.token_types.push_back(1);
    v.scores.push_back(score--);
  }
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(qkv::text::BpeTokenizer::byte_token(static_cast<uint8_t>(b)));
    v.token_types.push_back(6);
    v.scores.push_back(0);
  }
  v.bos = 1;
  v.eos = 2;
  v.add_bos = true;
  return v;
}

const qkv::text::BpeTokenizer& tokenizer(int which) {
  static const qkv::text::BpeTokenizer gpt2(vocabulary("gpt2"));
  static const qkv::text::BpeTokenizer digits(vocabulary("smollm"));
  static const qkv::text::BpeTokenizer qwen2(vocabulary("qwen2"));
  static const qkv::text::BpeTokenizer llama3(vocabulary("llama-bpe"));
  static const qkv::text::BpeTokenizer sentencepiece(sentencepiece_vocabulary());
  const qkv::text::BpeTokenizer* all[] = {&gpt2, &digits, &qwen2, &llama3, &sentencepiece};
  return *all[which % 5];
}

// "▁" as a space (what decoding a SentencePiece token gives).
std::string marks_as_spaces(std::string text) {
  for (size_t i = text.find("\u2581"); i != std::string::npos; i = text.find("\u2581", i))
    text.replace(i, 3, " ");
  return text;
}

// `text` with each maximal ill-formed UTF-8 subsequence as U+FFFD, computed
// through the byte-level tokenizer's byte tokens (decode of the bytes one by one).
std::string replaced(std::string_view text) {
  const qkv::text::BpeTokenizer& tok = tokenizer(0);
  std::vector<int32_t> ids;
  for (const char c : text)
    ids.push_back(*tok.id_of(qkv::text::BpeTokenizer::bytes_to_unicode(std::string(1, c))));
  return tok.decode(ids);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool parse_special = data[0] & 1;
  const auto& tok = tokenizer(data[0] >> 1);
  const bool sentencepiece = tok.is_sentencepiece();
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const auto ids = tok.encode(text, true, parse_special);
    QKV_FUZZ_EXPECT(!ids.empty() && ids[0] == 1);
    for (int32_t id : ids) QKV_FUZZ_EXPECT(id >= 0 && id < tok.size());
    const std::span<const int32_t> body(ids.data() + 1, ids.size() - 1);
    const std::string valid = replaced(text);
    QKV_FUZZ_EXPECT(tok.decode(body) == (sentencepiece ? marks_as_spaces(valid) : valid));
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
    if (sentencepiece) {
      QKV_FUZZ_EXPECT(marks_as_spaces(pieces) == marks_as_spaces(valid));
    } else {
      QKV_FUZZ_EXPECT(pieces == valid);
    }
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
