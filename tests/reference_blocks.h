// Independent float64 references for the Transformer blocks, written with
// plain loops from the formulas (no qkv op is used): the oracle of
// test_transformer.cc. Sequences are held batch-major, x[(b * T + t) * D + d].
#pragma once

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "qkv/generator.h"
#include "qkv/tensor.h"

namespace qkv::reference {

using Vec = std::vector<double>;
using Params = std::map<std::string, Vec>;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// How a test lays out a sequence input: [T, B, D], [B, T, D] or unbatched [T, D].
enum class Layout { kSeqFirst, kBatchFirst, kUnbatched };

struct Seq {
  int64_t B = 0, T = 0, D = 0;
  Vec x;
  double at(int64_t b, int64_t t, int64_t d) const { return x[(b * T + t) * D + d]; }
};

inline Seq read_seq(const Tensor& t, Layout layout) {
  Seq s;
  s.D = t.size(-1);
  s.B = layout == Layout::kUnbatched ? 1 : t.size(layout == Layout::kBatchFirst ? 0 : 1);
  s.T = t.size(layout == Layout::kBatchFirst ? 1 : 0);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t i = 0; i < s.T; ++i)
      for (int64_t d = 0; d < s.D; ++d)
        s.x.push_back(layout == Layout::kUnbatched    ? t.at({i, d})
                      : layout == Layout::kBatchFirst ? t.at({b, i, d})
                                                      : t.at({i, b, d}));
  return s;
}

// A random N(0, 1) input of B sequences of T vectors of D in `layout` (for the tests).
inline Tensor randn_seq(Layout layout, int64_t B, int64_t T, int64_t D, Generator& gen,
                        DType dtype) {
  switch (layout) {
    case Layout::kSeqFirst:
      return Tensor::randn({T, B, D}, gen, dtype);
    case Layout::kBatchFirst:
      return Tensor::randn({B, T, D}, gen, dtype);
    case Layout::kUnbatched:
      break;
  }
  return Tensor::randn({T, D}, gen, dtype);
}

// Every parameter in float64, by its state_dict name.
inline Params read_params(const std::map<std::string, Tensor>& state) {
  Params p;
  for (const auto& [name, t] : state) p[name] = t.to_vector();
  return p;
}

// y[n, o] = Σ_i x[n, i] W[o, i] + b[o]   (b may be empty)
inline Vec linear(const Vec& x, int64_t in, const Vec& w, const Vec& b) {
  const int64_t out = static_cast<int64_t>(w.size()) / in;
  const int64_t n = static_cast<int64_t>(x.size()) / in;
  Vec y(static_cast<size_t>(n * out));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * w[o * in + i];
      y[r * out + o] = acc;
    }
  return y;
}

// (x - mean) / sqrt(var + eps) * w + b per row of D (w, b may be empty).
inline Vec layer_norm(const Vec& x, int64_t D, const Vec& w, const Vec& b, double eps) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / D; ++r) {
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < D; ++i) mean += x[r * D + i] / D;
    for (int64_t i = 0; i < D; ++i) var += (x[r * D + i] - mean) * (x[r * D + i] - mean) / D;
    for (int64_t i = 0; i < D; ++i) {
      double v = (x[r * D + i] - mean) / std::sqrt(var + eps);
      y[r * D + i] = (w.empty() ? v : v * w[i]) + (b.empty() ? 0.0 : b[i]);
    }
  }
  return y;
}

inline double relu(double v) { return v > 0.0 ? v : 0.0; }
inline double gelu(double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }
inline double silu(double v) { return v / (1.0 + std::exp(-v)); }

inline Vec add(const Vec& a, const Vec& b) {
  Vec y(a.size());
  for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] + b[i];
  return y;
}

// Additive mask term of query l against key s for batch b and head h.
using MaskFn = std::function<double(int64_t b, int64_t h, int64_t l, int64_t s)>;

// torch's MHA masks: attn_mask [L, S] or [B*H, L, S] and key_padding_mask
// [B, S] ([S] unbatched), each bool (True = masked -> -inf) or float (added).
inline MaskFn mha_mask(const Tensor& attn_mask, const Tensor& key_padding_mask, int64_t H) {
  auto value = [](const Tensor& m, std::initializer_list<int64_t> index) {
    const double v = m.at(index);
    return m.dtype() == DType::kBool ? (v != 0.0 ? kNegInf : 0.0) : v;
  };
  return [=](int64_t b, int64_t h, int64_t l, int64_t s) {
    double x = 0.0;
    if (attn_mask.defined())
      x += attn_mask.dim() == 2 ? value(attn_mask, {l, s}) : value(attn_mask, {b * H + h, l, s});
    if (key_padding_mask.defined())
      x += key_padding_mask.dim() == 1 ? value(key_padding_mask, {s})
                                       : value(key_padding_mask, {b, s});
    return x;
  };
}

