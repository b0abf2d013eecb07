// nn::LayerNorm — torch.nn.LayerNorm over the trailing `normalized_shape`.
//
//   nn::LayerNorm norm({.normalized_shape = {512}});
//   Tensor y = norm.forward(x);   // x: [B, L, 512]
#pragma once

#include <map>
#include <string>
#include <vector>

#include "qkv/nn/module.h"
#include "qkv/tensor.h"

namespace qkv::nn {

struct LayerNormOptions {
  Shape normalized_shape;
  double eps = 1e-5;
  bool elementwise_affine = true;  // learn weight (and bias)
  bool bias = true;                // learn a bias (only with elementwise_affine)
  DType dtype = DType::kFloat32;
};

// What LayerNorm::forward saves for its backward (the statistics are recomputed).
struct LayerNormRecord {
  Tensor input;  // x (held, not copied)
};

class LayerNorm : public ModuleBase<LayerNorm, LayerNormOptions> {
 public:
  // weight = 1, bias = 0, as torch.
  explicit LayerNorm(const LayerNormOptions& options);

  // x: [..., *normalized_shape]  ->  like x
  // With a record, also saves what backward() needs (nullptr: inference).
  Tensor forward(const Tensor& x, LayerNormRecord* record = nullptr) const;

  // Inference into a preallocated buffer (may be x itself), allocating nothing.
  // In bfloat16 or int8 precision with float32 statistics (add_layer_norm_into).
  // x: [..., *normalized_shape] contiguous  out: like x
  void forward_into(Tensor& out, const Tensor& x) const;

  // x <- norm(x + residual) (norm(x) without a residual), in place, in
  // blocks of rows spread over the threads: a post-norm layer's residual step.
  // In bfloat16 or int8 precision (the model's choice) with float32 statistics
  // and the add in the same pass (add_layer_norm_into).
  // x: [..., *normalized_shape] contiguous  residual: like x, or undefined
  void norm_in_place(Tensor& x, const Tensor& residual = {}) const;

  // Adds the weight (and bias) gradients to the module's buffers, returns ∂loss/∂x.
  // grad_output: like record.input  ->  like record.input
  Tensor backward(const Tensor& grad_output, const LayerNormRecord& record);

 private:
  // "weight" and "bias" (those that exist), each of normalized_shape.
  void list_members(MemberList& m) override;
  // Whether x is normalized with float32 statistics (add_layer_norm_into): a
  // float32 x in a bfloat16 or int8 model, whose products round far more.
  bool float32_statistics(const Tensor& x) const;

  Tensor weight_;
  Tensor bias_;
};

}  // namespace qkv::nn
