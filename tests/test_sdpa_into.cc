// scaled_dot_product_attention_into: same results as the allocating call,
// and no allocation once the workspace is warm (decoding loops rely on it).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "kernels/fused_attention.h"
#include "qkv/attention.h"
#include "qkv/masks.h"

namespace {
std::atomic<int64_t> g_allocations{0};
}

// Count every allocation of this test binary. These replace the global
// operators, so free() does receive malloc's pointers; g++ cannot see that.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t size) {
  ++g_allocations;
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t size) { return operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

using namespace qkv;

TEST(SdpaInto, MatchesTheAllocatingCall) {
  Generator gen(3);
  Tensor q = Tensor::randn({2, 6, 1, 32}, gen), k = Tensor::randn({2, 3, 50, 32}, gen);
  Tensor v = Tensor::randn({2, 3, 50, 32}, gen);
  SdpaOptions o;
  o.enable_gqa = true;
  o.causal = CausalMask::kBottomRight;
  o.attn_mask = key_mask_for_heads(keep_mask_from_lengths({50, 20}, 50));
  o.causal = CausalMask::kNone;
  Tensor out = Tensor::empty({2, 6, 1, 32});
  SdpaWorkspace ws;
  scaled_dot_product_attention_into(out, q, k, v, o, ws);
  EXPECT_LT(max_abs_diff(out, scaled_dot_product_attention(q, k, v, o).output), 1e-6);
  Tensor wrong = Tensor::empty({2, 6, 2, 32});
  EXPECT_THROW(scaled_dot_product_attention_into(wrong, q, k, v, o, ws), Error);
}

// The output may be the heads of a [B, L, H, E] buffer (transposed to
// [B, H, L, E]), written in place: on every kernel table, in float32 and
// bfloat16 precision, and by the reference; the columns around stay untouched.
TEST(SdpaInto, WritesIntoStridedHeads) {
  Generator gen(5);
  const int64_t B = 2, H = 3, L = 37, E = 32;
  const Tensor q = Tensor::randn({B, H, L, E}, gen), k = Tensor::randn({B, H, L, E}, gen);
  const Tensor v = Tensor::randn({B, H, L, E}, gen);
  auto expect_strided_like_contiguous = [&](const SdpaOptions& o, const char* what) {
    SCOPED_TRACE(what);
    const Tensor expected = scaled_dot_product_attention(q, k, v, o).output;
    // One spare column per row: the heads' columns [0, H·E), a guard at H·E.
    Tensor merged = Tensor::full({B, L, H * E + 1}, 7.0);
    Tensor heads = merged.slice(2, 0, H * E).view({B, L, H, E}).transpose(1, 2);
    SdpaWorkspace ws;
    scaled_dot_product_attention_into(heads, q, k, v, o, ws);
    EXPECT_EQ(max_abs_diff(heads, expected), 0.0);
    EXPECT_EQ(max_abs_diff(merged.slice(2, H * E, H * E + 1), Tensor::full({B, L, 1}, 7.0)), 0.0);
  };
  for (const kernels::KernelTable* table : kernels::supported_kernel_tables()) {
    kernels::override_kernel_table(table);
    SdpaOptions o;
    expect_strided_like_contiguous(o, table->name);
    o.precision = Precision::kBFloat16;
    o.causal = CausalMask::kTopLeft;
    expect_strided_like_contiguous(o, table->name);
  }
  kernels::override_kernel_table(nullptr);
  SdpaOptions reference;
  reference.backend = SdpaBackend::kReference;
  expect_strided_like_contiguous(reference, "reference");
}

TEST(SdpaInto, RefusesOutputsThatRepeatOrOverlap) {
  Generator gen(6);
  Tensor q = Tensor::randn({1, 2, 4, 8}, gen), k = Tensor::randn({1, 2, 4, 8}, gen);
  Tensor v = Tensor::randn({1, 2, 4, 8}, gen);
  SdpaWorkspace ws;
  Tensor one_head = Tensor::empty({1, 1, 4, 8});
  Tensor repeated = one_head.expand({1, 2, 4, 8});  // both heads on the same memory
  EXPECT_THROW(scaled_dot_product_attention_into(repeated, q, k, v, {}, ws), Error);
  Tensor memory = Tensor::empty({64});
  Tensor interleaved = Tensor::from_blob(memory.raw_data(), {1, 2, 4, 8}, {64, 4, 16, 1},
                                         DType::kFloat32, nullptr);  // head 1 overlaps head 0
  EXPECT_THROW(scaled_dot_product_attention_into(interleaved, q, k, v, {}, ws), Error);
  EXPECT_THROW(scaled_dot_product_attention_into(v, q, k, v, {}, ws), Error);  // in place
}

TEST(SdpaInto, DecodingStepsAllocateNothingOnceWarm) {
  Generator gen(4);
  const int64_t max_len = 256;
  Tensor q = Tensor::randn({1, 6, 1, 64}, gen);
  Tensor k_cache = Tensor::randn({1, 2, max_len, 64}, gen);
  Tensor v_cache = Tensor::randn({1, 2, max_len, 64}, gen);
  Tensor out = Tensor::empty({1, 6, 1, 64});
  SdpaOptions o;
  o.enable_gqa = true;
  o.causal = CausalMask::kBottomRight;
  SdpaWorkspace ws;
  // Warm up at the largest length, then decode step by step with a growing cache view.
  scaled_dot_product_attention_into(out, q, k_cache, v_cache, o, ws);
  const int64_t before = g_allocations.load();
  for (int64_t len = 1; len <= max_len; ++len) {
    const Tensor k = k_cache.slice(2, 0, len), v = v_cache.slice(2, 0, len);
    scaled_dot_product_attention_into(out, q, k, v, o, ws);
  }
  EXPECT_EQ(g_allocations.load() - before, 0);
}
