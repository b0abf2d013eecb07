// max_relative_diff: how far two float32 tensors (logits) are apart, relative
// to the larger of the reference's values.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

#include "qkv/tensor.h"

namespace qkv_test {

// max |a - b| / max |b| over b's size (a logits row against a stored one).
inline double max_relative_diff(std::span<const float> a, std::span<const float> b) {
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - b[i]));
    ref = std::max(ref, std::abs(double(b[i])));
  }
  return diff / std::max(ref, 1e-30);
}

// The same over float32 tensors of b's size.
inline double max_relative_diff(const qkv::Tensor& a, const qkv::Tensor& b) {
  const qkv::Tensor ac = a.contiguous(), bc = b.contiguous();
  const auto n = static_cast<size_t>(bc.numel());
  return max_relative_diff(std::span(ac.data<float>(), n), std::span(bc.data<float>(), n));
}

}  // namespace qkv_test
