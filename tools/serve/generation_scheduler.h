// serve::GenerationScheduler — the thread of `qkv serve` that owns the
// language model. Requests wait in a bounded queue; each one that gets a
// slot (serve::SequenceSlots) is prefilled, then advances one token per step
// together with every other active request (continuous batching: requests
// join and leave between steps). While some requests decode, a new prompt
// goes in at most `prefill_chunk` tokens per step so that their streams keep
// flowing. Each request samples with its own options and seed, and ends at
// the model's end-of-turn token, a stop string, max_tokens, or when its
// client cancels (a disconnect): its slot is free for the next step.
//
//   GenerationScheduler scheduler(model, {.slots = 4, .context = 2048}, metrics);
//   auto stream = scheduler.submit(request);        // ApiError 503: queue full
//   while (auto event = stream->next(100ms)) ...     // text pieces, then the end
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "qkv/models/gguf_model.h"
#include "qkv/sampling.h"
#include "serve/metrics.h"
#include "serve/sequence_slots.h"

namespace qkv::serve {

using Clock = std::chrono::steady_clock;

struct GenerationRequest {
  std::vector<int64_t> prompt;  // token ids, not empty
  int64_t max_tokens = 16;      // >= 1; prompt + max_tokens fit the context
  SamplingOptions sampling;
  uint64_t seed = 0;
  std::vector<std::string> stop;  // stop strings (not empty strings)
  bool ignore_eos = false;        // the end-of-turn token is sampled and fed like any other
  Clock::time_point arrived = Clock::now();
};

// One thing a request's stream reports: a piece of text, or its end.
struct GenerationEvent {
  enum class Kind { kText, kDone, kError } kind = Kind::kText;
  std::string text;           // kText: the piece; kError: the message
  std::string finish_reason;  // kDone: "stop" or "length"
  int64_t prompt_tokens = 0;  // kDone: usage
  int64_t completion_tokens = 0;
};

// What the scheduler and an HTTP handler share about one request.
class GenerationStream {
 public:
  // Scheduler side.
  void push(GenerationEvent event);
  bool cancelled() const { return cancelled_.load(); }
  // Handler side: the next event, waiting up to `wait`; nullopt on timeout.
  std::optional<GenerationEvent> next(std::chrono::milliseconds wait);
  // The client is gone: the scheduler frees the request's slot at its next step.
  void cancel() { cancelled_.store(true); }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<GenerationEvent> events_;
  std::atomic<bool> cancelled_{false};
};

struct SchedulerOptions {
  int64_t slots = 4;            // sequences decoded at once
  int64_t context = 2048;       // positions per slot: prompt + reply
  int64_t max_queue = 64;       // requests that may wait for a slot; more get 503
  int64_t prefill_chunk = 128;  // prompt tokens per step while others decode
  int threads = 0;              // the model's threads (0: as the process has)
};

class GenerationScheduler {
 public:
  // Starts the thread. The model must outlive the scheduler.
  GenerationScheduler(models::GgufModel& model, const SchedulerOptions& options, Metrics& metrics);
  // Finishes every queued and running request, then joins the thread.
  ~GenerationScheduler();

  GenerationScheduler(const GenerationScheduler&) = delete;
  GenerationScheduler& operator=(const GenerationScheduler&) = delete;

  // Queues a request. Throws ApiError 503 (with a retry hint) when every
  // slot is taken and max_queue requests already wait.
  std::shared_ptr<GenerationStream> submit(GenerationRequest request);

  // Requests queued or running.
  int64_t in_flight() const;
  int64_t context() const { return options_.context; }
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Active;

  void run();
  // Admits queued requests into free slots (under mutex_).
  void admit(std::vector<std::unique_ptr<Active>>& active);
  // Feeds prompt chunks; a request whose prompt is in gets its first token.
  void prefill(std::vector<std::unique_ptr<Active>>& active, bool others_decoding);
  // One token for every request whose prompt is in.
  void step(std::vector<std::unique_ptr<Active>>& active);
  // Takes the request's new token: text out, and whether it has ended.
  void accept(Active& a, int64_t token);
  void finish(Active& a, const std::string& reason);
  void fail(Active& a, const std::string& message);

  models::GgufModel& model_;
  const SchedulerOptions options_;
  Metrics& metrics_;
  std::optional<int64_t> end_of_turn_;
  SequenceSlots slots_;  // used by the thread only

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<GenerationRequest, std::shared_ptr<GenerationStream>>> queue_;
  int64_t running_ = 0;  // requests holding a slot
  bool stopping_ = false;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace qkv::serve
