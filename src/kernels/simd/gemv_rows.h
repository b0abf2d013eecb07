// Rows of a matrix-vector product y = W·x, written once for every ISA: four
// rows per pass share each load of x (the product is bandwidth-bound, so what
// matters is streaming W with wide loads), and the rows two passes ahead are
// prefetched: four row streams at once are more than the hardware prefetcher
// keeps in flight (42 MB of weights: 17–22 GB/s without, 25–26 GB/s with, one
// thread; distances of 1, 2 and 4 passes measured the same).
#pragma once

#include "kernels/fused_attention.h"
#include "kernels/simd/vec.h"

namespace qkv::kernels::simd {
namespace {

template <class Isa>
void gemv_rows(const GemvTask& t, int64_t begin, int64_t end) {
  using V = typename Isa::V;
  constexpr int kL = Isa::kLanes;
  constexpr int64_t kRows = 4;
  const int64_t k = t.k, full = k / kL * kL;
  int64_t r = begin;
  constexpr int64_t kAhead = 2 * kRows;
  for (; r + kRows <= end; r += kRows) {
    const float* w = t.w + r * k;
    // Near the end, prefetch the current rows again rather than past them.
    const float* next = r + kAhead + kRows <= end ? w + kAhead * k : w;
    V acc[kRows] = {Isa::zero(), Isa::zero(), Isa::zero(), Isa::zero()};
    for (int64_t c = 0; c < full; c += kL) {
      for (int64_t i = 0; i < kRows; ++i) __builtin_prefetch(next + i * k + c, 0, 3);
      const V x = Isa::load(t.x + c);
#pragma GCC unroll 4
      for (int64_t i = 0; i < kRows; ++i) acc[i] = Isa::fmadd(Isa::load(w + i * k + c), x, acc[i]);
    }
    for (int64_t i = 0; i < kRows; ++i) {
      float s = Isa::reduce_add(acc[i]);
      for (int64_t c = full; c < k; ++c) s += w[i * k + c] * t.x[c];
      t.y[r + i] = t.accumulate ? t.y[r + i] + s : s;
    }
  }
  for (; r < end; ++r) {
    const float* w = t.w + r * k;
    V acc = Isa::zero();
    for (int64_t c = 0; c < full; c += kL)
      acc = Isa::fmadd(Isa::load(w + c), Isa::load(t.x + c), acc);
    float s = Isa::reduce_add(acc);
    for (int64_t c = full; c < k; ++c) s += w[c] * t.x[c];
    t.y[r] = t.accumulate ? t.y[r] + s : s;
  }
}

}  // namespace
}  // namespace qkv::kernels::simd
