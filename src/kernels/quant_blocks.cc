// The block formats' layouts and their reference dequantisation
// (quant_blocks.h), written for clarity: the kernels of quant_rows.h are
// tested against it.
#include "kernels/quant_blocks.h"

#include <string>

#include "qkv/error.h"

namespace qkv::kernels {

namespace {

struct FormatInfo {
  BlockFormat format;
  const char* name;
  BlockLayout layout;
};

// Every block format: its name and its block of weights and bytes.
constexpr FormatInfo kFormats[] = {
    {BlockFormat::kQ4_0, "Q4_0", {32, 18}},     {BlockFormat::kQ4_1, "Q4_1", {32, 20}},
    {BlockFormat::kQ5_0, "Q5_0", {32, 22}},     {BlockFormat::kQ5_1, "Q5_1", {32, 24}},
    {BlockFormat::kQ8_0, "Q8_0", {32, 34}},     {BlockFormat::kQ4_K, "Q4_K", {256, 144}},
    {BlockFormat::kQ5_K, "Q5_K", {256, 176}},   {BlockFormat::kQ6_K, "Q6_K", {256, 210}},
    {BlockFormat::kIQ4_NL, "IQ4_NL", {32, 18}},
};

// The entry of ggml type id `id`, or nullptr.
const FormatInfo* find_format(uint32_t id) {
  for (const FormatInfo& f : kFormats)
    if (static_cast<uint32_t>(f.format) == id) return &f;
  return nullptr;
}

}  // namespace

BlockLayout block_layout(BlockFormat format) {
  const uint32_t id = static_cast<uint32_t>(format);
  if (const FormatInfo* f = find_format(id)) return f->layout;
  throw Error(ErrorKind::kValue, "unknown block format (ggml type " + std::to_string(id) +
                                     "); supported: " + supported_block_formats());
}

const char* block_format_name(BlockFormat format) {
  const FormatInfo* f = find_format(static_cast<uint32_t>(format));
  return f != nullptr ? f->name : "unknown";
}

bool is_block_format(uint32_t ggml_type) { return find_format(ggml_type) != nullptr; }

std::string supported_block_formats() {
  std::string out;
  for (const FormatInfo& f : kFormats) {
    if (!out.empty()) out += ", ";
    out += std::string(f.name) + " = " + std::to_string(static_cast<uint32_t>(f.format));
  }
  return out;
}

namespace {

// Each weight: its exact value in double (products of fp16 scales and small
// integers, and one sum, fit in 53 bits), rounded once to float.
void dequantize_block(BlockFormat format, const uint8_t* b, float* out) {
  switch (format) {
    case BlockFormat::kQ8_0: {
      const double d = half_to_float(load_u16(b));
      for (int i = 0; i < 32; ++i) out[i] = static_cast<float>(d * static_cast<int8_t>(b[2 + i]));
      return;
    }
    case BlockFormat::kQ4_0: {
      const double d = half_to_float(load_u16(b));
      for (int i = 0; i < 16; ++i) {
        out[i] = static_cast<float>(d * ((b[2 + i] & 0x0f) - 8));
        out[i + 16] = static_cast<float>(d * ((b[2 + i] >> 4) - 8));
      }
      return;
    }
    case BlockFormat::kQ4_1: {
      const double d = half_to_float(load_u16(b)), m = half_to_float(load_u16(b + 2));
      for (int i = 0; i < 16; ++i) {
        out[i] = static_cast<float>(d * (b[4 + i] & 0x0f) + m);
        out[i + 16] = static_cast<float>(d * (b[4 + i] >> 4) + m);
      }
      return;
    }
    case BlockFormat::kQ5_0:
    case BlockFormat::kQ5_1: {
      const bool has_min = format == BlockFormat::kQ5_1;
      const double d = half_to_float(load_u16(b));
      const double m = has_min ? half_to_float(load_u16(b + 2)) : 0.0;
      const uint32_t qh = q5_high_bits(b + (has_min ? 4 : 2));
      const uint8_t* qs = b + (has_min ? 8 : 6);
      // Q5_0: d · (q − 16) with no add, which keeps its −0 (q = 16, d < 0), as ggml.
      const auto weight = [&](int q) {
        return static_cast<float>(has_min ? d * q + m : d * (q - 16));
      };
      for (int i = 0; i < 16; ++i) {
        out[i] = weight((qs[i] & 0x0f) | ((qh >> i) & 1) << 4);
        out[i + 16] = weight((qs[i] >> 4) | ((qh >> (i + 16)) & 1) << 4);
      }
      return;
    }
    case BlockFormat::kIQ4_NL: {
      const double d = half_to_float(load_u16(b));
      for (int i = 0; i < 16; ++i) {
        out[i] = static_cast<float>(d * kIq4nlValues[b[2 + i] & 0x0f]);
        out[i + 16] = static_cast<float>(d * kIq4nlValues[b[2 + i] >> 4]);
      }
      return;
    }
    case BlockFormat::kQ4_K:
    case BlockFormat::kQ5_K: {
      // Q5_K is Q4_K with 32 bytes of high bits before the nibbles.
      const bool five = format == BlockFormat::kQ5_K;
      const double d = half_to_float(load_u16(b)), dmin = half_to_float(load_u16(b + 2));
      const uint8_t* scales = b + 4;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = b + (five ? 48 : 16);
      for (int s = 0; s < 8; ++s) {
        int sc, mn;
        q4k_scale_min(scales, s, &sc, &mn);
        const uint8_t* q = qs + 32 * (s / 2);
        for (int i = 0; i < 32; ++i) {
          const int nibble = s % 2 == 0 ? (q[i] & 0x0f) : (q[i] >> 4);
          const int value = five ? nibble | ((qh[i] >> s) & 1) << 4 : nibble;
          out[32 * s + i] = static_cast<float>(d * sc * value - dmin * mn);
        }
      }
      return;
    }
    case BlockFormat::kQ6_K: {
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
      const double d = half_to_float(load_u16(b + 208));
      // Weight i of a half (128 weights): quarter t = i / 32, l = i % 32;
      // low 4 bits from ql[l + 32 · (t & 1)] (high nibble when t ≥ 2), high 2
      // bits from qh[l] >> 2t, scale scales[i / 16].
      for (int half = 0; half < 2; ++half)
        for (int i = 0; i < 128; ++i) {
          const int t = i / 32, l = i % 32;
          const uint8_t lo = ql[64 * half + l + 32 * (t & 1)];
          const int q =
              (t < 2 ? (lo & 0x0f) : (lo >> 4)) | (((qh[32 * half + l] >> (2 * t)) & 3) << 4);
          out[128 * half + i] = static_cast<float>(d * scales[8 * half + i / 16] * (q - 32));
        }
      return;
    }
  }
}

}  // namespace

void dequantize_row_reference(BlockFormat format, const uint8_t* blocks, float* out, int64_t n) {
  const BlockLayout layout = block_layout(format);
  if (n < 0 || n % layout.elems != 0)
    throw Error(ErrorKind::kValue, std::string("dequantize_row: n must be a multiple of ") +
                                       block_format_name(format) + "'s block of " +
                                       std::to_string(layout.elems) + ", got " + std::to_string(n));
  for (int64_t i = 0; i < n / layout.elems; ++i)
    dequantize_block(format, blocks + i * layout.bytes, out + i * layout.elems);
}

int64_t first_nonfinite_block(BlockFormat format, const uint8_t* blocks, int64_t count) {
  const BlockLayout layout = block_layout(format);
  // The byte offsets of the block's fp16 scales (the second: 0 = none).
  int first = 0, second = 0;
  switch (format) {
    case BlockFormat::kQ4_1:
    case BlockFormat::kQ5_1:
    case BlockFormat::kQ4_K:
    case BlockFormat::kQ5_K:
      second = 2;
      break;
    case BlockFormat::kQ6_K:
      first = 208;
      break;
    default:
      break;
  }
  const auto bad = [](uint16_t h) { return (h & 0x7c00u) == 0x7c00u; };  // exponent all ones
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t* b = blocks + i * layout.bytes;
    if (bad(load_u16(b + first)) || (second != 0 && bad(load_u16(b + second)))) return i;
  }
  return -1;
}

}  // namespace qkv::kernels
