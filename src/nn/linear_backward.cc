// nn::Linear's backward.
#include "qkv/gradients.h"
#include "qkv/nn/linear.h"

namespace qkv::nn {

Tensor Linear::backward(const Tensor& grad_output, const LinearRecord& record) {
  QKV_CHECK(record.input.defined(), "Linear::backward: the record is empty (pass it to forward)");
  Shape out_shape = record.input.shape();
  out_shape.back() = options_.out_features;
  QKV_CHECK(grad_output.defined() && grad_output.shape() == out_shape,
            "Linear::backward: grad_output must have the output's shape ", shape_str(out_shape),
            ", got ", grad_output.defined() ? shape_str(grad_output.shape()) : "undefined");
  // y = x Wᵀ + b
  linear_backward(grad_output, record.input, weight_, bias_,
                  {.weight = grad_buffer("weight", weight_), .bias = grad_buffer("bias", bias_)});
  return linear_input_gradient(grad_output, weight_);
}

}  // namespace qkv::nn
