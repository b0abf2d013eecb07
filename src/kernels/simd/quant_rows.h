// The kernels of quant_gemm.h, written once over the vector types of
// kernels/simd/vec.h and compiled per instruction set (quant_*.cc): each
// block of W is decoded into float32 vectors of its 32-weight sub-blocks
// (Decode<Isa, Format>), which the few-rows product multiply-adds into up to
// kRowsPerPass rows of x at a time and dequantize_rows stores.
//
// Decoding computes every weight as quant_blocks.h's reference does: an exact
// product of a scale and a small integer, then at most one rounding (an add
// of the min, or the product itself for Q6_K), so each table's weights equal
// the reference's bit for bit whether or not the compiler contracts to FMA.
//
// Everything has internal linkage (see kernels/simd/vec.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

#include "kernels/quant_gemm.h"
#include "kernels/quant_prefetch.h"
#include "kernels/simd/vec.h"

namespace qkv::kernels::quant {
namespace {

// ---- Bytes to float lanes, per instruction set ---------------------------------
// half: a block's fp16 scale at p as float32 (F16C where the instruction set
// has it: quant_avx2.cc and quant_avx512*.cc compile for it; several times
// faster than half_to_float's bit manipulation, which shows when one row of x
// meets each block; equal for every finite or infinite half, and NaN scales
// are refused when weights are loaded); u8 / s8: kLanes bytes as unsigned /
// signed integers; lo4 / hi4: their low / high nibbles; q6: Q6_K's 6-bit
// value from kLanes ql nibbles (the high ones when `high`) and 2 bits of
// kLanes qh bytes at `shift`; q5: Q5_0's and Q5_1's 5-bit value from kLanes
// nibbles and, as bit 4, bits first .. first + kLanes − 1 of the word qh;
// q5k: Q5_K's, bit 4 the bit `shift` of kLanes qh bytes; iq4nl: IQ4_NL's
// level (kIq4nlValues) of kLanes nibbles.
template <class Isa>
struct Bytes;

template <>
struct Bytes<simd::Portable> {
  using V = simd::Portable::V;
  static float half(const uint8_t* p) { return half_to_float(load_u16(p)); }
  template <class F>
  static V map(F f) {
    return V{f(0), f(1), f(2), f(3)};
  }
  static V s8(const uint8_t* p) {
    return map([&](int i) { return static_cast<float>(static_cast<int8_t>(p[i])); });
  }
  static V lo4(const uint8_t* p) {
    return map([&](int i) { return static_cast<float>(p[i] & 0x0f); });
  }
  static V hi4(const uint8_t* p) {
    return map([&](int i) { return static_cast<float>(p[i] >> 4); });
  }
  static V q6(const uint8_t* ql, bool high, const uint8_t* qh, int shift) {
    return map([&](int i) {
      const int lo = high ? ql[i] >> 4 : ql[i] & 0x0f;
      return static_cast<float>(lo | (((qh[i] >> shift) & 3) << 4));
    });
  }
  static V q5(const uint8_t* ql, bool high, uint32_t qh, int first) {
    return map([&](int i) {
      const int lo = high ? ql[i] >> 4 : ql[i] & 0x0f;
      return static_cast<float>(lo | ((qh >> (first + i)) & 1) << 4);
    });
  }
  static V q5k(const uint8_t* ql, bool high, const uint8_t* qh, int shift) {
    return map([&](int i) {
      const int lo = high ? ql[i] >> 4 : ql[i] & 0x0f;
      return static_cast<float>(lo | ((qh[i] >> shift) & 1) << 4);
    });
  }
  static V iq4nl(const uint8_t* q, bool high) {
    return map(
        [&](int i) { return static_cast<float>(kIq4nlValues[high ? q[i] >> 4 : q[i] & 0x0f]); });
  }
};

#if defined(__AVX2__)
// U: kLanes uint32 lanes (a GCC vector: & | << >> per lane, shifting in
// zeros; >> a vector shifts each lane by its own count); u8: the kLanes low
// bytes of b zero extended to them; s8: the same bytes as int8, to float.
template <class Isa>
struct Widen;

template <>
struct Widen<simd::Avx2> {
  typedef uint32_t U __attribute__((vector_size(32)));
  static U u8(__m128i b) { return U(_mm256_cvtepu8_epi32(b)); }
  static __m256 s8(__m128i b) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)); }
};

