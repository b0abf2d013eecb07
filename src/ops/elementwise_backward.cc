// Backward of add, mul (with broadcasting) and scale.
#include "ops/backward_util.h"
#include "ops/checks.h"
#include "qkv/gradients.h"

namespace qkv {

namespace {

// Checks shared by add_backward and mul_backward; returns the broadcast shape.
Shape check_binary(const Tensor& grad_output, const Tensor& a, const Tensor& b,
                   const BinaryGradients& grads, const char* fn) {
  check_same_floating(a, b, fn, "a", "b");
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), fn);
  check_grad_output(grad_output, shape, a, fn);
  check_grad(grads.a, a, fn, "grads.a");
  check_grad(grads.b, b, fn, "grads.b");
  return shape;
}

// grad += (per-element values over `full_shape`) summed down to grad's shape.
void add_reduced(const Tensor& grad, const std::vector<double>& full, const Shape& full_shape) {
  if (!grad.defined()) return;
  Tensor g = grad;
  add_to_grad(g, sum_to_shape(full, full_shape, g.shape()));
}

}  // namespace

void add_backward(const Tensor& grad_output, const Tensor& a, const Tensor& b,
                  const BinaryGradients& grads) {
  const Shape shape = check_binary(grad_output, a, b, grads, "add_backward");
  // Forward: o[i] = f(x[i], y[i]) with f = x + y  ->  ∂o/∂x = ∂o/∂y = 1
  const std::vector<double> g = grad_output.to_vector();
  add_reduced(grads.a, g, shape);
  add_reduced(grads.b, g, shape);
}

void mul_backward(const Tensor& grad_output, const Tensor& a, const Tensor& b,
                  const BinaryGradients& grads) {
  const Shape shape = check_binary(grad_output, a, b, grads, "mul_backward");
  // Forward: o[i] = f(x[i], y[i]) with f = x * y  ->  ∂o/∂x = y, ∂o/∂y = x
  const std::vector<double> g = grad_output.to_vector();
  if (grads.a.defined()) {
    std::vector<double> ga = b.expand(shape).to_vector();
    for (size_t i = 0; i < ga.size(); ++i) ga[i] *= g[i];
    add_reduced(grads.a, ga, shape);
  }
  if (grads.b.defined()) {
    std::vector<double> gb = a.expand(shape).to_vector();
    for (size_t i = 0; i < gb.size(); ++i) gb[i] *= g[i];
    add_reduced(grads.b, gb, shape);
  }
}

void scale_backward(const Tensor& grad_output, const Tensor& x, double factor, Tensor grad_input) {
  const char* fn = "scale_backward";
  check_floating(x, fn, "input");
  check_grad_output(grad_output, x.shape(), x, fn);
  check_defined(grad_input, fn, "grad_input");
  check_grad(grad_input, x, fn, "grad_input");
  // Forward: o[i] = in[i] * f, with f = static_cast<float>(factor) for float32 (as torch)
  const double f = x.dtype() == DType::kFloat32 ? static_cast<float>(factor) : factor;
  std::vector<double> g = grad_output.to_vector();
  for (double& v : g) v *= f;
  add_to_grad(grad_input, g);
}

}  // namespace qkv
