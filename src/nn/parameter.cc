#include "qkv/nn/parameter.h"

#include <utility>

namespace qkv::nn {

std::vector<Parameter> make_parameters(const std::map<std::string, Tensor>& state_dict,
                                       const std::string& prefix) {
  std::vector<Parameter> params;
  params.reserve(state_dict.size());
  for (const auto& [name, value] : state_dict) {
    QKV_CHECK(value.defined(), "make_parameters: \"", name, "\" is undefined");
    QKV_CHECK_TYPE(is_floating(value.dtype()), "make_parameters: \"", name,
                   "\" must be float32 or float64, got ", dtype_name(value.dtype()));
    params.push_back({prefix.empty() ? name : prefix + "." + name, value,
                      Tensor::zeros(value.shape(), value.dtype())});
  }
  return params;
}

void append_parameters(std::vector<Parameter>& out, const std::string& prefix,
                       std::vector<Parameter> child) {
  for (Parameter& p : child) {
    if (!prefix.empty()) p.name = prefix + "." + p.name;
    out.push_back(std::move(p));
  }
}

}  // namespace qkv::nn
