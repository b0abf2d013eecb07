// max_relative_diff: how far two float32 tensors (logits) are apart, relative
// to the larger of the reference's values.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "qkv/tensor.h"

namespace qkv_test {

// max |a - b| / max |b| over float32 tensors of b's size.
inline double max_relative_diff(const qkv::Tensor& a, const qkv::Tensor& b) {
  const qkv::Tensor ac = a.contiguous(), bc = b.contiguous();
  double diff = 0.0, ref = 0.0;
  for (int64_t i = 0; i < bc.numel(); ++i) {
    diff = std::max(diff, std::abs(double(ac.data<float>()[i]) - bc.data<float>()[i]));
    ref = std::max(ref, std::abs(double(bc.data<float>()[i])));
  }
  return diff / ref;
}

}  // namespace qkv_test
