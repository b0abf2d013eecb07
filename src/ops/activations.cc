// Activations: relu, gelu (exact erf or tanh), silu. float64 inputs are
// computed with the C library (std::erf, std::tanh, std::exp) and are exact to
// the last bit or so. float32 inputs run the active instruction set's vector
// loops (kernels/row_kernels.h, with the kernels' exp and erf):
// |gelu error| <= 2e-7 * (|x| + 1) against float64 (tests/test_gelu.cc),
// ~30-40x faster than a scalar float64 erf per element, which took ~20 % of
// an all-MiniLM-L6-v2 forward.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/row_kernels.h"
#include "ops/checks.h"
#include "ops/into_checks.h"
#include "qkv/functional.h"
#include "tensor/enum_names.h"
#include "tensor/parallel_threshold.h"

namespace qkv {

namespace {

// --- float64: the C library, one rounding to the output ------------------------------

template <class T, class F>
void map_typed(const Tensor& x, Tensor& y, F f) {
  const T* in = x.data<T>();
  T* out = y.data<T>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i)
    out[i] = static_cast<T>(f(static_cast<double>(in[i])));
}

double relu_value(double v) { return v > 0.0 || std::isnan(v) ? v : 0.0; }  // NaN stays NaN
double gelu_value(double v) { return 0.5 * v * (1.0 + std::erf(v * M_SQRT1_2)); }
double gelu_tanh_value(double v) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v)));
}
double silu_value(double v) { return v / (1.0 + std::exp(-v)); }

using SpanF32 = void (*)(const float*, float*, int64_t);

// The float32 loops of the active instruction set.
SpanF32 gelu_f32() { return kernels::active_row_kernels().gelu; }
SpanF32 gelu_tanh_f32() { return kernels::active_row_kernels().gelu_tanh; }
SpanF32 silu_f32() { return kernels::active_row_kernels().silu; }

// Runs f over [0, n) in blocks spread over the threads (one thread below
// kParallelMinElements). Called inside a parallel region (bert.cc's row
// blocks) it stays on the calling thread.
void run_f32(SpanF32 f, const float* x, float* y, int64_t n) {
  constexpr int64_t kBlock = 1 << 13;  // a multiple of every vector width
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= detail::kParallelMinElements && \
                                              !omp_in_parallel())
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock;
    f(x + begin, y + begin, std::min(kBlock, n - begin));
  }
}

// --- dispatch on dtype -----------------------------------------------------------------

// out = f(x) elementwise into a preallocated out: f64 for float64, f32 (when
// given) for float32, else f64 rounded once to float32.
template <class F>
void map_into(Tensor& out, const Tensor& x, const char* fn, F f64, SpanF32 f32 = nullptr) {
  check_into(out, x, fn);
  if (x.dtype() == DType::kFloat64)
    map_typed<double>(x, out, f64);
  else if (f32)
    run_f32(f32, x.data<float>(), out.data<float>(), x.numel());
  else
    map_typed<float>(x, out, f64);
}

// y = f(x) elementwise into a new tensor.
template <class F>
Tensor map(const Tensor& x, const char* fn, F f64, SpanF32 f32 = nullptr) {
  check_floating(x, fn, "input");
  const Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  map_into(y, xc, fn, f64, f32);
  return y;
}

}  // namespace

Tensor relu(const Tensor& x) { return map(x, "relu", relu_value); }

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  if (approximate == GeluApproximation::kTanh)
    return map(x, "gelu", gelu_tanh_value, gelu_tanh_f32());
  return map(x, "gelu", gelu_value, gelu_f32());
}

Tensor silu(const Tensor& x) { return map(x, "silu", silu_value, silu_f32()); }

void gelu_into(Tensor& out, const Tensor& x, GeluApproximation approximate) {
  if (approximate == GeluApproximation::kTanh)
    map_into(out, x, "gelu_into", gelu_tanh_value, gelu_tanh_f32());
  else
    map_into(out, x, "gelu_into", gelu_value, gelu_f32());
}

void silu_into(Tensor& out, const Tensor& x) {
  map_into(out, x, "silu_into", silu_value, silu_f32());
}

void activate_into(Tensor& out, const Tensor& x, Activation activation) {
  switch (activation) {
    case Activation::kGelu:
      return gelu_into(out, x, GeluApproximation::kNone);
    case Activation::kGeluTanh:
      return gelu_into(out, x, GeluApproximation::kTanh);
    case Activation::kSilu:
      return silu_into(out, x);
    case Activation::kRelu:
      break;
  }
  map_into(out, x, "activate_into", relu_value);
}

Activation activation_from_string(const std::string& name) {
  if (name == "relu") return Activation::kRelu;
  if (name == "gelu") return Activation::kGelu;
  QKV_CHECK(false, "activation should be \"relu\" or \"gelu\", got \"", name, "\"");
  return Activation::kRelu;
}

const char* activation_name(Activation activation) {
  constexpr detail::EnumName<Activation> kNames[] = {{Activation::kRelu, "relu"},
                                                     {Activation::kGelu, "gelu"},
                                                     {Activation::kGeluTanh, "gelu_tanh"},
                                                     {Activation::kSilu, "silu"}};
  return detail::name_of(kNames, activation);
}

Tensor activate(const Tensor& x, Activation activation) {
  switch (activation) {
    case Activation::kGelu:
      return gelu(x);
    case Activation::kGeluTanh:
      return gelu(x, GeluApproximation::kTanh);
    case Activation::kSilu:
      return silu(x);
    case Activation::kRelu:
      break;
  }
  return relu(x);
}

}  // namespace qkv
