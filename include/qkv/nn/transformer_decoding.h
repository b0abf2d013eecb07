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
  int64_t length() const { return cache_ ? cache_->length() : 0; }
  int64_t max_len() const { return max_len_; }
  // Forgets the target positions; keeps the memory.
  void reset() {
    if (cache_) cache_->reset();
  }

 private:
  // The parameters of one decoder layer (shared with the model).
  struct LayerWeights {
    Tensor sa_w, sa_b, sa_out_w, sa_out_b;  // self-attention in_proj [3D, D], out_proj
    Tensor ca_w, ca_b, ca_out_w, ca_out_b;  // cross-attention
    Tensor linear1_w, linear1_b, linear2_w, linear2_b;
    Tensor norm1_w, norm1_b, norm2_w, norm2_b, norm3_w, norm3_b;
  };

  Tensor self_attention(int64_t layer, const Tensor& x);   // x: [B, T, D]
  Tensor cross_attention(int64_t layer, const Tensor& x);  // x: [B, T, D]
  Tensor norm(const Tensor& x, const Tensor& w, const Tensor& b) const;

  Transformer& model_;
  TransformerOptions options_;
  int64_t batch_ = 0;  // of the memory; 0 before encode()
  bool unbatched_ = false;
  int64_t max_len_;
  std::optional<KVCache> cache_;  // made by encode() / set_memory(), sized for the batch
  std::vector<LayerWeights> layers_;
  std::vector<Tensor> memory_k_, memory_v_;  // per layer [B, H, S, E]
  Tensor memory_mask_;                       // SDPA attn_mask [B, 1, 1, S] or undefined
};

}  // namespace qkv::nn
