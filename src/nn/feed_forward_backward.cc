// The backward passes of FeedForward and SwiGLUFeedForward.
#include "nn/module_util.h"
#include "qkv/gradients.h"
#include "qkv/nn/feed_forward.h"

namespace qkv::nn {

Tensor FeedForward::backward(const Tensor& grad_output, const FeedForwardRecord& record) {
  QKV_CHECK(record.hidden.defined(),
            "FeedForward::backward: the record is empty (pass it to forward)");
  // y = linear2(dropout(activation(linear1(x))))
  const Tensor grad_dropped = linear2_.backward(grad_output, record.linear2);
  const Tensor grad_activated =
      detail::dropout_grad(grad_dropped, record.keep_mask, record.dropout_p);
  Tensor grad_hidden = Tensor::zeros(record.hidden.shape(), record.hidden.dtype());
  activate_backward(grad_activated, record.hidden, options_.activation, grad_hidden);
  return linear1_.backward(grad_hidden, record.linear1);
}

Tensor SwiGLUFeedForward::backward(const Tensor& grad_output,
                                   const SwiGLUFeedForwardRecord& record) {
  QKV_CHECK(record.gate.defined(),
            "SwiGLUFeedForward::backward: the record is empty (pass it to forward)");
  // y = dropout(w2(activation(w1 x) ⊙ w3 x))
  const Tensor grad_w2_out = detail::dropout_grad(grad_output, record.keep_mask, record.dropout_p);
  const Tensor grad_gated = w2_.backward(grad_w2_out, record.w2);
  const Tensor activated = activate(record.gate, options_.activation);
  Tensor grad_activated = Tensor::zeros(record.gate.shape(), record.gate.dtype());
  Tensor grad_up = Tensor::zeros(record.up.shape(), record.up.dtype());
  mul_backward(grad_gated, activated, record.up, {.a = grad_activated, .b = grad_up});
  Tensor grad_gate = Tensor::zeros(record.gate.shape(), record.gate.dtype());
  activate_backward(grad_activated, record.gate, options_.activation, grad_gate);
  return add(w1_.backward(grad_gate, record.w1), w3_.backward(grad_up, record.w3));
}

}  // namespace qkv::nn
