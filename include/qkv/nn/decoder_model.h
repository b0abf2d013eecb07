// nn::DecoderModel — a decoder-only language model (GPT, LLaMA, Qwen, Gemma;
// tutorial §8.2–8.3): token embedding, positions, N pre-norm blocks, a final
// norm and an output head that turns each position into logits over the
// vocabulary.
//
//   x = tok_embeddings(ids) · embedding_scale (+ positions, unless RoPE)
//   for each block:  x = x + attention(norm(x))      causal, GQA, RoPE on q and k
//                    x = x + feed_forward(norm(x))   SwiGLU, GeGLU or GELU (nn::DecoderBlock)
//   logits = output(norm(x))                         output tied to tok_embeddings or its own
//   (final_logit_softcap c > 0: logits = c · tanh(logits / c))
//
// The families are configurations of the same block (the GGUF loader,
// models::gguf_decoder_config, sets them from a file):
//   llama   RMSNorm, SwiGLU, RoPE (Llama 3: rope_freq_factors), tied or own head
//   qwen2   llama + qkv_bias
//   qwen3   llama + qk_norm, head_dim of its own
//   gemma3  qk_norm, post_norms, GeGLU, embedding_scale √D, head_dim of its own,
//           sliding_windows on 5 of every 6 layers with sliding_rope_base
//
//   nn::DecoderModel model({.vocab_size = 256, .d_model = 384, .num_layers = 6, .num_heads = 6});
//   Tensor logits = model.forward(ids, 1);            // ids: T tokens -> [1, T, 256]
//   models::save_decoder_model(model, "tiny.safetensors");   // qkv/models/decoder_model_file.h
//
// Generation feeds one token at a time through a cache of the keys and values
// already computed: see nn::DecoderSession (decoder_session.h) and `qkv generate`.
//
// Training (the full-sequence path): forward with a record the caller keeps,
// a loss on the logits, backward with ∂loss/∂logits into every parameter's
// gradient buffer (a tied head and the embedding share one), then an
// optimizer over parameters() — train::train_char_lm (tools/tasks/char_lm.h)
// is a complete loop:
//   nn::DecoderModelRecord rec;
//   Tensor logits = model.forward(ids, batch, &rec);    // [B, T, vocab]
//   ... cross_entropy_backward(..., grad_logits) ...
//   model.backward(grad_logits, rec);
//
// Parameter names (state_dict, safetensors):
//   tok_embeddings.weight                 [vocab, D]
//   pos_embeddings.weight                 [max_seq_len, D]   learned positions only
//   layers.<i>.attention_norm.weight      [D]   (+ .bias for LayerNorm with bias)
//   layers.<i>.attention.{q,k,v,o}_proj.weight   see nn::GroupedQueryAttention
//   layers.<i>.ffn_norm.weight            [D]
//   layers.<i>.feed_forward.w1/w2/w3.weight      SwiGLU (nn::SwiGLUFeedForward)
//   layers.<i>.feed_forward.linear1/linear2.*    GELU (nn::FeedForward)
//   layers.<i>.attention.q_norm/k_norm.weight    [head_dim]   qk_norm only
//   layers.<i>.post_attention_norm/post_ffn_norm.weight [D]  post_norms only
//   norm.weight                           [D]
//   output.weight                         [vocab, D]   untied head only
//
// Pretrained models (models::load_gguf_model) are built under
// nn::SkipWeightInit and given their weights module by module
// (named_modules(), set_output_weight); linear layers, the embedding table
// and the head may keep them block-quantized (inference only).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "qkv/generator.h"
#include "qkv/nn/decoder_block.h"
#include "qkv/nn/embedding.h"
#include "qkv/nn/feed_forward.h"
#include "qkv/nn/grouped_query_attention.h"
#include "qkv/nn/kv_cache.h"
#include "qkv/nn/layer_norm.h"
#include "qkv/nn/parameter.h"
#include "qkv/nn/positional_encoding.h"
#include "qkv/nn/rms_norm.h"
#include "qkv/quantized_linear.h"
#include "qkv/tensor.h"

