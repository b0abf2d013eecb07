// nn::DecoderBlock — one pre-norm block of a decoder-only model (LLaMA, GPT;
// tutorial §8.1–8.3), the only place that block is written:
//
//   x = x + attention(attention_norm(x))    causal, GQA, RoPE on q and k
//   x = x + feed_forward(ffn_norm(x))       SwiGLU or GELU
//
// It runs three ways: over whole sequences (training, with a record), over
// new tokens after the keys and values a KV cache holds (a prompt), and as an
// allocation-free step of one token per sequence (decoding).
#pragma once

#include <span>
#include <variant>

#include "qkv/attention.h"
#include "qkv/generator.h"
#include "qkv/nn/feed_forward.h"
#include "qkv/nn/grouped_query_attention.h"
#include "qkv/nn/kv_cache.h"
#include "qkv/nn/layer_norm.h"
#include "qkv/nn/module.h"
#include "qkv/nn/rms_norm.h"
#include "qkv/tensor.h"

namespace qkv::nn {

enum class NormKind { kRMSNorm, kLayerNorm };
// SwiGLU: w2(silu(w1 x) ⊙ w3 x); GELU: linear2(gelu(linear1 x)).
enum class FeedForwardKind { kSwiGLU, kGelu };

struct DecoderBlockOptions {
  int64_t d_model = 0;       // D
  int64_t num_heads = 0;     // H
  int64_t num_kv_heads = 0;  // Hkv, divides H
  int64_t ffn_hidden = 0;    // the feed-forward network's hidden width
  NormKind norm = NormKind::kRMSNorm;
  double norm_eps = 1e-5;
  FeedForwardKind ffn = FeedForwardKind::kSwiGLU;
  bool rope = true;  // rotate q and k; false: positions enter elsewhere
  double rope_base = 10000.0;
  RopeStyle rope_style = RopeStyle::kHalfSplit;
  // Empty, or RotaryEmbeddingOptions::freq_factors.
  std::vector<double> rope_freq_factors;
  bool bias = false;  // in every linear layer (and LayerNorm)
  DType dtype = DType::kFloat32;
};

// What DecoderBlock::forward saves for its backward. The variants hold the
// record of the kind the options chose.
using NormRecord = std::variant<RMSNormRecord, LayerNormRecord>;
struct DecoderBlockRecord {
  NormRecord attention_norm;
  GroupedQueryAttentionRecord attention;
  NormRecord ffn_norm;
  std::variant<SwiGLUFeedForwardRecord, FeedForwardRecord> feed_forward;
};

// The buffers of a decoding step of up to B tokens, preallocated once (by
// DecoderModel::make_step_buffers) and shared by every block. A step of
// n < B tokens uses their first n rows.
struct DecoderStepBuffers {
  DecoderStepBuffers(const DecoderBlockOptions& options, int64_t batch_size);

  Tensor x;             // [B, D]: the residual stream
  Tensor positions;     // [max_seq_len, D] added to the embeddings; undefined with RoPE
  Tensor h;             // [B, D]: a norm's output, then a sub-layer's
  Tensor q, k, v;       // [B, H·E], [B, Hkv·E], [B, Hkv·E]
  Tensor q4, k4, v4;    // the same as [B, heads, 1, E]
  Tensor attention;     // [B, H, 1, E]
  Tensor attention_2d;  // the same as [B, H·E]
  Tensor hidden, gate;  // [B, ffn_hidden] (gate: SwiGLU only)
  SdpaWorkspace workspace;
};

// Where the keys and values of a decoding step's rows go: one cache whose
// batch is the step's rows, or one cache of batch 1 per row (sequences of
// different lengths decoded together).
struct StepCaches {
  KVCache* shared = nullptr;
  std::span<KVCache* const> per_row;
};

class DecoderBlock : public ModuleBase<DecoderBlock, DecoderBlockOptions> {
 public:
  // The attention and the feed-forward network are initialised as the torch
  // modules they mirror, in that order; the norms to 1 (and 0).
  DecoderBlock(const DecoderBlockOptions& options, Generator* gen);

  // Whole sequences at positions offset, offset + 1, …: causal self-attention
  // over them. With `cache`, their keys and values are appended to its layer
  // `layer` first and the queries attend to every cached position. With
  // `record` (training, no cache), also saves what backward() needs.
  // x: [B, T, D]  ->  like x
  Tensor forward(const Tensor& x, int64_t offset = 0, KVCache* cache = nullptr, int64_t layer = 0,
                 DecoderBlockRecord* record = nullptr);

  // Training: forward(x) with a record.
  // x: [B, T, D]  ->  like x
  Tensor forward(const Tensor& x, DecoderBlockRecord* record) {
    return forward(x, 0, nullptr, 0, record);
  }

  // Adds the parameter gradients to the buffers, returns ∂loss/∂x.
  // grad_output: [B, T, D]  ->  like grad_output
  Tensor backward(const Tensor& grad_output, const DecoderBlockRecord& record);

  // One decoding step, allocating nothing: n tokens, token r at positions[r]
  // (or all at positions[0]), their keys and values appended to layer `layer`
  // of `caches`; each token attends over its own cache. The linear layers run
  // once over the n rows. x is updated in place.
  // x: [n, D], n <= the buffers' B
  void step_into(Tensor& x, std::span<const int64_t> positions, const StepCaches& caches,
                 int64_t layer, DecoderStepBuffers& buffers) const;
  // The same for B tokens at `position` in one cache of batch B.
  // x: [B, D]
  void step_into(Tensor& x, int64_t position, KVCache& cache, int64_t layer,
                 DecoderStepBuffers& buffers) const {
    step_into(x, {&position, 1}, {.shared = &cache, .per_row = {}}, layer, buffers);
  }

 private:
  // attention_norm.*, attention.{q,k,v,o}_proj.*, ffn_norm.*, feed_forward.*
  void list_members(MemberList& m) override;

  std::variant<RMSNorm, LayerNorm> attention_norm_;
  GroupedQueryAttention attention_;
  std::variant<RMSNorm, LayerNorm> ffn_norm_;
  std::variant<SwiGLUFeedForward, FeedForward> feed_forward_;
};

}  // namespace qkv::nn
