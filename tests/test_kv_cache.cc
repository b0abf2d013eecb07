// nn::KVCache: appending in place, views of the filled part, errors when
// full, and attention over the cache equal to attention over the whole sequence.
#include <gtest/gtest.h>

#include "qkv/attention.h"
#include "qkv/generator.h"
#include "qkv/nn/kv_cache.h"
#include "test_util.h"

namespace qkv::nn {
namespace {

KVCacheOptions small_options() {
  return {.num_layers = 2, .batch_size = 2, .num_kv_heads = 3, .max_len = 8, .head_dim = 4};
}

TEST(KVCache, StartsEmptyWithPreallocatedStorage) {
  KVCache cache(small_options());
  EXPECT_EQ(cache.length(), 0);
  EXPECT_EQ(cache.remaining(), 8);
  EXPECT_EQ(cache.key_storage(0).shape(), (Shape{2, 3, 8, 4}));
  EXPECT_EQ(cache.value_storage(1).shape(), (Shape{2, 3, 8, 4}));
  EXPECT_EQ(cache.keys(0).shape(), (Shape{2, 3, 0, 4}));
}

TEST(KVCache, AppendWritesIntoTheSlotsWithoutMovingWhatIsThere) {
  KVCache cache(small_options());
  Generator gen(0);
  const Tensor k1 = Tensor::randn({2, 3, 1, 4}, gen), v1 = Tensor::randn({2, 3, 1, 4}, gen);
  const Tensor k3 = Tensor::randn({2, 3, 3, 4}, gen), v3 = Tensor::randn({2, 3, 3, 4}, gen);
  cache.append(0, k1, v1);
  const void* storage = cache.key_storage(0).raw_data();
  const Tensor first = cache.keys(0).clone();
  cache.append(0, k3, v3);  // several positions at once
  EXPECT_EQ(cache.length(0), 4);
  EXPECT_EQ(cache.length(1), 0);
  EXPECT_EQ(cache.length(), 0);  // layer 1 holds nothing yet
  const Tensor keys = cache.keys(0), values = cache.values(0);
  EXPECT_EQ(keys.shape(), (Shape{2, 3, 4, 4}));
  // Views of the same storage: nothing was reallocated or copied.
  EXPECT_EQ(keys.raw_data(), storage);
  EXPECT_TRUE(keys.shares_storage_with(cache.key_storage(0)));
  EXPECT_EQ(max_abs_diff(keys.slice(2, 0, 1), first), 0.0);
  EXPECT_EQ(max_abs_diff(keys.slice(2, 0, 1), k1), 0.0);
  EXPECT_EQ(max_abs_diff(keys.slice(2, 1, 4), k3), 0.0);
  EXPECT_EQ(max_abs_diff(values.slice(2, 1, 4), v3), 0.0);
}

TEST(KVCache, AppendsStridedInputs) {
  KVCache cache(small_options());
  Generator gen(1);
  // [B, L, Hkv, E] transposed to [B, Hkv, L, E]: not contiguous.
  const Tensor k = Tensor::randn({2, 2, 3, 4}, gen).transpose(1, 2);
  const Tensor v = Tensor::randn({2, 4, 3, 2}, gen).permute({0, 2, 3, 1});  // last dim strided
  cache.append(1, k, v);
  EXPECT_EQ(max_abs_diff(cache.keys(1), k), 0.0);
  EXPECT_EQ(max_abs_diff(cache.values(1), v), 0.0);
}

TEST(KVCache, SlotsCanBeWrittenInPlaceThenCommitted) {
  KVCache cache(small_options());
  Tensor slots = cache.key_slots(0, 2);
  EXPECT_EQ(slots.shape(), (Shape{2, 3, 2, 4}));
  slots.fill(3.0);
  cache.value_slots(0, 2).fill(4.0);
  EXPECT_EQ(cache.length(0), 0);
  cache.commit(0, 2);
  EXPECT_EQ(cache.length(0), 2);
  EXPECT_EQ(cache.keys(0).at({1, 2, 1, 3}), 3.0);
  EXPECT_EQ(cache.values(0).at({0, 0, 0, 0}), 4.0);
}

TEST(KVCache, FullCacheIsAClearErrorAndChangesNothing) {
  KVCache cache(small_options());
  const Tensor kv = Tensor::ones({2, 3, 6, 4});
  cache.append(0, kv, kv);
  qkv_test::expect_error(
      [&] {
        cache.append(0, Tensor::zeros({2, 3, 3, 4}), Tensor::zeros({2, 3, 3, 4}));
      },
      {"full", "max_len = 8"});
  EXPECT_EQ(cache.length(0), 6);
  EXPECT_EQ(cache.keys(0).at({0, 0, 5, 0}), 1.0);
  EXPECT_THROW(cache.key_slots(0, 3), Error);
  EXPECT_THROW(cache.commit(0, 3), Error);
  cache.append(0, Tensor::zeros({2, 3, 2, 4}), Tensor::zeros({2, 3, 2, 4}));  // exactly fits
  EXPECT_EQ(cache.length(0), 8);
}

TEST(KVCache, WrongShapesAndLayersAreErrors) {
  KVCache cache(small_options());
  const Tensor good = Tensor::zeros({2, 3, 1, 4});
  EXPECT_THROW(cache.append(2, good, good), Error);
  EXPECT_THROW(cache.append(-1, good, good), Error);
  EXPECT_THROW(cache.append(0, Tensor::zeros({1, 3, 1, 4}), good), Error);  // batch
  EXPECT_THROW(cache.append(0, Tensor::zeros({2, 2, 1, 4}), good), Error);  // heads
  EXPECT_THROW(cache.append(0, Tensor::zeros({2, 3, 1, 5}), good), Error);  // head dim
  EXPECT_THROW(cache.append(0, good, Tensor::zeros({2, 3, 2, 4})), Error);  // L differs
  EXPECT_THROW(cache.append(0, good.to(DType::kFloat64), good), Error);     // dtype
  EXPECT_THROW(cache.append(0, Tensor(), good), Error);
  EXPECT_THROW(KVCache({.num_layers = 0, .max_len = 4, .head_dim = 4}), Error);
  EXPECT_THROW(KVCache({.max_len = 0, .head_dim = 4}), Error);
}

TEST(KVCache, ResetAndTruncate) {
  KVCache cache(small_options());
  const Tensor kv = Tensor::ones({2, 3, 5, 4});
  cache.append(0, kv, kv);
  cache.append(1, kv, kv);
  cache.truncate(2);
  EXPECT_EQ(cache.length(), 2);
  EXPECT_EQ(cache.keys(1).shape(), (Shape{2, 3, 2, 4}));
  EXPECT_THROW(cache.truncate(3), Error);
  cache.reset();
  EXPECT_EQ(cache.length(0), 0);
  EXPECT_EQ(cache.length(1), 0);
  EXPECT_EQ(cache.remaining(), 8);
}

TEST(KVCache, ValueDimMayDiffer) {
  KVCache cache({.max_len = 4, .head_dim = 4, .value_dim = 6, .dtype = DType::kFloat64});
  cache.append(0, Tensor::zeros({1, 1, 2, 4}, DType::kFloat64),
               Tensor::ones({1, 1, 2, 6}, DType::kFloat64));
  EXPECT_EQ(cache.values(0).shape(), (Shape{1, 1, 2, 6}));
}

// Appending chunks of a sequence and attending bottom-right from each chunk's
// queries gives the rows of causal attention over the whole sequence.
TEST(KVCache, ChunkedAttentionEqualsFullCausalAttention) {
  Generator gen(2);
  const int64_t B = 2, H = 4, Hkv = 2, T = 9, E = 8;
  const Tensor q = Tensor::randn({B, H, T, E}, gen);
  const Tensor k = Tensor::randn({B, Hkv, T, E}, gen);
  const Tensor v = Tensor::randn({B, Hkv, T, E}, gen);
  const Tensor full =
      scaled_dot_product_attention(q, k, v, {.causal = CausalMask::kTopLeft, .enable_gqa = true})
          .output;
  KVCache cache({.batch_size = B, .num_kv_heads = Hkv, .max_len = 16, .head_dim = E});
  int64_t start = 0;
  for (int64_t chunk : {4, 1, 3, 1}) {
    const int64_t end = start + chunk;
    cache.append(0, k.slice(2, start, end), v.slice(2, start, end));
    const Tensor out =
        scaled_dot_product_attention(q.slice(2, start, end), cache.keys(0), cache.values(0),
                                     {.causal = CausalMask::kBottomRight, .enable_gqa = true})
            .output;
    EXPECT_LT(max_abs_diff(out, full.slice(2, start, end)), 1e-6) << "chunk at " << start;
    start = end;
  }
  EXPECT_EQ(start, T);
}

}  // namespace
}  // namespace qkv::nn
