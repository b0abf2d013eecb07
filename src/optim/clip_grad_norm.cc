// clip_grad_norm: the global p-norm of all gradients, then one common factor.
#include "qkv/optim/clip_grad_norm.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace qkv::optim {

namespace {

// Σ |g|^p (or max |g| for p = inf) over one tensor, in float64.
template <class T>
double norm_part(const Tensor& g, double p) {
  const T* base = g.data<T>();
  double acc = 0.0;
  const bool inf = std::isinf(p);
  for_each_offset(g.shape(), g.strides(), [&](int64_t, int64_t off) {
    const double a = std::abs(static_cast<double>(base[off]));
    if (inf)
      acc = std::isnan(a) || std::isnan(acc) ? NAN : std::max(acc, a);
    else
      acc += p == 2.0 ? a * a : std::pow(a, p);
  });
  return acc;
}

template <class T>
void scale_in_place(Tensor& g, double factor) {
  // grad.mul_(clip_coef_clamped): the factor in the gradient's dtype, as torch.
  const T f = static_cast<T>(factor);
  T* base = g.data<T>();
  for_each_offset(g.shape(), g.strides(), [&](int64_t, int64_t off) { base[off] *= f; });
}

}  // namespace

double clip_grad_norm(std::span<const Tensor> grads, double max_norm, double norm_type,
                      bool error_if_nonfinite) {
  const char* fn = "clip_grad_norm";
  QKV_CHECK(norm_type > 0.0, fn, ": norm_type must be > 0 or inf, got ", norm_type);
  QKV_CHECK(!std::isnan(max_norm), fn, ": max_norm is NaN");
  const bool inf = std::isinf(norm_type);
  double acc = 0.0;
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    QKV_CHECK(g.defined(), fn, ": gradient ", i, " is undefined");
    QKV_CHECK_TYPE(is_floating(g.dtype()), fn, ": gradient ", i,
                   " must be float32 or float64, got ", dtype_name(g.dtype()));
    const double part = g.dtype() == DType::kFloat64 ? norm_part<double>(g, norm_type)
                                                     : norm_part<float>(g, norm_type);
    acc = inf ? (std::isnan(part) || std::isnan(acc) ? NAN : std::max(acc, part)) : acc + part;
  }
  const double total = inf                ? acc
                       : norm_type == 2.0 ? std::sqrt(acc)
                                          : std::pow(acc, 1.0 / norm_type);
  QKV_CHECK(!error_if_nonfinite || std::isfinite(total), fn, ": the total norm of order ",
            norm_type, " of the gradients is non-finite (", total,
            "), so it cannot be clipped (error_if_nonfinite is set)");
  // clip_coef = max_norm / (total_norm + 1e-6); clip_coef_clamped = clamp(clip_coef, max=1.0)
  double factor = max_norm / (total + 1e-6);
  if (!(factor >= 1.0) && !std::isnan(factor)) {
    for (const Tensor& g : grads) {
      Tensor view = g;
      if (g.dtype() == DType::kFloat64)
        scale_in_place<double>(view, factor);
      else
        scale_in_place<float>(view, factor);
    }
  } else if (std::isnan(factor)) {
    // torch multiplies by the NaN factor too: every gradient becomes NaN.
    for (const Tensor& g : grads) {
      Tensor view = g;
      view.fill(NAN);
    }
  }
  return total;
}

double clip_grad_norm(std::span<const nn::Parameter> params, double max_norm, double norm_type,
                      bool error_if_nonfinite) {
  std::vector<Tensor> grads;
  grads.reserve(params.size());
  for (const nn::Parameter& p : params) grads.push_back(p.grad);
  return clip_grad_norm(grads, max_norm, norm_type, error_if_nonfinite);
}

}  // namespace qkv::optim
