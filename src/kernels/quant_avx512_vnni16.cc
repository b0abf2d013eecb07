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
// int32 lane holds at most 8 products (Q4_1: |q_w·q_x| ≤ 15·32768) or 4
// (Q8_0: ≤ 128·32768), below 2^24: its conversion to float32 is exact.
//
// Four blocks go through one zmm, 128-bit lane i = block i, in 4 chunks of
// 8 weights each: x of those 4 blocks is stored in that order (4 chunks of
// 4 × 8 words). Q4_1: a block's 16 nibble bytes widen to words (unpack with
// zero; bytes 0..7, then 8..15), and the low / high nibbles (and, shift) give
// weights 0..7, 8..15, 16..23, 24..31. Q8_0: each block's 32 bytes
// sign-extend to words, then the 4 × 4 128-bit lanes are transposed (once
// per row of W, for every row of x). The int32 lanes of a block are scaled by
// its d·dx (a permute of the loaded scales) and multiply-added into float32
// lanes, reduced once per row of W. Rows of x are padded with zero blocks to
// a multiple of 4; in the last group of a row of W, where it has fewer, only
// its blocks are read and the others taken as zero blocks (d = m = 0).
#include <immintrin.h>

#include <cstdint>

#include "kernels/simd/quant_int_rows.h"