#if defined(__AVX512F__)
template <>
struct Widen<simd::Avx512> {
  typedef uint32_t U __attribute__((vector_size(64)));
  static U u8(__m128i b) { return U(_mm512_cvtepu8_epi32(b)); }
  static __m512 s8(__m128i b) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)); }
};
#endif

// Bytes on AVX2 and AVX-512, written once over Widen<Isa>: its integer steps
// are exact, so each lane's value is the portable one's.
template <class Isa>
struct Bytes {
  using V = typename Isa::V;
  using U = typename Widen<Isa>::U;
  static float half(const uint8_t* p) { return _cvtsh_ss(load_u16(p)); }
  // The kLanes bytes at p, in the low bytes.
  static __m128i bytes(const uint8_t* p) {
    const auto* q = reinterpret_cast<const __m128i*>(p);
    if constexpr (Isa::kLanes == 8)
      return _mm_loadl_epi64(q);
    else
      return _mm_loadu_si128(q);
  }
  // The lanes as int32 (every value here is below 2^31) to float.
  static V to_float(U u) {
    typedef int32_t I __attribute__((vector_size(sizeof(U))));
    return __builtin_convertvector(I(u), V);
  }
  static U u8i(const uint8_t* p) { return Widen<Isa>::u8(bytes(p)); }
  static V s8(const uint8_t* p) { return Widen<Isa>::s8(bytes(p)); }
  static V lo4(const uint8_t* p) { return to_float(u8i(p) & 0x0f); }
  static V hi4(const uint8_t* p) { return to_float(u8i(p) >> 4); }
  static U nibbles(const uint8_t* p, bool high) {
    const U b = u8i(p);
    return high ? b >> 4 : b & 0x0f;
  }
  static V q6(const uint8_t* ql, bool high, const uint8_t* qh, int shift) {
    const U lo = nibbles(ql, high), h = (u8i(qh) >> shift) & 3;
    return to_float(lo | h << 4);
  }
  // bit 4 of lane i = bit 0 of lane i of `bits`
  static U bit4(U bits) { return (bits & 1) << 4; }
  static V q5(const uint8_t* ql, bool high, uint32_t qh, int first) {
    U lanes;  // 0, 1, .., kLanes − 1
    for (int i = 0; i < Isa::kLanes; ++i) lanes[i] = i;
    const U bits = (U{} + (qh >> first)) >> lanes;
    return to_float(nibbles(ql, high) | bit4(bits));
  }
  static V q5k(const uint8_t* ql, bool high, const uint8_t* qh, int shift) {
    return to_float(nibbles(ql, high) | bit4(u8i(qh) >> shift));
  }
  static V iq4nl(const uint8_t* q, bool high) {
    const __m128i table = _mm_load_si128(reinterpret_cast<const __m128i*>(kIq4nlValues));
    const __m128i b = bytes(q);
    const __m128i index = _mm_and_si128(high ? _mm_srli_epi16(b, 4) : b, _mm_set1_epi8(0x0f));
    return Widen<Isa>::s8(_mm_shuffle_epi8(table, index));
  }
};
#endif

// ---- Decoding one 32-weight sub-block into 32 / kLanes vectors -----------------
// A format F has kElems and kBytes (its block), kSubs = kElems / 32,
// decode<Isa>(block, sub, out) and kFormat, the BlockFormat it decodes.

template <class Isa>
constexpr int kVecs = 32 / Isa::kLanes;

struct Q8_0 {
  static constexpr int kElems = 32, kBytes = 34, kSubs = 1;
  template <class Isa>
  static void decode(const uint8_t* b, int, typename Isa::V* out) {
    const auto d = Isa::set1(Bytes<Isa>::half(b));
    for (int v = 0; v < kVecs<Isa>; ++v)
      out[v] = Isa::mul(d, Bytes<Isa>::s8(b + 2 + v * Isa::kLanes));
  }
  static constexpr BlockFormat kFormat = BlockFormat::kQ8_0;
};

