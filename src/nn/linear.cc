// nn::Linear on qkv::linear (BLAS).
#include "qkv/nn/linear.h"

#include "nn/module_util.h"
#include "qkv/linear.h"

namespace qkv::nn {

Linear::Linear(const LinearOptions& options, Generator* gen) : ModuleBase("Linear", options) {
  const LinearOptions& o = options_;
  QKV_CHECK_TYPE(is_floating(o.dtype), "Linear: dtype must be float32 or float64, got ",
                 dtype_name(o.dtype));
  QKV_CHECK(o.in_features >= 0 && o.out_features >= 0,
            "Linear: in_features and out_features must be >= 0, got in_features=", o.in_features,
            " and out_features=", o.out_features);
  Generator& g = gen ? *gen : default_generator();
  weight_ = detail::uniform_fan_in({o.out_features, o.in_features}, o.in_features, g, o.dtype);
  if (o.bias) bias_ = detail::uniform_fan_in({o.out_features}, o.in_features, g, o.dtype);
}

Tensor Linear::forward(const Tensor& x, LinearRecord* record) const {
  QKV_CHECK(x.defined(), "Linear: input is undefined");
  QKV_CHECK_TYPE(x.dtype() == options_.dtype, "Linear: input must have the module's dtype ",
                 dtype_name(options_.dtype), ", got ", dtype_name(x.dtype()));
  QKV_CHECK(x.dim() >= 1 && x.size(-1) == options_.in_features,
            "Linear: input must be [..., in_features=", options_.in_features, "], got shape ",
            shape_str(x.shape()));
  if (record) {
    check_float32_precision("Linear::forward with a record");
    record->input = x;
  }
  note_input_range({"weight"}, x);
  if (!low_precision_weight_.empty()) return linear(x, low_precision_weight_, bias_);
  return linear(x, weight_, bias_);
}

void Linear::forward_into(Tensor& out, const Tensor& x) const {
  note_input_range({"weight"}, x);
  if (!low_precision_weight_.empty()) return linear_into(out, x, low_precision_weight_, bias_);
  linear_into(out, x, weight_, bias_);
}

void Linear::update_precision() {
  low_precision_weight_ =
      precision() == Precision::kFloat32
          ? LowPrecisionWeight()
          : detail::low_precision_weight(weight_, precision(), type_name(), input_range("weight"));
}

void Linear::list_members(MemberList& m) {
  m.parameter("weight", weight_);
  m.parameter("bias", bias_);
}

}  // namespace qkv::nn
