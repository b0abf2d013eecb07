// nn::RMSNorm — torch.nn.RMSNorm: x / √(mean(x²) + eps) · weight, the
// normalisation of decoder-only models (no mean subtraction, no bias).
//
//   nn::RMSNorm norm({.normalized_shape = {384}});
#pragma once

#include <map>
#include <optional>
#include <string>

#include "qkv/tensor.h"

namespace qkv::nn {

struct RMSNormOptions {
  Shape normalized_shape;
  // None (torch's default) means the machine epsilon of the input's dtype.
  std::optional<double> eps;
  bool elementwise_affine = true;
  DType dtype = DType::kFloat32;
};

class RMSNorm {
 public:
  // weight = 1, as torch.
  explicit RMSNorm(const RMSNormOptions& options);

  // x: [..., *normalized_shape]  ->  like x
  Tensor forward(const Tensor& x) const;

  // "weight" (when elementwise_affine).
  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state);
  RMSNorm clone() const;

  const RMSNormOptions& options() const { return options_; }

 private:
  RMSNormOptions options_;
  Tensor weight_;
};

}  // namespace qkv::nn
