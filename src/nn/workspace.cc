#include "qkv/nn/workspace.h"

namespace qkv::nn {

Tensor Workspace::buffer(Slot slot, const Shape& shape, DType dtype) {
  const int64_t n = shape_numel(shape);
  Tensor& memory = slots_[slot];
  if (!memory.defined() || memory.dtype() != dtype || memory.numel() < n)
    memory = Tensor::empty({n}, dtype);
  return memory.slice(0, 0, n).view(shape);
}

}  // namespace qkv::nn
