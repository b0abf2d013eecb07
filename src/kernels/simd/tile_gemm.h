// Small matrix products on cache-resident tiles, the building block of the
// fused attention kernels: C (+)= A · B with A packed in panels of kMr rows and
// B packed in panels of kNr columns, both k-major (the BLIS layout). Packing
// reads through arbitrary strides, so Kᵀ, Pᵀ or dOᵀ cost nothing extra.
//
// The micro-kernel keeps a kMr × kNr block of C in registers: per step of k
// it loads two vectors of B and broadcasts kMr values of A.
// Its frame (start_tile, accumulate_tile, store_tile, for_each_tile) also
// serves the bfloat16 pair kernels of flash_forward_bf16.h.
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

// A wider shape for products whose B rows hold whole panels of 64 floats in
// place (O += P V, dV += P̃ᵀ dO, dK += dSᵀ Q): on AVX-512, 6 rows × 4 vectors
// a step load 10 operands per 24 FMAs (12 × 2: 14), and A is read once per 64
// columns instead of per 32. Other ISAs keep TileShape (too few registers).
template <class Isa>
struct WideShape {
  static constexpr bool kUsable = Isa::kLanes == 16;
  static constexpr int kRows = kUsable ? 6 : TileShape<Isa>::kMr;
  static constexpr int kVecs = kUsable ? 4 : 2;
  static constexpr int kNr = kVecs * Isa::kLanes;
};

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Whether a row-major matrix of `cols` columns (column stride col_stride) can
// be the B operand of kNr-wide panels read in place: each row then holds
// whole panels, one step of k apart.
template <int kNr>
bool rows_hold_panels(int64_t col_stride, int64_t cols) {
  return col_stride == 1 && cols % kNr == 0;
}

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
// columns: dst[panel][p][c], times `scale`, zero-padded to whole panels.
template <class Isa, int kNr>
void pack_b(const float* b, int64_t rs, int64_t cs, int64_t k, int64_t n, float scale, float* dst) {
  constexpr int kL = Isa::kLanes;
  for (int64_t j0 = 0; j0 < n; j0 += kNr) {
    const int64_t cols = std::min<int64_t>(kNr, n - j0);
    if (cs == 1 && cols == kNr && scale == 1.0f) {
      for (int64_t p = 0; p < k; ++p, dst += kNr) std::copy_n(b + p * rs + j0, kNr, dst);
      continue;
    }
    if (rs == 1) {  // a transpose: square blocks in registers, the edges one by one
      const int64_t full_cols = cols / kL * kL, full_k = k / kL * kL;
      for (int64_t c0 = 0; c0 < full_cols; c0 += kL)
        for (int64_t p0 = 0; p0 < full_k; p0 += kL)
          Isa::transpose(b + (j0 + c0) * cs + p0, cs, dst + p0 * kNr + c0, kNr, scale);
      for (int64_t c = 0; c < kNr; ++c) {
        const float* src = b + (j0 + c) * cs;
        const int64_t from = c < full_cols ? full_k : 0;
        for (int64_t p = from; p < k; ++p) dst[p * kNr + c] = c < cols ? src[p] * scale : 0.0f;
      }
      dst += k * kNr;
      continue;
    }
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t c = 0; c < cols; ++c) dst[c] = b[p * rs + (j0 + c) * cs] * scale;
      for (int64_t c = cols; c < kNr; ++c) dst[c] = 0.0f;
      dst += kNr;
    }
  }
}

// Where a micro-kernel reads its operands. A element (r, p) is
// a[r·row_stride + p·step]; B element (p, c) is b[p·step + c] for c below the
// kernel's width (those columns must be readable even past `cols`). An AView
// (24 bytes) goes by reference: by value the ABI passes it on the stack, and
// GCC's copy of it there (two 8-byte stores read back as one 16-byte load)
// stalls the call on a failed store forward, which shows at E = 32 where the
// calls are short.
struct AView {
  const float* a;
  int64_t row_stride;
  int64_t step;
};
struct BView {
  const float* b;
  int64_t step;
};

