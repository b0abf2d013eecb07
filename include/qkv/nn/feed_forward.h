// Position-wise feed-forward networks (tutorial §8.1: the FFN sub-layer).
//
//   FeedForward        linear2(dropout(activation(linear1(x))))   — torch's
//                      Transformer layers (parameter names linear1, linear2)
//   SwiGLUFeedForward  w2(silu(w1 x) ⊙ w3 x)                      — LLaMA-style
//                      decoder-only models (names w1, w2, w3; no bias);
//                      with activation kGeluTanh it is GeGLU (Gemma)
#pragma once

#include <map>
#include <string>
#include <vector>

#include "qkv/functional.h"
#include "qkv/generator.h"
#include "qkv/nn/linear.h"
#include "qkv/nn/module.h"
#include "qkv/tensor.h"

namespace qkv::nn {

struct FeedForwardOptions {
  int64_t d_model = 0;
  int64_t dim_feedforward = 2048;
  double dropout = 0.0;  // after the activation, in training mode only
  Activation activation = Activation::kRelu;
  bool bias = true;
  DType dtype = DType::kFloat32;
};

// What FeedForward::forward saves for its backward.
struct FeedForwardRecord {
  LinearRecord linear1;  // x
  Tensor hidden;         // linear1(x), before the activation
  Tensor keep_mask;      // dropout's keep mask; undefined when nothing was dropped
  double dropout_p = 0;  // the probability in effect
  LinearRecord linear2;  // dropout(activation(hidden))
};

class FeedForward : public ModuleBase<FeedForward, FeedForwardOptions> {
 public:
  // linear1 is initialised before linear2 (torch's order), both as nn.Linear.
  explicit FeedForward(const FeedForwardOptions& options, Generator* gen = nullptr);

  // x: [..., d_model]  ->  [..., d_model]
  // With a record, also saves what backward() needs (nullptr: inference);
  // dropout draws the same either way.
  Tensor forward(const Tensor& x, FeedForwardRecord* record = nullptr) const;

  // Inference (no dropout: eval mode or p = 0) into preallocated buffers,
  // allocating nothing; `out` may be x.
  // x: [..., d_model]  hidden: [..., dim_feedforward] (scratch)  out: like x; all contiguous
  void forward_into(Tensor& out, const Tensor& x, Tensor& hidden) const;

  // Adds the parameter gradients to the buffers, returns ∂loss/∂x (dropout
  // replays the recorded mask).
  // grad_output: [..., d_model]  ->  like x
  Tensor backward(const Tensor& grad_output, const FeedForwardRecord& record);

  Linear& linear1() { return linear1_; }
  Linear& linear2() { return linear2_; }

 private:
  // linear1.*, linear2.*
  void list_members(MemberList& m) override;
  // int8: both linear maps compute in bfloat16. linear2's input, after the
  // activation, is a row of dim_feedforward values with a long one-sided
  // tail, whose few large values set the row's int8 scale and leave the rest
  // a handful of steps; linear1's, the normalised residual stream, carries
  // the model's outlier features. In int8 these two cost more accuracy than
  // every other layer together (all-MiniLM-L6-v2: docs/benchmarks.md), so
  // int8 models keep their attention projections in int8 and their FFN in
  // bfloat16, the mixed precision most int8 deployments settle on.
  void update_precision() override;

  Linear linear1_;  // d_model -> dim_feedforward
  Linear linear2_;  // dim_feedforward -> d_model
};

struct SwiGLUFeedForwardOptions {
  int64_t d_model = 0;
  int64_t hidden_dim = 0;  // LLaMA uses about 8/3 · d_model, rounded up
  bool bias = false;
  double dropout = 0.0;  // on the output, in training mode only
  DType dtype = DType::kFloat32;
  // The gate's activation: kSilu (SwiGLU), or kGeluTanh (GeGLU: Gemma's
  // gelu_pytorch_tanh); any Activation works.
  Activation activation = Activation::kSilu;
};

// What SwiGLUFeedForward::forward saves for its backward.
struct SwiGLUFeedForwardRecord {
  LinearRecord w1, w3;   // x
  Tensor gate;           // w1(x), before the activation
  Tensor up;             // w3(x)
  LinearRecord w2;       // activation(gate) ⊙ up
  Tensor keep_mask;      // dropout's keep mask on the output; undefined when none
  double dropout_p = 0;  // the probability in effect
};

class SwiGLUFeedForward : public ModuleBase<SwiGLUFeedForward, SwiGLUFeedForwardOptions> {
 public:
  // w1, w2, w3 each as nn.Linear (in that order).
  explicit SwiGLUFeedForward(const SwiGLUFeedForwardOptions& options, Generator* gen = nullptr);

  // x: [..., d_model]  ->  [..., d_model]
  // With a record, also saves what backward() needs (nullptr: inference).
  Tensor forward(const Tensor& x, SwiGLUFeedForwardRecord* record = nullptr) const;

  // Inference (no dropout) into preallocated buffers, allocating nothing; `out` may be x.
  // x: [..., d_model]  hidden, gate: [..., hidden_dim] (scratch)  out: like x; all contiguous
  void forward_into(Tensor& out, const Tensor& x, Tensor& hidden, Tensor& gate) const;

  // grad_output: [..., d_model]  ->  like x (parameter gradients added to the buffers)
  Tensor backward(const Tensor& grad_output, const SwiGLUFeedForwardRecord& record);

 private:
  // "w1.weight" [hidden, d_model], "w2.weight" [d_model, hidden],
  // "w3.weight" [hidden, d_model] (and ".bias" when bias).
  void list_members(MemberList& m) override;

  Linear w1_;  // gate: d_model -> hidden
  Linear w2_;  // down: hidden -> d_model
  Linear w3_;  // up:   d_model -> hidden
};

}  // namespace qkv::nn
