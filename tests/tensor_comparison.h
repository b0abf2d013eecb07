// How far a result is from its reference, for the kernel and gradient tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "qkv/tensor.h"

namespace qkv::testing {

// max |a − b| / max |b|, infinite where only one of the two is NaN. When the
// reference vanishes (max |b| below `vanishing`) float rounding is all that is
// left: then the absolute error is returned, to be held to the same bound.
inline double relative_error(const std::vector<double>& a, const std::vector<double>& b,
                             double vanishing) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    if (std::isnan(a[i])) continue;
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return scale < vanishing ? worst : worst / scale;
}

// The same for tensors, as the kernel tests compare them (with one key the
// softmax is constant, so dQ = dK = 0: the absolute error below 1e-9).
inline double relative_error(const Tensor& a, const Tensor& b) {
  return relative_error(a.to_vector(), b.to_vector(), 1e-9);
}

}  // namespace qkv::testing
