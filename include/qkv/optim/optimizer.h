// optim::Optimizer — the base of SGD, Adam and AdamW (torch.optim's semantics).
//
// An optimizer holds (name, value, gradient) triples (nn::Parameter), whose
// tensors are views shared with the model: step() updates the model's tensors
// in place from the gradients that the backward passes accumulated, and
// zero_grad() clears those gradients for the next batch.
//
//   std::vector<nn::Parameter> params = nn::make_parameters(model.state_dict());
//   optim::AdamW opt(params, {.lr = 3e-4, .weight_decay = 0.1});
//   for (int64_t step = 0; step < steps; ++step) {
//     opt.zero_grad();
//     ... forward, loss, backward into params[i].grad ...
//     opt.set_lr(schedule.lr(step));
//     opt.step();
//   }
//
// state_dict() holds the optimizer's running state as tensors named
// "<param name>.<buffer>" (e.g. "encoder.weight.exp_avg"), ready for a
// safetensors checkpoint (qkv/io/checkpoint.h). Hyperparameters (lr, betas,
// ...) are not part of it: they come from the constructor, and the learning
// rate from the schedule, which is a function of the step.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "qkv/nn/parameter.h"
#include "qkv/tensor.h"

namespace qkv::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter from its gradient.
  virtual void step() = 0;

  // Sets every gradient buffer to 0 (the buffers are kept: as torch's
  // zero_grad(set_to_none=False)).
  void zero_grad();

  double lr() const { return lr_; }
  // The learning rate of the next step() (a schedule calls this before each step).
  void set_lr(double lr);

  const std::vector<nn::Parameter>& parameters() const { return params_; }

  // The running state: "<param>.<buffer>" -> tensor (copies).
  virtual std::map<std::string, Tensor> state_dict() const = 0;
  // Restores a state_dict() of an optimizer of the same kind over parameters
  // of the same names and shapes. Strict: unknown names, missing buffers and
  // wrong shapes are errors naming the entry; nothing changes when it throws.
  virtual void load_state_dict(const std::map<std::string, Tensor>& state) = 0;

 protected:
  // `kind` ("SGD", "Adam", "AdamW") names the optimizer in error messages.
  Optimizer(std::vector<nn::Parameter> params, double lr, const char* kind);

  std::vector<nn::Parameter> params_;
  double lr_;
  const char* kind_;
};

}  // namespace qkv::optim
