// The SDPA op against an independent float64 computation written from the
// formula, on awkward shapes, with every mask kind, causal alignment, GQA,
// dropout, and the all-masked-row rule.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "qkv/attention.h"
#include "qkv/masks.h"
#include "test_util.h"

using namespace qkv;

namespace {

using qkv_test::expect_error;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Plain triple loops on [N, H, L, E] float64 tensors with an optional dense
// additive mask [N, H, L, S]. Written independently of the library kernel.
Tensor naive_sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& add_mask,
                  double scale, int64_t group, Tensor* weights_out) {
  const int64_t N = q.size(0), H = q.size(1), L = q.size(2), E = q.size(3);
  const int64_t S = k.size(2), Ev = v.size(3);
  Tensor out = Tensor::zeros({N, H, L, Ev}, DType::kFloat64);
  Tensor w = Tensor::zeros({N, H, L, S}, DType::kFloat64);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        std::vector<double> s(S);
        double mx = kNegInf;
        for (int64_t j = 0; j < S; ++j) {
          double d = 0;
          for (int64_t e = 0; e < E; ++e) d += q.at({n, h, i, e}) * k.at({n, h / group, j, e});
          s[j] = d * scale + (add_mask.defined() ? add_mask.at({n, h, i, j}) : 0.0);
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < S; ++j) sum += (s[j] = mx == kNegInf ? 0 : std::exp(s[j] - mx));
        for (int64_t j = 0; j < S; ++j) {
          const double p = sum > 0 ? s[j] / sum : 0.0;
          w.set({n, h, i, j}, p);
          for (int64_t e = 0; e < Ev; ++e)
            out.set({n, h, i, e}, out.at({n, h, i, e}) + p * v.at({n, h / group, j, e}));
        }
      }
  if (weights_out) *weights_out = w;
  return out;
}

struct Case {
  int64_t N, H, Hkv, L, S, E, Ev;
};

}  // namespace

TEST(SdpaReference, MatchesNaiveFloat64OnAwkwardShapes) {
  Generator gen(1);
  const Case cases[] = {{1, 1, 1, 1, 1, 1, 1},    {2, 3, 3, 3, 17, 3, 5}, {1, 2, 2, 17, 3, 17, 1},
                        {2, 1, 1, 80, 129, 8, 8}, {1, 4, 2, 5, 7, 80, 3}, {1, 6, 3, 9, 4, 128, 16},
                        {3, 2, 1, 1, 33, 4, 2}};
  for (const Case& c : cases) {
    for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
      Tensor q = Tensor::randn({c.N, c.H, c.L, c.E}, gen, dtype);
      Tensor k = Tensor::randn({c.N, c.Hkv, c.S, c.E}, gen, dtype);
      Tensor v = Tensor::randn({c.N, c.Hkv, c.S, c.Ev}, gen, dtype);
      SdpaOptions opt;
      opt.need_weights = true;
      opt.enable_gqa = c.H != c.Hkv;
      SdpaResult r = scaled_dot_product_attention(q, k, v, opt);
      Tensor w_ref;
      Tensor ref = naive_sdpa(q.to(DType::kFloat64), k.to(DType::kFloat64), v.to(DType::kFloat64),
                              {}, 1.0 / std::sqrt(double(c.E)), c.H / c.Hkv, &w_ref);
      const double tol = dtype == DType::kFloat64 ? 1e-12 : 1e-5;
      EXPECT_LT(max_abs_diff(r.output.to(DType::kFloat64), ref), tol) << c.L << "x" << c.S;
      EXPECT_LT(max_abs_diff(r.weights.to(DType::kFloat64), w_ref), tol);
    }
  }
}

