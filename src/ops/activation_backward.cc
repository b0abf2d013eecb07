// Backward of relu, gelu (exact erf and tanh) and silu: grad_input +=
// grad_output · f'(x). Each derivative is evaluated in float64, except for
// contiguous float32 tensors, which run the active instruction set's vector
// loops with the kernels' exp and erf (kernels/row_kernels.h): within
// ~3e-7 · (|x| + 1) of the float64 derivative, and ~50x faster than going
// through float64 vectors (the GELU of a MiniLM-sized training step is 6 M
// elements per layer).
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/row_kernels.h"
#include "ops/backward_util.h"
#include "ops/checks.h"
#include "qkv/gradients.h"
#include "tensor/parallel_threshold.h"

namespace qkv {

namespace {

using BackwardF32 = void (*)(const float*, const float*, float*, int64_t);

// Runs f over [0, n) in blocks spread over the threads (one thread below
// kParallelMinElements, as the forward's run_f32).
void run_backward_f32(BackwardF32 f, const float* go, const float* x, float* gi, int64_t n) {
  constexpr int64_t kBlock = 1 << 13;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= detail::kParallelMinElements && \
                                              !omp_in_parallel())
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock;
    f(go + begin, x + begin, gi + begin, std::min(kBlock, n - begin));
  }
}

// grad_input += grad_output · derivative(x) elementwise; `f32` (may be null)
// is the float32 kernel for contiguous float32 tensors.
template <class F>
void unary_backward(const Tensor& grad_output, const Tensor& x, Tensor& grad_input, const char* fn,
                    F derivative, BackwardF32 f32) {
  check_floating(x, fn, "input");
  check_grad_output(grad_output, x.shape(), x, fn);
  check_defined(grad_input, fn, "grad_input");
  check_grad(grad_input, x, fn, "grad_input");
  if (f32 != nullptr && x.dtype() == DType::kFloat32 && x.is_contiguous() &&
      grad_output.is_contiguous() && grad_input.is_contiguous()) {
    run_backward_f32(f32, grad_output.data<float>(), x.data<float>(), grad_input.data<float>(),
                     x.numel());
    return;
  }
  const std::vector<double> xs = x.to_vector();
  std::vector<double> dx = grad_output.to_vector();
  for (size_t i = 0; i < dx.size(); ++i) dx[i] *= derivative(xs[i]);
  add_to_grad(grad_input, dx);
}

// Forward: return v > 0.0 || std::isnan(v) ? v : 0.0;
double relu_derivative(double v) { return v > 0.0 ? 1.0 : 0.0; }

// Forward: return 0.5 * v * (1.0 + std::erf(v * M_SQRT1_2));
// d/dv [v Φ(v)] = Φ(v) + v φ(v), φ(v) = exp(−v²/2) / √(2π).
double gelu_derivative(double v) {
  const double cdf = 0.5 * (1.0 + std::erf(v * M_SQRT1_2));
  const double pdf = std::exp(-0.5 * v * v) * (0.5 * M_2_SQRTPI * M_SQRT1_2);
  return cdf + v * pdf;
}

// Forward: return 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v)));
double gelu_tanh_derivative(double v) {
  const double k = std::sqrt(2.0 / M_PI);
  const double t = std::tanh(k * (v + 0.044715 * v * v * v));
  return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * v * v);
}

// Forward: return v / (1.0 + std::exp(-v));
// d/dv [v σ(v)] = σ(v) (1 + v (1 − σ(v))).
double silu_derivative(double v) {
  const double s = 1.0 / (1.0 + std::exp(-v));
  return s * (1.0 + v * (1.0 - s));
}

}  // namespace

void relu_backward(const Tensor& grad_output, const Tensor& x, Tensor grad_input) {
  unary_backward(grad_output, x, grad_input, "relu_backward", relu_derivative,
                 kernels::active_row_kernels().relu_backward);
}

void gelu_backward(const Tensor& grad_output, const Tensor& x, GeluApproximation approximate,
                   Tensor grad_input) {
  const bool tanh = approximate == GeluApproximation::kTanh;
  unary_backward(grad_output, x, grad_input, "gelu_backward",
                 tanh ? gelu_tanh_derivative : gelu_derivative,
                 tanh ? kernels::active_row_kernels().gelu_tanh_backward
                      : kernels::active_row_kernels().gelu_backward);
}

void silu_backward(const Tensor& grad_output, const Tensor& x, Tensor grad_input) {
  unary_backward(grad_output, x, grad_input, "silu_backward", silu_derivative,
                 kernels::active_row_kernels().silu_backward);
}

void activate_backward(const Tensor& grad_output, const Tensor& x, Activation activation,
                       Tensor grad_input) {
  switch (activation) {
    case Activation::kGelu:
      return gelu_backward(grad_output, x, GeluApproximation::kNone, std::move(grad_input));
    case Activation::kGeluTanh:
      return gelu_backward(grad_output, x, GeluApproximation::kTanh, std::move(grad_input));
    case Activation::kSilu:
      return silu_backward(grad_output, x, std::move(grad_input));
    case Activation::kRelu:
      break;
  }
  relu_backward(grad_output, x, std::move(grad_input));
}

}  // namespace qkv
