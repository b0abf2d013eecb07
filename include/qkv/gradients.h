// Backward passes of the functional ops (qkv/functional.h, qkv/linear.h,
// qkv/softmax.h and the score functions of qkv/attention.h): given
// grad_output = ∂loss/∂output, they add ∂loss/∂input to gradient buffers.
// The backward of scaled_dot_product_attention is in qkv/attention.h, the
// cross-entropy loss and its backward in qkv/loss.h.
//
//   Tensor h = linear(x, w, b);                       // forward
//   Tensor y = gelu(h);
//   ...
//   Tensor grad_h = Tensor::zeros(h.shape(), h.dtype());
//   gelu_backward(grad_y, h, GeluApproximation::kNone, grad_h);
//   linear_backward(grad_h, x, w, b, {.input = grad_x, .weight = w_grad, .bias = b_grad});
//
// Conventions:
// - `<op>_backward(grad_output, <the forward's arguments, same order>, <gradients>)`.
// - Gradients ACCUMULATE: each gradient argument is a view of the caller's
//   buffer, shaped and typed like the matching input, and the backward adds
//   its contribution (a parameter used twice collects both). Zero the buffers
//   before a fresh backward (Optimizer::zero_grad does it for parameters).
//   Gradient views may have any strides; pass an undefined Tensor() for a
//   gradient that is not wanted: it is not computed.
// - What a backward needs beyond the inputs (layer_norm's mean and 1/std,
//   softmax's output) is recomputed from the inputs rather than saved, so a
//   training step keeps only each op's inputs; these ops are cheap next to
//   the matrix products, whose backward recomputes nothing.
// - float32 and float64. As in the forwards, elementwise and normalisation
//   ops compute in float64 and round once per gradient element; linear and
//   matmul run BLAS in the input's dtype.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "qkv/functional.h"
#include "qkv/generator.h"
#include "qkv/tensor.h"

