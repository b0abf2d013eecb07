// The rows of an attention problem's operands (q, k, v, dO: a
// MatrixOperand of float32 or bfloat16 values) as bfloat16 rows, the form
// the AMX kernels build their tiles from (attention_amx.cc,
// attention_amx_backward.cc), and such rows transposed into B panels.
// Rounded to nearest even, as amx::bf16x16.
// Compiled only in translation units built with AVX512_BF16; internal
// linkage, as kernels/simd/vec.h.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/reference/sdpa_reference.h"
#include "kernels/simd/amx_tiles.h"

namespace qkv::kernels::amx {
namespace {

// One float as bfloat16, as bf16x16 rounds.
inline uint16_t bf16_of(float x) {
  return static_cast<uint16_t>(_mm256_extract_epi16(bf16x16(_mm512_set1_ps(x)), 0));
}

// Row `row` of problem b's matrix m (n values) as bfloat16 into dst[0, n),
// zeros in [n, padded).
void row_as_bf16(const MatrixOperand& m, DType dtype, int64_t b, int64_t row, int64_t n,
                 int64_t padded, uint16_t* dst) {
  const int64_t at = m.offsets[b] + row * m.row_stride;
  int64_t e = 0;
  if (dtype == DType::kBFloat16) {
    const uint16_t* src = static_cast<const uint16_t*>(m.base) + at;
    if (m.col_stride == 1) {  // (short rows: a masked vector copy beats a memcpy call)
      for (; e < n; e += 32) {
        const int64_t count = std::min<int64_t>(32, n - e);
        const __mmask32 lanes = count == 32 ? ~__mmask32{0} : (__mmask32{1} << count) - 1;
        _mm512_mask_storeu_epi16(dst + e, lanes, _mm512_maskz_loadu_epi16(lanes, src + e));
      }
      e = n;
    }
    for (; e < n; ++e) dst[e] = src[e * m.col_stride];
  } else {
    const float* src = static_cast<const float*>(m.base) + at;
    if (m.col_stride == 1) {
      for (; e + 16 <= n; e += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + e), bf16x16(_mm512_loadu_ps(src + e)));
      if (e < n) {
        const __mmask16 tail = static_cast<__mmask16>((1u << (n - e)) - 1);
        _mm256_mask_storeu_epi16(dst + e, tail, bf16x16(_mm512_maskz_loadu_ps(tail, src + e)));
        e = n;
      }
    }
    for (; e < n; ++e) dst[e] = bf16_of(src[e * m.col_stride]);
  }
  std::fill(dst + n, dst + padded, uint16_t{0});
}

// kp bfloat16 rows of `width` (kp a multiple of 16, width of 32) as panels of 32 rows
// with the pairs of each row down a column: word
// ((c / 32) · width/2 + s) · 32 + c % 32 = pair s of row c.
inline void transpose_rows_into_panels(const uint16_t* m, int64_t kp, int64_t width,
                                       uint32_t* dst) {
  const uint32_t* words = reinterpret_cast<const uint32_t*>(m);
  const int64_t w2 = width / 2;
  __m512i r[16];
  for (int64_t c0 = 0; c0 < kp; c0 += 16)
    for (int64_t s0 = 0; s0 < w2; s0 += 16) {
      for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(words + (c0 + i) * w2 + s0);
      transpose_16x16_words(r);
      uint32_t* out = dst + ((c0 / kBlock) * w2 + s0) * kBlock + c0 % kBlock;
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(out + i * kBlock, r[i]);
    }
}

}  // namespace
}  // namespace qkv::kernels::amx
