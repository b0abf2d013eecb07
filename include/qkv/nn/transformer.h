// The Transformer blocks of torch.nn (tutorial §8.1): attention placed inside
// encoder and decoder layers with residual connections, LayerNorm and a
// feed-forward network.
//
//   TransformerEncoderLayer   self-attention, FFN
//   TransformerDecoderLayer   self-attention, cross-attention to the encoder's
//                             output ("memory"), FFN
//   TransformerEncoder/Decoder  num_layers copies of a layer (+ optional final norm)
//   Transformer               encoder + decoder with final norms, as nn.Transformer
//
// Same arguments, defaults, mask polarity (bool True = masked out; float
// masks are added), parameter names and initialisation as torch 2.13, so a
// torch state_dict loads unchanged:
//
//   nn::TransformerEncoderLayer layer({.d_model = 64, .nhead = 4, .batch_first = true});
//   layer.eval();
//   Tensor y = layer.forward(x, {.src_key_padding_mask = padding});   // x: [B, L, 64]
//
// A layer computes, with sa = self-attention, ff = linear2(dropout(act(linear1 x))):
//   post-norm (default):  x = norm1(x + dropout1(sa(x)));  x = norm2(x + dropout2(ff(x)))
//   norm_first:           x = x + dropout1(sa(norm1(x)));  x = x + dropout2(ff(norm2(x)))
// The decoder layer inserts cross-attention (norm2, dropout2) before the FFN
// (norm3, dropout3). Dropout also acts on the attention weights; all dropout
// is active only in training mode (the default, as in torch).
//
// Layouts: [L, B, D] by default, [B, L, D] with batch_first, or unbatched [L, D].
//
// Training: forward(..., &record) saves what backward needs in a record the
// caller keeps; backward(grad_output, record) adds every parameter's gradient
// into the module's buffers (parameters(), zero_grad()) and returns the
// inputs' gradients. Dropout masks (also on the attention weights) are replayed.
//   nn::TransformerEncoderLayerRecord rec;
//   Tensor y = layer.forward(x, {.src_key_padding_mask = padding}, &rec);
//   Tensor grad_x = layer.backward(grad_y, rec);
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "qkv/functional.h"
#include "qkv/generator.h"
#include "qkv/nn/feed_forward.h"
#include "qkv/nn/layer_norm.h"
#include "qkv/nn/module.h"
#include "qkv/nn/multihead_attention.h"
#include "qkv/tensor.h"

