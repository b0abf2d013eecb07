// The avx512_vnni16 table of quant_gemm.h: the few-rows product of Q4_1 and
// Q8_0 weights on 16-bit integer dot products (vpdpwssd, s16 × s16 → int32,
// two products per int32 lane), the other formats on avx2_int16's (the same
// rounding of x, vpmaddwd), dequantize_rows on the avx512 float code.
//
// Each call first rounds every row of x to 16 bits per block of 32
// (quantize_x_q16_reference: dx = max|x| / 32767, q = round(x / dx)), once
// per thread, into thread-local scratch kept from call to call; then, per
// block of W, the int32 Σ q_w·q_x is exact and
//   Q4_1 (w = d·q + m, q in 0..15):  Σ w·x̂ = d·dx·Σ q_w·q_x + m·(dx·Σ q_x)
//   Q8_0 (w = d·q, q int8):          Σ w·x̂ = d·dx·Σ q_w·q_x
// i.e. the float32 evaluation of the product with x̂ (the min term uses the
// rounded x's Σ q_x, so every term is that of one weight and one x̂). Every
// int32 lane holds at most 8 products (Q4_1: |q_w·q_x| ≤ 15·32768) or 2
// (Q8_0: ≤ 128·32768), below 2^24: its conversion to float32 is exact.
//
// Q4_1: four blocks go through one zmm, 128-bit lane i = block i: its 16
// nibble bytes widen to words (unpack with zero; bytes 0..7, then 8..15),
// and the low / high nibbles (and, shift) give weights 0..7, 8..15, 16..23,
// 24..31 of each block, so x of those 4 blocks is stored in that order (4
// chunks of 4 × 8 words). The int32 lanes of a block are scaled by its d·dx
// (a permute of the loaded scales) and multiply-added into float32 lanes,
// reduced once per row of W. Blocks past the last multiple of 4 go one at a
// time in 256-bit registers. Q8_0: one block per zmm (its 32 bytes
// sign-extended to words), x in its own order.
#include <immintrin.h>

#include <cstdint>

#include "kernels/simd/quant_int_rows.h"

namespace qkv::kernels {

extern const QuantKernels kQuantAvx2Int16;

namespace {

constexpr float kTiny = 0x1p-100f;  // see quantize_x_q16_reference

using RoundedX = quant::RoundedX<int16_t>;
inline float half(const uint8_t* p) { return quant::Bytes<simd::Avx512>::half(p); }
inline __m128i load128(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// Rounds m rows of x (stride ldx) into this thread's scratch, laid out for
// Q4_1 or Q8_0 (see the top of the file).
RoundedX round_x(const float* x, int64_t ldx, int64_t m, int64_t k, bool q4) {
  const int64_t full = k / 32 / 4 * 4;
  const auto store = [](int16_t* p, __m128i v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
  };
  return quant::round_x<int16_t>(
      x, ldx, m, k, kTiny, q4, [&](int16_t* q, int64_t b, __m512i qa, __m512i qb) {
        const __m256i lo = _mm512_cvtsepi32_epi16(qa), hi = _mm512_cvtsepi32_epi16(qb);
        if (q4 && b < full) {  // chunk c (elements 8c .. 8c + 7) of block i at 32c + 8i
          int16_t* g = q + 128 * (b / 4) + 8 * (b % 4);
          store(g, _mm256_castsi256_si128(lo));
          store(g + 32, _mm256_extracti128_si256(lo, 1));
          store(g + 64, _mm256_castsi256_si128(hi));
          store(g + 96, _mm256_extracti128_si256(hi, 1));
        } else {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), lo);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b + 16), hi);
        }
      });
}

