// Helpers shared by the nn modules: state_dict plumbing and torch's default
// initialisations. Internal (not installed).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "qkv/generator.h"
#include "qkv/linear.h"
#include "qkv/nn/state_dict.h"
#include "qkv/quantized_linear.h"
#include "qkv/tensor.h"

namespace qkv::nn::detail {

// torch's strict load_state_dict: `own` holds the module's parameters as
// shared views (its state_dict()); every name must be present in `state`
// with the same shape and a floating dtype, and no other names may appear.
// Everything is checked before anything is copied, so a failed load changes
// nothing. Errors start with "<module>::load_state_dict: ".
void load_strict(const char* module, const StateDict& own,
                 const std::map<std::string, Tensor>& state);

// nn.Linear's reset_parameters: kaiming_uniform_(a=√5) for the weight and the
// bias both reduce to U(-1/√fan_in, 1/√fan_in).
Tensor uniform_fan_in(const Shape& shape, int64_t fan_in, Generator& gen, DType dtype);

// xavier_uniform_ of a 2-D [out, in] weight: U(-a, a), a = √(6 / (in + out)).
// `weight` [out, in] converted for `precision` (kBFloat16 or kInt8); a clear
// error when the module computes in float64, which has no low precision.
// input_range: the module's note for this weight (Module::input_range), used
// to smooth int8 weights; undefined: no smoothing.
LowPrecisionWeight low_precision_weight(const Tensor& weight, Precision precision,
                                        const char* module, const Tensor& input_range = {});

Tensor xavier_uniform(const Shape& shape, Generator& gen, DType dtype);

// Modules compute in float32 or float64: a TypeError naming `module` otherwise.
void check_floating_dtype(const char* module, DType dtype);

// What set_quantized_weight accepts: a [rows, cols] `weight` for a module
// that computes in float32 (`dtype`). Errors start with "<function>: " and
// call the weight a `what` ("weight", "table").
void check_quantized_weight(const QuantizedWeight& weight, int64_t rows, int64_t cols, DType dtype,
                            const char* function, const char* what);
// The same for a float `what` (weight, table): defined, [rows, cols], `dtype`.
void check_dense_weight(const Tensor& weight, int64_t rows, int64_t cols, DType dtype,
                        const char* function, const char* what);

// A module built under nn::SkipWeightInit has no [rows, cols] `what`
// ("weight", "table") until set_weight or set_quantized_weight gives one;
// its forward refuses to run until then, naming `module`.
void check_has_weight(bool has_weight, const char* module, int64_t rows, int64_t cols,
                      const char* what);

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
