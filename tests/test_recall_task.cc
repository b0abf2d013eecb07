// The recall task (tools/tasks/recall_task.h), its models and training loop:
// the data is checked against its definition, the loss gradient against
// finite differences, and a short run must learn the task with attention and
// fail without it.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <vector>

#include "parameter_gradients.h"
#include "qkv/error.h"
#include "qkv/runtime.h"
#include "tasks/recall_model.h"
#include "tasks/recall_task.h"
#include "tasks/recall_training.h"

namespace {

using qkv::Generator;
using qkv::Tensor;
using namespace qkv::train;

TEST(RecallTask, SequencesFollowTheDefinition) {
  const RecallTask task({.num_keys = 10, .num_values = 12, .pairs = 6});
  ASSERT_EQ(task.sequence_length(), 14);
  ASSERT_EQ(task.vocab_size(), 23);
  Generator gen(3);
  const RecallBatch batch = task.sample(500, gen);
  ASSERT_EQ(batch.batch, 500);
  ASSERT_EQ(batch.tokens.size(), 500u * 14);
  std::set<int64_t> asked_slots;
  for (int64_t b = 0; b < batch.batch; ++b) {
    const int64_t* row = batch.tokens.data() + b * 14;
    std::set<int64_t> keys, values;
    for (int64_t i = 0; i < 6; ++i) {
      // The tutorial's order: the person (value), then the city (key).
      EXPECT_GE(row[2 * i + 1], 0);
      EXPECT_LT(row[2 * i + 1], 10) << "a key is expected at " << 2 * i + 1;
      EXPECT_GE(row[2 * i], 10);
      EXPECT_LT(row[2 * i], 22) << "a value is expected at " << 2 * i;
      keys.insert(row[2 * i + 1]);
      values.insert(row[2 * i]);
    }
    EXPECT_EQ(keys.size(), 6u) << "keys repeat in sequence " << b;
    EXPECT_EQ(values.size(), 6u) << "values repeat in sequence " << b;
    EXPECT_EQ(row[12], task.query_token());
    // The answer, found by scanning the pairs for the asked key.
    int64_t found = -1;
    for (int64_t i = 0; i < 6; ++i)
      if (row[2 * i + 1] == row[13]) found = i;
    ASSERT_GE(found, 0) << "the asked key is not among the pairs of sequence " << b;
    EXPECT_EQ(batch.labels[b], row[2 * found] - 10);
    EXPECT_EQ(batch.key_positions[b], 2 * found + 1);
    asked_slots.insert(found);
  }
  EXPECT_EQ(asked_slots.size(), 6u) << "every pair should get asked about";
  EXPECT_EQ(task.token_name(3), "K3");
  EXPECT_EQ(task.token_name(10), "V0");
  EXPECT_EQ(task.token_name(22), "?");
}

TEST(RecallTask, SameSeedSameData) {
  const RecallTask task({.pairs = 8});
  Generator a(42), b(42), c(43);
  const RecallBatch x = task.sample(64, a), y = task.sample(64, b), z = task.sample(64, c);
  EXPECT_EQ(x.tokens, y.tokens);
  EXPECT_EQ(x.labels, y.labels);
  EXPECT_NE(x.tokens, z.tokens);
  // Successive batches differ.
  EXPECT_NE(task.sample(64, a).tokens, x.tokens);
  // The held-out set is fixed by its seed and is not the first training batch.
  Generator train_gen(42);
  EXPECT_EQ(held_out_batch(task, 64, 42).tokens, held_out_batch(task, 64, 42).tokens);
  EXPECT_NE(held_out_batch(task, 64, 42).tokens, task.sample(64, train_gen).tokens);
}

TEST(RecallTask, BadSizesAreErrors) {
  EXPECT_THROW(RecallTask({.num_keys = 4, .num_values = 16, .pairs = 5}), qkv::Error);
  EXPECT_THROW(RecallTask({.pairs = 0}), qkv::Error);
  const RecallTask task({.pairs = 2});
  Generator gen(0);
  EXPECT_THROW(task.sample(0, gen), qkv::Error);
  EXPECT_THROW(task.token_name(task.vocab_size()), qkv::Error);
  RecallModel model(task, {});
  const RecallTask longer({.pairs = 3});
  EXPECT_THROW(model.forward(longer.sample(2, gen)), qkv::Error);
}

// The model's backward against central differences of its loss, in float64
// accumulation of float32 forwards (small model, large steps: 2e-2 relative).
void check_gradients(Mixer mixer) {
  const RecallTask task({.num_keys = 6, .num_values = 6, .pairs = 3});
  RecallModel model(task,
                    {.mixer = mixer, .d_model = 8, .nhead = 2, .dim_feedforward = 16, .seed = 5});
  Generator gen(1);
  const RecallBatch batch = task.sample(4, gen);
  const int checked =
      qkv::testing::expect_classifier_gradients_match_finite_differences<RecallModelRecord>(model,
                                                                                            batch)
          .checked;
  EXPECT_GT(checked, 8);
}

TEST(RecallModel, AttentionModelGradientsMatchFiniteDifferences) {
  check_gradients(Mixer::kAttention);
}

TEST(RecallModel, MeanPoolGradientsMatchFiniteDifferences) { check_gradients(Mixer::kMeanPool); }

// Causal by default: a position never looks at a later one.
TEST(RecallModel, AttentionRowsAreCausalDistributions) {
  const RecallTask task({.pairs = 4});
  RecallModel model(task, {.seed = 1});
  Generator gen(2);
  const RecallBatch batch = task.sample(3, gen);
  const std::vector<Tensor> weights = model.attention_weights(batch);
  ASSERT_EQ(weights.size(), 2u);
  for (const Tensor& w : weights) {
    ASSERT_EQ(w.shape(), qkv::Shape({3, 4, 10, 10}));
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t q = 0; q < 10; ++q) {
          double sum = 0;
          for (int64_t k = 0; k < 10; ++k) sum += w.at({b, h, q, k});
          EXPECT_NEAR(sum, 1.0, 1e-5);
          for (int64_t k = q + 1; k < 10; ++k) EXPECT_EQ(w.at({b, h, q, k}), 0.0) << q << " " << k;
        }
  }
  RecallModel pooled(task, {.mixer = Mixer::kMeanPool});
  EXPECT_THROW(pooled.attention_weights(batch), qkv::Error);
}

