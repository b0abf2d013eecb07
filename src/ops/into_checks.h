// The checks every `_into` op makes of its preallocated output. Internal.
#pragma once

#include "ops/checks.h"
#include "qkv/tensor.h"

namespace qkv {

// `out` must be defined, contiguous, of x's dtype and shape; x contiguous.
// Allocates nothing unless it throws.
inline void check_into(const Tensor& out, const Tensor& x, const char* fn) {
  check_floating(x, fn, "input");
  check_defined(out, fn, "out");
  QKV_CHECK_TYPE(out.dtype() == x.dtype(), fn, ": out dtype ", dtype_name(out.dtype()),
                 " differs from input dtype ", dtype_name(x.dtype()));
  QKV_CHECK(out.shape() == x.shape(), fn, ": out must have the input's shape ",
            shape_str(x.shape()), ", got ", shape_str(out.shape()));
  QKV_CHECK(x.is_contiguous() && out.is_contiguous(), fn,
            ": input and out must be contiguous (it copies nothing)");
}

}  // namespace qkv
