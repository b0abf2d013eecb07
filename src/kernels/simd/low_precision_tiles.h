// The micro-kernels of the low-precision linear layers (low_precision_gemm.h),
// one "flavour" per instruction set and precision, each compiled in its own
// translation unit (lowp_*.cc) with that instruction set's flags:
//
//   Bf16Dot512     vdpbf16ps, 12 rows × 32 columns      (AVX512_BF16)
//   Bf16Widen512   bfloat16 widened to float32 + FMA, 12 × 32   (AVX-512)
//   Bf16Widen256   the same on 8 lanes, 4 × 16                  (AVX2)
//   Int8Vnni512    vpdpbusd, 12 × 32                    (AVX512_VNNI)
//   Int8Avx2       int8 widened to int16 + vpmaddwd, 6 × 8      (AVX2)
//   Bf16Portable, Int8Portable   plain C++
//
// Each gemm_block call converts the rows of x it owns once, in blocks of
// kBlockRows, into a thread-local buffer laid out as panels of kRows rows,
// k-major ([step][kRows]), so that the micro-kernel reads one row's 2 (bf16)
// or 4 (int8) values of a step as one 32-bit broadcast from one pointer. Then
// each row panel (in L1) meets every packed column panel of W (from L2): its
// kRows × 32 block of y is summed in registers over the whole of k, and the
// rows of y are written in order.
//
// Everything here has internal linkage (see kernels/simd/vec.h): the same
// names compile to different instructions in each translation unit.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/low_precision_gemm.h"
#include "kernels/thread_scratch.h"

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace qkv::kernels::lowp {
namespace {

constexpr int kPanel = static_cast<int>(kLowpPanel);
// Rows of x converted at a time by one gemm_block call (a multiple of every
// flavour's kRows); the converted block takes ≤ 96 × k · 4 bytes.
constexpr int64_t kBlockRows = 96;

// ---- Scalar conversions, the definition every flavour follows -----------------

inline uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
inline float float_of(uint32_t b) { return std::bit_cast<float>(b); }

// The bfloat16 of f in the low 16 bits: round to nearest even, NaN stays a
// quiet NaN (float_to_bfloat16 of qkv/tensor.h, not called here: an inline
// function of external linkage compiled with AVX-512 flags could be the copy
// the linker keeps for every caller).
inline uint32_t bf16_of(float f) {
  const uint32_t b = bits_of(f);
  const uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
  return (b & 0x7fffffffu) > 0x7f800000u ? ((b >> 16) | 0x40u) : rounded;
}

// Pair s of a row of k floats as two bfloat16 (element 2s low, 2s + 1 high;
// zero past k).
inline uint32_t bf16_pair(const float* x, int64_t k, int64_t s) {
  const uint32_t lo = 2 * s < k ? bf16_of(x[2 * s]) : 0;
  const uint32_t hi = 2 * s + 1 < k ? bf16_of(x[2 * s + 1]) : 0;
  return lo | (hi << 16);
}

// Rows (of x or of W) whose max |value| is below this quantise to zero: 127
// divided by a smaller maximum could overflow float32. Their products are
// below 2^-100 · Σ|w| in float32 too.
constexpr float kTinyRow = 0x1p-100f;

// The symmetric int8 scale of a row of W from the bits of its max |value| (the
// integer maximum of the bits of |v| is the float maximum, and NaN's bits
// are above Inf's). scale: max / 127; NaN when the row holds a NaN or an
// Inf, so that everything computed from that row becomes NaN; 0 for an
// all-zero (or tiny) row. inv: 127 / max, or 0 when no value is quantised.
struct RowScale {
  float scale, inv;
};
inline RowScale row_scale(uint32_t max_abs_bits) {
  if (max_abs_bits >= 0x7f800000u) return {std::numeric_limits<float>::quiet_NaN(), 0.0f};
  const float max = float_of(max_abs_bits);
  if (!(max >= kTinyRow)) return {0.0f, 0.0f};
  return {max / 127.0f, 127.0f / max};
}
inline uint32_t max_abs_bits(const float* v, int64_t n) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, bits_of(v[i]) & 0x7fffffffu);
  return m;
}
// round(v · inv) to nearest even, in [-127, 127] (inv > 0 and v finite).
inline int32_t quantize(float v, float inv) {
  const float q = std::nearbyint(v * inv);
  return static_cast<int32_t>(std::min(127.0f, std::max(-127.0f, q)));
}

