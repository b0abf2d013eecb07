// The cross-entropy loss of classification and language modelling (tutorial
// §7: training), with torch.nn.functional.cross_entropy's semantics for
// class-index targets, and its backward.
//
//   Tensor loss = cross_entropy(logits, targets);          // logits: [N, C] -> []
//   Tensor grad = Tensor::zeros(logits.shape(), logits.dtype());
//   cross_entropy_backward(Tensor::ones({}, logits.dtype()), logits, targets, {}, grad);
//
// Per row i with target t and ε = label_smoothing:
//   loss_i = (1 − ε) · (−log softmax(x_i)[t]) + ε/C · Σ_c (−log softmax(x_i)[c])
// Rows whose target is ignore_index contribute 0 and are not counted: the
// mean divides by the number of rows that are not ignored (NaN when every row
// is ignored, as torch). Computed in float64, rounded once to the logits' dtype.
#pragma once

#include <cstdint>
#include <span>

#include "qkv/tensor.h"

namespace qkv {

// How per-row losses are combined, as torch's `reduction`.
enum class Reduction { kNone, kMean, kSum };

struct CrossEntropyOptions {
  // Rows with this target are skipped (torch's default −100).
  int64_t ignore_index = -100;
  // ε in [0, 1]: the target distribution is (1 − ε) one-hot + ε uniform.
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::kMean;
};

// targets: N class ids, each in [0, C) or ignore_index (qkv tensors hold no integers).
// logits: [N, C]  ->  [] (kMean, kSum) or [N] (kNone, 0 for ignored rows)
Tensor cross_entropy(const Tensor& logits, std::span<const int64_t> targets,
                     const CrossEntropyOptions& options = {});

// Adds ∂loss/∂logits to grad_logits, given grad_output = ∂L/∂(cross_entropy's result):
//   grad_logits[i, c] += g_i · (softmax(x_i)[c] − (1 − ε)·[c = t_i] − ε/C)
// with g_i = grad_output / (rows not ignored) for kMean, grad_output for kSum,
// grad_output[i] for kNone; ignored rows get nothing.
// grad_output: [] or [N] (like the result)  logits: [N, C]  grad_logits: like logits
void cross_entropy_backward(const Tensor& grad_output, const Tensor& logits,
                            std::span<const int64_t> targets, const CrossEntropyOptions& options,
                            Tensor grad_logits);

}  // namespace qkv
