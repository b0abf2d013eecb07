// text::WordPieceTokenizer::from_json on an arbitrary tokenizer.json; a
// tokenizer that loads must encode a fixed text to ids of its vocabulary.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "qkv/error.h"
#include "qkv/text/wordpiece_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const qkv_fuzz::MemoryFile file(data, size);
  try {
    const auto tok = qkv::text::WordPieceTokenizer::from_json(file.path());
    const std::string text = "Hello, World! [CLS] unaffable caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 x";
    for (int64_t id : tok.encode(text)) QKV_FUZZ_EXPECT(id >= 0 && id < tok.vocab_size());
    const auto batch = tok.encode_batch({text, "", "a b"});
    QKV_FUZZ_EXPECT(batch.ids.size() == static_cast<size_t>(batch.batch * batch.length));
    QKV_FUZZ_EXPECT(batch.attention_mask.size() == batch.ids.size());
  } catch (const qkv::Error&) {
  }
  return 0;
}
