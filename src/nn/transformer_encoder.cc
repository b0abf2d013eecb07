// nn::TransformerEncoderLayer and nn::TransformerEncoder, following
// torch/nn/modules/transformer.py (torch 2.13) with the fast path off.
#include "nn/module_util.h"
#include "nn/transformer_common.h"
#include "qkv/nn/transformer.h"

namespace qkv::nn {

// --- TransformerEncoderLayer -------------------------------------------------------

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerLayerOptions& options,
                                                 Generator* gen)
    : ModuleBase("TransformerEncoderLayer",
                 detail::checked_layer_options("TransformerEncoderLayer", options)),
      self_attn_(detail::attention_options(options), gen),
      ff_(detail::feed_forward_options(options), gen),
      norm1_(detail::layer_norm_options(options)),
      norm2_(detail::layer_norm_options(options)) {}

Tensor TransformerEncoderLayer::forward(const Tensor& src,
                                        const TransformerEncoderLayerForward& args,
                                        TransformerEncoderLayerRecord* record) {
  detail::check_sequence("TransformerEncoderLayer", "src", src, options_);
  // Inference without masks runs the block's one inference path (BertModel's too).
  const bool inference = record == nullptr && (!is_training() || options_.dropout == 0.0);
  if (inference && options_.batch_first && src.dim() == 3 && !args.src_mask.defined() &&
      !args.src_key_padding_mask.defined()) {
    Workspace workspace;
    Tensor x = src.contiguous();
    forward_into(x, Tensor(), /*causal=*/false, workspace);
    return x;
  }
  LayerNormRecord* norm1 = record ? &record->norm1 : nullptr;
  LayerNormRecord* norm2 = record ? &record->norm2 : nullptr;
  if (record) record->dropout_p = is_training() ? options_.dropout : 0.0;
  Tensor x = src;
  if (options_.norm_first) {
    x = add(x, sa_block(norm1_.forward(x, norm1), args, record));
    x = add(x, ff_block(norm2_.forward(x, norm2), record));
  } else {
    x = norm1_.forward(add(x, sa_block(x, args, record)), norm1);
    x = norm2_.forward(add(x, ff_block(x, record)), norm2);
  }
  return x;
}

// dropout1(self_attn(x, x, x)).
Tensor TransformerEncoderLayer::sa_block(const Tensor& x,
                                         const TransformerEncoderLayerForward& args,
                                         TransformerEncoderLayerRecord* record) {
  const Tensor out = self_attn_
                         .forward(x, x, x,
                                  {.key_padding_mask = args.src_key_padding_mask,
                                   .need_weights = false,
                                   .attn_mask = args.src_mask,
                                   .is_causal = args.is_causal},
                                  record ? &record->self_attn : nullptr)
                         .output;
  if (record)
    return detail::recorded_dropout(out, options_.dropout, is_training(), generator(),
                                    &record->keep1);
  return dropout(out, options_.dropout, is_training(), generator());
}

// dropout2(linear2(dropout(activation(linear1(x))))).
Tensor TransformerEncoderLayer::ff_block(const Tensor& x, TransformerEncoderLayerRecord* record) {
  if (record)
    return detail::recorded_dropout(ff_.forward(x, &record->ff), options_.dropout, is_training(),
                                    generator(), &record->keep2);
  return dropout(ff_.forward(x), options_.dropout, is_training(), generator());
}

void TransformerEncoderLayer::forward_into(Tensor& x, const Tensor& keep, bool causal,
                                           Workspace& ws) const {
  const int64_t B = x.size(0), L = x.size(1), D = options_.d_model;
  const DType dt = options_.dtype;
  Tensor attended = ws.buffer(Workspace::kAttended, {B, L, D}, dt);
  Tensor hidden = ws.buffer(Workspace::kHidden, {B, L, options_.dim_feedforward}, dt);
  Tensor out = ws.buffer(Workspace::kOutput, {B, L, D}, dt);
  if (options_.norm_first) {
    // x = x + sa(norm1(x)); x = x + ff(norm2(x))
    Tensor normed = ws.buffer(Workspace::kNormed, {B, L, D}, dt);
    norm1_.forward_into(normed, x);
    self_attn_.self_attention_into(attended, normed, keep, causal, ws);
    add_into(attended, attended, x);
    norm2_.forward_into(normed, attended);
    ff_.forward_into(out, normed, hidden);
    add_into(out, out, attended);
  } else {
    // x = norm1(x + sa(x)); x = norm2(x + ff(x)). `out` is written after x's last read,
    // so x may be the previous layer's `out`.
    self_attn_.self_attention_into(attended, x, keep, causal, ws);
    norm1_.norm_in_place(attended, x);
    ff_.forward_into(out, attended, hidden);
    norm2_.norm_in_place(out, attended);
  }
  x = out;
}

// --- TransformerEncoder ------------------------------------------------------------

Tensor TransformerEncoder::forward(const Tensor& src, const TransformerEncoderForward& args,
                                   TransformerEncoderRecord* record) {
  const TransformerLayerOptions& o = layers_.front().options();
  detail::check_sequence("TransformerEncoder", "src", src, o);
  const bool is_causal = detail::detect_is_causal_mask(args.mask, args.is_causal,
                                                       detail::sequence_length(src, o.batch_first));
  if (record) *record = {.layers = std::vector<TransformerEncoderLayerRecord>(layers_.size())};
  Tensor x = src;
  for (size_t i = 0; i < layers_.size(); ++i)
    x = layers_[i].forward(x,
                           {.src_mask = args.mask,
                            .src_key_padding_mask = args.src_key_padding_mask,
                            .is_causal = is_causal},
                           record ? &record->layers[i] : nullptr);
  return norm_ ? norm_->forward(x, record ? &record->norm : nullptr) : x;
}

void TransformerEncoderLayer::list_members(MemberList& m) {
  m.module("self_attn", self_attn_);
  m.module("", ff_);  // linear1.*, linear2.*
  m.module("norm1", norm1_);
  m.module("norm2", norm2_);
}

}  // namespace qkv::nn
