// The RowKernels of one instruction set: included once by each of
// rows_avx512.cc, rows_avx2.cc and rows_portable.cc, which are compiled with
// that ISA's flags and -ffp-contract=off -fno-math-errno (top CMakeLists.txt).
#pragma once

#include "kernels/row_kernels.h"
#include "kernels/simd/activation_rows.h"
#include "kernels/simd/adam_span.h"
#include "kernels/simd/norm_rows.h"
#include "kernels/simd/norm_rows_f32.h"

namespace qkv::kernels::simd {
namespace {

void layer_norm_row_f32(const float* x, const float* w, const float* b, float* y, int64_t n,
                        double eps) {
  layer_norm_row(x, w, b, y, n, eps);
}

void rms_norm_row_f32(const float* x, const float* w, float* y, int64_t n, double eps) {
  rms_norm_row(x, w, y, n, eps);
}

void layer_norm_backward_row_f32(const float* x, const float* dy, const float* w, float* dx,
                                 int64_t n, double eps, double* dw, double* db) {
  layer_norm_backward_row(x, dy, w, dx, n, eps, dw, db);
}

void rms_norm_backward_row_f32(const float* x, const float* dy, const float* w, float* dx,
                               int64_t n, double eps, double* dw) {
  rms_norm_backward_row(x, dy, w, dx, n, eps, dw);
}

void adam_span_f32(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                   float* max_exp_avg_sq, int64_t n, const AdamConstants<float>& c) {
  adam_span_for(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, c);
}

template <class Isa>
constexpr RowKernels row_kernels() {
  return {Isa::kName,
          &layer_norm_row_f32,
          &add_layer_norm_f32_span<Isa>,
          &rms_norm_row_f32,
          &layer_norm_backward_row_f32,
          &rms_norm_backward_row_f32,
          &gelu_span<Isa>,
          &gelu_tanh_span<Isa>,
          &silu_span<Isa>,
          &relu_backward_span<Isa>,
          &gelu_backward_span<Isa>,
          &gelu_tanh_backward_span<Isa>,
          &silu_backward_span<Isa>,
          &adam_span_f32};
}

}  // namespace
}  // namespace qkv::kernels::simd
