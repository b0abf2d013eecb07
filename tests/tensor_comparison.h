// How far a result is from its reference, for the kernel tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "qkv/tensor.h"

namespace qkv::testing {

// max |a − b| / max |b|, infinite where only one of the two is NaN. When the
// reference vanishes (with one key the softmax is constant, so dQ = dK = 0)
// float32 rounding is all that is left: then the absolute error is returned,
// to be held to the same bound.
inline double relative_error(const Tensor& a, const Tensor& b) {
  double worst = 0, scale = 0;
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) != std::isnan(y[i])) return INFINITY;
    if (std::isnan(x[i])) continue;
    worst = std::max(worst, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return scale < 1e-9 ? worst : worst / scale;
}

}  // namespace qkv::testing