// A row of x in int8 (asymmetric, with a zero point): v ≈ scale · (u - zero)
// with u in [0, 255], the range [min(lo, 0), max(hi, 0)] spread over the 256
// values, so that one-sided rows (after GELU or ReLU) keep all 8 bits.
// scale: NaN when the row holds a NaN or an Inf (max_abs_bits at or above
// Inf's), 0 when the range is below kTinyRow; inv (1 / scale) is then 0 and
// every u is zero = 0.
struct RowQuant {
  float scale;
  int32_t zero;
};
struct RowQuantizer {
  RowQuant quant;
  float inv;
};
inline RowQuantizer row_quantizer(float lo, float hi, uint32_t max_abs_bits) {
  if (max_abs_bits >= 0x7f800000u) return {{std::numeric_limits<float>::quiet_NaN(), 0}, 0.0f};
  lo = std::min(lo, 0.0f);
  hi = std::max(hi, 0.0f);
  // Divided before subtracting: hi - lo could overflow float32.
  const float scale = hi / 255.0f - lo / 255.0f;
  if (!(scale >= kTinyRow / 255.0f)) return {{0.0f, 0}, 0.0f};
  const float inv = 1.0f / scale;
  const int32_t zero = static_cast<int32_t>(std::min(255.0f, std::nearbyint(-lo * inv)));
  return {{scale, zero}, inv};
}
// The least and greatest value of a row, and the bits of its max |value|.
struct RowRange {
  float lo, hi;
  uint32_t max_abs_bits;
};
inline RowRange row_range(const float* v, int64_t n) {
  RowRange r{0.0f, 0.0f, 0};
  for (int64_t i = 0; i < n; ++i) {
    r.lo = std::min(r.lo, v[i]);
    r.hi = std::max(r.hi, v[i]);
    r.max_abs_bits = std::max(r.max_abs_bits, bits_of(v[i]) & 0x7fffffffu);
  }
  return r;
}
inline RowQuantizer row_quantizer(const float* v, int64_t n) {
  const RowRange r = row_range(v, n);
  return row_quantizer(r.lo, r.hi, r.max_abs_bits);
}
// round(v · inv) + zero to nearest even, in [0, 255] (v finite).
inline int32_t quantize_u8(float v, const RowQuantizer& q) {
  const float u = std::nearbyint(v * q.inv) + static_cast<float>(q.quant.zero);
  return static_cast<int32_t>(std::min(255.0f, std::max(0.0f, u)));
}

// Quad s of a quantised row as 4 unsigned bytes (zero past k, where W is 0).
inline uint32_t u8_quad(const float* x, int64_t k, int64_t s, const RowQuantizer& q) {
  uint32_t quad = 0;
  for (int t = 0; t < 4; ++t) {
    const int64_t p = 4 * s + t;
    const int32_t u = (p < k && q.inv != 0.0f) ? quantize_u8(x[p], q) : q.quant.zero;
    quad |= static_cast<uint32_t>(u) << (8 * t);
  }
  return quad;
}

// ---- What a micro-kernel is given ----------------------------------------------

// One kRows-row panel of x (converted) times one packed column panel of W
// into rows × [lo, hi) of the panel's 32 columns of y. Passed by reference
// (by value the ABI copies it through the stack on every call).
struct TileArgs {
  const void* a;              // converted x: [steps][kRows] of the flavour's XElem
  const void* b;              // the W panel: [steps][32][2 or 4]
  int64_t steps;              // k pairs or quads
  const RowQuant* row_quant;  // int8: scale and zero point of each row of the panel
  const float* col_scale;     // int8: the panel's 32 channel scales
  const int32_t* col_sum;     // int8: the panel's 32 Σ_k W8
  const float* bias;          // 32 values (zeros where there is no bias or column)
  float* y;                   // row 0, column 0 of the panel
  int64_t ldy;
  int lo, hi;  // columns of the panel to write
};

// The epilogue, in scalar form, that every flavour computes (in this order:
// the vector ones with separate multiplies and adds, no FMA, so that int8
// results are the same on every table).
inline float int8_output(int32_t acc, int32_t col_sum, RowQuant row, float col_scale, float bias) {
  const float sum = static_cast<float>(acc - col_sum * row.zero);
  return sum * (row.scale * col_scale) + bias;
}

// Writes rows × [lo, hi) of a 32-column tile of int32 sums (int8) ...
template <int R>
void store_int8_tile(const int32_t (&acc)[R][kPanel], const TileArgs& t) {
  for (int r = 0; r < R; ++r)
    for (int c = t.lo; c < t.hi; ++c)
      t.y[r * t.ldy + c] =
          int8_output(acc[r][c], t.col_sum[c], t.row_quant[r], t.col_scale[c], t.bias[c]);
}
// ... or of float32 sums (bfloat16).
template <int R>
void store_bf16_tile(const float (&acc)[R][kPanel], const TileArgs& t) {
  for (int r = 0; r < R; ++r)
    for (int c = t.lo; c < t.hi; ++c) t.y[r * t.ldy + c] = acc[r][c] + t.bias[c];
}

// ---- Converting rows of x: the scalar forms ------------------------------------

