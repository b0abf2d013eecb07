// Small matrix products on cache-resident tiles, the building block of the
// fused attention kernels: C (+)= A · B with A packed in panels of kMr rows and
// B packed in panels of kNr columns, both k-major (the BLIS layout). Packing
// reads through arbitrary strides, so Kᵀ, Pᵀ or dOᵀ cost nothing extra.
//
// The micro-kernel keeps a kMr × kNr block of C in registers: per step of k
// it loads two vectors of B and broadcasts kMr values of A.
#pragma once

#include <algorithm>

#include "kernels/simd/vec.h"

namespace qkv::kernels::simd {
namespace {

template <class Isa>
struct TileShape {
  static constexpr int kNr = 2 * Isa::kLanes;
  // Accumulators kMr × 2 plus 2 B vectors fit the register file: 32 zmm for
  // AVX-512, 16 ymm for AVX2. Chosen by bench/bench_kernels (tile sweep).
  static constexpr int kMr = Isa::kLanes == 16 ? 12 : (Isa::kLanes == 8 ? 6 : 4);
};

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Packs A (element (i, p) at a[i·rs + p·cs], i < m, p < k) as panels of kMr
// rows: dst[panel][p][r], times `scale`, zero-padded to whole panels.
template <int kMr>
void pack_a(const float* a, int64_t rs, int64_t cs, int64_t m, int64_t k, float scale, float* dst) {
  for (int64_t i0 = 0; i0 < m; i0 += kMr) {
    const int64_t rows = std::min<int64_t>(kMr, m - i0);
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t r = 0; r < rows; ++r) dst[r] = a[(i0 + r) * rs + p * cs] * scale;
      for (int64_t r = rows; r < kMr; ++r) dst[r] = 0.0f;
      dst += kMr;
    }
  }
}

// Packs B (element (p, j) at b[p·rs + j·cs], p < k, j < n) as panels of kNr
// columns: dst[panel][p][c], zero-padded to whole panels.
template <int kNr>
void pack_b(const float* b, int64_t rs, int64_t cs, int64_t k, int64_t n, float* dst) {
  for (int64_t j0 = 0; j0 < n; j0 += kNr) {
    const int64_t cols = std::min<int64_t>(kNr, n - j0);
    if (cs == 1 && cols == kNr) {
      for (int64_t p = 0; p < k; ++p, dst += kNr) std::copy_n(b + p * rs + j0, kNr, dst);
      continue;
    }
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t c = 0; c < cols; ++c) dst[c] = b[p * rs + (j0 + c) * cs];
      for (int64_t c = cols; c < kNr; ++c) dst[c] = 0.0f;
      dst += kNr;
    }
  }
}

// C[kMr × kNr] (row stride ldc) = or += Ap · Bp over k steps; only the
// top-left rows × cols of C are written.
template <class Isa>
void micro_kernel(int64_t k, const float* ap, const float* bp, float* c, int64_t ldc,
                  bool accumulate, int64_t rows, int64_t cols) {
  using V = typename Isa::V;
  constexpr int kMr = TileShape<Isa>::kMr, kL = Isa::kLanes;
  V acc[kMr][2];
#pragma GCC unroll 16
  for (int r = 0; r < kMr; ++r) acc[r][0] = acc[r][1] = Isa::zero();
  for (int64_t p = 0; p < k; ++p) {
    const V b0 = Isa::load(bp), b1 = Isa::load(bp + kL);
#pragma GCC unroll 16
    for (int r = 0; r < kMr; ++r) {
      const V a = Isa::set1(ap[r]);
      acc[r][0] = Isa::fmadd(a, b0, acc[r][0]);
      acc[r][1] = Isa::fmadd(a, b1, acc[r][1]);
    }
    ap += kMr;
    bp += 2 * kL;
  }
  if (rows == kMr && cols == 2 * kL) {
#pragma GCC unroll 16
    for (int r = 0; r < kMr; ++r) {
      float* row = c + r * ldc;
      if (accumulate) {
        Isa::store(row, Isa::add(Isa::load(row), acc[r][0]));
        Isa::store(row + kL, Isa::add(Isa::load(row + kL), acc[r][1]));
      } else {
        Isa::store(row, acc[r][0]);
        Isa::store(row + kL, acc[r][1]);
      }
    }
    return;
  }
  alignas(64) float tile[kMr * 2 * kL];
#pragma GCC unroll 16
  for (int r = 0; r < kMr; ++r) {
    Isa::store(tile + r * 2 * kL, acc[r][0]);
    Isa::store(tile + r * 2 * kL + kL, acc[r][1]);
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j)
      c[r * ldc + j] = accumulate ? c[r * ldc + j] + tile[r * 2 * kL + j] : tile[r * 2 * kL + j];
}

// C[m × n] (row stride ldc) = or += A · B from packed panels (pack_a with
// kMr, pack_b with kNr, both over the same k).
template <class Isa>
void gemm_packed(int64_t m, int64_t n, int64_t k, const float* ap, const float* bp, float* c,
                 int64_t ldc, bool accumulate) {
  constexpr int kMr = TileShape<Isa>::kMr, kNr = TileShape<Isa>::kNr;
  for (int64_t j0 = 0; j0 < n; j0 += kNr) {
    const float* b_panel = bp + (j0 / kNr) * k * kNr;
    for (int64_t i0 = 0; i0 < m; i0 += kMr) {
      micro_kernel<Isa>(k, ap + (i0 / kMr) * k * kMr, b_panel, c + i0 * ldc + j0, ldc, accumulate,
                        std::min<int64_t>(kMr, m - i0), std::min<int64_t>(kNr, n - j0));
    }
  }
}

}  // namespace
}  // namespace qkv::kernels::simd
