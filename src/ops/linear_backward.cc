// Backward of linear and matmul: each gradient is one BLAS gemm per matrix
// that accumulates (beta = 1) straight into the gradient buffer.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <type_traits>

#include "ops/backward_util.h"
#include "ops/checks.h"
#include "qkv/gradients.h"
#include "tensor/parallel_threshold.h"

namespace qkv {

namespace {

// c[m, n] = op(a) · op(b) + beta · c, row-major; op(a) is [m, k], op(b) is
// [k, n]; all contiguous. beta is 1 (accumulate) or 0 (overwrite).
template <class T>
void gemm_accumulate(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                     const T* a, const T* b, T* c, T beta = 1) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == 0) std::fill(c, c + m * n, T(0));
    return;
  }
  const CBLAS_TRANSPOSE ta = transpose_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = transpose_b ? CblasTrans : CblasNoTrans;
  const int64_t lda = transpose_a ? m : k;
  const int64_t ldb = transpose_b ? k : n;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, n);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, n);
  }
}

// Runs `accumulate(T* data)` on a contiguous buffer that ends up added to
// `grad`: grad itself when it is contiguous, else a zeroed temporary.
template <class T, class F>
void accumulate_into(Tensor& grad, F accumulate) {
  if (grad.is_contiguous()) {
    accumulate(grad.data<T>());
    return;
  }
  Tensor tmp = Tensor::zeros(grad.shape(), grad.dtype());
  accumulate(tmp.data<T>());
  add_to_grad(grad, tmp);
}

template <class T>
void linear_backward_typed(const Tensor& dy, const Tensor& x, const Tensor& w, int64_t rows,
                           int64_t in, int64_t out, const LinearGradients& grads) {
  const T* dy_data = dy.data<T>();
  if (grads.input.defined()) {
    // Forward: y = x · Wᵀ  ->  dx [rows, in] += dy [rows, out] · W [out, in]
    Tensor g = grads.input;
    accumulate_into<T>(g, [&](T* dx) {
      gemm_accumulate<T>(false, false, rows, in, out, dy_data, w.data<T>(), dx);
    });
  }
  if (grads.weight.defined()) {
    // Forward: y = x · Wᵀ  ->  dW [out, in] += dyᵀ [out, rows] · x [rows, in]
    Tensor g = grads.weight;
    accumulate_into<T>(g, [&](T* dw) {
      gemm_accumulate<T>(true, false, out, in, rows, dy_data, x.data<T>(), dw);
    });
  }
  if (grads.bias.defined()) {
    // Forward: y = ... + b  ->  db += Σ_rows dy, summed in float64. Blocks
    // of rows (a fixed split, whatever the thread count) are summed by the
    // threads while reading dy in order, then the block sums are added in
    // block order: the same sums on any thread count.
    constexpr int64_t kRowsPerBlock = 128;
    const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
    std::vector<double> block_sums(static_cast<size_t>(blocks * out), 0.0);
#pragma omp parallel for schedule(static) if (rows * out >= detail::kParallelMinElements && \
                                              !omp_in_parallel())
    for (int64_t block = 0; block < blocks; ++block) {
      double* sum = block_sums.data() + block * out;
      const int64_t r1 = std::min(rows, (block + 1) * kRowsPerBlock);
      for (int64_t r = block * kRowsPerBlock; r < r1; ++r)
        for (int64_t j = 0; j < out; ++j) sum[j] += dy_data[r * out + j];
    }
    std::vector<double> db(static_cast<size_t>(out), 0.0);
    for (int64_t block = 0; block < blocks; ++block)
      for (int64_t j = 0; j < out; ++j) db[j] += block_sums[block * out + j];
    Tensor g = grads.bias;
    add_to_grad(g, db);
  }
}

}  // namespace

void linear_backward(const Tensor& grad_output, const Tensor& x, const Tensor& weight,
                     const Tensor& bias, const LinearGradients& grads) {
  const char* fn = "linear_backward";
  check_floating(x, fn, "input");
  check_dim(weight, 2, fn, "weight", "[out_features, in_features]");
  QKV_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), fn, ": input must be [..., ",
            weight.size(1), "] for weight ", shape_str(weight.shape()), ", got ",
            shape_str(x.shape()));
  QKV_CHECK_TYPE(weight.dtype() == x.dtype(), fn, ": weight dtype ", dtype_name(weight.dtype()),
                 " differs from input dtype ", dtype_name(x.dtype()));
  const int64_t in = weight.size(1), out = weight.size(0);
  Shape out_shape = x.shape();
  out_shape.back() = out;
  check_grad_output(grad_output, out_shape, x, fn);
  check_grad(grads.input, x, fn, "grads.input");
  check_grad(grads.weight, weight, fn, "grads.weight");
  if (grads.bias.defined()) {
    QKV_CHECK(bias.defined(), fn, ": grads.bias is given but the forward had no bias");
    check_grad(grads.bias, bias, fn, "grads.bias");
  }
  const Tensor dy = grad_output.reshape({-1, out}).contiguous();
  const Tensor x2d = x.reshape({-1, in}).contiguous();
  const Tensor w = weight.contiguous();
  const int64_t rows = x2d.size(0);
  // grads.input seen as [rows, in]: a view when contiguous, else a temporary added at the end.
  LinearGradients flat = grads;
  Tensor input_tmp;
  if (grads.input.defined()) {
    if (grads.input.is_contiguous())
      flat.input = grads.input.view({rows, in});
    else
      flat.input = input_tmp = Tensor::zeros({rows, in}, x.dtype());
  }
  if (x.dtype() == DType::kFloat64)
    linear_backward_typed<double>(dy, x2d, w, rows, in, out, flat);
  else
    linear_backward_typed<float>(dy, x2d, w, rows, in, out, flat);
  if (input_tmp.defined()) {
    Tensor g = grads.input;
    add_to_grad(g, input_tmp);
  }
}

