// The avx512_vnni16 table of quant_gemm.h: the few-rows product of Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K weights on 16-bit integer dot
// products (vpdpwssd, s16 × s16 → int32, two products per int32 lane),
// IQ4_NL on avx2_int16's (the same rounding of x, vpmaddwd),
// dequantize_rows on the avx512 float code.
//
// Each call first rounds every row of x to 16 bits per block of 32
// (quantize_x_q16_reference: dx = max|x| / 32767, q = round(x / dx)), once
// per thread, into thread-local scratch kept from call to call; then, per
// block of W, the int32 Σ q_w·q_x is exact and
//   Q4_1 (w = d·q + m, q in 0..15):  Σ w·x̂ = d·dx·Σ q_w·q_x + m·(dx·Σ q_x)
//   Q5_0 (w = d·(q − 16), q 0..31):  the same with m = −16·d (Q4_0: −8·d;
//                                    Q5_1: q 0..31 and its own m)
//   Q8_0 (w = d·q, q int8):          Σ w·x̂ = d·dx·Σ q_w·q_x
//   Q4_K, Q5_K, per sub-block of 32: Q4_1's, with d·sc and −dmin·mn for d and m
//   Q6_K (w = d·sc·(q − 32)):        Q8_0's, with sc·(q − 32) as the words
// i.e. the float32 evaluation of the product with x̂ (the min term uses the
// rounded x's Σ q_x, so every term is that of one weight and one x̂). Every
// int32 lane holds at most 8 products (Q4_1, Q4_K: |q_w·q_x| ≤ 15·32768, Q5_0, Q5_K:
// ≤ 31·32768) or 4 (Q8_0: ≤ 128·32768), below 2^24: its conversion to
// float32 is exact (Q6_K: 8 of ≤ 4064·32768, below 2^31, rounded once).
//
// Four blocks go through one zmm, 128-bit lane i = block i, in 4 chunks of
// 8 weights each: x of those 4 blocks is stored in that order (4 chunks of
// 4 × 8 words). Q4_1: a block's 16 nibble bytes widen to words (unpack with
// zero; bytes 0..7, then 8..15), and the low / high nibbles (and, shift) give
// weights 0..7, 8..15, 16..23, 24..31; Q5_0 adds 16 where a weight's fifth
// bit is set (a masked add, the mask from the block's qh). Q8_0: each block's 32 bytes
// sign-extend to words, then the 4 × 4 128-bit lanes are transposed (once
// per row of W, for every row of x). The int32 lanes of a block are scaled by
// its d·dx (a permute of the loaded scales) and multiply-added into float32
// lanes, reduced once per row of W. Rows of x are padded with zero blocks to
// a multiple of 4; in the last group of a row of W, where it has fewer, only
// its blocks are read and the others taken as zero blocks (d = m = 0).
#include <immintrin.h>

#include <cstdint>

#include "kernels/simd/quant_int16_blocks.h"
#include "kernels/simd/quant_int_rows.h"

