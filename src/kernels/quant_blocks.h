// The GGUF (ggml) block formats that qkv reads quantised weights in, and
// their reference dequantisation. A row of k weights is k / block blocks laid
// end to end; all fields little-endian, scales IEEE fp16:
//
//   Q8_0   32 weights, 34 bytes: d, 32 × int8 q                 w = d · q
//   Q4_0   32 weights, 18 bytes: d, 16 bytes of nibbles         w = d · (q − 8)
//   Q4_1   32 weights, 20 bytes: d, m, 16 bytes of nibbles      w = d · q + m
//          (Q4_*: byte i holds weight i in its low nibble, weight i + 16 in its high one)
//   Q5_0   32 weights, 22 bytes: d, qh (u32), 16 bytes of nibbles  w = d · (q − 16)
//   Q5_1   32 weights, 24 bytes: d, m, qh (u32), 16 bytes          w = d · q + m
//          (Q5_*: the nibbles as Q4_*'s, bit i of qh is bit 4 of weight i)
//   IQ4_NL 32 weights, 18 bytes: d, 16 bytes of nibbles as Q4_0's;
//          w = d · kIq4nlValues[q] (a fixed non-linear table of int8 levels)
//   Q4_K  256 weights, 144 bytes: d, dmin, 12 bytes of 6-bit scales and mins
//          (sc, mn) for 8 sub-blocks of 32, 128 bytes of nibbles; sub-block s
//          reads the low (s even) or high (s odd) nibbles of bytes 32·(s/2) ..
//          +31;  w = (d · sc) · q − dmin · mn
//   Q5_K  256 weights, 176 bytes: Q4_K's d, dmin and scales, then qh[32],
//          then Q4_K's 128 bytes of nibbles; bit s of qh[i] is bit 4 of
//          weight i of sub-block s;  w = (d · sc) · q − dmin · mn, q in [0, 32)
//   Q6_K  256 weights, 210 bytes: ql[128] (low 4 bits), qh[64] (high 2 bits),
//          int8 scales[16] (one per 16 weights), d at the end;
//          w = (d · scale) · (q − 32), q in [0, 64)
//
// Every w is one float32 rounding of its exact value (the products of fp16
// scales and small integers above are exact in float32, at most one add or
// multiply rounds), which is also what ggml's dequantize_row_* compute: the
// kernels reproduce the reference bit for bit.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "qkv/quant_format.h"

namespace qkv::kernels {

// The formats, valued as ggml's type ids (GGML_TYPE_Q4_0 = 2, ...): the
// public list (qkv/quant_format.h) under the kernels' name.
using BlockFormat = QuantFormat;

struct BlockLayout {
  int64_t elems;  // weights per block
  int64_t bytes;  // bytes per block
};
// Throws qkv::Error for a value that is not a BlockFormat.
BlockLayout block_layout(BlockFormat format);
const char* block_format_name(BlockFormat format);  // "Q4_1"; "unknown" for other values
// Whether ggml type id `ggml_type` is one of the BlockFormats.
bool is_block_format(uint32_t ggml_type);
// "Q4_0 = 2, Q4_1 = 3, ...": the formats and their ids, for error messages.
std::string supported_block_formats();

// The inline helpers have internal linkage: the per-ISA translation units
// compile them with their own flags (see kernels/simd/vec.h).
namespace {

// float32 of an IEEE half (exact: every half is a float32).
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // Inf, NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: mant · 2^-24, normalised
    int e = -1;
    uint32_t m = mant;
    do {
      m <<= 1;
      ++e;
    } while ((m & 0x400u) == 0);
    bits = sign | static_cast<uint32_t>(112 - e) << 23 | ((m & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t load_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (static_cast<uint16_t>(p[1]) << 8));
}

// IQ4_NL's 16 levels (ggml's kvalues_iq4nl), indexed by a nibble.
alignas(16) constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                 1,    13,   25,  38,  53,  69,  89,  113};

// Q5_0's and Q5_1's qh: bit i is bit 4 of weight i.
inline uint32_t q5_high_bits(const uint8_t* qh) {
  return static_cast<uint32_t>(qh[0]) | static_cast<uint32_t>(qh[1]) << 8 |
         static_cast<uint32_t>(qh[2]) << 16 | static_cast<uint32_t>(qh[3]) << 24;
}

// Q4_K's (and Q5_K's) 6-bit scale and min of sub-block s (0..7) from its 12 bytes.
inline void q4k_scale_min(const uint8_t* scales, int s, int* sc, int* mn) {
  if (s < 4) {
    *sc = scales[s] & 63;
    *mn = scales[s + 4] & 63;
  } else {
    *sc = (scales[s + 4] & 0x0f) | ((scales[s - 4] >> 6) << 4);
    *mn = (scales[s + 4] >> 4) | ((scales[s] >> 6) << 4);
  }
}

}  // namespace

// The reference: out[0, n) from the n / block blocks at `blocks` (n a
// multiple of the block), in plain scalar code.
void dequantize_row_reference(BlockFormat format, const uint8_t* blocks, float* out, int64_t n);

// The index of the first block among `count` at `blocks` whose fp16 scale (or
// min) is NaN or ±Inf, or -1: such a block would make every output it meets
// NaN or Inf, which a well-formed file never holds.
int64_t first_nonfinite_block(BlockFormat format, const uint8_t* blocks, int64_t count);

}  // namespace qkv::kernels
