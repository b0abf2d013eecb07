#include "tasks/recall_task.h"

#include <algorithm>
#include <numeric>

#include "qkv/error.h"

namespace qkv::train {

namespace {

// The first `count` entries of a uniform random permutation of 0 .. n-1
// (partial Fisher-Yates), drawn from gen.
std::vector<int64_t> draw_distinct(int64_t n, int64_t count, Generator& gen) {
  std::vector<int64_t> pool(n);
  std::iota(pool.begin(), pool.end(), 0);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t j = i + static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(n - i));
    std::swap(pool[i], pool[j]);
  }
  pool.resize(count);
  return pool;
}

}  // namespace

RecallTask::RecallTask(const RecallTaskOptions& options) : options_(options) {
  QKV_CHECK(options.num_keys >= 1, "RecallTask: num_keys must be >= 1, got ", options.num_keys);
  QKV_CHECK(options.num_values >= 2, "RecallTask: num_values must be >= 2, got ",
            options.num_values);
  QKV_CHECK(options.pairs >= 1 && options.pairs <= std::min(options.num_keys, options.num_values),
            "RecallTask: pairs must be in [1, min(num_keys, num_values) = ",
            std::min(options.num_keys, options.num_values),
            "] (keys and values are distinct "
            "within a sequence), got ",
            options.pairs);
}

RecallBatch RecallTask::sample(int64_t batch, Generator& gen) const {
  QKV_CHECK(batch >= 1, "RecallTask::sample: batch must be >= 1, got ", batch);
  const int64_t k = options_.pairs;
  const int64_t length = sequence_length();
  RecallBatch out;
  out.batch = batch;
  out.length = length;
  out.tokens.resize(batch * length);
  out.labels.resize(batch);
  out.key_positions.resize(batch);
  for (int64_t b = 0; b < batch; ++b) {
    const std::vector<int64_t> keys = draw_distinct(options_.num_keys, k, gen);
    const std::vector<int64_t> values = draw_distinct(options_.num_values, k, gen);
    const int64_t asked = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(k));
    int64_t* row = out.tokens.data() + b * length;
    for (int64_t i = 0; i < k; ++i) {
      row[2 * i] = value_token(values[i]);
      row[2 * i + 1] = key_token(keys[i]);
    }
    row[2 * k] = query_token();
    row[2 * k + 1] = key_token(keys[asked]);
    out.labels[b] = values[asked];
    out.key_positions[b] = 2 * asked + 1;
  }
  return out;
}

std::string RecallTask::token_name(int64_t id) const {
  QKV_CHECK(id >= 0 && id < vocab_size(), "RecallTask::token_name: id must be in [0, ",
            vocab_size(), "), got ", id);
  // Appended rather than "K" + to_string(...), which trips GCC 12's -Wrestrict false positive.
  std::string name(1, id < options_.num_keys ? 'K' : 'V');
  if (id < options_.num_keys) return name += std::to_string(id);
  if (id < options_.num_keys + options_.num_values)
    return name += std::to_string(id - options_.num_keys);
  return "?";
}

}  // namespace qkv::train