namespace qkv::kernels {

extern const QuantKernels kQuantAvx2Int16;
extern const QuantPromptKernel kQuantPromptAvx512Vnni16;

namespace {

constexpr float kTiny = 0x1p-100f;  // see quantize_x_q16_reference

using RoundedX = quant::RoundedX<int16_t>;
// Rounds m rows of x (stride ldx) into this thread's scratch, laid out as the
// top of the file says (the same for every format; q4: keep Σ q_x, which the
// formats with a min need).
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

// The nibble formats this table multiplies on 16-bit products, w = d·q + m:
// blocks of kBlockBytes whose 16 nibble bytes start at byte kNibbles, q in
// 0..15, or 0..31 with the fifth bits (32 of them, qh) at byte kFifthBits
// (≥ 0) added; m the half beside d (kStoredMin) or kMinPerD·d.
template <int64_t kBlockBytes, int64_t kNibbles, int64_t kFifthBits, bool kStoredMin, int kMinPerD>
struct NibbleLayout {
  static constexpr int64_t kBytes = kBlockBytes, kQs = kNibbles;
  static constexpr bool kHighBits = kFifthBits >= 0;
  // d0 m0 d1 m1 ... d3 m3 (0 past count).
  static __m256 scales4(const uint8_t* b, int64_t count) {
    if constexpr (kStoredMin) {
      return quant::dm_halves4<kBytes>(b, count);
    } else {
      const __m256 d_0 = quant::d_halves4<kBytes>(b, count);  // d0 0 d1 0 ..
      const float k = static_cast<float>(kMinPerD);
      return _mm256_mul_ps(_mm256_moveldup_ps(d_0), _mm256_setr_ps(1, k, 1, k, 1, k, 1, k));
    }
  }
  // Adds 16 to each weight word whose fifth bit is set. Word 8L + t of w[c]
  // is weight 8c + t of block L, whose bit is bit t of byte c of block L's qh:
  // w[c]'s mask gathers byte c of the four qh.
  static void add_high_bits4(const uint8_t* b, int64_t count, __m512i w[4]) {
    const auto qh = [&](int i) {
      return i < count ? static_cast<int>(quant::load_u32(b + kBytes * i + kFifthBits)) : 0;
    };
    const __m128i bytes =
        _mm_shuffle_epi8(_mm_setr_epi32(qh(0), qh(1), qh(2), qh(3)),
                         _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
    const __m512i sixteen = _mm512_set1_epi16(16);
    const auto add = [&](int c, int mask) {
      w[c] =
          _mm512_mask_add_epi16(w[c], _cvtu32_mask32(static_cast<unsigned>(mask)), w[c], sixteen);
    };
    add(0, _mm_cvtsi128_si32(bytes));
    add(1, _mm_extract_epi32(bytes, 1));
    add(2, _mm_extract_epi32(bytes, 2));
    add(3, _mm_extract_epi32(bytes, 3));
  }
};
using Q4_0Layout = NibbleLayout<18, 2, -1, false, -8>;  // d; w = d·(q − 8)
using Q4_1Layout = NibbleLayout<20, 4, -1, true, 0>;    // d, m
using Q5_0Layout = NibbleLayout<22, 6, 2, false, -16>;  // d, qh; w = d·(q − 16)
using Q5_1Layout = NibbleLayout<24, 8, 4, true, 0>;     // d, m, qh

// The int32 sums of one group of 4 blocks: wc, its weights as x is stored
// (128-bit lane i = block i), times x's group at xr.
[[gnu::always_inline]] inline __m512i group_dot(const __m512i wc[4], const int16_t* xr) {
  __m512i s = _mm512_dpwssd_epi32(_mm512_setzero_si512(), wc[0], _mm512_loadu_si512(xr));
  s = _mm512_dpwssd_epi32(s, wc[1], _mm512_loadu_si512(xr + 32));
  s = _mm512_dpwssd_epi32(s, wc[2], _mm512_loadu_si512(xr + 64));
  return _mm512_dpwssd_epi32(s, wc[3], _mm512_loadu_si512(xr + 96));
}

// One channel's sums for R rows of x, for the formats of the form
// w = d·q + m: the products (acc) and the mins (acc_min) apart, added
// together once the channel is done.
template <int R>
struct MinFormSums {
  __m512 acc[R];
  __m256 acc_min[R];

  MinFormSums() {
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), acc_min[r] = _mm256_setzero_ps();
  }
  // Group g of 4 blocks (wc: its weights as x is stored, 128-bit lane i =
  // block i; dm: the blocks' d0 m0 .. d3 m3) meeting the rows of x from r0.
  [[gnu::always_inline]] void add_group(const RoundedX& xq, int64_t r0, int64_t g,
                                        const __m512i wc[4], __m256 dm) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512i s = group_dot(wc, xq.q + (r0 + r) * xq.k + 128 * g);
      quant::q4_1_accumulate4(s, dm, xq.s + (r0 + r) * 2 * xq.nb + 8 * g, &acc[r], &acc_min[r]);
    }
  }
  // Into column c of sums.
  void put(quant::ChannelSums<R>& sums, int64_t c) const {
    for (int r = 0; r < R; ++r)
      sums.put(r, c, _mm512_add_ps(acc[r], _mm512_zextps256_ps512(acc_min[r])));
  }
};

