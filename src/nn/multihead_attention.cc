// nn::MultiheadAttention: torch.nn.MultiheadAttention (torch 2.13) on qkv's ops.
//
// The forward follows torch/nn/functional.py `multi_head_attention_forward`:
//   1. check shapes and dtypes, canonicalise masks (bool True = masked -> -inf);
//   2. project q, k, v (packed in_proj_weight rows [W_q; W_k; W_v], or three weights);
//   3. append bias_k/bias_v, then a zero key/value, padding the masks with 0;
//   4. merge key_padding_mask into attn_mask by addition;
//   5. scaled dot-product attention per head (dropout only in training);
//   6. concatenate heads, out_proj; average the weights over heads if asked.
// Layout: the projections run on the inputs as given ([L, B, D], [B, L, D] or
// [L, D]); heads are split into [B, H, L, E] for the attention and merged back
// into the input's layout before out_proj, so no extra transposes are needed.
#include "qkv/nn/multihead_attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "nn/module_util.h"
#include "ops/checks.h"
#include "qkv/attention.h"
#include "qkv/functional.h"
#include "qkv/linear.h"
#include "tensor/parallel_threshold.h"

namespace qkv::nn {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Whether a and b are the same view of the same storage (the same values).
bool same_view(const Tensor& a, const Tensor& b) {
  return a.shares_storage_with(b) && a.raw_data() == b.raw_data() && a.shape() == b.shape() &&
         a.strides() == b.strides();
}

// Copies a 4-D view into another of the same shape and dtype (any strides).
template <class T>
void copy_4d_typed(Tensor& dst, const Tensor& src) {
  const Shape& n = dst.shape();
  const Strides& ds = dst.strides();
  const Strides& ss = src.strides();
  T* d = dst.data<T>();
  const T* s = src.data<T>();
#pragma omp parallel for collapse(2) \
    schedule(static) if (dst.numel() >= ::qkv::detail::kParallelMinElements && !omp_in_parallel())
  for (int64_t i0 = 0; i0 < n[0]; ++i0)
    for (int64_t i1 = 0; i1 < n[1]; ++i1)
      for (int64_t i2 = 0; i2 < n[2]; ++i2) {
        T* drow = d + i0 * ds[0] + i1 * ds[1] + i2 * ds[2];
        const T* srow = s + i0 * ss[0] + i1 * ss[1] + i2 * ss[2];
        for (int64_t i3 = 0; i3 < n[3]; ++i3) drow[i3 * ds[3]] = srow[i3 * ss[3]];
      }
}

// dst: [a, b, c, d] view  src: [a, b, c, d] view of the same dtype
void copy_4d(Tensor dst, const Tensor& src) {
  if (dst.dtype() == DType::kFloat64)
    copy_4d_typed<double>(dst, src);
  else
    copy_4d_typed<float>(dst, src);
}

// Reads a mask as additive values in double: bool True -> -inf (torch's
// _canonical_mask for MultiheadAttention's polarity), floating as is.
std::vector<double> additive_values(const Tensor& mask, const char* name) {
  std::vector<double> values = mask.contiguous().to_vector();
  if (mask.dtype() == DType::kBool) {
    for (double& x : values) x = x != 0.0 ? kNegInf : 0.0;
    return values;
  }
  for (size_t i = 0; i < values.size(); ++i)
    QKV_CHECK(!std::isnan(values[i]) && values[i] != -kNegInf, "MultiheadAttention: float ", name,
              " of shape ", shape_str(mask.shape()), " contains NaN or +inf (at flat index ", i,
              "); use -inf or a bool mask to mask a position out");
  return values;
}

// Mean over heads.
// weights: [B, H, L, S]  ->  [B, L, S]
Tensor mean_over_heads(const Tensor& weights) { return mean(weights, 1); }

}  // namespace