// rows rows of x → out[s · kRows + r] = bfloat16 pair s of row r.
template <int kRows>
void pack_bf16_pairs_scalar(const float* x, int64_t ldx, int rows, int64_t k, int64_t steps,
                            uint32_t* out) {
  for (int r = 0; r < rows; ++r)
    for (int64_t s = 0; s < steps; ++s) out[s * kRows + r] = bf16_pair(x + r * ldx, k, s);
}

// rows rows of x → out[s · kRows + r] = u8 quad s of row r; quant[r].
template <int kRows>
void pack_u8_quads_scalar(const float* x, int64_t ldx, int rows, int64_t k, int64_t steps,
                          uint32_t* out, RowQuant* quant) {
  for (int r = 0; r < rows; ++r) {
    const RowQuantizer q = row_quantizer(x + r * ldx, k);
    quant[r] = q.quant;
    for (int64_t s = 0; s < steps; ++s) out[s * kRows + r] = u8_quad(x + r * ldx, k, s, q);
  }
}

// ---- The driver of one flavour over a block of y -------------------------------

// The 32 biases of the panel at column j0: in place when it is whole, else
// copied into pad with zeros past n (and everywhere when there is no bias).
inline const float* panel_bias(const float* bias, int64_t n, int64_t j0, float* pad) {
  if (bias != nullptr && j0 + kPanel <= n) return bias + j0;
  for (int c = 0; c < kPanel; ++c) pad[c] = (bias != nullptr && j0 + c < n) ? bias[j0 + c] : 0.0f;
  return pad;
}

// A flavour F has kRows, XElem (one row's step of converted x), and
//   pack(x, ldx, rows, k, steps, XElem* out, RowQuant* row_quant, uint32_t* temp)
//                                         one row panel (temp: kRows · steps words)
//   tile<R>(const TileArgs&)                                      R ≤ kRows rows
template <class F, int R = F::kRows>
void run_tile(int rows, const TileArgs& t) {
  if constexpr (R > 1) {
    if (rows < R) return run_tile<F, R - 1>(rows, t);
  }
  F::template tile<R>(t);
}

// y[r0:r1, c0:c1] = x[r0:r1] · Wᵀ + bias[c0:c1] (LowPrecisionKernels::gemm_block;
// the driver calls it with weights of the flavour's precision).
template <class F>
void gemm_block(const float* x, int64_t ldx, const PackedWeights& packed, const float* bias,
                float* y, int64_t ldy, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  static_assert(kBlockRows % F::kRows == 0);
  using XElem = typename F::XElem;
  if (r0 >= r1 || c0 >= c1) return;
  const PackedWeights::View w = packed.view();
  const int64_t steps = w.steps;
  const bool int8 = w.precision == Precision::kInt8;
  const int64_t panel_elems = w.panel_steps * kPanel * (int8 ? 4 : 2);  // bytes or uint16
  const int64_t block = std::min(kBlockRows, (r1 - r0 + F::kRows - 1) / F::kRows * F::kRows);
  const int64_t buffer_bytes = block * std::max<int64_t>(steps, 1) * sizeof(XElem);
  const int64_t temp_bytes = (F::kRows * std::max<int64_t>(steps, 1) * 4 + 63) / 64 * 64;
  // Smoothed int8 weights: kRows rows of x · input_scale at a time.
  const int64_t smooth_bytes = w.input_scale ? (F::kRows * w.k * 4 + 63) / 64 * 64 : 0;
  char* scratch = static_cast<char*>(
      thread_scratch_bytes(buffer_bytes + temp_bytes + smooth_bytes + block * sizeof(RowQuant)));
  XElem* buffer = reinterpret_cast<XElem*>(scratch);
  uint32_t* temp = reinterpret_cast<uint32_t*>(scratch + buffer_bytes);
  float* smoothed = reinterpret_cast<float*>(scratch + buffer_bytes + temp_bytes);
  RowQuant* row_quant =
      reinterpret_cast<RowQuant*>(scratch + buffer_bytes + temp_bytes + smooth_bytes);
  alignas(64) float bias_pad[kPanel];

  for (int64_t i0 = r0; i0 < r1; i0 += block) {
    const int64_t rows = std::min(block, r1 - i0);
    for (int64_t ip = 0; ip < rows; ip += F::kRows) {
      const int pack_rows = static_cast<int>(std::min<int64_t>(F::kRows, rows - ip));
      const float* src = x + (i0 + ip) * ldx;
      int64_t ld = ldx;
      if (w.input_scale) {
        for (int r = 0; r < pack_rows; ++r)
          for (int64_t p = 0; p < w.k; ++p)
            smoothed[r * w.k + p] = src[r * ldx + p] * w.input_scale[p];
        src = smoothed;
        ld = w.k;
      }
      F::pack(src, ld, pack_rows, w.k, steps, buffer + ip * steps, row_quant + ip, temp);
    }
    for (int64_t ip = 0; ip < rows; ip += F::kRows) {
      const int tile_rows = static_cast<int>(std::min<int64_t>(F::kRows, rows - ip));
      for (int64_t panel = c0 / kPanel; panel * kPanel < c1; ++panel) {
        const int64_t j0 = panel * kPanel;
        const float* bias_panel = panel_bias(bias, w.n, j0, bias_pad);
        TileArgs t{};
        t.a = buffer + ip * steps;
        // (k = 0: no arrays; the kernels then only offset a pointer into a panel.)
        alignas(64) static constexpr int8_t kNoWeights[4 * kPanel] = {};
        t.b = steps == 0 ? static_cast<const void*>(kNoWeights)
              : int8     ? static_cast<const void*>(w.int8 + panel * panel_elems)
                         : static_cast<const void*>(w.bf16 + panel * panel_elems);
        t.steps = steps;
        t.row_quant = row_quant + ip;
        t.col_scale = int8 ? w.scales + j0 : nullptr;
        t.col_sum = int8 ? w.col_sums + j0 : nullptr;
        t.bias = bias_panel;
        t.y = y + (i0 + ip) * ldy + j0;
        t.ldy = ldy;
        t.lo = static_cast<int>(std::max<int64_t>(c0 - j0, 0));
        t.hi = static_cast<int>(std::min<int64_t>(c1 - j0, kPanel));
        run_tile<F>(tile_rows, t);
      }
    }
  }
}