// y[r, j] for R rows of x from row r0 and channels [j0, j1) (at most 16), of
// a nibble format (F: a NibbleLayout).
template <int R, class F>
void nibble_rows(const RoundedX& xq, int64_t r0, const QuantMatrix& w, const float* bias, float* y,
                 int64_t ldy, int64_t j0, int64_t j1) {
  const __m512i nibble = _mm512_set1_epi16(0x0f);
  quant::ChannelSums<R> sums;
  for (int64_t j = j0; j < j1; ++j) {
    quant::prefetch_ahead(w, j);
    MinFormSums<R> channel;
    for_each_group<F::kBytes>(
        w.data + j * w.row_bytes, w.k / 32, [&](int64_t g, const uint8_t* b, int64_t count) {
          const __m512i v = quant::nibbles4<F::kBytes, F::kQs>(b, count);
          const __m512i bytes0 = _mm512_unpacklo_epi8(v, _mm512_setzero_si512());  // bytes 0..7
          const __m512i bytes1 = _mm512_unpackhi_epi8(v, _mm512_setzero_si512());  // bytes 8..15
          __m512i wc[4] = {_mm512_and_si512(bytes0, nibble), _mm512_and_si512(bytes1, nibble),
                           _mm512_srli_epi16(bytes0, 4), _mm512_srli_epi16(bytes1, 4)};
          if constexpr (F::kHighBits) F::add_high_bits4(b, count, wc);
          channel.add_group(xq, r0, g, wc, F::scales4(b, count));
        });
    channel.put(sums, j - j0);
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
          const __m256 dd = quant::d_halves4<34>(b, count);
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

// The K-quant kernels below take half a super-block (four sub-blocks of 32)
// at a time, each sub-block's low bits in the low or high nibbles of 64
// bytes and any high bits in a qh of 32 bytes (byte l: weight l).

// Word shift counts: `first` in the low 256 bits, `second` in the high ones.
inline __m512i half_shifts(int first, int second) {
  const int64_t a = 0x0001000100010001 * first, b = 0x0001000100010001 * second;
  return _mm512_setr_epi64(a, a, a, a, b, b, b, b);
}

// High bits of the 64 bytes' weights from qh (broadcast to both halves):
// qh's bits at `shifts` (per half, see half_shifts), `mask`ed, moved to bit 4.
inline __m512i high_bits(__m512i qh, __m512i shifts, __m512i mask) {
  return _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shifts), mask), 4);
}

// The four chunks of the half super-block as words (128-bit lane i = sub-block
// i, as x is stored): qwords of the low and high values picked two chunks at
// a time (pick01, pick23; indices 8.. are `high`'s), widened.
inline void chunk_words(__m512i low, __m512i high, __m512i pick01, __m512i pick23, __m512i wc[4]) {
  const __m512i c01 = _mm512_permutex2var_epi64(low, pick01, high);
  const __m512i c23 = _mm512_permutex2var_epi64(low, pick23, high);
  wc[0] = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(c01));
  wc[1] = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(c01, 1));
  wc[2] = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(c23));
  wc[3] = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(c23, 1));
}

