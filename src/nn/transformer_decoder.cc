// nn::TransformerDecoderLayer and nn::TransformerDecoder, following
// torch/nn/modules/transformer.py (torch 2.13).
#include "nn/module_util.h"
#include "nn/transformer_common.h"
#include "qkv/nn/transformer.h"
#include "qkv/nn/transformer_decoding.h"

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
  return block(tgt, sa_block, mha_block, ff_block, record);
}

template <class SelfAttentionBlock, class CrossAttentionBlock, class FeedForwardBlock>
Tensor TransformerDecoderLayer::block(const Tensor& tgt, const SelfAttentionBlock& sa,
                                      const CrossAttentionBlock& ca, const FeedForwardBlock& ff,
                                      TransformerDecoderLayerRecord* record) const {
  LayerNormRecord* norm1 = record ? &record->norm1 : nullptr;
  LayerNormRecord* norm2 = record ? &record->norm2 : nullptr;
  LayerNormRecord* norm3 = record ? &record->norm3 : nullptr;
  Tensor x = tgt;
  if (options_.norm_first) {
    x = add(x, sa(norm1_.forward(x, norm1)));
    x = add(x, ca(norm2_.forward(x, norm2)));
    x = add(x, ff(norm3_.forward(x, norm3)));
  } else {
    x = norm1_.forward(add(x, sa(x)), norm1);
    x = norm2_.forward(add(x, ca(x)), norm2);
    x = norm3_.forward(add(x, ff(x)), norm3);
  }
  return x;
}

MultiheadAttentionKeysValues TransformerDecoderLayer::project_memory(const Tensor& memory) const {
  return multihead_attn_.project_keys_values(memory, memory);
}

Tensor TransformerDecoderLayer::step(const Tensor& x, TransformerDecoderCache& cache,
                                     int64_t layer) const {
  QKV_CHECK(!is_training() || options_.dropout == 0.0, "TransformerDecoderLayer::step: the layer ",
            "is in training mode with dropout ", options_.dropout, "; call eval() before decoding");
  // No dropout: the sublayers alone.
  auto sa = [&](const Tensor& h) {
    return self_attn_.self_attention_cached(h, cache.self_attn, layer, cache.workspace);
  };
  auto ca = [&](const Tensor& h) {
    return multihead_attn_.attend(h, cache.memory[layer], cache.memory_mask, cache.workspace);
  };
  auto ff = [&](const Tensor& h) { return ff_.forward(h); };
  return block(x, sa, ca, ff, nullptr);
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

Tensor TransformerDecoder::step(const Tensor& tgt, TransformerDecoderCache& cache) const {
  const char* fn = "TransformerDecoder::step";
  const TransformerLayerOptions& o = layers_.front().options();
  const int64_t B = cache.self_attn.options().batch_size;
  QKV_CHECK(tgt.defined() && tgt.dim() == 3 && tgt.size(2) == o.d_model, fn,
            ": tgt must be batch-first [B, T, d_model=", o.d_model, "], got ",
            tgt.defined() ? shape_str(tgt.shape()) : std::string("undefined"));
  QKV_CHECK_TYPE(tgt.dtype() == o.dtype, fn, ": tgt must have the decoder's dtype ",
                 dtype_name(o.dtype), ", got ", dtype_name(tgt.dtype()));
  QKV_CHECK(tgt.size(0) == B, fn, ": tgt has batch size ", tgt.size(0), " but the memory ", B);
  QKV_CHECK(tgt.size(1) > 0 && tgt.size(1) <= cache.self_attn.remaining(), fn, ": ", tgt.size(1),
            " new positions do not fit: ", cache.self_attn.length(),
            " of max_len = ", cache.self_attn.max_len(), " are used");
  QKV_CHECK(cache.memory.size() == layers_.size(), fn, ": the cache holds the memory of ",
            cache.memory.size(), " layers, the decoder has ", layers_.size());
  Tensor x = tgt;
  for (size_t i = 0; i < layers_.size(); ++i)
    x = layers_[i].step(x, cache, static_cast<int64_t>(i));
  return norm_ ? norm_->forward(x) : x;
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
