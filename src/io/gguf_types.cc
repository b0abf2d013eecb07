// The ggml tensor types and GGUF value types: names and block sizes.
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>

#include "io/gguf_util.h"
#include "qkv/io/gguf.h"

namespace qkv::io {

namespace {

constexpr uint32_t kQK = 256;  // elements per super-block of the K, IQ and TQ types

struct TypeEntry {
  uint32_t id;
  GgmlTypeTraits traits;
};

// ggml's types and the sizes of their blocks, checked against the block structs of llama.cpp's
// ggml-common.h (gguf-py 0.19's GGML_QUANT_SIZES agrees except for Q8_1).
constexpr TypeEntry kTypes[] = {
    {0, {"F32", 1, 4}},
    {1, {"F16", 1, 2}},
    {2, {"Q4_0", 32, 2 + 16}},
    {3, {"Q4_1", 32, 2 + 2 + 16}},
    {6, {"Q5_0", 32, 2 + 4 + 16}},
    {7, {"Q5_1", 32, 2 + 2 + 4 + 16}},
    {8, {"Q8_0", 32, 2 + 32}},
    {9, {"Q8_1", 32, 2 + 2 + 32}},  // f16 d, f16 s (gguf-py 0.19 still says 2 floats)
    {10, {"Q2_K", kQK, 2 + 2 + kQK / 16 + kQK / 4}},
    {11, {"Q3_K", kQK, 2 + kQK / 4 + kQK / 8 + 12}},
    {12, {"Q4_K", kQK, 2 + 2 + kQK / 2 + 12}},
    {13, {"Q5_K", kQK, 2 + 2 + kQK / 2 + kQK / 8 + 12}},
    {14, {"Q6_K", kQK, 2 + kQK / 2 + kQK / 4 + kQK / 16}},
    {15, {"Q8_K", kQK, 4 + kQK + kQK / 8}},
    {16, {"IQ2_XXS", kQK, 2 + kQK / 4}},
    {17, {"IQ2_XS", kQK, 2 + kQK / 4 + kQK / 32}},
    {18, {"IQ3_XXS", kQK, 2 + kQK / 4 + kQK / 8}},
    {19, {"IQ1_S", kQK, 2 + kQK / 8 + kQK / 16}},
    {20, {"IQ4_NL", 32, 2 + 16}},
    {21, {"IQ3_S", kQK, 2 + kQK / 4 + kQK / 8 + kQK / 32 + 4}},
    {22, {"IQ2_S", kQK, 2 + kQK / 4 + kQK / 16}},
    {23, {"IQ4_XS", kQK, 2 + 2 + kQK / 2 + kQK / 64}},
    {24, {"I8", 1, 1}},
    {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},
    {27, {"I64", 1, 8}},
    {28, {"F64", 1, 8}},
    {29, {"IQ1_M", kQK, kQK / 8 + kQK / 16 + kQK / 32}},
    {30, {"BF16", 1, 2}},
    {34, {"TQ1_0", kQK, 2 + 4 * 13}},
    {35, {"TQ2_0", kQK, 2 + 64}},
    {39, {"MXFP4", 32, 1 + 16}},
};

// The sizes every qkv consumer relies on, checked against llama.cpp's block structs.
static_assert(kTypes[3].traits.block_bytes == 20);    // Q4_1: f16 d, f16 m, 16 bytes of nibbles
static_assert(kTypes[6].traits.block_bytes == 34);    // Q8_0: f16 d, 32 int8
static_assert(kTypes[13].traits.block_bytes == 292);  // Q8_K: f32 d, 256 int8, 16 int16 sums
static_assert(kTypes[12].traits.block_bytes == 210);  // Q6_K
static_assert(kTypes[7].traits.block_bytes == 36);    // Q8_1

constexpr std::string_view kValueTypeNames[] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};

}  // namespace

const GgmlTypeTraits* ggml_type_traits(uint32_t id) {
  for (const TypeEntry& entry : kTypes)
    if (entry.id == id) return &entry.traits;
  return nullptr;
}

std::string_view ggml_type_name(GgmlType type) {
  if (const GgmlTypeTraits* traits = ggml_type_traits(static_cast<uint32_t>(type)))
    return traits->name;
  return "unknown ggml type";
}

bool ggml_type_is_quantized(GgmlType type) {
  const GgmlTypeTraits* traits = ggml_type_traits(static_cast<uint32_t>(type));
  return traits != nullptr && traits->block_elements > 1;
}

std::string_view gguf_value_type_name(GgufValueType type) {
  const auto index = static_cast<uint32_t>(type);
  return index < std::size(kValueTypeNames) ? kValueTypeNames[index] : "unknown value type";
}

namespace gguf_detail {

bool valid_utf8(std::string_view s, size_t* bad_at) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  const auto n = static_cast<utf8proc_ssize_t>(s.size());
  utf8proc_int32_t cp;
  for (utf8proc_ssize_t i = 0; i < n;) {
    // Rejects overlong forms, surrogates and code points above U+10FFFF.
    const utf8proc_ssize_t len = utf8proc_iterate(p + i, n - i, &cp);
    if (len <= 0) {
      if (bad_at) *bad_at = static_cast<size_t>(i);
      return false;
    }
    i += len;
  }
  return true;
}

std::string quoted(std::string_view s) {
  constexpr size_t kMax = 80;
  const bool utf8 = valid_utf8(s);
  size_t cut = std::min(s.size(), kMax);
  while (utf8 && cut < s.size() && cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80)
    --cut;  // not inside a character
  std::string out = "\"";
  for (size_t i = 0; i < cut; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F || (!utf8 && c >= 0x80)) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  if (cut < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

}  // namespace gguf_detail

}  // namespace qkv::io
