// layer_norm and rms_norm: per-row statistics over the trailing dims,
// accumulated in float64 for either dtype (kernels/row_statistics.h), then one
// rounding per output. Rows are spread over the threads; float32 rows run
// the active instruction set's loop (kernels/row_kernels.h).
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/row_kernels.h"
#include "kernels/simd/norm_rows.h"
#include "ops/checks.h"
#include "ops/into_checks.h"
#include "ops/normalization_checks.h"
#include "qkv/functional.h"

namespace qkv {

Rows check_normalized(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                      const Tensor& bias, const char* fn) {
  check_floating(x, fn, "input");
  QKV_CHECK(!normalized_shape.empty(), fn, ": normalized_shape must have at least one dimension");
  for (int64_t n : normalized_shape)
    QKV_CHECK(n > 0, fn, ": normalized_shape ", shape_str(normalized_shape),
              " must have positive sizes");
  const int64_t nd = static_cast<int64_t>(normalized_shape.size());
  bool matches = x.dim() >= nd;
  for (int64_t i = 0; matches && i < nd; ++i)
    matches = x.size(x.dim() - nd + i) == normalized_shape[i];
  QKV_CHECK(matches, fn, ": input of shape ", shape_str(x.shape()),
            " must end with normalized_shape ", shape_str(normalized_shape));
  const std::pair<const Tensor*, const char*> params[] = {{&weight, "weight"}, {&bias, "bias"}};
  for (const auto& [p, name] : params) {
    if (!p->defined()) continue;
    QKV_CHECK_TYPE(p->dtype() == x.dtype(), fn, ": ", name, " dtype ", dtype_name(p->dtype()),
                   " differs from input dtype ", dtype_name(x.dtype()));
    QKV_CHECK(p->shape() == normalized_shape, fn, ": ", name, " must have normalized_shape ",
              shape_str(normalized_shape), ", got ", shape_str(p->shape()));
  }
  Rows rows;
  rows.length = shape_numel(normalized_shape);
  rows.count = x.numel() / rows.length;
  return rows;
}

namespace {

// Contiguous data of an optional parameter, or nullptr.
template <class T>
const T* optional_data(const Tensor& contiguous_param) {
  return contiguous_param.defined() ? contiguous_param.data<T>() : nullptr;
}

// Rows are spread over the threads when there are enough of them.
constexpr int64_t kParallelElements = 1 << 15;

template <class T>
void layer_norm_rows(const T* x, const T* w, const T* b, T* y, Rows rows, double eps) {
  const int64_t n = rows.length;
  const kernels::RowKernels& isa = kernels::active_row_kernels();
#pragma omp parallel for schedule(static) if (rows.count * n >= kParallelElements)
  for (int64_t r = 0; r < rows.count; ++r) {
    if constexpr (std::is_same_v<T, float>)
      isa.layer_norm(x + r * n, w, b, y + r * n, n, eps);
    else
      kernels::simd::layer_norm_row(x + r * n, w, b, y + r * n, n, eps);
  }
}

template <class T>
void rms_norm_rows(const T* x, const T* w, T* y, Rows rows, double eps) {
  const int64_t n = rows.length;
  const kernels::RowKernels& isa = kernels::active_row_kernels();
#pragma omp parallel for schedule(static) if (rows.count * n >= kParallelElements)
  for (int64_t r = 0; r < rows.count; ++r) {
    if constexpr (std::is_same_v<T, float>)
      isa.rms_norm(x + r * n, w, y + r * n, n, eps);
    else
      kernels::simd::rms_norm_row(x + r * n, w, y + r * n, n, eps);
  }
}

// The _into variants read parameters in place.
void check_contiguous_params(const Tensor& weight, const Tensor& bias, const char* fn) {
  QKV_CHECK(
      (!weight.defined() || weight.is_contiguous()) && (!bias.defined() || bias.is_contiguous()),
      fn, ": weight and bias must be contiguous");
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  const Tensor xc = x.contiguous();
  const Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  layer_norm_into(y, xc, normalized_shape, w, b, eps);
  return y;
}

void layer_norm_into(Tensor& out, const Tensor& x, const Shape& normalized_shape,
                     const Tensor& weight, const Tensor& bias, double eps) {
  const char* fn = "layer_norm";
  const Rows rows = check_normalized(x, normalized_shape, weight, bias, fn);
  QKV_CHECK(eps >= 0.0 && std::isfinite(eps), fn, ": eps must be finite and >= 0, got ", eps);
  check_into(out, x, fn);
  check_contiguous_params(weight, bias, fn);
  if (x.dtype() == DType::kFloat64)
    layer_norm_rows<double>(x.data<double>(), optional_data<double>(weight),
                            optional_data<double>(bias), out.data<double>(), rows, eps);
  else
    layer_norm_rows<float>(x.data<float>(), optional_data<float>(weight),
                           optional_data<float>(bias), out.data<float>(), rows, eps);
}

void add_layer_norm_into(Tensor& out, const Tensor& x, const Tensor& residual,
                         const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                         double eps) {
  const char* fn = "add_layer_norm";
  const Rows rows = check_normalized(x, normalized_shape, weight, bias, fn);
  QKV_CHECK(eps >= 0.0 && std::isfinite(eps), fn, ": eps must be finite and >= 0, got ", eps);
  check_into(out, x, fn);
  QKV_CHECK_TYPE(x.dtype() == DType::kFloat32, fn, ": input must be float32, got ",
                 dtype_name(x.dtype()));
  if (residual.defined()) check_into(residual, x, fn);  // (same shape, dtype, contiguous)
  check_contiguous_params(weight, bias, fn);
  const float* xs = x.data<float>();
  const float* rs = residual.defined() ? residual.data<float>() : nullptr;
  const float* w = optional_data<float>(weight);
  const float* b = optional_data<float>(bias);
  float* y = out.data<float>();
  const int64_t n = rows.length;
  const kernels::RowKernels& isa = kernels::active_row_kernels();
#pragma omp parallel for schedule(static) if (rows.count * n >= kParallelElements)
  for (int64_t r = 0; r < rows.count; ++r)
    isa.add_layer_norm_f32(xs + r * n, rs ? rs + r * n : nullptr, w, b, y + r * n, n, eps);
}

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                std::optional<double> eps) {
  const Tensor xc = x.contiguous();
  const Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  rms_norm_into(y, xc, normalized_shape, w, eps);
  return y;
}

void rms_norm_into(Tensor& out, const Tensor& x, const Shape& normalized_shape,
                   const Tensor& weight, std::optional<double> eps) {
  const char* fn = "rms_norm";
  const Rows rows = check_normalized(x, normalized_shape, weight, Tensor(), fn);
  // torch: eps=None means torch.finfo(input.dtype).eps.
  const double e =
      eps.value_or(x.dtype() == DType::kFloat64 ? std::numeric_limits<double>::epsilon()
                                                : std::numeric_limits<float>::epsilon());
  QKV_CHECK(e >= 0.0 && std::isfinite(e), fn, ": eps must be finite and >= 0, got ", e);
  check_into(out, x, fn);
  check_contiguous_params(weight, Tensor(), fn);
  if (x.dtype() == DType::kFloat64)
    rms_norm_rows<double>(x.data<double>(), optional_data<double>(weight), out.data<double>(), rows,
                          e);
  else
    rms_norm_rows<float>(x.data<float>(), optional_data<float>(weight), out.data<float>(), rows, e);
}

}  // namespace qkv
