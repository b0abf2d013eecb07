// nn::MultiheadAttention's backward: the forward's steps (multihead_attention.cc)
// in reverse order, each by the backward of the op that computed it.
#include <vector>

#include "nn/module_util.h"
#include "qkv/functional.h"
#include "qkv/gradients.h"
#include "qkv/nn/multihead_attention.h"

namespace qkv::nn {

namespace {

// The record's sequences and their heads: a [len, B, D] / [B, len, D] /
// [len, D] tensor seen as the [B, H, len, E] view that the attention used.
struct HeadLayout {
  bool batch_first;
  int64_t B, H, E, L, S;  // S: keys before bias_kv / zero_attn

  HeadLayout(const MultiheadAttentionRecord& r, const MultiheadAttentionOptions& o, int64_t E)
      : batch_first(r.query.dim() == 3 && o.batch_first),
        B(r.q.size(0)),
        H(o.num_heads),
        E(E),
        L(r.q.size(2)),
        S(batch_first ? r.key.size(1) : r.key.size(0)) {}

  Tensor split_heads(const Tensor& x, int64_t len) const {
    return batch_first ? x.reshape({B, len, H, E}).permute({0, 2, 1, 3})
                       : x.reshape({len, B, H, E}).permute({1, 2, 0, 3});
  }
};

}  // namespace

SdpaGradients MultiheadAttention::head_gradients(const Tensor& grad_output,
                                                 const MultiheadAttentionRecord& record) {
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
  const int64_t D = o.embed_dim;
  const DType dt = o.dtype;
  const HeadLayout heads(r, o, head_dim());
  const int64_t L = heads.L, S = heads.S;

  // result.output = linear(merged, out_proj_weight_, out_proj_bias_)
  linear_backward(grad_output, r.merged, out_proj_weight_, out_proj_bias_,
                  {.weight = grad_buffer("out_proj.weight", out_proj_weight_),
                   .bias = grad_buffer("out_proj.bias", out_proj_bias_)});
  const Tensor grad_merged = linear_input_gradient(grad_output, out_proj_weight_);

  // copy_4d(split_heads(merged, L), attn.output)
  Tensor grad_attn = Tensor::empty(r.q.shape(), dt);
  grad_attn.copy_from(heads.split_heads(grad_merged, L));

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
      Tensor buffer = grad_buffer(row.name, *row.bias);
      buffer.copy_from(add(buffer, sum(full->slice(2, S, S + 1), 0).reshape({1, 1, D})));
    }
  }
  // The zero row of add_zero_attn is a constant: its gradient is dropped.
  return g;
}

MultiheadAttentionInputGradients MultiheadAttention::backward(
    const Tensor& grad_output, const MultiheadAttentionRecord& record) {
  const SdpaGradients g = head_gradients(grad_output, record);
  const MultiheadAttentionRecord& r = record;
  const int64_t D = options_.embed_dim;
  const DType dt = options_.dtype;
  const HeadLayout heads(r, options_, head_dim());
  const int64_t L = heads.L, S = heads.S;
  auto split_heads = [&](const Tensor& x, int64_t len) { return heads.split_heads(x, len); };

  // q = split_heads(linear(query, wq, bq)); k, v likewise (their first S rows).
  Tensor wq, wk, wv, gwq, gwk, gwv, bq, bk, bv, gbq, gbk, gbv;
  if (packed_) {
    const Tensor gw = grad_buffer("in_proj_weight", in_proj_weight_);
    wq = in_proj_weight_.slice(0, 0, D), gwq = gw.slice(0, 0, D);
    wk = in_proj_weight_.slice(0, D, 2 * D), gwk = gw.slice(0, D, 2 * D);
    wv = in_proj_weight_.slice(0, 2 * D, 3 * D), gwv = gw.slice(0, 2 * D, 3 * D);
  } else {
    wq = q_proj_weight_, gwq = grad_buffer("q_proj_weight", q_proj_weight_);
    wk = k_proj_weight_, gwk = grad_buffer("k_proj_weight", k_proj_weight_);
    wv = v_proj_weight_, gwv = grad_buffer("v_proj_weight", v_proj_weight_);
  }
  if (in_proj_bias_.defined()) {
    const Tensor gb = grad_buffer("in_proj_bias", in_proj_bias_);
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
    linear_backward(grad_projected, input, w, b, {.weight = gw, .bias = gb});
    return linear_input_gradient(grad_projected, w);
  };
  MultiheadAttentionInputGradients out;
  out.query = project_back(g.query, r.query, L, wq, bq, gwq, gbq);
  out.key = project_back(g.key.slice(2, 0, S), r.key, S, wk, bk, gwk, gbk);
  out.value = project_back(g.value.slice(2, 0, S), r.value, S, wv, bv, gwv, gbv);
  return out;
}

Tensor MultiheadAttention::self_attention_backward(const Tensor& grad_output,
                                                   const MultiheadAttentionRecord& record) {
  const MultiheadAttentionRecord& r = record;
  auto same = [](const Tensor& a, const Tensor& b) {
    return a.raw_data() == b.raw_data() && a.shape() == b.shape() && a.strides() == b.strides() &&
           a.dtype() == b.dtype();
  };
  QKV_CHECK(r.query.defined() && same(r.query, r.key) && same(r.query, r.value),
            "MultiheadAttention::self_attention_backward: the forward's query, key and value "
            "must be the same tensor (use backward() for cross-attention)");
  // x fed key and value too, so kdim = vdim = embed_dim: in_proj is packed.
  QKV_CHECK(packed_, "MultiheadAttention::self_attention_backward: needs the packed in_proj");
  const SdpaGradients g = head_gradients(grad_output, record);
  const int64_t D = options_.embed_dim;
  const HeadLayout heads(r, options_, head_dim());
  const int64_t B = heads.B, H = heads.H, E = heads.E, L = heads.L;
  const bool bf = heads.batch_first;
  // [q k v] = linear(x, in_proj_weight, in_proj_bias) split into thirds, each
  // split into heads: the gradients of the three go back into one [..., 3D]
  // tensor, and through the packed projection as one product each.
  Shape packed = r.query.shape();
  packed.back() = 3 * D;
  Tensor grad_packed = Tensor::empty(packed, options_.dtype);
  // [B, L, 3, H, E] (or [L, B, 3, H, E]) views: third j as [B, H, L, E]
  const Tensor thirds =
      bf ? grad_packed.reshape({B, L, 3, H, E}) : grad_packed.reshape({L, B, 3, H, E});
  auto heads_of_third = [&](int64_t j) {
    return bf ? thirds.select(2, j).permute({0, 2, 1, 3})
              : thirds.select(2, j).permute({1, 2, 0, 3});
  };
  heads_of_third(0).copy_from(g.query);
  heads_of_third(1).copy_from(g.key.slice(2, 0, L));
  heads_of_third(2).copy_from(g.value.slice(2, 0, L));
  linear_backward(grad_packed, r.query, in_proj_weight_, in_proj_bias_,
                  {.weight = grad_buffer("in_proj_weight", in_proj_weight_),
                   .bias = grad_buffer("in_proj_bias", in_proj_bias_)});
  return linear_input_gradient(grad_packed, in_proj_weight_);
}

}  // namespace qkv::nn
