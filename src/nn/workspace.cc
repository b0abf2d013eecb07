#include "qkv/nn/workspace.h"

namespace qkv::nn {

Tensor Workspace::buffer(Slot slot, const Shape& shape, DType dtype) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  Tensor& memory = slots_[slot];
  if (!memory.defined() || memory.dtype() != dtype || memory.numel() < n)
    memory = Tensor::empty({n}, dtype);
  return memory.slice(0, 0, n).view(shape);
}

}  // namespace qkv::nn
