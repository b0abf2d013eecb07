// Sentence embeddings with the pretrained all-MiniLM-L6-v2, and their cosines.
//   sentence_similarity [model dir]     (default: models/all-MiniLM-L6-v2,
//                                        fetched by scripts/fetch_model.sh)
#include <qkv/models/sentence_encoder.h>
#include <qkv/qkv.h>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "models/all-MiniLM-L6-v2";
  try {
    qkv::models::SentenceEncoder encoder(dir);
    const std::vector<std::string> texts = {"Zhang San works in Hangzhou.",
                                            "Who works in Hangzhou? Zhang San does.",
                                            "The cat sleeps on the sofa."};
    const qkv::Tensor e = encoder.encode(texts);  // [3, 384], rows of norm 1
    for (size_t i = 0; i < texts.size(); ++i)
      for (size_t j = i + 1; j < texts.size(); ++j) {
        double cosine = 0;
        for (int64_t d = 0; d < e.size(1); ++d)
          cosine += e.at({int64_t(i), d}) * e.at({int64_t(j), d});
        std::printf("%.3f  %s | %s\n", cosine, texts[i].c_str(), texts[j].c_str());
      }
  } catch (const qkv::Error& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
}