// The tiles of C[m × n] (row stride ldc) for A in panels of kRows rows
// (a_panel_stride apart) and B in panels of kNr columns (b_panel_stride
// apart), a column panel at a time: kernel(a_panel, b_panel, c_tile, rows,
// cols, tile_max) for each, rows × cols the part of the tile inside C and
// tile_max the tile's columns of col_max (null without it). The views are
// AView and BView, or their bfloat16 pair counterparts.
template <int kRows, int kNr, class AViewT, class BViewT, class Kernel>
void for_each_tile(int64_t m, int64_t n, const AViewT& a, int64_t a_panel_stride, BViewT b,
                   int64_t b_panel_stride, float* c, int64_t ldc, float* col_max, Kernel&& kernel) {
  for (int64_t j0 = 0; j0 < n; j0 += kNr) {
    const BViewT bp{b.b + (j0 / kNr) * b_panel_stride, b.step};
    for (int64_t i0 = 0; i0 < m; i0 += kRows) {
      const AViewT ap{a.a + (i0 / kRows) * a_panel_stride, a.row_stride, a.step};
      kernel(ap, bp, c + i0 * ldc + j0, std::min<int64_t>(kRows, m - i0),
             std::min<int64_t>(kNr, n - j0), col_max ? col_max + j0 : nullptr);
    }
  }
}

// The start of a micro-kernel: the register tile at 0 and the rows of A it
// reads, a_row[r] = a + r·row_stride, rows past `rows` reading row 0.
template <class Isa, int kRows, int kVecs, class T>
[[gnu::always_inline]] inline void start_tile(typename Isa::V (&acc)[kRows][kVecs],
                                              const T* (&a_row)[kRows], const T* a,
                                              int64_t row_stride, int64_t rows) {
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
    a_row[r] = a + (r < rows ? r : 0) * row_stride;
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) acc[r][v] = Isa::zero();
  }
}

// The k steps of a micro-kernel, for float32 and bfloat16-pair operands
// alike: the register tile started (start_tile), then per step the kVecs
// vectors of B's row b and step(a_row, ap, b), which adds to the tile the
// products of b with A's elements at a_row[r] + ap (r < kRows). Always
// inlined, as `step` must be: the tile lives in registers.
template <class Isa, int kRows, int kVecs, class AViewT, class BViewT, class Step>
[[gnu::always_inline]] inline void accumulate_tile(typename Isa::V (&acc)[kRows][kVecs], int64_t k,
                                                   const AViewT& av, BViewT bv, int64_t rows,
                                                   Step&& step) {
  using V = typename Isa::V;
  constexpr int kL = Isa::kLanes;
  decltype(av.a) a_row[kRows];
  start_tile<Isa>(acc, a_row, av.a, av.row_stride, rows);
  auto bp = bv.b;
  for (int64_t p = 0, ap = 0; p < k; ++p, ap += av.step, bp += bv.step) {
    V b[kVecs];
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) b[v] = Isa::load(reinterpret_cast<const float*>(bp + v * kL));
    step(a_row, ap, b);
  }
}

// The end of a micro-kernel: with `col_max` set, the column maxima of the
// register tile folded into col_max[0 .. kVecs·lanes); then its top-left
// rows × cols into C (row stride ldc), = or +=. Always inlined: a call would
// take the accumulators through memory.
template <class Isa, int kRows, int kVecs>
[[gnu::always_inline]] inline void store_tile(typename Isa::V (&acc)[kRows][kVecs], float* c,
                                              int64_t ldc, bool accumulate, int64_t rows,
                                              int64_t cols, float* col_max) {
  using V = typename Isa::V;
  constexpr int kL = Isa::kLanes;
  if (col_max != nullptr) {
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) {
      V m = Isa::load(col_max + v * kL);
#pragma GCC unroll 16
      for (int r = 0; r < kRows; ++r) m = Isa::max(m, acc[r][v]);
      Isa::store(col_max + v * kL, m);
    }
  }
  if (rows == kRows && cols == kVecs * kL) {
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) {
        float* out = c + r * ldc + v * kL;
        Isa::store(out, accumulate ? Isa::add(Isa::load(out), acc[r][v]) : acc[r][v]);
      }
    return;
  }
  // An edge tile: the rows that exist, the columns through lane masks.
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
    if (r >= rows) break;
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) {
      const int lanes = static_cast<int>(std::min<int64_t>(kL, cols - v * kL));
      if (lanes <= 0) break;
      float* out = c + r * ldc + v * kL;
      if (lanes == kL) {
        Isa::store(out, accumulate ? Isa::add(Isa::load(out), acc[r][v]) : acc[r][v]);
      } else {
        const typename Isa::V sum =
            accumulate ? Isa::add(Isa::load_first(out, lanes), acc[r][v]) : acc[r][v];
        Isa::store_first(out, sum, lanes);
      }
    }
  }
}

