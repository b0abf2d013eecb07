// nn::PerSequenceStep — one decoding step over several sequences that each
// keep their own KV cache, what nn::DecoderBatch and `qkv serve`'s slots
// share: token r goes to row r's sequence, at the length of its cache,
// and every row runs in one DecoderModel::forward_into. The model's buffers,
// the row tables and the logits are sized once for max_rows, so a step
// allocates nothing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "qkv/nn/decoder_model.h"
#include "qkv/nn/kv_cache.h"
#include "qkv/tensor.h"

namespace qkv::nn {

class PerSequenceStep {
 public:
  // The model must outlive the step.
  PerSequenceStep(DecoderModel& model, int64_t max_rows);

  // Row r of the next run() is the sequence of `cache`, at its length.
  void set_row(int64_t r, KVCache& cache) {
    row_caches_[static_cast<size_t>(r)] = &cache;
    positions_[static_cast<size_t>(r)] = cache.length();
  }

  // Feeds tokens[r] to row r's sequence (set_row), all n <= max_rows rows in
  // one pass.  tokens: [n]  ->  logits [n, vocab], rows(n) (the next call
  // overwrites them)
  Tensor run(std::span<const int64_t> tokens);

  // The first n rows of the logits storage: [n, vocab].
  Tensor rows(int64_t n) const { return logits_.slice(0, 0, n); }

  // Row r of `logits` (one of rows()) as float32, converted into scratch of
  // this step's for float64 models: valid until the next call.
  std::span<const float> float32_row(const Tensor& logits, int64_t r) const;

 private:
  DecoderModel& model_;
  DecoderBuffers buffers_;
  std::vector<KVCache*> row_caches_;
  std::vector<int64_t> positions_;
  Tensor logits_;                       // [max_rows, vocab]
  mutable std::vector<float> row_f32_;  // float32_row() of float64 models
};

}  // namespace qkv::nn
