// The small classifiers trained on the recall task (recall_task.h):
//
//   kAttention: token embedding + learned position embedding, an
//     nn::TransformerEncoder (post-norm by default, causal, batch_first, no
//     dropout), and an nn::Linear head on the last position (the queried key)
//     -> value logits.
//   kMeanPool: the baseline without attention. The same embeddings are
//     averaged over the positions, then Linear -> ReLU -> Linear -> logits.
//     Adding a position vector and averaging leaves the bag of tokens (plus a
//     constant), which says which key is asked (it appears twice) but not
//     which value stands next to it: its accuracy is capped at 1/k.
//
//   train::RecallModel model(task, {.mixer = train::Mixer::kAttention});
//   train::RecallModelRecord rec;
//   Tensor logits = model.forward(batch, &rec);           // [B, num_values]
//   ... cross_entropy_backward(..., grad_logits) ...
//   model.backward(grad_logits, rec);                     // into parameters()' grads
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "qkv/generator.h"
#include "qkv/nn/embedding.h"
#include "qkv/nn/linear.h"
#include "qkv/nn/parameter.h"
#include "qkv/nn/transformer.h"
#include "qkv/tensor.h"
#include "tasks/recall_task.h"

namespace qkv::train {

enum class Mixer { kAttention, kMeanPool };

struct RecallModelOptions {
  Mixer mixer = Mixer::kAttention;
  int64_t d_model = 64;
  int64_t nhead = 4;
  int64_t num_layers = 2;
  int64_t dim_feedforward = 128;  // also the hidden width of the mean-pool baseline
  // Post-norm (torch's default) learned the task here in far fewer steps than
  // pre-norm, which stayed at the bag-of-tokens plateau for 1000+ steps.
  bool norm_first = false;
  // Each position attends only to itself and earlier ones (as in a decoder).
  // A value then cannot see the key that follows it, so the key's position is
  // the only one that comes to hold both, and the query has to look there —
  // the pattern §6.2 draws. Without it the model may as well look at values.
  bool causal = true;
  uint64_t seed = 0;  // initialisation
};

// What forward saves for backward.
struct RecallModelRecord {
  nn::EmbeddingRecord tokens, positions;
  nn::TransformerEncoderRecord encoder;  // kAttention
  nn::LinearRecord head, hidden;         // hidden: kMeanPool's first Linear
  Tensor hidden_pre;                     // kMeanPool: the first Linear's output, before ReLU
  Shape embedded;                        // [B, L, D]
};

class RecallModel {
 public:
  RecallModel(const RecallTask& task, const RecallModelOptions& options);

  // batch.tokens [B, L]  ->  logits [B, num_values]
  // With a record, also saves what backward() needs (nullptr: inference).
  Tensor forward(const RecallBatch& batch, RecallModelRecord* record = nullptr);

  // Adds every parameter's gradient into its buffer (see parameters()).
  // grad_logits: [B, num_values]
  void backward(const Tensor& grad_logits, const RecallModelRecord& record);

  // Every trainable tensor, named "tokens.weight", "encoder.layers.0....", "head.weight", ...,
  // sharing the modules' values and gradient buffers.
  std::vector<nn::Parameter> parameters();
  void zero_grad();

  // The self-attention weights of every layer (kAttention only), per head:
  // entry l is [B, H, L, L], row = query position, column = key position.
  std::vector<Tensor> attention_weights(const RecallBatch& batch);

  const RecallModelOptions& options() const { return options_; }
  int64_t num_parameters();

 private:
  Tensor embed(const RecallBatch& batch, RecallModelRecord* record) const;

  RecallModelOptions options_;
  int64_t length_;
  int64_t num_classes_;
  Generator gen_;
  nn::Embedding tokens_;
  nn::Embedding positions_;
  std::optional<nn::TransformerEncoder> encoder_;  // kAttention
  nn::TransformerEncoderForward encoder_args_;     // the causal mask, or none
  std::optional<nn::Linear> hidden_;               // kMeanPool: D -> dim_feedforward
  nn::Linear head_;                                // D (kMeanPool: dim_feedforward) -> num_values
};

}  // namespace qkv::train
