#include "qkv/optim/optimizer.h"

#include <cmath>
#include <set>

#include "optim/optimizer_util.h"

namespace qkv::optim {

Optimizer::Optimizer(std::vector<nn::Parameter> params, double lr, const char* kind)
    : params_(std::move(params)), lr_(lr), kind_(kind) {
  QKV_CHECK(std::isfinite(lr) && lr >= 0.0, kind, ": invalid learning rate ", lr);
  std::set<std::string> names;
  for (const nn::Parameter& p : params_) {
    QKV_CHECK(names.insert(p.name).second, kind, ": parameter name \"", p.name,
              "\" appears twice (state_dict entries are keyed by name)");
    QKV_CHECK(p.value.defined() && p.grad.defined(), kind, ": parameter \"", p.name,
              "\" needs both a value and a grad tensor");
    QKV_CHECK_TYPE(is_floating(p.value.dtype()), kind, ": parameter \"", p.name,
                   "\" must be float32 or float64, got ", dtype_name(p.value.dtype()));
    QKV_CHECK_TYPE(p.grad.dtype() == p.value.dtype(), kind, ": grad of \"", p.name, "\" has dtype ",
                   dtype_name(p.grad.dtype()), " but the parameter is ",
                   dtype_name(p.value.dtype()));
    QKV_CHECK(p.grad.shape() == p.value.shape(), kind, ": grad of \"", p.name, "\" has shape ",
              shape_str(p.grad.shape()), " but the parameter is ", shape_str(p.value.shape()));
    // The updates walk value and grad as flat arrays.
    QKV_CHECK(p.value.is_contiguous() && p.grad.is_contiguous(), kind, ": parameter \"", p.name,
              "\" and its grad must be contiguous");
  }
}

void Optimizer::zero_grad() {
  for (nn::Parameter& p : params_) p.grad.fill(0.0);
}

void Optimizer::set_lr(double lr) {
  QKV_CHECK(std::isfinite(lr) && lr >= 0.0, kind_, ": invalid learning rate ", lr);
  lr_ = lr;
}

namespace detail {

const Tensor* find_entry(const StateDict& state, const nn::Parameter& param, const char* buffer,
                         std::set<std::string>& used) {
  const std::string key = param.name + "." + buffer;
  const auto it = state.find(key);
  if (it == state.end()) return nullptr;
  used.insert(key);
  return &it->second;
}

Tensor load_buffer(const Tensor& src, const nn::Parameter& param, const char* buffer,
                   const char* kind) {
  QKV_CHECK(src.defined(), kind, "::load_state_dict: \"", param.name, ".", buffer,
            "\" is undefined");
  QKV_CHECK_TYPE(is_floating(src.dtype()), kind, "::load_state_dict: \"", param.name, ".", buffer,
                 "\" must be floating, got ", dtype_name(src.dtype()));
  QKV_CHECK(src.shape() == param.value.shape(), kind, "::load_state_dict: size mismatch for \"",
            param.name, ".", buffer, "\": expected shape ", shape_str(param.value.shape()),
            ", got ", shape_str(src.shape()));
  Tensor copy = Tensor::empty(param.value.shape(), param.value.dtype());
  copy.copy_from(src);
  return copy;
}

void check_no_unexpected(const StateDict& state, const std::set<std::string>& used,
                         const char* kind) {
  std::string unexpected;
  int shown = 0;
  for (const auto& [name, t] : state) {
    if (used.count(name)) continue;
    if (shown++ < 8) unexpected += (unexpected.empty() ? "\"" : ", \"") + name + "\"";
  }
  QKV_CHECK(shown == 0, kind, "::load_state_dict: unexpected key(s) in state_dict: ", unexpected,
            shown > 8 ? " ... (" + std::to_string(shown) + " in all)" : "",
            " (names are \"<parameter>.<buffer>\" of this optimizer's parameters)");
}

}  // namespace detail

}  // namespace qkv::optim
