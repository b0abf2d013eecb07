// nn::MultiheadAttention — torch.nn.MultiheadAttention in C++ (tutorial §4, §5.4).
//
// Same constructor arguments, forward arguments, defaults, mask polarity
// (True = masked out), parameter names and default initialisation as torch,
// so a torch state_dict loads unchanged:
//
//   nn::MultiheadAttention mha({.embed_dim = 8, .num_heads = 2, .batch_first = true});
//   auto [out, weights] = mha.forward(x, x, x);   // [2, 4, 8] and [2, 4, 4]
//
// One difference from torch: query rows whose keys are all masked give output
// 0 and weights 0; torch gives NaN there when need_weights=True.
//
// Training: the caller keeps a record of the forward; backward takes
// ∂loss/∂output, adds the parameter gradients into the module's buffers
// (parameters(), zero_grad()) and returns the gradients of query, key, value:
//   nn::MultiheadAttentionRecord rec;
//   auto [out, w] = mha.forward(x, x, x, {.need_weights = false}, &rec);
//   nn::MultiheadAttentionInputGradients g = mha.backward(grad_out, rec);
//   // self-attention: ∂loss/∂x = g.query + g.key + g.value
// Dropout on the weights is replayed from the recorded seed. Masks get no gradient.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "qkv/attention.h"
#include "qkv/generator.h"
#include "qkv/linear.h"
#include "qkv/nn/module.h"
#include "qkv/nn/workspace.h"
#include "qkv/tensor.h"

namespace qkv::nn {

class KVCache;

struct MultiheadAttentionOptions {
  int64_t embed_dim = 0;
  int64_t num_heads = 1;
  double dropout = 0.0;
  bool bias = true;
  bool add_bias_kv = false;
  bool add_zero_attn = false;
  int64_t kdim = 0;  // 0 means embed_dim
  int64_t vdim = 0;  // 0 means embed_dim
  bool batch_first = false;
  DType dtype = DType::kFloat32;
};

struct MultiheadAttentionForward {
  Tensor key_padding_mask;  // [B, S] or [S]; bool True = ignore, or float added
  bool need_weights = true;
  Tensor attn_mask;  // [L, S] or [B*H, L, S]; bool True = not allowed, or float added
  bool average_attn_weights = true;
  bool is_causal = false;  // a hint: needs attn_mask, as in torch
};

struct MultiheadAttentionOutput {
  Tensor output;   // [L, B, D] ([B, L, D] if batch_first, [L, D] unbatched)
  Tensor weights;  // [B, L, S] averaged or [B, H, L, S]; undefined unless need_weights
};

// What MultiheadAttention::forward saves for its backward.
struct MultiheadAttentionRecord {
  Tensor query, key, value;  // the inputs (held, not copied)
  Tensor q, k, v;            // [B, H, L, E], [B, H, S', E]: S' = S (+1 bias_kv) (+1 zero_attn)
  SdpaOptions sdpa;          // as the attention ran: merged mask, causal, dropout
  SdpaResult attention;      // its output, log-sum-exp and dropout seed
  Tensor merged;             // heads merged in the query's layout: out_proj's input
  bool dropped_all = false;  // dropout p = 1: the attention output was all zeros
};

// Keys and values projected and split into heads once, to be attended to
// again and again (MultiheadAttention::attend): a decoder's memory.
struct MultiheadAttentionKeysValues {
  Tensor k;  // [B, H, S, E]
  Tensor v;  // [B, H, S, E]
};

// Gradients of the three inputs, each shaped like its input.
struct MultiheadAttentionInputGradients {
  Tensor query;
  Tensor key;
  Tensor value;
};

class MultiheadAttention : public ModuleBase<MultiheadAttention, MultiheadAttentionOptions> {
 public:
  // Parameters get torch's default initialisation, drawn from `gen`
  // (default_generator() when null).
  explicit MultiheadAttention(const MultiheadAttentionOptions& options, Generator* gen = nullptr);

  // query: [L, B, D] (batch_first: [B, L, D]; unbatched: [L, D])
  // key:   [S, B, kdim]   value: [S, B, vdim]
  // -> output like query; weights [B, L, S] or [B, H, L, S] (unbatched: no B)
  // With a record, also saves what backward() needs (nullptr: inference).
  MultiheadAttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const MultiheadAttentionForward& args = {},
                                   MultiheadAttentionRecord* record = nullptr);

  // Adds the parameter gradients to the module's buffers and returns those of
  // query, key and value. Only the output has a gradient (not the weights).
  // grad_output: like the output  ->  like query, key, value
  MultiheadAttentionInputGradients backward(const Tensor& grad_output,
                                            const MultiheadAttentionRecord& record);

  // Inference self-attention of batch-first x on the workspace's buffers: one
  // GEMM projects q, k and v side by side, the attention kernel reads them in
  // place, and out_proj writes `out` (which must not be x). Needs the packed
  // in_proj weight and no dropout (eval mode or p = 0); `keep` masks keys.
  // x: [B, L, D]  keep: bool [B, 1, 1, L] (True = take part) or undefined
  // out: [B, L, D] (preallocated, contiguous)
  void self_attention_into(Tensor& out, const Tensor& x, const Tensor& keep, bool causal,
                           Workspace& workspace) const;

