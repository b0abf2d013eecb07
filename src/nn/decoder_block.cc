// nn::DecoderBlock: the pre-norm decoder block over whole sequences (with or
// without a KV cache, with or without a record), its backward, and the
// allocation-free decoding step.
#include "qkv/nn/decoder_block.h"

#include "nn/decoder_variants.h"
#include "qkv/functional.h"

namespace qkv::nn {

namespace {

detail::FeedForwardNet make_feed_forward(const DecoderBlockOptions& o, Generator* gen) {
  const GroupedQueryAttentionOptions& a = o.attention;
  if (o.ffn == FeedForwardKind::kGelu)
    return FeedForward({.d_model = a.embed_dim,
                        .dim_feedforward = o.ffn_hidden,
                        .activation = Activation::kGelu,
                        .bias = a.bias,
                        .dtype = a.dtype},
                       gen);
  return SwiGLUFeedForward(
      {.d_model = a.embed_dim,
       .hidden_dim = o.ffn_hidden,
       .bias = a.bias,
       .dtype = a.dtype,
       .activation = o.ffn == FeedForwardKind::kGeGLU ? Activation::kGeluTanh : Activation::kSilu},
      gen);
}

detail::Norm make_norm(const DecoderBlockOptions& o) {
  const GroupedQueryAttentionOptions& a = o.attention;
  return detail::make_norm(o.norm, a.embed_dim, o.norm_eps, a.bias, a.dtype);
}

std::optional<detail::Norm> make_post_norm(const DecoderBlockOptions& o) {
  if (!o.post_norms) return std::nullopt;
  return make_norm(o);
}

}  // namespace

DecoderBuffers::DecoderBuffers(const DecoderBlockOptions& o, int64_t rows)
    : attention(o.attention, rows) {
  const DType dtype = o.attention.dtype;
  x = Tensor::zeros({rows, o.attention.embed_dim}, dtype);
  h = Tensor::zeros({rows, o.attention.embed_dim}, dtype);
  hidden = Tensor::zeros({rows, o.ffn_hidden}, dtype);
  if (o.ffn != FeedForwardKind::kGelu) gate = Tensor::zeros({rows, o.ffn_hidden}, dtype);
}

DecoderBlock::DecoderBlock(const DecoderBlockOptions& options, Generator* gen)
    : ModuleBase("DecoderBlock", options),
      attention_norm_(make_norm(options)),
      attention_(options.attention, gen),
      ffn_norm_(make_norm(options)),
      feed_forward_(make_feed_forward(options, gen)),
      post_attention_norm_(make_post_norm(options)),
      post_ffn_norm_(make_post_norm(options)) {}

void DecoderBlock::forward_into(Tensor& x, std::span<const int64_t> positions,
                                const PassCaches& caches, DecoderBuffers& buffers,
                                DecoderBlockRecord* r) const {
  const int64_t D = options_.attention.embed_dim;
  QKV_CHECK(x.dim() == 3 && x.size(2) == D && x.is_contiguous(),
            "DecoderBlock::forward_into: x must be contiguous [B, T, ", D, "], got ",
            shape_str(x.shape()), x.is_contiguous() ? "" : " (not contiguous)");
  const int64_t B = x.size(0), T = x.size(1);
  QKV_CHECK(B * T <= buffers.h.size(0), "DecoderBlock::forward_into: ", B, " × ", T,
            " rows do not fit the buffers' ", buffers.h.size(0));
  // The first B·T rows of a buffer as [B, T, cols] (in training, the
  // sub-layers return new tensors instead, which the record keeps).
  auto rows = [&](const Tensor& buffer) {
    return buffer.slice(0, 0, B * T).view({B, T, buffer.size(1)});
  };
  Tensor h = rows(buffers.h);
  // x = x + attention(attention_norm(x))   (post_norms: + post_attention_norm(attention(...)))
  detail::norm_into(h, x, attention_norm_, r ? &r->attention_norm : nullptr);
  attention_.forward_into(h, h, positions, caches, buffers.attention, r ? &r->attention : nullptr);
  if (post_attention_norm_) detail::norm_into(h, h, *post_attention_norm_);
  detail::add_residual(x, h, r != nullptr);
  // x = x + feed_forward(ffn_norm(x))      (post_norms: + post_ffn_norm(feed_forward(...)))
  detail::norm_into(h, x, ffn_norm_, r ? &r->ffn_norm : nullptr);
  Tensor hidden = rows(buffers.hidden);
  Tensor gate = buffers.gate.defined() ? rows(buffers.gate) : Tensor();
  detail::feed_forward_into(h, h, feed_forward_, hidden, gate, r ? &r->feed_forward : nullptr);
  if (post_ffn_norm_) detail::norm_into(h, h, *post_ffn_norm_);
  detail::add_residual(x, h, r != nullptr);
}

Tensor DecoderBlock::forward(const Tensor& x, int64_t offset, KVCache* cache, int64_t layer,
                             DecoderBlockRecord* record) const {
  QKV_CHECK(x.defined() && x.dim() == 3, "DecoderBlock::forward: x must be [B, T, D], got ",
            x.defined() ? shape_str(x.shape()) : "undefined");
  DecoderBuffers buffers(options_, x.size(0) * x.size(1));
  Tensor y = x.contiguous().clone();
  forward_into(y, {&offset, 1}, {.shared = cache, .layer = layer}, buffers, record);
  return y;
}

Tensor DecoderBlock::backward(const Tensor& grad_output, const DecoderBlockRecord& r) {
  QKV_CHECK(!options_.post_norms,
            "DecoderBlock::backward: training with post_norms is not supported (its backward is "
            "not written)");
  // h = x + attention(attention_norm(x)); out = h + feed_forward(ffn_norm(h))
  const Tensor grad_ffn_in = detail::run_backward(feed_forward_, grad_output, r.feed_forward);
  const Tensor grad_h = add(grad_output, detail::run_backward(ffn_norm_, grad_ffn_in, r.ffn_norm));
  const Tensor grad_normed = attention_.backward(grad_h, r.attention);
  return add(grad_h, detail::run_backward(attention_norm_, grad_normed, r.attention_norm));
}

void DecoderBlock::list_members(MemberList& m) {
  m.module("attention_norm", detail::module_of(attention_norm_));
  m.module("attention", attention_);
  m.module("ffn_norm", detail::module_of(ffn_norm_));
  m.module("feed_forward", detail::module_of(feed_forward_));
  if (post_attention_norm_)
    m.module("post_attention_norm", detail::module_of(*post_attention_norm_));
  if (post_ffn_norm_) m.module("post_ffn_norm", detail::module_of(*post_ffn_norm_));
}

}  // namespace qkv::nn