Tensor linear_input_gradient(const Tensor& grad_output, const Tensor& weight) {
  const char* fn = "linear_input_gradient";
  check_floating(weight, fn, "weight");
  check_dim(weight, 2, fn, "weight", "[out_features, in_features]");
  const int64_t in = weight.size(1), out = weight.size(0);
  QKV_CHECK(grad_output.defined() && grad_output.dim() >= 1 && grad_output.size(-1) == out, fn,
            ": grad_output must be [..., ", out, "] for weight ", shape_str(weight.shape()),
            ", got ", grad_output.defined() ? shape_str(grad_output.shape()) : "undefined");
  QKV_CHECK_TYPE(grad_output.dtype() == weight.dtype(), fn, ": grad_output dtype ",
                 dtype_name(grad_output.dtype()), " differs from weight dtype ",
                 dtype_name(weight.dtype()));
  Shape shape = grad_output.shape();
  shape.back() = in;
  if (out == 0) return Tensor::zeros(shape, weight.dtype());  // an empty sum
  Tensor grad_input = Tensor::empty(shape, weight.dtype());
  const Tensor dy = grad_output.reshape({-1, out}).contiguous();
  const Tensor w = weight.contiguous();
  const int64_t rows = dy.size(0);
  // Forward: y = x · Wᵀ  ->  dx [rows, in] = dy [rows, out] · W [out, in]
  if (weight.dtype() == DType::kFloat64)
    gemm_accumulate<double>(false, false, rows, in, out, dy.data<double>(), w.data<double>(),
                            grad_input.data<double>(), 0.0);
  else
    gemm_accumulate<float>(false, false, rows, in, out, dy.data<float>(), w.data<float>(),
                           grad_input.data<float>(), 0.0f);
  return grad_input;
}

void matmul_backward(const Tensor& grad_output, const Tensor& a, const Tensor& b,
                     const MatmulGradients& grads) {
  const char* fn = "matmul_backward";
  check_same_floating(a, b, fn, "a", "b");
  QKV_CHECK(a.dim() >= 2 && b.dim() == a.dim() && a.size(-1) == b.size(-2), fn,
            ": a [..., n, k] and b [..., k, m] do not match, got a ", shape_str(a.shape()),
            " and b ", shape_str(b.shape()));
  for (int64_t d = 0; d + 2 < a.dim(); ++d)
    QKV_CHECK(a.size(d) == b.size(d), fn, ": leading dims differ: a ", shape_str(a.shape()),
              " and b ", shape_str(b.shape()));
  const int64_t n = a.size(-2), k = a.size(-1), m = b.size(-1);
  Shape out_shape = a.shape();
  out_shape.back() = m;
  check_grad_output(grad_output, out_shape, a, fn);
  check_grad(grads.a, a, fn, "grads.a");
  check_grad(grads.b, b, fn, "grads.b");
  const Tensor dc = grad_output.reshape({-1, n, m}).contiguous();
  const Tensor a3 = a.reshape({-1, n, k}).contiguous();
  const Tensor b3 = b.reshape({-1, k, m}).contiguous();
  const int64_t batch = a3.size(0);
  auto run = [&]<class T>(T*) {
    const T* dc_data = dc.data<T>();
    if (grads.a.defined()) {
      // Forward: c = a · b  ->  da [n, k] += dc [n, m] · bᵀ [m, k]
      Tensor g = grads.a;
      accumulate_into<T>(g, [&](T* da) {
        for (int64_t i = 0; i < batch; ++i)
          gemm_accumulate<T>(false, true, n, k, m, dc_data + i * n * m, b3.data<T>() + i * k * m,
                             da + i * n * k);
      });
    }
    if (grads.b.defined()) {
      // Forward: c = a · b  ->  db [k, m] += aᵀ [k, n] · dc [n, m]
      Tensor g = grads.b;
      accumulate_into<T>(g, [&](T* db) {
        for (int64_t i = 0; i < batch; ++i)
          gemm_accumulate<T>(true, false, k, m, n, a3.data<T>() + i * n * k, dc_data + i * n * m,
                             db + i * k * m);
      });
    }
  };
  if (a.dtype() == DType::kFloat64)
    run(static_cast<double*>(nullptr));
  else
    run(static_cast<float*>(nullptr));
}

}  // namespace qkv
