// nn::DecoderBatch: per-sequence caches, prefill on add(), and one
// DecoderModel::forward_into over one new token of each sequence.
#include "qkv/nn/decoder_batch.h"

#include <algorithm>

#include "qkv/runtime.h"

namespace qkv::nn {

DecoderBatch::DecoderBatch(DecoderModel& model, int64_t max_sequences, int64_t max_len)
    : model_(model), step_(model, max_sequences) {
  QKV_CHECK(max_sequences > 0, "DecoderBatch: max_sequences must be > 0, got ", max_sequences);
  caches_.reserve(static_cast<size_t>(max_sequences));
  for (int64_t i = 0; i < max_sequences; ++i) caches_.push_back(model.make_cache(1, max_len));
  slot_ids_.assign(static_cast<size_t>(max_sequences), -1);
  logits_ = step_.rows(0);
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
  logits_ = step_.rows(1);
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
    step_.set_row(r, cache);
  }
  logits_ = step_.run(tokens);
  return logits_;
}

std::span<const float> DecoderBatch::logits_row(int64_t r) const {
  const int64_t n = logits_.size(0);
  QKV_CHECK(r >= 0 && r < n, "DecoderBatch::logits_row: r must be in [0, ", n, "), got ", r);
  return step_.float32_row(logits_, r);
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
