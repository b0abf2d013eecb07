// Reductions: sum and mean, over one dimension or over all elements.
//
// Each output element sums its inputs one after the other in float64 (float32
// inputs included) and is rounded once, so the result does not depend on the
// thread count.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "ops/checks.h"
#include "qkv/error.h"
#include "qkv/functional.h"
#include "tensor/parallel_threshold.h"

namespace qkv {

namespace {

// x viewed as [outer, n, inner] (contiguous): out[o, i] = f(Σ_k x[o, k, i]),
// with f dividing by n for the mean.
template <class T>
void reduce(const T* x, T* out, int64_t outer, int64_t n, int64_t inner, bool mean) {
  const double divisor = static_cast<double>(n);
  const bool parallel = outer * n * inner >= detail::kParallelMinElements && !omp_in_parallel();
#pragma omp parallel if (parallel)
  {
    std::vector<double> acc(inner > 1 ? inner : 0);
#pragma omp for schedule(static)
    for (int64_t o = 0; o < outer; ++o) {
      const T* block = x + o * n * inner;
      T* dst = out + o * inner;
      if (inner == 1) {
        double s = 0;
        for (int64_t k = 0; k < n; ++k) s += block[k];
        dst[0] = static_cast<T>(mean ? s / divisor : s);
        continue;
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t k = 0; k < n; ++k) {
        const T* row = block + k * inner;
        for (int64_t i = 0; i < inner; ++i) acc[i] += row[i];
      }
      for (int64_t i = 0; i < inner; ++i) dst[i] = static_cast<T>(mean ? acc[i] / divisor : acc[i]);
    }
  }
}

Tensor reduce_dim(const Tensor& x, int64_t dim, bool keepdim, bool mean, const char* fn) {
  check_defined(x, fn, "input");
  check_floating(x, fn, "input");
  const int64_t ndim = x.dim();
  QKV_CHECK(dim >= -ndim && dim < ndim, fn, ": dimension ", dim,
            " is out of range for a tensor of ", ndim, " dimensions (shape ", shape_str(x.shape()),
            ")");
  const int64_t d = dim < 0 ? dim + ndim : dim;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= x.size(i);
  for (int64_t i = d + 1; i < ndim; ++i) inner *= x.size(i);
  const int64_t n = x.size(d);
  Shape shape;
  for (int64_t i = 0; i < ndim; ++i) {
    if (i != d)
      shape.push_back(x.size(i));
    else if (keepdim)
      shape.push_back(1);
  }
  Tensor out = Tensor::empty(shape, x.dtype());
  if (out.numel() == 0) return out;
  const Tensor xc = x.contiguous();
  if (x.dtype() == DType::kFloat64) {
    reduce(xc.data<double>(), out.data<double>(), outer, n, inner, mean);
  } else {
    reduce(xc.data<float>(), out.data<float>(), outer, n, inner, mean);
  }
  return out;
}

Tensor reduce_all(const Tensor& x, bool mean, const char* fn) {
  check_defined(x, fn, "input");
  check_floating(x, fn, "input");
  return reduce_dim(x.reshape({x.numel()}), 0, false, mean, fn);
}

}  // namespace

Tensor sum(const Tensor& x) { return reduce_all(x, false, "sum"); }

Tensor sum(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce_dim(x, dim, keepdim, false, "sum");
}

Tensor mean(const Tensor& x) { return reduce_all(x, true, "mean"); }

Tensor mean(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce_dim(x, dim, keepdim, true, "mean");
}

}  // namespace qkv
