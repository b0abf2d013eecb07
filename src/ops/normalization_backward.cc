// Backward of layer_norm and rms_norm. The row statistics are recomputed from
// x in float64 exactly as the forward computes them (src/ops/normalization.cc),
// so nothing but the inputs has to be kept from the forward.
#include <cmath>
#include <limits>

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

// The gradient buffers of one call, in float64, added to the caller's at the end.
struct Accumulators {
  std::vector<double> dx, dw, db;
};

void flush(const NormGradients& grads, const Accumulators& acc) {
  Tensor g;
  if (grads.input.defined()) add_to_grad(g = grads.input, acc.dx);
  if (grads.weight.defined()) add_to_grad(g = grads.weight, acc.dw);
  if (grads.bias.defined()) add_to_grad(g = grads.bias, acc.db);
}

}  // namespace

void layer_norm_backward(const Tensor& grad_output, const Tensor& x, const Shape& normalized_shape,
                         const Tensor& weight, const Tensor& bias, double eps,
                         const NormGradients& grads) {
  const char* fn = "layer_norm_backward";
  const int64_t rows = check_norm(grad_output, x, normalized_shape, weight, bias, grads, fn);
  QKV_CHECK(eps >= 0.0 && std::isfinite(eps), fn, ": eps must be finite and >= 0, got ", eps);
  const int64_t n = shape_numel(normalized_shape);
  const std::vector<double> xs = x.to_vector(), dys = grad_output.to_vector();
  const std::vector<double> w = weight.defined() ? weight.to_vector() : std::vector<double>();
  Accumulators acc;
  acc.dx.assign(xs.size(), 0.0);
  acc.dw.assign(n, 0.0);
  acc.db.assign(n, 0.0);
  std::vector<double> xhat(n), dxhat(n);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = xs.data() + r * n;
    const double* dy = dys.data() + r * n;
    double mean = 0.0;
    for (int64_t i = 0; i < n; ++i) mean += xr[i];
    mean /= static_cast<double>(n);
    double var = 0.0;
    for (int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<double>(n);
    const double rstd = 1.0 / std::sqrt(var + eps);
    // Forward: v = (xr[i] - mean) * rstd; v *= w[i]; v += b[i];
    double mean_dxhat = 0.0, mean_dxhat_xhat = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      xhat[i] = (xr[i] - mean) * rstd;
      dxhat[i] = w.empty() ? dy[i] : dy[i] * w[i];
      acc.dw[i] += dy[i] * xhat[i];
      acc.db[i] += dy[i];
      mean_dxhat += dxhat[i];
      mean_dxhat_xhat += dxhat[i] * xhat[i];
    }
    mean_dxhat /= static_cast<double>(n);
    mean_dxhat_xhat /= static_cast<double>(n);
    // mean and rstd depend on every x of the row:
    // dx = rstd · (dxhat − mean(dxhat) − xhat · mean(dxhat ∘ xhat))
    double* dx = acc.dx.data() + r * n;
    for (int64_t i = 0; i < n; ++i)
      dx[i] = rstd * (dxhat[i] - mean_dxhat - xhat[i] * mean_dxhat_xhat);
  }
  flush(grads, acc);
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
  const std::vector<double> xs = x.to_vector(), dys = grad_output.to_vector();
  const std::vector<double> w = weight.defined() ? weight.to_vector() : std::vector<double>();
  Accumulators acc;
  acc.dx.assign(xs.size(), 0.0);
  acc.dw.assign(n, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = xs.data() + r * n;
    const double* dy = dys.data() + r * n;
    double mean_square = 0.0;
    for (int64_t i = 0; i < n; ++i) mean_square += xr[i] * xr[i];
    mean_square /= static_cast<double>(n);
    const double rrms = 1.0 / std::sqrt(mean_square + e);
    // Forward: double v = xr[i] * rrms; v *= w[i];
    double dot = 0.0;  // Σ dxhat_i x_i
    for (int64_t i = 0; i < n; ++i) {
      const double dxhat = w.empty() ? dy[i] : dy[i] * w[i];
      acc.dw[i] += dy[i] * xr[i] * rrms;
      dot += dxhat * xr[i];
    }
    // rrms = (mean(x²) + eps)^(−1/2)  ->  ∂rrms/∂x_i = −rrms³ · x_i / n
    double* dx = acc.dx.data() + r * n;
    const double c = rrms * rrms * rrms * dot / static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) {
      const double dxhat = w.empty() ? dy[i] : dy[i] * w[i];
      dx[i] = rrms * dxhat - c * xr[i];
    }
  }
  flush(grads, acc);
}

}  // namespace qkv
