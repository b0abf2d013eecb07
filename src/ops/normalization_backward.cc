// Backward of layer_norm and rms_norm. The row statistics are recomputed from
// x in float64 exactly as the forward computes them (kernels/row_statistics.h),
// so nothing but the inputs has to be kept from the forward. Rows are spread
// over the threads; every sum is float64, each result rounded once. One row
// is kernels/simd/norm_rows.h: float32 rows run the active instruction set's
// copy (kernels/row_kernels.h).
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/row_kernels.h"
#include "kernels/simd/norm_rows.h"
#include "ops/backward_util.h"
#include "ops/checks.h"
#include "ops/normalization_checks.h"
#include "qkv/gradients.h"

namespace qkv {

namespace {

// Rows of `x` normalised over its trailing `normalized_shape`, after the checks.
int64_t check_norm(const Tensor& grad_output, const Tensor& x, const Shape& normalized_shape,
                   const Tensor& weight, const Tensor& bias, const NormGradients& grads,
                   const char* fn) {
  const Rows rows = check_normalized(x, normalized_shape, weight, bias, fn);
  check_grad_output(grad_output, x.shape(), x, fn);
  check_grad(grads.input, x, fn, "grads.input");
  QKV_CHECK(!grads.weight.defined() || weight.defined(), fn,
            ": grads.weight is given but the forward had no weight");
  QKV_CHECK(!grads.bias.defined() || bias.defined(), fn,
            ": grads.bias is given but the forward had no bias");
  if (weight.defined()) check_grad(grads.weight, weight, fn, "grads.weight");
  if (bias.defined()) check_grad(grads.bias, bias, fn, "grads.bias");
  return rows.count;
}

// What one backward call reads and writes, as contiguous row-major buffers of
// T: x and grad_output, the weight (null without one), and grads.input (null
// when not wanted; a zeroed temporary when the caller's is strided).
template <class T>
struct NormBuffers {
  Tensor x, dy, w, dx;
  const T* xs() const { return x.data<T>(); }
  const T* dys() const { return dy.data<T>(); }
  const T* ws() const { return w.defined() ? w.data<T>() : nullptr; }
  T* dxs() { return dx.defined() ? dx.data<T>() : nullptr; }
};

template <class T>
NormBuffers<T> buffers(const Tensor& grad_output, const Tensor& x, const Tensor& weight,
                       const NormGradients& grads) {
  NormBuffers<T> b{x.contiguous(), grad_output.contiguous(),
                   weight.defined() ? weight.contiguous() : Tensor(), Tensor()};
  if (grads.input.defined())
    b.dx = grads.input.is_contiguous() ? grads.input : Tensor::zeros(x.shape(), x.dtype());
  return b;
}

// Adds the per-thread float64 sums of the weight and bias gradients, and the
// temporary input gradient, into the caller's buffers (one rounding each).
template <class T>
void flush(const NormGradients& grads, NormBuffers<T>& b, const std::vector<double>& dw,
           const std::vector<double>& db) {
  Tensor g;
  if (grads.input.defined() && !grads.input.is_contiguous()) add_to_grad(g = grads.input, b.dx);
  if (grads.weight.defined()) add_to_grad(g = grads.weight, dw);
  if (grads.bias.defined()) add_to_grad(g = grads.bias, db);
}

// Runs row(r, dw, db) for every row, spread over the threads, each thread
// summing the weight/bias gradients of its rows into its own float64
// vectors; returns their total.
template <class Row>
std::pair<std::vector<double>, std::vector<double>> for_rows(int64_t rows, int64_t n, Row row) {
  std::vector<double> dw(n, 0.0), db(n, 0.0);
#pragma omp parallel if (rows * n >= (1 << 15))
  {
    std::vector<double> my_dw(n, 0.0), my_db(n, 0.0);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) row(r, my_dw.data(), my_db.data());
#pragma omp critical
    for (int64_t i = 0; i < n; ++i) {
      dw[i] += my_dw[i];
      db[i] += my_db[i];
    }
  }
  return {std::move(dw), std::move(db)};
}

template <class T>
void layer_norm_backward_typed(NormBuffers<T>& b, int64_t rows, int64_t n, double eps,
                               std::vector<double>& dw_out, std::vector<double>& db_out) {
  const T *xs = b.xs(), *dys = b.dys(), *w = b.ws();
  T* dxs = b.dxs();
  const kernels::RowKernels& isa = kernels::active_row_kernels();
  auto [dw, db] = for_rows(rows, n, [&](int64_t r, double* dw, double* db) {
    T* dx = dxs == nullptr ? nullptr : dxs + r * n;
    if constexpr (std::is_same_v<T, float>)
      isa.layer_norm_backward(xs + r * n, dys + r * n, w, dx, n, eps, dw, db);
    else
      kernels::simd::layer_norm_backward_row(xs + r * n, dys + r * n, w, dx, n, eps, dw, db);
  });
  dw_out = std::move(dw);
  db_out = std::move(db);
}

template <class T>
void rms_norm_backward_typed(NormBuffers<T>& b, int64_t rows, int64_t n, double eps,
                             std::vector<double>& dw_out) {
  const T *xs = b.xs(), *dys = b.dys(), *w = b.ws();
  T* dxs = b.dxs();
  const kernels::RowKernels& isa = kernels::active_row_kernels();
  auto [dw, db] = for_rows(rows, n, [&](int64_t r, double* dw, double*) {
    T* dx = dxs == nullptr ? nullptr : dxs + r * n;
    if constexpr (std::is_same_v<T, float>)
      isa.rms_norm_backward(xs + r * n, dys + r * n, w, dx, n, eps, dw);
    else
      kernels::simd::rms_norm_backward_row(xs + r * n, dys + r * n, w, dx, n, eps, dw);
  });
  dw_out = std::move(dw);
}

}  // namespace

