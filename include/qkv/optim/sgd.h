// optim::SGD — torch.optim.SGD: stochastic gradient descent with momentum,
// dampening, Nesterov momentum and L2 weight decay.
//
// Per parameter p with gradient g (torch 2.13's update, in p's dtype):
//   g = g + weight_decay · p                          (if weight_decay ≠ 0)
//   b = g at the first step, else b = momentum · b + (1 − dampening) · g
//   g = g + momentum · b if nesterov, else g = b      (if momentum ≠ 0)
//   p = p − lr · g
//
//   optim::SGD opt(params, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
#pragma once

#include <vector>

#include "qkv/optim/optimizer.h"

namespace qkv::optim {

struct SgdOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  // Needs momentum > 0 and dampening = 0 (as torch).
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<nn::Parameter> params, const SgdOptions& options = {});

  void step() override;

  // "<param>.momentum_buffer" for each parameter that has one (after its first
  // step with momentum ≠ 0).
  std::map<std::string, Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, Tensor>& state) override;

  const SgdOptions& options() const { return options_; }

 private:
  SgdOptions options_;
  std::vector<Tensor> momentum_buffers_;  // per parameter; undefined until its first step
};

}  // namespace qkv::optim
