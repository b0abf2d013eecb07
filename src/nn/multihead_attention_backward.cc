// nn::MultiheadAttention's backward: the forward's steps (multihead_attention.cc)
// in reverse order, each by the backward of the op that computed it.
#include <vector>

#include "nn/module_util.h"
#include "qkv/gradients.h"
#include "qkv/nn/multihead_attention.h"

namespace qkv::nn {

MultiheadAttentionInputGradients MultiheadAttention::backward(
    const Tensor& grad_output, const MultiheadAttentionRecord& record) {
  const MultiheadAttentionRecord& r = record;
  QKV_CHECK(r.query.defined() && r.merged.defined(),
            "MultiheadAttention::backward: the record is empty (pass it to forward)");
  QKV_CHECK(grad_output.defined() && grad_output.shape() == r.query.shape(),
            "MultiheadAttention::backward: grad_output must have the output's shape ",
            shape_str(r.query.shape()), ", got ",
            grad_output.defined() ? shape_str(grad_output.shape()) : "undefined");
  QKV_CHECK_TYPE(grad_output.dtype() == options_.dtype,
                 "MultiheadAttention::backward: grad_output must have the module's dtype ",
                 dtype_name(options_.dtype), ", got ", dtype_name(grad_output.dtype()));
  const MultiheadAttentionOptions& o = options_;
  const int64_t D = o.embed_dim, H = o.num_heads, E = head_dim();
  const DType dt = o.dtype;
  const bool batched = r.query.dim() == 3;
  const bool bf = batched && o.batch_first;
  const int64_t B = batched ? r.query.size(bf ? 0 : 1) : 1;
  const int64_t L = r.q.size(2);
  const int64_t S = bf ? r.key.size(1) : r.key.size(0);
  // A [len, B, D] / [B, len, D] / [len, D] tensor as a [B, H, len, E] view.
  auto split_heads = [&](const Tensor& x, int64_t len) {
    return bf ? x.reshape({B, len, H, E}).permute({0, 2, 1, 3})
              : x.reshape({len, B, H, E}).permute({1, 2, 0, 3});
  };
  auto grad = [&](const char* name, const Tensor& value) {
    return detail::grad_buffer(grads_, name, value);
  };

  // result.output = linear(merged, out_proj_weight_, out_proj_bias_)
  Tensor grad_merged = Tensor::zeros(r.merged.shape(), dt);
  linear_backward(
      grad_output, r.merged, out_proj_weight_, out_proj_bias_,
      {.input = grad_merged,
       .weight = grad("out_proj.weight", out_proj_weight_),
       .bias = out_proj_bias_.defined() ? grad("out_proj.bias", out_proj_bias_) : Tensor()});

  // copy_4d(split_heads(merged, L), attn.output)
  Tensor grad_attn = Tensor::empty(r.q.shape(), dt);
  grad_attn.copy_from(split_heads(grad_merged, L));

  // attn = scaled_dot_product_attention(q, k, v, sdpa)
  SdpaGradients g;
  if (r.dropped_all) {  // the output was filled with 0: nothing flows back
    g.query = Tensor::zeros(r.q.shape(), dt);
    g.key = Tensor::zeros(r.k.shape(), dt);
    g.value = Tensor::zeros(r.v.shape(), dt);
  } else {
    g = scaled_dot_product_attention_backward(grad_attn, r.q, r.k, r.v, r.attention, r.sdpa);
  }

  // k.slice(2, S, S + 1).copy_from(bias_k_.reshape({1, H, 1, E})) (and bias_v_):
  // the bias row is shared by the batch, so its gradient sums over B.
  if (o.add_bias_kv) {
    struct Row {
      const Tensor* full;  // g.key or g.value
      const char* name;
      const Tensor* bias;
    };
    for (const Row& row : {Row{&g.key, "bias_k", &bias_k_}, Row{&g.value, "bias_v", &bias_v_}}) {
      const Tensor* full = row.full;
      Tensor buffer = grad(row.name, *row.bias);
      Tensor sum = full->slice(2, S, S + 1).select(0, 0).contiguous();
      for (int64_t b = 1; b < B; ++b) sum = add(sum, full->slice(2, S, S + 1).select(0, b));
      buffer.copy_from(add(buffer, sum.reshape({1, 1, D})));
    }
  }
  // The zero row of add_zero_attn is a constant: its gradient is dropped.

  // q = split_heads(linear(query, wq, bq)); k, v likewise (their first S rows).
  Tensor wq, wk, wv, gwq, gwk, gwv, bq, bk, bv, gbq, gbk, gbv;
  if (packed_) {
    const Tensor gw = grad("in_proj_weight", in_proj_weight_);
    wq = in_proj_weight_.slice(0, 0, D), gwq = gw.slice(0, 0, D);
    wk = in_proj_weight_.slice(0, D, 2 * D), gwk = gw.slice(0, D, 2 * D);
    wv = in_proj_weight_.slice(0, 2 * D, 3 * D), gwv = gw.slice(0, 2 * D, 3 * D);
  } else {
    wq = q_proj_weight_, gwq = grad("q_proj_weight", q_proj_weight_);
    wk = k_proj_weight_, gwk = grad("k_proj_weight", k_proj_weight_);
    wv = v_proj_weight_, gwv = grad("v_proj_weight", v_proj_weight_);
  }
  if (in_proj_bias_.defined()) {
    const Tensor gb = grad("in_proj_bias", in_proj_bias_);
    bq = in_proj_bias_.slice(0, 0, D), gbq = gb.slice(0, 0, D);
    bk = in_proj_bias_.slice(0, D, 2 * D), gbk = gb.slice(0, D, 2 * D);
    bv = in_proj_bias_.slice(0, 2 * D, 3 * D), gbv = gb.slice(0, 2 * D, 3 * D);
  }
  auto project_back = [&](const Tensor& grad_heads, const Tensor& input, int64_t len,
                          const Tensor& w, const Tensor& b, const Tensor& gw, const Tensor& gb) {
    Shape projected = input.shape();
    projected.back() = D;
    Tensor grad_projected = Tensor::empty(projected, dt);
    split_heads(grad_projected, len).copy_from(grad_heads);
    Tensor grad_input = Tensor::zeros(input.shape(), dt);
    linear_backward(grad_projected, input, w, b, {.input = grad_input, .weight = gw, .bias = gb});
    return grad_input;
  };
  MultiheadAttentionInputGradients out;
  out.query = project_back(g.query, r.query, L, wq, bq, gwq, gbq);
  out.key = project_back(g.key.slice(2, 0, S), r.key, S, wk, bk, gwk, gbk);
  out.value = project_back(g.value.slice(2, 0, S), r.value, S, wv, bv, gwv, gbv);
  return out;
}

std::vector<Parameter> MultiheadAttention::parameters() {
  return detail::own_parameters(state_dict(), grads_);
}

void MultiheadAttention::zero_grad() { detail::zero_grads(grads_); }

}  // namespace qkv::nn