namespace qkv::nn {

// Where position information enters: rotating q and k (RoPE), or added to the
// token embeddings (learned table, or §3.4's sinusoids).
enum class PositionKind { kRope, kLearned, kSinusoidal };

struct DecoderModelConfig {
  int64_t vocab_size = 256;  // 256: one token per byte
  int64_t d_model = 384;     // D
  int64_t num_layers = 6;
  int64_t num_heads = 6;     // H
  int64_t num_kv_heads = 0;  // Hkv, divides H; 0 means H
  int64_t head_dim = 0;      // E; 0 means d_model / num_heads
  // Hidden width of the feed-forward network; 0 picks 4·D for GELU and
  // 8/3·D rounded up to a multiple of 64 for SwiGLU (LLaMA's rule).
  int64_t ffn_hidden = 0;
  // Longest sequence: size of the position table, default cache length.
  int64_t max_seq_len = 1024;
  PositionKind positions = PositionKind::kRope;
  double rope_base = 10000.0;
  RopeStyle rope_style = RopeStyle::kHalfSplit;
  // Empty, or head_dim / 2 divisors of the RoPE frequencies (Llama 3's
  // rope_freqs; RotaryEmbeddingOptions::freq_factors). RoPE only.
  std::vector<double> rope_freq_factors;
  NormKind norm = NormKind::kRMSNorm;
  double norm_eps = 1e-5;
  FeedForwardKind ffn = FeedForwardKind::kSwiGLU;
  bool tie_embeddings = true;  // output head = tok_embeddings.weight
  bool bias = false;           // in every linear layer (and LayerNorm)
  DType dtype = DType::kFloat32;

  // Options of the newer families (defaults: off). Training supports
  // qkv_bias, attention_scale and sliding_windows; the others refuse records.
  bool qkv_bias = false;         // biases on q, k and v only (Qwen2)
  bool qk_norm = false;          // per-head RMSNorm of q and k before RoPE (Qwen3, Gemma 3)
  bool post_norms = false;       // norms after attention and the FFN too (Gemma 2/3)
  double attention_scale = 0.0;  // the scores' scale; 0 means 1/√head_dim
  double embedding_scale = 1.0;  // multiplies the token embeddings (Gemma: √D)
  // Empty, or one per layer: 0 for attention over every earlier position, W > 0
  // for a sliding window of W positions (the KV cache keeps W: nn::KVCache).
  std::vector<int64_t> sliding_windows;
  double sliding_rope_base = 0.0;    // RoPE base of the windowed layers; 0 means rope_base
  double final_logit_softcap = 0.0;  // 0: none
};

// The config with defaults filled in (num_kv_heads, ffn_hidden) and checked;
// an Error names the first bad field.
DecoderModelConfig resolved_config(const DecoderModelConfig& config);

// The options of block `layer` of the config (they differ by layer only in
// the sliding window and its RoPE base); layer 0 sizes the shared buffers.
DecoderBlockOptions block_options(const DecoderModelConfig& config, int64_t layer = 0);

// Where the tokens of a DecoderModel::forward_into sit and where their keys
// and values go.
struct DecoderPass {
  int64_t batch_size = 1;  // B: the ids are B sequences of T tokens
  // The position of each sequence's first new token, or one for all of them.
  std::span<const int64_t> positions;
  PassCaches caches;       // none, one of batch B, or one of batch 1 per sequence
  bool last_only = false;  // the logits of each sequence's last token only
};

// What DecoderModel::forward saves for its backward: each block's record and the model's.
struct DecoderModelRecord {
  int64_t batch_size = 0;  // B
  int64_t length = 0;      // T
  EmbeddingRecord tok_embeddings;
  std::vector<DecoderBlockRecord> blocks;
  NormRecord norm;
  Tensor head_input;  // norm(x): [B, T, D]
};

class DecoderModel : public ModuleBase<DecoderModel> {
 public:
  // Parameters initialised as the torch modules they mirror (embeddings
  // N(0, 1), linears U(±1/√fan_in), norms 1), drawn from `gen` in the order
  // of the parameter list above. Under nn::SkipWeightInit the embedding,
  // linear and untied head weights are left unset.
  explicit DecoderModel(const DecoderModelConfig& config, Generator* gen = nullptr);

  // The model, written once: the prompt, a decoding step, sequences decoded
  // together and training all run it. B sequences of T new tokens each;
  // token (b, t) at position pass.positions[b] + t (see DecoderPass); every
  // linear layer reads its weights once for all B·T rows, attention runs as
  // GroupedQueryAttention::forward_into says. Inference allocates nothing
  // once `buffers` hold B·T rows (make_buffers). With a record (training:
  // no caches, every position), the record keeps what backward() needs.
  // ids: B·T ids, row-major [B, T]  ->  logits: [B, T, vocab], or [B, vocab]
  // with pass.last_only (preallocated, contiguous)
  void forward_into(Tensor& logits, std::span<const int64_t> ids, const DecoderPass& pass,
                    DecoderBuffers& buffers, DecoderModelRecord* record = nullptr) const;
  // The buffers of forward_into() for up to `rows` tokens at once.
  DecoderBuffers make_buffers(int64_t rows) const;