TEST(SdpaReference, MaskBroadcastingBoolAndFloat) {
  Generator gen(2);
  const int64_t N = 2, H = 3, L = 4, S = 6, E = 5;
  Tensor q = Tensor::randn({N, H, L, E}, gen, DType::kFloat64);
  Tensor k = Tensor::randn({N, H, S, E}, gen, DType::kFloat64);
  Tensor v = Tensor::randn({N, H, S, E}, gen, DType::kFloat64);
  const Shape mask_shapes[] = {{S},          {L, S},       {1, S},      {H, 1, S},
                               {N, 1, 1, S}, {N, H, L, S}, {N, 1, L, 1}};
  for (const Shape& ms : mask_shapes) {
    Tensor keep = Tensor::rand(ms, gen, 0, 1, DType::kFloat64);
    Tensor keep_bool = Tensor::empty(ms, DType::kBool);
    keep_bool.copy_from(keep);
    std::vector<double> kv = keep.to_vector();
    std::vector<bool> bits(kv.size());
    for (size_t i = 0; i < kv.size(); ++i) bits[i] = kv[i] > 0.3;
    keep_bool = Tensor::from_bools(ms, bits);
    Tensor additive = keep_mask_to_additive(keep_bool, DType::kFloat64);
    Tensor dense = additive.expand({N, H, L, S}).contiguous();
    Tensor ref = naive_sdpa(q, k, v, dense, 1.0 / std::sqrt(double(E)), 1, nullptr);
    SdpaOptions opt;
    opt.attn_mask = keep_bool;
    EXPECT_LT(max_abs_diff(scaled_dot_product_attention(q, k, v, opt).output, ref), 1e-12)
        << shape_str(ms);
    // A float mask with finite values is added to the scores.
    Tensor soft = Tensor::randn(ms, gen, DType::kFloat64);
    opt.attn_mask = soft;
    Tensor ref_soft = naive_sdpa(q, k, v, soft.expand({N, H, L, S}).contiguous(),
                                 1.0 / std::sqrt(double(E)), 1, nullptr);
    EXPECT_LT(max_abs_diff(scaled_dot_product_attention(q, k, v, opt).output, ref_soft), 1e-12);
  }
}

TEST(SdpaReference, FullyMaskedRowsGiveZeroNotNan) {
  Generator gen(3);
  Tensor q = Tensor::randn({1, 2, 3, 4}, gen), k = Tensor::randn({1, 2, 5, 4}, gen);
  Tensor v = Tensor::randn({1, 2, 5, 4}, gen);
  Tensor keep = Tensor::ones({3, 5}, DType::kBool);
  for (int64_t j = 0; j < 5; ++j) keep.set({1, j}, 0);  // query 1 sees nothing
  SdpaOptions opt;
  opt.attn_mask = keep;
  opt.need_weights = true;
  SdpaResult r = scaled_dot_product_attention(q, k, v, opt);
  for (double x : r.output.select(2, 1).to_vector()) EXPECT_EQ(x, 0.0);
  for (double x : r.weights.select(2, 1).to_vector()) EXPECT_EQ(x, 0.0);
  for (double x : r.output.to_vector()) EXPECT_FALSE(std::isnan(x));
  // Rows that see keys still sum to 1.
  EXPECT_NEAR(r.weights.select(2, 0).select(1, 0).to_vector()[0] +
                  r.weights.select(2, 0).select(1, 0).to_vector()[1] +
                  r.weights.select(2, 0).select(1, 0).to_vector()[2] +
                  r.weights.select(2, 0).select(1, 0).to_vector()[3] +
                  r.weights.select(2, 0).select(1, 0).to_vector()[4],
              1.0, 1e-6);
  // Same with an all −inf float mask row.
  opt.attn_mask = keep_mask_to_additive(keep);
  r = scaled_dot_product_attention(q, k, v, opt);
  for (double x : r.output.select(2, 1).to_vector()) EXPECT_EQ(x, 0.0);
}

TEST(SdpaReference, CausalTopLeftAndBottomRight) {
  Generator gen(4);
  for (auto [L, S] : {std::pair<int64_t, int64_t>{4, 4}, {3, 7}, {7, 3}}) {
    Tensor q = Tensor::randn({2, L, 8}, gen, DType::kFloat64);
    Tensor k = Tensor::randn({2, S, 8}, gen, DType::kFloat64);
    Tensor v = Tensor::randn({2, S, 3}, gen, DType::kFloat64);
    for (CausalMask align : {CausalMask::kTopLeft, CausalMask::kBottomRight}) {
      SdpaOptions causal;
      causal.causal = align;
      SdpaOptions explicit_mask;
      explicit_mask.attn_mask = causal_mask(L, S, align);
      EXPECT_LT(max_abs_diff(scaled_dot_product_attention(q, k, v, causal).output,
                             scaled_dot_product_attention(q, k, v, explicit_mask).output),
                1e-15);
    }
  }
  // Top-left is torch.tril(ones(L, S)); bottom-right shifts by S − L.
  EXPECT_EQ(causal_mask(2, 4).to_vector(), (std::vector<double>{1, 0, 0, 0, 1, 1, 0, 0}));
  EXPECT_EQ(causal_mask(2, 4, CausalMask::kBottomRight).to_vector(),
            (std::vector<double>{1, 1, 1, 0, 1, 1, 1, 1}));
}

