// Reading the little-endian elements of a tensor file (safetensors, GGUF)
// where they lie: unaligned, converted one by one.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace qkv::io {

// IEEE half -> float, exact (including subnormals, infinities and NaN payloads).
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1F;
  const uint32_t mantissa = h & 0x3FF;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  const uint32_t bits = exponent == 0x1F ? sign | 0x7F800000u | (mantissa << 13)
                                         : sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  return std::bit_cast<float>(bits);
}

// The T stored at p (any alignment; x86 is little-endian, as both formats).
template <class T>
T read_le(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// Converts `count` stored elements of type `Stored` with `convert` into `out`.
template <class Stored, class Out, class Convert>
void convert_all(const std::byte* src, int64_t count, Out* out, Convert convert) {
  for (int64_t i = 0; i < count; ++i) out[i] = convert(read_le<Stored>(src + i * sizeof(Stored)));
}

}  // namespace qkv::io
