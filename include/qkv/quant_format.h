// The GGUF (ggml) block formats qkv keeps quantised weights in: the one list
// of them, shared by the public API (quantized_linear.h) and the kernels
// (src/kernels/quant_blocks.h, which describes the bytes of each).
#pragma once

#include <cstdint>

namespace qkv {

// A block format; the values are ggml's type ids (GGUF tensor infos).
//   kQ8_0  32 weights in 34 bytes: fp16 d, 32 int8 q;             w = d·q
//   kQ4_0  32 weights in 18 bytes: fp16 d, 16 bytes of nibbles;   w = d·(q − 8)
//   kQ4_1  32 weights in 20 bytes: fp16 d, fp16 m, 16 bytes;      w = d·q + m
//          (byte i: weight i in the low nibble, weight i + 16 in the high one)
//   kQ5_0  32 weights in 22 bytes: fp16 d, u32 qh, 16 bytes;      w = d·(q − 16)
//   kQ5_1  32 weights in 24 bytes: fp16 d, fp16 m, u32 qh, 16 bytes;  w = d·q + m
//          (the nibbles as Q4_*'s, bit i of qh the fifth bit of weight i)
//   kIQ4_NL 32 weights in 18 bytes: fp16 d, 16 bytes of nibbles;  w = d·level[q]
//          (16 fixed int8 levels from −127 to 113)
//   kQ4_K  256 weights in 144 bytes: 8 sub-blocks of 32 with 6-bit scales and mins
//   kQ5_K  256 weights in 176 bytes: Q4_K with a fifth bit per weight
//   kQ6_K  256 weights in 210 bytes: 6-bit q, 16 int8 scales, fp16 d
enum class QuantFormat : uint32_t {
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ4_NL = 20,
};

// The format of a ggml type id; throws qkv::Error naming the id for any
// other (F32, F16, the other quantisations).
QuantFormat quant_format_from_ggml_type(uint32_t ggml_type);
const char* quant_format_name(QuantFormat format);  // "Q4_1", ...
int64_t quant_block_elements(QuantFormat format);   // 32 or 256
int64_t quant_block_bytes(QuantFormat format);      // 18, 20, 22, 24, 34, 144, 176, 210

}  // namespace qkv
