// Branch-free float32 erf and exp that GCC vectorises, shared by the
// activations (activations.cc) and their backward (activation_backward.cc).
// Internal.
//
// Include this after `#pragma GCC optimize("no-trapping-math")`: clamps are
// selects, and GCC if-converts them for SSE/AVX2 only when comparisons may not
// trap (AVX-512 uses masks either way); nothing here reads FP flags.
#pragma once

#include <cstdint>
#include <cstring>

#define QKV_ALWAYS_INLINE inline __attribute__((always_inline))

// target_clones compiles a loop for AVX-512, AVX2+FMA and the baseline,
// chosen once when the library loads.
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define QKV_FLOAT32_CLONES __attribute__((target_clones("avx512f", "arch=haswell", "default")))
#else
#define QKV_FLOAT32_CLONES
#endif

namespace qkv::float32_math {

// std::min/max would no longer inline under the pragma: clamp_f32 replaces them.

// v clamped to [lo, hi]; NaN stays NaN.
QKV_ALWAYS_INLINE float clamp_f32(float v, float lo, float hi) {
  v = v < lo ? lo : v;
  return v > hi ? hi : v;
}

// erf(z) ~ z * P(z²) / Q(z²) on |z| <= 4 (beyond, erf rounds to ±1 in float32).
// Coefficients fitted here (Lawson-weighted linearised least squares toward
// minimax, float64 error 2.1e-8); evaluated in float32 the error is <= 3e-7
// absolute, ~5 ulp near ±1, set by rounding in the two Horner chains.
QKV_ALWAYS_INLINE float erf_f32(float z) {
  const float c = clamp_f32(z, -4.0f, 4.0f);
  const float t = c * c;
  float p = 1.974782207980752e-06f;
  p = p * t + 2.880418614950031e-04f;
  p = p * t + 4.003758076578379e-03f;
  p = p * t + 5.346782505512238e-02f;
  p = p * t + 1.962518692016602e-01f;
  p = p * t + 1.128378987312317e+00f;
  float q = 3.748038579942659e-05f;
  q = q * t + 1.216382952407002e-03f;
  q = q * t + 1.544465124607086e-02f;
  q = q * t + 1.164775937795639e-01f;
  q = q * t + 5.072548389434814e-01f;
  q = q * t + 1.0f;
  const float e = c * p / q;
  return clamp_f32(e, -1.0f, 1.0f);
}

// exp(y) for y clamped to [-86, 86] (normal floats; callers only need exp to
// saturate there). y = n ln2 + r, |r| <= ln2/2: 2^n from the exponent bits and
// e^r from its Taylor polynomial to r^7 (truncation < 5e-9 relative).
QKV_ALWAYS_INLINE float exp_f32(float y) {
  const float c = clamp_f32(y, -86.0f, 86.0f);
  // Round to nearest by adding 1.5 * 2^23 (vectorises, unlike std::nearbyint).
  const float shifter = 12582912.0f;
  const float n = (c * 1.44269504088896341f + shifter) - shifter;
  // ln2 in two parts so that n * ln2_hi is exact (Cody and Waite).
  const float r = (c - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // memcpy, not std::bit_cast: GCC 12 vectorises the loops only with memcpy.
  // NaN stays NaN through p; converting it to an integer would be undefined.
  const int32_t bits = (static_cast<int32_t>(n == n ? n : 0.0f) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

}  // namespace qkv::float32_math
