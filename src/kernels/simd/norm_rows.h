// One row of layer_norm and rms_norm, forward and backward, for float64
// (ops/normalization*.cc) and float32 (rows_*.cc, once per instruction set,
// through RowKernels). Scalar loops over float64 lane sums that GCC
// vectorises; every file that compiles them has -ffp-contract=off, so the
// forward and the backward recompute the same row statistics on every
// instruction set. Internal linkage, as vec.h.
#pragma once

#include <cstdint>

#include "kernels/row_statistics.h"

namespace qkv::kernels::simd {
namespace {

// One row: y = (x − mean) · rstd · w + b (w, b optional), in float64.
template <class T>
[[gnu::always_inline]] inline void layer_norm_row(const T* x, const T* w, const T* b, T* y,
                                                  int64_t n, double eps) {
  const auto [mean, rstd] = detail::layer_norm_moments(x, n, eps);
  for (int64_t i = 0; i < n; ++i) {
    double v = (x[i] - mean) * rstd;
    if (w) v *= w[i];
    if (b) v += b[i];
    y[i] = static_cast<T>(v);
  }
}

// One row: y = x · rrms · w (w optional), in float64.
template <class T>
[[gnu::always_inline]] inline void rms_norm_row(const T* x, const T* w, T* y, int64_t n,
                                                double eps) {
  const double rrms = detail::rms_norm_rrms(x, n, eps);
  for (int64_t i = 0; i < n; ++i) {
    double v = x[i] * rrms;
    if (w) v *= w[i];
    y[i] = static_cast<T>(v);
  }
}

// One row of layer_norm's backward: recomputes mean and rstd as the forward,
// adds g·xhat to dw and g to db and, when dx is given, the input gradient to
// dx. The row sums are float64 in eight lanes (as row_sum), which lets the
// loop run in vector registers.
template <class T>
[[gnu::always_inline]] inline void layer_norm_backward_row(const T* x, const T* dy, const T* w,
                                                           T* dx, int64_t n, double eps, double* dw,
                                                           double* db) {
  // Plain locals, not a structured binding: the lambda below captures them.
  const detail::RowMoments moments = detail::layer_norm_moments(x, n, eps);
  const double mean = moments.mean, rstd = moments.rstd;
  // Forward: v = (x[i] - mean) * rstd; v *= w[i]; v += b[i];
  double lane_dxhat[8] = {0, 0, 0, 0, 0, 0, 0, 0}, lane_dxhat_xhat[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  auto visit = [&](int64_t i, int lane) __attribute__((always_inline)) {
    const double xhat = (static_cast<double>(x[i]) - mean) * rstd;
    const double g = static_cast<double>(dy[i]);
    const double dxhat = w == nullptr ? g : g * static_cast<double>(w[i]);
    dw[i] += g * xhat;
    db[i] += g;
    lane_dxhat[lane] += dxhat;
    lane_dxhat_xhat[lane] += dxhat * xhat;
  };
  detail::for_each_lane(n, visit);
  if (dx == nullptr) return;
  const double mean_dxhat = detail::lane_total(lane_dxhat) / static_cast<double>(n);
  const double mean_dxhat_xhat = detail::lane_total(lane_dxhat_xhat) / static_cast<double>(n);
  // mean and rstd depend on every x of the row:
  // dx = rstd · (dxhat − mean(dxhat) − xhat · mean(dxhat ∘ xhat))
  for (int64_t j = 0; j < n; ++j) {
    const double xhat = (static_cast<double>(x[j]) - mean) * rstd;
    const double g = static_cast<double>(dy[j]);
    const double dxhat = w == nullptr ? g : g * static_cast<double>(w[j]);
    dx[j] = static_cast<T>(static_cast<double>(dx[j]) +
                           rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
  }
}

// One row of rms_norm's backward: recomputes rrms as the forward, adds
// g·x·rrms to dw and, when dx is given, the input gradient to dx (float64
// sums in eight lanes, as layer_norm's).
template <class T>
[[gnu::always_inline]] inline void rms_norm_backward_row(const T* x, const T* dy, const T* w, T* dx,
                                                         int64_t n, double eps, double* dw) {
  const double rrms = detail::rms_norm_rrms(x, n, eps);
  // Forward: double v = x[i] * rrms; v *= w[i];
  double lane_dot[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // Σ dxhat_i x_i
  auto visit = [&](int64_t i, int lane) __attribute__((always_inline)) {
    const double g = static_cast<double>(dy[i]), xi = static_cast<double>(x[i]);
    const double dxhat = w == nullptr ? g : g * static_cast<double>(w[i]);
    dw[i] += g * xi * rrms;
    lane_dot[lane] += dxhat * xi;
  };
  detail::for_each_lane(n, visit);
  if (dx == nullptr) return;
  const double dot = detail::lane_total(lane_dot);
  // rrms = (mean(x²) + eps)^(−1/2)  ->  ∂rrms/∂x_i = −rrms³ · x_i / n
  const double c = rrms * rrms * rrms * dot / static_cast<double>(n);
  for (int64_t j = 0; j < n; ++j) {
    const double g = static_cast<double>(dy[j]);
    const double dxhat = w == nullptr ? g : g * static_cast<double>(w[j]);
    dx[j] =
        static_cast<T>(static_cast<double>(dx[j]) + rrms * dxhat - c * static_cast<double>(x[j]));
  }
}

}  // namespace
}  // namespace qkv::kernels::simd
