// softmax and log_softmax over the last dimension, as torch.softmax(x, -1)
// and torch.log_softmax(x, -1). Their backward passes are in qkv/gradients.h.
//
// Computed in float64 and rounded once to the input's dtype. A row whose
// entries are all −inf (every position masked) gives softmax 0 (not NaN, as
// everywhere in qkv) and log_softmax −inf.
//
//   Tensor p = softmax(logits);          // logits: [N, C], rows of p sum to 1
#pragma once

#include "qkv/tensor.h"

namespace qkv {

// exp(x_j − max) / Σ_k exp(x_k − max) along the last dim.
// x: [..., C]  ->  [..., C]
Tensor softmax(const Tensor& x);

// x_j − log Σ_k exp(x_k) along the last dim.
// x: [..., C]  ->  [..., C]
Tensor log_softmax(const Tensor& x);

}  // namespace qkv