// Q4_0 and Q4_1: weights 0..15 in the low nibbles of the 16 bytes, 16..31 in
// the high ones; Q4_0: (q − 8)·d (exact; −0 for q = 8 and d < 0, as ggml),
// Q4_1: q·d + m (q·d exact, one rounding).
template <bool kHasMin>
struct Q4Legacy {
  static constexpr int kElems = 32, kBytes = kHasMin ? 20 : 18, kSubs = 1;
  template <class Isa>
  static typename Isa::V weights(typename Isa::V q, typename Isa::V d, typename Isa::V m) {
    if constexpr (kHasMin)  // q·d is exact: one rounding, as the reference's
      return Isa::fmadd(q, d, m);
    else
      return Isa::mul(Isa::sub(q, m), d);
  }
  template <class Isa>
  static void decode(const uint8_t* b, int, typename Isa::V* out) {
    const auto d = Isa::set1(Bytes<Isa>::half(b));
    const auto m = Isa::set1(kHasMin ? Bytes<Isa>::half(b + 2) : 8.0f);
    const uint8_t* qs = b + (kHasMin ? 4 : 2);
    constexpr int kHalf = kVecs<Isa> / 2;
    for (int v = 0; v < kHalf; ++v) {
      out[v] = weights<Isa>(Bytes<Isa>::lo4(qs + v * Isa::kLanes), d, m);
      out[v + kHalf] = weights<Isa>(Bytes<Isa>::hi4(qs + v * Isa::kLanes), d, m);
    }
  }
  static constexpr BlockFormat kFormat = kHasMin ? BlockFormat::kQ4_1 : BlockFormat::kQ4_0;
};
using Q4_0 = Q4Legacy<false>;
using Q4_1 = Q4Legacy<true>;

// Q5_0 and Q5_1: Q4_0's and Q4_1's nibbles with a fifth bit from the u32 qh
// (bit i for weight i); Q5_0: (q − 16)·d, Q5_1: q·d + m, rounded as Q4_*.
template <bool kHasMin>
struct Q5Legacy {
  static constexpr int kElems = 32, kBytes = kHasMin ? 24 : 22, kSubs = 1;
  template <class Isa>
  static void decode(const uint8_t* b, int, typename Isa::V* out) {
    const auto d = Isa::set1(Bytes<Isa>::half(b));
    const auto m = Isa::set1(kHasMin ? Bytes<Isa>::half(b + 2) : 16.0f);
    const uint32_t qh = q5_high_bits(b + (kHasMin ? 4 : 2));
    const uint8_t* qs = b + (kHasMin ? 8 : 6);
    constexpr int L = Isa::kLanes, kHalf = kVecs<Isa> / 2;
    for (int v = 0; v < kHalf; ++v) {
      const auto lo = Bytes<Isa>::q5(qs + v * L, false, qh, v * L);
      const auto hi = Bytes<Isa>::q5(qs + v * L, true, qh, 16 + v * L);
      out[v] = Q4Legacy<kHasMin>::template weights<Isa>(lo, d, m);
      out[v + kHalf] = Q4Legacy<kHasMin>::template weights<Isa>(hi, d, m);
    }
  }
  static constexpr BlockFormat kFormat = kHasMin ? BlockFormat::kQ5_1 : BlockFormat::kQ5_0;
};
using Q5_0 = Q5Legacy<false>;
using Q5_1 = Q5Legacy<true>;

// IQ4_NL: d · level(q), the level an int8 (exact product), nibbles as Q4_0's.
struct IQ4_NL {
  static constexpr int kElems = 32, kBytes = 18, kSubs = 1;
  template <class Isa>
  static void decode(const uint8_t* b, int, typename Isa::V* out) {
    const auto d = Isa::set1(Bytes<Isa>::half(b));
    constexpr int L = Isa::kLanes, kHalf = kVecs<Isa> / 2;
    for (int v = 0; v < kHalf; ++v) {
      out[v] = Isa::mul(Bytes<Isa>::iq4nl(b + 2 + v * L, false), d);
      out[v + kHalf] = Isa::mul(Bytes<Isa>::iq4nl(b + 2 + v * L, true), d);
    }
  }
  static constexpr BlockFormat kFormat = BlockFormat::kIQ4_NL;
};