// ---- Portable --------------------------------------------------------------------

struct Bf16Portable {
  static constexpr int kRows = 4;
  using XElem = uint32_t;
  static void pack(const float* x, int64_t ldx, int rows, int64_t k, int64_t steps, XElem* out,
                   RowQuant*, uint32_t*) {
    pack_bf16_pairs_scalar<kRows>(x, ldx, rows, k, steps, out);
  }
  template <int R>
  static void tile(const TileArgs& t) {
    float acc[R][kPanel] = {};
    const uint32_t* a = static_cast<const uint32_t*>(t.a);
    const uint16_t* b = static_cast<const uint16_t*>(t.b);
    for (int64_t s = 0; s < t.steps; ++s, a += kRows, b += 2 * kPanel)
      for (int r = 0; r < R; ++r) {
        const float a0 = float_of(a[r] << 16), a1 = float_of(a[r] & 0xffff0000u);
        for (int c = 0; c < kPanel; ++c)
          acc[r][c] = acc[r][c] + a0 * float_of(static_cast<uint32_t>(b[2 * c]) << 16) +
                      a1 * float_of(static_cast<uint32_t>(b[2 * c + 1]) << 16);
      }
    store_bf16_tile<R>(acc, t);
  }
};

struct Int8Portable {
  static constexpr int kRows = 4;
  using XElem = uint32_t;
  static void pack(const float* x, int64_t ldx, int rows, int64_t k, int64_t steps, XElem* out,
                   RowQuant* quant, uint32_t*) {
    pack_u8_quads_scalar<kRows>(x, ldx, rows, k, steps, out, quant);
  }
  template <int R>
  static void tile(const TileArgs& t) {
    int32_t acc[R][kPanel] = {};
    const uint32_t* a = static_cast<const uint32_t*>(t.a);
    const int8_t* b = static_cast<const int8_t*>(t.b);
    for (int64_t s = 0; s < t.steps; ++s, a += kRows, b += 4 * kPanel)
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < kPanel; ++c)
          for (int q = 0; q < 4; ++q)
            acc[r][c] += static_cast<int32_t>((a[r] >> (8 * q)) & 0xffu) * b[4 * c + q];
    store_int8_tile<R>(acc, t);
  }
};

// ---- AVX2 ------------------------------------------------------------------------
#if defined(__AVX2__) && defined(__FMA__)