namespace qkv {

// --- Linear maps ------------------------------------------------------------------

// Where linear_backward adds its results (undefined = not wanted).
struct LinearGradients {
  Tensor input;   // like x: [..., in]
  Tensor weight;  // [out, in]
  Tensor bias;    // [out]
};

// Forward: y = x Wᵀ + b. grad_input += grad_output W, grad_weight += grad_outputᵀ x (summed over
// all leading dims), grad_bias += Σ grad_output.
// grad_output: [..., out]  x: [..., in]  weight: [out, in]  bias: [out] or undefined
void linear_backward(const Tensor& grad_output, const Tensor& x, const Tensor& weight,
                     const Tensor& bias, const LinearGradients& grads);

// The input gradient alone, as a new tensor: grad_output · W, which is what
// linear_backward adds to grads.input, without a zeroed buffer to add it to.
// grad_output: [..., out]  weight: [out, in]  ->  [..., in]
Tensor linear_input_gradient(const Tensor& grad_output, const Tensor& weight);

struct MatmulGradients {
  Tensor a;  // [..., n, k]
  Tensor b;  // [..., k, m]
};

// Forward: c = a b. grad_a += grad_c bᵀ, grad_b += aᵀ grad_c.
// grad_output: [..., n, m]  a: [..., n, k]  b: [..., k, m]
void matmul_backward(const Tensor& grad_output, const Tensor& a, const Tensor& b,
                     const MatmulGradients& grads);

// --- Normalisation -----------------------------------------------------------------

struct NormGradients {
  Tensor input;   // like x
  Tensor weight;  // normalized_shape
  Tensor bias;    // normalized_shape (layer_norm only)
};

// The row mean and 1/√(var + eps) are recomputed from x in float64.
// grad_output: like x  x: [..., *normalized_shape]  weight, bias: normalized_shape or undefined
void layer_norm_backward(const Tensor& grad_output, const Tensor& x, const Shape& normalized_shape,
                         const Tensor& weight, const Tensor& bias, double eps,
                         const NormGradients& grads);

// eps as in rms_norm (nullopt: the machine epsilon of x's dtype); grads.bias must be undefined.
// grad_output: like x  x: [..., *normalized_shape]  weight: normalized_shape or undefined
void rms_norm_backward(const Tensor& grad_output, const Tensor& x, const Shape& normalized_shape,
                       const Tensor& weight, std::optional<double> eps, const NormGradients& grads);

// --- Activations ---------------------------------------------------------------------

// grad_input += grad_output where x > 0 (0 at x = 0, as torch).
// grad_output: like x  x: [...]  grad_input: like x
void relu_backward(const Tensor& grad_output, const Tensor& x, Tensor grad_input);

// grad_output: like x  x: [...]  grad_input: like x
void gelu_backward(const Tensor& grad_output, const Tensor& x, GeluApproximation approximate,
                   Tensor grad_input);

// grad_output: like x  x: [...]  grad_input: like x
void silu_backward(const Tensor& grad_output, const Tensor& x, Tensor grad_input);

// The backward of activate(x, activation).
// grad_output: like x  x: [...]  grad_input: like x
void activate_backward(const Tensor& grad_output, const Tensor& x, Activation activation,
                       Tensor grad_input);

// --- Softmax (last dim) --------------------------------------------------------------

// y = softmax(x) is recomputed; grad_input += y ∘ (grad_output − Σ_j grad_output_j y_j).
// grad_output: like x  x: [..., C]  grad_input: like x
void softmax_backward(const Tensor& grad_output, const Tensor& x, Tensor grad_input);

// grad_input += grad_output − softmax(x) · Σ_j grad_output_j.
// grad_output: like x  x: [..., C]  grad_input: like x
void log_softmax_backward(const Tensor& grad_output, const Tensor& x, Tensor grad_input);

// --- Elementwise arithmetic ----------------------------------------------------------

struct BinaryGradients {
  Tensor a;  // like a
  Tensor b;  // like b
};

// Forward: add(a, b) with broadcasting; each gradient is grad_output summed over the dims
// its input was broadcast along.
// grad_output: broadcast shape  a, b: as given to add
void add_backward(const Tensor& grad_output, const Tensor& a, const Tensor& b,
                  const BinaryGradients& grads);

// Forward: mul(a, b). grad_a += Σ_broadcast grad_output · b, grad_b += Σ_broadcast grad_output · a.
// grad_output: broadcast shape  a, b: as given to mul
void mul_backward(const Tensor& grad_output, const Tensor& a, const Tensor& b,
                  const BinaryGradients& grads);

// grad_input += grad_output · factor.
// grad_output: like x  x: [...]  grad_input: like x
void scale_backward(const Tensor& grad_output, const Tensor& x, double factor, Tensor grad_input);

// --- Embedding lookup ---------------------------------------------------------------

// Scatter-add: grad_weight[ids[i]] += grad_output row i, skipping ids equal to
// padding_idx (torch's padding_idx: that row never learns; negative counts from the end).
// grad_output: [*shape, D]  ids: shape (row-major)  weight: [N, D]  grad_weight: [N, D]
void embedding_backward(const Tensor& grad_output, const std::vector<int64_t>& ids,
                        const Shape& shape, const Tensor& weight, Tensor grad_weight,
                        std::optional<int64_t> padding_idx = std::nullopt);

// --- Dropout ------------------------------------------------------------------------

struct DropoutResult {
  Tensor output;     // like x
  Tensor keep_mask;  // bool, like x; undefined when nothing was dropped (eval or p = 0)
};

// dropout() that also returns which elements it kept. It draws exactly as
// dropout() (one uniform per element, row-major), so with equal generator
// states both give the same output.
// x: [...]  ->  output like x, keep_mask like x
DropoutResult dropout_forward(const Tensor& x, double p, bool training = true,
                              Generator* gen = nullptr);

// grad_input += grad_output · keep_mask / (1 − p); an undefined keep_mask
// (eval mode or p = 0) passes grad_output through unchanged, p = 1 adds nothing.
// grad_output: like x  keep_mask: bool like x, or undefined  grad_input: like x
void dropout_backward(const Tensor& grad_output, const Tensor& keep_mask, double p,
                      Tensor grad_input);

// --- Attention score functions (tutorial §2.2, ScoreFunction in qkv/attention.h) -----
//
// ScoreFunction keeps its weights private, so these take them explicitly, in
// the order of ScoreFunction's factories. grad_scores: [..., L, S].

struct ScoreGradients {
  Tensor q;    // [..., L, E]
  Tensor k;    // [..., S, Ek]
  Tensor w_q;  // additive: [A, E]
  Tensor w_k;  // additive: [A, Ek]
  Tensor v;    // additive: [A]
  Tensor w;    // bilinear: [E, Ek]
};

// ScoreFunction::dot() (scaled = false) or scaled_dot() (scaled = true): q kᵀ (· 1/√E).
// grad_scores: [..., L, S]  q: [..., L, E]  k: [..., S, E]
void dot_scores_backward(const Tensor& grad_scores, const Tensor& q, const Tensor& k, bool scaled,
                         const ScoreGradients& grads);

// ScoreFunction::additive(w_q, w_k, v): s_ij = Σ_a v_a tanh((W_q q_i)_a + (W_k k_j)_a).
// grad_scores: [..., L, S]  q: [..., L, E]  k: [..., S, Ek]  w_q: [A, E]  w_k: [A, Ek]  v: [A]
void additive_scores_backward(const Tensor& grad_scores, const Tensor& q, const Tensor& k,
                              const Tensor& w_q, const Tensor& w_k, const Tensor& v,
                              const ScoreGradients& grads);

// ScoreFunction::bilinear(w): s_ij = q_iᵀ W k_j.
// grad_scores: [..., L, S]  q: [..., L, E]  k: [..., S, Ek]  w: [E, Ek]
void bilinear_scores_backward(const Tensor& grad_scores, const Tensor& q, const Tensor& k,
                              const Tensor& w, const ScoreGradients& grads);

}  // namespace qkv
