// How many numbers a task model trains: what `qkv train` prints next to each model.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/nn/parameter.h"

namespace qkv::train {

inline int64_t count_parameters(const std::vector<nn::Parameter>& parameters) {
  int64_t n = 0;
  for (const nn::Parameter& p : parameters) n += p.value.numel();
  return n;
}

}  // namespace qkv::train