MultiheadAttention::MultiheadAttention(const MultiheadAttentionOptions& options, Generator* gen)
    : ModuleBase("MultiheadAttention", options) {
  MultiheadAttentionOptions& o = options_;
  detail::check_floating_dtype("MultiheadAttention", o.dtype);
  QKV_CHECK(o.embed_dim > 0 && o.num_heads > 0,
            "MultiheadAttention: embed_dim and num_heads must be greater than 0, got embed_dim=",
            o.embed_dim, " and num_heads=", o.num_heads);
  QKV_CHECK(o.embed_dim % o.num_heads == 0, "MultiheadAttention: embed_dim (", o.embed_dim,
            ") must be divisible by num_heads (", o.num_heads, ")");
  QKV_CHECK(o.kdim >= 0 && o.vdim >= 0,
            "MultiheadAttention: kdim and vdim must be positive (or 0 for embed_dim), got kdim=",
            o.kdim, " and vdim=", o.vdim);
  QKV_CHECK(o.dropout >= 0.0 && o.dropout <= 1.0,
            "MultiheadAttention: dropout probability must be in [0, 1], got ", o.dropout);
  if (o.kdim == 0) o.kdim = o.embed_dim;
  if (o.vdim == 0) o.vdim = o.embed_dim;
  packed_ = o.kdim == o.embed_dim && o.vdim == o.embed_dim;

  Generator& g = gen ? *gen : default_generator();
  const int64_t D = o.embed_dim;
  const DType dt = o.dtype;
  // Draw order as torch's constructor: out_proj (an nn.Linear) first, then _reset_parameters.
  // out_proj.weight: nn.Linear's kaiming_uniform_(a=sqrt(5)) is U(-1/sqrt(in), 1/sqrt(in)).
  out_proj_weight_ = detail::uniform_fan_in({D, D}, D, g, dt);
  if (packed_) {
    in_proj_weight_ = detail::xavier_uniform({3 * D, D}, g, dt);
  } else {
    q_proj_weight_ = detail::xavier_uniform({D, D}, g, dt);
    k_proj_weight_ = detail::xavier_uniform({D, o.kdim}, g, dt);
    v_proj_weight_ = detail::xavier_uniform({D, o.vdim}, g, dt);
  }
  if (o.bias) {
    in_proj_bias_ = Tensor::zeros({3 * D}, dt);
    out_proj_bias_ = Tensor::zeros({D}, dt);
  }
  if (o.add_bias_kv) {
    // xavier_normal_ on [1, 1, D]: fan_in = fan_out = D, so std = sqrt(2 / 2D).
    const double std_dev = std::sqrt(1.0 / static_cast<double>(D));
    for (Tensor* t : {&bias_k_, &bias_v_}) {
      *t = Tensor::randn({1, 1, D}, g, dt);
      std::vector<double> v = t->to_vector();
      for (double& x : v) x *= std_dev;
      t->copy_from(Tensor::from_vector({1, 1, D}, std::span<const double>(v)));
    }
  }
}

