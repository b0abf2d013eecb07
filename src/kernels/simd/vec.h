// A small vector type per instruction set, so that each kernel is written
// once (as a template on the ISA) and compiled once per ISA in its own
// translation unit (kernels_avx512.cc, kernels_avx2.cc, kernels_portable.cc).
//
// Everything here has internal linkage (anonymous namespace): a function
// compiled with AVX-512 enabled must never be picked by the linker for a
// translation unit that runs on a CPU without it.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace qkv::kernels::simd {
namespace {

// split_exponent's bit trick: subtracting the bits of 0.7 (0x3f333333) from a
// positive normal float's bits leaves the exponent of x/0.7 in the top bits
// (arithmetic shift: it may be negative), and adding 0.7's bits back to the
// low 23 gives a mantissa in [0.7, 1.4), so that log(m) stays small.
constexpr int32_t kNearOne = 0x3f333333;
constexpr int32_t kMantissaBits = 0x007fffff;

#if defined(__AVX512F__)
struct Avx512 {
  using V = __m512;
  static constexpr int kLanes = 16;
  static constexpr const char* kName = "avx512";
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  // The first n lanes (0 < n <= 16); the others read as 0 and are not written.
  static V load_first(const float* p, int n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
  }
  static void store_first(float* p, V v, int n) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
  }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V zero() { return _mm512_setzero_ps(); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  // a / b for b a positive normal float, within ~2 ulp: vrcp14ps and one
  // Newton step (its error squared: ~2⁻²⁸), a third of vdivps's time.
  static V div_approx(V a, V b) {
    const V r = _mm512_rcp14_ps(b);
    return _mm512_mul_ps(a, _mm512_fmadd_ps(r, _mm512_fnmadd_ps(b, r, _mm512_set1_ps(1.0f)), r));
  }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static float reduce_add(V v) { return _mm512_reduce_add_ps(v); }
  static float reduce_max(V v) { return _mm512_reduce_max_ps(v); }
  static V round_nearest(V v) {
    return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // v · 2^n for integral-valued n in [-126, 127]: one instruction here.
  static V times_pow2(V v, V n) { return _mm512_scalef_ps(v, n); }
  // For a positive normal x: m in [0.7, 1.4) and integral-valued e with
  // x = m · 2^e (the bit trick of kNearOne).
  static V split_exponent(V x, V* e) {
    const __m512i shifted = _mm512_sub_epi32(_mm512_castps_si512(x), _mm512_set1_epi32(kNearOne));
    *e = _mm512_cvtepi32_ps(_mm512_srai_epi32(shifted, 23));
    return _mm512_castsi512_ps(_mm512_add_epi32(
        _mm512_and_si512(shifted, _mm512_set1_epi32(kMantissaBits)), _mm512_set1_epi32(kNearOne)));
  }
  // Lanes where x < limit become 0, others (NaN included) keep v.
  static V zero_below(V x, float limit, V v) {
    const __mmask16 keep = _mm512_cmp_ps_mask(x, set1(limit), _CMP_NLT_UQ);
    return _mm512_maskz_mov_ps(keep, v);
  }
  // x > y ? a : b and x >= y ? a : b per lane (b where x or y is NaN).
  static V gt_select(V x, V y, V a, V b) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, y, _CMP_GT_OQ), b, a);
  }
  static V ge_select(V x, V y, V a, V b) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, y, _CMP_GE_OQ), b, a);
  }
  // Lane j of the result = Σ of the lanes of x[j], for 16 vectors: halves,
  // then quarters, then pairs and single lanes of pairs of vectors are added,
  // 15 additions instead of 16 separate horizontal sums.
  static V reduce_lanes(const V* x) {
    // The tree leaves lane j holding input 4·(j mod 4) + j/4: feed it so.
    V t[8], u[4], v[2];
    auto in = [&](int i) { return x[4 * (i % 4) + i / 4]; };
    for (int i = 0; i < 8; ++i)
      t[i] = add(_mm512_shuffle_f32x4(in(2 * i), in(2 * i + 1), 0x44),
                 _mm512_shuffle_f32x4(in(2 * i), in(2 * i + 1), 0xee));
    for (int i = 0; i < 4; ++i)
      u[i] = add(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0x88),
                 _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0xdd));
    for (int i = 0; i < 2; ++i) {
      const __m512d a = _mm512_castps_pd(u[2 * i]), b = _mm512_castps_pd(u[2 * i + 1]);
      v[i] = add(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                 _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    return add(_mm512_shuffle_ps(v[0], v[1], 0x88), _mm512_shuffle_ps(v[0], v[1], 0xdd));
  }
  // dst[c·ldd + r] = scale·src[r·lds + c] for a 16 × 16 block, in registers:
  // pairs of rows interleaved, then pairs of pairs, then 128-bit quarters.
  static void transpose(const float* src, int64_t lds, float* dst, int64_t ldd, float scale) {
    V r[16], t[16];
    for (int i = 0; i < 16; ++i) r[i] = load(src + i * lds);
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // r[4g + j], quarter q: column 4q + j of rows 4g .. 4g + 3
    for (int g = 0; g < 4; ++g)
      for (int h = 0; h < 2; ++h) {
        const __m512d a = _mm512_castps_pd(t[4 * g + h]), b = _mm512_castps_pd(t[4 * g + 2 + h]);
        r[4 * g + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        r[4 * g + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
      }
    const V s = set1(scale);
    for (int j = 0; j < 4; ++j) {
      const V v0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
      const V v1 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
      const V v2 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
      const V v3 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
      store(dst + j * ldd, mul(s, _mm512_shuffle_f32x4(v0, v2, 0x88)));
      store(dst + (4 + j) * ldd, mul(s, _mm512_shuffle_f32x4(v1, v3, 0x88)));
      store(dst + (8 + j) * ldd, mul(s, _mm512_shuffle_f32x4(v0, v2, 0xdd)));
      store(dst + (12 + j) * ldd, mul(s, _mm512_shuffle_f32x4(v1, v3, 0xdd)));
    }
  }

  // bfloat16 pairs: each 32-bit lane holds two bfloat16 values, the even
  // element in the low half (the operand layout of vdpbf16ps).
  // The even and the odd element of each lane, as floats (exact).
  static V bf16_even(V pairs) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(pairs), 16));
  }
  static V bf16_odd(V pairs) {
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_castps_si512(pairs), _mm512_set1_epi32(int32_t(0xffff0000u))));
  }
  // x rounded to bfloat16 (nearest even; NaN stays NaN), in the high half.
  static __m512i round_bf16(V x) {
    const __m512i bits = _mm512_castps_si512(x);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i up = _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
    const __m512i nan = _mm512_or_si512(bits, _mm512_set1_epi32(0x00400000));
    return _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), up, nan);
  }
  // Lanes (round(even), round(odd)).
  static V bf16_pairs(V even, V odd) {
    return _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_srli_epi32(round_bf16(even), 16),
        _mm512_and_si512(round_bf16(odd), _mm512_set1_epi32(int32_t(0xffff0000u)))));
  }
  // 16 bfloat16 values widened to floats (exact).
  static V load_bf16(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};
