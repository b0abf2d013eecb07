// nn::GroupedQueryAttention — the self-attention of decoder-only models
// (LLaMA, Mistral): separate q/k/v projections, RoPE on q and k, and fewer
// key/value heads than query heads (GQA: query head h reads key/value head
// h / (H / Hkv)); Hkv = H is ordinary multi-head attention, Hkv = 1 is
// multi-query attention.
//
//   nn::GroupedQueryAttention attn({.embed_dim = 384, .num_heads = 6, .num_kv_heads = 2});
//   Tensor y = attn.forward(x, {.causal = CausalMask::kTopLeft});   // x: [B, L, 384]
//
// Unlike torch's MultiheadAttention, this module takes masks with SDPA's
// polarity (bool True = take part, or float added) and is batch-first only.
// Its two halves are public so that a cache can sit between them:
//   project(x, offset)  -> q, k, v per head (q and k rotated for positions offset…)
//   attend(q, k, v)     -> attention over any keys, heads merged, o_proj
//
// Training: forward with a record the caller keeps, then backward with
// ∂loss/∂output; it adds the parameter gradients into the module's buffers
// (parameters(), zero_grad()) and returns ∂loss/∂x. The gradients of a
// key/value head sum over the query heads of its group; dropout on the
// weights is replayed from the recorded seed; masks get no gradient.
//   nn::GroupedQueryAttentionRecord rec;
//   Tensor y = attn.forward(x, {.causal = CausalMask::kTopLeft}, &rec);
//   Tensor grad_x = attn.backward(grad_y, rec);
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "qkv/attention.h"
#include "qkv/generator.h"
#include "qkv/nn/kv_cache.h"
#include "qkv/nn/linear.h"
#include "qkv/nn/module.h"
#include "qkv/nn/positional_encoding.h"
#include "qkv/tensor.h"

namespace qkv::nn {

struct GroupedQueryAttentionOptions {
  int64_t embed_dim = 0;     // D
  int64_t num_heads = 1;     // H
  int64_t num_kv_heads = 0;  // Hkv, divides H; 0 means H
  int64_t head_dim = 0;      // E; 0 means D / H
  bool bias = false;         // in q/k/v/o projections
  double dropout = 0.0;      // on the attention weights, in training mode only
  bool rope = true;          // rotate q and k (RoPE); false: no positions here
  double rope_base = 10000.0;
  RopeStyle rope_style = RopeStyle::kHalfSplit;
  std::vector<double> rope_freq_factors;  // RotaryEmbeddingOptions::freq_factors
  DType dtype = DType::kFloat32;
};

struct GroupedQueryAttentionForward {
  // Position of the first of the L rows (RoPE); the number of cached
  // positions when decoding.
  int64_t position_offset = 0;
  // kTopLeft for a full sequence; kBottomRight for new queries after cached keys.
  CausalMask causal = CausalMask::kNone;
  // Bool (True = take part) or float added (e.g. an ALiBi bias [H, L, S]),
  // broadcastable to [B, H, L, S]. Combined with `causal` when both are set.
  Tensor attn_mask;
  // Inference with a KV cache: the new keys and values are appended to its
  // layer `cache_layer` and the queries attend over every cached position
  // (position_offset = the cache's length, causal = kBottomRight).
  KVCache* cache = nullptr;
  int64_t cache_layer = 0;
};

// Where a pass's keys and values go: one cache of batch B, or one cache of
// batch 1 per sequence (sequences of different lengths decoded together), or
// none (whole sequences: training, or inference without a cache).
struct PassCaches {
  KVCache* shared = nullptr;
  std::span<KVCache* const> per_sequence;
  int64_t layer = 0;  // the caches' layer this attention reads and appends to
  bool empty() const { return shared == nullptr && per_sequence.empty(); }
};

// The working tensors of forward_into over up to R rows (B·T <= R),
// preallocated once and reused by every layer; a pass of B·T rows uses the
// first B·T of each.
struct AttentionBuffers {
  AttentionBuffers(const GroupedQueryAttentionOptions& options, int64_t rows);