// y[r, j] for R rows of x from row r0 and channels [j0, j1), Q4_1.
template <int R>
void q4_1_rows(const RoundedX& xq, int64_t r0, const QuantMatrix& w, const float* bias, float* y,
               int64_t ldy, int64_t j0, int64_t j1) {
  const int64_t nb = xq.nb, groups = nb / 4;
  const __m512i nibble = _mm512_set1_epi16(0x0f);
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* row = w.data + j * w.row_bytes;
    __m512 acc[R];
    __m256 acc_min[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), acc_min[r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t* b = row + 80 * g;
      const __m512i v = quant::q4_1_nibbles4(b);
      const __m512i bytes0 = _mm512_unpacklo_epi8(v, _mm512_setzero_si512());  // bytes 0..7
      const __m512i bytes1 = _mm512_unpackhi_epi8(v, _mm512_setzero_si512());  // bytes 8..15
      const __m512i w0 = _mm512_and_si512(bytes0, nibble), w1 = _mm512_and_si512(bytes1, nibble);
      const __m512i w2 = _mm512_srli_epi16(bytes0, 4), w3 = _mm512_srli_epi16(bytes1, 4);
      const __m256 dm = quant::q4_1_scales4(b);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const int16_t* xr = xq.q + (r0 + r) * xq.k + 128 * g;
        __m512i s = _mm512_dpwssd_epi32(_mm512_setzero_si512(), w0, _mm512_loadu_si512(xr));
        s = _mm512_dpwssd_epi32(s, w1, _mm512_loadu_si512(xr + 32));
        s = _mm512_dpwssd_epi32(s, w2, _mm512_loadu_si512(xr + 64));
        s = _mm512_dpwssd_epi32(s, w3, _mm512_loadu_si512(xr + 96));
        quant::q4_1_accumulate4(s, dm, xq.s + (r0 + r) * 2 * nb + 8 * g, &acc[r], &acc_min[r]);
      }
    }
    __m256 tail[R];
    float tail_min[R];
    for (int r = 0; r < R; ++r) tail[r] = _mm256_setzero_ps(), tail_min[r] = 0.0f;
    for (int64_t bi = 4 * groups; bi < nb; ++bi) {
      const uint8_t* b = row + 20 * bi;
      const __m256i v = _mm256_cvtepu8_epi16(load128(b + 4));
      const __m256i lo = _mm256_and_si256(v, _mm256_set1_epi16(0x0f));  // weights 0..15
      const __m256i hi = _mm256_srli_epi16(v, 4);                       // 16..31
      const float d = half(b), mn = half(b + 2);
      for (int r = 0; r < R; ++r) {
        const int16_t* xr = xq.q + (r0 + r) * xq.k + 32 * bi;
        const float* sr = xq.s + (r0 + r) * 2 * nb + 2 * bi;
        __m256i s = _mm256_dpwssd_epi32(_mm256_setzero_si256(), lo,
                                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr)));
        s = _mm256_dpwssd_epi32(s, hi,
                                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + 16)));
        tail[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * sr[0]), tail[r]);
        tail_min[r] += mn * sr[1];
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 all =
          _mm512_add_ps(acc[r], _mm512_zextps256_ps512(_mm256_add_ps(acc_min[r], tail[r])));
      const float sum = _mm512_reduce_add_ps(all) + tail_min[r];
      y[(r0 + r) * ldy + j] = bias != nullptr ? sum + bias[j] : sum;
    }
  }
}

// The same for Q8_0, a block at a time.
template <int R>
void q8_0_rows(const RoundedX& xq, int64_t r0, const QuantMatrix& w, const float* bias, float* y,
               int64_t ldy, int64_t j0, int64_t j1) {
  const int64_t nb = xq.nb;
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* row = w.data + j * w.row_bytes;
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t bi = 0; bi < nb; ++bi) {
      const uint8_t* b = row + 34 * bi;
      const __m512i wv =
          _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)));
      const float d = half(b);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512i s = _mm512_dpwssd_epi32(_mm512_setzero_si512(), wv,
                                              _mm512_loadu_si512(xq.q + (r0 + r) * xq.k + 32 * bi));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),
                                 _mm512_set1_ps(d * xq.s[(r0 + r) * 2 * nb + 2 * bi]), acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const float sum = _mm512_reduce_add_ps(acc[r]);
      y[(r0 + r) * ldy + j] = bias != nullptr ? sum + bias[j] : sum;
    }
  }
}

// This table's rounding of x and kernels, for quant::integer_gemv_block.
struct Int16Rows {
  static constexpr auto round_x = &kernels::round_x;
  template <int R, bool kQ4>
  static constexpr auto rows = kQ4 ? &q4_1_rows<R> : &q8_0_rows<R>;
  // The other formats on avx2_int16's kernels: x rounded the same way.
  static void other_formats(const float* x, int64_t ldx, int64_t m, const QuantMatrix& w,
                            const float* bias, float* y, int64_t ldy, int64_t c0, int64_t c1) {
    kQuantAvx2Int16.gemv_block(x, ldx, m, w, bias, y, ldy, c0, c1);
  }
};

}  // namespace

extern const QuantKernels kQuantAvx512Vnni16 = {
    "avx512_vnni16", &quant::integer_gemv_block<Int16Rows>, &quant::dequantize_rows<simd::Avx512>,
    16, kEveryFormat};  // the other formats on avx2_int16's kernels round x too

}  // namespace qkv::kernels
