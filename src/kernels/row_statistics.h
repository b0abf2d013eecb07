// The per-row statistics of layer_norm and rms_norm, in float64, shared by
// their forward (normalization.cc) and backward (normalization_backward.cc)
// so that both see exactly the same numbers. Internal.
//
// Sums run over eight partial sums: one running sum makes every addition wait
// for the previous one (about 4 cycles each); eight independent ones overlap
// and vectorise. Everything here is forced inline and has internal linkage
// (it is also compiled into the per-instruction-set rows_*.cc, whose copies
// the linker must never pick for another file); every file that includes it
// is compiled without contraction, so every instruction set (and the
// backward, which recomputes these) sees the same numbers.
#pragma once

#include <cmath>
#include <cstdint>

namespace qkv::detail {
namespace {

// The total of eight partial sums, always added in this order.
[[gnu::always_inline]] inline double lane_total(const double* lane) {
  return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

// Calls visit(i, lane) for i = 0 .. n-1 in order, lane being i's place in
// its block of eight: the loop whose eight partial sums run in vector lanes.
template <class Visit>
[[gnu::always_inline]] inline void for_each_lane(int64_t n, Visit&& visit) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int lane = 0; lane < 8; ++lane) visit(i + lane, lane);
  for (int lane = 0; i < n; ++i, ++lane) visit(i, lane);
}

// Σᵢ f(x[i]) in float64 for i < n, in eight partial sums (vector lanes).
template <class T, class F>
[[gnu::always_inline]] inline double row_sum(const T* x, int64_t n, F f) {
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for_each_lane(
      n, [&](int64_t i, int lane)
             __attribute__((always_inline)) { part[lane] += f(static_cast<double>(x[i])); });
  return lane_total(part);
}

// The mean and 1/√(variance + eps) (biased variance) of a row.
struct RowMoments {
  double mean = 0.0;
  double rstd = 0.0;
};

template <class T>
[[gnu::always_inline]] inline RowMoments layer_norm_moments(const T* x, int64_t n, double eps) {
  const double mean = row_sum(
                          x, n, [](double v) __attribute__((always_inline)) { return v; }) /
                      static_cast<double>(n);
  const double var =
      row_sum(
          x,
          n, [mean](double v) __attribute__((always_inline)) { return (v - mean) * (v - mean); }) /
      static_cast<double>(n);
  return {mean, 1.0 / std::sqrt(var + eps)};
}

// 1/√(mean(x²) + eps) of a row.
template <class T>
[[gnu::always_inline]] inline double rms_norm_rrms(const T* x, int64_t n, double eps) {
  const double mean_square =
      row_sum(
          x, n, [](double v) __attribute__((always_inline)) { return v * v; }) /
      static_cast<double>(n);
  return 1.0 / std::sqrt(mean_square + eps);
}

}  // namespace
}  // namespace qkv::detail