namespace qkv::nn {

struct TransformerDecoderCache;  // transformer_decoding.h

// The constructor arguments of nn.TransformerEncoderLayer and
// nn.TransformerDecoderLayer (the same in torch).
struct TransformerLayerOptions {
  int64_t d_model = 0;
  int64_t nhead = 1;
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  Activation activation = Activation::kRelu;
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;
  bool bias = true;  // in the attention projections, linear1/linear2 and the LayerNorms
  DType dtype = DType::kFloat32;
};
using TransformerEncoderLayerOptions = TransformerLayerOptions;
using TransformerDecoderLayerOptions = TransformerLayerOptions;

// Masks of a self-attention over L positions. H = nhead.
struct TransformerEncoderLayerForward {
  Tensor src_mask;              // [L, L] or [B*H, L, L]; bool True = not allowed, or float added
  Tensor src_key_padding_mask;  // [B, L] ([L] unbatched); bool True = padding, or float added
  bool is_causal = false;       // hint that src_mask is causal (needs src_mask, as torch)
};

// What TransformerEncoderLayer::forward saves for its backward.
struct TransformerEncoderLayerRecord {
  LayerNormRecord norm1, norm2;
  MultiheadAttentionRecord self_attn;
  FeedForwardRecord ff;
  Tensor keep1, keep2;   // dropout1/dropout2 keep masks (undefined: nothing dropped)
  double dropout_p = 0;  // the probability in effect
};

class TransformerEncoderLayer
    : public ModuleBase<TransformerEncoderLayer, TransformerLayerOptions> {
 public:
  // Initialised as torch: self_attn, then linear1, linear2 (nn.Linear), norms 1/0.
  explicit TransformerEncoderLayer(const TransformerLayerOptions& options,
                                   Generator* gen = nullptr);

  // src: [L, B, D] ([B, L, D] if batch_first; unbatched [L, D])  ->  like src
  // With a record, also saves what backward() needs (nullptr: inference).
  Tensor forward(const Tensor& src, const TransformerEncoderLayerForward& args = {},
                 TransformerEncoderLayerRecord* record = nullptr);

  // Adds the parameter gradients to the buffers, returns ∂loss/∂src.
  // grad_output: like src  ->  like src
  Tensor backward(const Tensor& grad_output, const TransformerEncoderLayerRecord& record);

  // Inference on the workspace's buffers (eval mode, or dropout 0), as
  // forward() computes it: x becomes the layer's output, which lives in the
  // workspace, so a stack of layers allocates its activations once.
  // x: [B, L, D] batch-first, contiguous  keep: bool [B, 1, 1, L] (True = take part) or undefined
  void forward_into(Tensor& x, const Tensor& keep, bool causal, Workspace& workspace) const;

  MultiheadAttention& self_attn() { return self_attn_; }

 private:
  // torch's names and order: self_attn.*, linear1.*, linear2.*, norm1.*, norm2.*.
  void list_members(MemberList& m) override;

  Tensor sa_block(const Tensor& x, const TransformerEncoderLayerForward& args,
                  TransformerEncoderLayerRecord* record);
  Tensor ff_block(const Tensor& x, TransformerEncoderLayerRecord* record);

  MultiheadAttention self_attn_;
  FeedForward ff_;  // linear1, dropout, linear2
  LayerNorm norm1_;
  LayerNorm norm2_;
};

// Masks of the decoder: self-attention over the T target positions and
// cross-attention from them to the S memory positions.
struct TransformerDecoderLayerForward {
  Tensor tgt_mask;                 // [T, T] or [B*H, T, T]
  Tensor memory_mask;              // [T, S] or [B*H, T, S]
  Tensor tgt_key_padding_mask;     // [B, T] ([T] unbatched)
  Tensor memory_key_padding_mask;  // [B, S] ([S] unbatched)
  bool tgt_is_causal = false;      // hint that tgt_mask is causal
  bool memory_is_causal = false;   // hint that memory_mask is causal
};

// What TransformerDecoderLayer::forward saves for its backward.
struct TransformerDecoderLayerRecord {
  LayerNormRecord norm1, norm2, norm3;
  MultiheadAttentionRecord self_attn;
  MultiheadAttentionRecord multihead_attn;
  FeedForwardRecord ff;
  Tensor keep1, keep2, keep3;  // dropout1/2/3 keep masks (undefined: nothing dropped)
  double dropout_p = 0;        // the probability in effect
};

// Gradients of a decoder's inputs.
struct TransformerDecoderInputGradients {
  Tensor tgt;     // like tgt
  Tensor memory;  // like memory
};

class TransformerDecoderLayer
    : public ModuleBase<TransformerDecoderLayer, TransformerLayerOptions> {
 public:
  // Initialised as torch: self_attn, multihead_attn, linear1, linear2, norms.
  explicit TransformerDecoderLayer(const TransformerLayerOptions& options,
                                   Generator* gen = nullptr);

  // tgt: [T, B, D]  memory: [S, B, D] (batch_first: [B, T, D], [B, S, D];
  // unbatched: [T, D], [S, D])  ->  like tgt
  // With a record, also saves what backward() needs (nullptr: inference).
  Tensor forward(const Tensor& tgt, const Tensor& memory,
                 const TransformerDecoderLayerForward& args = {},
                 TransformerDecoderLayerRecord* record = nullptr);

  // Adds the parameter gradients to the buffers, returns ∂loss/∂tgt and ∂loss/∂memory.
  // grad_output: like tgt  ->  like tgt, like memory
  TransformerDecoderInputGradients backward(const Tensor& grad_output,
                                            const TransformerDecoderLayerRecord& record);

  // Incremental decoding (inference; TransformerDecoderSession). The
  // cross-attention keys and values of the memory, projected once per sequence:
  // memory: [B, S, D] batch-first  ->  [B, H, S, E] each
  MultiheadAttentionKeysValues project_memory(const Tensor& memory) const;

  // The layer on the next target positions, the rows forward() gives them
  // under a causal tgt_mask: self-attention over every position layer
  // `layer` of cache.self_attn holds (theirs appended first), cross-attention
  // to cache.memory[layer].
  // x: [B, T, D] batch-first  ->  [B, T, D]
  Tensor step(const Tensor& x, TransformerDecoderCache& cache, int64_t layer) const;

  MultiheadAttention& self_attn() { return self_attn_; }
  MultiheadAttention& multihead_attn() { return multihead_attn_; }

 private:
  // As the encoder layer, plus multihead_attn.* (the cross-attention) after
  // self_attn.*, and norm3.*.
  void list_members(MemberList& m) override;

  // The layer's block, the one place its sublayers are composed: forward()
  // and step() differ only in how the self-attention, cross-attention and
  // feed-forward blocks sa, ca, ff run. Norm records go to `record` if any.
  template <class SelfAttentionBlock, class CrossAttentionBlock, class FeedForwardBlock>
  Tensor block(const Tensor& tgt, const SelfAttentionBlock& sa, const CrossAttentionBlock& ca,
               const FeedForwardBlock& ff, TransformerDecoderLayerRecord* record) const;

  MultiheadAttention self_attn_;
  MultiheadAttention multihead_attn_;
  FeedForward ff_;
  LayerNorm norm1_;
  LayerNorm norm2_;
  LayerNorm norm3_;
};

// --- Stacks ----------------------------------------------------------------------

// A stack built from options: one layer from `layer`, copied num_layers times.
struct TransformerStackOptions {
  TransformerLayerOptions layer;
  int64_t num_layers = 6;
  // A final LayerNorm(d_model, layer_norm_eps, bias) after the last layer.
  bool norm = false;
};
using TransformerEncoderOptions = TransformerStackOptions;
using TransformerDecoderOptions = TransformerStackOptions;

// The final LayerNorm `options` asks for, or none.
std::optional<LayerNorm> transformer_stack_norm(const TransformerStackOptions& options);

// What TransformerEncoder and TransformerDecoder share, as torch's: deep
// copies of one layer (identical weights) and an optional final LayerNorm,
// named layers.<i>.* and norm.*; the mode of the layer given. Derived names
// itself in kTypeName.
template <class Derived, class Layer>
class LayerStack : public ModuleBase<Derived> {
 public:
  // As torch: num_layers deep copies of `layer` and an optional final norm (copied).
  LayerStack(const Layer& layer, int64_t num_layers,
             const std::optional<LayerNorm>& norm = std::nullopt)
      : ModuleBase<Derived>(Derived::kTypeName) {
    QKV_CHECK(num_layers > 0, Derived::kTypeName, ": num_layers must be > 0, got ", num_layers);
    for (int64_t i = 0; i < num_layers; ++i) layers_.push_back(layer.clone());
    if (norm) norm_ = norm->clone();
    this->train(layer.is_training());
  }
  // Builds one layer from options.layer, then copies it num_layers times.
  explicit LayerStack(const TransformerStackOptions& options, Generator* gen = nullptr)
      : LayerStack(Layer(options.layer, gen), options.num_layers, transformer_stack_norm(options)) {
  }

