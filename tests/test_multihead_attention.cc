// nn::MultiheadAttention against an independent float64 computation of torch's
// multi_head_attention_forward, written here with plain loops from the formulas
// (no qkv op is used by the reference).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/generator.h"
#include "qkv/nn/multihead_attention.h"
#include "qkv/tensor.h"
#include "reference_blocks.h"
#include "test_util.h"

namespace qkv::nn {
namespace {

using qkv_test::expect_error;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kTol32 = 2e-5;
constexpr double kTol64 = 1e-11;

// Inputs in the three layouts, read back in float64 (reference_blocks.h).
using qkv::reference::Layout;
using qkv::reference::read_seq;
using qkv::reference::Seq;

Tensor make_input(Layout layout, int64_t B, int64_t T, int64_t F, Generator& gen, DType dtype) {
  return qkv::reference::randn_seq(layout, B, T, F, gen, dtype);
}

// The module's parameters in float64; absent ones are empty.
struct RefParams {
  int64_t D = 0, H = 0, kdim = 0, vdim = 0;
  bool add_zero_attn = false;
  std::vector<double> wq, wk, wv, bq, bk, bv, wo, bo, bias_k, bias_v;
};

RefParams read_params(const MultiheadAttention& m) {
  RefParams p;
  const MultiheadAttentionOptions& o = m.options();
  p.D = o.embed_dim;
  p.H = o.num_heads;
  p.kdim = o.kdim;
  p.vdim = o.vdim;
  p.add_zero_attn = o.add_zero_attn;
  std::map<std::string, Tensor> s = m.state_dict();
  const int64_t D = p.D;
  if (s.count("in_proj_weight")) {
    const std::vector<double> w = s["in_proj_weight"].to_vector();
    p.wq.assign(w.begin(), w.begin() + D * D);
    p.wk.assign(w.begin() + D * D, w.begin() + 2 * D * D);
    p.wv.assign(w.begin() + 2 * D * D, w.end());
  } else {
    p.wq = s["q_proj_weight"].to_vector();
    p.wk = s["k_proj_weight"].to_vector();
    p.wv = s["v_proj_weight"].to_vector();
  }
  if (s.count("in_proj_bias")) {
    const std::vector<double> b = s["in_proj_bias"].to_vector();
    p.bq.assign(b.begin(), b.begin() + D);
    p.bk.assign(b.begin() + D, b.begin() + 2 * D);
    p.bv.assign(b.begin() + 2 * D, b.end());
  }
  p.wo = s["out_proj.weight"].to_vector();
  if (s.count("out_proj.bias")) p.bo = s["out_proj.bias"].to_vector();
  if (s.count("bias_k")) {
    p.bias_k = s["bias_k"].to_vector();
    p.bias_v = s["bias_v"].to_vector();
  }
  return p;
}

// Additive mask term of query l against original key s < S for batch b, head h.
using MaskFn = std::function<double(int64_t b, int64_t h, int64_t l, int64_t s)>;

struct RefResult {
  int64_t B = 0, H = 0, L = 0, St = 0, D = 0;
  std::vector<double> out;      // [B, L, D]
  std::vector<double> weights;  // [B, H, L, St] (St includes bias_k and zero columns)
  double out_at(int64_t b, int64_t l, int64_t d) const { return out[(b * L + l) * D + d]; }
  double w_at(int64_t b, int64_t h, int64_t l, int64_t s) const {
    return weights[((b * H + h) * L + l) * St + s];
  }
};

// y[r][j] = b[j] + Σ_f w[j][f] x[r][f]
std::vector<double> project(const Seq& x, const std::vector<double>& w,
                            const std::vector<double>& b, int64_t out) {
  std::vector<double> y(static_cast<size_t>(x.B * x.T * out));
  for (int64_t r = 0; r < x.B * x.T; ++r)
    for (int64_t j = 0; j < out; ++j) {
      double acc = b.empty() ? 0.0 : b[j];
      for (int64_t f = 0; f < x.D; ++f) acc += w[j * x.D + f] * x.x[r * x.D + f];
      y[r * out + j] = acc;
    }
  return y;
}

// torch's multi_head_attention_forward in float64. `weights_override` replaces
// the softmax weights (to check the output for weights after dropout).
RefResult reference(const RefParams& p, const Seq& q, const Seq& k, const Seq& v,
                    const MaskFn& mask, const std::vector<double>* weights_override = nullptr) {
  const int64_t B = q.B, L = q.T, S = k.T, D = p.D, H = p.H, E = D / H;
  const int64_t St = S + (p.bias_k.empty() ? 0 : 1) + (p.add_zero_attn ? 1 : 0);
  const std::vector<double> qp = project(q, p.wq, p.bq, D);
  const std::vector<double> kp0 = project(k, p.wk, p.bk, D);
  const std::vector<double> vp0 = project(v, p.wv, p.bv, D);
  // Keys/values [B, St, D]: projected rows, then bias_k/bias_v, then zeros.
  std::vector<double> kp(static_cast<size_t>(B * St * D), 0.0), vp(kp.size(), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < St; ++s)
      for (int64_t d = 0; d < D; ++d) {
        double kv = 0.0, vv = 0.0;
        if (s < S) {
          kv = kp0[(b * S + s) * D + d];
          vv = vp0[(b * S + s) * D + d];
        } else if (s == S && !p.bias_k.empty()) {
          kv = p.bias_k[d];
          vv = p.bias_v[d];
        }
        kp[(b * St + s) * D + d] = kv;
        vp[(b * St + s) * D + d] = vv;
      }
  RefResult r;
  r.B = B, r.H = H, r.L = L, r.St = St, r.D = D;
  r.weights.assign(static_cast<size_t>(B * H * L * St), 0.0);
  std::vector<double> heads(static_cast<size_t>(B * L * D), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t l = 0; l < L; ++l) {
        double* w = &r.weights[((b * H + h) * L + l) * St];
        if (weights_override) {
          for (int64_t s = 0; s < St; ++s)
            w[s] = (*weights_override)[((b * H + h) * L + l) * St + s];
        } else {
          double max = -kInf;
          for (int64_t s = 0; s < St; ++s) {
            double dot = 0.0;
            for (int64_t e = 0; e < E; ++e)
              dot += qp[(b * L + l) * D + h * E + e] * kp[(b * St + s) * D + h * E + e];
            w[s] =
                dot / std::sqrt(static_cast<double>(E)) + (s < S && mask ? mask(b, h, l, s) : 0.0);
            max = std::max(max, w[s]);
          }
          double sum = 0.0;
          for (int64_t s = 0; s < St; ++s) {
            w[s] = max == -kInf ? 0.0 : std::exp(w[s] - max);  // fully masked row: 0
            sum += w[s];
          }
          for (int64_t s = 0; s < St; ++s)
            if (sum > 0) w[s] /= sum;
        }
        for (int64_t e = 0; e < E; ++e) {
          double acc = 0.0;
          for (int64_t s = 0; s < St; ++s) acc += w[s] * vp[(b * St + s) * D + h * E + e];
          heads[(b * L + l) * D + h * E + e] = acc;
        }
      }
  r.out.assign(static_cast<size_t>(B * L * D), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t i = 0; i < D; ++i) {
        double acc = p.bo.empty() ? 0.0 : p.bo[i];
        for (int64_t j = 0; j < D; ++j) acc += p.wo[i * D + j] * heads[(b * L + l) * D + j];
        r.out[(b * L + l) * D + i] = acc;
      }
  return r;
}

void expect_output_near(const Tensor& out, Layout layout, const RefResult& r, double tol) {
  const Shape expected = layout == Layout::kSeqFirst     ? Shape{r.L, r.B, r.D}
                         : layout == Layout::kBatchFirst ? Shape{r.B, r.L, r.D}
                                                         : Shape{r.L, r.D};
  ASSERT_EQ(out.shape(), expected);
  const Seq got = read_seq(out, layout);
  double worst = 0.0;
  for (int64_t b = 0; b < r.B; ++b)
    for (int64_t l = 0; l < r.L; ++l)
      for (int64_t d = 0; d < r.D; ++d)
        worst = std::max(worst, std::abs(got.at(b, l, d) - r.out_at(b, l, d)));
  EXPECT_LE(worst, tol) << "output differs from the float64 reference";
}

void expect_weights_near(const Tensor& w, bool averaged, bool unbatched, const RefResult& r,
                         double tol) {
  Shape expected = averaged ? Shape{r.B, r.L, r.St} : Shape{r.B, r.H, r.L, r.St};
  if (unbatched) expected.erase(expected.begin());
  ASSERT_EQ(w.shape(), expected);
  const std::vector<double> got = w.to_vector();
  double worst = 0.0;
  for (int64_t b = 0; b < r.B; ++b)
    for (int64_t l = 0; l < r.L; ++l)
      for (int64_t s = 0; s < r.St; ++s) {
        double mean = 0.0;
        for (int64_t h = 0; h < r.H; ++h) {
          mean += r.w_at(b, h, l, s) / static_cast<double>(r.H);
          if (!averaged)
            worst = std::max(
                worst, std::abs(got[((b * r.H + h) * r.L + l) * r.St + s] - r.w_at(b, h, l, s)));
        }
        if (averaged) worst = std::max(worst, std::abs(got[(b * r.L + l) * r.St + s] - mean));
      }
  EXPECT_LE(worst, tol) << "weights differ from the float64 reference";
}

// Non-trivial values for every parameter (the default biases are zero).
void randomize(MultiheadAttention& m, Generator& gen) {
  for (auto& [name, t] : m.state_dict()) {
    Tensor copy = t;
    copy.copy_from(Tensor::rand(t.shape(), gen, -0.5, 0.5, t.dtype()));
  }
}

// A module of options `o` whose parameters are then randomized from `gen`.
MultiheadAttention random_module(const MultiheadAttentionOptions& o, Generator& gen) {
  MultiheadAttention m(o, &gen);
  randomize(m, gen);
  return m;
}

enum class MaskKind { kNone, kBool, kFloat };

// One configuration: module options, input layout, sizes, masks and forward flags.
struct Case {
  MultiheadAttentionOptions options;
  Layout layout = Layout::kSeqFirst;
  int64_t B = 2, L = 5, S = 5;
  bool self_attention = false;  // query, key and value are one tensor (needs L == S)
  MaskKind kpm = MaskKind::kNone;
  MaskKind attn = MaskKind::kNone;
  bool attn_3d = false;
  bool need_weights = true;
  bool average = true;
  uint64_t seed = 1;
};

// Random mask of `shape`: bool (True = masked, ~30%) or float (values in
// [-2, 2], ~20% -inf). Returns the tensor and the additive values, row-major.
std::pair<Tensor, std::vector<double>> random_mask(MaskKind kind, const Shape& shape,
                                                   Generator& gen, DType dtype) {
  const int64_t n = shape_numel(shape);
  std::vector<double> add(static_cast<size_t>(n));
  if (kind == MaskKind::kBool) {
    std::vector<bool> bits(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      bits[i] = gen.uniform() < 0.3;
      add[i] = bits[i] ? -kInf : 0.0;
    }
    return {Tensor::from_bools(shape, bits), add};
  }
  for (int64_t i = 0; i < n; ++i) add[i] = gen.uniform() < 0.2 ? -kInf : 4.0 * gen.uniform() - 2.0;
  return {Tensor::from_vector(shape, std::span<const double>(add)).to(dtype), add};
}

void run_case(const Case& c) {
  Generator gen(c.seed);
  MultiheadAttentionOptions o = c.options;
  // batch_first is ignored for unbatched inputs: keep what the case asked for there.
  if (c.layout != Layout::kUnbatched) o.batch_first = c.layout == Layout::kBatchFirst;
  MultiheadAttention m = random_module(o, gen);
  const int64_t D = m.options().embed_dim, H = m.options().num_heads;
  const bool unbatched = c.layout == Layout::kUnbatched;
  const int64_t B = unbatched ? 1 : c.B;
  Tensor query = make_input(c.layout, B, c.L, D, gen, o.dtype);
  Tensor key =
      c.self_attention ? query : make_input(c.layout, B, c.S, m.options().kdim, gen, o.dtype);
  Tensor value =
      c.self_attention ? query : make_input(c.layout, B, c.S, m.options().vdim, gen, o.dtype);

  MultiheadAttentionForward args;
  args.need_weights = c.need_weights;
  args.average_attn_weights = c.average;
  std::vector<double> kpm_add, attn_add;
  if (c.kpm != MaskKind::kNone) {
    auto [t, add] = random_mask(c.kpm, unbatched ? Shape{c.S} : Shape{B, c.S}, gen, o.dtype);
    args.key_padding_mask = t;
    kpm_add = add;
  }
  if (c.attn != MaskKind::kNone) {
    auto [t, add] =
        random_mask(c.attn, c.attn_3d ? Shape{B * H, c.L, c.S} : Shape{c.L, c.S}, gen, o.dtype);
    args.attn_mask = t;
    attn_add = add;
  }
  const int64_t S = c.S, L = c.L;
  const bool attn_3d = c.attn_3d;
  MaskFn mask = [&](int64_t b, int64_t h, int64_t l, int64_t s) {
    double x = 0.0;
    if (!attn_add.empty()) x += attn_add[((attn_3d ? b * H + h : 0) * L + l) * S + s];
    if (!kpm_add.empty()) x += kpm_add[b * S + s];
    return x;
  };

  const MultiheadAttentionOutput got = m.forward(query, key, value, args);
  const RefResult want = reference(read_params(m), read_seq(query, c.layout),
                                   read_seq(key, c.layout), read_seq(value, c.layout), mask);
  const double tol = o.dtype == DType::kFloat64 ? kTol64 : kTol32;
  expect_output_near(got.output, c.layout, want, tol);
  if (c.need_weights) {
    ASSERT_TRUE(got.weights.defined());
    expect_weights_near(got.weights, c.average, unbatched, want, tol);
  } else {
    EXPECT_FALSE(got.weights.defined());
  }
}

MultiheadAttentionOptions opts(int64_t D, int64_t H, DType dtype = DType::kFloat32) {
  MultiheadAttentionOptions o;
  o.embed_dim = D;
  o.num_heads = H;
  o.dtype = dtype;
  return o;
}

// run_case in the case's dtype, then in the other floating-point type.
void run_case_in_both_dtypes(Case c) {
  run_case(c);
  c.options.dtype = c.options.dtype == DType::kFloat64 ? DType::kFloat32 : DType::kFloat64;
  run_case(c);
}

// --- Forward against the reference ------------------------------------------

TEST(MultiheadAttention, PackedSelfAttention) {
  Case c;
  c.options = opts(8, 2);
  c.self_attention = true;
  run_case_in_both_dtypes(c);
}

TEST(MultiheadAttention, CrossAttentionDifferentLengths) {
  Case c;
  c.options = opts(12, 3, DType::kFloat64);
  c.L = 3;
  c.S = 7;
  c.B = 3;
  run_case_in_both_dtypes(c);
}

TEST(MultiheadAttention, SeparateKdimVdim) {
  Case c;
  c.options = opts(8, 4, DType::kFloat64);
  c.options.kdim = 5;
  c.options.vdim = 3;
  c.L = 4;
  c.S = 6;
  run_case(c);
  c.options.vdim = 0;  // kdim alone also unpacks
  run_case(c);
  c.options.dtype = DType::kFloat32;
  c.layout = Layout::kBatchFirst;
  run_case(c);
}

TEST(MultiheadAttention, NoBias) {
  Case c;
  c.options = opts(8, 2, DType::kFloat64);
  c.options.bias = false;
  c.kpm = MaskKind::kBool;
  run_case(c);
  c.options.kdim = 6;
  run_case(c);
}

TEST(MultiheadAttention, AddBiasKvAndZeroAttn) {
  for (bool bias_kv : {false, true})
    for (bool zero_attn : {false, true})
      for (bool need_weights : {true, false}) {
        SCOPED_TRACE(::testing::Message() << "add_bias_kv=" << bias_kv << " add_zero_attn="
                                          << zero_attn << " need_weights=" << need_weights);
        Case c;
        c.options = opts(8, 2, DType::kFloat64);
        c.options.add_bias_kv = bias_kv;
        c.options.add_zero_attn = zero_attn;
        c.L = 4;
        c.S = 6;
        c.kpm = MaskKind::kBool;
        c.attn = MaskKind::kFloat;
        c.need_weights = need_weights;
        c.average = false;
        run_case(c);
        c.attn_3d = true;
        c.kpm = MaskKind::kFloat;
        c.layout = Layout::kBatchFirst;
        run_case(c);
        c.layout = Layout::kUnbatched;
        run_case(c);
      }
}

TEST(MultiheadAttention, BatchFirst) {
  Case c;
  c.options = opts(8, 2);
  c.layout = Layout::kBatchFirst;
  c.self_attention = true;
  c.kpm = MaskKind::kBool;
  run_case(c);
  c.self_attention = false;
  c.L = 2;
  c.S = 9;
  c.attn = MaskKind::kBool;
  c.average = false;
  run_case(c);
}

TEST(MultiheadAttention, NonContiguousInputs) {
  Generator gen(3);
  MultiheadAttention m = random_module({.embed_dim = 8, .num_heads = 2, .batch_first = true}, gen);
  // [B, L, D] views of [L, B, D] buffers, and a strided slice.
  Tensor q = Tensor::randn({4, 2, 8}, gen).transpose(0, 1);
  Tensor kv = Tensor::randn({2, 10, 8}, gen).slice(1, 0, 10, 2);
  ASSERT_FALSE(q.is_contiguous());
  ASSERT_FALSE(kv.is_contiguous());
  const auto got = m.forward(q, kv, kv);
  const RefResult want =
      reference(read_params(m), read_seq(q, Layout::kBatchFirst), read_seq(kv, Layout::kBatchFirst),
                read_seq(kv, Layout::kBatchFirst), nullptr);
  expect_output_near(got.output, Layout::kBatchFirst, want, kTol32);
  expect_weights_near(got.weights, true, false, want, kTol32);
}

TEST(MultiheadAttention, Unbatched) {
  Case c;
  c.options = opts(8, 2, DType::kFloat64);
  c.layout = Layout::kUnbatched;
  c.L = 3;
  c.S = 5;
  run_case(c);
  c.kpm = MaskKind::kBool;
  c.attn = MaskKind::kBool;
  run_case(c);
  c.attn_3d = true;  // [H, L, S]
  c.kpm = MaskKind::kFloat;
  c.average = false;
  run_case(c);
  c.options.batch_first = true;  // ignored for unbatched inputs
  run_case(c);
}

TEST(MultiheadAttention, MaskKinds) {
  for (MaskKind kpm : {MaskKind::kNone, MaskKind::kBool, MaskKind::kFloat})
    for (MaskKind attn : {MaskKind::kNone, MaskKind::kBool, MaskKind::kFloat})
      for (bool attn_3d : {false, true})
        for (bool need_weights : {true, false}) {
          if (attn == MaskKind::kNone && attn_3d) continue;
          SCOPED_TRACE(::testing::Message()
                       << "kpm=" << static_cast<int>(kpm) << " attn=" << static_cast<int>(attn)
                       << " attn_3d=" << attn_3d << " need_weights=" << need_weights);
          Case c;
          c.options = opts(12, 3);
          c.B = 3;
          c.L = 4;
          c.S = 7;
          c.kpm = kpm;
          c.attn = attn;
          c.attn_3d = attn_3d;
          c.need_weights = need_weights;
          run_case(c);
        }
}

TEST(MultiheadAttention, PerHeadWeights) {
  Case c;
  c.options = opts(16, 4);
  c.average = false;
  c.attn = MaskKind::kFloat;
  c.attn_3d = true;
  run_case(c);
}

TEST(MultiheadAttention, NeedWeightsFalseGivesSameOutput) {
  Generator gen(5);
  MultiheadAttention m = random_module(opts(8, 2), gen);
  Tensor x = Tensor::randn({5, 2, 8}, gen);
  MultiheadAttentionForward args;
  args.attn_mask = Tensor::from_bools({5, 5}, std::vector<bool>(25, false));
  const auto with = m.forward(x, x, x, args);
  args.need_weights = false;
  const auto without = m.forward(x, x, x, args);
  EXPECT_FALSE(without.weights.defined());
  EXPECT_LE(max_abs_diff(with.output, without.output), 1e-6);
}

TEST(MultiheadAttention, FullyMaskedRowsGiveZero) {
  Generator gen(6);
  MultiheadAttention m = random_module(opts(8, 2, DType::kFloat64), gen);
  Tensor x = Tensor::randn({3, 2, 8}, gen, DType::kFloat64);
  MultiheadAttentionForward args;
  // Batch 1 has every key padded: attention gives 0, so the output is out_proj.bias.
  args.key_padding_mask = Tensor::from_bools({2, 3}, {false, true, false, true, true, true});
  for (bool need_weights : {true, false}) {
    args.need_weights = need_weights;
    const auto got = m.forward(x, x, x, args);
    const std::vector<double> bias = m.state_dict()["out_proj.bias"].to_vector();
    for (int64_t l = 0; l < 3; ++l)
      for (int64_t d = 0; d < 8; ++d) {
        ASSERT_FALSE(std::isnan(got.output.at({l, 1, d})));
        EXPECT_NEAR(got.output.at({l, 1, d}), bias[d], kTol64);
      }
    if (need_weights) {
      for (int64_t l = 0; l < 3; ++l)
        for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(got.weights.at({1, l, s}), 0.0);
      // Batch 0 keeps its rows normalised.
      for (int64_t l = 0; l < 3; ++l)
        EXPECT_NEAR(got.weights.at({0, l, 0}) + got.weights.at({0, l, 2}), 1.0, kTol64);
    }
  }
}

// --- is_causal ---------------------------------------------------------------

TEST(MultiheadAttention, IsCausalWithCausalMask) {
  Generator gen(7);
  MultiheadAttention m = random_module(opts(8, 2, DType::kFloat64), gen);
  const int64_t L = 6;
  Tensor x = Tensor::randn({L, 2, 8}, gen, DType::kFloat64);
  std::vector<bool> bits;
  for (int64_t l = 0; l < L; ++l)
    for (int64_t s = 0; s < L; ++s) bits.push_back(s > l);  // True = not allowed
  const Seq xs = read_seq(x, Layout::kSeqFirst);
  const RefResult want =
      reference(read_params(m), xs, xs, xs,
                [](int64_t, int64_t, int64_t l, int64_t s) { return s > l ? -kInf : 0.0; });
  for (bool need_weights : {false, true}) {
    MultiheadAttentionForward args;
    args.attn_mask = Tensor::from_bools({L, L}, bits);
    args.is_causal = true;
    args.need_weights = need_weights;
    const auto got = m.forward(x, x, x, args);
    expect_output_near(got.output, Layout::kSeqFirst, want, kTol64);
    if (need_weights) expect_weights_near(got.weights, true, false, want, kTol64);
  }
}

TEST(MultiheadAttention, IsCausalHintFollowsTorch) {
  // torch uses SDPA's is_causal (ignoring attn_mask) only when there is no
  // key_padding_mask and need_weights=False; otherwise the mask itself.
  Generator gen(8);
  MultiheadAttention m = random_module(opts(8, 2, DType::kFloat64), gen);
  const int64_t L = 5;
  Tensor x = Tensor::randn({L, 2, 8}, gen, DType::kFloat64);
  const Seq xs = read_seq(x, Layout::kSeqFirst);
  const RefParams p = read_params(m);
  MultiheadAttentionForward args;
  args.attn_mask = Tensor::zeros({L, L}, DType::kFloat64);  // not causal: a wrong hint
  args.is_causal = true;

  args.need_weights = false;
  const RefResult causal = reference(
      p, xs, xs, xs, [](int64_t, int64_t, int64_t l, int64_t s) { return s > l ? -kInf : 0.0; });
  expect_output_near(m.forward(x, x, x, args).output, Layout::kSeqFirst, causal, kTol64);

  args.need_weights = true;
  const RefResult plain = reference(p, xs, xs, xs, nullptr);
  expect_output_near(m.forward(x, x, x, args).output, Layout::kSeqFirst, plain, kTol64);

  args.need_weights = false;
  args.key_padding_mask = Tensor::from_bools({2, L}, std::vector<bool>(2 * L, false));
  expect_output_near(m.forward(x, x, x, args).output, Layout::kSeqFirst, plain, kTol64);
}

TEST(MultiheadAttention, IsCausalNeedsAttnMask) {
  MultiheadAttention m(opts(8, 2));
  Tensor x = Tensor::zeros({3, 1, 8});
  MultiheadAttentionForward args;
  args.is_causal = true;
  expect_error([&] { m.forward(x, x, x, args); }, ErrorKind::kValue, {"is_causal", "attn_mask"});
}

// --- Dropout -----------------------------------------------------------------

TEST(MultiheadAttention, DropoutOnlyInTraining) {
  const double p = 0.5;
  Generator gen(9);
  MultiheadAttentionOptions o = opts(8, 2, DType::kFloat64);
  o.dropout = p;
  MultiheadAttention m = random_module(o, gen);
  Generator dropout_gen(10);
  m.set_generator(&dropout_gen);
  EXPECT_TRUE(m.is_training());  // torch's default

  const int64_t B = 4, L = 32;
  Tensor x = Tensor::randn({L, B, 8}, gen, DType::kFloat64);
  const Seq xs = read_seq(x, Layout::kSeqFirst);
  MultiheadAttentionForward args;
  args.average_attn_weights = false;

  m.eval();
  EXPECT_FALSE(m.is_training());
  const auto eval_out = m.forward(x, x, x, args);
  const RefResult want = reference(read_params(m), xs, xs, xs, nullptr);
  expect_output_near(eval_out.output, Layout::kSeqFirst, want, kTol64);
  expect_weights_near(eval_out.weights, false, false, want, kTol64);

  m.train();
  const auto train_out = m.forward(x, x, x, args);
  // Each weight is dropped (0) or kept and scaled by 1/(1-p); about half are kept.
  const std::vector<double> w_train = train_out.weights.to_vector();
  const std::vector<double> w_eval = eval_out.weights.to_vector();
  int64_t kept = 0;
  for (size_t i = 0; i < w_train.size(); ++i) {
    if (w_train[i] != 0.0) {
      ++kept;
      ASSERT_NEAR(w_train[i], w_eval[i] / (1.0 - p), 1e-12);
    }
  }
  const double fraction = static_cast<double>(kept) / static_cast<double>(w_train.size());
  EXPECT_NEAR(fraction, 1.0 - p, 0.03);  // 8192 weights: 5.5 standard deviations
  // The output uses exactly the returned (dropped) weights, as torch.
  const RefResult dropped = reference(read_params(m), xs, xs, xs, nullptr, &w_train);
  expect_output_near(train_out.output, Layout::kSeqFirst, dropped, kTol64);

  // Same generator state, same result.
  dropout_gen.manual_seed(11);
  const auto a = m.forward(x, x, x, args);
  dropout_gen.manual_seed(11);
  const auto b = m.forward(x, x, x, args);
  EXPECT_EQ(max_abs_diff(a.output, b.output), 0.0);
  EXPECT_GT(max_abs_diff(a.output, eval_out.output), 1e-3);
}

TEST(MultiheadAttention, DropoutOneDropsEverything) {
  Generator gen(12);
  MultiheadAttentionOptions o = opts(8, 2, DType::kFloat64);
  o.dropout = 1.0;
  MultiheadAttention m = random_module(o, gen);
  Tensor x = Tensor::randn({3, 2, 8}, gen, DType::kFloat64);
  const auto got = m.forward(x, x, x);
  for (double w : got.weights.to_vector()) EXPECT_EQ(w, 0.0);
  const std::vector<double> bias = m.state_dict()["out_proj.bias"].to_vector();
  for (int64_t d = 0; d < 8; ++d) EXPECT_NEAR(got.output.at({2, 1, d}), bias[d], kTol64);
}

// --- Construction and parameters ---------------------------------------------

TEST(MultiheadAttention, ParameterShapesAndNames) {
  using Names = std::vector<std::pair<std::string, Shape>>;
  auto names = [](const MultiheadAttention& m) {
    Names out;
    for (const auto& [name, t] : m.state_dict()) out.emplace_back(name, t.shape());
    return out;
  };
  // torch's names and order.
  EXPECT_EQ(names(MultiheadAttention(opts(8, 2))), (Names{{"in_proj_weight", {24, 8}},
                                                          {"in_proj_bias", {24}},
                                                          {"out_proj.weight", {8, 8}},
                                                          {"out_proj.bias", {8}}}));
  MultiheadAttentionOptions o = opts(8, 2);
  o.kdim = 5;
  o.vdim = 3;
  o.add_bias_kv = true;
  MultiheadAttention sep(o);
  EXPECT_FALSE(sep.packed_in_proj());
  EXPECT_EQ(sep.options().kdim, 5);
  EXPECT_EQ(names(sep), (Names{{"q_proj_weight", {8, 8}},
                               {"k_proj_weight", {8, 5}},
                               {"v_proj_weight", {8, 3}},
                               {"in_proj_bias", {24}},
                               {"bias_k", {1, 1, 8}},
                               {"bias_v", {1, 1, 8}},
                               {"out_proj.weight", {8, 8}},
                               {"out_proj.bias", {8}}}));
  o = opts(8, 4);
  o.bias = false;
  o.kdim = 8;  // equal to embed_dim: still packed
  MultiheadAttention nobias(o);
  EXPECT_TRUE(nobias.packed_in_proj());
  EXPECT_EQ(nobias.head_dim(), 2);
  EXPECT_EQ(names(nobias), (Names{{"in_proj_weight", {24, 8}}, {"out_proj.weight", {8, 8}}}));
  for (const auto& [name, t] : MultiheadAttention(opts(8, 2, DType::kFloat64)).state_dict())
    EXPECT_EQ(t.dtype(), DType::kFloat64) << name;
}

TEST(MultiheadAttention, DefaultInitialisation) {
  const int64_t D = 256;
  Generator gen(13);
  MultiheadAttentionOptions o = opts(D, 4);
  o.add_bias_kv = true;
  MultiheadAttention m(o, &gen);
  auto s = m.state_dict();
  auto check_uniform = [](const Tensor& t, double bound, const char* name) {
    SCOPED_TRACE(name);
    double max = 0.0, mean = 0.0;
    for (double x : t.to_vector()) {
      max = std::max(max, std::abs(x));
      mean += x / static_cast<double>(t.numel());
    }
    EXPECT_LE(max, bound);
    EXPECT_GE(max, 0.99 * bound);
    EXPECT_NEAR(mean, 0.0, 0.02 * bound);
  };
  check_uniform(s["in_proj_weight"], std::sqrt(6.0 / (4.0 * D)), "in_proj_weight (xavier)");
  check_uniform(s["out_proj.weight"], 1.0 / std::sqrt(double(D)), "out_proj.weight (kaiming)");
  for (const char* name : {"in_proj_bias", "out_proj.bias"})
    for (double x : s[name].to_vector()) EXPECT_EQ(x, 0.0) << name;
  for (const char* name : {"bias_k", "bias_v"}) {
    // xavier_normal_ on [1, 1, D]: std = sqrt(2 / (D + D)).
    double sq = 0.0;
    for (double x : s[name].to_vector()) sq += x * x;
    EXPECT_NEAR(std::sqrt(sq / D), std::sqrt(1.0 / D), 0.2 * std::sqrt(1.0 / D)) << name;
  }
  EXPECT_GT(max_abs_diff(s["bias_k"], s["bias_v"]), 0.0);

  o = opts(64, 4);
  o.kdim = 32;
  o.vdim = 16;
  MultiheadAttention sep(o, &gen);
  s = sep.state_dict();
  check_uniform(s["q_proj_weight"], std::sqrt(6.0 / (64 + 64)), "q_proj_weight");
  check_uniform(s["k_proj_weight"], std::sqrt(6.0 / (64 + 32)), "k_proj_weight");
  check_uniform(s["v_proj_weight"], std::sqrt(6.0 / (64 + 16)), "v_proj_weight");

  // The same seed gives the same parameters; another seed other ones.
  Generator g1(99), g2(99), g3(100);
  MultiheadAttention a(opts(8, 2), &g1), b(opts(8, 2), &g2), c(opts(8, 2), &g3);
  EXPECT_EQ(max_abs_diff(a.state_dict()["in_proj_weight"], b.state_dict()["in_proj_weight"]), 0.0);
  EXPECT_GT(max_abs_diff(a.state_dict()["in_proj_weight"], c.state_dict()["in_proj_weight"]), 0.0);
}

TEST(MultiheadAttention, ConstructorErrors) {
  expect_error([] { MultiheadAttention m(opts(10, 3)); }, ErrorKind::kValue,
               {"embed_dim", "10", "num_heads", "3", "divisible"});
  expect_error([] { MultiheadAttention m(opts(0, 1)); }, ErrorKind::kValue, {"embed_dim=0"});
  expect_error([] { MultiheadAttention m(opts(8, 0)); }, ErrorKind::kValue, {"num_heads=0"});
  expect_error([] { MultiheadAttention m(opts(8, 2, DType::kBool)); }, ErrorKind::kType,
               {"dtype", "bool"});
  for (double p : {-0.1, 1.5}) {
    MultiheadAttentionOptions o = opts(8, 2);
    o.dropout = p;
    expect_error([&] { MultiheadAttention m(o); }, ErrorKind::kValue, {"dropout"});
  }
  MultiheadAttentionOptions o = opts(8, 2);
  o.kdim = -1;
  expect_error([&] { MultiheadAttention m(o); }, ErrorKind::kValue, {"kdim=-1"});
}

// --- state_dict ----------------------------------------------------------------

TEST(MultiheadAttention, StateDictRoundTrip) {
  MultiheadAttentionOptions o = opts(8, 2);
  o.kdim = 6;
  o.add_bias_kv = true;
  Generator g1(1), g2(2), gen(3);
  MultiheadAttention a(o, &g1), b(o, &g2);
  randomize(a, gen);
  Tensor q = Tensor::randn({3, 2, 8}, gen), k = Tensor::randn({4, 2, 6}, gen),
         v = Tensor::randn({4, 2, 8}, gen);
  EXPECT_GT(max_abs_diff(a.forward(q, k, v).output, b.forward(q, k, v).output), 1e-3);
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(max_abs_diff(a.forward(q, k, v).output, b.forward(q, k, v).output), 0.0);
  // Loading copies: changing a afterwards leaves b alone.
  a.state_dict()["out_proj.bias"].fill(1.0);
  EXPECT_GT(max_abs_diff(a.forward(q, k, v).output, b.forward(q, k, v).output), 0.5);
  // Values of the other float dtype are converted.
  std::map<std::string, Tensor> state;
  for (const auto& [name, t] : a.state_dict()) state[name] = t.to(DType::kFloat64);
  b.load_state_dict(state);
  EXPECT_EQ(max_abs_diff(a.forward(q, k, v).output, b.forward(q, k, v).output), 0.0);
}

TEST(MultiheadAttention, StateDictSharesTensors) {
  Generator gen(4);
  MultiheadAttention m(opts(8, 2), &gen);
  Tensor x = Tensor::randn({2, 1, 8}, gen);
  const Tensor before = m.forward(x, x, x).output;
  m.state_dict()["out_proj.bias"].fill(2.0);
  EXPECT_NEAR(max_abs_diff(m.forward(x, x, x).output, before), 2.0, 1e-6);
}

TEST(MultiheadAttention, LoadStateDictIsStrict) {
  MultiheadAttention m(opts(8, 2));
  const std::map<std::string, Tensor> good = MultiheadAttention(opts(8, 2)).state_dict();
  const Tensor original = m.state_dict()["in_proj_weight"].clone();

  auto missing = good;
  missing.erase("in_proj_bias");
  expect_error([&] { m.load_state_dict(missing); }, ErrorKind::kValue,
               {"missing", "\"in_proj_bias\""});
  auto unexpected = good;
  unexpected["bias_k"] = Tensor::zeros({1, 1, 8});
  expect_error([&] { m.load_state_dict(unexpected); }, ErrorKind::kValue,
               {"unexpected", "\"bias_k\""});
  auto wrong_shape = good;
  wrong_shape["out_proj.weight"] = Tensor::zeros({8, 4});
  expect_error([&] { m.load_state_dict(wrong_shape); }, ErrorKind::kValue,
               {"out_proj.weight", "[8, 8]", "[8, 4]"});
  auto wrong_dtype = good;
  wrong_dtype["out_proj.bias"] = Tensor::zeros({8}, DType::kBool);
  expect_error([&] { m.load_state_dict(wrong_dtype); }, ErrorKind::kType, {"out_proj.bias"});
  auto undefined = good;
  undefined["in_proj_weight"] = Tensor();
  expect_error([&] { m.load_state_dict(undefined); }, ErrorKind::kValue, {"in_proj_weight"});
  // A failed load changes nothing.
  EXPECT_EQ(max_abs_diff(m.state_dict()["in_proj_weight"], original), 0.0);
}

// --- Bad inputs ---------------------------------------------------------------

TEST(MultiheadAttention, BadInputShapes) {
  MultiheadAttentionOptions o = opts(8, 2);
  o.kdim = 6;
  o.vdim = 4;
  MultiheadAttention m(o);
  const Tensor q = Tensor::zeros({3, 2, 8}), k = Tensor::zeros({5, 2, 6}),
               v = Tensor::zeros({5, 2, 4});
  // forward(q_, k_, v_) must throw a value error that says all of `parts`.
  auto rejects = [&](const Tensor& q_, const Tensor& k_, const Tensor& v_,
                     std::initializer_list<std::string_view> parts, qkv_test::CallSite where = {}) {
    expect_error([&] { m.forward(q_, k_, v_); }, ErrorKind::kValue, parts, where);
  };
  rejects(Tensor::zeros({1, 3, 2, 8}), k, v, {"query", "[1, 3, 2, 8]"});
  rejects(Tensor::zeros({8}), k, v, {"query", "[8]"});
  rejects(q, Tensor::zeros({5, 6}), v, {"key", "3-D", "[5, 6]"});
  rejects(Tensor::zeros({3, 2, 7}), k, v, {"query", "embed_dim=8", "[3, 2, 7]"});
  rejects(q, Tensor::zeros({5, 2, 8}), v, {"key", "kdim=6", "[5, 2, 8]"});
  rejects(q, k, Tensor::zeros({5, 2, 8}), {"value", "vdim=4", "[5, 2, 8]"});
  rejects(q, Tensor::zeros({5, 3, 6}), Tensor::zeros({5, 3, 4}),
          {"batch size", "[3, 2, 8]", "[5, 3, 6]"});
  rejects(q, k, Tensor::zeros({4, 2, 4}), {"sequence length", "[5, 2, 6]", "[4, 2, 4]"});
  rejects(Tensor::zeros({0, 2, 8}), k, v, {"empty", "[0, 2, 8]"});
  rejects(q, Tensor::zeros({0, 2, 6}), Tensor::zeros({0, 2, 4}), {"empty", "[0, 2, 6]"});
}

TEST(MultiheadAttention, BadMasks) {
  MultiheadAttention m(opts(8, 2));
  const Tensor q = Tensor::zeros({3, 2, 8}), kv = Tensor::zeros({5, 2, 8});
  // forward with these masks must throw a `kind` error that says all of `parts`.
  auto rejects = [&](Tensor kpm, Tensor attn, ErrorKind kind,
                     std::initializer_list<std::string_view> parts, qkv_test::CallSite where = {}) {
    MultiheadAttentionForward a;
    a.key_padding_mask = kpm;
    a.attn_mask = attn;
    expect_error([&] { m.forward(q, kv, kv, a); }, kind, parts, where);
  };
  rejects(Tensor::zeros({2, 4}, DType::kBool), {}, ErrorKind::kValue,
          {"key_padding_mask", "[2, 5]", "[2, 4]"});
  rejects(Tensor::zeros({5}, DType::kBool), {}, ErrorKind::kValue,
          {"key_padding_mask", "[2, 5]", "[5]"});
  rejects({}, Tensor::zeros({3, 4}, DType::kBool), ErrorKind::kValue,
          {"attn_mask", "[3, 5]", "[3, 4]"});
  rejects({}, Tensor::zeros({2, 3, 5}, DType::kBool), ErrorKind::kValue,
          {"attn_mask", "[4, 3, 5]", "[2, 3, 5]"});
  rejects({}, Tensor::zeros({1, 4, 3, 5}, DType::kBool), ErrorKind::kValue,
          {"attn_mask", "[1, 4, 3, 5]"});
  // Float masks must have the module's dtype (TypeError in Python).
  rejects(Tensor::zeros({2, 5}, DType::kFloat64), {}, ErrorKind::kType,
          {"key_padding_mask", "float32", "float64"});
  rejects({}, Tensor::zeros({3, 5}, DType::kFloat64), ErrorKind::kType,
          {"attn_mask", "float32", "float64"});
  rejects({}, Tensor::full({3, 5}, NAN), ErrorKind::kValue, {"attn_mask", "NaN"});
  rejects(Tensor::full({2, 5}, INFINITY), {}, ErrorKind::kValue, {"key_padding_mask", "+inf"});

  // Unbatched: key_padding_mask [S], attn_mask [L, S] or [H, L, S].
  const Tensor uq = Tensor::zeros({3, 8}), ukv = Tensor::zeros({5, 8});
  MultiheadAttentionForward a;
  a.key_padding_mask = Tensor::zeros({1, 5}, DType::kBool);
  expect_error([&] { m.forward(uq, ukv, ukv, a); }, ErrorKind::kValue,
               {"key_padding_mask", "[5]", "[1, 5]"});
  a.key_padding_mask = Tensor();
  a.attn_mask = Tensor::zeros({3, 3, 5}, DType::kBool);
  expect_error([&] { m.forward(uq, ukv, ukv, a); }, ErrorKind::kValue,
               {"attn_mask", "[H, L, S]", "[2, 3, 5]", "[3, 3, 5]"});
}

TEST(MultiheadAttention, BadDtypes) {
  MultiheadAttention m(opts(8, 2));
  const Tensor x = Tensor::zeros({3, 2, 8}), x64 = Tensor::zeros({3, 2, 8}, DType::kFloat64);
  expect_error([&] { m.forward(x64, x, x); }, ErrorKind::kType, {"query", "float32", "float64"});
  expect_error([&] { m.forward(x, x64, x); }, ErrorKind::kType, {"key", "float32", "float64"});
  expect_error([&] { m.forward(x, x, x64); }, ErrorKind::kType, {"value", "float32", "float64"});
  expect_error(
      [&] {
        m.forward(x, x, Tensor::zeros({3, 2, 8}, DType::kBool));
      },
      ErrorKind::kType, {"value", "bool"});
  expect_error([&] { m.forward(Tensor(), x, x); }, ErrorKind::kValue, {"query", "undefined"});
  Tensor nan = Tensor::zeros({3, 2, 8});
  nan.set({1, 1, 1}, NAN);
  expect_error([&] { m.forward(x, nan, x); }, ErrorKind::kValue, {"key", "NaN"});
}

}  // namespace
}  // namespace qkv::nn
