// A 16 × 16 transpose of 4-byte words in AVX-512 registers: the AMX kernels
// turn rows of bfloat16 pairs into B panels with it, the avx512_vnni16 prompt
// route rows of int16 pairs into channel lanes. Compiled only in translation
// units built for AVX-512; internal linkage, as kernels/simd/vec.h.
#pragma once

#include <immintrin.h>

namespace qkv::kernels::simd {
namespace {

// 16 rows of 16 words → their 16 columns (words[c][r] = old words[r][c]):
// pairs within 128-bit lanes, then quads, then the lanes themselves.
inline void transpose_16x16_words(__m512i words[16]) {
  __m512i pairs[16], quads[16];
  for (int i = 0; i < 16; i += 2) {
    pairs[i] = _mm512_unpacklo_epi32(words[i], words[i + 1]);
    pairs[i + 1] = _mm512_unpackhi_epi32(words[i], words[i + 1]);
  }
  // quads[4g + c], lane L: rows 4g..4g+3 of column 4L + c.
  for (int g = 0; g < 16; g += 4) {
    quads[g] = _mm512_unpacklo_epi64(pairs[g], pairs[g + 2]);
    quads[g + 1] = _mm512_unpackhi_epi64(pairs[g], pairs[g + 2]);
    quads[g + 2] = _mm512_unpacklo_epi64(pairs[g + 1], pairs[g + 3]);
    quads[g + 3] = _mm512_unpackhi_epi64(pairs[g + 1], pairs[g + 3]);
  }
  // Column 4L + c: lane L of quads[c], quads[4 + c], quads[8 + c], quads[12 + c].
  for (int c = 0; c < 4; ++c) {
    const __m512i lo01 = _mm512_shuffle_i32x4(quads[c], quads[4 + c], 0x44);
    const __m512i hi01 = _mm512_shuffle_i32x4(quads[c], quads[4 + c], 0xEE);
    const __m512i lo23 = _mm512_shuffle_i32x4(quads[8 + c], quads[12 + c], 0x44);
    const __m512i hi23 = _mm512_shuffle_i32x4(quads[8 + c], quads[12 + c], 0xEE);
    words[c] = _mm512_shuffle_i32x4(lo01, lo23, 0x88);
    words[4 + c] = _mm512_shuffle_i32x4(lo01, lo23, 0xDD);
    words[8 + c] = _mm512_shuffle_i32x4(hi01, hi23, 0x88);
    words[12 + c] = _mm512_shuffle_i32x4(hi01, hi23, 0xDD);
  }
}

}  // namespace
}  // namespace qkv::kernels::simd
