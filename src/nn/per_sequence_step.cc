// nn::PerSequenceStep: positions from each row's cache, one forward_into.
#include "qkv/nn/per_sequence_step.h"

#include <algorithm>

#include "qkv/error.h"

namespace qkv::nn {

// At least one row: the owners check their sizes after constructing it.
PerSequenceStep::PerSequenceStep(DecoderModel& model, int64_t max_rows)
    : model_(model),
      buffers_(model.make_buffers(std::max<int64_t>(max_rows, 1))),
      row_caches_(static_cast<size_t>(std::max<int64_t>(max_rows, 1))),
      positions_(row_caches_.size()),
      logits_(Tensor::zeros({static_cast<int64_t>(row_caches_.size()), model.config().vocab_size},
                            model.config().dtype)),
      row_f32_(static_cast<size_t>(model.config().vocab_size)) {}

Tensor PerSequenceStep::run(std::span<const int64_t> tokens) {
  const auto n = static_cast<int64_t>(tokens.size());
  QKV_CHECK(n > 0 && n <= logits_.size(0), "PerSequenceStep::run: expected 1 to ", logits_.size(0),
            " tokens, got ", n);
  const auto count = static_cast<size_t>(n);
  Tensor logits = rows(n);
  model_.forward_into(logits, tokens,
                      {.batch_size = n,
                       .positions = std::span(positions_).first(count),
                       .caches = {.per_sequence = std::span(row_caches_).first(count)}},
                      buffers_);
  return logits;
}

std::span<const float> PerSequenceStep::float32_row(const Tensor& logits, int64_t r) const {
  const int64_t V = logits.size(1);
  if (logits.dtype() == DType::kFloat32)
    return {logits.data<float>() + r * V, static_cast<size_t>(V)};
  const double* row = logits.data<double>() + r * V;
  std::transform(row, row + V, row_f32_.begin(), [](double x) { return static_cast<float>(x); });
  return row_f32_;
}

}  // namespace qkv::nn
