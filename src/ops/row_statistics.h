// The per-row statistics of layer_norm and rms_norm, in float64, shared by
// their forward (normalization.cc) and backward (normalization_backward.cc)
// so that both see exactly the same numbers. Internal.
//
// Sums run over eight partial sums: one running sum makes every addition wait
// for the previous one (about 4 cycles each); eight independent ones overlap
// and vectorise.
#pragma once

#include <cmath>
#include <cstdint>

namespace qkv::detail {

// The total of eight partial sums, always added in this order.
[[gnu::always_inline]] inline double lane_total(const double* lane) {
  return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

// Σᵢ f(x[i]) in float64 for i < n, in eight partial sums (vector lanes).
template <class T, class F>
double row_sum(const T* x, int64_t n, F f) {
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) part[j] += f(static_cast<double>(x[i + j]));
  for (int j = 0; i < n; ++i, ++j) part[j] += f(static_cast<double>(x[i]));
  return lane_total(part);
}

// The mean and 1/√(variance + eps) (biased variance) of a row.
struct RowMoments {
  double mean = 0.0;
  double rstd = 0.0;
};

template <class T>
RowMoments layer_norm_moments(const T* x, int64_t n, double eps) {
  const double mean = row_sum(x, n, [](double v) { return v; }) / static_cast<double>(n);
  const double var =
      row_sum(x, n, [mean](double v) { return (v - mean) * (v - mean); }) / static_cast<double>(n);
  return {mean, 1.0 / std::sqrt(var + eps)};
}

// 1/√(mean(x²) + eps) of a row.
template <class T>
double rms_norm_rrms(const T* x, int64_t n, double eps) {
  const double mean_square = row_sum(x, n, [](double v) { return v * v; }) / static_cast<double>(n);
  return 1.0 / std::sqrt(mean_square + eps);
}

}  // namespace qkv::detail
