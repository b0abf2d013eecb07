// text::WordPieceTokenizer on arbitrary bytes (invalid UTF-8 included) with a
// real vocabulary: $QKV_FUZZ_TOKENIZER, else the all-MiniLM-L6-v2 tokenizer
// that scripts/fetch_model.sh puts in models/, else the small tokenizer.json
// of fuzz/corpus/tokenizer_json/. Ids are in the vocabulary, truncation holds,
// and lines encoded as a batch equal the lines encoded one by one.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "qkv/error.h"
#include "qkv/text/wordpiece_tokenizer.h"

namespace {

const qkv::text::WordPieceTokenizer& tokenizer() {
  static const qkv::text::WordPieceTokenizer tok = [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("QKV_FUZZ_TOKENIZER")) candidates.push_back(env);
    candidates.push_back(QKV_SOURCE_DIR "/models/all-MiniLM-L6-v2/tokenizer.json");
    candidates.push_back(QKV_SOURCE_DIR "/fuzz/corpus/tokenizer_json/small.json");
    for (const auto& path : candidates) {
      if (!std::filesystem::exists(path)) continue;
      std::fprintf(stderr, "fuzz_tokenize: vocabulary %s\n", path.c_str());
      return qkv::text::WordPieceTokenizer::from_json(path);
    }
    std::fprintf(stderr, "fuzz_tokenize: no tokenizer.json found\n");
    std::abort();
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& tok = tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto pieces = tok.tokenize(text);
    for (const auto& piece : pieces) QKV_FUZZ_EXPECT(!piece.empty());
    (void)tok.basic_tokenize(text);
    const auto ids = tok.encode(text);
    const int64_t max_length = tok.options().max_length;
    QKV_FUZZ_EXPECT(max_length == 0 || static_cast<int64_t>(ids.size()) <= max_length);
    for (int64_t id : ids) QKV_FUZZ_EXPECT(id >= 0 && id < tok.vocab_size());

    // Lines as a batch: each row starts with the row's own encoding.
    std::vector<std::string> lines;
    for (size_t start = 0; start <= text.size();) {
      const size_t end = std::min(text.find('\n', start), text.size());
      lines.emplace_back(text.substr(start, end - start));
      start = end + 1;
    }
    const auto batch = tok.encode_batch(lines);
    QKV_FUZZ_EXPECT(batch.batch == static_cast<int64_t>(lines.size()));
    QKV_FUZZ_EXPECT(batch.ids.size() == static_cast<size_t>(batch.batch * batch.length));
    for (int64_t row = 0; row < batch.batch; ++row) {
      const auto one = tok.encode(lines[row]);
      QKV_FUZZ_EXPECT(batch.lengths[row] == static_cast<int64_t>(one.size()));
      if (!tok.options().pad_left)
        for (size_t i = 0; i < one.size(); ++i)
          QKV_FUZZ_EXPECT(batch.ids[row * batch.length + i] == one[i]);
    }
  } catch (const qkv::Error&) {
  }
  return 0;
}
