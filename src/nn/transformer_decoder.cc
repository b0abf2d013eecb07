// nn::TransformerDecoderLayer and nn::TransformerDecoder, following
// torch/nn/modules/transformer.py (torch 2.13).
#include "nn/module_util.h"
#include "nn/transformer_common.h"
#include "qkv/nn/transformer.h"

namespace qkv::nn {

namespace {

// memory must match tgt in batchedness and batch size.
void check_memory(const char* module, const Tensor& tgt, const Tensor& memory,
                  const TransformerLayerOptions& o) {
  detail::check_sequence(module, "memory", memory, o);
  QKV_CHECK(memory.dim() == tgt.dim(), module, ": tgt and memory must both be batched (3-D) or ",
            "both unbatched (2-D), got tgt ", shape_str(tgt.shape()), " and memory ",
            shape_str(memory.shape()));
  QKV_CHECK(detail::batch_size(memory, o.batch_first) == detail::batch_size(tgt, o.batch_first),
            module, ": tgt and memory must have the same batch size, got tgt ",
            shape_str(tgt.shape()), " and memory ", shape_str(memory.shape()),
            (o.batch_first ? " (batch_first)" : " (batch is dim 1 unless batch_first)"));
}

}  // namespace

// --- TransformerDecoderLayer -------------------------------------------------------

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerLayerOptions& options,
                                                 Generator* gen)
    : ModuleBase("TransformerDecoderLayer",
                 detail::checked_layer_options("TransformerDecoderLayer", options)),
      self_attn_(detail::attention_options(options), gen),
      multihead_attn_(detail::attention_options(options), gen),
      ff_(detail::feed_forward_options(options), gen),
      norm1_(detail::layer_norm_options(options)),
      norm2_(detail::layer_norm_options(options)),
      norm3_(detail::layer_norm_options(options)) {}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory,
                                        const TransformerDecoderLayerForward& args,
                                        TransformerDecoderLayerRecord* record) {
  const char* module = "TransformerDecoderLayer";
  detail::check_sequence(module, "tgt", tgt, options_);
  check_memory(module, tgt, memory, options_);
  const double p = options_.dropout;
  if (record) record->dropout_p = is_training() ? p : 0.0;
  // dropout(out), saving the keep mask in the record's `keep` when there is one.
  auto drop = [&](const Tensor& out, Tensor TransformerDecoderLayerRecord::* keep) {
    if (record)
      return detail::recorded_dropout(out, p, is_training(), generator(), &(record->*keep));
    return dropout(out, p, is_training(), generator());
  };

  // dropout(attention(x, kv, kv)), with its masks.
  auto attention_block = [&](MultiheadAttention& attention, const Tensor& x, const Tensor& kv,
                             const MultiheadAttentionForward& masks,
                             MultiheadAttentionRecord* attention_record,
                             Tensor TransformerDecoderLayerRecord::* keep) {
    return drop(attention.forward(x, kv, kv, masks, attention_record).output, keep);
  };
  const MultiheadAttentionForward self_masks{.key_padding_mask = args.tgt_key_padding_mask,
                                             .need_weights = false,
                                             .attn_mask = args.tgt_mask,
                                             .is_causal = args.tgt_is_causal};
  const MultiheadAttentionForward memory_masks{.key_padding_mask = args.memory_key_padding_mask,
                                               .need_weights = false,
                                               .attn_mask = args.memory_mask,
                                               .is_causal = args.memory_is_causal};
  // dropout1(self_attn(x, x, x))
  auto sa_block = [&](const Tensor& x) {
    return attention_block(self_attn_, x, x, self_masks, record ? &record->self_attn : nullptr,
                           &TransformerDecoderLayerRecord::keep1);
  };
  // dropout2(multihead_attn(x, memory, memory)): queries from the decoder,
  // keys and values from the encoder's output.
  auto mha_block = [&](const Tensor& x) {
    return attention_block(multihead_attn_, x, memory, memory_masks,
                           record ? &record->multihead_attn : nullptr,
                           &TransformerDecoderLayerRecord::keep2);
  };
  // dropout3(linear2(dropout(activation(linear1(x)))))
  auto ff_block = [&](const Tensor& x) {
    return drop(ff_.forward(x, record ? &record->ff : nullptr),
                &TransformerDecoderLayerRecord::keep3);
  };
  LayerNormRecord* norm1 = record ? &record->norm1 : nullptr;
  LayerNormRecord* norm2 = record ? &record->norm2 : nullptr;
  LayerNormRecord* norm3 = record ? &record->norm3 : nullptr;

  Tensor x = tgt;
  if (options_.norm_first) {
    x = add(x, sa_block(norm1_.forward(x, norm1)));
    x = add(x, mha_block(norm2_.forward(x, norm2)));
    x = add(x, ff_block(norm3_.forward(x, norm3)));
  } else {
    x = norm1_.forward(add(x, sa_block(x)), norm1);
    x = norm2_.forward(add(x, mha_block(x)), norm2);
    x = norm3_.forward(add(x, ff_block(x)), norm3);
  }
  return x;
}

// --- TransformerDecoder ------------------------------------------------------------

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory,
                                   const TransformerDecoderForward& args,
                                   TransformerDecoderRecord* record) {
  const TransformerLayerOptions& o = layers_.front().options();
  detail::check_sequence("TransformerDecoder", "tgt", tgt, o);
  const bool tgt_is_causal = detail::detect_is_causal_mask(
      args.tgt_mask, args.tgt_is_causal, detail::sequence_length(tgt, o.batch_first));
  if (record) *record = {.layers = std::vector<TransformerDecoderLayerRecord>(layers_.size())};
  Tensor x = tgt;
  for (size_t i = 0; i < layers_.size(); ++i)
    x = layers_[i].forward(x, memory,
                           {.tgt_mask = args.tgt_mask,
                            .memory_mask = args.memory_mask,
                            .tgt_key_padding_mask = args.tgt_key_padding_mask,
                            .memory_key_padding_mask = args.memory_key_padding_mask,
                            .tgt_is_causal = tgt_is_causal,
                            .memory_is_causal = args.memory_is_causal},
                           record ? &record->layers[i] : nullptr);
  return norm_ ? norm_->forward(x, record ? &record->norm : nullptr) : x;
}

void TransformerDecoderLayer::list_members(MemberList& m) {
  m.module("self_attn", self_attn_);
  m.module("multihead_attn", multihead_attn_);
  m.module("", ff_);  // linear1.*, linear2.*
  m.module("norm1", norm1_);
  m.module("norm2", norm2_);
  m.module("norm3", norm3_);
}

}  // namespace qkv::nn