#endif

#if defined(__AVX512F__) && defined(__AVX512BF16__)
// AVX-512 with AVX512_BF16 (Cooper Lake, Zen 4, Sapphire Rapids): the
// float32 operations of Avx512, plus the bfloat16 conversions and the
// bfloat16 dot product (vdpbf16ps) in one instruction each.
struct Avx512Bf16 : Avx512 {
  static constexpr const char* kName = "avx512_bf16";
  // Word 2i of the result is word i of the first operand, word 2i + 1 word
  // i of the second (vpermw indices into their 32 words).
  static __m512i interleave_words(__m512i lo_words) {
    alignas(64) static constexpr uint16_t kIndex[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                        21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                        11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    return _mm512_permutexvar_epi16(_mm512_load_si512(kIndex), lo_words);
  }
  static V bf16_pairs(V even, V odd) {
    // vcvtne2ps2bf16 puts `even` in words 0..15 and `odd` in 16..31.
    return _mm512_castsi512_ps(interleave_words((__m512i)_mm512_cvtne2ps_pbh(odd, even)));
  }
  // acc + even(a)·even(b) + odd(a)·odd(b) per lane.
  static V dot_bf16(V acc, V a, V b) { return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b); }
  // 16 bfloat16 of row a and 16 of row b interleaved into pairs (a_i, b_i).
  static V pair_rows_bf16(const uint16_t* a, const uint16_t* b) {
    const __m512i words = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
    return _mm512_castsi512_ps(interleave_words(words));
  }
  // 32 floats rounded to 32 bfloat16 in the same order.
  static void round_bf16_32(const float* src, uint16_t* dst) {
    const __m512bh h = _mm512_cvtne2ps_pbh(load(src + 16), load(src));
    _mm512_storeu_si512(dst, (__m512i)h);
  }
  // dst[i] = bfloat16(scale·src[i]) for 32 floats; whether one of them is
  // infinite or NaN in bfloat16 (exponent bits all set).
  static bool narrow_bf16_32(const float* src, float scale, uint16_t* dst) {
    const V s = set1(scale);
    const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(mul(load(src + 16), s), mul(load(src), s));
    _mm512_storeu_si512(dst, h);
    const __m512i exponent = _mm512_set1_epi16(0x7f80);
    return _mm512_cmpeq_epi16_mask(_mm512_and_si512(h, exponent), exponent) != 0;
  }
};
#endif