// Fraction right, by arg-max computed here rather than by train::accuracy.
double fraction_right(RecallModel& model, const RecallBatch& batch) {
  const Tensor logits = model.forward(batch);
  int64_t right = 0;
  for (int64_t b = 0; b < batch.batch; ++b) {
    int64_t best = 0;
    for (int64_t c = 1; c < logits.size(1); ++c)
      if (logits.at({b, c}) > logits.at({b, best})) best = c;
    right += best == batch.labels[b];
  }
  return static_cast<double>(right) / batch.batch;
}

// A short run on one thread: attention learns recall of 2 pairs (about 300
// steps), averaging over positions stays at the bag-of-tokens ceiling 1/2.
TEST(RecallTraining, AttentionLearnsWhatMeanPoolingCannot) {
  qkv::set_num_threads(1);
  const RecallTask task({.pairs = 2});
  const RecallTrainOptions options{.steps = 800, .lr = 3e-3, .eval_every = 25, .seed = 11};
  const RecallBatch test = held_out_batch(task, 1000, 12345);
  const auto start = std::chrono::steady_clock::now();

  RecallModel attention(task, {.seed = 11});
  int64_t reports = 0;
  const RecallTrainResult trained =
      train_recall(attention, task, options, [&](const RecallProgress& p) {
        ++reports;
        EXPECT_EQ(p.step, reports);
        EXPECT_TRUE(std::isfinite(p.loss));
      });
  EXPECT_EQ(reports, trained.steps);
  ASSERT_TRUE(trained.step_at_target.has_value()) << "held-out " << trained.eval_accuracy;
  EXPECT_EQ(*trained.step_at_target, trained.steps) << "stops at the target";
  EXPECT_GE(fraction_right(attention, test), 0.97);

  RecallModel pooled(task, {.mixer = Mixer::kMeanPool, .seed = 11});
  const RecallTrainResult baseline = train_recall(pooled, task, options);
  EXPECT_EQ(baseline.steps, options.steps);
  EXPECT_FALSE(baseline.step_at_target.has_value());
  const double pooled_right = fraction_right(pooled, test);
  EXPECT_LT(pooled_right, 0.5 + 0.08);  // 1000 sequences: sigma 0.016
  EXPECT_GT(pooled_right, 1.0 / 16);    // it does learn to pick among the values present

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 60.0);  // ~5 s on an idle core; a guard, not a benchmark
  std::printf("attention %.3f after %lld steps (%.1f s), mean-pool %.3f; %.1f s in all\n",
              fraction_right(attention, test), static_cast<long long>(trained.steps),
              trained.seconds, pooled_right, seconds);

  // Where the asked key looks: the table is consistent with the weights.
  const std::vector<QueryAttention> looks = query_attention(attention, test);
  ASSERT_EQ(looks.size(), 8u);
  double best = 0;
  for (const QueryAttention& a : looks) {
    EXPECT_GE(a.on_key, 0);
    EXPECT_LE(a.on_key + a.on_value, 1.0 + 1e-6);
    best = std::max({best, a.on_key, a.on_value});
    std::printf("layer %lld head %lld: key %.3f value %.3f\n", static_cast<long long>(a.layer),
                static_cast<long long>(a.head), a.on_key, a.on_value);
  }
  // Some head must find the pair it answers from: the matching key (whose
  // position alone holds key and value under causal attention) or, having
  // found the key's position in layer 0, the value just before it.
  EXPECT_GT(best, 0.5);
}

}  // namespace
