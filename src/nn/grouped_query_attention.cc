// nn::GroupedQueryAttention: projections, RoPE, SDPA with enable_gqa, o_proj.
#include "qkv/nn/grouped_query_attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <utility>

#include "nn/module_util.h"
#include "qkv/functional.h"
#include "qkv/masks.h"

namespace qkv::nn {

namespace {

// Fills in the defaults (0 -> H, 0 -> D / H) and checks the options.
GroupedQueryAttentionOptions resolved(GroupedQueryAttentionOptions o) {
  const char* m = "GroupedQueryAttention";
  detail::check_floating_dtype(m, o.dtype);
  QKV_CHECK(o.embed_dim > 0 && o.num_heads > 0 && o.num_kv_heads >= 0 && o.head_dim >= 0, m,
            ": embed_dim and num_heads must be > 0 and num_kv_heads, head_dim >= 0, got "
            "embed_dim=",
            o.embed_dim, ", num_heads=", o.num_heads, ", num_kv_heads=", o.num_kv_heads,
            ", head_dim=", o.head_dim);
  if (o.num_kv_heads == 0) o.num_kv_heads = o.num_heads;
  QKV_CHECK(o.num_heads % o.num_kv_heads == 0, m, ": num_heads (", o.num_heads,
            ") must be a multiple of num_kv_heads (", o.num_kv_heads, ")");
  if (o.head_dim == 0) {
    QKV_CHECK(o.embed_dim % o.num_heads == 0, m, ": embed_dim (", o.embed_dim,
              ") must be divisible by num_heads (", o.num_heads, ") unless head_dim is given");
    o.head_dim = o.embed_dim / o.num_heads;
  }
  QKV_CHECK(!o.rope || o.head_dim % 2 == 0, m, ": RoPE needs an even head_dim, got ", o.head_dim);
  QKV_CHECK(o.dropout >= 0.0 && o.dropout < 1.0, m, ": dropout probability must be in [0, 1), got ",
            o.dropout);
  QKV_CHECK(o.sliding_window >= 0, m, ": sliding_window must be >= 0 (0 = none), got ",
            o.sliding_window);
  QKV_CHECK(std::isfinite(o.scale) && o.scale >= 0.0, m,
            ": scale must be finite and >= 0 (0 = 1/sqrt(head_dim)), got ", o.scale);
  QKV_CHECK(std::isfinite(o.qk_norm_eps) && o.qk_norm_eps >= 0.0, m,
            ": qk_norm_eps must be finite and >= 0, got ", o.qk_norm_eps);
  return o;
}

LinearOptions projection(int64_t in, int64_t out, bool bias,
                         const GroupedQueryAttentionOptions& o) {
  return {.in_features = in, .out_features = out, .bias = bias, .dtype = o.dtype};
}

std::optional<RMSNorm> head_norm(const GroupedQueryAttentionOptions& o) {
  if (!o.qk_norm) return std::nullopt;
  return RMSNorm({.normalized_shape = {o.head_dim}, .eps = o.qk_norm_eps, .dtype = o.dtype});
}

// Each head's row of E values in `rows` [..., heads·E] (contiguous), normalised in place.
void normalize_heads(const RMSNorm& norm, Tensor& rows, int64_t E) {
  Tensor heads = rows.view({rows.numel() / E, E});
  norm.forward_into(heads, heads);
}

}  // namespace

GroupedQueryAttention::GroupedQueryAttention(const GroupedQueryAttentionOptions& options,
                                             Generator* gen)
    : ModuleBase("GroupedQueryAttention", resolved(options)),
      q_proj_(projection(options_.embed_dim, options_.num_heads * options_.head_dim,
                         options_.bias || options_.qkv_bias, options_),
              gen),
      k_proj_(projection(options_.embed_dim, options_.num_kv_heads * options_.head_dim,
                         options_.bias || options_.qkv_bias, options_),
              gen),
      v_proj_(projection(options_.embed_dim, options_.num_kv_heads * options_.head_dim,
                         options_.bias || options_.qkv_bias, options_),
              gen),
      o_proj_(projection(options_.num_heads * options_.head_dim, options_.embed_dim, options_.bias,
                         options_),
              gen),
      q_norm_(head_norm(options_)),
      k_norm_(head_norm(options_)),
      // An even placeholder dim keeps the constructor valid when RoPE is off.
      rope_({.head_dim = options_.rope ? options_.head_dim : 2,
             .base = options_.rope_base,
             .style = options_.rope_style,
             .freq_factors = options_.rope ? options_.rope_freq_factors : std::vector<double>{}}) {}

ProjectedQkv GroupedQueryAttention::project(const Tensor& x, int64_t position_offset) const {
  return project(x, position_offset, nullptr);
}

ProjectedQkv GroupedQueryAttention::project(const Tensor& x, int64_t position_offset,
                                            GroupedQueryAttentionRecord* record) const {
  const auto& o = options_;
  const char* m = "GroupedQueryAttention";
  QKV_CHECK(x.defined(), m, ": input is undefined");
  QKV_CHECK_TYPE(x.dtype() == o.dtype, m, ": input must have the module's dtype ",
                 dtype_name(o.dtype), ", got ", dtype_name(x.dtype()));
  QKV_CHECK(x.dim() == 3 && x.size(2) == o.embed_dim, m,
            ": input must be [B, L, D] with D = ", o.embed_dim, ", got shape ",
            shape_str(x.shape()));
  QKV_CHECK(position_offset >= 0, m, ": position_offset must be >= 0, got ", position_offset);
  QKV_CHECK(record == nullptr || !o.qk_norm, m,
            ": training with qk_norm is not supported (its backward is not written)");
  ProjectedQkv p;
  p.q = detail::split_heads(q_proj_.forward(x, record ? &record->q_proj : nullptr), o.num_heads,
                            o.head_dim);
  p.k = detail::split_heads(k_proj_.forward(x, record ? &record->k_proj : nullptr), o.num_kv_heads,
                            o.head_dim);
  p.v = detail::split_heads(v_proj_.forward(x, record ? &record->v_proj : nullptr), o.num_kv_heads,
                            o.head_dim);
  if (o.qk_norm) {
    p.q = q_norm_->forward(p.q);
    p.k = k_norm_->forward(p.k);
  }
  if (o.rope) std::tie(p.q, p.k) = rope_.forward(p.q, p.k, position_offset);
  return p;
}

SdpaOptions GroupedQueryAttention::sdpa_options(const GroupedQueryAttentionForward& args, int64_t L,
                                                int64_t S) const {
  const auto& o = options_;
  SdpaOptions sdpa;
  sdpa.enable_gqa = o.num_kv_heads != o.num_heads;
  sdpa.precision = precision();
  sdpa.attn_mask_requires_grad = false;  // the module's masks are constants
  sdpa.dropout_p = is_training() ? o.dropout : 0.0;
  sdpa.generator = generator();
  if (o.scale > 0.0) sdpa.scale = o.scale;
  if (o.sliding_window > 0) sdpa.window_left = o.sliding_window - 1;
  if (args.attn_mask.defined() && args.causal != CausalMask::kNone) {
    // SDPA takes one or the other: fold the causal mask into an additive mask.
    Tensor mask = args.attn_mask;
    if (mask.dtype() == DType::kBool) mask = keep_mask_to_additive(mask, o.dtype);
    sdpa.attn_mask = add(mask, keep_mask_to_additive(causal_mask(L, S, args.causal), o.dtype));
  } else {
    sdpa.attn_mask = args.attn_mask;
    sdpa.causal = args.causal;
  }
  return sdpa;
}

Tensor GroupedQueryAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const GroupedQueryAttentionForward& args) {
  const auto& o = options_;
  const char* m = "GroupedQueryAttention";
  for (const Tensor* t : {&q, &k, &v})
    QKV_CHECK(t->defined() && t->dim() == 4, m, ": attend needs 4-D q [B, H, L, E] and k, v ",
              "[B, Hkv, S, E], got q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ",
              shape_str(v.shape()));
  QKV_CHECK(q.size(1) == o.num_heads && k.size(1) == o.num_kv_heads &&
                v.size(1) == o.num_kv_heads && q.size(3) == o.head_dim,
            m, ": attend expects H = ", o.num_heads, " query heads and Hkv = ", o.num_kv_heads,
            " key/value heads of dim E = ", o.head_dim, ", got q ", shape_str(q.shape()), ", k ",
            shape_str(k.shape()), ", v ", shape_str(v.shape()));
  const int64_t L = q.size(2), S = k.size(2);

  const Tensor heads =
      scaled_dot_product_attention(q, k, v, sdpa_options(args, L, S)).output;  // [B, H, L, E]
  const Tensor merged = detail::merge_heads(heads);                            // [B, L, H·E]
  return o_proj_.forward(merged);
}

