// Elementwise and normalisation ops that the Transformer modules are built
// from (tutorial §8.1: residual connections, LayerNorm, the feed-forward
// network), with torch.nn.functional's semantics.
//
// All ops take float32 or float64 tensors of any strides and return a new
// contiguous tensor of the same dtype (dropout in eval mode returns its input).
// float32 inputs are reduced (means, variances) in float64 and rounded once.
//
//   Tensor y = layer_norm(x, {D}, gamma, beta);   // x: [B, L, D]
//   Tensor h = gelu(linear(y, w1, b1));            // exact erf GELU
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "qkv/generator.h"
#include "qkv/tensor.h"

namespace qkv {

// --- Normalisation -------------------------------------------------------------

// torch.nn.functional.layer_norm: (x - mean) / sqrt(var + eps) * weight + bias,
// mean and (biased) variance over the trailing dims `normalized_shape`.
// x: [..., *normalized_shape]  weight, bias: normalized_shape or undefined  ->  like x
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

// torch.nn.functional.rms_norm: x / sqrt(mean(x²) + eps) * weight over the
// trailing dims. eps defaults to the machine epsilon of x's dtype
// (torch.finfo(x.dtype).eps: 1.19e-07 for float32, 2.22e-16 for float64).
// x: [..., *normalized_shape]  weight: normalized_shape or undefined  ->  like x
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                std::optional<double> eps = std::nullopt);

// --- Activations ---------------------------------------------------------------

// max(x, 0).
// x: [...]  ->  [...]
Tensor relu(const Tensor& x);

// How gelu computes Φ(x): exactly with erf (torch's default "none") or with tanh.
enum class GeluApproximation { kNone, kTanh };

// x · Φ(x) = 0.5 x (1 + erf(x / √2)); kTanh: 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))).
// x: [...]  ->  [...]
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::kNone);

// x · sigmoid(x) (a.k.a. swish), the gate of SwiGLU.
// x: [...]  ->  [...]
Tensor silu(const Tensor& x);

// The activations of a feed-forward network: torch's Transformer layers take
// "relu" and "gelu" (exact); BERT-family models also use gelu's tanh
// approximation and silu.
enum class Activation { kRelu, kGelu, kGeluTanh, kSilu };

// "relu" -> kRelu, "gelu" -> kGelu (torch's names); anything else is an Error
// naming the value.
Activation activation_from_string(const std::string& name);
// "relu", "gelu", "gelu_tanh", "silu".
const char* activation_name(Activation activation);

// relu(x), gelu(x) (exact or tanh), or silu(x).
// x: [...]  ->  [...]
Tensor activate(const Tensor& x, Activation activation);

// --- Elementwise arithmetic ----------------------------------------------------

// a + b with NumPy/torch broadcasting; both must have the same floating dtype.
// a: [...]  b: broadcastable to a's shape (or the other way)  ->  broadcast shape
Tensor add(const Tensor& a, const Tensor& b);

// a * b (elementwise) with broadcasting.
// a: [...]  b: [...]  ->  broadcast shape
Tensor mul(const Tensor& a, const Tensor& b);

// x * factor.
// x: [...]  ->  [...]
Tensor scale(const Tensor& x, double factor);

// --- Reductions ----------------------------------------------------------------

// torch.sum(x): the sum of all elements, a 0-d tensor (0 when x is empty).
// x: [...]  ->  []
Tensor sum(const Tensor& x);
// torch.sum(x, dim, keepdim): the sum over dimension `dim` (negative counts
// from the end); keepdim keeps it with size 1.
// x: [..., N, ...]  ->  [..., ...] (keepdim: [..., 1, ...])
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
// torch.mean: sum / count, the division done before rounding (NaN when the
// count is 0, as in torch).
// x: [...]  ->  []
Tensor mean(const Tensor& x);
// x: [..., N, ...]  ->  [..., ...] (keepdim: [..., 1, ...])
Tensor mean(const Tensor& x, int64_t dim, bool keepdim = false);

// --- Dropout -------------------------------------------------------------------

// torch.nn.functional.dropout: in training mode each element is zeroed with
// probability p and the kept ones are scaled by 1 / (1 - p); p = 1 gives
// zeros. When !training or p == 0 the input itself is returned (no copy).
// Draws one uniform number per element, in row-major order, from `gen`
// (default_generator() when null).
// x: [...]  ->  [...]
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);

// --- Embedding lookup ----------------------------------------------------------

// torch.nn.functional.embedding: row weight[id] for every id. qkv tensors
// hold no integers, so the ids come as a vector with the shape they form.
// ids: shape (row-major, each in [0, N))  weight: [N, D]  ->  [*shape, D]
Tensor embedding(const std::vector<int64_t>& ids, const Shape& shape, const Tensor& weight);

// --- Into a preallocated output --------------------------------------------------
//
// The same ops writing into `out`, which must already have the result's shape
// and dtype and be contiguous, as must the inputs. They allocate nothing, so a
// decoding step built from them runs without touching the heap. `out` may be
// an input itself (in place): every output element depends only on inputs of
// its own row, read before the row is written. No broadcasting.

// x: [..., *normalized_shape]  weight, bias: normalized_shape or undefined  out: like x
void layer_norm_into(Tensor& out, const Tensor& x, const Shape& normalized_shape,
                     const Tensor& weight = {}, const Tensor& bias = {}, double eps = 1e-5);

// out = layer_norm(x + residual) for models computing in bfloat16 or int8:
// float32 only, the sum rounded to float32 (as add, then layer_norm), the
// statistics in float32 (layer_norm_into's are float64), within ~1e-6 of the
// row's scale. Post-norm Transformer blocks add and normalise in one pass.
// x, residual (or undefined): [..., *normalized_shape]  out: like x
void add_layer_norm_into(Tensor& out, const Tensor& x, const Tensor& residual,
                         const Shape& normalized_shape, const Tensor& weight = {},
                         const Tensor& bias = {}, double eps = 1e-5);

// x: [..., *normalized_shape]  weight: normalized_shape or undefined  out: like x
void rms_norm_into(Tensor& out, const Tensor& x, const Shape& normalized_shape,
                   const Tensor& weight = {}, std::optional<double> eps = std::nullopt);

// x: [...]  out: like x
void gelu_into(Tensor& out, const Tensor& x,
               GeluApproximation approximate = GeluApproximation::kNone);
// x: [...]  out: like x
void silu_into(Tensor& out, const Tensor& x);
// relu or exact gelu.
// x: [...]  out: like x
void activate_into(Tensor& out, const Tensor& x, Activation activation);

// a + b and a * b of equal shapes.
// a: [...]  b: like a  out: like a
void add_into(Tensor& out, const Tensor& a, const Tensor& b);
// a: [...]  b: like a  out: like a
void mul_into(Tensor& out, const Tensor& a, const Tensor& b);

// Rows of `weight` for each id.
// ids: n ids  weight: [N, D]  out: [..., D] with n rows in all
void embedding_into(Tensor& out, std::span<const int64_t> ids, const Tensor& weight);

}  // namespace qkv