  Tensor q;      // [R, H·E]
  Tensor k, v;   // [R, Hkv·E]
  Tensor heads;  // [R, H·E]: the attention output, heads side by side
  SdpaWorkspace workspace;
  // One per thread when sequences with caches of their own share the threads.
  std::vector<SdpaWorkspace> sequence_workspaces;
};

// Per-head projections of a batch-first input.
struct ProjectedQkv {
  Tensor q;  // [B, H, L, E]   (rotated)
  Tensor k;  // [B, Hkv, L, E] (rotated)
  Tensor v;  // [B, Hkv, L, E]
};

// What GroupedQueryAttention::forward saves for its backward.
struct GroupedQueryAttentionRecord {
  LinearRecord q_proj, k_proj, v_proj;  // x (held, not copied)
  int64_t position_offset = 0;          // RoPE's first position
  Tensor q, k, v;                       // SDPA's inputs: [B, H, L, E], [B, Hkv, L, E] (rotated)
  SdpaOptions sdpa;                     // as the attention ran: mask, causal, dropout, GQA
  SdpaResult attention;                 // its output, log-sum-exp and dropout seed
  LinearRecord o_proj;                  // the heads merged: [B, L, H·E]
};

class GroupedQueryAttention
    : public ModuleBase<GroupedQueryAttention, GroupedQueryAttentionOptions> {
 public:
  // q_proj, k_proj, v_proj, o_proj initialised as nn.Linear, in that order.
  explicit GroupedQueryAttention(const GroupedQueryAttentionOptions& options,
                                 Generator* gen = nullptr);

  // With a record (training, no cache), also saves what backward() needs.
  // x: [B, L, D]  ->  [B, L, D]
  Tensor forward(const Tensor& x, const GroupedQueryAttentionForward& args = {},
                 GroupedQueryAttentionRecord* record = nullptr);

  // Adds the parameter gradients to the module's buffers, returns ∂loss/∂x.
  // grad_output: [B, L, D]  ->  like record's x
  Tensor backward(const Tensor& grad_output, const GroupedQueryAttentionRecord& record);

  // x: [B, L, D]  ->  q [B, H, L, E], k and v [B, Hkv, L, E]
  ProjectedQkv project(const Tensor& x, int64_t position_offset = 0) const;

  // Self-attention of B sequences of T new tokens each, the decoder's one
  // attention code (prefill, a decoding step, sequences decoded together,
  // training). Row (b, t) sits at position positions[b] + t (positions[0] + t
  // for every b when one position is given). Without caches: causal
  // attention over the T rows. With caches: the rows' keys and values are
  // appended to layer `layer` first, and each query attends over its
  // sequence's cached positions (bottom-right causal). Inference allocates
  // nothing once `buffers` hold B·T rows and the SDPA workspace has grown.
  // With a record (training, no caches): scratch tensors are new and kept,
  // and the record gets what backward() needs.
  // x: [B, T, D] contiguous  ->  out: [B, T, D] (preallocated, may be x;
  // with a record, replaced by a new tensor)
  void forward_into(Tensor& out, const Tensor& x, std::span<const int64_t> positions,
                    const PassCaches& caches, AttentionBuffers& buffers,
                    GroupedQueryAttentionRecord* record = nullptr) const;

  // Attention of the queries over S keys, heads merged, then o_proj.
  // args.position_offset is not used here (positions are already in q and k).
  // q: [B, H, L, E]  k, v: [B, Hkv, S, E]  ->  [B, L, D]
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v,
                const GroupedQueryAttentionForward& args = {});

 private:
  // "q_proj.weight" [H·E, D], "k_proj.weight" [Hkv·E, D], "v_proj.weight"
  // [Hkv·E, D], "o_proj.weight" [D, H·E] (and ".bias" when bias): LLaMA's names.
  void list_members(MemberList& m) override;

  // project(), also keeping the projections' inputs in `record` (when given).
  ProjectedQkv project(const Tensor& x, int64_t position_offset,
                       GroupedQueryAttentionRecord* record) const;

  // The SDPA options of L queries against S keys: GQA, dropout in training,
  // the causal mask folded into args.attn_mask when both are given.
  SdpaOptions sdpa_options(const GroupedQueryAttentionForward& args, int64_t L, int64_t S) const;

  Linear q_proj_;
  Linear k_proj_;
  Linear v_proj_;
  Linear o_proj_;
  RotaryEmbedding rope_;
};

}  // namespace qkv::nn
