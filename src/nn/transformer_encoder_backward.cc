// The backward passes of nn::TransformerEncoderLayer and nn::TransformerEncoder:
// the forward's residual blocks (transformer_encoder.cc) in reverse order.
#include "nn/module_util.h"
#include "qkv/nn/transformer.h"

namespace qkv::nn {

Tensor TransformerEncoderLayer::backward(const Tensor& grad_output,
                                         const TransformerEncoderLayerRecord& record) {
  const TransformerEncoderLayerRecord& r = record;
  QKV_CHECK(r.self_attn.query.defined(),
            "TransformerEncoderLayer::backward: the record is empty (pass it to forward)");
  // sa_block: dropout1(self_attn(x, x, x)); x feeds query, key and value.
  auto sa_back = [&](const Tensor& grad) {
    return self_attn_.self_attention_backward(detail::dropout_grad(grad, r.keep1, r.dropout_p),
                                              r.self_attn);
  };
  // ff_block: dropout2(ff(x))
  auto ff_back = [&](const Tensor& grad) {
    return ff_.backward(detail::dropout_grad(grad, r.keep2, r.dropout_p), r.ff);
  };
  if (options_.norm_first) {
    // x = x + sa_block(norm1(x)); x = x + ff_block(norm2(x))
    const Tensor grad_mid = add(grad_output, norm2_.backward(ff_back(grad_output), r.norm2));
    return add(grad_mid, norm1_.backward(sa_back(grad_mid), r.norm1));
  }
  // x = norm1(x + sa_block(x)); x = norm2(x + ff_block(x))
  const Tensor grad_sum2 = norm2_.backward(grad_output, r.norm2);
  const Tensor grad_mid = add(grad_sum2, ff_back(grad_sum2));
  const Tensor grad_sum1 = norm1_.backward(grad_mid, r.norm1);
  return add(grad_sum1, sa_back(grad_sum1));
}

Tensor TransformerEncoder::backward(const Tensor& grad_output,
                                    const TransformerEncoderRecord& record) {
  QKV_CHECK(record.layers.size() == layers_.size(), "TransformerEncoder::backward: the record has ",
            record.layers.size(), " layers, the encoder ", layers_.size(),
            " (pass the record to forward)");
  // return norm(layer_n(... layer_1(src)))
  Tensor grad = norm_ ? norm_->backward(grad_output, record.norm) : grad_output;
  for (size_t i = layers_.size(); i-- > 0;) grad = layers_[i].backward(grad, record.layers[i]);
  return grad;
}

}  // namespace qkv::nn
