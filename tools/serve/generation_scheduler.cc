// serve::GenerationScheduler: one thread, a bounded queue, and a loop of
// admit → cancel → prefill chunks → one batched step.
#include "serve/generation_scheduler.h"

#include <algorithm>

#include "qkv/error.h"
#include "qkv/runtime.h"
#include "qkv/text/bpe_tokenizer.h"
#include "serve/api_error.h"
#include "serve/stop_strings.h"
#include "serve/stop_worker.h"

namespace qkv::serve {

void GenerationStream::push(GenerationEvent event) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_one();
}

std::optional<GenerationEvent> GenerationStream::next(std::chrono::milliseconds wait) {
  std::unique_lock lock(mutex_);
  if (!ready_.wait_for(lock, wait, [&] { return !events_.empty(); })) return std::nullopt;
  GenerationEvent event = std::move(events_.front());
  events_.pop_front();
  return event;
}

// A request holding a slot.
struct GenerationScheduler::Active {
  Active(GenerationRequest r, std::shared_ptr<GenerationStream> s, int64_t slot_,
         const text::BpeTokenizer& tokenizer, int64_t vocab)
      : request(std::move(r)),
        stream(std::move(s)),
        slot(slot_),
        sampler(request.sampling, vocab),
        generator(request.seed),
        decoder(tokenizer, /*skip_special=*/true),
        stops(request.stop) {}

  GenerationRequest request;
  std::shared_ptr<GenerationStream> stream;
  int64_t slot;
  Sampler sampler;
  Generator generator;
  text::BpeStreamDecoder decoder;
  StopStrings stops;
  int64_t generated = 0;
  int64_t next_token = -1;  // sampled, to be fed at the next step
  bool done = false;
  Clock::time_point last_token;
};

GenerationScheduler::GenerationScheduler(models::GgufModel& model, const SchedulerOptions& options,
                                         Metrics& metrics)
    : model_(model),
      options_(options),
      metrics_(metrics),
      end_of_turn_(model.end_of_turn()),
      slots_(model.model, options.slots, options.context) {
  metrics_.set_slots(options_.slots);
  thread_ = std::thread([this] { run(); });
}

GenerationScheduler::~GenerationScheduler() { stop_worker(mutex_, stopping_, wake_, thread_); }

std::shared_ptr<GenerationStream> GenerationScheduler::submit(GenerationRequest request) {
  auto stream = std::make_shared<GenerationStream>();
  {
    std::lock_guard lock(mutex_);
    // Refused when every slot is taken and max_queue requests already wait.
    if (static_cast<int64_t>(queue_.size()) + running_ >= options_.slots + options_.max_queue)
      throw ApiError(503,
                     "the server is busy: " + std::to_string(queue_.size()) +
                         " requests already wait for one of its " + std::to_string(options_.slots) +
                         " slots (--max-queue " + std::to_string(options_.max_queue) +
                         "); retry later",
                     "", "queue_full");
    queue_.emplace_back(std::move(request), stream);
    metrics_.set_queue_length(static_cast<int64_t>(queue_.size()));
  }
  wake_.notify_one();
  return stream;
}

int64_t GenerationScheduler::in_flight() const {
  std::lock_guard lock(mutex_);
  return static_cast<int64_t>(queue_.size()) + running_;
}

void GenerationScheduler::run() {
  if (options_.threads > 0) set_num_threads(options_.threads);  // OpenMP's count is per thread
  std::vector<std::unique_ptr<Active>> active;
  while (true) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || !active.empty(); });
      if (stopping_ && queue_.empty() && active.empty()) return;
      admit(active);
    }
    for (auto& a : active)
      if (a->stream->cancelled()) finish(*a, "cancelled");
    const bool decoding = std::any_of(active.begin(), active.end(),
                                      [](const auto& a) { return !a->done && a->next_token >= 0; });
    prefill(active, decoding);
    step(active);
    const auto ended =
        std::remove_if(active.begin(), active.end(), [](const auto& a) { return a->done; });
    active.erase(ended, active.end());
    // About to sleep: idle workers would shorten the other threads' spin-waits.
    if (active.empty()) release_idle_threads();
    std::lock_guard lock(mutex_);
    running_ = static_cast<int64_t>(active.size());
    metrics_.set_busy_slots(running_);
  }
}

