// linear and matmul through the BLAS (OpenBLAS): one gemm call per matrix.
#include "qkv/linear.h"

#include <cblas.h>
#include <omp.h>

#include <cstddef>

#include "ops/checks.h"
#include "ops/gemv.h"
#include "tensor/parallel_threshold.h"

namespace qkv {

namespace {

// c[m, n] = a[m, k] · op(b)  (+ existing c when beta = 1), row-major, contiguous.
template <class T>
void gemm(bool transpose_b, int64_t m, int64_t n, int64_t k, const T* a, const T* b, T* c,
          double beta) {
  if (m == 0 || n == 0) return;
  const CBLAS_TRANSPOSE tb = transpose_b ? CblasTrans : CblasNoTrans;
  const int64_t ldb = transpose_b ? k : n;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, m, n, k, 1.0f, a, k, b, ldb,
                static_cast<float>(beta), c, n);
  } else {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, tb, m, n, k, 1.0, a, k, b, ldb, beta, c, n);
  }
}

// y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]); all contiguous.
template <class T>
void linear_impl(int64_t m, int64_t n, int64_t k, const T* x, const T* w, const T* bias, T* y) {
  double beta = 0.0;
  if (bias) {
    // The bias goes in first and the product is added to it (beta = 1); its
    // rows are written by every thread (a 4096 x 1536 output is 24 MiB).
#pragma omp parallel for schedule(static) if (m * n >= detail::kParallelMinElements && \
                                              !omp_in_parallel())
    for (int64_t r = 0; r < m; ++r) std::copy(bias, bias + n, y + r * n);
    beta = 1.0;
  }
  if (k == 0) {
    if (!bias) std::fill(y, y + m * n, T(0));
    return;
  }
  if (m == 0 || n == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    // One row (a decoding step) or a few (a short sentence): W streams in
    // once and is read in place; a gemm's packing of W would cost more.
    if (m <= detail::gemv_max_rows()) {
      const detail::GemvTask task{
          .w = w, .x = x, .y = y, .n = n, .k = k, .accumulate = beta != 0.0, .m = m};
      detail::gemv({&task, 1});
      return;
    }
  } else if (m == 1) {
    cblas_dgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0, w, k, x, 1, beta, y, 1);
    return;
  }
  gemm<T>(true, m, n, k, x, w, y, beta);
}

// Dispatches on the dtype; tensors contiguous, bias optional.
void linear_typed(int64_t m, int64_t n, int64_t k, const Tensor& x, const Tensor& w,
                  const Tensor& bias, Tensor& y) {
  if (x.dtype() == DType::kFloat64) {
    linear_impl<double>(m, n, k, x.data<double>(), w.data<double>(),
                        bias.defined() ? bias.data<double>() : nullptr, y.data<double>());
  } else {
    linear_impl<float>(m, n, k, x.data<float>(), w.data<float>(),
                       bias.defined() ? bias.data<float>() : nullptr, y.data<float>());
  }
}

// The checks shared by linear and linear_into; returns in_features.
int64_t check_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* fn) {
  check_floating(x, fn, "input");
  check_dim(weight, 2, fn, "weight", "[out_features, in_features]");
  QKV_CHECK(x.dim() >= 1, fn,
            ": input must have at least 1 dimension [..., in_features], got a "
            "scalar");
  QKV_CHECK_TYPE(weight.dtype() == x.dtype(), fn, ": weight dtype ", dtype_name(weight.dtype()),
                 " differs from input dtype ", dtype_name(x.dtype()));
  const int64_t in = weight.size(1), out = weight.size(0);
  QKV_CHECK(x.size(-1) == in, fn, ": input's last dim must be in_features = ", in, " (weight ",
            shape_str(weight.shape()), "), got input ", shape_str(x.shape()));
  if (bias.defined()) {
    check_dim(bias, 1, fn, "bias", "[out_features]");
    QKV_CHECK(bias.size(0) == out, fn, ": bias must have ", out, " elements, got ",
              shape_str(bias.shape()));
    QKV_CHECK_TYPE(bias.dtype() == x.dtype(), fn, ": bias dtype ", dtype_name(bias.dtype()),
                   " differs from input dtype ", dtype_name(x.dtype()));
  }
  return in;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const int64_t in = check_linear(x, weight, bias, "linear");
  const int64_t out = weight.size(0);
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  const Tensor x2d = x.reshape({-1, in}).contiguous();
  const Tensor w = weight.contiguous();
  Tensor y2d = Tensor::empty({x2d.size(0), out}, x.dtype());
  linear_typed(x2d.size(0), out, in, x2d, w, b, y2d);
  Shape out_shape = x.shape();
  out_shape.back() = out;
  return y2d.view(out_shape);
}

