// models::BertModel — the BERT family of encoders (BERT, MiniLM, all-MiniLM-L6-v2, ...),
// computing what Hugging Face transformers' BertModel computes: its last hidden state.
//
//   x = LayerNorm(word_embeddings[id] + token_type_embeddings[type] + position_embeddings[pos])
//   for each of the N layers (post-norm, tutorial §8.1):
//     x = LayerNorm(x + attention.output.dense(multi-head self-attention(x, padding mask)))
//     x = LayerNorm(x + output.dense(act(intermediate.dense(x))))
//
//   auto model = models::BertModel::from_pretrained("models/all-MiniLM-L6-v2");
//   Tensor hidden = model.forward(ids, mask, 2);   // ids, mask: [2, L] row-major -> [2, L, 384]
//
// Files (a Hugging Face model directory):
//   config.json        BertConfig below; unknown fields are ignored, known ones checked
//   model.safetensors  Hugging Face's tensor names, with or without the "bert." prefix:
//     embeddings.{word,position,token_type}_embeddings.weight, embeddings.LayerNorm.{weight,bias}
//     encoder.layer.<i>.attention.self.{query,key,value}.{weight,bias}
//     encoder.layer.<i>.attention.output.dense.{weight,bias}, ...attention.output.LayerNorm.*
//     encoder.layer.<i>.intermediate.dense.*, encoder.layer.<i>.output.dense.*,
//     encoder.layer.<i>.output.LayerNorm.*
//   Tensors outside embeddings.* and encoder.* (the pooler, heads of derived
//   models) are ignored; one inside them that BertModel does not use is an
//   error naming it, and the buffers embeddings.position_ids and
//   embeddings.token_type_ids must hold transformers' values (0, 1, ... and 0s).
//
// Differences from transformers: a row whose attention_mask is all 0 has no key
// to attend to and gets attention output 0 (transformers spreads it uniformly
// over the padding).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "qkv/generator.h"
#include "qkv/nn/state_dict.h"
#include "qkv/nn/transformer.h"
#include "qkv/precision.h"
#include "qkv/tensor.h"

namespace qkv::models {

// The feed-forward activation, by config.json's "hidden_act".
enum class BertActivation {
  kGelu,      // "gelu": x·Φ(x) with erf
  kGeluTanh,  // "gelu_new", "gelu_pytorch_tanh", "gelu_fast": the tanh approximation
  kRelu,      // "relu"
  kSilu,      // "silu", "swish"
};

// "gelu" -> kGelu, ...; anything else is an Error listing the accepted names.
BertActivation bert_activation_from_string(const std::string& name);
// The canonical name: "gelu", "gelu_new", "relu" or "silu".
const char* bert_activation_name(BertActivation activation);

// The fields of a Hugging Face BertConfig that shape the model.
struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;  // D
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;  // H; head dim E = D / H
  int64_t intermediate_size = 3072;
  int64_t max_position_embeddings = 512;  // longest input
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  BertActivation hidden_act = BertActivation::kGelu;

  // Parses config.json text. vocab_size, hidden_size, num_hidden_layers,
  // num_attention_heads and intermediate_size are required; the others
  // default to transformers' values. Every field read is checked (type and
  // range, D divisible by H, model_type "bert", position_embedding_type
  // "absolute", not a decoder, no pruned_heads); errors name `source` and the
  // field. Other fields (dropout, initializer_range, ...) do not change the
  // last hidden state and are ignored.
  static BertConfig from_json(const std::string& text, const std::string& source = "config.json");
  // Reads and parses the file.
  static BertConfig from_file(const std::filesystem::path& config_json);

  // Throws an Error naming `source` and the field when a value is out of range.
  void validate(const std::string& source = "BertConfig") const;
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
};

class BertModel {
 public:
  // Random weights (normal, std 0.02 as transformers initialises them; LayerNorm
  // weight 1, bias 0), drawn from `gen` (default_generator() when null).
  explicit BertModel(const BertConfig& config, Generator* gen = nullptr);

  // config.json and model.safetensors of a model directory.
  static BertModel from_pretrained(const std::filesystem::path& model_dir);
  // The weights of `config` from a safetensors file; errors name the file and
  // the missing or mis-shaped tensor.
  static BertModel load(const BertConfig& config, const std::filesystem::path& safetensors);

  // ids, attention_mask, token_type_ids: [B, L] row-major with B = batch_size.
  // attention_mask: 1 (any non-zero) for real tokens, 0 for padding; empty = all real.
  // token_type_ids: empty = all 0.
  //   ->  last hidden state [B, L, D] float32
  Tensor forward(std::span<const int64_t> ids, std::span<const int64_t> attention_mask,
                 int64_t batch_size, std::span<const int64_t> token_type_ids = {}) const;

  // forward(), also keeping what each layer's self-attention computed with:
  // attention_records[i] holds layer i's heads q, k, v [B, H, L, E] and its
  // SDPA options (the padding mask), from which scaled_dot_product_attention
  // with need_weights gives the weights transformers' output_attentions=True
  // returns (qkv/viz/explore.h). Runs each attention twice; float32 only.
  Tensor forward_recording_attention(std::span<const int64_t> ids,
                                     std::span<const int64_t> attention_mask, int64_t batch_size,
                                     std::span<const int64_t> token_type_ids,
                                     std::vector<nn::MultiheadAttentionRecord>& attention_records);

  // Parameters by transformers' names (no "bert." prefix) and in its order, as shared views.
  nn::StateDict state_dict() const;
  // Strict: exactly the names and shapes of state_dict(). A failed load changes nothing.
  void load_state_dict(const std::map<std::string, Tensor>& state);

  const BertConfig& config() const { return config_; }
  int64_t num_parameters() const;

  // The arithmetic of the encoder layers (precision.h): kFloat32 (torch's
  // numbers), kBFloat16 or kInt8 (weights converted now, once). Embeddings,
  // norms, softmax and the hidden states between layers stay float32.
  void set_precision(Precision precision);
  Precision precision() const { return precision_; }
  // int8 calibration of the encoder layers (nn::Module::record_input_ranges):
  // float32 forward passes between on and off note the ranges that
  // set_precision(kInt8) smooths the weights against.
  void record_input_ranges(bool on = true);

 private:
  BertModel(const BertConfig& config, Generator* gen, bool random);

  // forward(), calling before_layer(i, x) (when set) with the input of layer i.
  using BeforeLayer = std::function<void(size_t layer, const Tensor& x)>;
  Tensor run(const char* fn, std::span<const int64_t> ids, std::span<const int64_t> attention_mask,
             int64_t batch_size, std::span<const int64_t> token_type_ids,
             const BeforeLayer& before_layer) const;

  BertConfig config_;
  Precision precision_ = Precision::kFloat32;
  Tensor word_embeddings_;         // [vocab_size, D]
  Tensor position_embeddings_;     // [max_position_embeddings, D]
  Tensor token_type_embeddings_;   // [type_vocab_size, D]
  nn::LayerNorm embeddings_norm_;  // embeddings.LayerNorm [D]
  // torch's post-norm encoder layer is BERT's: attention.self.{query,key,value}
  // are the rows of self_attn's packed in_proj, attention.output.dense its
  // out_proj, intermediate.dense and output.dense linear1 and linear2, the two
  // LayerNorms norm1 and norm2 (batch-first, eval mode).
  std::vector<nn::TransformerEncoderLayer> layers_;
};

}  // namespace qkv::models
