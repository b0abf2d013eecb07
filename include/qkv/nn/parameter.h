// nn::Parameter — a trainable tensor and the buffer its gradient accumulates in.
//
// A module gives its own with parameters() (nn::Module: the module's
// gradient buffers, which its backward() fills). make_parameters() makes
// them for tensors a caller trains through the functional API, for example
// from a module's state dict (shared views, no copies) with fresh gradients:
//
//   nn::Linear proj({.in_features = 8, .out_features = 4});
//   std::vector<nn::Parameter> params = nn::make_parameters(proj.state_dict(), "proj");
//   // params[0]: {"proj.bias", value (the module's own bias), grad (zeros)}
//   linear_backward(grad_y, x, proj.weight(), proj.bias(),
//                   {.weight = params[1].grad, .bias = params[0].grad});
//   optim::AdamW opt(params, {.lr = 1e-3});
//   opt.step();   // updates the module's tensors in place
#pragma once

#include <map>
#include <string>
#include <vector>

#include "qkv/tensor.h"

namespace qkv::nn {

struct Parameter {
  std::string name;  // the state_dict name, e.g. "layers.0.linear1.weight"
  Tensor value;      // a view of the module's tensor: updates change the module
  Tensor grad;       // same shape and dtype as value; backward passes add into it
};

// One Parameter per entry of `state_dict` (sorted by name), with fresh zero
// gradients; names become "prefix.name" when a prefix is given. Every tensor
// must be float32 or float64.
std::vector<Parameter> make_parameters(const std::map<std::string, Tensor>& state_dict,
                                       const std::string& prefix = "");

// Appends a child module's parameters to `out`, their names prefixed with
// "prefix." (none when prefix is empty): how a model lists its submodules'.
void append_parameters(std::vector<Parameter>& out, const std::string& prefix,
                       std::vector<Parameter> child);

}  // namespace qkv::nn