// Q4_K, half a super-block (4 sub-blocks of 32, one group of x) at a time:
// sub-blocks 4h and 4h + 1 are the low and high nibbles of qs bytes 64h ..
// 64h + 31, sub-blocks 4h + 2 and 4h + 3 those of the next 32. Chunk c of
// the four is qword c of the low nibbles, then of the high ones, then qwords
// 4 + c of each: two qword permutes of the nibble vectors give two chunks
// each, widened to words. Sub-block i is (d·sc_i)·q − dmin·mn_i: Q4_1's
// form, with d·sc_i and −dmin·mn_i as its d and m (int16_blocks::Q4_K).
// Q5_K (F = int16_blocks::Q5_K): the same, its nibbles from byte 48, and
// bit s of qh byte i (from byte 16) the fifth bit of weight i of sub-block s.
template <int R, class F>
void k_nibble_rows(const RoundedX& xq, int64_t r0, const QuantMatrix& w, const float* bias,
                   float* y, int64_t ldy, int64_t j0, int64_t j1) {
  constexpr bool kFifthBits = F::kFormat == BlockFormat::kQ5_K;
  constexpr int64_t kQs = kFifthBits ? 48 : 16;
  const int64_t supers = w.k / 256;
  const __m512i nibble = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(1);
  // Q5_K: the qh bits of the low nibbles' sub-blocks {4h, 4h + 2}, then of
  // the high nibbles' {4h + 1, 4h + 3}
  const __m512i bits_low[2] = {half_shifts(0, 2), half_shifts(4, 6)};
  const __m512i bits_high[2] = {half_shifts(1, 3), half_shifts(5, 7)};
  // {low, high} qwords c and 4 + c for chunks 0 and 1 (pick01), 2 and 3 (pick23)
  const __m512i pick01 = _mm512_setr_epi64(0, 8, 4, 12, 1, 9, 5, 13);
  const __m512i pick23 = _mm512_setr_epi64(2, 10, 6, 14, 3, 11, 7, 15);
  quant::ChannelSums<R> sums;
  for (int64_t j = j0; j < j1; ++j) {
    quant::prefetch_ahead(w, j);
    MinFormSums<R> channel;
    const uint8_t* row = w.data + j * w.row_bytes;
    for (int64_t sb = 0; sb < supers; ++sb) {
      const uint8_t* b = row + F::kBytes * sb;
      alignas(32) float d[8], m[8];
      F::scales(b, d, m);
      for (int h = 0; h < 2; ++h) {
        const __m512i qs = _mm512_loadu_si512(b + kQs + 64 * h);
        __m512i low = _mm512_and_si512(qs, nibble);
        __m512i high = _mm512_and_si512(_mm512_srli_epi16(qs, 4), nibble);
        if constexpr (kFifthBits) {
          const __m512i qh =
              _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16)));
          low = _mm512_or_si512(low, high_bits(qh, bits_low[h], one));
          high = _mm512_or_si512(high, high_bits(qh, bits_high[h], one));
        }
        __m512i wc[4];
        chunk_words(low, high, pick01, pick23, wc);
        const __m128 d4 = _mm_load_ps(d + 4 * h), m4 = _mm_load_ps(m + 4 * h);
        const __m256 dm = _mm256_set_m128(_mm_unpackhi_ps(d4, m4), _mm_unpacklo_ps(d4, m4));
        channel.add_group(xq, r0, 2 * sb + h, wc, dm);
      }
    }
    channel.put(sums, j - j0);
  }
  sums.store(j0, j1 - j0, bias, y, ldy, r0);
}

