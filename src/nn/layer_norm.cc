// nn::LayerNorm on functional layer_norm.
#include "qkv/nn/layer_norm.h"

#include <algorithm>
#include <cmath>

#include "qkv/functional.h"

namespace qkv::nn {

namespace {
// The constructor's checks.
void check_norm_options(const char* module, const Shape& normalized_shape, DType dtype) {
  QKV_CHECK_TYPE(is_floating(dtype), module, ": dtype must be float32 or float64, got ",
                 dtype_name(dtype));
  QKV_CHECK(!normalized_shape.empty(), module,
            ": normalized_shape must have at least one dimension (e.g. {d_model})");
  for (int64_t n : normalized_shape)
    QKV_CHECK(n > 0, module, ": normalized_shape must have positive sizes, got ",
              shape_str(normalized_shape));
}

void check_input(const char* module, const Tensor& x, DType dtype) {
  QKV_CHECK(x.defined(), module, ": input is undefined");
  QKV_CHECK_TYPE(x.dtype() == dtype, module, ": input must have the module's dtype ",
                 dtype_name(dtype), ", got ", dtype_name(x.dtype()));
}
}  // namespace

LayerNorm::LayerNorm(const LayerNormOptions& options) : ModuleBase("LayerNorm", options) {
  check_norm_options("LayerNorm", options_.normalized_shape, options_.dtype);
  QKV_CHECK(options_.eps >= 0.0 && std::isfinite(options_.eps),
            "LayerNorm: eps must be finite and >= 0, got ", options_.eps);
  if (options_.elementwise_affine) {
    weight_ = Tensor::ones(options_.normalized_shape, options_.dtype);
    if (options_.bias) bias_ = Tensor::zeros(options_.normalized_shape, options_.dtype);
  }
}

Tensor LayerNorm::forward(const Tensor& x, LayerNormRecord* record) const {
  check_input("LayerNorm", x, options_.dtype);
  if (record) record->input = x;
  return layer_norm(x, options_.normalized_shape, weight_, bias_, options_.eps);
}

bool LayerNorm::float32_statistics(const Tensor& x) const {
  return precision() != Precision::kFloat32 && x.dtype() == DType::kFloat32;
}

void LayerNorm::forward_into(Tensor& out, const Tensor& x) const {
  if (float32_statistics(x))
    return add_layer_norm_into(out, x, Tensor(), options_.normalized_shape, weight_, bias_,
                               options_.eps);
  layer_norm_into(out, x, options_.normalized_shape, weight_, bias_, options_.eps);
}

void LayerNorm::norm_in_place(Tensor& x, const Tensor& residual) const {
  if (float32_statistics(x))
    return add_layer_norm_into(x, x, residual, options_.normalized_shape, weight_, bias_,
                               options_.eps);
  // Not tuned: any block of a few rows makes the ops' per-call checks negligible.
  constexpr int64_t kBlock = 32;
  const int64_t width = x.size(-1), rows = x.numel() / width;
  const Tensor all_x = x.view({rows, width});
  const Tensor all_r = residual.defined() ? residual.view({rows, width}) : Tensor();
  const int64_t blocks = (rows + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock, end = std::min(rows, begin + kBlock);
    Tensor xb = all_x.slice(0, begin, end);
    if (all_r.defined()) add_into(xb, xb, all_r.slice(0, begin, end));
    forward_into(xb, xb);
  }
}

void LayerNorm::list_members(MemberList& m) {
  m.parameter("weight", weight_);
  m.parameter("bias", bias_);
}

}  // namespace qkv::nn
