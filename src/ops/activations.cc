// Activations: relu, gelu (exact erf or tanh), silu. Each value is computed
// in float64 and rounded once to the input's dtype.
#include <cmath>

#include "ops/checks.h"
#include "ops/into_checks.h"
#include "qkv/functional.h"

namespace qkv {

namespace {

template <class T, class F>
void map_typed(const Tensor& x, Tensor& y, F f) {
  const T* in = x.data<T>();
  T* out = y.data<T>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i)
    out[i] = static_cast<T>(f(static_cast<double>(in[i])));
}

// out = f(x) elementwise into a preallocated out; f works on doubles.
template <class F>
void map_into(Tensor& out, const Tensor& x, const char* fn, F f) {
  check_into(out, x, fn);
  if (x.dtype() == DType::kFloat64)
    map_typed<double>(x, out, f);
  else
    map_typed<float>(x, out, f);
}

// y = f(x) elementwise into a new tensor.
template <class F>
Tensor map(const Tensor& x, const char* fn, F f) {
  check_floating(x, fn, "input");
  const Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  map_into(y, xc, fn, f);
  return y;
}

double relu_value(double v) { return v > 0.0 || std::isnan(v) ? v : 0.0; }  // NaN stays NaN
double gelu_value(double v) { return 0.5 * v * (1.0 + std::erf(v * M_SQRT1_2)); }
double gelu_tanh_value(double v) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v)));
}
double silu_value(double v) { return v / (1.0 + std::exp(-v)); }

}  // namespace

Tensor relu(const Tensor& x) { return map(x, "relu", relu_value); }

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  return map(x, "gelu", approximate == GeluApproximation::kTanh ? gelu_tanh_value : gelu_value);
}

Tensor silu(const Tensor& x) { return map(x, "silu", silu_value); }

void gelu_into(Tensor& out, const Tensor& x, GeluApproximation approximate) {
  map_into(out, x, "gelu_into",
           approximate == GeluApproximation::kTanh ? gelu_tanh_value : gelu_value);
}

void silu_into(Tensor& out, const Tensor& x) { map_into(out, x, "silu_into", silu_value); }

void activate_into(Tensor& out, const Tensor& x, Activation activation) {
  map_into(out, x, "activate_into", activation == Activation::kGelu ? gelu_value : relu_value);
}

Activation activation_from_string(const std::string& name) {
  if (name == "relu") return Activation::kRelu;
  if (name == "gelu") return Activation::kGelu;
  QKV_CHECK(false, "activation should be \"relu\" or \"gelu\", got \"", name, "\"");
  return Activation::kRelu;
}

const char* activation_name(Activation activation) {
  return activation == Activation::kGelu ? "gelu" : "relu";
}

Tensor activate(const Tensor& x, Activation activation) {
  return activation == Activation::kGelu ? gelu(x) : relu(x);
}

}  // namespace qkv
