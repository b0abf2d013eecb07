#include "tasks/recall_model.h"

#include <string>

#include "qkv/attention.h"
#include "qkv/error.h"
#include "qkv/functional.h"
#include "qkv/gradients.h"
#include "qkv/masks.h"
#include "tasks/model_parameters.h"

namespace qkv::train {

RecallModel::RecallModel(const RecallTask& task, const RecallModelOptions& options)
    : options_(options),
      length_(task.sequence_length()),
      num_classes_(task.num_classes()),
      gen_(options.seed),
      tokens_({.num_embeddings = task.vocab_size(), .embedding_dim = options.d_model}, &gen_),
      positions_({.num_embeddings = task.sequence_length(), .embedding_dim = options.d_model},
                 &gen_),
      head_({.in_features =
                 options.mixer == Mixer::kAttention ? options.d_model : options.dim_feedforward,
             .out_features = task.num_classes()},
            &gen_) {
  QKV_CHECK(options.d_model >= 1 && options.dim_feedforward >= 1,
            "RecallModel: d_model and dim_feedforward must be >= 1, got ", options.d_model, " and ",
            options.dim_feedforward);
  if (options.mixer == Mixer::kAttention) {
    QKV_CHECK(options.num_layers >= 1, "RecallModel: num_layers must be >= 1, got ",
              options.num_layers);
    encoder_.emplace(
        nn::TransformerEncoderOptions{.layer = {.d_model = options.d_model,
                                                .nhead = options.nhead,
                                                .dim_feedforward = options.dim_feedforward,
                                                .dropout = 0.0,
                                                .batch_first = true,
                                                .norm_first = options.norm_first},
                                      .num_layers = options.num_layers},
        &gen_);
    if (options.causal) {
      encoder_args_.mask = keep_mask_to_additive(causal_mask(length_, length_));
      encoder_args_.is_causal = true;
    }
  } else {
    hidden_.emplace(
        nn::LinearOptions{.in_features = options.d_model, .out_features = options.dim_feedforward},
        &gen_);
  }
}

// -> [B, L, D]: token embedding + position embedding.
Tensor RecallModel::embed(const RecallBatch& batch, RecallModelRecord* record) const {
  QKV_CHECK(batch.length == length_, "RecallModel: sequences of length ", length_,
            " expected (the task it was built for), got ", batch.length);
  QKV_CHECK(static_cast<int64_t>(batch.tokens.size()) == batch.batch * batch.length,
            "RecallModel: batch.tokens must hold batch * length = ", batch.batch * batch.length,
            " ids, got ", batch.tokens.size());
  const Shape shape = {batch.batch, batch.length};
  std::vector<int64_t> position_ids(batch.tokens.size());
  for (size_t i = 0; i < position_ids.size(); ++i) position_ids[i] = i % batch.length;
  const Tensor tok = tokens_.forward(batch.tokens, shape, record ? &record->tokens : nullptr);
  const Tensor pos = positions_.forward(position_ids, shape, record ? &record->positions : nullptr);
  if (record != nullptr) record->embedded = tok.shape();
  return add(tok, pos);
}

Tensor RecallModel::forward(const RecallBatch& batch, RecallModelRecord* record) {
  const Tensor x = embed(batch, record);  // [B, L, D]
  const int64_t l = batch.length;
  if (encoder_) {
    const Tensor y = encoder_->forward(x, encoder_args_, record ? &record->encoder : nullptr);
    // The last position holds the queried key: classify from there.
    const Tensor last = y.select(1, l - 1).contiguous();  // [B, D]
    return head_.forward(last, record ? &record->head : nullptr);
  }
  const Tensor pooled = mean(x, 1);                                           // [B, D]
  Tensor pre = hidden_->forward(pooled, record ? &record->hidden : nullptr);  // [B, F]
  if (record != nullptr) record->hidden_pre = pre;
  return head_.forward(relu(pre), record ? &record->head : nullptr);
}

void RecallModel::backward(const Tensor& grad_logits, const RecallModelRecord& record) {
  QKV_CHECK(record.embedded.size() == 3,
            "RecallModel::backward: the record is empty; pass one "
            "to forward() first");
  const int64_t b = record.embedded[0], l = record.embedded[1], d = record.embedded[2];
  QKV_CHECK(grad_logits.shape() == Shape({b, num_classes_}),
            "RecallModel::backward: grad_logits must be [", b, ", ", num_classes_, "], got ",
            shape_str(grad_logits.shape()));
  Tensor grad_x;
  if (encoder_) {
    const Tensor grad_last = head_.backward(grad_logits, record.head);  // [B, D]
    Tensor grad_y = Tensor::zeros(record.embedded);
    grad_y.select(1, l - 1).copy_from(grad_last);
    grad_x = encoder_->backward(grad_y, record.encoder).contiguous();
  } else {
    const Tensor grad_h = head_.backward(grad_logits, record.head);  // [B, F]
    Tensor grad_pre = Tensor::zeros(record.hidden_pre.shape());
    relu_backward(grad_h, record.hidden_pre, grad_pre);
    const Tensor grad_pooled = hidden_->backward(grad_pre, record.hidden).contiguous();  // [B, D]
    // The mean spreads its gradient evenly over the L positions.
    grad_x = Tensor::empty(record.embedded);
    const float* gp = grad_pooled.data<float>();
    float* gx = grad_x.data<float>();
    for (int64_t i = 0; i < b; ++i)
      for (int64_t t = 0; t < l; ++t)
        for (int64_t j = 0; j < d; ++j) gx[(i * l + t) * d + j] = gp[i * d + j] / l;
  }
  tokens_.backward(grad_x, record.tokens);
  positions_.backward(grad_x, record.positions);
}

std::vector<nn::Parameter> RecallModel::parameters() {
  std::vector<nn::Parameter> out = embedding_parameters(tokens_, positions_);
  if (encoder_) nn::append_parameters(out, "encoder", encoder_->parameters());
  if (hidden_) nn::append_parameters(out, "hidden", hidden_->parameters());
  nn::append_parameters(out, "head", head_.parameters());
  return out;
}

void RecallModel::zero_grad() { zero_gradients(parameters()); }

int64_t RecallModel::num_parameters() { return count_parameters(parameters()); }

std::vector<Tensor> RecallModel::attention_weights(const RecallBatch& batch) {
  QKV_CHECK(encoder_.has_value(),
            "RecallModel::attention_weights: the mean-pool baseline has "
            "no attention");
  // The record keeps each layer's per-head queries and keys as the attention
  // saw them (after norm1 in pre-norm layers); the weights are recomputed from them.
  RecallModelRecord record;
  encoder_->forward(embed(batch, nullptr), encoder_args_, &record.encoder);
  std::vector<Tensor> weights;
  for (const nn::TransformerEncoderLayerRecord& layer : record.encoder.layers) {
    const nn::MultiheadAttentionRecord& a = layer.self_attn;
    SdpaOptions sdpa = a.sdpa;
    sdpa.need_weights = true;
    sdpa.dropout_p = 0.0;
    weights.push_back(scaled_dot_product_attention(a.q, a.k, a.v, sdpa).weights);
  }
  return weights;
}

}  // namespace qkv::train
