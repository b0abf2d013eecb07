// nn::DecoderBlock — one pre-norm block of a decoder-only model (LLaMA, GPT,
// Qwen, Gemma; tutorial §8.1–8.3), the only place that block is written:
//
//   x = x + attention(attention_norm(x))    causal, GQA, RoPE on q and k
//   x = x + feed_forward(ffn_norm(x))       SwiGLU, GeGLU or GELU
//
// With post_norms (Gemma 2/3) each sub-layer's output is normalised once
// more before it is added: x = x + post_attention_norm(attention(...)), and
// likewise post_ffn_norm. The families differ only in options: see
// nn::DecoderModelConfig.
//
// One function, forward_into, runs it every way: over whole sequences
// (training, with a record), over new tokens after the keys and values a KV
// cache holds (a prompt), and as an allocation-free step of one token per
// sequence (decoding, one cache per sequence or one for all).
#pragma once

#include <optional>
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
// SwiGLU: w2(silu(w1 x) ⊙ w3 x); GELU: linear2(gelu(linear1 x));
// GeGLU: w2(gelu_tanh(w1 x) ⊙ w3 x) (Gemma).
enum class FeedForwardKind { kSwiGLU, kGelu, kGeGLU };

struct DecoderBlockOptions {
  // The attention (heads, RoPE, head dim). Its embed_dim is the block's width
  // D, its bias and dtype the block's: the norms and the feed-forward network
  // take them too.
  GroupedQueryAttentionOptions attention;
  int64_t ffn_hidden = 0;  // the feed-forward network's hidden width
  NormKind norm = NormKind::kRMSNorm;
  double norm_eps = 1e-5;
  FeedForwardKind ffn = FeedForwardKind::kSwiGLU;
  // A norm (of kind `norm`) on the output of attention and of the
  // feed-forward network, before the residual add (Gemma 2/3).
  bool post_norms = false;
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

// The working tensors of a pass over up to R rows (B sequences × T new
// tokens, B·T <= R), preallocated once (DecoderModel::make_buffers) and
// shared by every block; a pass of n rows uses the first n of each.
struct DecoderBuffers {
  DecoderBuffers(const DecoderBlockOptions& options, int64_t rows);

  Tensor x;                    // [R, D]: the residual stream
  Tensor positions;            // [max_seq_len, D] added to the embeddings; undefined with RoPE
  Tensor h;                    // [R, D]: a norm's output, then a sub-layer's
  AttentionBuffers attention;  // q, k, v and the heads
  Tensor hidden, gate;         // [R, ffn_hidden] (gate: SwiGLU and GeGLU only)
};

class DecoderBlock : public ModuleBase<DecoderBlock, DecoderBlockOptions> {
 public:
  // The attention and the feed-forward network are initialised as the torch
  // modules they mirror, in that order; the norms to 1 (and 0).
  DecoderBlock(const DecoderBlockOptions& options, Generator* gen);

  // The block, written once: prefill, a decoding step, sequences decoded
  // together and training all run it. B sequences of T new tokens; token
  // (b, t) at position positions[b] + t (positions[0] + t for every b when one
  // is given); keys and values go to `caches` (see GroupedQueryAttention::
  // forward_into). Inference updates x in place and allocates nothing once
  // the buffers hold B·T rows. With a record (training, no caches), x is
  // replaced by a new tensor and the record keeps what backward() needs.
  // x: [B, T, D] contiguous  ->  x
  void forward_into(Tensor& x, std::span<const int64_t> positions, const PassCaches& caches,
                    DecoderBuffers& buffers, DecoderBlockRecord* record = nullptr) const;

  // forward_into on a copy of x, with buffers of its own: whole sequences at
  // positions offset, offset + 1, … (appended to layer `layer` of `cache`
  // first when one is given).
  // x: [B, T, D]  ->  like x
  Tensor forward(const Tensor& x, int64_t offset = 0, KVCache* cache = nullptr, int64_t layer = 0,
                 DecoderBlockRecord* record = nullptr) const;

  // Training: forward(x) with a record.
  // x: [B, T, D]  ->  like x
  Tensor forward(const Tensor& x, DecoderBlockRecord* record) const {
    return forward(x, 0, nullptr, 0, record);
  }

  // Adds the parameter gradients to the buffers, returns ∂loss/∂x.
  // grad_output: [B, T, D]  ->  like grad_output
  Tensor backward(const Tensor& grad_output, const DecoderBlockRecord& record);

 private:
  // attention_norm.*, attention.{q,k,v,o}_proj.*, ffn_norm.*, feed_forward.*,
  // and with post_norms post_attention_norm.*, post_ffn_norm.*
  void list_members(MemberList& m) override;

  std::variant<RMSNorm, LayerNorm> attention_norm_;
  GroupedQueryAttention attention_;
  std::variant<RMSNorm, LayerNorm> ffn_norm_;
  std::variant<SwiGLUFeedForward, FeedForward> feed_forward_;
  std::optional<std::variant<RMSNorm, LayerNorm>> post_attention_norm_, post_ffn_norm_;
};

}  // namespace qkv::nn
