// io::CharVocabulary: the input up to its first NUL byte is a vocabulary's
// JSON (from_json), the rest a text (the whole input when there is no NUL).
// What encodes must decode back to the same text, with every vocabulary.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "qkv/error.h"
#include "qkv/io/char_vocabulary.h"

namespace {

void round_trip(const qkv::io::CharVocabulary& vocab, std::string_view text) {
  try {
    const auto ids = vocab.encode(text);
    for (int64_t id : ids) QKV_FUZZ_EXPECT(id >= 0 && id < vocab.size());
    QKV_FUZZ_EXPECT(vocab.decode(ids) == text);
  } catch (const qkv::Error&) {
    // A character without a token.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view json = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? input : input.substr(nul + 1);

  round_trip(qkv::io::CharVocabulary::bytes(), input);
  try {
    const auto vocab = qkv::io::CharVocabulary::from_json(std::string(json));
    round_trip(vocab, text);
    const auto again = qkv::io::CharVocabulary::from_json(vocab.to_json());
    QKV_FUZZ_EXPECT(again.tokens() == vocab.tokens());
  } catch (const qkv::Error&) {
  }
  try {
    // Every character of the text has its token.
    const auto vocab = qkv::io::CharVocabulary::from_text(text);
    const auto ids = vocab.encode(text);
    QKV_FUZZ_EXPECT(vocab.decode(ids) == text);
  } catch (const qkv::Error&) {
    // Invalid UTF-8.
  }
  return 0;
}