namespace qkv::kernels {

extern const QuantKernels kQuantAvx2Int16;
extern const QuantPromptKernel kQuantPromptAvx512Vnni16;

namespace {

constexpr float kTiny = 0x1p-100f;  // see quantize_x_q16_reference

using RoundedX = quant::RoundedX<int16_t>;
// Rounds m rows of x (stride ldx) into this thread's scratch, laid out as the
// top of the file says (the same for Q4_1 and Q8_0; q4: keep Σ q_x).
RoundedX round_x(const float* x, int64_t ldx, int64_t m, int64_t k, bool q4) {
  const auto store = [](int16_t* p, __m128i v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
  };
  return quant::round_x<int16_t>(
      x, ldx, m, k, kTiny, q4,
      [&](int16_t* q, int64_t b, __m512i qa, __m512i qb) {
        const __m256i lo = _mm512_cvtsepi32_epi16(qa), hi = _mm512_cvtsepi32_epi16(qb);
        // chunk c (elements 8c .. 8c + 7) of block i at 32c + 8i
        int16_t* g = q + 128 * (b / 4) + 8 * (b % 4);
        store(g, _mm256_castsi256_si128(lo));
        store(g + 32, _mm256_extracti128_si256(lo, 1));
        store(g + 64, _mm256_castsi256_si128(hi));
        store(g + 96, _mm256_extracti128_si256(hi, 1));
      },
      4);
}

// Calls group(g, b, count) for each group of 4 blocks of a row of W
// (kBlockBytes each, `blocks` in all), b at its first block: count = 4 but in
// the last group, where the row has fewer (the group reads only those and
// takes the others as zero blocks: d = m = 0, meeting x's zero padding).
template <int64_t kBlockBytes, class Group>
inline void for_each_group(const uint8_t* row, int64_t blocks, Group&& group) {
  const int64_t whole = blocks / 4;
  for (int64_t g = 0; g < whole; ++g) group(g, row + 4 * kBlockBytes * g, int64_t{4});
  if (whole < (blocks + 3) / 4) group(whole, row + 4 * kBlockBytes * whole, blocks - 4 * whole);
}

// y[r, j] for R rows of x from row r0 and channels [j0, j1) (at most 16), Q4_1.
template <int R>
void q4_1_rows(const RoundedX& xq, int64_t r0, const QuantMatrix& w, const float* bias, float* y,
               int64_t ldy, int64_t j0, int64_t j1) {
  const int64_t nb = xq.nb;
  const __m512i nibble = _mm512_set1_epi16(0x0f);
  quant::ChannelSums<R> sums;
  for (int64_t j = j0; j < j1; ++j) {
    quant::prefetch_ahead(w, j);
    __m512 acc[R];
    __m256 acc_min[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), acc_min[r] = _mm256_setzero_ps();
    for_each_group<20>(
        w.data + j * w.row_bytes, w.k / 32, [&](int64_t g, const uint8_t* b, int64_t count) {
          const __m512i v = quant::q4_1_nibbles4(b, count);
          const __m512i bytes0 = _mm512_unpacklo_epi8(v, _mm512_setzero_si512());  // bytes 0..7
          const __m512i bytes1 = _mm512_unpackhi_epi8(v, _mm512_setzero_si512());  // bytes 8..15
          const __m512i w0 = _mm512_and_si512(bytes0, nibble),
                        w1 = _mm512_and_si512(bytes1, nibble);
          const __m512i w2 = _mm512_srli_epi16(bytes0, 4), w3 = _mm512_srli_epi16(bytes1, 4);
          const __m256 dm = quant::q4_1_scales4(b, count);
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            const int16_t* xr = xq.q + (r0 + r) * xq.k + 128 * g;
            __m512i s = _mm512_dpwssd_epi32(_mm512_setzero_si512(), w0, _mm512_loadu_si512(xr));
            s = _mm512_dpwssd_epi32(s, w1, _mm512_loadu_si512(xr + 32));
            s = _mm512_dpwssd_epi32(s, w2, _mm512_loadu_si512(xr + 64));
            s = _mm512_dpwssd_epi32(s, w3, _mm512_loadu_si512(xr + 96));
            quant::q4_1_accumulate4(s, dm, xq.s + (r0 + r) * 2 * nb + 8 * g, &acc[r], &acc_min[r]);
          }
        });
    for (int r = 0; r < R; ++r)
      sums.put(r, j - j0, _mm512_add_ps(acc[r], _mm512_zextps256_ps512(acc_min[r])));
  }
  sums.store(j0, j1 - j0, bias, y, ldy, r0);
}

// Q8_0 four blocks at a time (136 bytes at b, `count` of them read, the
// others 0): their q as words, the 4 × 4 128-bit lanes transposed so that
// w[c] holds weights 8c..8c+7 of block i on lane i, as x is stored.
inline void q8_0_words4(const uint8_t* b, int64_t count, __m512i w[4]) {
  const auto words = [&](int i) {
    return i < count ? _mm512_cvtepi8_epi16(
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 34 * i + 2)))
                     : _mm512_setzero_si512();
  };
  const __m512i q0 = words(0), q1 = words(1), q2 = words(2), q3 = words(3);
  const __m512i q01_low = _mm512_shuffle_i64x2(q0, q1, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i q01_high = _mm512_shuffle_i64x2(q0, q1, _MM_SHUFFLE(3, 2, 3, 2));
  const __m512i q23_low = _mm512_shuffle_i64x2(q2, q3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i q23_high = _mm512_shuffle_i64x2(q2, q3, _MM_SHUFFLE(3, 2, 3, 2));
  w[0] = _mm512_shuffle_i64x2(q01_low, q23_low, _MM_SHUFFLE(2, 0, 2, 0));
  w[1] = _mm512_shuffle_i64x2(q01_low, q23_low, _MM_SHUFFLE(3, 1, 3, 1));
  w[2] = _mm512_shuffle_i64x2(q01_high, q23_high, _MM_SHUFFLE(2, 0, 2, 0));
  w[3] = _mm512_shuffle_i64x2(q01_high, q23_high, _MM_SHUFFLE(3, 1, 3, 1));
}

// The same for Q8_0, in two sums of two chunks (4 products of at most
// 128·32768 per int32 lane, below 2^24).
template <int R>
void q8_0_rows(const RoundedX& xq, int64_t r0, const QuantMatrix& w, const float* bias, float* y,
               int64_t ldy, int64_t j0, int64_t j1) {
  const int64_t nb = xq.nb;
  quant::ChannelSums<R> sums;
  for (int64_t j = j0; j < j1; ++j) {
    quant::prefetch_ahead(w, j);
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for_each_group<34>(
        w.data + j * w.row_bytes, w.k / 32, [&](int64_t g, const uint8_t* b, int64_t count) {
          __m512i wc[4];
          q8_0_words4(b, count, wc);
          // d of the 4 blocks in the even lanes, 0 in the odd ones (and for blocks past count)
          const auto d = [&](int i) { return i < count ? load_u16(b + 34 * i) : 0; };
          const __m256 dd = _mm256_cvtph_ps(_mm_setr_epi32(d(0), d(1), d(2), d(3)));
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            const int16_t* xr = xq.q + (r0 + r) * xq.k + 128 * g;
            const auto dot2 = [&](int c) {
              const __m512i s = _mm512_dpwssd_epi32(_mm512_setzero_si512(), wc[c],
                                                    _mm512_loadu_si512(xr + 32 * c));
              return _mm512_cvtepi32_ps(
                  _mm512_dpwssd_epi32(s, wc[c + 1], _mm512_loadu_si512(xr + 32 * c + 32)));
            };
            const __m512 scale = quant::spread_even4(
                _mm256_mul_ps(dd, _mm256_loadu_ps(xq.s + (r0 + r) * 2 * nb + 8 * g)));
            acc[r] = _mm512_fmadd_ps(dot2(0), scale, acc[r]);
            acc[r] = _mm512_fmadd_ps(dot2(2), scale, acc[r]);
          }
        });
    for (int r = 0; r < R; ++r) sums.put(r, j - j0, acc[r]);
  }
  sums.store(j0, j1 - j0, bias, y, ldy, r0);
}

// This table's rounding of x and kernels, for quant::integer_gemv_block.
struct Int16Rows {
  // 8: a server's batch of 8 decodes W once (4 zmm of weights, 8 + 8 accumulators)
  static constexpr int kRowsPerPass = 8;
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
    "avx512_vnni16",
    &quant::integer_gemv_block<Int16Rows>,
    &quant::dequantize_rows<simd::Avx512>,
    16,
    kEveryFormat,  // the other formats on avx2_int16's kernels round x too
    &kQuantPromptAvx512Vnni16};

}  // namespace qkv::kernels
