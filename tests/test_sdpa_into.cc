// scaled_dot_product_attention_into: same results as the allocating call,
// and no allocation once the workspace is warm (decoding loops rely on it).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

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
