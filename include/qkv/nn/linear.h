// nn::Linear — torch.nn.Linear: y = x Wᵀ + b.
//
//   nn::Linear proj({.in_features = 8, .out_features = 16});
//   Tensor y = proj.forward(x);   // x: [B, L, 8] -> [B, L, 16]
//
// Training: forward with a record, backward with ∂loss/∂y (see parameter.h):
//   nn::LinearRecord rec;
//   Tensor y = proj.forward(x, &rec);
//   Tensor grad_x = proj.backward(grad_y, rec);   // adds into proj's weight/bias grads
//
// Pretrained weights kept block-quantized (a GGUF file's Q4_1 rows, read in
// place from its mapping) replace the float weight:
//   proj.set_quantized_weight(QuantizedWeight(QuantFormat::kQ4_1, 16, 32, data, bytes, owner));
//   Tensor y = proj.forward(x);   // qkv::linear(x, quantized weight, bias)
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "qkv/generator.h"
#include "qkv/linear.h"
#include "qkv/nn/module.h"
#include "qkv/quantized_linear.h"
#include "qkv/tensor.h"

namespace qkv::nn {

struct LinearOptions {
  int64_t in_features = 0;
  int64_t out_features = 0;
  bool bias = true;
  DType dtype = DType::kFloat32;
};

// What Linear::forward saves for its backward.
struct LinearRecord {
  Tensor input;  // x (held, not copied: do not change it in place before the backward)
};

class Linear : public ModuleBase<Linear, LinearOptions> {
 public:
  // torch's initialisation: weight and bias U(-1/√in, 1/√in), drawn from
  // `gen` (default_generator() when null). Under nn::SkipWeightInit: no
  // weight (set one before use) and a zero bias.
  explicit Linear(const LinearOptions& options, Generator* gen = nullptr);

  // x: [..., in_features]  ->  [..., out_features]
  // With a record, also saves what backward() needs (nullptr: inference).
  // After set_precision(kBFloat16 or kInt8), inference multiplies the weight
  // converted at that call (LowPrecisionWeight); recording needs kFloat32.
  Tensor forward(const Tensor& x, LinearRecord* record = nullptr) const;

  // Into a preallocated buffer, allocating nothing (decoding steps); with a
  // record, as forward's (x must then stay unchanged until the backward).
  // x: [..., in_features]  out: [..., out_features]; both contiguous, not overlapping
  void forward_into(Tensor& out, const Tensor& x, LinearRecord* record = nullptr) const;
  // forward_into, then activate_into(out, out, activation): in low precision
  // the activation runs on each block of out while it is in cache.
  void forward_into(Tensor& out, const Tensor& x, Activation activation) const;

  // forward_into (inference) of several layers meeting the same x, e.g. the
  // q, k and v projections: where every weight is quantized, their products
  // share one fork/join of the threads (linear_into_each); otherwise one
  // after the other. Each out equals what its own forward_into gives.
  struct Into {
    const Linear& layer;
    Tensor& out;
  };
  static void forward_into_each(const Tensor& x, std::span<const Into> layers);

  // Adds ∂loss/∂weight and ∂loss/∂bias to the gradient buffers, returns ∂loss/∂x.
  // grad_output: [..., out_features]  ->  like record.input
  Tensor backward(const Tensor& grad_output, const LinearRecord& record);

  // A new float weight [out_features, in_features] of the module's dtype
  // (held, not copied); drops a quantized one.
  void set_weight(Tensor weight);
  // Multiplies with `weight` ([out_features, in_features], float32 modules
  // only) kept quantized from now on: the float weight is released (weight()
  // and state_dict() then have none), and the module is for inference —
  // forward with a record, backward and set_precision throw.
  void set_quantized_weight(QuantizedWeight weight);

  // Undefined when the weight is quantized (or not set yet).
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  // Empty unless set_quantized_weight was called.
  const QuantizedWeight& quantized_weight() const { return quantized_weight_; }

 private:
  // "weight" [out, in], "bias" [out] (if bias).
  void list_members(MemberList& m) override;
  void update_precision() override;
  // Throws naming the module when there is no weight of either kind.
  void check_weight() const;
  // Keeps x in `record` (when given) after checking the weight can train.
  void record_input(const Tensor& x, LinearRecord* record, const char* fn) const;

  Tensor weight_;                            // [out, in]
  Tensor bias_;                              // [out] or undefined
  LowPrecisionWeight low_precision_weight_;  // empty in float32
  QuantizedWeight quantized_weight_;         // used instead of weight_ when set
};

}  // namespace qkv::nn
