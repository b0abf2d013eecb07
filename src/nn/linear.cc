// nn::Linear on qkv::linear (BLAS).
#include "qkv/nn/linear.h"

#include "nn/module_util.h"
#include "qkv/linear.h"

namespace qkv::nn {

Linear::Linear(const LinearOptions& options, Generator* gen) : options_(options) {
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
  if (record) record->input = x;
  return linear(x, weight_, bias_);
}

std::map<std::string, Tensor> Linear::state_dict() const {
  std::map<std::string, Tensor> state{{"weight", weight_}};
  if (bias_.defined()) state["bias"] = bias_;
  return state;
}

void Linear::load_state_dict(const std::map<std::string, Tensor>& state) {
  detail::load_strict("Linear", state_dict(), state);
}

Linear Linear::clone() const {
  Linear copy = *this;
  copy.weight_ = weight_.clone();
  if (bias_.defined()) copy.bias_ = bias_.clone();
  copy.grads_.clear();
  return copy;
}

}  // namespace qkv::nn
