// The avx2_int16 table of quant_gemm.h, the default on AVX2 CPUs: the
// few-rows product of every block format on 16-bit integer dot products
// (vpmaddwd: s16 × s16, two products summed per int32 lane); dequantize_rows
// is the avx2 float code's. It computes what avx512_vnni16 computes for Q4_1
// and Q8_0, with 256-bit registers and without VNNI.
//
// Each call first rounds every row of x to 16 bits per block of 32, bit for
// bit as quantize_x_q16_reference (dx = max|x| / 32767, q = round(x / dx)),
// once per thread, into thread-local scratch (rounded_x.h) in x's own order.
// Each 32-weight (sub-)block of W widens to two registers of 16 signed words
// (simd/quant_int16_blocks.h: w = d·q_w (+ m)). Per block and row of x the int32
// Σ q_w·q_x is exact, then
//   Σ w·x̂ = (d·dx)·Σ q_w·q_x (+ m·(dx·Σ q_x) for Q4_1, Q5_1, Q4_K, Q5_K).
// Each int32 lane holds 4 products, at most 128·32767 each except Q6_K's, so
// below 2^24 and exact in float32; Q6_K's (≤ 4096·32767) round once there.
// A row's block terms are summed in block order whatever the number of rows,
// so a row gets the same y alone as among others.
#include <immintrin.h>

#include <bit>
#include <cstdint>

#include "kernels/simd/quant_int16_blocks.h"

namespace qkv::kernels {
namespace {

using namespace int16_blocks;

constexpr float kTiny = 0x1p-100f;  // see quantize_x_q16_reference

using RoundedX = quant::RoundedX<int16_t>;
inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Block b of a row (the 32 floats at p) rounded into q + 32·b: dx and Σ q.
void round_block(const float* p, int16_t* q, int64_t b, float* dx, int32_t* sum) {
  __m256 v[4];
  __m256i bits = _mm256_setzero_si256();
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(p + 8 * i);
    // max of |x| as integer bits: orders Inf and NaN above every finite value
    bits = _mm256_max_epi32(bits, _mm256_and_si256(_mm256_castps_si256(v[i]), magnitude));
  }
  __m128i m4 = _mm_max_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
  m4 = _mm_max_epi32(m4, _mm_shuffle_epi32(m4, 0x4e));
  m4 = _mm_max_epi32(m4, _mm_shuffle_epi32(m4, 0xb1));
  const float amax = std::bit_cast<float>(_mm_cvtsi128_si32(m4));
  const bool is_tiny = amax < kTiny;
  *dx = is_tiny ? 0.0f : amax / 32767.0f;
  const __m256 id = _mm256_set1_ps(is_tiny ? 0.0f : 32767.0f / amax);
  __m256i qi[4];
  for (int i = 0; i < 4; ++i) qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
  const __m256i total =
      _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
  *sum = _mm_cvtsi128_si32(s4);
  // packs interleaves the 128-bit lanes: {0..3, 8..11, 4..7, 12..15} → in order
  for (int h = 0; h < 2; ++h)
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(q + 32 * b + 16 * h),
        _mm256_permute4x64_epi64(_mm256_packs_epi32(qi[2 * h], qi[2 * h + 1]), 0xd8));
}

// y[r, j] for R rows of x from row r0 and channels [j0, j1).
template <class F, int R>
void rows(const RoundedX& xq, int64_t r0, const QuantMatrix& w, const float* bias, float* y,
          int64_t ldy, int64_t j0, int64_t j1) {
  const int64_t nb = xq.nb;
  for (int64_t j = j0; j < j1; ++j) {
    quant::prefetch_ahead(w, j);
    const uint8_t* row = w.data + j * w.row_bytes;
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    __m256 acc_min = _mm256_setzero_ps();  // lane r: row r0 + r's Σ m·sx
    for (int64_t bi = 0; bi < nb / F::kSubs; ++bi) {
      const uint8_t* b = row + F::kBytes * bi;
      float d[F::kSubs], m[F::kSubs];
      F::scales(b, d, m);
#pragma GCC unroll 8
      for (int s = 0; s < F::kSubs; ++s) {
        const int64_t xb = bi * F::kSubs + s;  // x's block
        __m256i wv[2];
        F::words(b, s, wv);
        // d·dx of the R rows, lane r
        const __m256 scale = _mm256_mul_ps(_mm256_set1_ps(d[s]),
                                           _mm256_loadu_ps(xq.dx_by_block + xb * xq.ld_sx + r0));
        if constexpr (F::kHasMin)
          acc_min = _mm256_fmadd_ps(_mm256_set1_ps(m[s]),
                                    _mm256_loadu_ps(xq.sx_by_block + xb * xq.ld_sx + r0), acc_min);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const int16_t* xr = xq.q + (r0 + r) * xq.k + 32 * xb;
          const __m256i sum = _mm256_add_epi32(_mm256_madd_epi16(wv[0], load256(xr)),
                                               _mm256_madd_epi16(wv[1], load256(xr + 16)));
          acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum),
                                   _mm256_permutevar8x32_ps(scale, _mm256_set1_epi32(r)), acc[r]);
        }
      }
    }
    alignas(32) float mins[8];
    _mm256_store_ps(mins, acc_min);
    for (int r = 0; r < R; ++r) {
      const float sum = simd::Avx2::reduce_add(acc[r]) + mins[r];
      y[(r0 + r) * ldy + j] = bias != nullptr ? sum + bias[j] : sum;
    }
  }
}

template <class F>
void gemv_format(const float* x, int64_t ldx, int64_t m, const QuantMatrix& w, const float* bias,
                 float* y, int64_t ldy, int64_t c0, int64_t c1) {
  const RoundedX xq = quant::round_rows<int16_t>(x, ldx, m, w.k, F::kHasMin, round_block);
  quant::for_each_row_block<quant::kRowsPerPass>(m, c0, c1,
                                                 [&]<int R>(int64_t r0, int64_t j0, int64_t j1) {
                                                   rows<F, R>(xq, r0, w, bias, y, ldy, j0, j1);
                                                 });
}

void gemv_block(const float* x, int64_t ldx, int64_t m, const QuantMatrix& w, const float* bias,
                float* y, int64_t ldy, int64_t c0, int64_t c1) {
  Int16Formats::dispatch(w.format,
                         [&]<class F>() { gemv_format<F>(x, ldx, m, w, bias, y, ldy, c0, c1); });
}

}  // namespace

extern const QuantKernels kQuantAvx2Int16 = {
    "avx2_int16", &gemv_block, &quant::dequantize_rows<simd::Avx2>, 16, Int16Formats::kMask};

}  // namespace qkv::kernels
