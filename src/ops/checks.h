// Argument checks shared by the ops: each throws qkv::Error naming the
// function, the argument, what it expected and what it got.
#pragma once

#include "qkv/tensor.h"

namespace qkv {

void check_defined(const Tensor& t, const char* fn, const char* arg);
// float32 or float64, else a TypeError-kind error.
void check_floating(const Tensor& t, const char* fn, const char* arg);
// Both float32 or float64, and the same one: "<fn>: <a_arg> is float32 but
// <b_arg> is float64".
void check_same_floating(const Tensor& a, const Tensor& b, const char* fn, const char* a_arg,
                         const char* b_arg);
// Exactly `ndim` dimensions.
void check_dim(const Tensor& t, int64_t ndim, const char* fn, const char* arg, const char* layout);
// True when no element is NaN or ±inf (about one read of the tensor).
bool all_finite(const Tensor& t);
// No NaN or ±inf: they would spread silently through softmax.
void check_finite(const Tensor& t, const char* fn, const char* arg);
// A float mask may hold −inf (masked) but not NaN or +inf.
void check_mask_values(const Tensor& mask, const char* fn, const char* arg);

// Whether every index of t names its own element (no stride-0 or
// interleaved dims): what a tensor written to needs.
bool elements_distinct(const Tensor& t);
// Whether the memory spans of a and b (first to last element) overlap.
bool spans_overlap(const Tensor& a, const Tensor& b);

// linear() on a converted weight (low precision, GGUF blocks): float32 x
// [..., in] and bias [out] or undefined. `weight` names the weight's kind in
// messages ("bfloat16", "Q4_1"). Returns the rows of x.
int64_t check_converted_linear(const Tensor& x, int64_t in, int64_t out, const Tensor& bias,
                               const char* fn, const char* weight);
// linear_into()'s `out` for rows × n outputs of x: float32, x's shape with the
// last dim n, its rows evenly spaced with a contiguous last dim, not
// overlapping x; x and bias contiguous. Returns the row stride of out.
int64_t check_linear_out(const Tensor& out, const Tensor& x, const Tensor& bias, int64_t rows,
                         int64_t n, const char* fn);

}  // namespace qkv
