// Helpers shared by the nn modules: state_dict plumbing and torch's default
// initialisations. Internal (not installed).
#pragma once

#include <map>
#include <string>

#include "qkv/generator.h"
#include "qkv/tensor.h"

namespace qkv::nn::detail {

using StateDict = std::map<std::string, Tensor>;

// Adds `child`'s entries to `out` as "prefix.name".
void add_prefixed(StateDict& out, const std::string& prefix, const StateDict& child);

// torch's strict load_state_dict: `own` holds the module's parameters as
// shared views (its state_dict()); every name must be present in `state`
// with the same shape and a floating dtype, and no other names may appear.
// Everything is checked before anything is copied, so a failed load changes
// nothing. Errors start with "<module>::load_state_dict: ".
void load_strict(const char* module, const StateDict& own, const StateDict& state);

// nn.Linear's reset_parameters: kaiming_uniform_(a=√5) for the weight and the
// bias both reduce to U(-1/√fan_in, 1/√fan_in).
Tensor uniform_fan_in(const Shape& shape, int64_t fan_in, Generator& gen, DType dtype);

// xavier_uniform_ of a 2-D [out, in] weight: U(-a, a), a = √(6 / (in + out)).
Tensor xavier_uniform(const Shape& shape, Generator& gen, DType dtype);

}  // namespace qkv::nn::detail
