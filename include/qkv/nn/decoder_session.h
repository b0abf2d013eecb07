// nn::DecoderSession — generating with a nn::DecoderModel (tutorial §8.3):
// the KV cache plus every buffer one decoding step needs, allocated once.
//
// A prompt goes in at once (prefill: all its positions in one forward pass,
// or a few for a long prompt, appended to the cache); then each step feeds one token per
// sequence, projects only that token, appends its key and value to the cache
// and attends over everything cached. A step allocates no memory (once the
// attention kernel's per-thread scratch has grown to its size: after a long
// prompt, or after the first steps past its key block length).
//
//   nn::DecoderSession session(model);              // batch 1, max_seq_len positions
//   const Tensor& logits = session.prefill(prompt_ids);   // [1, vocab]
//   Generator gen(seed);
//   Sampler sampler({.temperature = 0.8}, model.config().vocab_size);
//   int64_t next = sampler.sample(session.logits_row(0), gen);
//   session.step({&next, 1});                       // logits of the next position
//
// or, all of it in one call:
//   std::vector<int64_t> ids = nn::generate(model, prompt_ids, {.max_new_tokens = 200});
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "qkv/attention.h"
#include "qkv/nn/decoder_model.h"
#include "qkv/nn/kv_cache.h"
#include "qkv/sampling.h"
#include "qkv/tensor.h"

namespace qkv::nn {

struct GenerationOptions {
  int64_t max_new_tokens = 128;
  SamplingOptions sampling;  // temperature 0: greedy
  uint64_t seed = 0;         // of the Generator the sampler draws from
  // Stop after emitting this token (it is included in the output).
  std::optional<int64_t> stop_token;
};

class DecoderSession {
 public:
  // The model must outlive the session; its parameters are read in place, so
  // loading new weights into it takes effect on the next step. max_len (0:
  // the model's max_seq_len) bounds prompt plus generated positions.
  explicit DecoderSession(DecoderModel& model, int64_t batch_size = 1, int64_t max_len = 0);

  // Feeds T tokens per sequence, after what the cache holds: in one pass, or
  // in passes of 256 tokens when T is longer (the logits are the same up to
  // float32 rounding; the working memory stays that of 256 rows). Ids out of
  // range and prompts longer than the cache's room are refused before any
  // pass.
  // ids: B·T ids, row-major [B, T]  ->  logits of the last position [B, vocab]
  const Tensor& prefill(std::span<const int64_t> ids);

  // Feeds one token per sequence. Allocates nothing (see above).
  // tokens: [B]  ->  logits [B, vocab] (a buffer the next call overwrites)
  const Tensor& step(std::span<const int64_t> tokens);

  // Batch 1: continues the sequence the session holds (after prefill()):
  // samples up to max_new_tokens tokens from the current logits, feeding each
  // back. on_token (optional) sees each new id as it is made; returning false
  // stops early. -> the new ids
  std::vector<int64_t> decode(const GenerationOptions& options,
                              const std::function<bool(int64_t)>& on_token = {});

  // Batch 1: reset(), prefill(prompt), decode(options, on_token).
  std::vector<int64_t> generate(std::span<const int64_t> prompt, const GenerationOptions& options,
                                const std::function<bool(int64_t)>& on_token = {});

  // Positions held (prompt plus fed tokens).
  int64_t length() const { return cache_.length(); }
  int64_t max_len() const { return cache_.max_len(); }
  int64_t batch_size() const { return batch_size_; }
  void reset() { cache_.reset(); }

  KVCache& cache() { return cache_; }
  // [B, vocab]: the logits of the last prefill() or step().
  const Tensor& logits() const { return logits_; }
  // Row b of logits(), as float32 (what Sampler reads).
  std::span<const float> logits_row(int64_t b = 0) const;

 private:
  // "N (the model's max_seq_len)" or "N (this session's max_len; ...)", for errors.
  std::string context_limit() const;

  DecoderModel& model_;
  const DecoderModelConfig config_;
  int64_t batch_size_;
  KVCache cache_;
  DecoderBuffers buffers_;                 // the steps' working tensors
  Tensor logits_;                          // [B, vocab]
  mutable std::vector<float> logits_f32_;  // logits_row() of float64 models
};

// One-shot generation with a fresh session of prompt + max_new_tokens positions.
// prompt: ids  ->  the new ids
std::vector<int64_t> generate(DecoderModel& model, std::span<const int64_t> prompt,
                              const GenerationOptions& options,
                              const std::function<bool(int64_t)>& on_token = {});

}  // namespace qkv::nn