  // The wrappers below run forward_into with buffers of their own.
  // Logits of every position of B sequences of T tokens (causal attention).
  // ids: B·T ids, row-major [B, T]  ->  [B, T, vocab]
  Tensor forward(std::span<const int64_t> ids, int64_t batch_size = 1) const;

  // The same, continuing the sequences whose keys and values `cache` holds:
  // the new tokens sit at positions cache.length() … and are appended to it
  // (one step or a whole prompt at once).
  // ids: B·T ids, row-major [B, T]  ->  [B, T, vocab]
  Tensor forward(std::span<const int64_t> ids, int64_t batch_size, KVCache& cache) const;

  // As forward(ids, batch_size, cache), but only the last position goes
  // through the output head (a prompt's prefill: a [B, T, vocab] result
  // would cost T times the head's work and memory).
  // ids: B·T ids, row-major [B, T]  ->  [B, vocab]
  Tensor forward_last(std::span<const int64_t> ids, int64_t batch_size, KVCache& cache) const;

  // Training: forward(ids, batch_size) that also saves what backward() needs
  // (nullptr: as forward(ids, batch_size)).
  // ids: B·T ids, row-major [B, T]  ->  [B, T, vocab]
  Tensor forward(std::span<const int64_t> ids, int64_t batch_size,
                 DecoderModelRecord* record) const;

  // Adds every parameter's gradient to its buffer (see parameters()); the ids
  // have none. With tied embeddings the head's gradient and the embedding
  // lookup's both go into tok_embeddings.weight's buffer.
  // grad_logits: [B, T, vocab]
  void backward(const Tensor& grad_logits, const DecoderModelRecord& record);

  // An empty cache shaped for this model; max_len 0 means config.max_seq_len.
  // It stores kv_cache_storage() (kFloat unless set).
  KVCache make_cache(int64_t batch_size = 1, int64_t max_len = 0) const;
  // How the caches made from now on keep keys and values (kQ8_0: float32 models
  // whose head dim is a multiple of 32; checked here).
  void set_kv_cache_storage(KVCacheStorage storage);
  KVCacheStorage kv_cache_storage() const { return kv_cache_storage_; }

  const DecoderModelConfig& config() const { return config_; }
  int64_t num_parameters() const;

  // The pieces, for nn::DecoderSession and for inspection.
  const Embedding& tok_embeddings() const { return tok_embeddings_; }
  Embedding& tok_embeddings() { return tok_embeddings_; }
  std::vector<DecoderBlock>& blocks() { return blocks_; }
  const std::vector<DecoderBlock>& blocks() const { return blocks_; }
  const std::variant<RMSNorm, LayerNorm>& norm() const { return norm_; }
  // [vocab, D]: tok_embeddings.weight when tied; undefined when quantized.
  const Tensor& output_weight() const;
  // The output head, through whichever weight it has (float or quantized,
  // its own or the tied table).
  // x: [..., D]  ->  [..., vocab]
  Tensor head(const Tensor& x) const;
  // The same into a preallocated contiguous `out` [..., vocab], not overlapping x.
  void head_into(Tensor& out, const Tensor& x) const;
  // Untied models: a new head weight [vocab, D] (held, not copied) ...
  void set_output_weight(Tensor weight);
  // ... or one kept quantized (float32 models, inference only).
  void set_quantized_output_weight(QuantizedWeight weight);
  // [max_seq_len, D] added to the embeddings; undefined with RoPE.
  Tensor position_table() const;

 private:
  // The names listed at the top of this file, in that order.
  void list_members(MemberList& m) override;

  // forward_into with buffers of its own, after checking `cache` (when
  // given) against the model: the wrappers above.
  Tensor forward_whole(std::span<const int64_t> ids, int64_t batch_size, KVCache* cache,
                       bool last_only = false, DecoderModelRecord* record = nullptr) const;
  // T of B·T ids, checked.
  int64_t sequence_length(std::span<const int64_t> ids, int64_t batch_size) const;
  // Throws unless `cache` fits the model and batch, its layers agree and T
  // more positions fit.
  void check_cache(const KVCache& cache, int64_t batch_size, int64_t T) const;

  DecoderModelConfig config_;
  Embedding tok_embeddings_;
  std::optional<LearnedPositionalEncoding> learned_positions_;
  std::optional<SinusoidalPositionalEncoding> sinusoidal_positions_;
  std::vector<DecoderBlock> blocks_;
  std::variant<RMSNorm, LayerNorm> norm_;
  Tensor output_;                     // [vocab, D] when untied
  QuantizedWeight quantized_output_;  // used instead of output_ when set
  KVCacheStorage kv_cache_storage_ = KVCacheStorage::kFloat;
};

}  // namespace qkv::nn
