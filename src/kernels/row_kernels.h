// The float32 row loops of the ops (norms, activations, Adam's update),
// compiled once per instruction set beside the fused kernels (rows_avx512.cc,
// rows_avx2.cc, rows_portable.cc) and reached through the active
// KernelTable's `rows`: QKV_ISA and kernels::override_kernel_table choose
// them as they choose the attention kernels.
#pragma once

#include <cstdint>

namespace qkv::kernels {

// The constants of one Adam/AdamW step in the parameter's dtype
// (optim/adam.cc derives them as torch does).
template <class T>
struct AdamConstants {
  T neg_step_size, bias_correction2_sqrt, decay, weight_decay;
  T one_minus_beta1, beta2, one_minus_beta2, eps;
  bool has_weight_decay, decoupled, amsgrad;
};

struct RowKernels {
  const char* name;  // the instruction set (avx512_bf16's table shares avx512's rows)
  // One row of n: y = (x − mean) · rstd · w + b, w and b optional (null).
  void (*layer_norm)(const float* x, const float* w, const float* b, float* y, int64_t n,
                     double eps);
  // One row of n: y = layer_norm(x + r) with r, w and b optional (null) and
  // float32 statistics (simd/norm_rows_f32.h: for bfloat16 and int8 models).
  void (*add_layer_norm_f32)(const float* x, const float* r, const float* w, const float* b,
                             float* y, int64_t n, double eps);
  // One row of n: y = x · rrms · w, w optional.
  void (*rms_norm)(const float* x, const float* w, float* y, int64_t n, double eps);
  // One row of the backward: recomputes the row statistics as the forward
  // does, adds g·xhat to dw and g to db, and the input gradient to dx (if not null).
  void (*layer_norm_backward)(const float* x, const float* dy, const float* w, float* dx, int64_t n,
                              double eps, double* dw, double* db);
  void (*rms_norm_backward)(const float* x, const float* dy, const float* w, float* dx, int64_t n,
                            double eps, double* dw);
  // y[i] = f(x[i]) for i < n.
  void (*gelu)(const float* x, float* y, int64_t n);
  void (*gelu_tanh)(const float* x, float* y, int64_t n);
  void (*silu)(const float* x, float* y, int64_t n);
  // gi[i] += go[i] · f'(x[i]) for i < n.
  void (*relu_backward)(const float* go, const float* x, float* gi, int64_t n);
  void (*gelu_backward)(const float* go, const float* x, float* gi, int64_t n);
  void (*gelu_tanh_backward)(const float* go, const float* x, float* gi, int64_t n);
  void (*silu_backward)(const float* go, const float* x, float* gi, int64_t n);
  // Adam's update of elements [0, n) (max_exp_avg_sq null without amsgrad).
  void (*adam)(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
               float* max_exp_avg_sq, int64_t n, const AdamConstants<float>& c);
};

// The rows of kernels::active_kernel_table().
const RowKernels& active_row_kernels();

}  // namespace qkv::kernels