// bfloat16 widened to float32 (a shift: exact) and multiplied by FMA. The
// converted x holds each pair as two float32 (XElem: float bits, 2k low),
// so that a broadcast needs no shifting. The 32-column panel is done as two
// halves of 16 columns: 4 rows × 2 ymm of sums, 4 widened W vectors.
struct Bf16Widen256 {
  static constexpr int kRows = 4;
  using XElem = uint64_t;
  static void pack(const float* x, int64_t ldx, int rows, int64_t k, int64_t steps, XElem* out,
                   RowQuant*, uint32_t*) {
    for (int r = 0; r < rows; ++r)
      for (int64_t s = 0; s < steps; ++s) {
        const uint32_t pair = bf16_pair(x + r * ldx, k, s);
        out[s * kRows + r] = (static_cast<uint64_t>(pair & 0xffff0000u) << 32) | (pair << 16);
      }
  }
  template <int R>
  static void tile(const TileArgs& t) {
    alignas(32) float out[R][kPanel];
    const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    for (int half = 0; half < 2; ++half) {
      if (t.hi <= 16 * half || t.lo >= 16 * (half + 1)) continue;
      __m256 acc[R][2];
      for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
      const float* a = static_cast<const float*>(t.a);
      const uint16_t* b = static_cast<const uint16_t*>(t.b) + 32 * half;
      for (int64_t s = 0; s < t.steps; ++s, a += 2 * kRows, b += 2 * kPanel) {
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
        const __m256 e0 = _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16));
        const __m256 o0 = _mm256_castsi256_ps(_mm256_and_si256(w0, high));
        const __m256 e1 = _mm256_castsi256_ps(_mm256_slli_epi32(w1, 16));
        const __m256 o1 = _mm256_castsi256_ps(_mm256_and_si256(w1, high));
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m256 ae = _mm256_broadcast_ss(a + 2 * r);
          const __m256 ao = _mm256_broadcast_ss(a + 2 * r + 1);
          acc[r][0] = _mm256_fmadd_ps(ao, o0, _mm256_fmadd_ps(ae, e0, acc[r][0]));
          acc[r][1] = _mm256_fmadd_ps(ao, o1, _mm256_fmadd_ps(ae, e1, acc[r][1]));
        }
      }
      for (int r = 0; r < R; ++r) {
        _mm256_store_ps(out[r] + 16 * half, acc[r][0]);
        _mm256_store_ps(out[r] + 16 * half + 8, acc[r][1]);
      }
    }
    store_bf16_tile<R>(out, t);
  }
};

// int8 × u8 through int16: each W quad (one column's 4 k) is sign-extended to
// 4 int16, each x quad is stored as 4 zero-extended int16 (XElem), and
// vpmaddwd sums pairs of products into int32 (no saturation: |u8 · s8| · 2
// < 2^31). Lanes hold (column, half of the quad), added at the end. The
// 32-column panel is done as four quarters of 8 columns: 6 rows × 2 ymm.
struct Int8Avx2 {
  static constexpr int kRows = 6;
  using XElem = uint64_t;
  static void pack(const float* x, int64_t ldx, int rows, int64_t k, int64_t steps, XElem* out,
                   RowQuant* quant, uint32_t*) {
    for (int r = 0; r < rows; ++r) {
      const RowQuantizer q = row_quantizer(x + r * ldx, k);
      quant[r] = q.quant;
      for (int64_t s = 0; s < steps; ++s) {
        const uint32_t quad = u8_quad(x + r * ldx, k, s, q);
        uint64_t wide = 0;
        for (int q = 0; q < 4; ++q)
          wide |= static_cast<uint64_t>((quad >> (8 * q)) & 0xffu) << (16 * q);
        out[s * kRows + r] = wide;
      }
    }
  }
  template <int R>
  static void tile(const TileArgs& t) {
    alignas(32) int32_t out[R][kPanel];
    for (int quarter = 0; quarter < 4; ++quarter) {
      if (t.hi <= 8 * quarter || t.lo >= 8 * (quarter + 1)) continue;
      __m256i acc[R][2];
      for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
      const int64_t* a = static_cast<const int64_t*>(t.a);
      const int8_t* b = static_cast<const int8_t*>(t.b) + 32 * quarter;
      for (int64_t s = 0; s < t.steps; ++s, a += kRows, b += 4 * kPanel) {
        const __m256i w0 =
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
        const __m256i w1 =
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16)));
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m256i av = _mm256_set1_epi64x(a[r]);
          acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(av, w0));
          acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(av, w1));
        }
      }
      for (int r = 0; r < R; ++r) {
        // hadd: [c0 c1 c4 c5 | c2 c3 c6 c7]; the permute puts them in order.
        const __m256i sums =
            _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[r][0], acc[r][1]), 0xd8);
        _mm256_store_si256(reinterpret_cast<__m256i*>(out[r] + 8 * quarter), sums);
      }
    }
    store_int8_tile<R>(out, t);
  }
};

#endif  // AVX2

// ---- AVX-512 ---------------------------------------------------------------------
#if defined(__AVX512F__) && defined(__AVX512BW__)

// Lanes [from, to) of 16 (clipped).
inline __mmask16 lane_mask(int from, int to) {
  from = std::max(from, 0);
  to = std::min(to, 16);
  if (to <= from) return 0;
  return static_cast<__mmask16>(((1u << to) - 1) & ~((1u << from) - 1));
}

// Asks for the R × 2 cache lines of y a tile will write, for writing, before
// its sums take ~steps · 2R cycles: at m = 4096 y is 19 MB and every store
// missed (perf: ~15% of the int8 kernel's time stalled on them).
template <int R>
void prefetch_tile_y(const TileArgs& t) {
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    __builtin_prefetch(t.y + r * t.ldy, 1, 3);
    __builtin_prefetch(t.y + r * t.ldy + 16, 1, 3);
  }
}