  std::vector<Layer>& layers() { return layers_; }
  std::optional<LayerNorm>& norm() { return norm_; }

 protected:
  void list_members(Module::MemberList& m) override {
    for (size_t i = 0; i < layers_.size(); ++i) m.module("layers." + std::to_string(i), layers_[i]);
    if (norm_) m.module("norm", *norm_);
  }

  std::vector<Layer> layers_;
  std::optional<LayerNorm> norm_;
};

// What a stack's forward saves for its backward: each layer's record, the final norm's.
template <class LayerRecord>
struct TransformerStackRecord {
  std::vector<LayerRecord> layers;
  LayerNormRecord norm;
};

struct TransformerEncoderForward {
  Tensor mask;                  // as TransformerEncoderLayerForward::src_mask
  Tensor src_key_padding_mask;  // [B, L] ([L] unbatched)
  // nullopt (torch's None): the layers get is_causal = true exactly when
  // `mask` equals the causal mask (-inf, or True, above the diagonal).
  std::optional<bool> is_causal;
};

using TransformerEncoderRecord = TransformerStackRecord<TransformerEncoderLayerRecord>;

class TransformerEncoder : public LayerStack<TransformerEncoder, TransformerEncoderLayer> {
 public:
  static constexpr const char* kTypeName = "TransformerEncoder";
  using LayerStack::LayerStack;

  // src: [L, B, D] ([B, L, D] if batch_first; unbatched [L, D])  ->  like src
  // With a record, also saves what backward() needs (nullptr: inference).
  Tensor forward(const Tensor& src, const TransformerEncoderForward& args = {},
                 TransformerEncoderRecord* record = nullptr);

