// Rows of y = x·Wᵀ for one or a few rows of x (decoding steps, short
// sentences), written once for every ISA. The product is bandwidth-bound: W
// (rows of k contiguous weights) streams in once, four rows per pass with
// wide loads, and every row of x (small, in L1) is dotted with those four
// rows while they sit in L1. The rows two passes ahead are prefetched: four
// row streams at once are more than the hardware prefetcher keeps in flight
// (42 MB of weights: 17–22 GB/s without, 25–26 GB/s with, one thread;
// distances of 1, 2 and 4 passes measured the same).
//
// Reading W this way, rather than as the broadcast operand of an
// outer-product micro-kernel, matters: eight rows read one float at a time
// streamed at about a third of the speed.
#pragma once

#include <algorithm>

#include "kernels/fused_attention.h"
#include "kernels/simd/vec.h"

namespace qkv::kernels::simd {
namespace {

// Rows of x per pass: kX × 4 accumulators plus the loads fit the registers.
template <class Isa>
constexpr int kGemvXRows = Isa::kLanes == 16 ? 4 : 2;

// The most rows of x worth taking here rather than to a BLAS gemm: up to 32
// rows AVX-512 beat OpenBLAS's sgemm on MiniLM's shapes on one thread
// (1.35–3.3×); at 48 they were level (bench/bench_kernels FewRowsLinear,
// docs/benchmarks.md "Linear layers over a few rows"). The other ISAs use the
// same limit, unmeasured.
template <class Isa>
constexpr int64_t kGemvMaxRows = 32;

// y[j, r .. r + kW) for x rows j in [j0, j0 + kX): kX × kW dot products of
// length k, W rows at w (stride k), x rows at x (stride k).
// Rows [pf_begin, pf_end) of `prefetch` (stride k) are prefetched on the way.
template <class Isa, int kW, int kX>
void dot_block(const float* w, const float* x, int64_t k, const float* prefetch, int pf_begin,
               int pf_end, float* y, int64_t ldy, bool accumulate) {
  using V = typename Isa::V;
  constexpr int kL = Isa::kLanes;
  const int64_t full = k / kL * kL;
  V acc[kX][kW];
#pragma GCC unroll 4
  for (int j = 0; j < kX; ++j)
#pragma GCC unroll 4
    for (int i = 0; i < kW; ++i) acc[j][i] = Isa::zero();
  for (int64_t c = 0; c < full; c += kL) {
    for (int i = pf_begin; i < pf_end; ++i) __builtin_prefetch(prefetch + i * k + c, 0, 3);
    V wv[kW];
#pragma GCC unroll 4
    for (int i = 0; i < kW; ++i) wv[i] = Isa::load(w + i * k + c);
#pragma GCC unroll 4
    for (int j = 0; j < kX; ++j) {
      const V xv = Isa::load(x + j * k + c);
#pragma GCC unroll 4
      for (int i = 0; i < kW; ++i) acc[j][i] = Isa::fmadd(wv[i], xv, acc[j][i]);
    }
  }
  // The kX·kW sums, kLanes at a time when they fill whole vectors.
  alignas(64) float sums[kX * kW];
  if constexpr (kX * kW % kL == 0) {
    for (int g = 0; g < kX * kW; g += kL) Isa::store(sums + g, Isa::reduce_lanes(&acc[0][0] + g));
  } else {
    for (int g = 0; g < kX * kW; ++g) sums[g] = Isa::reduce_add((&acc[0][0])[g]);
  }
  for (int j = 0; j < kX; ++j)
    for (int i = 0; i < kW; ++i) {
      float s = sums[j * kW + i];
      for (int64_t c = full; c < k; ++c) s += w[i * k + c] * x[j * k + c];
      float& out = y[j * ldy + i];
      out = accumulate ? out + s : s;
    }
}

// All rows of x against kW rows of W, prefetching the kW rows at `prefetch`
// spread over the passes (a burst in the first pass alone streams slower).
template <class Isa, int kW>
void dot_rows(const GemvTask& t, int64_t r, const float* prefetch) {
  constexpr int kX = kGemvXRows<Isa>;
  const float* w = t.w + r * t.k;
  const int64_t passes = t.m / kX + t.m % kX;
  const int per_pass = static_cast<int>((kW + passes - 1) / passes);
  int64_t j = 0, pass = 0;
  auto pf_begin = [&] { return static_cast<int>(std::min<int64_t>(kW, pass * per_pass)); };
  auto pf_end = [&] { return static_cast<int>(std::min<int64_t>(kW, (pass + 1) * per_pass)); };
  for (; j + kX <= t.m; j += kX, ++pass)
    dot_block<Isa, kW, kX>(w, t.x + j * t.k, t.k, prefetch, pf_begin(), pf_end(), t.y + j * t.n + r,
                           t.n, t.accumulate);
  for (; j < t.m; ++j, ++pass)
    dot_block<Isa, kW, 1>(w, t.x + j * t.k, t.k, prefetch, pf_begin(), pf_end(), t.y + j * t.n + r,
                          t.n, t.accumulate);
}

// Columns [begin, end) of y (rows of W), for any t.m ≥ 1.
template <class Isa>
void gemv_rows(const GemvTask& t, int64_t begin, int64_t end) {
  constexpr int64_t kW = 4, kAhead = 2 * kW;
  int64_t r = begin;
  for (; r + kW <= end; r += kW) {
    // Near the end, prefetch the current rows again rather than past them.
    const float* next = r + kAhead + kW <= end ? t.w + (r + kAhead) * t.k : t.w + r * t.k;
    dot_rows<Isa, kW>(t, r, next);
  }
  for (; r < end; ++r) dot_rows<Isa, 1>(t, r, t.w + r * t.k);
}

}  // namespace
}  // namespace qkv::kernels::simd
