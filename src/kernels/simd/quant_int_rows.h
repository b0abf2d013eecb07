// What the integer-x few-rows tables of quant_gemm.h (quant_avx512_vnni.cc:
// x rounded to int8; quant_avx512_vnni16.cc: to int16) share: the rounding
// of x per block of 32 into thread-local scratch, and the driver that sends
// the formats a table has kernels for (T::has_rows) to them and every other
// format to the table's choice (T::other_formats). Each file keeps its own layout of the rounded x
// and its own dot products. AVX-512 (and F16C) code: include only from files compiled for it.
#pragma once

#include <immintrin.h>

#include <bit>
#include <cstdint>
#include <limits>

#include "kernels/simd/quant_rows.h"
#include "kernels/simd/rounded_x.h"

namespace qkv::kernels::quant {
namespace {

// One block of 32 floats at p rounded as quantize_x_reference with Int's
// range (quant_gemm.h: dx = max|x| / max, q = round(x / dx), blocks below
// `tiny` to 0): q of elements 0..15 and 16..31 as int32 lanes, dx and Σ q.
template <class Int>
inline void round_block(const float* p, float tiny, __m512i* qa, __m512i* qb, float* dx,
                        int32_t* sum) {
  constexpr float kMax = std::numeric_limits<Int>::max();
  const __m512 a = _mm512_loadu_ps(p), b = _mm512_loadu_ps(p + 16);
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
  // max of |x| as integer bits: orders Inf and NaN above every finite value
  const __m512i bits = _mm512_max_epi32(_mm512_and_si512(_mm512_castps_si512(a), magnitude),
                                        _mm512_and_si512(_mm512_castps_si512(b), magnitude));
  const float amax = std::bit_cast<float>(_mm512_reduce_max_epi32(bits));
  const bool is_tiny = amax < tiny;
  *dx = is_tiny ? 0.0f : amax / kMax;
  const __m512 id = _mm512_set1_ps(is_tiny ? 0.0f : kMax / amax);
  *qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, id));
  *qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, id));
  *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(*qa, *qb));
}

// Rounds m rows of x (stride ldx) into this thread's scratch (rounded_x.h),
// each padded to a multiple of `group` blocks: store(q_row, b, qa, qb) writes
// block b's rounded values (int32 lanes from round_block) in the table's
// layout.
template <class Int, class Store>
RoundedX<Int> round_x(const float* x, int64_t ldx, int64_t m, int64_t k, float tiny, bool q4,
                      Store store, int64_t group = 1) {
  return round_rows<Int>(
      x, ldx, m, k, q4,
      [&](const float* p, Int* q, int64_t b, float* dx, int32_t* sum) {
        __m512i qa, qb;
        round_block<Int>(p, tiny, &qa, &qb, dx, sum);
        store(q, b, qa, qb);
      },
      group);
}

// Four blocks of kBytes from b whose 16 nibble bytes start kQs bytes into
// each (`count` of them read, the others 0): block i's on 128-bit lane i.
template <int64_t kBytes, int64_t kQs>
inline __m512i nibbles4(const uint8_t* b, int64_t count = 4) {
  const auto load128 = [](const uint8_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  };
  __m512i v = _mm512_zextsi128_si512(load128(b + kQs));
  if (count > 1) v = _mm512_inserti32x4(v, load128(b + kBytes + kQs), 1);
  if (count > 2) v = _mm512_inserti32x4(v, load128(b + 2 * kBytes + kQs), 2);
  if (count > 3) v = _mm512_inserti32x4(v, load128(b + 3 * kBytes + kQs), 3);
  return v;
}

// Q4_1 four blocks at a time (80 bytes at b; `count` of them read, the others
// 0): their 16 nibble bytes each, block i on 128-bit lane i.
inline __m512i q4_1_nibbles4(const uint8_t* b, int64_t count = 4) {
  return nibbles4<20, 4>(b, count);
}

// The fp16 d that starts each of 4 blocks of kBytes bytes (Q4_0, Q5_0,
// Q8_0), as floats in the even lanes; the odd lanes, and blocks past count, 0.
template <int64_t kBytes>
inline __m256 d_halves4(const uint8_t* b, int64_t count) {
  const auto d = [&](int i) { return i < count ? load_u16(b + kBytes * i) : 0; };
  return _mm256_cvtph_ps(_mm_setr_epi32(d(0), d(1), d(2), d(3)));
}

// The fp16 {d, m} that start each of 4 blocks of kBytes bytes (Q4_1, Q5_1)
// → floats d0 m0 d1 m1 ... d3 m3 (0 past count).
template <int64_t kBytes>
inline __m256 dm_halves4(const uint8_t* b, int64_t count) {
  const auto dm = [&](int i) { return i < count ? load_u32(b + kBytes * i) : 0; };
  return _mm256_cvtph_ps(_mm_setr_epi32(dm(0), dm(1), dm(2), dm(3)));
}