// Q6_K, half a super-block (4 sub-blocks of 32, one group of x) at a time.
// Weight 32t + l of the half (l < 32) has its low 4 bits in ql byte l
// (t = 0, 2) or 32 + l (t = 1, 3), the low nibble for t < 2 and the high one
// for t ≥ 2; its top 2 bits at bit 2t of qh byte l; its int8 scale at
// sc[2t + l / 16]. Chunk c of the four sub-blocks: qwords c and 4 + c of the
// low, then the high, 6-bit values, as for Q4_K. The words are sc·(q − 32) (|·| ≤ 4064), as
// int16_blocks' Q6_K: each int32 lane sums 8 products below 2^30, rounded once when converted to
// float32; the blocks' d·dx scale the lanes, as Q8_0's.
template <int R>
void q6_k_rows(const RoundedX& xq, int64_t r0, const QuantMatrix& w, const float* bias, float* y,
               int64_t ldy, int64_t j0, int64_t j1) {
  constexpr int64_t kBytes = 210;
  const int64_t nb = xq.nb, supers = w.k / 256;
  const __m512i nibble = _mm512_set1_epi8(0x0f), two_bits = _mm512_set1_epi8(0x03);
  // qh's bits 2t of sub-blocks {0, 1} (top bits of the low nibbles) and {2, 3}
  const __m512i shifts_low = half_shifts(0, 2), shifts_high = half_shifts(4, 6);
  // {low, high} qwords: sub-blocks 0..3's chunks 0 and 1 (pick01), 2 and 3 (pick23)
  const __m512i pick01 = _mm512_setr_epi64(0, 4, 8, 12, 1, 5, 9, 13);
  const __m512i pick23 = _mm512_setr_epi64(2, 6, 10, 14, 3, 7, 11, 15);
  // scale words of chunks 0, 1 (lane t: sc[2t]) and 2, 3 (sc[2t + 1])
  const __m512i scale01 =
      _mm512_setr_epi64(0, 0, 0x0002000200020002, 0x0002000200020002, 0x0004000400040004,
                        0x0004000400040004, 0x0006000600060006, 0x0006000600060006);
  const __m512i scale23 = _mm512_add_epi16(scale01, _mm512_set1_epi16(1));
  const __m512i thirty_two = _mm512_set1_epi16(32);
  quant::ChannelSums<R> sums;
  for (int64_t j = j0; j < j1; ++j) {
    quant::prefetch_ahead(w, j);
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    const uint8_t* row = w.data + j * w.row_bytes;
    for (int64_t sb = 0; sb < supers; ++sb) {
      const uint8_t* b = row + kBytes * sb;
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(load_u16(b + 208)));
      for (int h = 0; h < 2; ++h) {
        const __m512i ql = _mm512_loadu_si512(b + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h)));
        const __m512i low =
            _mm512_or_si512(_mm512_and_si512(ql, nibble), high_bits(qh, shifts_low, two_bits));
        const __m512i high = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), nibble),
                                             high_bits(qh, shifts_high, two_bits));
        const __m512i sc = _mm512_castsi128_si512(
            _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 192 + 8 * h))));
        const __m512i sc01 = _mm512_permutexvar_epi16(scale01, sc),
                      sc23 = _mm512_permutexvar_epi16(scale23, sc);
        __m512i wc[4];
        chunk_words(low, high, pick01, pick23, wc);
        for (int c = 0; c < 4; ++c)
          wc[c] = _mm512_mullo_epi16(_mm512_sub_epi16(wc[c], thirty_two), c < 2 ? sc01 : sc23);
        const int64_t g = 2 * sb + h;
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m512i s = group_dot(wc, xq.q + (r0 + r) * xq.k + 128 * g);
          // d·dx of the 4 blocks in the even lanes (xq.s holds {dx, sx} pairs)
          const __m512 scale = quant::spread_even4(
              _mm256_mul_ps(d, _mm256_loadu_ps(xq.s + (r0 + r) * 2 * nb + 8 * g)));
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, acc[r]);
        }
      }
    }
    for (int r = 0; r < R; ++r) sums.put(r, j - j0, acc[r]);
  }
  sums.store(j0, j1 - j0, bias, y, ldy, r0);
}

// This table's rounding of x and kernels, for quant::integer_gemv_block.
struct Int16Rows {
  // 8: a server's batch of 8 decodes W once (4 zmm of weights, 8 + 8 accumulators)
  static constexpr int kRowsPerPass = 8;
  static constexpr auto round_x = &kernels::round_x;
  static bool has_rows(BlockFormat f) {
    return f == BlockFormat::kQ4_0 || f == BlockFormat::kQ4_1 || f == BlockFormat::kQ5_0 ||
           f == BlockFormat::kQ5_1 || f == BlockFormat::kQ8_0 || f == BlockFormat::kQ4_K ||
           f == BlockFormat::kQ5_K || f == BlockFormat::kQ6_K;
  }
  template <int R>
  static auto rows(BlockFormat f) {
    return f == BlockFormat::kQ4_0   ? &nibble_rows<R, Q4_0Layout>
           : f == BlockFormat::kQ4_1 ? &nibble_rows<R, Q4_1Layout>
           : f == BlockFormat::kQ5_0 ? &nibble_rows<R, Q5_0Layout>
           : f == BlockFormat::kQ5_1 ? &nibble_rows<R, Q5_1Layout>
           : f == BlockFormat::kQ4_K ? &k_nibble_rows<R, int16_blocks::Q4_K>
           : f == BlockFormat::kQ5_K ? &k_nibble_rows<R, int16_blocks::Q5_K>
           : f == BlockFormat::kQ6_K ? &q6_k_rows<R>
                                     : &q8_0_rows<R>;
  }
  // IQ4_NL on avx2_int16's kernels: x rounded the same way.
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
    kEveryFormat,  // IQ4_NL on avx2_int16's kernels rounds x too
    &kQuantPromptAvx512Vnni16};

}  // namespace qkv::kernels
