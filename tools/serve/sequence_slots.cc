// serve::SequenceSlots: per-slot caches that keep their tokens, prompts fed in
// chunks, and one DecoderModel::forward_into over a token of each slot.
#include "serve/sequence_slots.h"

#include <algorithm>

#include "qkv/error.h"
#include "qkv/runtime.h"

namespace qkv::serve {

namespace {

// How many leading ids `cached` and `prompt` share.
int64_t common_prefix(const std::vector<int64_t>& cached, std::span<const int64_t> prompt) {
  return std::mismatch(cached.begin(), cached.end(), prompt.begin(), prompt.end()).first -
         cached.begin();
}

}  // namespace

SequenceSlots::SequenceSlots(nn::DecoderModel& model, int64_t slots, int64_t max_len)
    : model_(model),
      max_len_(max_len > 0 ? max_len : model.config().max_seq_len),
      step_(model, slots) {
  QKV_CHECK(slots > 0, "SequenceSlots: slots must be > 0, got ", slots);
  QKV_CHECK(max_len_ <= model.config().max_seq_len, "SequenceSlots: max_len ", max_len_,
            " exceeds the model's context of ", model.config().max_seq_len, " positions");
  slots_.reserve(static_cast<size_t>(slots));
  for (int64_t i = 0; i < slots; ++i) slots_.push_back({.cache = model.make_cache(1, max_len_)});
}

const SequenceSlots::Slot& SequenceSlots::state(int64_t slot) const {
  QKV_CHECK(slot >= 0 && slot < size(), "SequenceSlots: slot must be in [0, ", size(), "), got ",
            slot);
  return slots_[static_cast<size_t>(slot)];
}

SequenceSlots::Slot& SequenceSlots::state(int64_t slot) {
  return const_cast<Slot&>(std::as_const(*this).state(slot));
}

int64_t SequenceSlots::acquire(std::span<const int64_t> prompt) {
  const auto n = static_cast<int64_t>(prompt.size());
  QKV_CHECK(n > 0, "SequenceSlots::acquire: the prompt is empty; give at least one token");
  QKV_CHECK(n <= max_len_, "SequenceSlots::acquire: the prompt has ", n,
            " tokens, more than a slot's ", max_len_, " positions");
  int64_t best = -1, best_shared = -1;
  for (int64_t s = 0; s < size(); ++s) {
    const Slot& slot = slots_[static_cast<size_t>(s)];
    if (slot.busy) continue;
    const int64_t shared = common_prefix(slot.tokens, prompt);
    if (shared > best_shared ||
        (shared == best_shared &&
         slot.released_at < slots_[static_cast<size_t>(best)].released_at)) {
      best = s;
      best_shared = shared;
    }
  }
  if (best < 0) return -1;
  Slot& slot = slots_[static_cast<size_t>(best)];
  // At least the last prompt token is fed again: its logits start the reply.
  int64_t keep = std::min(best_shared, n - 1);
  // Another slot, busy or not, may hold a longer prefix (16 clients with one
  // system prompt): its keys and values are copied, not computed again.
  // float32 caches only: a q8_0 cache would round them a second time.
  int64_t donor = -1, donor_keep = keep;
  if (model_.kv_cache_storage() == nn::KVCacheStorage::kFloat)
    for (int64_t s = 0; s < size(); ++s) {
      const int64_t shared = common_prefix(slots_[static_cast<size_t>(s)].tokens, prompt);
      if (s != best && std::min(shared, n - 1) > donor_keep) {
        donor = s;
        donor_keep = std::min(shared, n - 1);
      }
    }
  if (donor >= 0) {
    const nn::KVCache& from = slots_[static_cast<size_t>(donor)].cache;
    slot.cache.reset();
    for (int64_t layer = 0; layer < from.num_layers(); ++layer)
      slot.cache.append(layer, from.keys(layer).slice(2, 0, donor_keep),
                        from.values(layer).slice(2, 0, donor_keep));
    keep = donor_keep;
    slot.tokens.assign(prompt.begin(), prompt.begin() + keep);
  }
  slot.cache.truncate(keep);
  slot.tokens.resize(static_cast<size_t>(keep));
  slot.prompt.assign(prompt.begin(), prompt.end());
  slot.fed = keep;
  slot.reused = keep;
  slot.busy = true;
  return best;
}

int64_t SequenceSlots::pending(int64_t slot) const {
  const Slot& s = state(slot);
  return static_cast<int64_t>(s.prompt.size()) - s.fed;
}

bool SequenceSlots::prefill(int64_t slot, int64_t max_tokens) {
  Slot& s = state(slot);
  QKV_CHECK(s.busy, "SequenceSlots::prefill: slot ", slot, " is free; acquire() it first");
  const int64_t left = pending(slot);
  if (left == 0) return true;
  const int64_t n = max_tokens > 0 ? std::min(max_tokens, left) : left;
  const std::span<const int64_t> chunk(s.prompt.data() + s.fed, static_cast<size_t>(n));
  try {
    prompt_logits_ = model_.forward_last(chunk, 1, s.cache);  // [1, vocab]
  } catch (...) {
    // The cache may hold part of the chunk: keep only what `tokens` says.
    s.cache.truncate(std::min<int64_t>(s.cache.length(), static_cast<int64_t>(s.tokens.size())));
    throw;
  }
  s.tokens.insert(s.tokens.end(), chunk.begin(), chunk.end());
  s.fed += n;
  // As DecoderSession::prefill: the steps need none of the prompt's buffers.
  empty_buffer_cache();
  return s.fed == static_cast<int64_t>(s.prompt.size());
}

std::span<const float> SequenceSlots::prompt_logits() const {
  QKV_CHECK(prompt_logits_.defined(), "SequenceSlots::prompt_logits: no prompt was fed yet");
  return step_.float32_row(prompt_logits_, 0);
}

void SequenceSlots::step(std::span<const int64_t> slots, std::span<const int64_t> tokens) {
  const char* m = "SequenceSlots::step";
  const auto n = static_cast<int64_t>(slots.size());
  QKV_CHECK(n > 0 && n <= size() && tokens.size() == slots.size(), m,
            ": expected one token per slot and at most ", size(), " slots, got ", n, " slots and ",
            tokens.size(), " tokens");
  for (int64_t r = 0; r < n; ++r) {
    const int64_t id = slots[static_cast<size_t>(r)];
    Slot& s = state(id);
    QKV_CHECK(s.busy && pending(id) == 0, m, ": slot ", id, " has no sequence with its prompt fed");
    QKV_CHECK(std::count(slots.begin(), slots.begin() + r, id) == 0, m, ": slot ", id,
              " is given twice; a sequence advances one token per step");
    QKV_CHECK(s.cache.length() < max_len_, m, ": slot ", id, " fills its ", max_len_, " positions");
    step_.set_row(r, s.cache);
  }
  step_logits_ = step_.run(tokens);
  for (int64_t r = 0; r < n; ++r)
    slots_[static_cast<size_t>(slots[static_cast<size_t>(r)])].tokens.push_back(
        tokens[static_cast<size_t>(r)]);
}

std::span<const float> SequenceSlots::logits_row(int64_t r) const {
  const int64_t rows = step_logits_.defined() ? step_logits_.size(0) : 0;
  QKV_CHECK(r >= 0 && r < rows, "SequenceSlots::logits_row: r must be in [0, ", rows, "), got ", r);
  return step_.float32_row(step_logits_, r);
}

void SequenceSlots::release(int64_t slot, bool keep_cache) {
  Slot& s = state(slot);
  if (!keep_cache) {
    s.cache.reset();
    s.tokens.clear();
  }
  // A prompt cut short keeps what it fed: those tokens are in the cache.
  s.busy = false;
  s.prompt.clear();
  s.fed = 0;
  s.released_at = ++releases_;
}

int64_t SequenceSlots::busy() const {
  return std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.busy; });
}

}  // namespace qkv::serve
