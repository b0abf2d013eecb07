// linear and matmul through the BLAS (OpenBLAS): one gemm call per matrix.
#include "qkv/linear.h"

#include <cblas.h>

#include "ops/checks.h"

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

template <class T>
void linear_impl(const Tensor& x2d, const Tensor& w, const Tensor& bias, Tensor& y2d) {
  const int64_t m = x2d.size(0), k = x2d.size(1), n = w.size(0);
  T* y = y2d.data<T>();
  double beta = 0.0;
  if (bias.defined()) {
    const T* b = bias.data<T>();
    for (int64_t r = 0; r < m; ++r) std::copy(b, b + n, y + r * n);
    beta = 1.0;
  }
  if (k == 0) {
    if (!bias.defined()) y2d.fill(0.0);
    return;
  }
  gemm<T>(true, m, n, k, x2d.data<T>(), w.data<T>(), y, beta);
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const char* fn = "linear";
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
  Tensor b;
  if (bias.defined()) {
    check_dim(bias, 1, fn, "bias", "[out_features]");
    QKV_CHECK(bias.size(0) == out, fn, ": bias must have ", out, " elements, got ",
              shape_str(bias.shape()));
    QKV_CHECK_TYPE(bias.dtype() == x.dtype(), fn, ": bias dtype ", dtype_name(bias.dtype()),
                   " differs from input dtype ", dtype_name(x.dtype()));
    b = bias.contiguous();
  }
  const Tensor x2d = x.reshape({-1, in}).contiguous();
  const Tensor w = weight.contiguous();
  Tensor y2d = Tensor::empty({x2d.size(0), out}, x.dtype());
  if (x.dtype() == DType::kFloat64) {
    linear_impl<double>(x2d, w, b, y2d);
  } else {
    linear_impl<float>(x2d, w, b, y2d);
  }
  Shape out_shape = x.shape();
  out_shape.back() = out;
  return y2d.view(out_shape);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  const char* fn = "matmul";
  check_floating(a, fn, "a");
  check_floating(b, fn, "b");
  QKV_CHECK_TYPE(a.dtype() == b.dtype(), fn, ": a is ", dtype_name(a.dtype()), " but b is ",
                 dtype_name(b.dtype()));
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
