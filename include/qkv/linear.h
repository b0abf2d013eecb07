// Linear maps (the W_q, W_k, W_v and output projections of §4.2): float32
// and float64 through BLAS, bfloat16 and int8 through qkv's own kernels.
#pragma once

#include <cstdint>
#include <memory>

#include "qkv/precision.h"
#include "qkv/tensor.h"

namespace qkv {

enum class Activation;  // qkv/functional.h

namespace kernels {
class PackedWeights;
}

// y = x Wᵀ + b, as torch.nn.functional.linear.
// x: [..., in]  weight: [out, in]  bias: [out] or undefined  ->  [..., out]
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// linear() written into a preallocated `out`; allocates nothing (decoding
// steps are built from such calls). x, weight, bias and out must be
// contiguous, and out must not overlap x. One row (a decoding step) is a
// matrix-vector product.
// x: [..., in]  weight: [out, in]  bias: [out] or undefined  out: [..., out]
void linear_into(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// A float32 weight [out, in] converted once into bfloat16 or int8 (see
// precision.h) and packed for the low-precision kernels: what a model keeps
// instead of re-rounding its weights on every call.
//
//   LowPrecisionWeight w8(weight, Precision::kInt8);
//   Tensor y = linear(x, w8, bias);      // ≈ linear(x, weight, bias)
class LowPrecisionWeight {
 public:
  LowPrecisionWeight() = default;  // empty: no weight
  // weight: float32 [out, in]; precision: kBFloat16 or kInt8. smoothing
  // (int8 only): undefined, or [in] finite factors > 0 — the weight's input
  // features are scaled by them and the input's divided by them before each
  // is quantised (see smoothing_factors).
  LowPrecisionWeight(const Tensor& weight, Precision precision, const Tensor& smoothing = {});

  bool empty() const { return packed_ == nullptr; }
  Precision precision() const;
  int64_t in_features() const;
  int64_t out_features() const;
  // Bytes of packed weights (and int8 scales) held.
  int64_t bytes() const;
  const kernels::PackedWeights& packed() const { return *packed_; }

 private:
  std::shared_ptr<const kernels::PackedWeights> packed_;  // shared by copies: immutable
};

// SmoothQuant's factors for an int8 weight: x Wᵀ = (x / s)(W · s)ᵀ for any
// s > 0, and s[p] = a[p]^α / w[p]^(1-α) evens out the ranges of feature p
// between the input (a[p]: its largest |x| seen in calibration) and the
// weight (w[p] = max_j |W[j, p]|), so that an outlier feature no longer sets
// the scale of every row of x. 1 where a[p] or w[p] is 0 (nothing to move);
// clamped to [2^-30, 2^30]. α = 0.5 splits the range evenly.
// input_absmax: [in]  weight: [out, in]  ->  [in] float32
Tensor smoothing_factors(const Tensor& input_absmax, const Tensor& weight, double alpha = 0.5);

// y = x Wᵀ + b with W in low precision; x, bias and the result are float32.
// x: [..., in]  bias: [out] or undefined  ->  [..., out]
Tensor linear(const Tensor& x, const LowPrecisionWeight& weight, const Tensor& bias = {});
// The same into a preallocated `out` not overlapping x: its rows evenly spaced
// with a contiguous last dim (a column block of a wider matrix is fine).
void linear_into(Tensor& out, const Tensor& x, const LowPrecisionWeight& weight,
                 const Tensor& bias = {});
// linear_into, then activate_into(out, out, activation) (qkv/functional.h),
// the activation applied to each block of `out` right after the product
// wrote it, while it is in cache: the same values, one pass over memory less.
void linear_into(Tensor& out, const Tensor& x, const LowPrecisionWeight& weight, const Tensor& bias,
                 Activation activation);

// Batched matrix product.
// a: [..., n, k]  b: [..., k, m]  ->  [..., n, m]   (leading dims must match)
Tensor matmul(const Tensor& a, const Tensor& b);

}  // namespace qkv