// Sub-block s = 4·half + t (quarter t of a 128-weight half): (d·scale)·(q −
// 32), scale changing every 16 weights (a whole number of vectors).
struct Q6_K {
  static constexpr int kElems = 256, kBytes = 210, kSubs = 8;
  template <class Isa>
  static void decode(const uint8_t* b, int s, typename Isa::V* out) {
    const int half = s / 4, t = s % 4;
    const uint8_t* ql = b + 64 * half + 32 * (t & 1);
    const uint8_t* qh = b + 128 + 32 * half;
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192) + 8 * half + 2 * t;
    const float d = Bytes<Isa>::half(b + 208);
    const auto d0 = Isa::set1(d * static_cast<float>(scales[0]));
    const auto d1 = Isa::set1(d * static_cast<float>(scales[1]));
    const auto bias = Isa::set1(32.0f);
    for (int v = 0; v < kVecs<Isa>; ++v) {
      const int l = v * Isa::kLanes;
      const auto q = Bytes<Isa>::q6(ql + l, t >= 2, qh + l, 2 * t);
      out[v] = Isa::mul(Isa::sub(q, bias), l < 16 ? d0 : d1);
    }
  }
  static constexpr BlockFormat kFormat = BlockFormat::kQ6_K;
};

// Q4_K and Q5_K. Sub-block s: (d·sc)·q − dmin·mn over the low (even s) or
// high (odd s) nibbles of bytes 32·(s/2) .. +31 of qs; d·sc and dmin·mn are
// exact in float32. Q5_K: bit 4 of weight i of sub-block s at bit s of qh[i]
// (d·sc·q still exact, q < 32), one rounding.
template <bool kHighBit>
struct Q45_K {
  static constexpr int kElems = 256, kBytes = kHighBit ? 176 : 144, kSubs = 8;
  template <class Isa>
  static void decode(const uint8_t* b, int s, typename Isa::V* out) {
    int sc, mn;
    q4k_scale_min(b + 4, s, &sc, &mn);
    const auto d = Isa::set1(Bytes<Isa>::half(b) * static_cast<float>(sc));
    const auto m = Isa::set1(Bytes<Isa>::half(b + 2) * static_cast<float>(mn));
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + (kHighBit ? 48 : 16) + 32 * (s / 2);
    for (int v = 0; v < kVecs<Isa>; ++v) {
      const int l = v * Isa::kLanes;
      const auto q = [&] {
        if constexpr (kHighBit)
          return Bytes<Isa>::q5k(qs + l, s % 2 != 0, qh + l, s);
        else
          return s % 2 == 0 ? Bytes<Isa>::lo4(qs + l) : Bytes<Isa>::hi4(qs + l);
      }();
      out[v] = Isa::sub(Isa::mul(q, d), m);
    }
  }
  static constexpr BlockFormat kFormat = kHighBit ? BlockFormat::kQ5_K : BlockFormat::kQ4_K;
};
using Q4_K = Q45_K<false>;
using Q5_K = Q45_K<true>;

// Calls f.template operator()<R>() with R = rows, for 1 ≤ rows ≤ kMax.
template <int kMax, class Fn>
void with_rows(int64_t rows, Fn&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((rows == I + 1 ? (f.template operator()<I + 1>(), 0) : 0), ...);
  }(std::make_integer_sequence<int, kMax>{});
}

// ---- The few-rows product --------------------------------------------------------

// y[r, j] = Σ_p x[r, p] · W[j, p] (+ bias[j]) for R rows and j in [c0, c1).
// Each sub-block of W is decoded once for the R rows; per row, its kVecs
// products are summed in a chain of its own (a multiply, then FMAs) and
// added to the row's single accumulator. The loop-carried chain is one add
// per sub-block, and the sum order of a row does not depend on R: a row
// gets the same y whether it is decoded alone or among others.
template <class Isa, class F, int R>
void gemv_rows(const float* x, int64_t ldx, const QuantMatrix& w, const float* bias, float* y,
               int64_t ldy, int64_t c0, int64_t c1) {
  using V = typename Isa::V;
  constexpr int L = Isa::kLanes, NV = kVecs<Isa>;
  const int64_t blocks = w.k / F::kElems;
  for (int64_t j = c0; j < c1; ++j) {
    prefetch_ahead(w, j);
    const uint8_t* row = w.data + j * w.row_bytes;
    V acc[R];
    for (int r = 0; r < R; ++r) acc[r] = Isa::zero();
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = row + b * F::kBytes;
      for (int s = 0; s < F::kSubs; ++s) {
        V wv[NV];
        F::template decode<Isa>(block, s, wv);
        const float* xp = x + b * F::kElems + 32 * s;
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const float* xr = xp + r * ldx;
          V part = Isa::mul(wv[0], Isa::load(xr));
#pragma GCC unroll 8
          for (int v = 1; v < NV; ++v) part = Isa::fmadd(wv[v], Isa::load(xr + v * L), part);
          acc[r] = Isa::add(acc[r], part);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const float sum = Isa::reduce_add(acc[r]);
      y[r * ldy + j] = bias != nullptr ? sum + bias[j] : sum;
    }
  }
}

