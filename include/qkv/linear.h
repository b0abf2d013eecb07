// Linear maps (the W_q, W_k, W_v and output projections of §4.2), through BLAS.
#pragma once

#include "qkv/tensor.h"

namespace qkv {

// y = x Wᵀ + b, as torch.nn.functional.linear.
// x: [..., in]  weight: [out, in]  bias: [out] or undefined  ->  [..., out]
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// linear() written into a preallocated `out`; allocates nothing (decoding
// steps are built from such calls). x, weight, bias and out must be
// contiguous, and out must not overlap x. One row (a decoding step) is a
// matrix-vector product.
// x: [..., in]  weight: [out, in]  bias: [out] or undefined  out: [..., out]
void linear_into(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// Batched matrix product.
// a: [..., n, k]  b: [..., k, m]  ->  [..., n, m]   (leading dims must match)
Tensor matmul(const Tensor& a, const Tensor& b);

}  // namespace qkv
