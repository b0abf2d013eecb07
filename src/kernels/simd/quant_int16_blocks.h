// The GGUF block formats as 16-bit integer weights, for the kernels that
// meet them with x rounded to 16 bits (quant_avx2_int16.cc's few-rows
// product, quant_prompt_avx512_vnni16.cc's prompt product): each 32-weight
// (sub-)block widens to two registers of 16 signed words, weights 0..15 and
// 16..31, q_w with w = d·q_w (+ m):
//   q − 8 (Q4_0), q (Q4_1, Q4_K), q − 16 (Q5_0), q (Q5_1, Q5_K; fifth bits
//   from qh), q (Q8_0), the level (IQ4_NL), sc·(q − 32) (Q6_K).
// AVX2 and F16C code: include only from files compiled for them.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/quant_gemm.h"
#include "kernels/simd/quant_rows.h"
#include "kernels/simd/rounded_x.h"

namespace qkv::kernels::int16_blocks {
namespace {

inline float half(const uint8_t* p) { return quant::Bytes<simd::Avx2>::half(p); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// A format F: kBytes per block of 32·kSubs weights; words(b, s, w): the
// weights of its 32-weight sub-block s as two registers of 16 signed words
// (weights 0..15 and 16..31); scales(b, d, m): d[s] with w = d[s]·q_w
// (+ m[s] where kHasMin) for every sub-block, exact in float32.
inline __m256i bytes16(const uint8_t* p) { return _mm256_cvtepu8_epi16(load128(p)); }

// Nibble words: 16 bytes at p, their low nibbles (or high ones when `high`).
inline __m256i nibbles(const uint8_t* p, bool high) {
  const __m256i v = bytes16(p);
  return high ? _mm256_srli_epi16(v, 4) : _mm256_and_si256(v, _mm256_set1_epi16(0x0f));
}

// Q4_0, Q4_1, Q5_0, Q8_0: blocks of 32, d the fp16 at the start.
template <BlockFormat kF, int kBlockBytes, bool kMin>
struct Legacy {
  static constexpr BlockFormat kFormat = kF;
  static constexpr int kBytes = kBlockBytes, kSubs = 1;
  static constexpr bool kHasMin = kMin;
  static void scales(const uint8_t* b, float* d, float* m) {
    d[0] = half(b);
    if constexpr (kMin) m[0] = half(b + 2);
  }
};

struct Q8_0 : Legacy<BlockFormat::kQ8_0, 34, false> {
  static void words(const uint8_t* b, int, __m256i* w) {
    w[0] = _mm256_cvtepi8_epi16(load128(b + 2));
    w[1] = _mm256_cvtepi8_epi16(load128(b + 18));
  }
};

struct Q4_0 : Legacy<BlockFormat::kQ4_0, 18, false> {
  static void words(const uint8_t* b, int, __m256i* w) {
    for (int h = 0; h < 2; ++h)
      w[h] = _mm256_sub_epi16(nibbles(b + 2, h == 1), _mm256_set1_epi16(8));
  }
};

struct Q4_1 : Legacy<BlockFormat::kQ4_1, 20, true> {
  static void words(const uint8_t* b, int, __m256i* w) {
    for (int h = 0; h < 2; ++h) w[h] = nibbles(b + 4, h == 1);
  }
};

// The fifth bits of a 32-weight block, bit i of qh for weight i: all-ones
// words where set, for weights 0..15 (h = 0) or 16..31 (h = 1).
inline __m256i fifth_bits(uint32_t qh, int h) {
  const __m256i bit = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096,
                                        8192, 16384, -32768);
  const __m256i hb = _mm256_set1_epi16(static_cast<int16_t>(qh >> (16 * h)));
  return _mm256_cmpeq_epi16(_mm256_and_si256(hb, bit), bit);
}

// Q5_0: the nibbles, minus 16 where the fifth bit is clear.
struct Q5_0 : Legacy<BlockFormat::kQ5_0, 22, false> {
  static void words(const uint8_t* b, int, __m256i* w) {
    const uint32_t qh = static_cast<uint32_t>(quant::load_u32(b + 2));
    for (int h = 0; h < 2; ++h)
      w[h] = _mm256_add_epi16(nibbles(b + 6, h == 1),
                              _mm256_andnot_si256(fifth_bits(qh, h), _mm256_set1_epi16(-16)));
  }
};

// Q5_1: the nibbles, plus 16 where the fifth bit is set; w = d·q + m.
struct Q5_1 : Legacy<BlockFormat::kQ5_1, 24, true> {
  static void words(const uint8_t* b, int, __m256i* w) {
    const uint32_t qh = static_cast<uint32_t>(quant::load_u32(b + 4));
    for (int h = 0; h < 2; ++h)
      w[h] = _mm256_add_epi16(nibbles(b + 8, h == 1),
                              _mm256_and_si256(fifth_bits(qh, h), _mm256_set1_epi16(16)));
  }
};

// IQ4_NL: the int8 level (kIq4nlValues) of each nibble.
struct IQ4_NL : Legacy<BlockFormat::kIQ4_NL, 18, false> {
  static void words(const uint8_t* b, int, __m256i* w) {
    const __m128i table = _mm_load_si128(reinterpret_cast<const __m128i*>(kIq4nlValues));
    const __m128i v = load128(b + 2), low = _mm_set1_epi8(0x0f);
    w[0] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(table, _mm_and_si128(v, low)));
    w[1] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(v, 4), low)));
  }
};

