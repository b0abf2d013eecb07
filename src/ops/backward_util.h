// Helpers shared by the backward ops: checking gradient buffers and adding
// float64 contributions into them. Internal.
#pragma once

#include <span>
#include <vector>

#include "qkv/tensor.h"

namespace qkv {

// An undefined `grad` passes; a defined one must have `input`'s shape and dtype.
void check_grad(const Tensor& grad, const Tensor& input, const char* fn, const char* arg);

// grad_output must have `shape` and `like`'s dtype.
void check_grad_output(const Tensor& grad_output, const Shape& shape, const Tensor& like,
                       const char* fn);

// grad[i] += contribution[i] for every element in row-major order (any strides),
// rounded once to grad's dtype.
void add_to_grad(Tensor& grad, std::span<const double> contribution);

// grad += contribution, where contribution is a tensor of grad's shape (any dtype and strides).
void add_to_grad(Tensor& grad, const Tensor& contribution);

// The gradient of a tensor of `shape` broadcast to `full_shape`: `full`
// (row-major over full_shape) summed over the broadcast dims.
std::vector<double> sum_to_shape(std::span<const double> full, const Shape& full_shape,
                                 const Shape& shape);

}  // namespace qkv
