// What the task models (recall, fortunes) share about their parameters.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/nn/embedding.h"
#include "qkv/nn/parameter.h"

namespace qkv::train {

// How many numbers a model trains: what `qkv train` prints next to each model.
inline int64_t count_parameters(const std::vector<nn::Parameter>& parameters) {
  int64_t n = 0;
  for (const nn::Parameter& p : parameters) n += p.value.numel();
  return n;
}

// Zeroes every gradient of `parameters` (views of the modules' own
// buffers), ready for the next backward: a model's zero_grad().
inline void zero_gradients(const std::vector<nn::Parameter>& parameters) {
  for (const nn::Parameter& p : parameters) {
    Tensor grad = p.grad;  // a handle on the module's buffer
    if (grad.defined()) grad.fill(0.0);
  }
}

// The word and position embeddings both models start with, whose parameters
// come first: "tokens.*", then "positions.*".
inline std::vector<nn::Parameter> embedding_parameters(nn::Embedding& tokens,
                                                       nn::Embedding& positions) {
  std::vector<nn::Parameter> out;
  nn::append_parameters(out, "tokens", tokens.parameters());
  nn::append_parameters(out, "positions", positions.parameters());
  return out;
}

}  // namespace qkv::train
