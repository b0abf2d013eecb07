// The backward passes of nn::LayerNorm and nn::RMSNorm.
#include "qkv/gradients.h"
#include "qkv/nn/layer_norm.h"
#include "qkv/nn/rms_norm.h"

namespace qkv::nn {

namespace {

void check_backward(const char* module, const Tensor& grad_output, const Tensor& input) {
  QKV_CHECK(input.defined(), module, "::backward: the record is empty (pass it to forward)");
  QKV_CHECK(grad_output.defined() && grad_output.shape() == input.shape(), module,
            "::backward: grad_output must have the input's shape ", shape_str(input.shape()),
            ", got ", grad_output.defined() ? shape_str(grad_output.shape()) : "undefined");
}

}  // namespace

Tensor LayerNorm::backward(const Tensor& grad_output, const LayerNormRecord& record) {
  check_backward("LayerNorm", grad_output, record.input);
  Tensor grad_input = Tensor::zeros(record.input.shape(), record.input.dtype());
  // y = (x − mean) / √(var + eps) · weight + bias
  layer_norm_backward(grad_output, record.input, options_.normalized_shape, weight_, bias_,
                      options_.eps,
                      {.input = grad_input,
                       .weight = grad_buffer("weight", weight_),
                       .bias = grad_buffer("bias", bias_)});
  return grad_input;
}

Tensor RMSNorm::backward(const Tensor& grad_output, const RMSNormRecord& record) {
  check_backward("RMSNorm", grad_output, record.input);
  Tensor grad_input = Tensor::zeros(record.input.shape(), record.input.dtype());
  // y = x / √(mean(x²) + eps) · weight
  rms_norm_backward(grad_output, record.input, options_.normalized_shape, weight_, options_.eps,
                    {.input = grad_input, .weight = grad_buffer("weight", weight_)});
  return grad_input;
}

}  // namespace qkv::nn
