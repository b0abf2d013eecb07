// nn::TransformerDecoderSession: the decoder layers of nn::Transformer
// recomputed one new target position at a time, with torch's
// MultiheadAttention math (packed in_proj, SDPA, out_proj) on cached keys and
// values.
#include "qkv/nn/transformer_decoding.h"

#include "qkv/attention.h"
#include "qkv/functional.h"
#include "qkv/linear.h"
#include "qkv/masks.h"

namespace qkv::nn {

namespace {

Tensor entry(const std::map<std::string, Tensor>& state, const std::string& name) {
  const auto it = state.find(name);
  return it == state.end() ? Tensor() : it->second;
}

// Rows [i·D, (i+1)·D) of a packed in_proj weight [3D, D] or bias [3D].
Tensor part(const Tensor& packed, int64_t i, int64_t D) {
  return packed.defined() ? packed.slice(0, i * D, (i + 1) * D) : Tensor();
}

// [B, L, D] -> [B, H, L, E] (contiguous).
Tensor split_heads(const Tensor& x, int64_t H) {
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2);
  return x.reshape({B, L, H, D / H}).transpose(1, 2).contiguous();
}

// [B, H, L, E] -> [B, L, H·E].
Tensor merge_heads(const Tensor& x) {
  const int64_t B = x.size(0), H = x.size(1), L = x.size(2), E = x.size(3);
  return x.transpose(1, 2).reshape({B, L, H * E});
}

}  // namespace

TransformerDecoderSession::TransformerDecoderSession(Transformer& model, int64_t max_len)
    : model_(model), options_(model.options()), max_len_(max_len) {
  QKV_CHECK(max_len > 0, "TransformerDecoderSession: max_len must be > 0, got ", max_len);
  for (TransformerDecoderLayer& layer : model.decoder().layers()) {
    const auto s = layer.state_dict();
    LayerWeights w;
    w.sa_w = entry(s, "self_attn.in_proj_weight");
    w.sa_b = entry(s, "self_attn.in_proj_bias");
    w.sa_out_w = entry(s, "self_attn.out_proj.weight");
    w.sa_out_b = entry(s, "self_attn.out_proj.bias");
    w.ca_w = entry(s, "multihead_attn.in_proj_weight");
    w.ca_b = entry(s, "multihead_attn.in_proj_bias");
    w.ca_out_w = entry(s, "multihead_attn.out_proj.weight");
    w.ca_out_b = entry(s, "multihead_attn.out_proj.bias");
    w.linear1_w = entry(s, "linear1.weight");
    w.linear1_b = entry(s, "linear1.bias");
    w.linear2_w = entry(s, "linear2.weight");
    w.linear2_b = entry(s, "linear2.bias");
    w.norm1_w = entry(s, "norm1.weight");
    w.norm1_b = entry(s, "norm1.bias");
    w.norm2_w = entry(s, "norm2.weight");
    w.norm2_b = entry(s, "norm2.bias");
    w.norm3_w = entry(s, "norm3.weight");
    w.norm3_b = entry(s, "norm3.bias");
    layers_.push_back(w);
  }
}

void TransformerDecoderSession::encode(const Tensor& src, const TransformerEncodeArgs& args) {
  const Tensor memory =
      model_.encoder().forward(src, {.mask = args.src_mask,
                                     .src_key_padding_mask = args.src_key_padding_mask,
                                     .is_causal = args.src_is_causal});
  set_memory(memory, args.memory_key_padding_mask);
}

void TransformerDecoderSession::set_memory(const Tensor& memory,
                                           const Tensor& memory_key_padding_mask) {
  const char* m = "TransformerDecoderSession";
  const TransformerOptions& o = options_;
  QKV_CHECK(!model_.is_training() || o.dropout == 0.0, m,
            ": the model is in training mode with dropout ", o.dropout,
            "; call model.eval() before decoding");
  QKV_CHECK(
      memory.defined() && (memory.dim() == 2 || memory.dim() == 3) && memory.size(-1) == o.d_model,
      m, ": memory must be ", (o.batch_first ? "[B, S, D]" : "[S, B, D]"),
      " or unbatched [S, D] with D = ", o.d_model, ", got ",
      memory.defined() ? shape_str(memory.shape()) : std::string("undefined"));
  QKV_CHECK_TYPE(memory.dtype() == o.dtype, m, ": memory must have the model's dtype ",
                 dtype_name(o.dtype), ", got ", dtype_name(memory.dtype()));
  unbatched_ = memory.dim() == 2;
  const Tensor mem = unbatched_ ? memory.unsqueeze(0)
                                : (o.batch_first ? memory : memory.transpose(0, 1));  // [B, S, D]
  batch_ = mem.size(0);
  const int64_t S = mem.size(1), D = o.d_model, H = o.nhead;

  memory_mask_ = Tensor();
  if (memory_key_padding_mask.defined()) {
    const Tensor& p = memory_key_padding_mask;
    const Shape want = unbatched_ ? Shape{S} : Shape{batch_, S};
    QKV_CHECK(p.shape() == want, m, ": memory_key_padding_mask must be ", shape_str(want), ", got ",
              shape_str(p.shape()));
    // torch's polarity (True = padding) -> SDPA's (True = take part), [B, 1, 1, S].
    const Tensor rows = p.reshape({batch_, 1, 1, S});
    memory_mask_ = p.dtype() == DType::kBool ? logical_not(rows) : rows.to(o.dtype);
  }
  memory_k_.clear();
  memory_v_.clear();
  for (const LayerWeights& w : layers_) {
    memory_k_.push_back(split_heads(linear(mem, part(w.ca_w, 1, D), part(w.ca_b, 1, D)), H));
    memory_v_.push_back(split_heads(linear(mem, part(w.ca_w, 2, D), part(w.ca_b, 2, D)), H));
  }
  cache_.emplace(KVCacheOptions{.num_layers = static_cast<int64_t>(layers_.size()),
                                .batch_size = batch_,
                                .num_kv_heads = H,
                                .max_len = max_len_,
                                .head_dim = D / H,
                                .dtype = o.dtype});
}

