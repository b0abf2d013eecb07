// Activations: relu, gelu (exact erf or tanh), silu. Each value is computed
// in float64 and rounded once to the input's dtype.
#include <cmath>

#include "ops/checks.h"
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

// y = f(x) elementwise; f works on doubles.
template <class F>
Tensor map(const Tensor& x, const char* fn, F f) {
  check_floating(x, fn, "input");
  const Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  if (x.dtype() == DType::kFloat64)
    map_typed<double>(xc, y, f);
  else
    map_typed<float>(xc, y, f);
  return y;
}

}  // namespace

Tensor relu(const Tensor& x) {
  // NaN stays NaN, as in torch.
  return map(x, "relu", [](double v) { return v > 0.0 || std::isnan(v) ? v : 0.0; });
}

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  if (approximate == GeluApproximation::kTanh) {
    const double k = std::sqrt(2.0 / M_PI);
    return map(x, "gelu", [k](double v) {
      return 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v)));
    });
  }
  return map(x, "gelu", [](double v) { return 0.5 * v * (1.0 + std::erf(v * M_SQRT1_2)); });
}

Tensor silu(const Tensor& x) {
  return map(x, "silu", [](double v) { return v / (1.0 + std::exp(-v)); });
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