// torch's MultiheadAttention (packed in_proj, `prefix` names its parameters):
// softmax(q_h k_hᵀ / √E + mask) v_h per head, heads concatenated, out_proj.
// q_in: [B, L, D]  kv_in: [B, S, D]  ->  [B, L, D]
inline Seq mha(const Seq& q_in, const Seq& kv_in, Params& p, const std::string& prefix, int64_t H,
               const MaskFn& mask) {
  const int64_t B = q_in.B, L = q_in.T, S = kv_in.T, D = q_in.D, E = D / H;
  const Vec& w = p[prefix + "in_proj_weight"];
  const Vec wq(w.begin(), w.begin() + D * D), wk(w.begin() + D * D, w.begin() + 2 * D * D),
      wv(w.begin() + 2 * D * D, w.end());
  Vec bq, bk, bv;
  if (p.count(prefix + "in_proj_bias")) {
    const Vec& b = p[prefix + "in_proj_bias"];
    bq.assign(b.begin(), b.begin() + D);
    bk.assign(b.begin() + D, b.begin() + 2 * D);
    bv.assign(b.begin() + 2 * D, b.end());
  }
  const Vec q = linear(q_in.x, D, wq, bq), k = linear(kv_in.x, D, wk, bk),
            v = linear(kv_in.x, D, wv, bv);
  Vec heads(static_cast<size_t>(B * L * D), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t l = 0; l < L; ++l) {
        Vec score(static_cast<size_t>(S));
        double max_score = kNegInf;
        for (int64_t s = 0; s < S; ++s) {
          double dot = 0.0;
          for (int64_t e = 0; e < E; ++e)
            dot += q[(b * L + l) * D + h * E + e] * k[(b * S + s) * D + h * E + e];
          score[s] = dot / std::sqrt(static_cast<double>(E)) + mask(b, h, l, s);
          max_score = std::max(max_score, score[s]);
        }
        double sum = 0.0;
        for (double& x : score) sum += (x = std::exp(x - max_score));
        for (int64_t s = 0; s < S; ++s)
          for (int64_t e = 0; e < E; ++e)
            heads[(b * L + l) * D + h * E + e] += score[s] / sum * v[(b * S + s) * D + h * E + e];
      }
  const Vec empty;
  Seq out = q_in;
  out.x = linear(heads, D, p[prefix + "out_proj.weight"],
                 p.count(prefix + "out_proj.bias") ? p[prefix + "out_proj.bias"] : empty);
  return out;
}

// linear2(act(linear1(x)))
inline Vec ffn(const Vec& x, int64_t D, Params& p, const std::string& prefix, bool gelu_act) {
  const Vec empty;
  auto bias = [&](const std::string& n) { return p.count(prefix + n) ? p[prefix + n] : empty; };
  Vec h = linear(x, D, p[prefix + "linear1.weight"], bias("linear1.bias"));
  for (double& v : h) v = gelu_act ? gelu(v) : relu(v);
  const int64_t F = static_cast<int64_t>(p[prefix + "linear1.weight"].size()) / D;
  return linear(h, F, p[prefix + "linear2.weight"], bias("linear2.bias"));
}

inline Vec norm(const Vec& x, int64_t D, Params& p, const std::string& name, double eps) {
  const Vec empty;
  return layer_norm(x, D, p[name + ".weight"], p.count(name + ".bias") ? p[name + ".bias"] : empty,
                    eps);
}

struct LayerConfig {
  int64_t H = 1;
  bool norm_first = false;
  bool gelu = false;
  double eps = 1e-5;
};

// TransformerEncoderLayer with dropout off.
inline Seq encoder_layer(const Seq& src, Params& p, const std::string& prefix, const LayerConfig& c,
                         const MaskFn& mask) {
  const int64_t D = src.D;
  Seq x = src;
  auto sa = [&](const Seq& in) { return mha(in, in, p, prefix + "self_attn.", c.H, mask).x; };
  if (c.norm_first) {
    Seq n1 = x;
    n1.x = norm(x.x, D, p, prefix + "norm1", c.eps);
    x.x = add(x.x, sa(n1));
    x.x = add(x.x, ffn(norm(x.x, D, p, prefix + "norm2", c.eps), D, p, prefix, c.gelu));
  } else {
    x.x = norm(add(x.x, sa(x)), D, p, prefix + "norm1", c.eps);
    x.x = norm(add(x.x, ffn(x.x, D, p, prefix, c.gelu)), D, p, prefix + "norm2", c.eps);
  }
  return x;
}

// TransformerDecoderLayer with dropout off.
inline Seq decoder_layer(const Seq& tgt, const Seq& memory, Params& p, const std::string& prefix,
                         const LayerConfig& c, const MaskFn& self_mask, const MaskFn& cross_mask) {
  const int64_t D = tgt.D;
  Seq x = tgt;
  auto sa = [&](const Seq& in) { return mha(in, in, p, prefix + "self_attn.", c.H, self_mask).x; };
  auto ca = [&](const Seq& in) {
    return mha(in, memory, p, prefix + "multihead_attn.", c.H, cross_mask).x;
  };
  auto normed = [&](const std::string& n) {
    Seq s = x;
    s.x = norm(x.x, D, p, prefix + n, c.eps);
    return s;
  };
  if (c.norm_first) {
    x.x = add(x.x, sa(normed("norm1")));
    x.x = add(x.x, ca(normed("norm2")));
    x.x = add(x.x, ffn(norm(x.x, D, p, prefix + "norm3", c.eps), D, p, prefix, c.gelu));
  } else {
    x.x = norm(add(x.x, sa(x)), D, p, prefix + "norm1", c.eps);
    x.x = norm(add(x.x, ca(x)), D, p, prefix + "norm2", c.eps);
    x.x = norm(add(x.x, ffn(x.x, D, p, prefix, c.gelu)), D, p, prefix + "norm3", c.eps);
  }
  return x;
}

}  // namespace qkv::reference
