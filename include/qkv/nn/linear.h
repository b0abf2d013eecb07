// nn::Linear — torch.nn.Linear: y = x Wᵀ + b.
//
//   nn::Linear proj({.in_features = 8, .out_features = 16});
//   Tensor y = proj.forward(x);   // x: [B, L, 8] -> [B, L, 16]
#pragma once

#include <map>
#include <string>

#include "qkv/generator.h"
#include "qkv/tensor.h"

namespace qkv::nn {

struct LinearOptions {
  int64_t in_features = 0;
  int64_t out_features = 0;
  bool bias = true;
  DType dtype = DType::kFloat32;
};

class Linear {
 public:
  // torch's initialisation: weight and bias U(-1/√in, 1/√in), drawn from
  // `gen` (default_generator() when null).
  explicit Linear(const LinearOptions& options, Generator* gen = nullptr);

  // x: [..., in_features]  ->  [..., out_features]
  Tensor forward(const Tensor& x) const;

  // "weight" [out, in] and "bias" [out] (if bias). Shared, not copied.
  std::map<std::string, Tensor> state_dict() const;
  // Strict, as torch's default: exact names and shapes.
  void load_state_dict(const std::map<std::string, Tensor>& state);

  // A deep copy (own parameters).
  Linear clone() const;

  const LinearOptions& options() const { return options_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  LinearOptions options_;
  Tensor weight_;  // [out, in]
  Tensor bias_;    // [out] or undefined
};

}  // namespace qkv::nn
