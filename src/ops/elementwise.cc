// Elementwise arithmetic with broadcasting: add, mul, scale.
#include <omp.h>

#include "ops/checks.h"
#include "ops/into_checks.h"
#include "qkv/functional.h"
#include "tensor/parallel_threshold.h"

namespace qkv {

namespace {

// o[i] = f(x[i], y[i]) for i < n, over the threads when n is large (element
// by element: the same result on any thread count).
template <class T, class F>
void apply(const T* x, const T* y, T* o, int64_t n, F f) {
#pragma omp parallel for schedule(static) if (n >= detail::kParallelMinElements && \
                                              !omp_in_parallel())
  for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
}

// out = f(a, b) over the broadcast shape; a and b are first materialised
// contiguously in that shape (a plain copy when they already have it).
template <class F>
Tensor binary(const Tensor& a, const Tensor& b, const char* fn, F f) {
  check_floating(a, fn, "a");
  check_floating(b, fn, "b");
  QKV_CHECK_TYPE(a.dtype() == b.dtype(), fn, ": a is ", dtype_name(a.dtype()), " but b is ",
                 dtype_name(b.dtype()), " (convert one with .to())");
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), fn);
  const Tensor ac = a.expand(shape).contiguous();
  const Tensor bc = b.expand(shape).contiguous();
  Tensor out = Tensor::empty(shape, a.dtype());
  const int64_t n = out.numel();
  if (a.dtype() == DType::kFloat64) {
    apply(ac.data<double>(), bc.data<double>(), out.data<double>(), n, f);
  } else {
    apply(ac.data<float>(), bc.data<float>(), out.data<float>(), n, f);
  }
  return out;
}

// out = f(a, b) for a, b and out of one shape, all contiguous.
template <class F>
void binary_into(Tensor& out, const Tensor& a, const Tensor& b, const char* fn, F f) {
  check_into(out, a, fn);
  check_floating(b, fn, "b");
  QKV_CHECK_TYPE(b.dtype() == a.dtype(), fn, ": a is ", dtype_name(a.dtype()), " but b is ",
                 dtype_name(b.dtype()));
  QKV_CHECK(b.shape() == a.shape() && b.is_contiguous(), fn,
            ": b must be contiguous with a's shape ", shape_str(a.shape()),
            " (no broadcasting), got ", shape_str(b.shape()));
  const int64_t n = out.numel();
  if (a.dtype() == DType::kFloat64) {
    apply(a.data<double>(), b.data<double>(), out.data<double>(), n, f);
  } else {
    apply(a.data<float>(), b.data<float>(), out.data<float>(), n, f);
  }
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return binary(a, b, "add", [](auto x, auto y) { return x + y; });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  return binary(a, b, "mul", [](auto x, auto y) { return x * y; });
}

void add_into(Tensor& out, const Tensor& a, const Tensor& b) {
  binary_into(out, a, b, "add_into", [](auto x, auto y) { return x + y; });
}

void mul_into(Tensor& out, const Tensor& a, const Tensor& b) {
  binary_into(out, a, b, "mul_into", [](auto x, auto y) { return x * y; });
}

Tensor scale(const Tensor& x, double factor) {
  check_floating(x, "scale", "input");
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  const int64_t n = out.numel();
  if (x.dtype() == DType::kFloat64) {
    const double* in = xc.data<double>();
    double* o = out.data<double>();
    for (int64_t i = 0; i < n; ++i) o[i] = in[i] * factor;
  } else {
    // As torch: a Python float factor is applied in the tensor's dtype.
    const float f = static_cast<float>(factor);
    const float* in = xc.data<float>();
    float* o = out.data<float>();
    for (int64_t i = 0; i < n; ++i) o[i] = in[i] * f;
  }
  return out;
}

}  // namespace qkv