// Stores rows × [lo, hi) of a 32-column tile held as R × 2 vectors.
template <int R>
void store_tile512(const __m512 (&out)[R][2], const TileArgs& t) {
  if (t.lo == 0 && t.hi == kPanel) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      _mm512_storeu_ps(t.y + r * t.ldy, out[r][0]);
      _mm512_storeu_ps(t.y + r * t.ldy + 16, out[r][1]);
    }
    return;
  }
  const __mmask16 m0 = lane_mask(t.lo, t.hi), m1 = lane_mask(t.lo - 16, t.hi - 16);
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(t.y + r * t.ldy, m0, out[r][0]);
    _mm512_mask_storeu_ps(t.y + r * t.ldy + 16, m1, out[r][1]);
  }
}

// The rounding of bf16_of on 16 floats, as 16 bfloat16 in the low halves.
inline __m512i bf16_of16(__m512 v) {
  const __m512i b = _mm512_castps_si512(v);
  const __m512i shifted = _mm512_srli_epi32(b, 16);
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)),
                                         _mm512_and_si512(shifted, _mm512_set1_epi32(1))),
                        16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(shifted, _mm512_set1_epi32(0x40)));
}

// out[0, 48) = words (step s, row r) at out[12·s + r] of steps s < 4 of
// 12 rows, row r's 4 words at src + r · stride: 12 × 4 → 4 × 12 in registers
// (three rows-of-4 vectors, two two-source permutes per output vector)
// instead of 48 scattered 32-bit stores.
inline void transpose_12x4(const uint32_t* src, int64_t stride, uint32_t* out) {
  auto rows4 = [&](int r0) {
    const auto row = [&](int r) {
      return _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + r * stride));
    };
    __m512i v = _mm512_castsi128_si512(row(r0));
    v = _mm512_inserti32x4(v, row(r0 + 1), 1);
    v = _mm512_inserti32x4(v, row(r0 + 2), 2);
    return _mm512_inserti32x4(v, row(r0 + 3), 3);
  };
  const __m512i a = rows4(0), b = rows4(4), c = rows4(8);
  // Word (s, r) is in a, b or c (r / 4) at 4 · (r % 4) + s.
  alignas(64) static constexpr struct Indices {
    int32_t ab[3][16], tc[3][16];
    constexpr Indices() : ab{}, tc{} {
      for (int o = 0; o < 3; ++o)
        for (int i = 0; i < 16; ++i) {
          const int flat = 16 * o + i, s = flat / 12, r = flat % 12;
          const int pos = 4 * (r % 4) + s, source = r / 4;
          ab[o][i] = source == 1 ? 16 + pos : pos;  // from a or b (c: anything)
          tc[o][i] = source == 2 ? 16 + pos : i;    // keep, or from c
        }
    }
  } kIdx;
  for (int o = 0; o < 3; ++o) {
    const __m512i ab = _mm512_permutex2var_epi32(a, _mm512_load_si512(kIdx.ab[o]), b);
    _mm512_storeu_si512(out + 16 * o,
                        _mm512_permutex2var_epi32(ab, _mm512_load_si512(kIdx.tc[o]), c));
  }
}

// temp[r · steps + s] (row-major words) → out[s · kRows + r].
template <int kRows>
void transpose_rows(const uint32_t* temp, int rows, int64_t steps, uint32_t* out) {
  int64_t s = 0;
  if constexpr (kRows == 12) {
    if (rows == 12)
      for (; s + 4 <= steps; s += 4) transpose_12x4(temp + s, steps, out + s * 12);
  }
  for (; s < steps; ++s)
    for (int r = 0; r < rows; ++r) out[s * kRows + r] = temp[r * steps + s];
}

// rows rows of x → out[s · kRows + r] = bfloat16 pair s of row r: each row
// converted 16 floats (8 pairs) at a time into temp, then transposed.
template <int kRows>
void pack_bf16_pairs512(const float* x, int64_t ldx, int rows, int64_t k, int64_t steps,
                        uint32_t* out, uint32_t* temp) {
  for (int r = 0; r < rows; ++r) {
    const float* row = x + r * ldx;
    uint32_t* dst = temp + r * steps;
    int64_t s = 0;
    for (; 2 * s + 16 <= k; s += 8)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + s),
                          _mm512_cvtepi32_epi16(bf16_of16(_mm512_loadu_ps(row + 2 * s))));
    for (; s < steps; ++s) dst[s] = bf16_pair(row, k, s);
  }
  transpose_rows<kRows>(temp, rows, steps, out);
}

