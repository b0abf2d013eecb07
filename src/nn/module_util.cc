#include "nn/module_util.h"

#include <cmath>

#include "qkv/functional.h"
#include "qkv/gradients.h"

namespace qkv::nn::detail {

namespace {
// "a", "b", "c" (quoted), at most a handful then "... (N in all)".
std::string quoted_list(const std::vector<std::string>& names) {
  constexpr size_t kShown = 8;  // enough to recognise a wrong prefix
  std::string out;
  for (size_t i = 0; i < names.size() && i < kShown; ++i)
    out += (i ? ", \"" : "\"") + names[i] + "\"";
  if (names.size() > kShown) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}
}  // namespace

void check_quantized_weight(const QuantizedWeight& weight, int64_t rows, int64_t cols, DType dtype,
                            const char* function, const char* what) {
  QKV_CHECK(!weight.empty() && weight.out_features() == rows && weight.in_features() == cols,
            function, ": expected a ", what, " of shape [", rows, ", ", cols, "], got ",
            weight.empty()
                ? std::string("an empty one")
                : qkv::detail::concat("[", weight.out_features(), ", ", weight.in_features(), "]"));
  QKV_CHECK_TYPE(dtype == DType::kFloat32, function, ": quantized ", what,
                 "s need a float32 module, this one is ", dtype_name(dtype));
}

void check_floating_dtype(const char* module, DType dtype) {
  QKV_CHECK_TYPE(is_floating(dtype), module, ": dtype must be float32 or float64, got ",
                 dtype_name(dtype));
}

void check_dense_weight(const Tensor& weight, int64_t rows, int64_t cols, DType dtype,
                        const char* function, const char* what) {
  QKV_CHECK(
      weight.defined() && weight.dim() == 2 && weight.size(0) == rows && weight.size(1) == cols,
      function, ": expected a ", what, " of shape [", rows, ", ", cols, "], got ",
      weight.defined() ? shape_str(weight.shape()) : std::string("an undefined tensor"));
  QKV_CHECK_TYPE(weight.dtype() == dtype, function, ": expected dtype ", dtype_name(dtype),
                 ", got ", dtype_name(weight.dtype()));
}

void check_has_weight(bool has_weight, const char* module, int64_t rows, int64_t cols,
                      const char* what) {
  QKV_CHECK(has_weight, module, " [", rows, ", ", cols, "]: no ", what,
            " (built under nn::SkipWeightInit; give one with set_weight or set_quantized_weight)");
}

void load_strict(const char* module, const StateDict& own,
                 const std::map<std::string, Tensor>& state) {
  std::vector<std::string> missing, unexpected;
  for (const auto& [name, t] : own)
    if (!state.count(name)) missing.push_back(name);
  for (const auto& [name, t] : state)
    if (!own.count(name)) unexpected.push_back(name);
  QKV_CHECK(
      missing.empty() && unexpected.empty(), module, "::load_state_dict: ",
      (missing.empty() ? "" : "missing key(s) in state_dict: " + quoted_list(missing)),
      (missing.empty() || unexpected.empty() ? "" : "; "),
      (unexpected.empty() ? "" : "unexpected key(s) in state_dict: " + quoted_list(unexpected)));
  for (const auto& [name, t] : own) {
    const Tensor& src = state.at(name);
    QKV_CHECK(src.defined(), module, "::load_state_dict: \"", name, "\" is undefined");
    QKV_CHECK_TYPE(is_floating(src.dtype()), module, "::load_state_dict: \"", name,
                   "\" must be floating, got ", dtype_name(src.dtype()));
    QKV_CHECK(src.shape() == t.shape(), module, "::load_state_dict: size mismatch for \"", name,
              "\": expected shape ", shape_str(t.shape()), ", got ", shape_str(src.shape()));
  }
  for (const auto& [name, t] : own) {
    Tensor dst = t;
    dst.copy_from(state.at(name));
  }
}

Tensor uniform_fan_in(const Shape& shape, int64_t fan_in, Generator& gen, DType dtype) {
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  return Tensor::rand(shape, gen, -bound, bound, dtype);
}

Tensor xavier_uniform(const Shape& shape, Generator& gen, DType dtype) {
  const double bound = std::sqrt(6.0 / static_cast<double>(shape[0] + shape[1]));
  return Tensor::rand(shape, gen, -bound, bound, dtype);
}

Tensor add_grads(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return add(a, b);
}

Tensor recorded_dropout(const Tensor& x, double p, bool training, Generator* gen,
                        Tensor* keep_mask) {
  DropoutResult d = dropout_forward(x, p, training, gen);
  *keep_mask = d.keep_mask;
  return d.output;
}

Tensor dropout_grad(const Tensor& grad_output, const Tensor& keep_mask, double p) {
  // No mask: the forward dropped nothing (p = 0 or eval mode), so this is the identity.
  if (!keep_mask.defined()) return grad_output;
  Tensor grad = Tensor::zeros(grad_output.shape(), grad_output.dtype());
  dropout_backward(grad_output, keep_mask, p, grad);
  return grad;
}

Tensor split_heads(const Tensor& x, int64_t heads, int64_t E) {
  return x.reshape({x.size(0), x.size(1), heads, E}).transpose(1, 2).contiguous();
}

Tensor merge_heads(const Tensor& x) {
  return x.transpose(1, 2).contiguous().view({x.size(0), x.size(2), x.size(1) * x.size(3)});
}

LowPrecisionWeight low_precision_weight(const Tensor& weight, Precision precision,
                                        const char* module, const Tensor& input_range) {
  QKV_CHECK_TYPE(weight.dtype() == DType::kFloat32, module, ": precision ",
                 precision_name(precision), " needs a float32 module, got ",
                 dtype_name(weight.dtype()));
  if (precision == Precision::kInt8 && input_range.defined())
    return LowPrecisionWeight(weight, precision, smoothing_factors(input_range, weight));
  return LowPrecisionWeight(weight, precision);
}

}  // namespace qkv::nn::detail