  // Incremental decoding (inference, batch-first, as self_attention_into).
  // Self-attention of L new positions after the S - L that layer `layer` of
  // `cache` holds: their keys and values are appended to it first, then
  // query i attends to the keys up to i + S - L (bottom-right causal).
  // x: [B, L, D]  ->  [B, L, D]
  Tensor self_attention_cached(const Tensor& x, KVCache& cache, int64_t layer,
                               Workspace& workspace) const;

  // The keys and values of `key` and `value` in heads, for attend().
  // key: [B, S, kdim]  value: [B, S, vdim]  ->  k, v: [B, H, S, E] each
  MultiheadAttentionKeysValues project_keys_values(const Tensor& key, const Tensor& value) const;

  // query attending to keys and values projected before; `mask` is SDPA's
  // attn_mask (bool True = take part, or float added) or undefined.
  // query: [B, L, D]  keys_values: [B, H, S, E] each  mask: [B, 1, 1, S] or
  // broadcastable to [B, H, L, S]  ->  [B, L, D]
  Tensor attend(const Tensor& query, const MultiheadAttentionKeysValues& keys_values,
                const Tensor& mask, Workspace& workspace) const;

  // Self-attention, where the forward's query, key and value were one tensor
  // x (the Transformer layers): adds the parameter gradients and returns
  // ∂loss/∂x, the sum of backward()'s three. With the packed in_proj weight,
  // the three projections' gradients go back as one product each.
  // grad_output: like x  ->  like x
  Tensor self_attention_backward(const Tensor& grad_output, const MultiheadAttentionRecord& record);

  int64_t head_dim() const { return options_.embed_dim / options_.num_heads; }
  // True when q, k and v share one packed in_proj_weight (kdim == vdim == embed_dim).
  bool packed_in_proj() const { return packed_; }

 private:
  // torch's names and order: in_proj_weight (or q_proj_weight, k_proj_weight,
  // v_proj_weight), in_proj_bias, bias_k, bias_v, out_proj.weight,
  // out_proj.bias (those that exist for the options).
  void list_members(MemberList& m) override;
  void update_precision() override;

  // The query, key or value (which = 0, 1, 2) projection's weight, bias
  // (undefined without bias), and the projection of `x` [..., its in dim].
  Tensor in_proj_weight_part(int64_t which) const;
  Tensor in_proj_bias_part(int64_t which) const;
  Tensor project(const Tensor& x, int64_t which) const;

  // The inference paths' common parts:
  // - the check that this module can run them (naming `fn`) and that x is
  //   batch-first [B, L, D];
  void check_inference(const char* fn, const Tensor& x) const;
  // - x projected by the packed in_proj weight: q, k, v side by side.
  //   x: [B, L, D]  qkv: [B, L, 3D] (preallocated)
  void project_packed_into(Tensor& qkv, const Tensor& x) const;
  // - attention of the heads q over k and v, the heads written side by side
  //   into `merged`, then out_proj into `out`.
  //   q: [B, H, L, E]  k, v: [B, H, S, E]  merged, out: [B, L, D] (preallocated)
  void attend_into(Tensor& out, Tensor& merged, const Tensor& q, const Tensor& k, const Tensor& v,
                   SdpaOptions sdpa, Workspace& workspace) const;

  // backward's first half: out_proj's and bias_k/bias_v's gradients (added to
  // the buffers) and the attention's gradients of the heads q, k, v.
  SdpaGradients head_gradients(const Tensor& grad_output, const MultiheadAttentionRecord& record);

  // The names under which the four projections' input ranges are noted
  // (Module::note_input_range): q, k, v and the output projection.
  static constexpr const char* kProjections[4] = {"q_proj", "k_proj", "v_proj", "out_proj"};

  bool packed_ = true;
  Tensor in_proj_weight_;   // [3D, D] when packed
  Tensor q_proj_weight_;    // [D, D]    when not packed
  Tensor k_proj_weight_;    // [D, kdim] when not packed
  Tensor v_proj_weight_;    // [D, vdim] when not packed
  Tensor in_proj_bias_;     // [3D] when bias
  Tensor out_proj_weight_;  // [D, D]
  Tensor out_proj_bias_;    // [D] when bias
  Tensor bias_k_;           // [1, 1, D] when add_bias_kv
  Tensor bias_v_;           // [1, 1, D] when add_bias_kv
  // In bfloat16 or int8 precision: the q, k, v and out_proj weights converted
  // (empty in float32).
  LowPrecisionWeight low_precision_[4];
  // ... and, when packed, in_proj_weight as one [3D, D] weight: self-attention
  // then projects q, k and v in one product that converts x once (int8: one
  // smoothing for the three, as they read the same x).
  LowPrecisionWeight low_precision_in_proj_;
};

}  // namespace qkv::nn
