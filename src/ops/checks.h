// Argument checks shared by the ops: each throws qkv::Error naming the
// function, the argument, what it expected and what it got.
#pragma once

#include "qkv/tensor.h"

namespace qkv {

void check_defined(const Tensor& t, const char* fn, const char* arg);
// float32 or float64, else a TypeError-kind error.
void check_floating(const Tensor& t, const char* fn, const char* arg);
// Exactly `ndim` dimensions.
void check_dim(const Tensor& t, int64_t ndim, const char* fn, const char* arg, const char* layout);
// True when no element is NaN or ±inf (about one read of the tensor).
bool all_finite(const Tensor& t);
// No NaN or ±inf: they would spread silently through softmax.
void check_finite(const Tensor& t, const char* fn, const char* arg);
// A float mask may hold −inf (masked) but not NaN or +inf.
void check_mask_values(const Tensor& mask, const char* fn, const char* arg);

}  // namespace qkv
