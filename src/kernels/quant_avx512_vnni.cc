// The avx512_vnni table of quant_gemm.h: the few-rows product of Q4_1 and
// Q8_0 weights on 8-bit integer dot products (vpdpbusd, u8 × s8 → int32),
// everything else (other formats, dequantize_rows) on the avx512 float code.
//
// Each call first rounds every row of x to 8 bits per block of 32
// (quantize_x_q8_reference: dx = max|x| / 127, q = round(x / dx)), once per
// thread, into thread-local scratch kept from call to call; then, per block
// of W, the int32 Σ q_w·q_x is exact and
//   Q4_1 (w = d·q + m, q in 0..15):  Σ w·x̂ = d·dx·Σ q_w·q_x + m·(dx·Σ q_x)
//   Q8_0 (w = d·q, q int8):          Σ w·x̂ = d·dx·Σ q_w·q_x
// For Q8_0 x is stored as u8 q_x + 128 and the kernel subtracts 128·Σ q_w
// (one more vpdpbusd per block of W, shared by the rows of x).
//
// Four blocks of W go through one zmm: for Q4_1 their 4 × 16 nibble bytes
// give the low nibbles (elements 0..15 of each block, one 128-bit lane per
// block) and the high ones (16..31), so x of those 4 blocks is stored in that
// order; for Q8_0 two zmm of 2 blocks each, x in its own order. The int32
// lanes of a block are scaled by its d·dx (a permute of the loaded scales)
// and multiply-added into float32 lanes, reduced once per row of W. Blocks
// past the last multiple of 4 go one at a time in 128/256-bit registers.
#include <immintrin.h>

#include <cstdint>

#include "kernels/simd/quant_int_rows.h"

namespace qkv::kernels {
namespace {

constexpr float kTiny = 0x1p-120f;  // see quantize_x_q8_reference

using RoundedX = quant::RoundedX<int8_t>;
inline float half(const uint8_t* p) { return quant::Bytes<simd::Avx512>::half(p); }

// Rounds m rows of x (stride ldx) into this thread's scratch, laid out for
// Q4_1 or Q8_0 (see the top of the file).
RoundedX round_x(const float* x, int64_t ldx, int64_t m, int64_t k, bool q4) {
  const int64_t full = k / 32 / 4 * 4;
  const __m128i flip = _mm_set1_epi8(static_cast<char>(0x80));
  return quant::round_x<int8_t>(
      x, ldx, m, k, kTiny, q4, [&](int8_t* q, int64_t b, __m512i qa, __m512i qb) {
        __m128i lo = _mm512_cvtsepi32_epi8(qa), hi = _mm512_cvtsepi32_epi8(qb);
        int8_t *plo = q + 32 * b, *phi = plo + 16;
        if (q4 && b < full) {
          plo = q + 128 * (b / 4) + 16 * (b % 4);
          phi = plo + 64;
        }
        if (!q4) lo = _mm_xor_si128(lo, flip), hi = _mm_xor_si128(hi, flip);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(plo), lo);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(phi), hi);
      });
}

// y[r, j] for R rows of x from row r0 and channels [j0, j1), Q4_1.
template <int R>
void q4_1_rows(const RoundedX& xq, int64_t r0, const QuantMatrix& w, const float* bias, float* y,
               int64_t ldy, int64_t j0, int64_t j1) {
  const int64_t nb = xq.nb, groups = nb / 4;
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  for (int64_t j = j0; j < j1; ++j) {
    quant::prefetch_ahead(w, j);
    const uint8_t* row = w.data + j * w.row_bytes;
    __m512 acc[R];
    __m256 acc_min[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), acc_min[r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t* b = row + 80 * g;
      const __m512i v = quant::q4_1_nibbles4(b);
      const __m512i lo = _mm512_and_si512(v, nibble);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
      const __m256 dm = quant::q4_1_scales4(b);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const int8_t* xr = xq.q + (r0 + r) * xq.k + 128 * g;
        __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xr));
        s = _mm512_dpbusd_epi32(s, hi, _mm512_loadu_si512(xr + 64));
        quant::q4_1_accumulate4(s, dm, xq.s + (r0 + r) * 2 * nb + 8 * g, &acc[r], &acc_min[r]);
      }
    }
    __m128 tail[R];
    float tail_min[R];
    for (int r = 0; r < R; ++r) tail[r] = _mm_setzero_ps(), tail_min[r] = 0.0f;
    for (int64_t bi = 4 * groups; bi < nb; ++bi) {
      const uint8_t* b = row + 20 * bi;
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
      const __m128i lo = _mm_and_si128(v, _mm_set1_epi8(0x0f));
      const __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0f));
      const float d = half(b), mn = half(b + 2);
      for (int r = 0; r < R; ++r) {
        const int8_t* xr = xq.q + (r0 + r) * xq.k + 32 * bi;
        const float* sr = xq.s + (r0 + r) * 2 * nb + 2 * bi;
        __m128i s = _mm_dpbusd_epi32(_mm_setzero_si128(), lo,
                                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(xr)));
        s = _mm_dpbusd_epi32(s, hi, _mm_loadu_si128(reinterpret_cast<const __m128i*>(xr + 16)));
        tail[r] = _mm_fmadd_ps(_mm_cvtepi32_ps(s), _mm_set1_ps(d * sr[0]), tail[r]);
        tail_min[r] += mn * sr[1];
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 all = _mm512_add_ps(acc[r], _mm512_add_ps(_mm512_zextps256_ps512(acc_min[r]),
                                                             _mm512_zextps128_ps512(tail[r])));
      const float sum = _mm512_reduce_add_ps(all) + tail_min[r];
      y[(r0 + r) * ldy + j] = bias != nullptr ? sum + bias[j] : sum;
    }
  }
}