void linear_into(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const char* fn = "linear_into";
  const int64_t in = check_linear(x, weight, bias, fn);
  const int64_t n = weight.size(0);
  check_defined(out, fn, "out");
  QKV_CHECK_TYPE(out.dtype() == x.dtype(), fn, ": out dtype ", dtype_name(out.dtype()),
                 " differs from input dtype ", dtype_name(x.dtype()));
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  QKV_CHECK(out.dim() == x.dim() && out.size(-1) == n && out.numel() == rows * n, fn,
            ": out must have the input's shape with the last dim out_features = ", n, ", got out ",
            shape_str(out.shape()), " for input ", shape_str(x.shape()));
  QKV_CHECK(x.is_contiguous() && weight.is_contiguous() && out.is_contiguous() &&
                (!bias.defined() || bias.is_contiguous()),
            fn, ": input, weight, bias and out must be contiguous (it copies nothing)");
  const std::byte* xb = static_cast<const std::byte*>(x.raw_data());
  const std::byte* ob = static_cast<const std::byte*>(out.raw_data());
  const size_t item = dtype_size(x.dtype());
  QKV_CHECK(ob + out.numel() * item <= xb || xb + x.numel() * item <= ob, fn,
            ": out must not overlap the input");
  linear_typed(rows, n, in, x, weight, bias, out);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  const char* fn = "matmul";
  check_same_floating(a, b, fn, "a", "b");
  QKV_CHECK(a.dim() >= 2 && b.dim() == a.dim(), fn,
            ": a [..., n, k] and b [..., k, m] need the same number (>= 2) of dims, got a ",
            shape_str(a.shape()), " and b ", shape_str(b.shape()));
  QKV_CHECK(a.size(-1) == b.size(-2), fn, ": inner dims differ: a ", shape_str(a.shape()),
            " and b ", shape_str(b.shape()));
  for (int64_t d = 0; d + 2 < a.dim(); ++d) {
    QKV_CHECK(a.size(d) == b.size(d), fn, ": leading dims differ: a ", shape_str(a.shape()),
              " and b ", shape_str(b.shape()));
  }
  const int64_t n = a.size(-2), k = a.size(-1), m = b.size(-1);
  const Tensor a3 = a.reshape({-1, n, k}).contiguous();
  const Tensor b3 = b.reshape({-1, k, m}).contiguous();
  Shape out_shape = a.shape();
  out_shape.back() = m;
  Tensor out = Tensor::zeros(out_shape, a.dtype());
  if (k == 0) return out;
  const int64_t batch = a3.size(0);
  for (int64_t i = 0; i < batch; ++i) {
    if (a.dtype() == DType::kFloat64) {
      gemm<double>(false, n, m, k, a3.data<double>() + i * n * k, b3.data<double>() + i * k * m,
                   out.data<double>() + i * n * m, 0.0);
    } else {
      gemm<float>(false, n, m, k, a3.data<float>() + i * n * k, b3.data<float>() + i * k * m,
                  out.data<float>() + i * n * m, 0.0);
    }
  }
  return out;
}

}  // namespace qkv
