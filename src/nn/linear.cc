// nn::Linear on qkv::linear (BLAS).
#include "qkv/nn/linear.h"

#include <array>

#include "nn/module_util.h"
#include "qkv/functional.h"
#include "qkv/linear.h"
#include "qkv/nn/skip_weight_init.h"

namespace qkv::nn {

Linear::Linear(const LinearOptions& options, Generator* gen) : ModuleBase("Linear", options) {
  const LinearOptions& o = options_;
  detail::check_floating_dtype("Linear", o.dtype);
  QKV_CHECK(o.in_features >= 0 && o.out_features >= 0,
            "Linear: in_features and out_features must be >= 0, got in_features=", o.in_features,
            " and out_features=", o.out_features);
  if (SkipWeightInit::active()) {
    if (o.bias) bias_ = Tensor::zeros({o.out_features}, o.dtype);
    return;
  }
  Generator& g = gen ? *gen : default_generator();
  weight_ = detail::uniform_fan_in({o.out_features, o.in_features}, o.in_features, g, o.dtype);
  if (o.bias) bias_ = detail::uniform_fan_in({o.out_features}, o.in_features, g, o.dtype);
}

void Linear::set_weight(Tensor weight) {
  const LinearOptions& o = options_;
  detail::check_dense_weight(weight, o.out_features, o.in_features, o.dtype, "Linear::set_weight",
                             "weight");
  weight_ = std::move(weight);
  quantized_weight_ = QuantizedWeight();
  update_precision();
}

void Linear::set_quantized_weight(QuantizedWeight weight) {
  const LinearOptions& o = options_;
  detail::check_quantized_weight(weight, o.out_features, o.in_features, o.dtype,
                                 "Linear::set_quantized_weight", "weight");
  check_float32_precision("Linear::set_quantized_weight");
  quantized_weight_ = std::move(weight);
  weight_ = Tensor();
  low_precision_weight_ = LowPrecisionWeight();
}

void Linear::check_weight() const {
  detail::check_has_weight(weight_.defined() || !quantized_weight_.empty(), "Linear",
                           options_.out_features, options_.in_features, "weight");
}

Tensor Linear::forward(const Tensor& x, LinearRecord* record) const {
  QKV_CHECK(x.defined(), "Linear: input is undefined");
  QKV_CHECK_TYPE(x.dtype() == options_.dtype, "Linear: input must have the module's dtype ",
                 dtype_name(options_.dtype), ", got ", dtype_name(x.dtype()));
  QKV_CHECK(x.dim() >= 1 && x.size(-1) == options_.in_features,
            "Linear: input must be [..., in_features=", options_.in_features, "], got shape ",
            shape_str(x.shape()));
  check_weight();
  record_input(x, record, "Linear::forward with a record");
  note_input_range({"weight"}, x);
  if (!quantized_weight_.empty()) return linear(x, quantized_weight_, bias_);
  if (!low_precision_weight_.empty()) return linear(x, low_precision_weight_, bias_);
  return linear(x, weight_, bias_);
}

void Linear::record_input(const Tensor& x, LinearRecord* record, const char* fn) const {
  if (!record) return;
  check_float32_precision(fn);
  QKV_CHECK(quantized_weight_.empty(), fn, ": the weight is quantized (inference only)");
  record->input = x;
}

void Linear::forward_into(Tensor& out, const Tensor& x, LinearRecord* record) const {
  check_weight();
  record_input(x, record, "Linear::forward_into with a record");
  note_input_range({"weight"}, x);
  if (!quantized_weight_.empty()) return linear_into(out, x, quantized_weight_, bias_);
  if (!low_precision_weight_.empty()) return linear_into(out, x, low_precision_weight_, bias_);
  linear_into(out, x, weight_, bias_);
}

void Linear::forward_into(Tensor& out, const Tensor& x, Activation activation) const {
  if (low_precision_weight_.empty()) {
    forward_into(out, x);
    activate_into(out, out, activation);
    return;
  }
  check_weight();
  note_input_range({"weight"}, x);
  linear_into(out, x, low_precision_weight_, bias_, activation);
}

void Linear::forward_into_each(const Tensor& x, std::span<const Into> layers) {
  std::array<QuantizedLinearInto, kMaxLinearIntoEach> products;
  bool quantized = layers.size() <= products.size();
  for (size_t i = 0; quantized && i < layers.size(); ++i) {
    const Linear& layer = layers[i].layer;
    quantized = !layer.quantized_weight_.empty();
    products[i] = {&layers[i].out, &layer.quantized_weight_, &layer.bias_};
  }
  if (!quantized) {
    for (const Into& item : layers) item.layer.forward_into(item.out, x);
    return;
  }
  for (const Into& item : layers) item.layer.note_input_range({"weight"}, x);
  linear_into_each(x, std::span(products.data(), layers.size()));
}

void Linear::update_precision() {
  QKV_CHECK(quantized_weight_.empty() || precision() == Precision::kFloat32,
            "Linear::set_precision: the weight is quantized (",
            quant_format_name(quantized_weight_.format()), "); it has no other precision");
  low_precision_weight_ =
      !weight_.defined() || precision() == Precision::kFloat32
          ? LowPrecisionWeight()
          : detail::low_precision_weight(weight_, precision(), type_name(), input_range("weight"));
}

void Linear::list_members(MemberList& m) {
  m.parameter("weight", weight_);
  m.parameter("bias", bias_);
}

}  // namespace qkv::nn