// Q4_K: sub-block s is (d·sc)·q − dmin·mn over the low (even s) or high (odd
// s) nibbles of bytes 32·(s/2) .. +31 from byte kQs; both products exact.
template <BlockFormat kF, int kBlockBytes, int kQs>
struct KQuant {
  static constexpr BlockFormat kFormat = kF;
  static constexpr int kBytes = kBlockBytes, kSubs = 8;
  static constexpr bool kHasMin = true;
  static __m256i nibble_words(const uint8_t* b, int s, int h) {
    return nibbles(b + kQs + 32 * (s / 2) + 16 * h, s % 2 != 0);
  }
  // The 6-bit sc and mn of the 8 sub-blocks (as q4k_scale_min unpacks them)
  // as bytes, four to a word: bytes 0..3 hold sc 0..3 and the top bits of sc
  // 4..7, bytes 4..7 the same for mn, bytes 8..11 the low nibbles of sc / mn 4..7.
  static void scales(const uint8_t* b, float* d, float* m) {
    const uint32_t a = static_cast<uint32_t>(quant::load_u32(b + 4));
    const uint32_t c = static_cast<uint32_t>(quant::load_u32(b + 8));
    const uint32_t e = static_cast<uint32_t>(quant::load_u32(b + 12));
    const uint32_t sc_hi = (e & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4);
    const uint32_t mn_hi = ((e >> 4) & 0x0f0f0f0fu) | (((c >> 6) & 0x03030303u) << 4);
    const auto floats = [](uint32_t lo, uint32_t hi) {
      return _mm256_cvtepi32_ps(
          _mm256_cvtepu8_epi32(_mm_setr_epi32(static_cast<int>(lo), static_cast<int>(hi), 0, 0)));
    };
    _mm256_storeu_ps(d, _mm256_mul_ps(_mm256_set1_ps(half(b)), floats(a & 0x3f3f3f3fu, sc_hi)));
    _mm256_storeu_ps(m,
                     _mm256_mul_ps(_mm256_set1_ps(-half(b + 2)), floats(c & 0x3f3f3f3fu, mn_hi)));
  }
};

struct Q4_K : KQuant<BlockFormat::kQ4_K, 144, 16> {
  static void words(const uint8_t* b, int s, __m256i* w) {
    for (int h = 0; h < 2; ++h) w[h] = nibble_words(b, s, h);
  }
};

// Q5_K: Q4_K's sub-blocks (from byte 48) with bit s of qh[i] (byte 16 + i) as
// bit 4 of weight i.
struct Q5_K : KQuant<BlockFormat::kQ5_K, 176, 48> {
  static void words(const uint8_t* b, int s, __m256i* w) {
    for (int h = 0; h < 2; ++h) {
      const __m256i high = _mm256_and_si256(
          _mm256_srl_epi16(bytes16(b + 16 + 16 * h), _mm_cvtsi32_si128(s)), _mm256_set1_epi16(1));
      w[h] = _mm256_or_si256(nibble_words(b, s, h), _mm256_slli_epi16(high, 4));
    }
  }
};

// Q6_K: sub-block s = 4·half + t is d·sc·(q − 32), q six bits (ql's nibble,
// qh's 2 bits at 2t) and sc an int8 per 16 weights: the words are sc·(q −
// 32) (|·| ≤ 4096), d the scale. Each lane then sums 4 products up to
// 4096·32767: exact in int32, rounded once when converted to float32.
struct Q6_K {
  static constexpr BlockFormat kFormat = BlockFormat::kQ6_K;
  static constexpr int kBytes = 210, kSubs = 8;
  static constexpr bool kHasMin = false;
  static void words(const uint8_t* b, int s, __m256i* w) {
    const int half_ = s / 4, t = s % 4;
    const uint8_t* ql = b + 64 * half_ + 32 * (t & 1);
    const uint8_t* qh = b + 128 + 32 * half_;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * half_ + 2 * t;
    for (int h = 0; h < 2; ++h) {
      const __m256i high = _mm256_and_si256(
          _mm256_srl_epi16(bytes16(qh + 16 * h), _mm_cvtsi32_si128(2 * t)), _mm256_set1_epi16(3));
      const __m256i q = _mm256_or_si256(nibbles(ql + 16 * h, t >= 2), _mm256_slli_epi16(high, 4));
      w[h] =
          _mm256_mullo_epi16(_mm256_sub_epi16(q, _mm256_set1_epi16(32)), _mm256_set1_epi16(sc[h]));
    }
  }
  static void scales(const uint8_t* b, float* d, float*) {
    for (int s = 0; s < kSubs; ++s) d[s] = half(b + 208);
  }
};

// A set of formats: its mask (quant_gemm.h's rounded_formats) and a dispatch.
template <class... F>
struct Formats {
  static constexpr uint32_t kMask = rounded_formats({F::kFormat...});
  // run.template operator()<F>() for the F of `format`.
  template <class Run>
  static void dispatch(BlockFormat format, Run&& run) {
    ((format == F::kFormat ? run.template operator()<F>() : void()), ...);
  }
};
using Int16Formats = Formats<Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q4_K, Q5_K, Q6_K>;
static_assert(Int16Formats::kMask == kEveryFormat, "a block format without 16-bit x kernels");

}  // namespace
}  // namespace qkv::kernels::int16_blocks