TEST(SdpaReference, LeadingDimsScaleAndBroadcast) {
  Generator gen(5);
  Tensor q = Tensor::randn({2, 3, 2, 4, 6}, gen, DType::kFloat64);
  Tensor k = Tensor::randn({2, 3, 2, 5, 6}, gen, DType::kFloat64);
  Tensor v = Tensor::randn({2, 3, 2, 5, 2}, gen, DType::kFloat64);
  SdpaOptions opt;
  opt.scale = 0.3;
  Tensor out = scaled_dot_product_attention(q, k, v, opt).output;
  EXPECT_EQ(out.shape(), (Shape{2, 3, 2, 4, 2}));
  Tensor ref = naive_sdpa(q.reshape({6, 2, 4, 6}), k.reshape({6, 2, 5, 6}), v.reshape({6, 2, 5, 2}),
                          {}, 0.3, 1, nullptr);
  EXPECT_LT(max_abs_diff(out.reshape({6, 2, 4, 2}), ref), 1e-12);
  // Non-contiguous inputs give the same answer as contiguous ones.
  Tensor qt = q.transpose(-1, -2).contiguous().transpose(-1, -2);
  EXPECT_LT(max_abs_diff(scaled_dot_product_attention(qt, k, v, opt).output, out), 1e-15);
  // 2-D inputs (no batch dims) work, and a key/value head dim of 1 broadcasts.
  EXPECT_EQ(scaled_dot_product_attention(q.select(0, 0).select(0, 0).select(0, 0),
                                         k.select(0, 0).select(0, 0).select(0, 0),
                                         v.select(0, 0).select(0, 0).select(0, 0))
                .output.shape(),
            (Shape{4, 2}));
  EXPECT_EQ(scaled_dot_product_attention(q, k.slice(2, 0, 1), v.slice(2, 0, 1)).output.shape(),
            (Shape{2, 3, 2, 4, 2}));
}

TEST(SdpaReference, WindowAlibiSoftcapFollowTheirFormulas) {
  Generator gen(8);
  const int64_t L = 5, S = 9, E = 4;
  Tensor q = Tensor::randn({1, 2, L, E}, gen, DType::kFloat64);
  Tensor k = Tensor::randn({1, 2, S, E}, gen, DType::kFloat64);
  Tensor v = Tensor::randn({1, 2, S, 3}, gen, DType::kFloat64);
  SdpaOptions o;
  o.causal = CausalMask::kBottomRight;
  o.window_left = 2;
  o.alibi_slopes = {0.5, 2.0};
  o.softcap = 1.2;
  o.need_weights = true;
  SdpaResult r = scaled_dot_product_attention(q, k, v, o);
  // The same scores built by hand: cap·tanh(x/cap) − slope·|i + S − L − j|, −inf outside
  // keys [i + S − L − 2, i + S − L].
  Tensor dense = Tensor::zeros({1, 2, L, S}, DType::kFloat64);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) {
        const int64_t pos = i + S - L;
        double x = 0;
        for (int64_t e = 0; e < E; ++e) x += q.at({0, h, i, e}) * k.at({0, h, j, e});
        x /= std::sqrt(double(E));
        const double capped = 1.2 * std::tanh(x / 1.2);
        const double slope = h == 0 ? 0.5 : 2.0;
        const bool visible = j <= pos && j >= pos - 2;
        // naive_sdpa adds `dense` to scale·q·k: put the difference there.
        dense.set({0, h, i, j}, visible ? capped - x - slope * std::abs(double(pos - j)) : kNegInf);
      }
  Tensor w_ref;
  Tensor ref = naive_sdpa(q, k, v, dense, 1.0 / std::sqrt(double(E)), 1, &w_ref);
  EXPECT_LT(max_abs_diff(r.output, ref), 1e-12);
  EXPECT_LT(max_abs_diff(r.weights, w_ref), 1e-12);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, {.alibi_slopes = {1.0}}), Error);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, {.window_left = -3}), Error);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, {.softcap = -1.0}), Error);
}