// One row of x → dst[0, steps) = its u8 quads (zero past k); returns its
// quantisation: quantised 16 floats (4 quads) at a time.
inline RowQuant quantize_row_u8_512(const float* row, int64_t k, int64_t steps, uint32_t* dst) {
  __m512i m = _mm512_setzero_si512();
  __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    const __m512 v = _mm512_loadu_ps(row + p);
    m = _mm512_max_epu32(m,
                         _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)));
    lo = _mm512_min_ps(lo, v);
    hi = _mm512_max_ps(hi, v);
  }
  const RowRange tail = row_range(row + p, k - p);
  const RowQuantizer q = row_quantizer(
      std::min(_mm512_reduce_min_ps(lo), tail.lo), std::max(_mm512_reduce_max_ps(hi), tail.hi),
      std::max<uint32_t>(_mm512_reduce_max_epu32(m), tail.max_abs_bits));
  int64_t s = 0;
  if (q.inv != 0.0f) {
    const __m512 inv = _mm512_set1_ps(q.inv);
    const __m512i zero = _mm512_set1_epi32(q.quant.zero);
    for (; 4 * s + 16 <= k; s += 4) {
      __m512i u = _mm512_add_epi32(
          _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(row + 4 * s), inv)), zero);
      u = _mm512_min_epi32(_mm512_max_epi32(u, _mm512_setzero_si512()), _mm512_set1_epi32(255));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + s), _mm512_cvtepi32_epi8(u));
    }
  }
  for (; s < steps; ++s) dst[s] = u8_quad(row, k, s, q);
  return q.quant;
}
// rows rows of x → out[s · kRows + r] = u8 quad s of row r, and each row's
// quant: each row quantised into temp, then transposed.
template <int kRows>
void pack_u8_quads512(const float* x, int64_t ldx, int rows, int64_t k, int64_t steps,
                      uint32_t* out, RowQuant* quant, uint32_t* temp) {
  for (int r = 0; r < rows; ++r)
    quant[r] = quantize_row_u8_512(x + r * ldx, k, steps, temp + r * steps);
  transpose_rows<kRows>(temp, rows, steps, out);
}
// bfloat16 widened to float32 and FMA, for AVX-512 CPUs without AVX512_BF16:
// 12 rows × 32 columns, each W vector widened into its even-k and odd-k halves.
struct Bf16Widen512 {
  static constexpr int kRows = 12;
  using XElem = uint64_t;
  static void pack(const float* x, int64_t ldx, int rows, int64_t k, int64_t steps, XElem* out,
                   RowQuant*, uint32_t* temp) {
    // The pairs, then each widened in place (from the end, as XElem is wider).
    uint32_t* pairs = reinterpret_cast<uint32_t*>(out);
    pack_bf16_pairs512<kRows>(x, ldx, rows, k, steps, pairs, temp);
    for (int64_t i = steps * kRows - 1; i >= 0; --i) {
      const uint32_t pair = pairs[i];
      out[i] = (static_cast<uint64_t>(pair & 0xffff0000u) << 32) | (pair << 16);
    }
  }
  template <int R>
  static void tile(const TileArgs& t) {
    prefetch_tile_y<R>(t);
    __m512 acc[R][2];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    const float* a = static_cast<const float*>(t.a);
    const uint16_t* b = static_cast<const uint16_t*>(t.b);
    for (int64_t s = 0; s < t.steps; ++s, a += 2 * kRows, b += 2 * kPanel) {
      const __m512i w0 = _mm512_loadu_si512(b), w1 = _mm512_loadu_si512(b + 32);
      const __m512 e0 = _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16));
      const __m512 o0 = _mm512_castsi512_ps(_mm512_and_si512(w0, high));
      const __m512 e1 = _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16));
      const __m512 o1 = _mm512_castsi512_ps(_mm512_and_si512(w1, high));
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m512 ae = _mm512_set1_ps(a[2 * r]), ao = _mm512_set1_ps(a[2 * r + 1]);
        acc[r][0] = _mm512_fmadd_ps(ao, o0, _mm512_fmadd_ps(ae, e0, acc[r][0]));
        acc[r][1] = _mm512_fmadd_ps(ao, o1, _mm512_fmadd_ps(ae, e1, acc[r][1]));
      }
    }
    const __m512 bias0 = _mm512_loadu_ps(t.bias), bias1 = _mm512_loadu_ps(t.bias + 16);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm512_add_ps(acc[r][0], bias0);
      acc[r][1] = _mm512_add_ps(acc[r][1], bias1);
    }
    store_tile512<R>(acc, t);
  }
};

