// Sliding-window layers keep only their window in the KV cache (a ring of W
// slots), and decoding through the ring — one step at a time, prompts longer
// than the window, chunks after the ring has wrapped, sequences batched with
// caches of their own — gives the logits of the whole sequence recomputed
// with the window mask. The newer families' block options (q/k norms, post
// norms, GeGLU, q/k/v biases, a head dim of its own, embedding scale,
// softcap) run through the same paths.
#include <gtest/gtest.h>

#include <vector>

#include "qkv/generator.h"
#include "qkv/nn/decoder_batch.h"
#include "qkv/nn/decoder_model.h"
#include "qkv/nn/decoder_session.h"
#include "qkv/nn/kv_cache.h"
#include "relative_diff.h"
#include "test_util.h"

namespace qkv::nn {
namespace {

using qkv_test::expect_error;
using qkv_test::max_relative_diff;

constexpr int64_t kWindow = 4;

// Three layers: windowed, global, windowed (with a RoPE base of their own);
// every option of the newer families on, so the cached paths run them all.
DecoderModelConfig windowed_config() {
  return {.vocab_size = 32,
          .d_model = 32,
          .num_layers = 3,
          .num_heads = 4,
          .num_kv_heads = 2,
          .head_dim = 32,  // a multiple of 32 for the q8_0 cache
          .ffn_hidden = 48,
          .max_seq_len = 64,
          .rope_base = 1e6,
          .ffn = FeedForwardKind::kGeGLU,
          .qkv_bias = true,
          .qk_norm = true,
          .post_norms = true,
          .attention_scale = 0.3,
          .embedding_scale = 2.5,
          .sliding_windows = {kWindow, 0, kWindow},
          .sliding_rope_base = 100.0,
          .final_logit_softcap = 8.0};
}

std::vector<int64_t> ids(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back((i * 7 + 3) % 32);
  return out;
}

// The logits of every position, recomputed over the whole sequence (window mask, no cache).
Tensor recomputed(const DecoderModel& model, const std::vector<int64_t>& seq) {
  return model.forward(seq, 1).select(0, 0);  // [T, vocab]
}

TEST(SlidingWindowCache, RingHoldsOnlyTheWindow) {
  KVCache cache(
      {.num_layers = 2, .num_kv_heads = 1, .max_len = 20, .head_dim = 2, .windows = {3, 0}});
  EXPECT_EQ(cache.capacity(0), 3);
  EXPECT_EQ(cache.capacity(1), 20);
  EXPECT_EQ(cache.key_storage(0).shape(), (Shape{1, 1, 3, 2}));
  EXPECT_EQ(cache.storage_bytes(), (3 + 20) * 2 * 2 * 4);  // keys and values, float32
  for (int64_t p = 0; p < 7; ++p) {
    const Tensor k = Tensor::full({1, 1, 1, 2}, static_cast<double>(p));
    cache.append(0, k, k);
    cache.append(1, k, k);
  }
  EXPECT_EQ(cache.length(), 7);
  EXPECT_EQ(cache.held(0), 3);
  EXPECT_EQ(cache.held(1), 7);
  // Position p sits in slot p mod 3: positions 6, 4, 5.
  const Tensor keys = cache.keys(0);
  ASSERT_EQ(keys.shape(), (Shape{1, 1, 3, 2}));
  EXPECT_EQ(keys.at({0, 0, 0, 0}), 6.0);
  EXPECT_EQ(keys.at({0, 0, 1, 0}), 4.0);
  EXPECT_EQ(keys.at({0, 0, 2, 1}), 5.0);
  // Several positions at once, more than the ring holds: the last 3 stay.
  std::vector<float> rows(14);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);
  // Rows 2 … 6 (values 2r, 2r + 1) as positions 7 … 11.
  const Tensor five = Tensor::from_vector({1, 1, 7, 2}, rows).slice(2, 2, 7);
  cache.append(0, five, five);
  EXPECT_EQ(cache.length(0), 12);
  EXPECT_EQ(cache.keys(0).at({0, 0, 0, 0}), 8.0);   // position 9 -> slot 0: row 4
  EXPECT_EQ(cache.keys(0).at({0, 0, 1, 0}), 10.0);  // position 10 -> slot 1: row 5
  EXPECT_EQ(cache.keys(0).at({0, 0, 2, 0}), 12.0);  // position 11 -> slot 2: row 6
}

TEST(SlidingWindowCache, ExtendGivesEachChunkItsWindowInOrder) {
  KVCache cache({.num_kv_heads = 1, .max_len = 20, .head_dim = 2, .windows = {3}});
  auto positions = [](int64_t first, int64_t n) {
    Tensor t = Tensor::zeros({1, 1, n, 2});
    for (int64_t i = 0; i < n; ++i) t.data<float>()[2 * i] = static_cast<float>(first + i);
    return t;
  };
  cache.append(0, positions(0, 5), positions(0, 5));
  // Three new positions after five: the last W - 1 = 2 old ones, then the new ones.
  const KVCacheView view = cache.extend(0, positions(5, 3), positions(5, 3));
  ASSERT_EQ(view.keys.shape(), (Shape{1, 1, 5, 2}));
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(view.keys.at({0, 0, i, 0}), 3.0 + i);
  EXPECT_EQ(cache.length(0), 8);
  // One new position: the held slots themselves (6, 7, 8 in slot order 6, 7, 8 -> 0, 1, 2).
  const KVCacheView step = cache.extend(0, positions(8, 1), positions(8, 1));
  EXPECT_TRUE(step.keys.shares_storage_with(cache.key_storage(0)));
  EXPECT_EQ(step.keys.size(2), 3);
}

TEST(SlidingWindowCache, TheWindowChangesTheLogits) {
  // Otherwise the tests below could not tell a ring from a full cache.
  DecoderModelConfig windowed = windowed_config();
  windowed.sliding_rope_base = 0.0;  // one RoPE base: only the window differs
  Generator gen(3);
  const DecoderModel model(windowed, &gen);
  DecoderModelConfig full = windowed;
  full.sliding_windows.clear();
  Generator gen2(3);
  const DecoderModel unwindowed(full, &gen2);
  const std::vector<int64_t> seq = ids(12);
  const Tensor a = recomputed(model, seq), b = recomputed(unwindowed, seq);
  EXPECT_LT(max_relative_diff(a.slice(0, 0, kWindow), b.slice(0, 0, kWindow)), 1e-6);
  EXPECT_GT(max_relative_diff(a.slice(0, kWindow, 12), b.slice(0, kWindow, 12)), 1e-2);
}

TEST(SlidingWindowCache, SessionStepsEqualTheRecomputedSequence) {
  Generator gen(4);
  DecoderModel model(windowed_config(), &gen);
  model.eval();
  const std::vector<int64_t> seq = ids(15);
  const Tensor want = recomputed(model, seq);
  for (int64_t prefill : {1, 3, 7}) {  // 7 > W: the prompt overruns the ring at once
    DecoderSession session(model, 1, 20);
    EXPECT_EQ(session.cache().capacity(0), kWindow);
    EXPECT_EQ(session.cache().capacity(1), 20);
    Tensor got = Tensor::zeros({15 - prefill + 1, 32});
    got.select(0, 0).copy_from(
        session.prefill({seq.data(), static_cast<size_t>(prefill)}).select(0, 0));
    for (int64_t t = prefill; t < 15; ++t)
      got.select(0, t - prefill + 1).copy_from(session.step({&seq[t], 1}).select(0, 0));
    EXPECT_LT(max_relative_diff(got, want.slice(0, prefill - 1, 15)), 1e-5)
        << "prefill " << prefill;
  }
}

TEST(SlidingWindowCache, ChunksAfterTheRingWrappedEqualTheRecomputedSequence) {
  Generator gen(5);
  DecoderModel model(windowed_config(), &gen);
  const std::vector<int64_t> seq = ids(17);
  const Tensor want = recomputed(model, seq);
  for (KVCacheStorage storage : {KVCacheStorage::kFloat, KVCacheStorage::kQ8_0}) {
    if (storage == KVCacheStorage::kQ8_0) model.set_kv_cache_storage(storage);
    KVCache cache = model.make_cache(1, 20);
    for (int64_t start = 0; start < 17; start += 3) {  // chunks of 3, 3, ..., 2
      const int64_t n = std::min<int64_t>(3, 17 - start);
      const Tensor got = model.forward({seq.data() + start, static_cast<size_t>(n)}, 1, cache);
      const double tolerance = storage == KVCacheStorage::kFloat ? 1e-5 : 3e-2;
      EXPECT_LT(max_relative_diff(got.select(0, 0), want.slice(0, start, start + n)), tolerance)
          << "chunk at " << start << ", " << kv_cache_storage_name(storage);
    }
  }
}

TEST(SlidingWindowCache, BatchedSequencesEqualEachAlone) {
  Generator gen(6);
  DecoderModel model(windowed_config(), &gen);
  model.eval();
  DecoderBatch batch(model, 3, 24);
  const std::vector<int64_t> a = ids(9), b = ids(2), c = ids(6);
  const int64_t ia = batch.add(a), ib = batch.add(b), ic = batch.add(c);
  std::vector<std::vector<int64_t>> seqs = {a, b, c};
  for (int step = 0; step < 8; ++step) {
    const std::vector<int64_t> which = {ia, ib, ic};
    std::vector<int64_t> next;
    for (auto& s : seqs) next.push_back((s.back() * 5 + 1) % 32);
    const Tensor got = batch.step(which, next).clone();
    for (size_t r = 0; r < seqs.size(); ++r) {
      seqs[r].push_back(next[r]);
      const Tensor want = recomputed(model, seqs[r]);
      EXPECT_LT(max_relative_diff(got.select(0, static_cast<int64_t>(r)),
                                  want.select(0, want.size(0) - 1)),
                1e-5)
          << "sequence " << r << ", step " << step;
    }
  }
}

TEST(SlidingWindowCache, TruncateRefusesPositionsTheRingOverwrote) {
  Generator gen(7);
  const DecoderModel model(windowed_config(), &gen);
  KVCache cache = model.make_cache(1, 20);
  model.forward(ids(10), 1, cache);
  EXPECT_EQ(cache.min_truncate_length(), 9);  // 10 − 4 + 4 − 1
  cache.truncate(9);
  expect_error([&] { cache.truncate(5); }, {"min_truncate_length() = ", "sliding-window"});
  cache.truncate(0);
  EXPECT_EQ(cache.length(), 0);
}

TEST(SlidingWindowCache, ACacheWithAnotherWindowIsRefused) {
  Generator gen(8);
  const DecoderModel model(windowed_config(), &gen);
  KVCache wrong({.num_layers = 3,
                 .num_kv_heads = 2,
                 .max_len = 20,
                 .head_dim = 32,
                 .windows = {kWindow, kWindow, kWindow}});
  expect_error([&] { model.forward(ids(3), 1, wrong); },
               {"layer 1 of the cache keeps the last 4 positions", "sliding window there is 0"});
}

// The forward with a record runs every option (qkv explore reads the records)
// and equals the forward without; the backward of those options is refused.
TEST(SlidingWindowCache, TrainingRefusesOptionsWithoutABackward) {
  Generator gen(9);
  DecoderModel model(windowed_config(), &gen);
  DecoderModelRecord record;
  const Tensor recorded = model.forward(ids(4), 1, &record);
  const Tensor plain = model.forward(ids(4), 1);
  ASSERT_EQ(recorded.shape(), plain.shape());
  for (int64_t i = 0; i < plain.numel(); ++i)
    EXPECT_FLOAT_EQ(recorded.contiguous().data<float>()[i], plain.contiguous().data<float>()[i])
        << i;
  expect_error([&] { model.backward(Tensor::ones(plain.shape()), record); },
               {"training with", "is not supported"});
}

}  // namespace
}  // namespace qkv::nn