TEST(SdpaReference, DropoutKeepsScalesAndReproduces) {
  Generator gen(6);
  Tensor q = Tensor::randn({2, 2, 64, 8}, gen), k = Tensor::randn({2, 2, 64, 8}, gen);
  Tensor v = Tensor::randn({2, 2, 64, 8}, gen);
  SdpaOptions opt;
  opt.dropout_p = 0.25;
  opt.need_weights = true;
  opt.return_dropout_mask = true;
  Generator g1(9), g2(9);
  opt.generator = &g1;
  SdpaResult a = scaled_dot_product_attention(q, k, v, opt);
  opt.generator = &g2;
  SdpaResult b = scaled_dot_product_attention(q, k, v, opt);
  EXPECT_EQ(max_abs_diff(a.output, b.output), 0.0);
  double kept = 0;
  for (double x : a.dropout_mask.to_vector()) kept += x;
  EXPECT_NEAR(kept / a.dropout_mask.numel(), 0.75, 0.02);
  // Weights after dropout = weights without dropout · keep / (1 − p).
  SdpaOptions plain;
  plain.need_weights = true;
  SdpaResult c = scaled_dot_product_attention(q, k, v, plain);
  std::vector<double> w = a.weights.to_vector(), w0 = c.weights.to_vector(),
                      m = a.dropout_mask.to_vector();
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], w0[i] * m[i] / 0.75, 1e-6);
  // Feeding the exported mask back reproduces the output exactly.
  SdpaOptions replay;
  replay.dropout_p = 0.25;
  replay.dropout_mask = a.dropout_mask;
  EXPECT_EQ(max_abs_diff(scaled_dot_product_attention(q, k, v, replay).output, a.output), 0.0);
}

TEST(SdpaReference, BadInputsGiveClearErrors) {
  Generator gen(7);
  Tensor q = Tensor::randn({2, 4, 3, 8}, gen), k = Tensor::randn({2, 4, 5, 8}, gen);
  Tensor v = Tensor::randn({2, 4, 5, 6}, gen);
  expect_error(
      [&] {
        scaled_dot_product_attention(q, Tensor::randn({2, 4, 5, 7}, gen), v);
      },
      "key's last dim");
  expect_error(
      [&] {
        scaled_dot_product_attention(q, k, Tensor::randn({2, 4, 6, 6}, gen));
      },
      "value must have as many positions");
  expect_error([&] { scaled_dot_product_attention(q, k, v.to(DType::kFloat64)); }, "same dtype",
               ErrorKind::kType);
  expect_error(
      [&] {
        scaled_dot_product_attention(q, Tensor::randn({2, 3, 5, 8}, gen),
                                     Tensor::randn({2, 3, 5, 6}, gen), {.enable_gqa = true});
      },
      "must divide");
  expect_error(
      [&] {
        SdpaOptions o;
        o.attn_mask = Tensor::ones({3, 5}, DType::kBool);
        o.causal = CausalMask::kTopLeft;
        scaled_dot_product_attention(q, k, v, o);
      },
      "is_causal");
  expect_error(
      [&] {
        SdpaOptions o;
        o.attn_mask = Tensor::ones({2, 3, 5}, DType::kBool);
        scaled_dot_product_attention(q, k, v, o);
      },
      "does not broadcast");
  expect_error(
      [&] {
        SdpaOptions o;
        o.attn_mask = Tensor::zeros({3, 5}, DType::kFloat64);
        scaled_dot_product_attention(q, k, v, o);
      },
      "attn_mask must be bool or have the query's dtype", ErrorKind::kType);
  expect_error(
      [&] {
        SdpaOptions o;
        o.attn_mask = Tensor::full({3, 5}, std::nan(""));
        scaled_dot_product_attention(q, k, v, o);
      },
      "NaN");
  expect_error([&] { scaled_dot_product_attention(q.slice(2, 0, 0), k, v); }, "empty");
  expect_error([&] { scaled_dot_product_attention(q, k.slice(2, 0, 0), v.slice(2, 0, 0)); },
               "empty");
  Tensor bad = q.clone();
  bad.set({0, 0, 0, 0}, std::numeric_limits<double>::infinity());
  expect_error([&] { scaled_dot_product_attention(bad, k, v); }, "query");
  expect_error([&] { scaled_dot_product_attention(q, k, v, {.dropout_p = 1.0}); }, "dropout_p");
  expect_error([&] { scaled_dot_product_attention(Tensor::ones({3}), k, v); },
               "at least 2 dimensions");
  expect_error([&] { scaled_dot_product_attention(q.to(DType::kBool), k, v); }, "float32",
               ErrorKind::kType);
}
