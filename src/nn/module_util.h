// Helpers shared by the nn modules: state_dict plumbing and torch's default
// initialisations. Internal (not installed).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "qkv/generator.h"
#include "qkv/nn/parameter.h"
#include "qkv/tensor.h"

namespace qkv::nn::detail {

using StateDict = std::map<std::string, Tensor>;

// Adds `child`'s entries to `out` as "prefix.name".
void add_prefixed(StateDict& out, const std::string& prefix, const StateDict& child);

// torch's strict load_state_dict: `own` holds the module's parameters as
// shared views (its state_dict()); every name must be present in `state`
// with the same shape and a floating dtype, and no other names may appear.
// Everything is checked before anything is copied, so a failed load changes
// nothing. Errors start with "<module>::load_state_dict: ".
void load_strict(const char* module, const StateDict& own, const StateDict& state);

// nn.Linear's reset_parameters: kaiming_uniform_(a=√5) for the weight and the
// bias both reduce to U(-1/√fan_in, 1/√fan_in).
Tensor uniform_fan_in(const Shape& shape, int64_t fan_in, Generator& gen, DType dtype);

// xavier_uniform_ of a 2-D [out, in] weight: U(-a, a), a = √(6 / (in + out)).
Tensor xavier_uniform(const Shape& shape, Generator& gen, DType dtype);

// --- Gradient buffers (the modules' .grad) ----------------------------------------
//
// A module keeps the gradients of its own parameters in a StateDict keyed by
// the state_dict names, allocated (zeros, like the parameter) on first use.

// The gradient buffer of `value`, allocated as zeros on first use.
Tensor grad_buffer(StateDict& grads, const std::string& name, const Tensor& value);

// One Parameter per entry of `values` (a module's own state_dict), sharing the
// module's tensors and its gradient buffers (allocated here if needed).
std::vector<Parameter> own_parameters(const StateDict& values, StateDict& grads);

// The public nn::append_parameters (parameter.h), as the modules call it.
using ::qkv::nn::append_parameters;

// Sets every allocated gradient buffer to 0.
void zero_grads(StateDict& grads);

// The sum of two gradients of one tensor (either may be undefined).
// a, b: same shape and dtype  ->  like a
Tensor add_grads(const Tensor& a, const Tensor& b);

// dropout(x, p, training, gen) that also stores its keep mask in *keep_mask
// (undefined when nothing was dropped); draws exactly as dropout().
// x: [...]  ->  like x
Tensor recorded_dropout(const Tensor& x, double p, bool training, Generator* gen,
                        Tensor* keep_mask);

// ∂loss/∂x of dropout's input, replaying the recorded keep mask (p: the
// probability in effect).
// grad_output: [...]  keep_mask: bool like it, or undefined  ->  like grad_output
Tensor dropout_grad(const Tensor& grad_output, const Tensor& keep_mask, double p);

// Batch-first head layouts: the projections' [B, L, heads·E] and attention's
// [B, heads, L, E] (both contiguous).
// x: [B, L, heads·E]  ->  [B, heads, L, E]
Tensor split_heads(const Tensor& x, int64_t heads, int64_t E);
// x: [B, heads, L, E]  ->  [B, L, heads·E]
Tensor merge_heads(const Tensor& x);

}  // namespace qkv::nn::detail
