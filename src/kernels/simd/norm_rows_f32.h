// One row of layer_norm(x + r) in float32 arithmetic on vectors of one
// instruction set, for models that compute in bfloat16 or int8: there the
// float64 statistics of norm_rows.h cost twice the time and buy nothing, as
// float32's error (~1e-6 of the row's scale) is far below bfloat16's
// rounding. rows_*.cc compile it once per ISA into RowKernels. Internal
// linkage, as vec.h.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/simd/vec.h"

namespace qkv::kernels::simd {
namespace {

// y = (s − mean(s)) / √(var(s) + eps) · w + b with s = x + r, each sum
// rounded to float32 first (as an add, then layer_norm). r, w and b may be
// null; y may be x. Whole vectors, the ragged tail in scalars; the variance
// is taken around the mean (two passes), so a large mean costs no accuracy.
template <class Isa>
void add_layer_norm_f32_span(const float* x, const float* r, const float* w, const float* b,
                             float* y, int64_t n, double eps) {
  using V = typename Isa::V;
  constexpr int kL = Isa::kLanes;
  const int64_t whole = n / kL * kL;
  // s into y, and its sum.
  V lane_sum = Isa::zero();
  for (int64_t i = 0; i < whole; i += kL) {
    V s = Isa::load(x + i);
    if (r) s = Isa::add(s, Isa::load(r + i));
    Isa::store(y + i, s);
    lane_sum = Isa::add(lane_sum, s);
  }
  float tail_sum = 0.0f;
  for (int64_t i = whole; i < n; ++i) {
    y[i] = r ? x[i] + r[i] : x[i];
    tail_sum += y[i];
  }
  const float mean = (Isa::reduce_add(lane_sum) + tail_sum) / static_cast<float>(n);
  const V vmean = Isa::set1(mean);
  V lane_squares = Isa::zero();
  for (int64_t i = 0; i < whole; i += kL) {
    const V d = Isa::sub(Isa::load(y + i), vmean);
    lane_squares = Isa::fmadd(d, d, lane_squares);
  }
  float tail_squares = 0.0f;
  for (int64_t i = whole; i < n; ++i) tail_squares += (y[i] - mean) * (y[i] - mean);
  const float var = (Isa::reduce_add(lane_squares) + tail_squares) / static_cast<float>(n);
  const float rstd = 1.0f / std::sqrt(var + static_cast<float>(eps));
  const V vrstd = Isa::set1(rstd);
  for (int64_t i = 0; i < whole; i += kL) {
    V v = Isa::mul(Isa::sub(Isa::load(y + i), vmean), vrstd);
    if (w) v = Isa::mul(v, Isa::load(w + i));
    if (b) v = Isa::add(v, Isa::load(b + i));
    Isa::store(y + i, v);
  }
  for (int64_t i = whole; i < n; ++i) {
    float v = (y[i] - mean) * rstd;
    if (w) v *= w[i];
    if (b) v += b[i];
    y[i] = v;
  }
}

}  // namespace
}  // namespace qkv::kernels::simd
