// Softmax over one row of scores, where −inf marks a masked position.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace qkv::kernels {

// In place: x_j <- exp(x_j − max) / Σ exp(x − max). A row whose entries are
// all −inf (every key masked) becomes all 0 instead of 0/0 = NaN.
inline void softmax_row_in_place(double* x, int64_t n) {
  double row_max = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) row_max = x[j] > row_max ? x[j] : row_max;
  if (row_max == -std::numeric_limits<double>::infinity()) {
    for (int64_t j = 0; j < n; ++j) x[j] = 0.0;
    return;
  }
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    x[j] = std::exp(x[j] - row_max);
    sum += x[j];
  }
  for (int64_t j = 0; j < n; ++j) x[j] /= sum;
}

}  // namespace qkv::kernels
