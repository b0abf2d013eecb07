// The associative-recall task (tutorial §1: "张三在杭州工作，李四在上海工作，
// 那谁在杭州？"): a sequence lists k (value, key) pairs — the person, then the
// city they work in — then a query token and one of the keys (a city); the
// answer is the value (the person) paired with that key.
//
//   train::RecallTask task({.pairs = 8});
//   Generator gen(0);
//   train::RecallBatch batch = task.sample(64, gen);
//   // batch.tokens[b * L .. b * L + L): v1 k1 v2 k2 ... vk kk QUERY kq
//   // batch.labels[b]: index (0 .. num_values-1) of the value paired with kq
//
// Token ids: keys 0 .. num_keys-1, values num_keys .. num_keys+num_values-1,
// then QUERY. Within a sequence the keys are distinct (so the answer is
// unique) and so are the values (so no value can be guessed from how often
// it appears: a model that sees only the bag of tokens can do no better than
// 1/k, picking one of the k values present).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/generator.h"

namespace qkv::train {

struct RecallTaskOptions {
  int64_t num_keys = 16;
  int64_t num_values = 16;
  int64_t pairs = 8;  // k, 1 .. min(num_keys, num_values)
};

// B sequences of length L = 2k + 2, row-major.
struct RecallBatch {
  int64_t batch = 0;
  int64_t length = 0;
  std::vector<int64_t> tokens;         // [B, L] token ids
  std::vector<int64_t> labels;         // [B] value index of the queried key, in [0, num_values)
  std::vector<int64_t> key_positions;  // [B] where the queried key stands (its value just before)
};

class RecallTask {
 public:
  // Throws qkv::Error naming the option when the sizes cannot make a sequence.
  explicit RecallTask(const RecallTaskOptions& options);

  // `batch` fresh sequences drawn from `gen` (the same generator state gives the same batch).
  RecallBatch sample(int64_t batch, Generator& gen) const;

  int64_t sequence_length() const { return 2 * options_.pairs + 2; }
  int64_t vocab_size() const { return options_.num_keys + options_.num_values + 1; }
  int64_t num_classes() const { return options_.num_values; }
  int64_t key_token(int64_t key) const { return key; }
  int64_t value_token(int64_t value) const { return options_.num_keys + value; }
  int64_t query_token() const { return options_.num_keys + options_.num_values; }

  // A short label for heatmaps and tables: "K3", "V12", "?".
  std::string token_name(int64_t id) const;

  const RecallTaskOptions& options() const { return options_; }

 private:
  RecallTaskOptions options_;
};

}  // namespace qkv::train
