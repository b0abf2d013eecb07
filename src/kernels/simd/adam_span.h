// Adam's update of a span of elements, as torch 2.13's single-tensor update
// rounds it (see optim/adam.cc): float64 in adam.cc, float32 in rows_*.cc
// once per instruction set (RowKernels::adam). Every file that compiles it
// has -ffp-contract=off (torch rounds a * b + c twice; the fused
// multiply-adds below are torch's own) and -fno-math-errno (the square roots
// vectorise). Internal linkage, as vec.h.
#pragma once

#include <cstdint>

#include "kernels/row_kernels.h"

namespace qkv::kernels::simd {
namespace {

// Builtins, not the std:: wrappers: they are inlined in every file.
// adam_sqrt never sees a negative value.
[[gnu::always_inline]] inline float adam_fma(float a, float b, float c) {
  return __builtin_fmaf(a, b, c);
}
[[gnu::always_inline]] inline double adam_fma(double a, double b, double c) {
  return __builtin_fma(a, b, c);
}
[[gnu::always_inline]] inline float adam_sqrt(float v) { return __builtin_sqrtf(v); }
[[gnu::always_inline]] inline double adam_sqrt(double v) { return __builtin_sqrt(v); }

// torch's vectorised lerp: start + w (end − start) for w < 0.5, else end − (1 − w)(end − start).
template <class T>
[[gnu::always_inline]] inline T adam_lerp(T start, T end, T weight) {
  const bool from_start = weight < T(0.5);  // one multiply-add either way: no branch
  return adam_fma(from_start ? weight : weight - T(1), end - start, from_start ? start : end);
}

// How weight decay enters the update.
enum class AdamDecay { kNone, kDecoupled, kCoupled };

// The update of elements [0, n), each on its own. The options are template
// arguments so that the loop has no branches and vectorises; the constants
// come by value, so no store to the buffers can change them.
template <AdamDecay kDecay, bool kAmsgrad, class T>
[[gnu::always_inline]] inline void adam_span(T* param, const T* grad_in, T* exp_avg, T* exp_avg_sq,
                                             T* max_exp_avg_sq, int64_t n, AdamConstants<T> c) {
  for (int64_t i = 0; i < n; ++i) {
    T g = grad_in[i];
    if constexpr (kDecay == AdamDecay::kDecoupled)
      param[i] = param[i] * c.decay;  // param.mul_(1 - lr * weight_decay)
    if constexpr (kDecay == AdamDecay::kCoupled)
      g = adam_fma(param[i], c.weight_decay, g);  // grad = grad.add(param, alpha=wd)
    // exp_avg.lerp_(grad, 1 - beta1)
    exp_avg[i] = adam_lerp(exp_avg[i], g, c.one_minus_beta1);
    // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    exp_avg_sq[i] = exp_avg_sq[i] * c.beta2 + c.one_minus_beta2 * g * g;
    T second = exp_avg_sq[i];
    if constexpr (kAmsgrad) {
      // torch.maximum(max_exp_avg_sqs[i], exp_avg_sq, out=max_exp_avg_sqs[i])
      max_exp_avg_sq[i] = max_exp_avg_sq[i] < second ? second : max_exp_avg_sq[i];
      second = max_exp_avg_sq[i];
    }
    // denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
    const T denom = adam_sqrt(second) / c.bias_correction2_sqrt + c.eps;
    // param.addcdiv_(exp_avg, denom, value=-step_size)
    param[i] = param[i] + c.neg_step_size * exp_avg[i] / denom;
  }
}

// Picks the span for the options.
template <class T>
[[gnu::always_inline]] inline void adam_span_for(T* param, const T* grad_in, T* exp_avg,
                                                 T* exp_avg_sq, T* max_exp_avg_sq, int64_t n,
                                                 AdamConstants<T> c) {
#define QKV_ADAM_SPAN(decay, amsgrad) \
  adam_span<decay, amsgrad>(param, grad_in, exp_avg, exp_avg_sq, max_exp_avg_sq, n, c)
  if (!c.has_weight_decay)
    c.amsgrad ? QKV_ADAM_SPAN(AdamDecay::kNone, true) : QKV_ADAM_SPAN(AdamDecay::kNone, false);
  else if (c.decoupled)
    c.amsgrad ? QKV_ADAM_SPAN(AdamDecay::kDecoupled, true)
              : QKV_ADAM_SPAN(AdamDecay::kDecoupled, false);
  else
    c.amsgrad ? QKV_ADAM_SPAN(AdamDecay::kCoupled, true)
              : QKV_ADAM_SPAN(AdamDecay::kCoupled, false);
#undef QKV_ADAM_SPAN
}

}  // namespace
}  // namespace qkv::kernels::simd
