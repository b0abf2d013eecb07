// Functional attention: the tutorial's §2 and §3.3 as library calls.
//
//   simple_attention           §2.4  one query against S keys, dot-product scores
//   ScoreFunction + attention  §2.2  dot, scaled dot, additive, bilinear scores
//   scaled_dot_product_attention  §3.3, §5.3  torch.nn.functional's semantics
//
// Dimension letters: B batch, H query heads, Hkv key/value heads, L query
// length, S key length, E query/key head dim, Ev value head dim. "..." is any
// number of leading batch dims.
//
// A query row whose keys are all masked gives output 0 and weights 0 (never
// NaN) everywhere in qkv. torch's SDPA also gives 0; torch's
// nn.MultiheadAttention with need_weights=True gives NaN there.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qkv/causal_mask.h"
#include "qkv/generator.h"
#include "qkv/precision.h"
#include "qkv/tensor.h"

namespace qkv {

// Output of an attention call. `weights` is defined only when asked for.
struct AttentionResult {
  Tensor output;   // [..., L, Ev]
  Tensor weights;  // [..., L, S], rows sum to 1 (0 for fully masked rows)
};

// §2.4: softmax(keys · query) weighted sum of values, computed in float64.
// query: [E]  keys: [S, E]  values: [S, Ev]  ->  output [Ev], weights [S]
AttentionResult simple_attention(const Tensor& query, const Tensor& keys, const Tensor& values);

// §2.2: how a query and a key are compared.
class ScoreFunction {
 public:
  enum class Kind { kDot, kScaledDot, kAdditive, kBilinear };

  // q·k
  static ScoreFunction dot();
  // q·k / sqrt(E)
  static ScoreFunction scaled_dot();
  // v^T tanh(W_q q + W_k k)
  // w_q: [A, E]  w_k: [A, Ek]  v: [A]   (A: hidden size of the additive scorer)
  static ScoreFunction additive(Tensor w_q, Tensor w_k, Tensor v);
  // q^T W k
  // w: [E, Ek]
  static ScoreFunction bilinear(Tensor w);

  Kind kind() const { return kind_; }

  // Scores of every query against every key.
  // q: [..., L, E]  k: [..., S, Ek]  ->  [..., L, S]
  Tensor scores(const Tensor& q, const Tensor& k) const;

 private:
  explicit ScoreFunction(Kind kind) : kind_(kind) {}
  Kind kind_;
  Tensor w_q_, w_k_, v_, w_;
};

// General attention with any score: weights = softmax(score(q, k) + mask),
// output = weights · v. `mask` (optional) broadcasts to [..., L, S]: bool
// (True = take part) or floating (added to the scores).
// q: [..., L, E]  k: [..., S, Ek]  v: [..., S, Ev]  ->  output [..., L, Ev], weights [..., L, S]
AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v,
                          const ScoreFunction& score, const Tensor& mask = {});

// Which implementation computes SDPA. kAuto takes the fused kernel for
// float32 and the float64 reference otherwise (as torch picks a backend).
enum class SdpaBackend { kAuto, kReference, kFused };

// CausalMask (kNone, kTopLeft, kBottomRight): see qkv/causal_mask.h.

// Where SDPA's results lie in memory (SdpaOptions::layout).
//   kContiguous  the output contiguous [..., H, L, Ev], the backward's
//                gradients contiguous.
//   kLikeInputs  the output's dims in the query's memory order, each gradient
//                in its input's, as torch.empty_like lays them out: the
//                input's own strides when it is dense, else its dims' stride
//                order, packed. Hugging Face passes q = x.view(B, L, H, E)
//                .transpose(1, 2): the output is then the heads of a
//                [B, L, H, Ev] buffer (as torch's CPU flash kernel returns
//                it), so that transposing it back costs no copy, and dQ, dK,
//                dV are the heads of [B, L, H, E] buffers. The kernels write
//                through the strides. A result falls back to contiguous where
//                its input's last dim is not its innermost, or (the output)
//                where the query's leading dims broadcast.
enum class SdpaLayout { kContiguous, kLikeInputs };

struct SdpaOptions {
  // Bool (True = take part) or floating (added, same dtype as the query),
  // broadcastable to [..., H, L, S]. Undefined = no mask.
  Tensor attn_mask;
  // Probability of dropping a weight; applied whenever > 0 (as torch's SDPA).
  double dropout_p = 0.0;
  CausalMask causal = CausalMask::kNone;
  // Defaults to 1/sqrt(E).
  std::optional<double> scale;
  // Query head h uses key/value head h / (H / Hkv).
  bool enable_gqa = false;
  // Return the attention weights [..., H, L, S] (after dropout, as multiplied with v).
  bool need_weights = false;
  // Return the bool keep-mask [..., H, L, S] that dropout used.
  bool return_dropout_mask = false;
  // Use this keep-mask (bool, broadcastable to [..., H, L, S]) instead of sampling one.
  Tensor dropout_mask;
  // Whether the backward returns a floating attn_mask's gradient. A constant
  // mask (padding, a fixed bias) needs none: false spares the backward
  // writing [..., H, L, S] score gradients and summing them.
  bool attn_mask_requires_grad = true;
  // Source of dropout randomness; nullptr means default_generator().
  Generator* generator = nullptr;
  // Force an implementation (kFused needs float32).
  SdpaBackend backend = SdpaBackend::kAuto;

