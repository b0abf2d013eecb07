// optim::Adam and optim::AdamW — torch.optim.Adam and torch.optim.AdamW.
//
// Per parameter p with gradient g, at step t = 1, 2, ... (torch 2.13's
// update, in p's dtype; amsgrad off by default):
//   Adam:  g = g + weight_decay · p                   (L2 penalty in the gradient)
//   AdamW: p = p · (1 − lr · weight_decay)            (decoupled weight decay)
//   m = m + (1 − β1) · (g − m)                        (torch's lerp)
//   v = β2 · v + (1 − β2) · g²
//   v̂ = max(v̂, v) if amsgrad, else v̂ = v
//   p = p − lr / (1 − β1ᵗ) · m / (√v̂ / √(1 − β2ᵗ) + eps)
// eps is added after the bias-corrected square root, exactly as torch.
//
//   optim::AdamW opt(params, {.lr = 3e-4, .weight_decay = 0.1});
#pragma once

#include <vector>

#include "qkv/optim/optimizer.h"

namespace qkv::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  // Adam: 0 by default (as torch.optim.Adam); AdamW: pass it (torch's AdamW default is 1e-2).
  double weight_decay = 0.0;
  bool amsgrad = false;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<nn::Parameter> params, const AdamOptions& options = {});

  void step() override;

  // For each parameter that has taken a step: "<param>.step" (0-d float64),
  // "<param>.exp_avg", "<param>.exp_avg_sq" and, with amsgrad,
  // "<param>.max_exp_avg_sq" (torch's state names).
  std::map<std::string, Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, Tensor>& state) override;

  const AdamOptions& options() const { return options_; }
  // Steps taken so far by the first parameter (all step together).
  int64_t step_count() const;

 protected:
  Adam(std::vector<nn::Parameter> params, const AdamOptions& options, bool decoupled,
       const char* kind);

 private:
  struct State {
    int64_t step = 0;
    Tensor exp_avg, exp_avg_sq, max_exp_avg_sq;  // undefined until the first step
  };
  AdamOptions options_;
  bool decoupled_;  // AdamW
  std::vector<State> state_;
};

// Adam with decoupled weight decay: p = p · (1 − lr · weight_decay) before the Adam update.
class AdamW : public Adam {
 public:
  // Give .weight_decay explicitly; AdamOptions{} has 0, torch's AdamW default is 1e-2.
  AdamW(std::vector<nn::Parameter> params, const AdamOptions& options = {.weight_decay = 1e-2});
};

}  // namespace qkv::optim