// The same for Q8_0 (x as u8 q + 128).
template <int R>
void q8_0_rows(const RoundedX& xq, int64_t r0, const QuantMatrix& w, const float* bias, float* y,
               int64_t ldy, int64_t j0, int64_t j1) {
  const int64_t nb = xq.nb, groups = nb / 4;
  const __m512i u128 = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i spread_a = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
  const __m512i spread_b = _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6);
  const auto load256 = [](const void* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  };
  for (int64_t j = j0; j < j1; ++j) {
    quant::prefetch_ahead(w, j);
    const uint8_t* row = w.data + j * w.row_bytes;
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t* b = row + 136 * g;
      const __m512i wa =
          _mm512_inserti64x4(_mm512_castsi256_si512(load256(b + 2)), load256(b + 36), 1);
      const __m512i wb =
          _mm512_inserti64x4(_mm512_castsi256_si512(load256(b + 70)), load256(b + 104), 1);
      // −128·Σ q_w per int32 lane, undoing the + 128 of x
      const __m512i ca = _mm512_sub_epi32(_mm512_setzero_si512(),
                                          _mm512_dpbusd_epi32(_mm512_setzero_si512(), u128, wa));
      const __m512i cb = _mm512_sub_epi32(_mm512_setzero_si512(),
                                          _mm512_dpbusd_epi32(_mm512_setzero_si512(), u128, wb));
      // d of the 4 blocks in the even halves, 0 in the odd ones (not the q bytes)
      const __m128i dbits =
          _mm_setr_epi32(load_u16(b), load_u16(b + 34), load_u16(b + 68), load_u16(b + 102));
      const __m256 dd = _mm256_cvtph_ps(dbits);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const int8_t* xr = xq.q + (r0 + r) * xq.k + 128 * g;
        const __m512i sa = _mm512_dpbusd_epi32(ca, _mm512_loadu_si512(xr), wa);
        const __m512i sb = _mm512_dpbusd_epi32(cb, _mm512_loadu_si512(xr + 64), wb);
        const __m512 sc = _mm512_castps256_ps512(
            _mm256_mul_ps(dd, _mm256_loadu_ps(xq.s + (r0 + r) * 2 * nb + 8 * g)));
        acc[r] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(sa), _mm512_permutexvar_ps(spread_a, sc), acc[r]);
        acc[r] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(sb), _mm512_permutexvar_ps(spread_b, sc), acc[r]);
      }
    }
    __m256 tail[R];
    for (int r = 0; r < R; ++r) tail[r] = _mm256_setzero_ps();
    for (int64_t bi = 4 * groups; bi < nb; ++bi) {
      const uint8_t* b = row + 34 * bi;
      const __m256i v = load256(b + 2);
      const __m256i c =
          _mm256_sub_epi32(_mm256_setzero_si256(),
                           _mm256_dpbusd_epi32(_mm256_setzero_si256(),
                                               _mm256_set1_epi8(static_cast<char>(0x80)), v));
      const float d = half(b);
      for (int r = 0; r < R; ++r) {
        const __m256i s = _mm256_dpbusd_epi32(c, load256(xq.q + (r0 + r) * xq.k + 32 * bi), v);
        tail[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s),
                                  _mm256_set1_ps(d * xq.s[(r0 + r) * 2 * nb + 2 * bi]), tail[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const float sum =
          _mm512_reduce_add_ps(_mm512_add_ps(acc[r], _mm512_zextps256_ps512(tail[r])));
      y[(r0 + r) * ldy + j] = bias != nullptr ? sum + bias[j] : sum;
    }
  }
}

// This table's rounding of x and kernels, for quant::integer_gemv_block.
struct Int8Rows {
  static constexpr int kRowsPerPass = 4;
  static constexpr auto round_x = &kernels::round_x;
  static bool has_rows(BlockFormat f) { return f == BlockFormat::kQ4_1 || f == BlockFormat::kQ8_0; }
  template <int R>
  static auto rows(BlockFormat f) {
    return f == BlockFormat::kQ4_1 ? &q4_1_rows<R> : &q8_0_rows<R>;
  }
  static constexpr auto other_formats = &quant::gemv_block<simd::Avx512>;  // float x
};

}  // namespace

extern const QuantKernels kQuantAvx512Vnni = {
    "avx512_vnni", &quant::integer_gemv_block<Int8Rows>, &quant::dequantize_rows<simd::Avx512>, 8,
    rounded_formats({BlockFormat::kQ4_1, BlockFormat::kQ8_0})};

}  // namespace qkv::kernels