// Q4_1's {d, m} of four blocks (80 bytes at b).
inline __m256 q4_1_scales4(const uint8_t* b, int64_t count = 4) { return dm_halves4<20>(b, count); }

// Even lanes 0, 2, 4, 6 of v (a value per block of 4, e.g. d·dx) spread so
// that 128-bit lane i holds block i's.
inline __m512 spread_even4(__m256 v) {
  const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
  return _mm512_permutexvar_ps(spread, _mm512_castps256_ps512(v));
}

// One row of x meeting them: sums (int32, 128-bit lane i = block i's Σ q_w·q_x)
// scaled by d_i·dx_i into acc, and m_i·sx_i added into acc_min's odd lanes;
// dm from q4_1_scales4, xs the row's {dx, sx} of the 4 blocks.
inline void q4_1_accumulate4(__m512i sums, __m256 dm, const float* xs, __m512* acc,
                             __m256* acc_min) {
  const __m256 sc = _mm256_mul_ps(dm, _mm256_loadu_ps(xs));
  *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), spread_even4(sc), *acc);
  *acc_min = _mm256_mask_add_ps(*acc_min, 0xaa, *acc_min, sc);
}

// The 16 lanes of each of 16 vectors summed: lane c of the result is the sum
// of rows[c]. A transposing tree (unpack, then 128-bit shuffles) of 15 adds
// where 16 separate reductions take 16 × 4.
inline __m512 sum_each_of_16(const float (*rows)[16]) {
  __m512 pairs[8];  // 128-bit lane: {a0 + a2, b0 + b2, a1 + a3, b1 + b3} of rows a, b
  for (int i = 0; i < 8; ++i) {
    const __m512 a = _mm512_load_ps(rows[2 * i]), b = _mm512_load_ps(rows[2 * i + 1]);
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  }
  // 128-bit lane: the partial sums of rows 4i .. 4i + 3 (the pairs moved as doubles)
  __m512 quads[4];
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(pairs[2 * i]), b = _mm512_castps_pd(pairs[2 * i + 1]);
    quads[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // {a0 + a1, a2 + a3, b0 + b1, b2 + b3} of 128-bit lanes
  const auto fold = [](__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  };
  return fold(fold(quads[0], quads[1]), fold(quads[2], quads[3]));
}

// A few-rows kernel's 16-lane sums of R rows × up to 16 channels from j0,
// kept until all are there, then reduced together (sum_each_of_16) and
// written (+ bias) a row of channels at a time.
template <int R>
class ChannelSums {
 public:
  void put(int r, int64_t channel, __m512 sums) { _mm512_store_ps(sums_[r][channel], sums); }
  // y[r0 + r, j0 + c] for c < channels (≤ 16).
  void store(int64_t j0, int64_t channels, const float* bias, float* y, int64_t ldy, int64_t r0) {
    const __mmask16 mask = static_cast<__mmask16>((1u << channels) - 1);
    const __m512 b = bias != nullptr ? _mm512_maskz_loadu_ps(mask, bias + j0) : _mm512_setzero_ps();
    for (int r = 0; r < R; ++r) {
      for (int64_t c = channels; c < 16; ++c) _mm512_store_ps(sums_[r][c], _mm512_setzero_ps());
      _mm512_mask_storeu_ps(y + (r0 + r) * ldy + j0, mask,
                            _mm512_add_ps(sum_each_of_16(sums_[r]), b));
    }
  }

 private:
  alignas(64) float sums_[R][16][16];
};

// The few-rows product of an integer table T: the formats T::has_rows meet x
// rounded by T::round_x in T::rows<R>(format) (R rows from r0, channels [j0,
// j1)), in groups of 16 channels meeting the rows T::kRowsPerPass at a time
// (each group's weights decoded once per pass); other formats
// run T::other_formats.
template <class T>
void integer_gemv_block(const float* x, int64_t ldx, int64_t m, const QuantMatrix& w,
                        const float* bias, float* y, int64_t ldy, int64_t c0, int64_t c1) {
  if (!T::has_rows(w.format)) return T::other_formats(x, ldx, m, w, bias, y, ldy, c0, c1);
  // Q8_0 alone has no min term, and so needs no Σ q_x.
  const auto xq = T::round_x(x, ldx, m, w.k, w.format != BlockFormat::kQ8_0);
  for_each_row_block<T::kRowsPerPass>(m, c0, c1, [&]<int R>(int64_t r0, int64_t j0, int64_t j1) {
    T::template rows<R>(w.format)(xq, r0, w, bias, y, ldy, j0, j1);
  });
}

}  // namespace
}  // namespace qkv::kernels::quant
