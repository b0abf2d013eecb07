// serve::EmbeddingBatcher: take the waiting jobs up to the token budget, encode
// their texts in one SentenceEncoder::encode call, hand each job its rows.
#include "serve/embedding_batcher.h"

#include <exception>

#include "qkv/runtime.h"
#include "serve/api_error.h"
#include "serve/stop_worker.h"

namespace qkv::serve {

EmbeddingBatcher::EmbeddingBatcher(const models::SentenceEncoder& encoder,
                                   const EmbeddingOptions& options, Metrics& metrics)
    : encoder_(encoder), options_(options), metrics_(metrics) {
  thread_ = std::thread([this] { run(); });
}

EmbeddingBatcher::~EmbeddingBatcher() { stop_worker(mutex_, stopping_, wake_, thread_); }

EmbeddingResult EmbeddingBatcher::embed(std::vector<std::string> texts) {
  int64_t tokens = 0;  // counted here, in the caller's thread
  for (const std::string& text : texts)
    tokens += static_cast<int64_t>(encoder_.token_ids(text).size());
  std::future<EmbeddingResult> result;
  {
    std::lock_guard lock(mutex_);
    if (static_cast<int64_t>(queue_.size()) >= options_.max_queue)
      throw ApiError(503,
                     "the server is busy: " + std::to_string(queue_.size()) +
                         " embedding requests already wait (--max-queue " +
                         std::to_string(options_.max_queue) + "); retry later",
                     "", "queue_full");
    queue_.push_back({.texts = std::move(texts), .tokens = tokens});
    result = queue_.back().result.get_future();
  }
  wake_.notify_one();
  return result.get();
}

void EmbeddingBatcher::run() {
  if (options_.threads > 0) set_num_threads(options_.threads);  // OpenMP's count is per thread
  while (true) {
    std::vector<Job> jobs;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      int64_t tokens = 0;
      // The first job always goes, whatever its size; others while they fit.
      while (!queue_.empty()) {
        const int64_t job_tokens = queue_.front().tokens;
        if (!jobs.empty() && tokens + job_tokens > options_.max_batch_tokens) break;
        tokens += job_tokens;
        jobs.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    std::vector<std::string> texts;
    for (const Job& job : jobs) texts.insert(texts.end(), job.texts.begin(), job.texts.end());
    try {
      const Tensor all = encoder_.encode(texts);  // [N, D]
      int64_t row = 0;
      for (Job& job : jobs) {
        const auto n = static_cast<int64_t>(job.texts.size());
        metrics_.add_embedded_tokens(job.tokens);
        job.result.set_value({all.slice(0, row, row + n).contiguous(), job.tokens});
        row += n;
      }
    } catch (...) {
      for (Job& job : jobs) job.result.set_exception(std::current_exception());
    }
    // Idle workers would shorten the generation scheduler's spin-waits (release_idle_threads).
    std::unique_lock lock(mutex_);
    if (queue_.empty()) {
      lock.unlock();
      release_idle_threads();
    }
  }
}

}  // namespace qkv::serve
