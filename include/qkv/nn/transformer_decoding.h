// nn::TransformerDecoderSession — incremental decoding with an encoder-decoder
// nn::Transformer (tutorial §8.3): the encoder runs once, each decoder layer's
// cross-attention keys and values of the encoder output ("memory") are
// projected once, and the decoder's self-attention keeps a KV cache, so each
// new target position costs one pass of that position alone.
//
//   nn::Transformer model({.d_model = 64, .nhead = 4, .batch_first = true});
//   model.eval();
//   nn::TransformerDecoderSession session(model, /*max_len=*/128);
//   session.encode(src);                        // [B, S, 64]
//   Tensor y = session.step(bos);               // [B, 1, 64]: decoder output of position 0
//   y = session.step(next);                     // position 1, attending to 0 and 1
//
// The steps run the decoder's own code (TransformerDecoder::step, each
// layer's step(): the block forward() runs too) on the state a
// TransformerDecoderCache keeps; the session adds the encoder, the model's
// layouts and the checks.
//
// step() returns exactly the rows Transformer::forward(src, all targets so far,
// {.tgt_mask = generate_square_subsequent_mask(T)}) gives for the new positions
// (to float rounding): self-attention is causal, new queries aligned
// bottom-right against the cache. Dropout is not applied, so the model must
// be in eval mode (or have dropout 0); tgt padding masks are not supported
// (every cached target position takes part).
#pragma once

#include <optional>
#include <vector>

#include "qkv/nn/kv_cache.h"
#include "qkv/nn/transformer.h"
#include "qkv/tensor.h"

namespace qkv::nn {

// The encoder-side masks of Transformer::forward (same shapes and polarity).
struct TransformerEncodeArgs {
  Tensor src_mask;                    // [S, S] or [B*H, S, S]
  Tensor src_key_padding_mask;        // [B, S]; bool True = padding, or float added
  Tensor memory_key_padding_mask;     // [B, S], used by every cross-attention
  std::optional<bool> src_is_causal;  // as TransformerForward::src_is_causal
};

// What incremental decoding keeps of a TransformerDecoder between steps
// (TransformerDecoder::step, TransformerDecoderLayer::step).
struct TransformerDecoderCache {
  // Projects every layer's cross-attention keys and values of `memory` and
  // reads memory_key_padding_mask (torch's polarity: bool True = padding, or
  // float added); room for max_len target positions. The decoder must be in
  // eval mode (or have dropout 0).
  // memory: [B, S, D] batch-first  memory_key_padding_mask: [B, S] or undefined
  TransformerDecoderCache(TransformerDecoder& decoder, const Tensor& memory,
                          const Tensor& memory_key_padding_mask, int64_t max_len);

  KVCache self_attn;  // the target positions' self-attention keys and values; one layer a layer
  std::vector<MultiheadAttentionKeysValues> memory;  // per layer, [B, H, S, E] each
  Tensor memory_mask;   // SDPA's form of memory_key_padding_mask, [B, 1, 1, S], or undefined
  Workspace workspace;  // the attention's buffers, reused by every layer and step
};

class TransformerDecoderSession {
 public:
  // The model must outlive the session; max_len bounds the target positions.
  TransformerDecoderSession(Transformer& model, int64_t max_len);

  // Runs the encoder over src and projects every decoder layer's
  // cross-attention keys and values of its output; forgets earlier targets.
  // src: [S, B, D] ([B, S, D] if batch_first; unbatched [S, D])
  void encode(const Tensor& src, const TransformerEncodeArgs& args = {});

  // The same from an encoder output computed elsewhere.
  // memory: like src  memory_key_padding_mask: [B, S] or undefined
  void set_memory(const Tensor& memory, const Tensor& memory_key_padding_mask = {});

  // Feeds the next T target positions (usually 1) and returns the decoder's
  // output for them (after its final norm).
  // tgt: [T, B, D] ([B, T, D] if batch_first; unbatched [T, D])  ->  like tgt
  Tensor step(const Tensor& tgt);

  // Target positions fed so far.
  int64_t length() const { return cache_ ? cache_->self_attn.length() : 0; }
  int64_t max_len() const { return max_len_; }
  // Forgets the target positions; keeps the memory.
  void reset() {
    if (cache_) cache_->self_attn.reset();
  }

 private:
  Transformer& model_;
  int64_t max_len_;
  bool unbatched_ = false;                        // the memory (so the targets) is [S, D]
  std::optional<TransformerDecoderCache> cache_;  // made by encode() / set_memory()
};

}  // namespace qkv::nn
