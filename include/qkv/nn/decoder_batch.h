// nn::DecoderBatch — batched decoding with a nn::DecoderModel, what a server
// needs: several sequences of different lengths, each with its own KV cache,
// advance one token each in one call, and a sequence can join or leave
// between calls.
//
// A step embeds the n tokens as the rows of one [n, D] matrix, so every linear
// layer reads its weights once for all of them (a product over n rows instead
// of n matrix-vector products); only attention runs per sequence, over its own
// cache. A step allocates nothing once the attention kernel's scratch has
// grown to its size (as nn::DecoderSession's steps).
//
//   nn::DecoderBatch batch(model, /*max_sequences=*/8, /*max_len=*/512);
//   int64_t a = batch.add(prompt_a);        // prefill; batch.logits(): [1, vocab]
//   int64_t b = batch.add(prompt_b);
//   const int64_t ids[] = {a, b}, next[] = {token_a, token_b};
//   batch.step(ids, next);                  // [2, vocab]: row 0 for a, row 1 for b
//   batch.remove(a);                        // its cache is free for the next add()
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "qkv/nn/decoder_block.h"
#include "qkv/nn/decoder_model.h"
#include "qkv/nn/kv_cache.h"
#include "qkv/nn/per_sequence_step.h"
#include "qkv/tensor.h"

namespace qkv::nn {

class DecoderBatch {
 public:
  // Room for max_sequences sequences at once, each of up to max_len positions
  // (0: the model's max_seq_len). The model must outlive the batch; its
  // caches are made with the model's kv_cache_storage().
  DecoderBatch(DecoderModel& model, int64_t max_sequences, int64_t max_len = 0);

  // Starts a sequence with its prompt, fed in one pass into a free cache;
  // logits() then holds the logits of its last position.
  // prompt: ids  ->  the new sequence's id (ids are never reused)
  int64_t add(std::span<const int64_t> prompt);

  // Ends sequence `id`; its cache is free for the next add().
  void remove(int64_t id);

  // Feeds tokens[r] to sequence ids[r], all in one pass; each token sits at
  // its own sequence's next position. Allocates nothing (see above).
  // ids, tokens: [n]  ->  logits [n, vocab], row r of ids[r] (a buffer the
  // next call overwrites)
  const Tensor& step(std::span<const int64_t> ids, std::span<const int64_t> tokens);

  // The logits of the last add() ([1, vocab]) or step() ([n, vocab]).
  const Tensor& logits() const { return logits_; }
  // Row r of logits(), as float32 (what Sampler reads).
  std::span<const float> logits_row(int64_t r) const;

  // Positions sequence `id` holds (prompt plus fed tokens).
  int64_t length(int64_t id) const;
  // The sequences held, in the order of their caches.
  std::vector<int64_t> ids() const;
  int64_t size() const;  // sequences held
  int64_t max_sequences() const { return static_cast<int64_t>(caches_.size()); }
  int64_t max_len() const { return caches_.front().max_len(); }

 private:
  // The cache index of sequence `id`; an error naming `fn` when none holds it.
  size_t slot_of(int64_t id, const char* fn) const;

  DecoderModel& model_;
  std::vector<KVCache> caches_;    // one per slot, batch 1
  std::vector<int64_t> slot_ids_;  // the sequence in each slot; -1: free
  int64_t next_id_ = 0;
  PerSequenceStep step_;  // for max_sequences rows
  Tensor logits_;         // the first rows of step_'s logits
};

}  // namespace qkv::nn