  // grad_output: like src  ->  like src (parameter gradients added to the buffers)
  Tensor backward(const Tensor& grad_output, const TransformerEncoderRecord& record);
};

struct TransformerDecoderForward {
  Tensor tgt_mask;
  Tensor memory_mask;
  Tensor tgt_key_padding_mask;
  Tensor memory_key_padding_mask;
  // nullopt: detected from tgt_mask, as the encoder's is_causal.
  std::optional<bool> tgt_is_causal;
  bool memory_is_causal = false;
};

using TransformerDecoderRecord = TransformerStackRecord<TransformerDecoderLayerRecord>;

class TransformerDecoder : public LayerStack<TransformerDecoder, TransformerDecoderLayer> {
 public:
  static constexpr const char* kTypeName = "TransformerDecoder";
  using LayerStack::LayerStack;

  // tgt: [T, B, D]  memory: [S, B, D] (or batch_first / unbatched)  ->  like tgt
  // With a record, also saves what backward() needs (nullptr: inference).
  Tensor forward(const Tensor& tgt, const Tensor& memory,
                 const TransformerDecoderForward& args = {},
                 TransformerDecoderRecord* record = nullptr);

  // grad_output: like tgt  ->  like tgt, like memory (summed over the layers)
  TransformerDecoderInputGradients backward(const Tensor& grad_output,
                                            const TransformerDecoderRecord& record);

  // Incremental decoding (TransformerDecoderSession): the next target
  // positions through every layer's step(), then the final norm.
  // tgt: [B, T, D] batch-first  ->  [B, T, D]
  Tensor step(const Tensor& tgt, TransformerDecoderCache& cache) const;
};

// --- nn.Transformer ----------------------------------------------------------------

// nn.Transformer's constructor arguments and defaults (custom encoder/decoder aside).
struct TransformerOptions {
  int64_t d_model = 512;
  int64_t nhead = 8;
  int64_t num_encoder_layers = 6;
  int64_t num_decoder_layers = 6;
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  Activation activation = Activation::kRelu;
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;
  bool bias = true;
  DType dtype = DType::kFloat32;
};

struct TransformerForward {
  Tensor src_mask;                    // [S, S] or [B*H, S, S]
  Tensor tgt_mask;                    // [T, T] or [B*H, T, T]
  Tensor memory_mask;                 // [T, S] or [B*H, T, S]
  Tensor src_key_padding_mask;        // [B, S]
  Tensor tgt_key_padding_mask;        // [B, T]
  Tensor memory_key_padding_mask;     // [B, S]
  std::optional<bool> src_is_causal;  // nullopt: detected from src_mask
  std::optional<bool> tgt_is_causal;  // nullopt: detected from tgt_mask
  bool memory_is_causal = false;
};

// What Transformer::forward saves for its backward.
struct TransformerRecord {
  TransformerEncoderRecord encoder;
  TransformerDecoderRecord decoder;
};

// ∂loss/∂src and ∂loss/∂tgt; src's flows back through the memory.
struct TransformerInputGradients {
  Tensor src;
  Tensor tgt;
};

class Transformer : public ModuleBase<Transformer, TransformerOptions> {
 public:
  // As torch: encoder and decoder of cloned layers, each with a final
  // LayerNorm, then xavier_uniform_ on every parameter with more than one dim.
  explicit Transformer(const TransformerOptions& options = {}, Generator* gen = nullptr);

  // src: [S, B, D]  tgt: [T, B, D] (batch_first: [B, S, D], [B, T, D];
  // unbatched: [S, D], [T, D])  ->  like tgt
  // With a record, also saves what backward() needs (nullptr: inference).
  Tensor forward(const Tensor& src, const Tensor& tgt, const TransformerForward& args = {},
                 TransformerRecord* record = nullptr);

  // The decoder's backward, then the encoder's from the memory's gradient;
  // parameter gradients accumulate in the layers (parameters(), zero_grad()).
  // grad_output: like tgt  ->  like src, like tgt
  TransformerInputGradients backward(const Tensor& grad_output, const TransformerRecord& record);

  // The causal mask for a decoder input of length sz: -inf above the diagonal, 0 elsewhere.
  // -> [sz, sz]
  static Tensor generate_square_subsequent_mask(int64_t sz, DType dtype = DType::kFloat32);

  TransformerEncoder& encoder() { return encoder_; }
  TransformerDecoder& decoder() { return decoder_; }

 private:
  // encoder.*, decoder.*.
  void list_members(MemberList& m) override;

  TransformerEncoder encoder_;
  TransformerDecoder decoder_;
};

}  // namespace qkv::nn
