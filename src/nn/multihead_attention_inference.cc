// nn::MultiheadAttention's inference paths on batch-first [B, L, D] inputs,
// beside torch's general forward (multihead_attention.cc):
//   self_attention_into    a stack of encoder layers on a workspace's buffers;
//   self_attention_cached  decoding: new positions' keys and values go to a
//                          KV cache, the queries attend over all it holds;
//   project_keys_values,   decoding: keys and values projected once (a
//   attend                 decoder's memory), attended to at every step.
// All project with the module's weights (or their bfloat16/int8 forms), run
// the attention kernel on heads that are views of the projections and write
// the heads side by side for out_proj, without copies; only a memory's keys
// and values are laid out once in heads, as they are read at every step.
#include "qkv/attention.h"
#include "qkv/linear.h"
#include "qkv/nn/kv_cache.h"
#include "qkv/nn/multihead_attention.h"

namespace qkv::nn {

namespace {

// linear_into with the weight in float, or in its low precision form when there is one.
// x: [..., in]  weight: [out, in]  bias: [out] or undefined  out: [..., out]
void project_into(Tensor& out, const Tensor& x, const Tensor& weight,
                  const LowPrecisionWeight& low_precision, const Tensor& bias) {
  if (low_precision.empty())
    linear_into(out, x, weight, bias);
  else
    linear_into(out, x, low_precision, bias);
}

// q, k or v (which = 0, 1, 2) of H heads in a packed projection.
// qkv: [B, L, 3·H·E]  ->  [B, H, L, E] (a view)
Tensor packed_heads(const Tensor& qkv, int64_t which, int64_t H) {
  const int64_t B = qkv.size(0), L = qkv.size(1), E = qkv.size(2) / (3 * H);
  return qkv.view({B, L, 3, H, E}).select(2, which).transpose(1, 2);
}

}  // namespace

void MultiheadAttention::check_inference(const char* fn, const Tensor& x) const {
  const MultiheadAttentionOptions& o = options_;
  QKV_CHECK(!o.add_bias_kv && !o.add_zero_attn && (!is_training() || o.dropout == 0.0), fn,
            ": needs no bias_kv or zero_attn, and eval mode (or dropout 0)");
  QKV_CHECK(x.defined() && x.dim() == 3 && x.size(2) == o.embed_dim, fn,
            ": the input must be batch-first [B, L, embed_dim=", o.embed_dim, "], got ",
            x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  QKV_CHECK_TYPE(x.dtype() == o.dtype, fn, ": the input must have the module's dtype ",
                 dtype_name(o.dtype), ", got ", dtype_name(x.dtype()));
}

void MultiheadAttention::project_packed_into(Tensor& qkv, const Tensor& x) const {
  QKV_CHECK(packed_, "MultiheadAttention: self-attention on the inference path needs the packed ",
            "in_proj weight (kdim = vdim = embed_dim)");
  note_input_range({kProjections[0], kProjections[1], kProjections[2]}, x);
  project_into(qkv, x, in_proj_weight_, low_precision_in_proj_, in_proj_bias_);
}

void MultiheadAttention::attend_into(Tensor& out, Tensor& merged, const Tensor& q, const Tensor& k,
                                     const Tensor& v, SdpaOptions sdpa,
                                     Workspace& workspace) const {
  const int64_t B = merged.size(0), L = merged.size(1), H = options_.num_heads, E = head_dim();
  sdpa.precision = precision();
  // The attention writes each head's rows into its columns of `merged`
  // [B, L, H·E]: heads side by side again, no copy.
  Tensor context = merged.view({B, L, H, E}).transpose(1, 2);  // [B, H, L, E] view
  scaled_dot_product_attention_into(context, q, k, v, sdpa, workspace.attention());
  note_input_range({kProjections[3]}, merged);
  project_into(out, merged, out_proj_weight_, low_precision_[3], out_proj_bias_);
}

void MultiheadAttention::self_attention_into(Tensor& out, const Tensor& x, const Tensor& keep,
                                             bool causal, Workspace& workspace) const {
  check_inference("MultiheadAttention::self_attention_into", x);
  const int64_t B = x.size(0), L = x.size(1), D = options_.embed_dim, H = options_.num_heads;
  Tensor qkv = workspace.buffer(Workspace::kQkv, {B, L, 3 * D}, options_.dtype);
  project_packed_into(qkv, x);
  Tensor merged = workspace.buffer(Workspace::kMerged, {B, L, D}, options_.dtype);
  attend_into(
      out, merged, packed_heads(qkv, 0, H), packed_heads(qkv, 1, H), packed_heads(qkv, 2, H),
      {.attn_mask = keep, .causal = causal ? CausalMask::kTopLeft : CausalMask::kNone}, workspace);
}

Tensor MultiheadAttention::self_attention_cached(const Tensor& x, KVCache& cache, int64_t layer,
                                                 Workspace& workspace) const {
  check_inference("MultiheadAttention::self_attention_cached", x);
  const int64_t B = x.size(0), L = x.size(1), D = options_.embed_dim, H = options_.num_heads;
  Tensor qkv = workspace.buffer(Workspace::kQkv, {B, L, 3 * D}, options_.dtype);
  project_packed_into(qkv, x.contiguous());
  cache.append(layer, packed_heads(qkv, 1, H), packed_heads(qkv, 2, H));
  // The new queries are the last L of the cached positions.
  Tensor merged = workspace.buffer(Workspace::kMerged, {B, L, D}, options_.dtype);
  Tensor out = Tensor::empty({B, L, D}, options_.dtype);
  attend_into(out, merged, packed_heads(qkv, 0, H), cache.keys(layer), cache.values(layer),
              {.causal = CausalMask::kBottomRight}, workspace);
  return out;
}

MultiheadAttentionKeysValues MultiheadAttention::project_keys_values(const Tensor& key,
                                                                     const Tensor& value) const {
  const MultiheadAttentionOptions& o = options_;
  const char* fn = "MultiheadAttention::project_keys_values";
  QKV_CHECK(!o.add_bias_kv && !o.add_zero_attn, fn, ": needs no bias_kv or zero_attn");
  QKV_CHECK(key.defined() && value.defined() && key.dim() == 3 && value.dim() == 3 &&
                key.size(2) == o.kdim && value.size(2) == o.vdim && key.size(0) == value.size(0) &&
                key.size(1) == value.size(1),
            fn, ": key and value must be batch-first [B, S, kdim=", o.kdim,
            "] and [B, S, vdim=", o.vdim, "], got ",
            key.defined() ? shape_str(key.shape()) : "undefined", " and ",
            value.defined() ? shape_str(value.shape()) : "undefined");
  // [B, S, H·E] -> [B, H, S, E], contiguous: read at every step.
  auto heads = [&](const Tensor& x, int64_t which) {
    const Tensor p = project(x, which);
    return p.view({p.size(0), p.size(1), o.num_heads, head_dim()}).transpose(1, 2).contiguous();
  };
  return {.k = heads(key, 1), .v = heads(value, 2)};
}

Tensor MultiheadAttention::attend(const Tensor& query,
                                  const MultiheadAttentionKeysValues& keys_values,
                                  const Tensor& mask, Workspace& workspace) const {
  check_inference("MultiheadAttention::attend", query);
  const int64_t B = query.size(0), L = query.size(1), D = options_.embed_dim;
  Tensor q = workspace.buffer(Workspace::kQkv, {B, L, D}, options_.dtype);
  note_input_range({kProjections[0]}, query);
  project_into(q, query.contiguous(), in_proj_weight_part(0), low_precision_[0],
               in_proj_bias_part(0));
  Tensor merged = workspace.buffer(Workspace::kMerged, {B, L, D}, options_.dtype);
  Tensor out = Tensor::empty({B, L, D}, options_.dtype);
  attend_into(out, merged, q.view({B, L, options_.num_heads, head_dim()}).transpose(1, 2),
              keys_values.k, keys_values.v, {.attn_mask = mask}, workspace);
  return out;
}

}  // namespace qkv::nn
