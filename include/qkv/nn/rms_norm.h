// nn::RMSNorm — torch.nn.RMSNorm: x / √(mean(x²) + eps) · weight, the
// normalisation of decoder-only models (no mean subtraction, no bias).
//
//   nn::RMSNorm norm({.normalized_shape = {384}});
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "qkv/nn/module.h"
#include "qkv/tensor.h"

namespace qkv::nn {

struct RMSNormOptions {
  Shape normalized_shape;
  // None (torch's default) means the machine epsilon of the input's dtype.
  std::optional<double> eps;
  bool elementwise_affine = true;
  DType dtype = DType::kFloat32;
};

// What RMSNorm::forward saves for its backward (the statistics are recomputed).
struct RMSNormRecord {
  Tensor input;  // x (held, not copied)
};

class RMSNorm : public ModuleBase<RMSNorm, RMSNormOptions> {
 public:
  // weight = 1, as torch.
  explicit RMSNorm(const RMSNormOptions& options);

  // x: [..., *normalized_shape]  ->  like x
  // With a record, also saves what backward() needs (nullptr: inference).
  Tensor forward(const Tensor& x, RMSNormRecord* record = nullptr) const;

  // Inference into a preallocated buffer (may be x itself), allocating nothing.
  // x: [..., *normalized_shape] contiguous  out: like x
  void forward_into(Tensor& out, const Tensor& x) const;

  // Adds the weight (and bias) gradients to the module's buffers, returns ∂loss/∂x.
  // grad_output: like record.input  ->  like record.input
  Tensor backward(const Tensor& grad_output, const RMSNormRecord& record);

 private:
  // "weight" (when elementwise_affine).
  void list_members(MemberList& m) override;

  Tensor weight_;
};

}  // namespace qkv::nn