// The most rows of x one pass over W meets (gemv_rows' R): the decoding of a
// sub-block (a dozen or more instructions) is shared by up to 8 rows costing
// about 5 each (AVX2: a multiply, 3 FMAs, an add); 8 accumulators, the
// decoded weights and their scales fill AVX2's 16 registers.
constexpr int kRowsPerPass = 8;

// Channels [c0, c1) in groups of 16 (their rows of W stay in L1), each group
// meeting the m rows of x kMaxRows at a time: rows.template operator()<R>(r0,
// j0, j1) for R = min(kMaxRows, m - r0) rows from r0 and channels [j0, j1).
template <int kMaxRows, class Rows>
void for_each_row_block(int64_t m, int64_t c0, int64_t c1, Rows&& rows) {
  constexpr int64_t kGroup = 16;
  for (int64_t j0 = c0; j0 < c1; j0 += kGroup) {
    const int64_t j1 = std::min(c1, j0 + kGroup);
    for (int64_t r0 = 0; r0 < m; r0 += kMaxRows)
      with_rows<kMaxRows>(std::min<int64_t>(kMaxRows, m - r0),
                          [&]<int R>() { rows.template operator()<R>(r0, j0, j1); });
  }
}

template <class Isa, class F>
void gemv_format(const float* x, int64_t ldx, int64_t m, const QuantMatrix& w, const float* bias,
                 float* y, int64_t ldy, int64_t c0, int64_t c1) {
  for_each_row_block<kRowsPerPass>(m, c0, c1, [&]<int R>(int64_t r0, int64_t j0, int64_t j1) {
    gemv_rows<Isa, F, R>(x + r0 * ldx, ldx, w, bias, y + r0 * ldy, ldy, j0, j1);
  });
}

// Calls f.template operator()<F>() for the F of F... whose kFormat is format.
template <class... F, class Fn>
void with_format_of(BlockFormat format, Fn&& f) {
  ((format == F::kFormat && (f.template operator()<F>(), true)) || ...);
}

// The same over every format.
template <class Fn>
void with_format(BlockFormat format, Fn&& f) {
  with_format_of<Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, IQ4_NL>(format, f);
}

template <class Isa>
void gemv_block(const float* x, int64_t ldx, int64_t m, const QuantMatrix& w, const float* bias,
                float* y, int64_t ldy, int64_t c0, int64_t c1) {
  with_format(w.format,
              [&]<class F>() { gemv_format<Isa, F>(x, ldx, m, w, bias, y, ldy, c0, c1); });
}

template <class Isa>
void dequantize_rows(const QuantMatrix& w, int64_t j0, int64_t j1, float* out, int64_t ldo) {
  with_format(w.format, [&]<class F>() {
    using V = typename Isa::V;
    constexpr int L = Isa::kLanes, NV = kVecs<Isa>;
    const int64_t blocks = w.k / F::kElems;
    for (int64_t j = j0; j < j1; ++j) {
      const uint8_t* row = w.data + j * w.row_bytes;
      float* dst = out + (j - j0) * ldo;
      for (int64_t b = 0; b < blocks; ++b)
        for (int s = 0; s < F::kSubs; ++s) {
          V wv[NV];
          F::template decode<Isa>(row + b * F::kBytes, s, wv);
          for (int v = 0; v < NV; ++v) Isa::store(dst + b * F::kElems + 32 * s + v * L, wv[v]);
        }
    }
  });
}

}  // namespace
}  // namespace qkv::kernels::quant
