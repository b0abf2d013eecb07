// nn::Workspace — the buffers the blocks' inference paths (forward_into)
// reuse, so that running a stack of layers allocates its activations once,
// not once per layer.
//
//   nn::Workspace ws;
//   for (const nn::TransformerEncoderLayer& layer : layers) layer.forward_into(x, {}, ws);
#pragma once

#include <array>

#include "qkv/attention.h"
#include "qkv/tensor.h"

namespace qkv::nn {

class Workspace {
 public:
  // What each buffer holds in an encoder layer.
  enum Slot {
    kQkv,       // the packed q, k, v projections  [B, L, 3D]
    kMerged,    // attention output, heads side by side [B, L, D]
    kAttended,  // out_proj (+ residual, norm)     [B, L, D]
    kNormed,    // a pre-norm layer's norm output  [B, L, D]
    kHidden,    // the feed-forward hidden layer   [B, L, F]
    kOutput,    // the layer's output              [B, L, D]
    kSlots
  };

  // A contiguous tensor of `shape` and `dtype` on the slot's memory, which is
  // reallocated only when it is too small (or of another dtype).
  Tensor buffer(Slot slot, const Shape& shape, DType dtype);

  SdpaWorkspace& attention() { return attention_; }

 private:
  std::array<Tensor, kSlots> slots_;  // 1-D, at least as large as the last request
  SdpaWorkspace attention_;
};

}  // namespace qkv::nn