MultiheadAttentionOutput MultiheadAttention::forward(const Tensor& query, const Tensor& key,
                                                     const Tensor& value,
                                                     const MultiheadAttentionForward& args,
                                                     MultiheadAttentionRecord* record) {
  const MultiheadAttentionOptions& o = options_;
  const int64_t D = o.embed_dim, H = o.num_heads, E = head_dim();
  const DType dt = o.dtype;

  // --- Inputs: dims, dtypes, sizes -------------------------------------------
  const std::pair<const Tensor*, const char*> inputs[] = {
      {&query, "query"}, {&key, "key"}, {&value, "value"}};
  for (const auto& [t, name] : inputs) {
    QKV_CHECK(t->defined(), "MultiheadAttention: ", name, " is undefined");
    QKV_CHECK_TYPE(t->dtype() == dt, "MultiheadAttention: ", name, " must have the module's dtype ",
                   dtype_name(dt), ", got ", dtype_name(t->dtype()));
  }
  QKV_CHECK(query.dim() == 2 || query.dim() == 3,
            "MultiheadAttention: query must be unbatched 2-D [L, D] or batched 3-D, got shape ",
            shape_str(query.shape()));
  const bool batched = query.dim() == 3;
  QKV_CHECK(key.dim() == query.dim() && value.dim() == query.dim(), "MultiheadAttention: for ",
            query.dim(), "-D query, key and value must be ", query.dim(), "-D, got key ",
            shape_str(key.shape()), " and value ", shape_str(value.shape()));
  const bool bf = batched && o.batch_first;
  // Sizes of a [len, B, feat] or [B, len, feat] or [len, feat] input.
  auto len_of = [&](const Tensor& t) { return bf ? t.size(1) : t.size(0); };
  auto batch_of = [&](const Tensor& t) -> int64_t {
    return batched ? (bf ? t.size(0) : t.size(1)) : 1;
  };
  const int64_t L = len_of(query), S = len_of(key), B = batch_of(query);
  const char* layout = !batched ? "[L, D]" : (bf ? "[B, L, D]" : "[L, B, D]");
  QKV_CHECK(query.size(-1) == D, "MultiheadAttention: query ", layout, " must have embed_dim=", D,
            " features, got shape ", shape_str(query.shape()));
  QKV_CHECK(key.size(-1) == o.kdim, "MultiheadAttention: key must have kdim=", o.kdim,
            " features, got shape ", shape_str(key.shape()));
  QKV_CHECK(value.size(-1) == o.vdim, "MultiheadAttention: value must have vdim=", o.vdim,
            " features, got shape ", shape_str(value.shape()));
  QKV_CHECK(batch_of(key) == B && batch_of(value) == B,
            "MultiheadAttention: query, key and value must have the same batch size, got query ",
            shape_str(query.shape()), ", key ", shape_str(key.shape()), ", value ",
            shape_str(value.shape()), (bf ? " (batch_first)" : ""));
  QKV_CHECK(len_of(value) == S, "MultiheadAttention: key and value must have the same sequence ",
            "length, got key ", shape_str(key.shape()), " and value ", shape_str(value.shape()));
  QKV_CHECK(L > 0 && S > 0 && B > 0,
            "MultiheadAttention: empty input (query length L, key length S and batch size B must "
            "be > 0), got query ",
            shape_str(query.shape()), " and key ", shape_str(key.shape()));

  for (const auto& [t, name] : inputs) check_finite(*t, "MultiheadAttention", name);

  // --- Masks -----------------------------------------------------------------
  const Tensor& kpm = args.key_padding_mask;
  const Tensor& am = args.attn_mask;
  const std::pair<const Tensor*, const char*> masks[] = {{&kpm, "key_padding_mask"},
                                                         {&am, "attn_mask"}};
  for (const auto& [t, name] : masks) {
    if (!t->defined()) continue;
    QKV_CHECK_TYPE(t->dtype() == DType::kBool || t->dtype() == dt, "MultiheadAttention: ", name,
                   " must be bool or have the module's dtype ", dtype_name(dt), ", got ",
                   dtype_name(t->dtype()));
  }
  if (kpm.defined()) {
    const Shape expected = batched ? Shape{B, S} : Shape{S};
    QKV_CHECK(kpm.shape() == expected, "MultiheadAttention: key_padding_mask must have shape ",
              (batched ? "[B, S] = " : "[S] = "), shape_str(expected), ", got ",
              shape_str(kpm.shape()));
  }
  bool attn_3d = false;
  if (am.defined()) {
    attn_3d = am.dim() == 3;
    const Shape expected = attn_3d ? Shape{B * H, L, S} : Shape{L, S};
    QKV_CHECK(am.dim() == 2 || am.dim() == 3,
              "MultiheadAttention: attn_mask must be 2-D [L, S] = ", shape_str({L, S}), " or 3-D ",
              (batched ? "[B*H, L, S] = " : "[H, L, S] = "), shape_str({B * H, L, S}), ", got ",
              shape_str(am.shape()));
    QKV_CHECK(am.shape() == expected, "MultiheadAttention: ", am.dim(), "-D attn_mask must have ",
              "shape ", (attn_3d ? (batched ? "[B*H, L, S] = " : "[H, L, S] = ") : "[L, S] = "),
              shape_str(expected), ", got ", shape_str(am.shape()));
  }
  QKV_CHECK(!args.is_causal || am.defined(),
            "MultiheadAttention: is_causal is only a hint that attn_mask is causal and needs "
            "attn_mask (e.g. a bool [L, S] mask with True above the diagonal)");
  // torch: with the hint, no key_padding_mask and no weights, SDPA runs with
  // is_causal=True and attn_mask is dropped; otherwise the mask itself is used.
  const bool causal_kernel = args.is_causal && !kpm.defined() && !args.need_weights;

  if (record) check_float32_precision("MultiheadAttention::forward with a record");
  // A projected [len, B, D] / [B, len, D] / [len, D] tensor as a [B, H, len, E] view.
  auto split_heads = [&](const Tensor& x, int64_t len) {
    return bf ? x.reshape({B, len, H, E}).permute({0, 2, 1, 3})
              : x.reshape({len, B, H, E}).permute({1, 2, 0, 3});
  };
  // Self-attention in low precision takes the fused in-projection, as
  // self_attention_into does, so that a mask does not change the rounding.
  const bool self =
      !low_precision_in_proj_.empty() && same_view(query, key) && same_view(query, value);
  const Tensor fused = self ? linear(query, low_precision_in_proj_, in_proj_bias_) : Tensor();
  auto projected = [&](const Tensor& x, int64_t which) {
    return self ? fused.slice(-1, which * o.embed_dim, (which + 1) * o.embed_dim)
                : project(x, which);
  };
  Tensor q = Tensor::empty({B, H, L, E}, dt);
  copy_4d(q, split_heads(projected(query, 0), L));

  // Keys and values: S projected rows, then bias_k/bias_v, then a zero row.
  const int64_t s_total = S + (o.add_bias_kv ? 1 : 0) + (o.add_zero_attn ? 1 : 0);
  Tensor k = Tensor::zeros({B, H, s_total, E}, dt);
  Tensor v = Tensor::zeros({B, H, s_total, E}, dt);
  copy_4d(k.slice(2, 0, S), split_heads(projected(key, 1), S));
  copy_4d(v.slice(2, 0, S), split_heads(projected(value, 2), S));
  if (o.add_bias_kv) {
    // bias element d belongs to head d / E, as torch's view(S+1, B*H, E).
    k.slice(2, S, S + 1).copy_from(bias_k_.reshape({1, H, 1, E}));
    v.slice(2, S, S + 1).copy_from(bias_v_.reshape({1, H, 1, E}));
  }
  // The zero key/value row (add_zero_attn) is already zero.

  // --- Merged additive mask --------------------------------------------------
  // [Bm, Hm, Lm, s_total], broadcast over what it does not depend on; the
  // appended columns (bias_k, zero) are padded with 0: always attended to.
  SdpaOptions sdpa;
  sdpa.precision = precision();
  sdpa.attn_mask_requires_grad = false;  // the module's masks are constants
  const bool use_attn = am.defined() && !causal_kernel;
  if (use_attn || kpm.defined()) {
    const int64_t Bm = (kpm.defined() || (use_attn && attn_3d)) ? B : 1;
    const int64_t Hm = use_attn && attn_3d ? H : 1;
    const int64_t Lm = use_attn ? L : 1;
    const std::vector<double> attn_values =
        use_attn ? additive_values(am, "attn_mask") : std::vector<double>{};
    const std::vector<double> kpm_values =
        kpm.defined() ? additive_values(kpm, "key_padding_mask") : std::vector<double>{};
    std::vector<double> merged(static_cast<size_t>(Bm * Hm * Lm * s_total), 0.0);
    for (int64_t b = 0; b < Bm; ++b)
      for (int64_t h = 0; h < Hm; ++h)
        for (int64_t l = 0; l < Lm; ++l) {
          double* row = merged.data() + ((b * Hm + h) * Lm + l) * s_total;
          for (int64_t s = 0; s < S; ++s) {
            double x = 0.0;
            if (use_attn) x += attn_values[((attn_3d ? b * H + h : 0) * L + l) * S + s];
            if (kpm.defined()) x += kpm_values[b * S + s];
            row[s] = x;
          }
        }
    sdpa.attn_mask =
        Tensor::from_vector({Bm, Hm, Lm, s_total}, std::span<const double>(merged)).to(dt);
  }
  if (causal_kernel) sdpa.causal = CausalMask::kTopLeft;
  const double dropout_p = is_training() ? o.dropout : 0.0;
  // p = 1 drops every weight (torch's dropout gives zeros); SDPA takes p < 1 only.
  const bool drop_all = dropout_p >= 1.0;
  sdpa.dropout_p = drop_all ? 0.0 : dropout_p;
  sdpa.need_weights = args.need_weights;
  sdpa.generator = generator();
  SdpaResult attn = scaled_dot_product_attention(q, k, v, sdpa);
  if (drop_all) {
    attn.output.fill(0.0);
    if (attn.weights.defined()) attn.weights.fill(0.0);
  }

  // --- Merge heads into the input's layout, then out_proj -------------------
  Tensor merged = Tensor::empty(query.shape(), dt);
  copy_4d(split_heads(merged, L), attn.output);
  MultiheadAttentionOutput result;
  note_input_range({kProjections[3]}, merged);
  result.output = low_precision_[3].empty() ? linear(merged, out_proj_weight_, out_proj_bias_)
                                            : linear(merged, low_precision_[3], out_proj_bias_);
  if (args.need_weights) {
    Tensor w = args.average_attn_weights ? mean_over_heads(attn.weights) : attn.weights;
    result.weights = batched ? w : w.squeeze(0);
  }
  if (record) {
    *record = {.query = query, .key = key, .value = value, .q = q, .k = k, .v = v};
    // The backward replays dropout from the seed and needs no weights.
    record->sdpa = sdpa;
    record->sdpa.generator = nullptr;
    record->sdpa.need_weights = false;
    record->attention = std::move(attn);
    record->attention.weights = Tensor();
    record->merged = merged;
    record->dropped_all = drop_all;
  }
  return result;
}

