// nn::DecoderBlock: the pre-norm decoder block over whole sequences (with or
// without a KV cache, with or without a record), its backward, and the
// allocation-free decoding step.
#include "qkv/nn/decoder_block.h"

#include "nn/decoder_variants.h"
#include "qkv/functional.h"

namespace qkv::nn {

namespace {

detail::FeedForwardNet make_feed_forward(const DecoderBlockOptions& o, Generator* gen) {
  if (o.ffn == FeedForwardKind::kGelu)
    return FeedForward({.d_model = o.d_model,
                        .dim_feedforward = o.ffn_hidden,
                        .activation = Activation::kGelu,
                        .bias = o.bias,
                        .dtype = o.dtype},
                       gen);
  return SwiGLUFeedForward(
      {.d_model = o.d_model, .hidden_dim = o.ffn_hidden, .bias = o.bias, .dtype = o.dtype}, gen);
}

}  // namespace

DecoderStepBuffers::DecoderStepBuffers(const DecoderBlockOptions& o, int64_t B) {
  const int64_t H = o.num_heads, Hkv = o.num_kv_heads, E = o.d_model / o.num_heads;
  x = Tensor::zeros({B, o.d_model}, o.dtype);
  h = Tensor::zeros({B, o.d_model}, o.dtype);
  q = Tensor::zeros({B, H * E}, o.dtype);
  k = Tensor::zeros({B, Hkv * E}, o.dtype);
  v = Tensor::zeros({B, Hkv * E}, o.dtype);
  q4 = q.view({B, H, 1, E});
  k4 = k.view({B, Hkv, 1, E});
  v4 = v.view({B, Hkv, 1, E});
  attention = Tensor::zeros({B, H, 1, E}, o.dtype);
  attention_2d = attention.view({B, H * E});
  hidden = Tensor::zeros({B, o.ffn_hidden}, o.dtype);
  if (o.ffn == FeedForwardKind::kSwiGLU) gate = Tensor::zeros({B, o.ffn_hidden}, o.dtype);
}

DecoderBlock::DecoderBlock(const DecoderBlockOptions& options, Generator* gen)
    : ModuleBase("DecoderBlock", options),
      attention_norm_(detail::make_norm(options.norm, options.d_model, options.norm_eps,
                                        options.bias, options.dtype)),
      attention_({.embed_dim = options.d_model,
                  .num_heads = options.num_heads,
                  .num_kv_heads = options.num_kv_heads,
                  .bias = options.bias,
                  .rope = options.rope,
                  .rope_base = options.rope_base,
                  .rope_style = options.rope_style,
                  .rope_freq_factors = options.rope_freq_factors,
                  .dtype = options.dtype},
                 gen),
      ffn_norm_(detail::make_norm(options.norm, options.d_model, options.norm_eps, options.bias,
                                  options.dtype)),
      feed_forward_(make_feed_forward(options, gen)) {}

Tensor DecoderBlock::forward(const Tensor& x, int64_t offset, KVCache* cache, int64_t layer,
                             DecoderBlockRecord* r) {
  const Tensor normed = detail::run(attention_norm_, x, r ? &r->attention_norm : nullptr);
  // Cached keys come before the new queries: bottom-right causal.
  const Tensor attended =
      attention_.forward(normed,
                         {.position_offset = offset,
                          .causal = cache ? CausalMask::kBottomRight : CausalMask::kTopLeft,
                          .cache = cache,
                          .cache_layer = layer},
                         r ? &r->attention : nullptr);
  const Tensor h = add(x, attended);
  const Tensor ffn_in = detail::run(ffn_norm_, h, r ? &r->ffn_norm : nullptr);
  return add(h, detail::run(feed_forward_, ffn_in, r ? &r->feed_forward : nullptr));
}

Tensor DecoderBlock::backward(const Tensor& grad_output, const DecoderBlockRecord& r) {
  // h = x + attention(attention_norm(x)); out = h + feed_forward(ffn_norm(h))
  const Tensor grad_ffn_in = detail::run_backward(feed_forward_, grad_output, r.feed_forward);
  const Tensor grad_h = add(grad_output, detail::run_backward(ffn_norm_, grad_ffn_in, r.ffn_norm));
  const Tensor grad_normed = attention_.backward(grad_h, r.attention);
  return add(grad_h, detail::run_backward(attention_norm_, grad_normed, r.attention_norm));
}

void DecoderBlock::step_into(Tensor& x, std::span<const int64_t> positions,
                             const StepCaches& caches, int64_t layer, DecoderStepBuffers& b) const {
  const int64_t n = x.size(0);
  const bool shared = caches.shared != nullptr;
  QKV_CHECK(n <= b.h.size(0) && (shared || static_cast<int64_t>(caches.per_row.size()) == n),
            "DecoderBlock::step_into: ", n, " rows need at most ", b.h.size(0),
            " buffer rows and one cache each, got ", caches.per_row.size(), " caches");
  // The first n rows of each buffer (views: nothing is allocated).
  auto rows = [n](const Tensor& t) { return t.slice(0, 0, n); };
  Tensor h = rows(b.h), q = rows(b.q), k = rows(b.k), v = rows(b.v);
  const Tensor q4 = rows(b.q4), k4 = rows(b.k4), v4 = rows(b.v4);
  Tensor attention = rows(b.attention);
  // x = x + attention(attention_norm(x)) against the cache, which takes k and v first.
  detail::norm_into(h, x, attention_norm_);
  attention_.project_into(q, k, v, h, positions);
  SdpaOptions sdpa;
  sdpa.enable_gqa = options_.num_kv_heads != options_.num_heads;
  sdpa.causal = CausalMask::kBottomRight;  // the new query sees every cached key
  sdpa.precision = precision();
  if (shared) {
    caches.shared->append(layer, k4, v4);
    scaled_dot_product_attention_into(attention, q4, caches.shared->keys(layer),
                                      caches.shared->values(layer), sdpa, b.workspace);
  } else {
    // Each sequence attends over its own cache, of its own length.
    for (int64_t r = 0; r < n; ++r) {
      KVCache& cache = *caches.per_row[static_cast<size_t>(r)];
      cache.append(layer, k4.slice(0, r, r + 1), v4.slice(0, r, r + 1));
      Tensor out = attention.slice(0, r, r + 1);
      scaled_dot_product_attention_into(out, q4.slice(0, r, r + 1), cache.keys(layer),
                                        cache.values(layer), sdpa, b.workspace);
    }
  }
  attention_.output_into(h, rows(b.attention_2d));
  add_into(x, x, h);
  // x = x + feed_forward(ffn_norm(x))
  detail::norm_into(h, x, ffn_norm_);
  Tensor hidden = rows(b.hidden);
  if (const auto* swiglu = std::get_if<SwiGLUFeedForward>(&feed_forward_)) {
    Tensor gate = rows(b.gate);
    swiglu->forward_into(h, h, hidden, gate);
  } else {
    std::get<FeedForward>(feed_forward_).forward_into(h, h, hidden);
  }
  add_into(x, x, h);
}

void DecoderBlock::list_members(MemberList& m) {
  m.module("attention_norm", detail::module_of(attention_norm_));
  m.module("attention", attention_);
  m.module("ffn_norm", detail::module_of(ffn_norm_));
  m.module("feed_forward", detail::module_of(feed_forward_));
}

}  // namespace qkv::nn
