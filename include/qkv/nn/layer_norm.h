// nn::LayerNorm — torch.nn.LayerNorm over the trailing `normalized_shape`.
//
//   nn::LayerNorm norm({.normalized_shape = {512}});
//   Tensor y = norm.forward(x);   // x: [B, L, 512]
#pragma once

#include <map>
#include <string>

#include "qkv/tensor.h"

namespace qkv::nn {

struct LayerNormOptions {
  Shape normalized_shape;
  double eps = 1e-5;
  bool elementwise_affine = true;  // learn weight (and bias)
  bool bias = true;                // learn a bias (only with elementwise_affine)
  DType dtype = DType::kFloat32;
};

class LayerNorm {
 public:
  // weight = 1, bias = 0, as torch.
  explicit LayerNorm(const LayerNormOptions& options);

  // x: [..., *normalized_shape]  ->  like x
  Tensor forward(const Tensor& x) const;

  // "weight" and "bias" (those that exist), each of normalized_shape.
  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state);
  LayerNorm clone() const;

  const LayerNormOptions& options() const { return options_; }

 private:
  LayerNormOptions options_;
  Tensor weight_;
  Tensor bias_;
};

}  // namespace qkv::nn