void layer_norm_backward(const Tensor& grad_output, const Tensor& x, const Shape& normalized_shape,
                         const Tensor& weight, const Tensor& bias, double eps,
                         const NormGradients& grads) {
  const char* fn = "layer_norm_backward";
  const int64_t rows = check_norm(grad_output, x, normalized_shape, weight, bias, grads, fn);
  QKV_CHECK(eps >= 0.0 && std::isfinite(eps), fn, ": eps must be finite and >= 0, got ", eps);
  const int64_t n = shape_numel(normalized_shape);
  std::vector<double> dw, db;
  if (x.dtype() == DType::kFloat64) {
    NormBuffers<double> b = buffers<double>(grad_output, x, weight, grads);
    layer_norm_backward_typed(b, rows, n, eps, dw, db);
    flush(grads, b, dw, db);
  } else {
    NormBuffers<float> b = buffers<float>(grad_output, x, weight, grads);
    layer_norm_backward_typed(b, rows, n, eps, dw, db);
    flush(grads, b, dw, db);
  }
}

void rms_norm_backward(const Tensor& grad_output, const Tensor& x, const Shape& normalized_shape,
                       const Tensor& weight, std::optional<double> eps,
                       const NormGradients& grads) {
  const char* fn = "rms_norm_backward";
  QKV_CHECK(!grads.bias.defined(), fn, ": rms_norm has no bias, but grads.bias is given");
  const int64_t rows = check_norm(grad_output, x, normalized_shape, weight, Tensor(), grads, fn);
  // As the forward: eps=None means torch.finfo(input.dtype).eps.
  const double e =
      eps.value_or(x.dtype() == DType::kFloat64 ? std::numeric_limits<double>::epsilon()
                                                : std::numeric_limits<float>::epsilon());
  QKV_CHECK(e >= 0.0 && std::isfinite(e), fn, ": eps must be finite and >= 0, got ", e);
  const int64_t n = shape_numel(normalized_shape);
  std::vector<double> dw;
  if (x.dtype() == DType::kFloat64) {
    NormBuffers<double> b = buffers<double>(grad_output, x, weight, grads);
    rms_norm_backward_typed(b, rows, n, e, dw);
    flush(grads, b, dw, {});
  } else {
    NormBuffers<float> b = buffers<float>(grad_output, x, weight, grads);
    rms_norm_backward_typed(b, rows, n, e, dw);
    flush(grads, b, dw, {});
  }
}

}  // namespace qkv