Tensor MultiheadAttention::in_proj_bias_part(int64_t which) const {
  const int64_t D = options_.embed_dim;
  return in_proj_bias_.defined() ? in_proj_bias_.slice(0, which * D, (which + 1) * D) : Tensor();
}

Tensor MultiheadAttention::in_proj_weight_part(int64_t which) const {
  const int64_t D = options_.embed_dim;
  if (packed_) return in_proj_weight_.slice(0, which * D, (which + 1) * D);
  const Tensor* separate[] = {&q_proj_weight_, &k_proj_weight_, &v_proj_weight_};
  return *separate[which];
}

Tensor MultiheadAttention::project(const Tensor& x, int64_t which) const {
  note_input_range({kProjections[which]}, x);
  if (!low_precision_[which].empty())
    return linear(x, low_precision_[which], in_proj_bias_part(which));
  return linear(x, in_proj_weight_part(which), in_proj_bias_part(which));
}

void MultiheadAttention::update_precision() {
  for (LowPrecisionWeight& w : low_precision_) w = LowPrecisionWeight();
  low_precision_in_proj_ = LowPrecisionWeight();
  if (precision() == Precision::kFloat32) return;
  for (int64_t which = 0; which < 3; ++which)
    low_precision_[which] = detail::low_precision_weight(
        in_proj_weight_part(which), precision(), type_name(), input_range(kProjections[which]));
  if (packed_) {
    // In self-attention the three projections read the same x.
    low_precision_in_proj_ = detail::low_precision_weight(
        in_proj_weight_, precision(), type_name(),
        input_range({kProjections[0], kProjections[1], kProjections[2]}));
  }
  low_precision_[3] = detail::low_precision_weight(out_proj_weight_, precision(), type_name(),
                                                   input_range(kProjections[3]));
}

void MultiheadAttention::list_members(MemberList& m) {
  m.parameter("in_proj_weight", in_proj_weight_);
  m.parameter("q_proj_weight", q_proj_weight_);
  m.parameter("k_proj_weight", k_proj_weight_);
  m.parameter("v_proj_weight", v_proj_weight_);
  m.parameter("in_proj_bias", in_proj_bias_);
  m.parameter("bias_k", bias_k_);
  m.parameter("bias_v", bias_v_);
  m.parameter("out_proj.weight", out_proj_weight_);
  m.parameter("out_proj.bias", out_proj_bias_);
}

}  // namespace qkv::nn
