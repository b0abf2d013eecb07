// nn::Embedding's backward and gradient buffer.
#include "nn/module_util.h"
#include "qkv/gradients.h"
#include "qkv/nn/embedding.h"

namespace qkv::nn {

void Embedding::backward(const Tensor& grad_output, const EmbeddingRecord& record) {
  Shape out_shape = record.shape;
  out_shape.push_back(options_.embedding_dim);
  QKV_CHECK(grad_output.defined() && grad_output.shape() == out_shape,
            "Embedding::backward: grad_output must have the output's shape ", shape_str(out_shape),
            ", got ", grad_output.defined() ? shape_str(grad_output.shape()) : "undefined");
  // out[i] = weight[ids[i]]
  embedding_backward(grad_output, record.ids, record.shape, weight_,
                     detail::grad_buffer(grads_, "weight", weight_), options_.padding_idx);
}

std::vector<Parameter> Embedding::parameters() {
  return detail::own_parameters(state_dict(), grads_);
}

void Embedding::zero_grad() { detail::zero_grads(grads_); }

}  // namespace qkv::nn
