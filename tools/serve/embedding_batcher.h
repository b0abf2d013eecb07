// serve::EmbeddingBatcher — the thread of `qkv serve` that owns the sentence
// encoder. Requests that wait together are encoded in one call, up to a
// budget of tokens, so that concurrent clients share the encoder's batches.
//
//   EmbeddingBatcher batcher(encoder, {.max_batch_tokens = 8192}, metrics);
//   EmbeddingResult r = batcher.embed({"A cat sits.", "A dog runs."});   // blocks
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "qkv/models/sentence_encoder.h"
#include "qkv/tensor.h"
#include "serve/metrics.h"

namespace qkv::serve {

struct EmbeddingResult {
  Tensor embeddings;      // [N, D] float32, row i for text i
  int64_t prompt_tokens;  // as fed: [CLS] and [SEP] included, truncated
};

struct EmbeddingOptions {
  int64_t max_batch_tokens = 8192;  // tokens of the requests encoded together
  int64_t max_queue = 64;           // requests waiting; more are refused (503)
  int threads = 0;                  // the encoder's threads (0: as the process has)
};

class EmbeddingBatcher {
 public:
  // Starts the thread. The encoder must outlive the batcher.
  EmbeddingBatcher(const models::SentenceEncoder& encoder, const EmbeddingOptions& options,
                   Metrics& metrics);
  // Finishes the queued requests, then joins the thread.
  ~EmbeddingBatcher();

  // The embeddings of `texts` (blocks until they are computed). Throws
  // ApiError 503 when max_queue requests wait, qkv::Error when encoding fails.
  EmbeddingResult embed(std::vector<std::string> texts);

  int64_t dimension() const { return encoder_.dimension(); }

 private:
  struct Job {
    std::vector<std::string> texts;
    int64_t tokens = 0;  // as the encoder feeds them
    std::promise<EmbeddingResult> result;
  };

  void run();

  const models::SentenceEncoder& encoder_;
  const EmbeddingOptions options_;
  Metrics& metrics_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace qkv::serve