  // Variants beyond torch's SDPA (all off by default):
  // Sliding window: query i sees keys j with i' − window_left ≤ j ≤ i' + window_right,
  // where i' = i + S − L when causal is kBottomRight, else i' = i. −1 = unbounded.
  int64_t window_left = -1;
  int64_t window_right = -1;
  // ALiBi: adds −slope[h]·|i' − j| to the scores of query head h ([H] values).
  std::vector<double> alibi_slopes;
  // Logit soft-capping: scores become cap·tanh(scores / cap) before biases and masks.
  double softcap = 0.0;
  // The arithmetic of the fused kernel's two products (S = q kᵀ and O = P v)
  // for float32 inputs:
  //   kFloat32   float32 products (the default, exact as before).
  //   kBFloat16  q, k, v and the softmax weights P rounded to bfloat16 for
  //              the two products (vdpbf16ps where the CPU has AVX512_BF16);
  //              softmax, row max/sum, log-sum-exp and the output sums in
  //              float32; the output float32. Problems of at most four
  //              queries (decoding, GQA heads stacked) keep float32 products:
  //              they are bound by reading K and V, not by arithmetic.
  //   kInt8      attention as kBFloat16 (int8 is for linear layers).
  // bfloat16 inputs always take bfloat16 products. The reference backend
  // and float64 inputs ignore it. The backward follows it (q, k, v, dO, P
  // and dS rounded to bfloat16 for its five products, float32 sums and
  // gradients) except with dropout, a float mask whose gradient is wanted
  // (attn_mask_requires_grad) or at most four queries, which keep float32
  // products.
  Precision precision = Precision::kFloat32;
  // The output's layout, and the backward's gradients' (see SdpaLayout). The
  // values are the same (bit for bit) in either layout.
  SdpaLayout layout = SdpaLayout::kContiguous;
};

struct SdpaResult {
  Tensor output;              // [..., H, L, Ev], laid out as options.layout says
  Tensor weights;             // [..., H, L, S] when need_weights
  Tensor dropout_mask;        // [..., H, L, S] bool when return_dropout_mask and dropout_p > 0
  Tensor logsumexp;           // [..., H, L] float64 log Σ_j exp(score_ij) (−inf: row fully masked)
  uint64_t dropout_seed = 0;  // the seed dropout drew (the backward replays it)
  // Which kernel ran: "reference", or "fused-" + ISA ("fused-avx512", "fused-avx2", …).
  std::string kernel;
};

// torch.nn.functional.scaled_dot_product_attention in torch 2.13:
// softmax(q kᵀ · scale + mask) v, with dropout on the weights.
// q: [..., H, L, E]  k: [..., Hkv, S, E]  v: [..., Hkv, S, Ev]  ->  [..., H, L, Ev]
// float32 or float64 (all three the same), or all three bfloat16 (bfloat16
// products, float32 softmax and sums; output and weights rounded back to
// bfloat16). Hkv == H unless enable_gqa.
SdpaResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const SdpaOptions& options = {});

// Memory that scaled_dot_product_attention_into reuses from call to call.
class SdpaWorkspace {
 public:
  SdpaWorkspace();
  ~SdpaWorkspace();
  SdpaWorkspace(SdpaWorkspace&&) noexcept;
  SdpaWorkspace& operator=(SdpaWorkspace&&) noexcept;
  struct State;

 private:
  friend void scaled_dot_product_attention_into(Tensor&, const Tensor&, const Tensor&,
                                                const Tensor&, const SdpaOptions&, SdpaWorkspace&);
  std::unique_ptr<State> state_;
};

// scaled_dot_product_attention writing into a preallocated `output`
// [..., H, L, Ev]: contiguous, or any view whose rows of Ev are contiguous and
// whose elements are distinct (e.g. the heads of a [B, L, H, Ev] buffer,
// transposed), not overlapping q, k or v. After the first call with a problem
// of this size, later calls allocate nothing (decoding loops). No weights or
// dropout mask.
void scaled_dot_product_attention_into(Tensor& output, const Tensor& q, const Tensor& k,
                                       const Tensor& v, const SdpaOptions& options,
                                       SdpaWorkspace& workspace);

// Laid out as options.layout says (kLikeInputs: each with its input's strides).
struct SdpaGradients {
  Tensor query;      // like q
  Tensor key;        // like k (summed over the query heads of a GQA group and broadcast dims)
  Tensor value;      // like v
  Tensor attn_mask;  // like a floating attn_mask; undefined for bool or no mask, or
                     // when options.attn_mask_requires_grad is false
};

// The backward of scaled_dot_product_attention: gradients of the inputs given
// grad_output = ∂loss/∂output. `forward` is the result of the forward call
// with the same q, k, v and options; its output, log-sum-exp and dropout seed
// are reused, so dropout drops the same weights.
// grad_output: [..., H, L, Ev]  ->  gradients shaped like q, k, v (and attn_mask)
SdpaGradients scaled_dot_product_attention_backward(const Tensor& grad_output, const Tensor& q,
                                                    const Tensor& k, const Tensor& v,
                                                    const SdpaResult& forward,
                                                    const SdpaOptions& options = {});

}  // namespace qkv
