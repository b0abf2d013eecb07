// The argument checks of layer_norm and rms_norm, shared by their backward
// passes (normalization_backward.cc).
#pragma once

#include "qkv/tensor.h"

namespace qkv {

// Rows and row length of `x` normalised over its trailing `normalized_shape`.
struct Rows {
  int64_t count = 0;
  int64_t length = 0;
};

// Checks x, normalized_shape and the optional weight and bias (names and
// messages use fn); returns the rows to normalise.
Rows check_normalized(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                      const Tensor& bias, const char* fn);

}  // namespace qkv