#if defined(__AVX512BF16__)
// One row of x → dst[0, steps) = its bfloat16 pairs (zero past k).
// vcvtne2ps2bf16 rounds 32 floats to nearest even in one instruction (the ~10
// integer operations of bf16_of16 for 16): it differs from bf16_of only on
// denormals, which it takes as zero, as vdpbf16ps and AMX do anyway.
inline void bf16_row_pairs(const float* row, int64_t k, int64_t steps, uint32_t* dst) {
  int64_t s = 0;
  for (; 2 * s + 32 <= k; s += 16) {
    const __m512bh pairs =
        _mm512_cvtne2ps_pbh(_mm512_loadu_ps(row + 2 * s + 16), _mm512_loadu_ps(row + 2 * s));
    _mm512_storeu_si512(dst + s, (__m512i)pairs);
  }
  for (; s < steps; ++s) dst[s] = bf16_pair(row, k, s);
}
// vdpbf16ps: each lane adds the two products of a (k, k + 1) pair. 12 rows ×
// 2 zmm of sums (24), 2 W vectors a step, x broadcast 32 bits at a time.
struct Bf16Dot512 {
  static constexpr int kRows = 12;
  using XElem = uint32_t;
  static void pack(const float* x, int64_t ldx, int rows, int64_t k, int64_t steps, XElem* out,
                   RowQuant*, uint32_t* temp) {
    for (int r = 0; r < rows; ++r) bf16_row_pairs(x + r * ldx, k, steps, temp + r * steps);
    transpose_rows<kRows>(temp, rows, steps, out);
  }
  template <int R>
  static void tile(const TileArgs& t) {
    prefetch_tile_y<R>(t);
    __m512 acc[R][2];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const uint32_t* a = static_cast<const uint32_t*>(t.a);
    const uint16_t* b = static_cast<const uint16_t*>(t.b);
    for (int64_t s = 0; s < t.steps; ++s, a += kRows, b += 2 * kPanel) {
      const __m512bh w0 = (__m512bh)_mm512_loadu_si512(b);
      const __m512bh w1 = (__m512bh)_mm512_loadu_si512(b + 32);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r]));
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, w0);
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, w1);
      }
    }
    const __m512 bias0 = _mm512_loadu_ps(t.bias), bias1 = _mm512_loadu_ps(t.bias + 16);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm512_add_ps(acc[r][0], bias0);
      acc[r][1] = _mm512_add_ps(acc[r][1], bias1);
    }
    store_tile512<R>(acc, t);
  }
};
#endif  // AVX512_BF16

#if defined(__AVX512VNNI__)
// acc + the four products of each lane's u8 quad of a and s8 quad of b. In
// asm: GCC 12 copies every accumulator of the 12 × 2 tile through the stack
// around _mm512_dpbusd_epi32 (1.6× sgemm instead of 3×).
inline __m512i dpbusd(__m512i acc, __m512i a_u8, __m512i b_s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a_u8), "v"(b_s8));
  return acc;
}

// vpdpbusd: each int32 lane adds the four products of x's u8 quad and W's
// s8 quad. 12 rows × 2 zmm of sums; then (Σ - zero · Σ_k W8) · scales + bias.
struct Int8Vnni512 {
  static constexpr int kRows = 12;
  using XElem = uint32_t;
  static void pack(const float* x, int64_t ldx, int rows, int64_t k, int64_t steps, XElem* out,
                   RowQuant* quant, uint32_t* temp) {
    pack_u8_quads512<kRows>(x, ldx, rows, k, steps, out, quant, temp);
  }
  template <int R>
  static void tile(const TileArgs& t) {
    prefetch_tile_y<R>(t);
    __m512i acc[R][2];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
    const uint32_t* a = static_cast<const uint32_t*>(t.a);
    const int8_t* b = static_cast<const int8_t*>(t.b);
    for (int64_t s = 0; s < t.steps; ++s, a += kRows, b += 4 * kPanel) {
      const __m512i w0 = _mm512_loadu_si512(b), w1 = _mm512_loadu_si512(b + 64);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m512i av = _mm512_set1_epi32(static_cast<int>(a[r]));
        acc[r][0] = dpbusd(acc[r][0], av, w0);
        acc[r][1] = dpbusd(acc[r][1], av, w1);
      }
    }
    const __m512i col_sum0 = _mm512_loadu_si512(t.col_sum);
    const __m512i col_sum1 = _mm512_loadu_si512(t.col_sum + 16);
    const __m512 cs0 = _mm512_loadu_ps(t.col_scale), cs1 = _mm512_loadu_ps(t.col_scale + 16);
    const __m512 bias0 = _mm512_loadu_ps(t.bias), bias1 = _mm512_loadu_ps(t.bias + 16);
    __m512 out[R][2];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 rs = _mm512_set1_ps(t.row_quant[r].scale);
      const __m512i zero = _mm512_set1_epi32(t.row_quant[r].zero);
      const __m512i off0 = _mm512_mullo_epi32(col_sum0, zero);
      const __m512i off1 = _mm512_mullo_epi32(col_sum1, zero);
      out[r][0] = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][0], off0)),
                                              _mm512_mul_ps(rs, cs0)),
                                bias0);
      out[r][1] = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][1], off1)),
                                              _mm512_mul_ps(rs, cs1)),
                                bias1);
    }
    store_tile512<R>(out, t);
  }
};
#endif  // AVX512_VNNI

#endif  // AVX-512

}  // namespace
}  // namespace qkv::kernels::lowp