Tensor TransformerDecoderSession::norm(const Tensor& x, const Tensor& w, const Tensor& b) const {
  return layer_norm(x, {options_.d_model}, w, b, options_.layer_norm_eps);
}

Tensor TransformerDecoderSession::self_attention(int64_t layer, const Tensor& x) {
  const LayerWeights& w = layers_[layer];
  const int64_t D = options_.d_model, H = options_.nhead;
  const Tensor q = split_heads(linear(x, part(w.sa_w, 0, D), part(w.sa_b, 0, D)), H);
  cache_->append(layer, split_heads(linear(x, part(w.sa_w, 1, D), part(w.sa_b, 1, D)), H),
                 split_heads(linear(x, part(w.sa_w, 2, D), part(w.sa_b, 2, D)), H));
  // The new positions are the last of the cached ones: bottom-right causal.
  SdpaOptions sdpa;
  sdpa.causal = CausalMask::kBottomRight;
  const Tensor heads =
      scaled_dot_product_attention(q, cache_->keys(layer), cache_->values(layer), sdpa).output;
  return linear(merge_heads(heads), w.sa_out_w, w.sa_out_b);
}

Tensor TransformerDecoderSession::cross_attention(int64_t layer, const Tensor& x) {
  const LayerWeights& w = layers_[layer];
  const int64_t D = options_.d_model, H = options_.nhead;
  const Tensor q = split_heads(linear(x, part(w.ca_w, 0, D), part(w.ca_b, 0, D)), H);
  SdpaOptions sdpa;
  sdpa.attn_mask = memory_mask_;
  const Tensor heads =
      scaled_dot_product_attention(q, memory_k_[layer], memory_v_[layer], sdpa).output;
  return linear(merge_heads(heads), w.ca_out_w, w.ca_out_b);
}

Tensor TransformerDecoderSession::step(const Tensor& tgt) {
  const char* m = "TransformerDecoderSession::step";
  const TransformerOptions& o = options_;
  QKV_CHECK(cache_.has_value(), m, ": no memory yet; call encode(src) or set_memory() first");
  QKV_CHECK(tgt.defined() && tgt.dim() == (unbatched_ ? 2 : 3) && tgt.size(-1) == o.d_model, m,
            ": tgt must be ", unbatched_ ? "[T, D]" : (o.batch_first ? "[B, T, D]" : "[T, B, D]"),
            " (batched as the memory) with D = ", o.d_model, ", got ",
            tgt.defined() ? shape_str(tgt.shape()) : std::string("undefined"));
  QKV_CHECK_TYPE(tgt.dtype() == o.dtype, m, ": tgt must have the model's dtype ",
                 dtype_name(o.dtype), ", got ", dtype_name(tgt.dtype()));
  Tensor x = unbatched_ ? tgt.unsqueeze(0) : (o.batch_first ? tgt : tgt.transpose(0, 1));
  QKV_CHECK(x.size(0) == batch_, m, ": tgt has batch size ", x.size(0), " but the memory ", batch_);
  const int64_t T = x.size(1);
  QKV_CHECK(T > 0 && T <= cache_->remaining(), m, ": ", T, " new positions do not fit: ", length(),
            " of max_len = ", max_len_, " are used");

  auto ff = [&](const LayerWeights& w, const Tensor& h) {
    return linear(activate(linear(h, w.linear1_w, w.linear1_b), o.activation), w.linear2_w,
                  w.linear2_b);
  };
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerWeights& w = layers_[i];
    const int64_t l = static_cast<int64_t>(i);
    if (o.norm_first) {
      x = add(x, self_attention(l, norm(x, w.norm1_w, w.norm1_b)));
      x = add(x, cross_attention(l, norm(x, w.norm2_w, w.norm2_b)));
      x = add(x, ff(w, norm(x, w.norm3_w, w.norm3_b)));
    } else {
      x = norm(add(x, self_attention(l, x)), w.norm1_w, w.norm1_b);
      x = norm(add(x, cross_attention(l, x)), w.norm2_w, w.norm2_b);
      x = norm(add(x, ff(w, x)), w.norm3_w, w.norm3_b);
    }
  }
  if (model_.decoder().norm()) x = model_.decoder().norm()->forward(x);
  if (unbatched_) return x.squeeze(0);
  return o.batch_first ? x : x.transpose(0, 1).contiguous();
}

}  // namespace qkv::nn
