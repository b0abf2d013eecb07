// State-dict helpers shared by the optimizers. Internal.
#pragma once

#include <map>
#include <set>
#include <string>

#include "qkv/nn/parameter.h"
#include "qkv/tensor.h"

namespace qkv::optim::detail {

using StateDict = std::map<std::string, Tensor>;

// The entry `param.name + "." + buffer` of `state`, or nullptr; records the name in `used`.
const Tensor* find_entry(const StateDict& state, const nn::Parameter& param, const char* buffer,
                         std::set<std::string>& used);

// A fresh copy of `src` in the parameter's dtype; `src` must have the parameter's shape.
Tensor load_buffer(const Tensor& src, const nn::Parameter& param, const char* buffer,
                   const char* kind);

// Throws naming the entries of `state` that are not in `used`.
void check_no_unexpected(const StateDict& state, const std::set<std::string>& used,
                         const char* kind);

}  // namespace qkv::optim::detail
