// The FP32 peak of one core: independent chains of vector FMAs, enough of
// them to cover the FMA latency on every port.
#pragma once

#include <chrono>

#include "kernels/simd/vec.h"

namespace qkv::kernels::simd {
namespace {

template <class Isa>
double fma_peak_gflops(double seconds) {
  using V = typename Isa::V;
  constexpr int kChains = 12;  // ≥ latency (4) × FMA ports (2), with margin
  V acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = Isa::set1(0.001f * i);
  const V a = Isa::set1(0.999999f), b = Isa::set1(1e-7f);
  const auto start = std::chrono::steady_clock::now();
  int64_t iterations = 0;
  double elapsed = 0.0;
  do {
    for (int n = 0; n < 100000; ++n) {
#pragma GCC unroll 12
      for (int i = 0; i < kChains; ++i) acc[i] = Isa::fmadd(acc[i], a, b);
    }
    iterations += 100000;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (elapsed < seconds);
  float sink = 0.0f;
  for (int i = 0; i < kChains; ++i) sink += Isa::reduce_add(acc[i]);
  // Keep the chains alive: the sum feeds the result by a factor of zero.
  return (static_cast<double>(iterations) * kChains * Isa::kLanes * 2 + sink * 0.0f) / elapsed /
         1e9;
}

}  // namespace
}  // namespace qkv::kernels::simd