// C[kRows × kVecs·lanes] (row stride ldc) = or += A · B over k steps, in
// registers; only the top-left rows × cols of C are written. Rows of A past
// `rows` read row 0 instead (their results are dropped), so a tile at the
// edge of K never reads beyond it.
//
// With `col_max` set, also folds the column maxima of the tile into
// col_max[0 .. kVecs·lanes): the softmax needs them, and here they cost a few
// register operations instead of another pass over the tile. (Rows past
// `rows` repeat row 0, so they never raise a maximum.)
template <class Isa, int kRows, int kVecs>
void micro_kernel(int64_t k, const AView& av, BView bv, float* c, int64_t ldc, bool accumulate,
                  int64_t rows, int64_t cols, float* col_max = nullptr) {
  using V = typename Isa::V;
  V acc[kRows][kVecs];
  accumulate_tile<Isa>(
      acc, k, av, bv,
      rows, [&](const auto& a_row, int64_t ap, const V* b) __attribute__((always_inline)) {
#pragma GCC unroll 16
        for (int r = 0; r < kRows; ++r) {
          const V a = Isa::set1(a_row[r][ap]);
#pragma GCC unroll 4
          for (int v = 0; v < kVecs; ++v) acc[r][v] = Isa::fmadd(a, b[v], acc[r][v]);
        }
      });
  store_tile<Isa, kRows, kVecs>(acc, c, ldc, accumulate, rows, cols, col_max);
}

// C[m × n] (+)= A · B for A rows read in place from a row-major matrix
// (element (i, p) at a[i·lda + p]) and B packed in panels of kVecs vectors
// (pack_b with that width, or a row-major matrix whose rows are readable
// in whole panels: then b_panel_stride = the panel width and b_step = ldb).
// col_max (optional, n floats rounded up to whole panels) receives the
// column maxima of C folded into what it holds.
template <class Isa, int kRows, int kVecs>
void gemm_tiles(int64_t m, int64_t n, int64_t k, const AView& a, int64_t a_panel_stride, BView b,
                int64_t b_panel_stride, float* c, int64_t ldc, bool accumulate,
                float* col_max = nullptr) {
  for_each_tile<kRows, kVecs * Isa::kLanes>(
      m, n, a, a_panel_stride, b, b_panel_stride, c, ldc, col_max,
      [&](const AView& ap, BView bp, float* tile, int64_t rows, int64_t cols, float* tile_max) {
        micro_kernel<Isa, kRows, kVecs>(k, ap, bp, tile, ldc, accumulate, rows, cols, tile_max);
      });
}

// C[m × n] (row stride ldc) = or += A · B from packed panels (pack_a with
// kMr, pack_b with kNr, both over the same k).
template <class Isa>
void gemm_packed(int64_t m, int64_t n, int64_t k, const float* ap, const float* bp, float* c,
                 int64_t ldc, bool accumulate) {
  constexpr int kMr = TileShape<Isa>::kMr, kNr = TileShape<Isa>::kNr;
  gemm_tiles<Isa, kMr, 2>(m, n, k, AView{ap, 1, kMr}, k * kMr, BView{bp, kNr}, k * kNr, c, ldc,
                          accumulate);
}

}  // namespace
}  // namespace qkv::kernels::simd