void GenerationScheduler::admit(std::vector<std::unique_ptr<Active>>& active) {
  while (!queue_.empty()) {
    auto& [request, stream] = queue_.front();
    if (stream->cancelled()) {  // gone before it got a slot
      queue_.pop_front();
      continue;
    }
    const int64_t slot = slots_.acquire(request.prompt);
    if (slot < 0) break;
    metrics_.add_prompt_tokens(0, slots_.reused(slot));
    active.push_back(std::make_unique<Active>(std::move(request), std::move(stream), slot,
                                              model_.tokenizer, model_.model.config().vocab_size));
    queue_.pop_front();
  }
  running_ = static_cast<int64_t>(active.size());
  metrics_.set_queue_length(static_cast<int64_t>(queue_.size()));
  metrics_.set_busy_slots(running_);
}

void GenerationScheduler::prefill(std::vector<std::unique_ptr<Active>>& active,
                                  bool others_decoding) {
  // Alone, a prompt goes in at once (as `qkv generate` feeds it); beside
  // decoding requests, at most prefill_chunk tokens per step in all.
  int64_t budget = others_decoding ? options_.prefill_chunk : 0;
  for (auto& a : active) {
    if (a->done || a->next_token >= 0) continue;
    if (others_decoding && budget <= 0) break;
    const int64_t before = slots_.pending(a->slot);
    bool complete = false;
    try {
      complete = slots_.prefill(a->slot, budget);
    } catch (const std::exception& e) {
      fail(*a, e.what());
      continue;
    }
    const int64_t fed = before - slots_.pending(a->slot);
    metrics_.add_prompt_tokens(fed, 0);
    budget -= fed;
    if (!complete) continue;
    const auto now = Clock::now();
    metrics_.observe_time_to_first_token(
        std::chrono::duration<double>(now - a->request.arrived).count());
    a->last_token = now;
    accept(*a, a->sampler.sample(slots_.prompt_logits(), a->generator));
  }
}

void GenerationScheduler::step(std::vector<std::unique_ptr<Active>>& active) {
  std::vector<int64_t> slots, tokens;
  std::vector<Active*> rows;
  for (auto& a : active)
    if (!a->done && a->next_token >= 0) {
      rows.push_back(a.get());
      slots.push_back(a->slot);
      tokens.push_back(a->next_token);
    }
  if (rows.empty()) return;
  try {
    slots_.step(slots, tokens);
  } catch (const std::exception& e) {
    for (Active* a : rows) fail(*a, e.what());
    return;
  }
  metrics_.observe_batch_rows(static_cast<int64_t>(rows.size()));
  const auto now = Clock::now();
  for (size_t r = 0; r < rows.size(); ++r) {
    Active& a = *rows[r];
    metrics_.observe_inter_token(std::chrono::duration<double>(now - a.last_token).count());
    a.last_token = now;
    accept(a, a.sampler.sample(slots_.logits_row(static_cast<int64_t>(r)), a.generator));
  }
}

void GenerationScheduler::accept(Active& a, int64_t token) {
  ++a.generated;
  metrics_.add_generated_tokens(1);
  auto send = [&](const std::string& text) {
    if (!text.empty()) a.stream->push({.kind = GenerationEvent::Kind::kText, .text = text});
  };
  if (end_of_turn_ && token == *end_of_turn_ && !a.request.ignore_eos) {
    send(a.stops.push(a.decoder.finish()));
    send(a.stops.finish());
    return finish(a, "stop");
  }
  send(a.stops.push(a.decoder.push(static_cast<int32_t>(token))));
  if (a.stops.stopped()) return finish(a, "stop");
  if (a.generated >= a.request.max_tokens) {
    send(a.stops.push(a.decoder.finish()));
    if (a.stops.stopped()) return finish(a, "stop");
    send(a.stops.finish());
    return finish(a, "length");
  }
  a.next_token = token;
}

void GenerationScheduler::finish(Active& a, const std::string& reason) {
  if (a.done) return;
  a.done = true;
  slots_.release(a.slot);
  a.stream->push({.kind = GenerationEvent::Kind::kDone,
                  .finish_reason = reason,
                  .prompt_tokens = static_cast<int64_t>(a.request.prompt.size()),
                  .completion_tokens = a.generated});
}

void GenerationScheduler::fail(Active& a, const std::string& message) {
  if (a.done) return;
  a.done = true;
  slots_.release(a.slot, /*keep_cache=*/false);
  a.stream->push({.kind = GenerationEvent::Kind::kError, .text = message});
}

}  // namespace qkv::serve
