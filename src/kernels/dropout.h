// Counter-based dropout: whether weight (problem b, query i, key j) is kept
// depends only on (seed, (b·L + i)·S + j). Every kernel — reference, fused,
// forward and backward — decides the same way without storing an L×S mask,
// and the mask can still be exported on request.
//
// `static inline` here and in the headers the ISA translation units include:
// each unit keeps its own copy, so the linker never hands code compiled for
// AVX-512 to a caller on a CPU without it.
#pragma once

#include <cstdint>

namespace qkv::kernels {

// splitmix64's finaliser over seed and counter: a well-mixed 64-bit hash.
static inline uint64_t dropout_hash(uint64_t seed, uint64_t counter) {
  uint64_t z = seed + (counter + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Kept with probability 1 − p.
static inline bool dropout_keep(uint64_t seed, uint64_t counter, double p) {
  const double u = static_cast<double>(dropout_hash(seed, counter) >> 11) * 0x1.0p-53;
  return u >= p;
}

}  // namespace qkv::kernels
