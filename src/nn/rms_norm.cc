// nn::RMSNorm on functional rms_norm.
#include "qkv/nn/rms_norm.h"

#include <cmath>

#include "nn/module_util.h"
#include "qkv/functional.h"

namespace qkv::nn {

RMSNorm::RMSNorm(const RMSNormOptions& options) : ModuleBase("RMSNorm", options) {
  const RMSNormOptions& o = options_;
  detail::check_floating_dtype("RMSNorm", o.dtype);
  QKV_CHECK(!o.normalized_shape.empty(),
            "RMSNorm: normalized_shape must have at least one dimension (e.g. {d_model})");
  for (int64_t n : o.normalized_shape)
    QKV_CHECK(n > 0, "RMSNorm: normalized_shape must have positive sizes, got ",
              shape_str(o.normalized_shape));
  if (options_.eps)
    QKV_CHECK(*options_.eps >= 0.0 && std::isfinite(*options_.eps),
              "RMSNorm: eps must be finite and >= 0, got ", *options_.eps);
  if (options_.elementwise_affine)
    weight_ = Tensor::ones(options_.normalized_shape, options_.dtype);
}

Tensor RMSNorm::forward(const Tensor& x, RMSNormRecord* record) const {
  QKV_CHECK(x.defined(), "RMSNorm: input is undefined");
  QKV_CHECK_TYPE(x.dtype() == options_.dtype, "RMSNorm: input must have the module's dtype ",
                 dtype_name(options_.dtype), ", got ", dtype_name(x.dtype()));
  if (record) record->input = x;
  return rms_norm(x, options_.normalized_shape, weight_, options_.eps);
}

void RMSNorm::forward_into(Tensor& out, const Tensor& x) const {
  rms_norm_into(out, x, options_.normalized_shape, weight_, options_.eps);
}

void RMSNorm::list_members(MemberList& m) { m.parameter("weight", weight_); }

}  // namespace qkv::nn
