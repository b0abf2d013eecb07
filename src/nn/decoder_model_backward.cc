// nn::DecoderModel for training: the backward that walks the recorded
// forward in reverse.
#include <string>
#include <vector>

#include "nn/decoder_variants.h"
#include "nn/module_util.h"
#include "qkv/functional.h"
#include "qkv/gradients.h"
#include "qkv/linear.h"
#include "qkv/nn/decoder_model.h"

namespace qkv::nn {

void DecoderModel::backward(const Tensor& grad_logits, const DecoderModelRecord& record) {
  const DecoderModelRecord& r = record;
  const DecoderModelConfig& c = config_;
  const char* m = "DecoderModel::backward";
  QKV_CHECK(r.head_input.defined() && r.blocks.size() == blocks_.size(), m,
            ": the record is empty or from another model (pass it to forward)");
  // The forward with a record runs every option (qkv explore reads its
  // records); the backward of these is not written.
  QKV_CHECK(c.embedding_scale == 1.0 && c.final_logit_softcap == 0.0, m,
            ": training with embedding_scale != 1 or final_logit_softcap is not supported (their "
            "backward is not written)");
  const Shape logits_shape{r.batch_size, r.length, c.vocab_size};
  QKV_CHECK(grad_logits.defined() && grad_logits.shape() == logits_shape, m,
            ": grad_logits must have the logits' shape ", shape_str(logits_shape), ", got ",
            grad_logits.defined() ? shape_str(grad_logits.shape()) : "undefined");
  QKV_CHECK_TYPE(grad_logits.dtype() == c.dtype, m, ": grad_logits must have the model's dtype ",
                 dtype_name(c.dtype), ", got ", dtype_name(grad_logits.dtype()));

  // logits = linear(norm(x), output_weight()); tied, the weight is the embedding table.
  const Tensor grad_head_weight = c.tie_embeddings ? tok_embeddings_.parameters().front().grad
                                                   : grad_buffer("output.weight", output_);
  Tensor grad_head_input = Tensor::zeros(r.head_input.shape(), c.dtype);
  linear_backward(grad_logits, r.head_input, output_weight(), Tensor(),
                  {.input = grad_head_input, .weight = grad_head_weight});
  Tensor grad_x = detail::run_backward(norm_, grad_head_input, r.norm);

  for (size_t i = blocks_.size(); i-- > 0;) grad_x = blocks_[i].backward(grad_x, r.blocks[i]);

  // x = x + pos_embeddings.weight[0 : T] (broadcast over the batch); the
  // sinusoidal table is fixed.
  if (learned_positions_) {
    Tensor grad_rows = learned_positions_->parameters().front().grad.slice(0, 0, r.length);
    grad_rows.copy_from(add(grad_rows, sum(grad_x, 0)));
  }
  // x = tok_embeddings(ids)
  tok_embeddings_.backward(grad_x, r.tok_embeddings);
}

}  // namespace qkv::nn
