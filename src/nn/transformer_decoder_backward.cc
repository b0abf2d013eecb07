// The backward passes of nn::TransformerDecoderLayer and nn::TransformerDecoder:
// the forward's residual blocks (transformer_decoder.cc) in reverse order.
#include "nn/module_util.h"
#include "qkv/nn/transformer.h"

namespace qkv::nn {

TransformerDecoderInputGradients TransformerDecoderLayer::backward(
    const Tensor& grad_output, const TransformerDecoderLayerRecord& record) {
  const TransformerDecoderLayerRecord& r = record;
  QKV_CHECK(r.self_attn.query.defined() && r.multihead_attn.query.defined(),
            "TransformerDecoderLayer::backward: the record is empty (pass it to forward)");
  Tensor grad_memory;
  // sa_block: dropout1(self_attn(x, x, x)); x feeds query, key and value.
  auto sa_back = [&](const Tensor& grad) {
    return self_attn_.self_attention_backward(detail::dropout_grad(grad, r.keep1, r.dropout_p),
                                              r.self_attn);
  };
  // mha_block: dropout2(multihead_attn(x, memory, memory))
  auto mha_back = [&](const Tensor& grad) {
    const MultiheadAttentionInputGradients g = multihead_attn_.backward(
        detail::dropout_grad(grad, r.keep2, r.dropout_p), r.multihead_attn);
    grad_memory = add(g.key, g.value);
    return g.query;
  };
  // ff_block: dropout3(ff(x))
  auto ff_back = [&](const Tensor& grad) {
    return ff_.backward(detail::dropout_grad(grad, r.keep3, r.dropout_p), r.ff);
  };
  Tensor grad;
  if (options_.norm_first) {
    // x = x + sa_block(norm1(x)); x = x + mha_block(norm2(x)); x = x + ff_block(norm3(x))
    grad = add(grad_output, norm3_.backward(ff_back(grad_output), r.norm3));
    grad = add(grad, norm2_.backward(mha_back(grad), r.norm2));
    grad = add(grad, norm1_.backward(sa_back(grad), r.norm1));
  } else {
    // x = norm1(x + sa_block(x)); x = norm2(x + mha_block(x)); x = norm3(x + ff_block(x))
    grad = norm3_.backward(grad_output, r.norm3);
    grad = norm2_.backward(add(grad, ff_back(grad)), r.norm2);
    grad = norm1_.backward(add(grad, mha_back(grad)), r.norm1);
    grad = add(grad, sa_back(grad));
  }
  return {.tgt = grad, .memory = grad_memory};
}

TransformerDecoderInputGradients TransformerDecoder::backward(
    const Tensor& grad_output, const TransformerDecoderRecord& record) {
  QKV_CHECK(record.layers.size() == layers_.size(), "TransformerDecoder::backward: the record has ",
            record.layers.size(), " layers, the decoder ", layers_.size(),
            " (pass the record to forward)");
  // return norm(layer_n(... layer_1(tgt, memory), memory))
  TransformerDecoderInputGradients out;
  out.tgt = norm_ ? norm_->backward(grad_output, record.norm) : grad_output;
  for (size_t i = layers_.size(); i-- > 0;) {
    TransformerDecoderInputGradients g = layers_[i].backward(out.tgt, record.layers[i]);
    out.tgt = g.tgt;
    out.memory = detail::add_grads(out.memory, g.memory);
  }
  return out;
}

}  // namespace qkv::nn
