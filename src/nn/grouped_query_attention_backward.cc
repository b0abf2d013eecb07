// nn::GroupedQueryAttention for training: the backward that walks the
// recorded forward's steps in reverse.
#include "nn/module_util.h"
#include "qkv/functional.h"
#include "qkv/masks.h"
#include "qkv/nn/grouped_query_attention.h"

namespace qkv::nn {

using detail::merge_heads;
using detail::split_heads;

Tensor GroupedQueryAttention::backward(const Tensor& grad_output,
                                       const GroupedQueryAttentionRecord& record) {
  const GroupedQueryAttentionRecord& r = record;
  const auto& o = options_;
  const char* m = "GroupedQueryAttention::backward";
  QKV_CHECK(r.q_proj.input.defined() && r.o_proj.input.defined(), m,
            ": the record is empty (pass it to forward)");
  // A record of qk_norm's forward reads fine (qkv explore), but not backward.
  QKV_CHECK(!o.qk_norm, m,
            ": training with qk_norm is not supported (its backward is not written)");
  const Tensor& x = r.q_proj.input;
  QKV_CHECK(grad_output.defined() && grad_output.shape() == x.shape(), m,
            ": grad_output must have the output's shape ", shape_str(x.shape()), ", got ",
            grad_output.defined() ? shape_str(grad_output.shape()) : "undefined");
  QKV_CHECK_TYPE(grad_output.dtype() == o.dtype, m, ": grad_output must have the module's dtype ",
                 dtype_name(o.dtype), ", got ", dtype_name(grad_output.dtype()));

  // return o_proj_.forward(merged)
  const Tensor grad_merged = o_proj_.backward(grad_output, r.o_proj);  // [B, L, H·E]
  // merged = heads.transpose(1, 2).reshape({B, L, H·E})
  const Tensor grad_heads = split_heads(grad_merged, o.num_heads, o.head_dim);
  // heads = scaled_dot_product_attention(q, k, v, sdpa): with GQA, the
  // gradient of a key/value head sums over the query heads that read it.
  const SdpaGradients g =
      scaled_dot_product_attention_backward(grad_heads, r.q, r.k, r.v, r.attention, r.sdpa);
  // (q, k) = rope_.forward(q, k, offset)
  Tensor grad_q = g.query, grad_k = g.key;
  if (o.rope) {
    grad_q = rope_.backward(grad_q, r.position_offset);
    grad_k = rope_.backward(grad_k, r.position_offset);
  }
  // q = split_heads(q_proj(x)); k, v likewise: x feeds all three.
  Tensor grad_x = q_proj_.backward(merge_heads(grad_q), r.q_proj);
  grad_x = add(grad_x, k_proj_.backward(merge_heads(grad_k), r.k_proj));
  return add(grad_x, v_proj_.backward(merge_heads(g.value), r.v_proj));
}

}  // namespace qkv::nn
