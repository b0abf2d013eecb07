// nn::DecoderBatch: per-sequence caches, prefill on add(), and one
// DecoderModel::forward_into over one new token of each sequence.
#include "qkv/nn/decoder_batch.h"

#include <algorithm>

#include "qkv/runtime.h"

namespace qkv::nn {

DecoderBatch::DecoderBatch(DecoderModel& model, int64_t max_sequences, int64_t max_len)
    : model_(model), buffers_(model.make_buffers(std::max<int64_t>(max_sequences, 1))) {
  QKV_CHECK(max_sequences > 0, "DecoderBatch: max_sequences must be > 0, got ", max_sequences);
  const DecoderModelConfig& c = model.config();
  caches_.reserve(static_cast<size_t>(max_sequences));
  for (int64_t i = 0; i < max_sequences; ++i) caches_.push_back(model.make_cache(1, max_len));
  slot_ids_.assign(static_cast<size_t>(max_sequences), -1);
  row_caches_.resize(static_cast<size_t>(max_sequences));
  positions_.resize(static_cast<size_t>(max_sequences));
  all_logits_ = Tensor::zeros({max_sequences, c.vocab_size}, c.dtype);
  logits_ = all_logits_.slice(0, 0, 0);
  if (c.dtype == DType::kFloat64) logits_f32_.resize(static_cast<size_t>(c.vocab_size));
}

size_t DecoderBatch::slot_of(int64_t id, const char* fn) const {
  const auto it = std::find(slot_ids_.begin(), slot_ids_.end(), id);
  QKV_CHECK(id >= 0 && it != slot_ids_.end(), "DecoderBatch::", fn, ": no sequence has id ", id,
            " (never added, or removed)");
  return static_cast<size_t>(it - slot_ids_.begin());
}

int64_t DecoderBatch::add(std::span<const int64_t> prompt) {
  const auto free = std::find(slot_ids_.begin(), slot_ids_.end(), -1);
  QKV_CHECK(free != slot_ids_.end(), "DecoderBatch::add: all ", max_sequences(),
            " sequences are in use; remove() one first");
  QKV_CHECK(!prompt.empty(), "DecoderBatch::add: the prompt is empty; give at least one token");
  const auto slot = static_cast<size_t>(free - slot_ids_.begin());
  KVCache& cache = caches_[slot];
  cache.reset();
  // Checks the prompt's length against the cache before appending anything.
  const Tensor last = model_.forward_last(prompt, 1, cache);  // [1, vocab]
  logits_ = all_logits_.slice(0, 0, 1);
  logits_.copy_from(last);
  // As DecoderSession::prefill: the steps need none of the prompt's buffers.
  empty_buffer_cache();
  *free = next_id_;
  return next_id_++;
}

void DecoderBatch::remove(int64_t id) {
  const size_t slot = slot_of(id, "remove");
  slot_ids_[slot] = -1;
  caches_[slot].reset();
}

const Tensor& DecoderBatch::step(std::span<const int64_t> ids, std::span<const int64_t> tokens) {
  const char* m = "DecoderBatch::step";
  const auto n = static_cast<int64_t>(ids.size());
  QKV_CHECK(n > 0 && tokens.size() == ids.size(), m, ": expected one token per id, got ", n,
            " ids and ", tokens.size(), " tokens");
  for (int64_t r = 0; r < n; ++r) {
    const int64_t id = ids[static_cast<size_t>(r)];
    QKV_CHECK(std::count(ids.begin(), ids.begin() + r, id) == 0, m, ": id ", id,
              " is given twice; a sequence advances one token per step");
    KVCache& cache = caches_[slot_of(id, "step")];
    QKV_CHECK(cache.length() < cache.max_len(), m, ": sequence ", id, " fills its cache (",
              cache.max_len(), " positions); remove() it or make the batch with a larger max_len");
    row_caches_[static_cast<size_t>(r)] = &cache;
    positions_[static_cast<size_t>(r)] = cache.length();
  }
  logits_ = all_logits_.slice(0, 0, n);
  const auto rows = static_cast<size_t>(n);
  model_.forward_into(logits_, tokens,
                      {.batch_size = n,
                       .positions = std::span(positions_).first(rows),
                       .caches = {.per_sequence = std::span(row_caches_).first(rows)}},
                      buffers_);
  return logits_;
}

std::span<const float> DecoderBatch::logits_row(int64_t r) const {
  const int64_t n = logits_.size(0), V = logits_.size(1);
  QKV_CHECK(r >= 0 && r < n, "DecoderBatch::logits_row: r must be in [0, ", n, "), got ", r);
  if (logits_.dtype() == DType::kFloat32)
    return {logits_.data<float>() + r * V, static_cast<size_t>(V)};
  const double* row = logits_.data<double>() + r * V;
  std::transform(row, row + V, logits_f32_.begin(), [](double x) { return static_cast<float>(x); });
  return logits_f32_;
}

int64_t DecoderBatch::length(int64_t id) const { return caches_[slot_of(id, "length")].length(); }

std::vector<int64_t> DecoderBatch::ids() const {
  std::vector<int64_t> out;
  for (int64_t id : slot_ids_)
    if (id >= 0) out.push_back(id);
  return out;
}

int64_t DecoderBatch::size() const {
  return std::count_if(slot_ids_.begin(), slot_ids_.end(), [](int64_t id) { return id >= 0; });
}

}  // namespace qkv::nn
