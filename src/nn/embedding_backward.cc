// nn::Embedding's backward.
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
  embedding_backward(grad_output, record.ids, record.shape, weight_, grad_buffer("weight", weight_),
                     options_.padding_idx);
}

}  // namespace qkv::nn