// Whether the ISA has the bfloat16 dot product (Avx512Bf16).
template <class Isa>
constexpr bool kNativeBf16 = requires(typename Isa::V v) {
  Isa::dot_bf16(v, v, v);
};

#if defined(__AVX2__) && defined(__FMA__)
struct Avx2 {
  using V = __m256;
  static constexpr int kLanes = 8;
  static constexpr const char* kName = "avx2";
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  // The first n lanes (0 < n <= 8); the others read as 0 and are not written.
  static __m256i first_lanes(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V load_first(const float* p, int n) { return _mm256_maskload_ps(p, first_lanes(n)); }
  static void store_first(float* p, V v, int n) { _mm256_maskstore_ps(p, first_lanes(n), v); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V zero() { return _mm256_setzero_ps(); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V div_approx(V a, V b) { return div(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static float reduce_add(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(V v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static V round_nearest(V v) {
    return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // v · 2^n for integral-valued n in [-126, 127]: 2^n built in the exponent bits.
  static V times_pow2(V v, V n) {
    const __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return mul(v, _mm256_castsi256_ps(bits));
  }
  static V split_exponent(V x, V* e) {
    const __m256i shifted = _mm256_sub_epi32(_mm256_castps_si256(x), _mm256_set1_epi32(kNearOne));
    *e = _mm256_cvtepi32_ps(_mm256_srai_epi32(shifted, 23));
    return _mm256_castsi256_ps(_mm256_add_epi32(
        _mm256_and_si256(shifted, _mm256_set1_epi32(kMantissaBits)), _mm256_set1_epi32(kNearOne)));
  }
  static V zero_below(V x, float limit, V v) {
    return _mm256_and_ps(_mm256_cmp_ps(x, set1(limit), _CMP_NLT_UQ), v);
  }
  static V gt_select(V x, V y, V a, V b) {
    return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, y, _CMP_GT_OQ));
  }
  static V ge_select(V x, V y, V a, V b) {
    return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, y, _CMP_GE_OQ));
  }
  // Lane j of the result = Σ of the lanes of x[j], for 8 vectors.
  static V reduce_lanes(const V* x) {
    // The tree leaves lane j holding input 2·(j mod 4) + j/4: feed it so.
    V p[4], q[2];
    auto in = [&](int i) { return x[4 * (i % 2) + i / 2]; };
    for (int i = 0; i < 4; ++i)
      p[i] = add(_mm256_permute2f128_ps(in(2 * i), in(2 * i + 1), 0x20),
                 _mm256_permute2f128_ps(in(2 * i), in(2 * i + 1), 0x31));
    for (int i = 0; i < 2; ++i) {
      const __m256d a = _mm256_castps_pd(p[2 * i]), b = _mm256_castps_pd(p[2 * i + 1]);
      q[i] = add(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)),
                 _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
    }
    return add(_mm256_shuffle_ps(q[0], q[1], 0x88), _mm256_shuffle_ps(q[0], q[1], 0xdd));
  }
  // dst[c·ldd + r] = scale·src[r·lds + c] for an 8 × 8 block, in registers.
  static void transpose(const float* src, int64_t lds, float* dst, int64_t ldd, float scale) {
    V r[8], t[8];
    for (int i = 0; i < 8; ++i) r[i] = load(src + i * lds);
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // r[4g + j], half q: column 4q + j of rows 4g .. 4g + 3
    for (int g = 0; g < 2; ++g) {
      r[4 * g] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
      r[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
      r[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
      r[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
    }
    const V s = set1(scale);
    for (int j = 0; j < 4; ++j) {
      store(dst + j * ldd, mul(s, _mm256_permute2f128_ps(r[j], r[4 + j], 0x20)));
      store(dst + (4 + j) * ldd, mul(s, _mm256_permute2f128_ps(r[j], r[4 + j], 0x31)));
    }
  }

  // bfloat16 pairs, as Avx512's.
  static V bf16_even(V pairs) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(pairs), 16));
  }
  static V bf16_odd(V pairs) {
    return _mm256_and_ps(pairs, _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(0xffff0000u))));
  }
  static __m256i round_bf16(V x) {
    const __m256i bits = _mm256_castps_si256(x);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i up = _mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
    const __m256i nan = _mm256_or_si256(bits, _mm256_set1_epi32(0x00400000));
    return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(up), _mm256_castsi256_ps(nan),
                                                _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
  }
  static V bf16_pairs(V even, V odd) {
    return _mm256_castsi256_ps(_mm256_or_si256(
        _mm256_srli_epi32(round_bf16(even), 16),
        _mm256_and_si256(round_bf16(odd), _mm256_set1_epi32(int32_t(0xffff0000u)))));
  }
  static V load_bf16(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};
#endif

// Four lanes through GCC/Clang vector extensions: runs on any CPU.
struct Portable {
  typedef float V __attribute__((vector_size(16)));
  typedef int32_t I __attribute__((vector_size(16)));
  static constexpr int kLanes = 4;
  static constexpr const char* kName = "portable";
  static V load(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(float* p, V v) { std::memcpy(p, &v, sizeof v); }
  // The first n lanes (0 < n <= 4); the others read as 0 and are not written.
  static V load_first(const float* p, int n) {
    V v = zero();
    std::memcpy(&v, p, sizeof(float) * n);
    return v;
  }
  static void store_first(float* p, V v, int n) { std::memcpy(p, &v, sizeof(float) * n); }
  static V set1(float x) { return V{x, x, x, x}; }
  static V zero() { return V{0, 0, 0, 0}; }
  static V fmadd(V a, V b, V c) { return a * b + c; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V mul(V a, V b) { return a * b; }
  static V div(V a, V b) { return a / b; }
  static V div_approx(V a, V b) { return div(a, b); }
  static V max(V a, V b) { return a > b ? a : b; }
  static V min(V a, V b) { return a < b ? a : b; }
  static float reduce_add(V v) { return (v[0] + v[1]) + (v[2] + v[3]); }
  static float reduce_max(V v) {
    const float a = v[0] > v[1] ? v[0] : v[1], b = v[2] > v[3] ? v[2] : v[3];
    return a > b ? a : b;
  }
  static V round_nearest(V v) {
    // Adding and subtracting 1.5·2^23 rounds to nearest even for |v| < 2^22.
    const V magic = set1(12582912.0f);
    return (v + magic) - magic;
  }
  // v · 2^n for integral-valued n in [-126, 127]: 2^n built in the exponent bits.
  static V times_pow2(V v, V n) {
    return v * bits_to_v((__builtin_convertvector(n, I) + 127) << 23);
  }
  static V split_exponent(V x, V* e) {
    const I shifted = v_to_bits(x) - kNearOne;
    *e = __builtin_convertvector(shifted >> 23, V);
    return bits_to_v((shifted & kMantissaBits) + kNearOne);
  }
  // Lane j of the result = Σ of the lanes of x[j], for 4 vectors.
  static V reduce_lanes(const V* x) {
    return V{reduce_add(x[0]), reduce_add(x[1]), reduce_add(x[2]), reduce_add(x[3])};
  }
  static void transpose(const float* src, int64_t lds, float* dst, int64_t ldd, float scale) {
    for (int r = 0; r < kLanes; ++r)
      for (int c = 0; c < kLanes; ++c) dst[c * ldd + r] = scale * src[r * lds + c];
  }
  static V zero_below(V x, float limit, V v) {
    const I keep = !(x < set1(limit));
    return bits_to_v(v_to_bits(v) & keep);
  }
  static V gt_select(V x, V y, V a, V b) { return x > y ? a : b; }
  static V ge_select(V x, V y, V a, V b) { return x >= y ? a : b; }

  // The lanes' bits as integers and back.
  static V bits_to_v(I bits) { return std::bit_cast<V>(bits); }
  static I v_to_bits(V v) { return std::bit_cast<I>(v); }

  // bfloat16 pairs, as Avx512's.
  static V bf16_even(V pairs) { return bits_to_v(v_to_bits(pairs) << 16); }
  static V bf16_odd(V pairs) {
    return bits_to_v(v_to_bits(pairs) & static_cast<int32_t>(0xffff0000u));
  }
  static V bf16_pairs(V even, V odd) {
    V out;
    for (int i = 0; i < kLanes; ++i) {
      const uint32_t pair = static_cast<uint32_t>(float_to_bf16_bits(even[i])) |
                            static_cast<uint32_t>(float_to_bf16_bits(odd[i])) << 16;
      std::memcpy(reinterpret_cast<char*>(&out) + 4 * i, &pair, 4);
    }
    return out;
  }
  static V load_bf16(const uint16_t* p) {
    I bits;
    for (int i = 0; i < kLanes; ++i) bits[i] = static_cast<int32_t>(uint32_t{p[i]} << 16);
    return bits_to_v(bits);
  }
  // Round to nearest even; NaN stays NaN (as qkv::float_to_bfloat16).
  static uint16_t float_to_bf16_bits(float f) {
    const uint32_t bits = std::bit_cast<uint32_t>(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
    return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
};

// exp(x) for every lane, relative error about 2e-7; exp(-inf) and anything
// below -87.3 give exactly 0 (masked scores must contribute nothing), and NaN
// stays NaN (so bad inputs surface in the output instead of vanishing).
// x = n·ln2 + r with |r| <= ln2/2 (ln2 split in two for accuracy), exp(r) by a
// degree-5 polynomial fitted for least relative error on that interval, then
// scaled by 2^n. Every result is 0 or a normal float: a subnormal one would
// cost a microcode assist in the products that read it.
template <class Isa>
typename Isa::V exp(typename Isa::V x) {
  using V = typename Isa::V;
  constexpr float kMin = -87.3f, kMax = 88.3f;
  // max/min return their second operand when either is NaN: x goes second.
  const V clamped = Isa::min(Isa::set1(kMax), Isa::max(Isa::set1(kMin), x));
  const V n = Isa::round_nearest(Isa::mul(clamped, Isa::set1(1.44269504088896341f)));
  V r = Isa::fmadd(n, Isa::set1(-0.693359375f), clamped);
  r = Isa::fmadd(n, Isa::set1(2.12194440e-4f), r);
  V p = Isa::set1(8.29178747e-3f);
  p = Isa::fmadd(p, r, Isa::set1(4.18979339e-2f));
  p = Isa::fmadd(p, r, Isa::set1(1.66676119e-1f));
  p = Isa::fmadd(p, r, Isa::set1(4.99991506e-1f));
  p = Isa::fmadd(p, r, Isa::set1(9.99999702e-1f));
  p = Isa::fmadd(p, r, Isa::set1(1.0f));
  return Isa::zero_below(x, kMin, Isa::times_pow2(p, n));
}

// erf(z) for every lane, ~ c · P(c²) / Q(c²) with c = z clamped to [−4, 4]
// (beyond, erf rounds to ±1 in float32); NaN stays NaN. Coefficients fitted
// for it (Lawson-weighted linearised least squares toward minimax, float64
// error 2.1e-8); in float32 the error is <= 3e-7 absolute, ~5 ulp near ±1,
// set by rounding in the two Horner chains (AVX-512 divides by Q through
// div_approx: ~2 ulp more, and 15% off GELU's time).
template <class Isa>
typename Isa::V erf(typename Isa::V z) {
  using V = typename Isa::V;
  // max/min return their second operand when either is NaN: the value goes second.
  const V c = Isa::min(Isa::set1(4.0f), Isa::max(Isa::set1(-4.0f), z));
  const V t = Isa::mul(c, c);
  V p = Isa::set1(1.974782207980752e-06f);
  p = Isa::fmadd(p, t, Isa::set1(2.880418614950031e-04f));
  p = Isa::fmadd(p, t, Isa::set1(4.003758076578379e-03f));
  p = Isa::fmadd(p, t, Isa::set1(5.346782505512238e-02f));
  p = Isa::fmadd(p, t, Isa::set1(1.962518692016602e-01f));
  p = Isa::fmadd(p, t, Isa::set1(1.128378987312317e+00f));
  V q = Isa::set1(3.748038579942659e-05f);
  q = Isa::fmadd(q, t, Isa::set1(1.216382952407002e-03f));
  q = Isa::fmadd(q, t, Isa::set1(1.544465124607086e-02f));
  q = Isa::fmadd(q, t, Isa::set1(1.164775937795639e-01f));
  q = Isa::fmadd(q, t, Isa::set1(5.072548389434814e-01f));
  q = Isa::fmadd(q, t, Isa::set1(1.0f));
  const V e = Isa::div_approx(Isa::mul(c, p), q);  // (q ≥ 1)
  return Isa::min(Isa::set1(1.0f), Isa::max(Isa::set1(-1.0f), e));
}

// log(x) for every lane with x a positive normal float, absolute error about
// 1e-7 (what a float can hold near 1). x = m·2^e with m in [0.7, 1.4), then
// log(m) = 2·atanh(z), z = (m − 1)/(m + 1) in [−0.18, 0.17], by its series
// up to z⁹ (the next term is below 1e-9), and e·ln2 added with ln2 split in
// two. Other inputs (0, subnormals, negatives, inf, NaN) give unspecified
// values: callers test for them first.
template <class Isa>
typename Isa::V log(typename Isa::V x) {
  using V = typename Isa::V;
  V e;
  const V m = Isa::split_exponent(x, &e);
  const V one = Isa::set1(1.0f);
  const V z = Isa::div(Isa::sub(m, one), Isa::add(m, one));
  const V z2 = Isa::mul(z, z);
  V p = Isa::set1(2.0f / 9);
  p = Isa::fmadd(p, z2, Isa::set1(2.0f / 7));
  p = Isa::fmadd(p, z2, Isa::set1(2.0f / 5));
  p = Isa::fmadd(p, z2, Isa::set1(2.0f / 3));
  p = Isa::fmadd(p, z2, Isa::set1(2.0f));
  const V log_m = Isa::mul(p, z);
  return Isa::fmadd(e, Isa::set1(0.693359375f), Isa::fmadd(e, Isa::set1(-2.12194440e-4f), log_m));
}

// y[i] = f(x[i]): whole vectors, then the tail through lane masks (lanes
// past n read 0 and are not written).
template <class Isa, class F>
[[gnu::always_inline]] inline void map_span(const float* x, float* y, int64_t n, F f) {
  constexpr int kL = Isa::kLanes;
  int64_t i = 0;
  for (; i + kL <= n; i += kL) Isa::store(y + i, f(Isa::load(x + i)));
  if (i < n) {
    const int rest = static_cast<int>(n - i);
    Isa::store_first(y + i, f(Isa::load_first(x + i, rest)), rest);
  }
}

// out[i] = f(x[i]) for a function of vectors f (exp, log), as map_span.
template <class Isa, typename Isa::V (*f)(typename Isa::V)>
void map_into(const float* x, int64_t n, float* out) {
  map_span<Isa>(x, out, n, f);
}

}  // namespace
}  // namespace qkv::kernels::simd