AttentionBuffers::AttentionBuffers(const GroupedQueryAttentionOptions& options, int64_t rows) {
  const GroupedQueryAttentionOptions o = resolved(options);
  q = Tensor::zeros({rows, o.num_heads * o.head_dim}, o.dtype);
  k = Tensor::zeros({rows, o.num_kv_heads * o.head_dim}, o.dtype);
  v = Tensor::zeros({rows, o.num_kv_heads * o.head_dim}, o.dtype);
  heads = Tensor::zeros({rows, o.num_heads * o.head_dim}, o.dtype);
}

namespace {

// heads4[b] = attention of q4[b] over kv[b] (sequence b's cache), for every b. One
// sequence's attention at a decoding step (one query) is too small for the
// kernel to split among threads, so the sequences share them instead, each
// thread with its own SDPA workspace.
// q4, heads4: [B, H, T, E]
void attend_each_sequence(Tensor& heads4, const Tensor& q4, std::span<const KVCacheView> kv,
                          const SdpaOptions& sdpa, AttentionBuffers& buffers) {
  const int64_t B = q4.size(0);
  // Multiply-adds of all the sequences' attention; below kParallelMinMacs a
  // fork/join costs more than a second thread saves.
  constexpr double kParallelMinMacs = 1e5;
  double macs = 0.0;
  for (const KVCacheView& view : kv)
    macs += static_cast<double>(q4.size(1)) * q4.size(2) * view.keys.size(2) *
            (q4.size(3) + view.values.size(3));
  const int threads = omp_in_parallel() || macs < kParallelMinMacs
                          ? 1
                          : static_cast<int>(std::min<int64_t>(omp_get_max_threads(), B));
  while (static_cast<int>(buffers.sequence_workspaces.size()) < threads)
    buffers.sequence_workspaces.emplace_back();
  auto attend = [&](int64_t b, SdpaWorkspace& workspace) {
    Tensor heads_b = heads4.slice(0, b, b + 1);
    scaled_dot_product_attention_into(heads_b, q4.slice(0, b, b + 1),
                                      kv[static_cast<size_t>(b)].keys,
                                      kv[static_cast<size_t>(b)].values, sdpa, workspace);
  };
  if (threads <= 1) {
    for (int64_t b = 0; b < B; ++b) attend(b, buffers.workspace);
    return;
  }
  std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t b = 0; b < B; ++b) {
    try {
      attend(b, buffers.sequence_workspaces[static_cast<size_t>(omp_get_thread_num())]);
    } catch (...) {
#pragma omp critical(qkv_attend_each_sequence)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace

void GroupedQueryAttention::forward_into(Tensor& out, const Tensor& x,
                                         std::span<const int64_t> positions,
                                         const PassCaches& caches, AttentionBuffers& buffers,
                                         GroupedQueryAttentionRecord* record) const {
  const auto& o = options_;
  const char* m = "GroupedQueryAttention::forward_into";
  QKV_CHECK(x.dim() == 3 && x.size(2) == o.embed_dim && x.is_contiguous() &&
                x.size(0) * x.size(1) <= buffers.q.size(0),
            m, ": x must be contiguous [B, T, ", o.embed_dim, "] with B·T <= the buffers' ",
            buffers.q.size(0), " rows, got ", shape_str(x.shape()));
  const int64_t B = x.size(0), T = x.size(1), E = o.head_dim;
  const int64_t H = o.num_heads, Hkv = o.num_kv_heads;
  QKV_CHECK(record == nullptr || caches.empty(), m,
            ": a record (training) and a KV cache (inference) do not go together");
  QKV_CHECK(caches.per_sequence.empty() || static_cast<int64_t>(caches.per_sequence.size()) == B, m,
            ": ", B, " sequences need one cache each, got ", caches.per_sequence.size());
  // The first B·T rows of a buffer as [B, T, cols]; in training a new tensor,
  // which the record keeps.
  auto scratch = [&](const Tensor& buffer) {
    if (record) return Tensor::zeros({B, T, buffer.size(1)}, o.dtype);
    return buffer.slice(0, 0, B * T).view({B, T, buffer.size(1)});
  };
  // [B, T, heads·E] -> the heads as [B, heads, T, E] (a view)
  auto per_head = [&](const Tensor& rows, int64_t heads) {
    return rows.view({B, T, heads, E}).transpose(1, 2);
  };
  QKV_CHECK(record == nullptr || positions.size() == 1, m,
            ": training takes one position offset, got ", positions.size());
  GroupedQueryAttentionRecord* r = record;
  if (r) *r = {};
  Tensor q = scratch(buffers.q), k = scratch(buffers.k), v = scratch(buffers.v);
  if (r) {
    q_proj_.forward_into(q, x, &r->q_proj);
    k_proj_.forward_into(k, x, &r->k_proj);
    v_proj_.forward_into(v, x, &r->v_proj);
  } else {
    Linear::forward_into_each(x, {{{q_proj_, q}, {k_proj_, k}, {v_proj_, v}}});
  }
  if (o.qk_norm) {
    normalize_heads(*q_norm_, q, E);
    normalize_heads(*k_norm_, k, E);
  }
  if (o.rope) {
    rope_.rotate_in_place(q, k, positions);
  }
  const Tensor q4 = per_head(q, H), k4 = per_head(k, Hkv), v4 = per_head(v, Hkv);
  Tensor heads = scratch(buffers.heads);
  Tensor heads4 = per_head(heads, H);

  SdpaOptions sdpa;
  sdpa.enable_gqa = Hkv != H;
  sdpa.precision = precision();
  // Cached keys come before the new queries: bottom-right causal.
  sdpa.causal = caches.empty() ? CausalMask::kTopLeft : CausalMask::kBottomRight;
  if (o.scale > 0.0) sdpa.scale = o.scale;
  // With a ring cache the keys of one decoding step are all within the window
  // (in slot order, which a single query does not see); otherwise the window
  // masks them by position.
  if (o.sliding_window > 0) sdpa.window_left = o.sliding_window - 1;
  if (r) {
    // The full SDPA: the backward needs its log-sum-exp (and dropout seed).
    sdpa.dropout_p = is_training() ? o.dropout : 0.0;
    sdpa.generator = generator();
    r->position_offset = positions[0];
    r->q = q4;
    r->k = k4;
    r->v = v4;
    r->sdpa = sdpa;
    r->attention = scaled_dot_product_attention(q4, k4, v4, sdpa);  // [B, H, T, E]
    heads4.copy_from(r->attention.output);
  } else if (caches.empty()) {
    scaled_dot_product_attention_into(heads4, q4, k4, v4, sdpa, buffers.workspace);
  } else if (caches.shared) {
    const KVCacheView kv = extend_cache(*caches.shared, caches.layer, k4, v4);
    scaled_dot_product_attention_into(heads4, q4, kv.keys, kv.values, sdpa, buffers.workspace);
  } else {
    // Each sequence attends over its own cache, of its own length.
    buffers.sequence_views.clear();
    for (int64_t b = 0; b < B; ++b)
      buffers.sequence_views.push_back(extend_cache(*caches.per_sequence[static_cast<size_t>(b)],
                                                    caches.layer, k4.slice(0, b, b + 1),
                                                    v4.slice(0, b, b + 1)));
    attend_each_sequence(heads4, q4, buffers.sequence_views, sdpa, buffers);
  }
  if (r) out = Tensor::zeros({B, T, o.embed_dim}, o.dtype);
  o_proj_.forward_into(out, heads, r ? &r->o_proj : nullptr);
}

Tensor GroupedQueryAttention::forward(const Tensor& x, const GroupedQueryAttentionForward& args,
                                      GroupedQueryAttentionRecord* record) {
  QKV_CHECK(record == nullptr || args.cache == nullptr,
            "GroupedQueryAttention::forward: a record (training) and a KV cache (inference) ",
            "do not go together");
  if (record == nullptr) {
    ProjectedQkv p = project(x, args.position_offset);
    if (args.cache == nullptr) return attend(p.q, p.k, p.v, args);
    const KVCacheView kv = extend_cache(*args.cache, args.cache_layer, p.k, p.v);
    return attend(p.q, kv.keys, kv.values, args);
  }
  // project(x, offset) and attend(q, k, v, args), keeping each step's input.
  GroupedQueryAttentionRecord& r = *record;
  r = {};
  r.position_offset = args.position_offset;
  ProjectedQkv p = project(x, args.position_offset, &r);
  r.q = std::move(p.q);
  r.k = std::move(p.k);
  r.v = std::move(p.v);

  // The SDPA options as attend() builds them.
  const int64_t L = x.size(1);
  r.sdpa = sdpa_options(args, L, L);
  r.attention = scaled_dot_product_attention(r.q, r.k, r.v, r.sdpa);  // [B, H, L, E]
  return o_proj_.forward(detail::merge_heads(r.attention.output), &r.o_proj);
}

KVCacheView GroupedQueryAttention::extend_cache(KVCache& cache, int64_t layer, const Tensor& k,
                                                const Tensor& v) const {
  const int64_t window = cache.window(layer);
  QKV_CHECK(window == 0 || window == options_.sliding_window, "GroupedQueryAttention: layer ",
            layer, " of the KV cache keeps the last ", window,
            " positions, but this attention's sliding_window is ", options_.sliding_window,
            " (make the cache with DecoderModel::make_cache)");
  return cache.extend(layer, k, v);
}

void GroupedQueryAttention::list_members(MemberList& m) {
  m.module("q_proj", q_proj_);
  m.module("k_proj", k_proj_);
  m.module("v_proj", v_proj_);
  m.module("o_proj", o_proj_);
  if (q_norm_) m.module("q_norm", *q_norm_);
  if (k_norm_) m.module("k_norm", *k_norm_);
}

}  // namespace qkv::nn
