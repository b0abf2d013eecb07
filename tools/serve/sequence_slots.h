// serve::SequenceSlots — the decoding state of `qkv serve`: a fixed number of
// slots, each a KV cache of batch 1 holding one sequence, advanced together
// one token each per step (one pass over the weights for all of them, as
// nn::DecoderBatch), with two things a server needs on top:
//
//   - chunked prefill: a new prompt goes in a few tokens at a time between
//     steps, so that the sequences already decoding do not wait for it;
//   - prefix reuse: a slot keeps the tokens of its last sequence after
//     release(); acquire() picks the free slot that shares the longest
//     prefix with the new prompt (the same system prompt, the same
//     conversation one turn on) and feeds only the tokens after it. When
//     another slot, busy or free, holds a longer prefix, its keys and values
//     are copied into the new one (float32 caches).
//
// nn::DecoderBatch feeds a prompt in one pass and forgets a cache on
// remove(), so this class runs the same DecoderModel::forward_into over
// per-sequence caches itself.
//
//   SequenceSlots slots(model, /*slots=*/4, /*max_len=*/2048);
//   int64_t s = slots.acquire(prompt);             // -1: no free slot
//   while (!slots.prefill(s, 64)) { ... steps of the others ... }
//   int64_t t = argmax(slots.prompt_logits());
//   slots.step({&s, 1}, {&t, 1});                   // logits_row(0)
//   slots.release(s);                               // its tokens stay for reuse
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "qkv/nn/decoder_model.h"
#include "qkv/nn/kv_cache.h"
#include "qkv/nn/per_sequence_step.h"
#include "qkv/tensor.h"

namespace qkv::serve {

class SequenceSlots {
 public:
  // `slots` caches of `max_len` positions each (0: the model's max_seq_len).
  // The model must outlive this object.
  SequenceSlots(nn::DecoderModel& model, int64_t slots, int64_t max_len = 0);

  // Takes the free slot whose cached tokens share the longest prefix with
  // `prompt` (the least recently released of equals) and keeps that prefix,
  // or copies a longer one from another slot (see above), leaving at least
  // one prompt token to feed. -> the slot, or -1 when all
  // are busy. An empty prompt or one longer than max_len() is an error.
  int64_t acquire(std::span<const int64_t> prompt);

  // Feeds up to max_tokens more of the slot's prompt (all of it when
  // max_tokens <= 0). -> true once the whole prompt is in; prompt_logits()
  // then holds the logits of its last position.
  bool prefill(int64_t slot, int64_t max_tokens);

  // The logits of the last position of the prompt prefill() just finished.
  // -> [vocab], valid until the next prefill() or step()
  std::span<const float> prompt_logits() const;

  // Feeds tokens[r] to slots[r], all in one pass; every slot must have its
  // prompt in and room for one more position.
  // slots, tokens: [n]  ->  logits_row(r) for r < n
  void step(std::span<const int64_t> slots, std::span<const int64_t> tokens);

  // Row r of the last step()'s logits, as float32.
  // -> [vocab], valid until the next prefill() or step()
  std::span<const float> logits_row(int64_t r) const;

  // Frees the slot; its cache and tokens stay for a later acquire() unless
  // keep_cache is false (after an error, when they may disagree).
  void release(int64_t slot, bool keep_cache = true);

  // Prompt tokens acquire() found already cached in the slot.
  int64_t reused(int64_t slot) const { return state(slot).reused; }
  // Prompt tokens prefill() has still to feed.
  int64_t pending(int64_t slot) const;
  // Positions the slot's cache holds.
  int64_t length(int64_t slot) const { return state(slot).cache.length(); }
  int64_t size() const { return static_cast<int64_t>(slots_.size()); }
  int64_t busy() const;
  int64_t max_len() const { return max_len_; }

 private:
  struct Slot {
    nn::KVCache cache;
    std::vector<int64_t> tokens;  // the ids whose keys and values the cache holds
    std::vector<int64_t> prompt;  // the current sequence's prompt
    int64_t fed = 0;              // prompt ids in the cache
    int64_t reused = 0;           // of which acquire() found cached
    bool busy = false;
    uint64_t released_at = 0;  // release() order, for least recently used
  };

  const Slot& state(int64_t slot) const;
  Slot& state(int64_t slot);

  nn::DecoderModel& model_;
  int64_t max_len_;
  std::vector<Slot> slots_;
  uint64_t releases_ = 0;
  nn::PerSequenceStep step_;  // for `slots` rows
  Tensor step_logits_;        // [n, vocab] of the last step()
  Tensor prompt_logits_;      // [1, vocab]
};

}  // namespace qkv::serve
