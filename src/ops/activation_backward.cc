// Backward of relu, gelu (exact erf and tanh) and silu: grad_input +=
// grad_output · f'(x), each derivative evaluated in float64.
#include <cmath>

#include "ops/backward_util.h"
#include "ops/checks.h"
#include "qkv/gradients.h"

namespace qkv {

namespace {

// grad_input += grad_output · derivative(x) elementwise.
template <class F>
void unary_backward(const Tensor& grad_output, const Tensor& x, Tensor& grad_input, const char* fn,
                    F derivative) {
  check_floating(x, fn, "input");
  check_grad_output(grad_output, x.shape(), x, fn);
  check_defined(grad_input, fn, "grad_input");
  check_grad(grad_input, x, fn, "grad_input");
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
  unary_backward(grad_output, x, grad_input, "relu_backward", relu_derivative);
}

void gelu_backward(const Tensor& grad_output, const Tensor& x, GeluApproximation approximate,
                   Tensor grad_input) {
  unary_backward(grad_output, x, grad_input, "gelu_backward",
                 approximate == GeluApproximation::kTanh ? gelu_tanh_derivative : gelu_derivative);
}

void silu_backward(const Tensor& grad_output, const Tensor& x, Tensor grad_input) {
  unary_backward(grad_output, x, grad_input, "silu_backward", silu_derivative);
}

void activate_backward(const Tensor& grad_output, const Tensor& x, Activation activation,
                       Tensor grad_input) {
  if (activation == Activation::kGelu)
    gelu_backward(grad_output, x, GeluApproximation::kNone, std::move(grad_input));
  else
    relu_backward(grad_output, x, std::move(grad_input));
}

}  // namespace qkv
