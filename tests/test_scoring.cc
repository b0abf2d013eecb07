// §2.2 scoring functions and §2.4 simple attention.
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/attention.h"
#include "qkv/masks.h"

using namespace qkv;

namespace {
Tensor mat(const Shape& shape, std::vector<double> values) {
  return Tensor::from_vector(shape, std::span<const double>(values));
}
}  // namespace

TEST(SimpleAttention, TutorialSection2_4Example) {
  Tensor query = mat({3}, {1.0, 0.5, 0.0});
  Tensor keys = mat({3, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1});
  Tensor values = mat({3, 2}, {10, 0, 0, 20, 0, 0});
  AttentionResult r = simple_attention(query, keys, values);
  // softmax([1, 0.5, 0]) computed by hand
  const double z = std::exp(1.0) + std::exp(0.5) + 1.0;
  EXPECT_NEAR(r.weights.at({0}), std::exp(1.0) / z, 1e-15);
  EXPECT_NEAR(r.weights.at({1}), std::exp(0.5) / z, 1e-15);
  EXPECT_NEAR(r.weights.at({2}), 1.0 / z, 1e-15);
  EXPECT_NEAR(r.weights.at({0}), 0.506, 5e-4);
  EXPECT_NEAR(r.weights.at({1}), 0.307, 5e-4);
  EXPECT_NEAR(r.weights.at({2}), 0.186, 5e-4);
  EXPECT_NEAR(r.output.at({0}), 5.06, 5e-3);
  EXPECT_NEAR(r.output.at({1}), 6.14, 5e-3);
  EXPECT_THROW(simple_attention(keys, keys, values), Error);
  EXPECT_THROW(simple_attention(query, keys, values.slice(0, 0, 2)), Error);
}

TEST(ScoreFunctions, EachMatchesItsFormula) {
  Generator gen(11);
  const int64_t L = 3, S = 4, E = 5, Ek = 6, A = 7;
  Tensor q = Tensor::randn({2, L, E}, gen, DType::kFloat64);
  Tensor k = Tensor::randn({2, S, E}, gen, DType::kFloat64);
  Tensor k2 = Tensor::randn({2, S, Ek}, gen, DType::kFloat64);
  Tensor w_q = Tensor::randn({A, E}, gen, DType::kFloat64);
  Tensor w_k = Tensor::randn({A, Ek}, gen, DType::kFloat64);
  Tensor vv = Tensor::randn({A}, gen, DType::kFloat64);
  Tensor w = Tensor::randn({E, Ek}, gen, DType::kFloat64);
  Tensor dot = ScoreFunction::dot().scores(q, k);
  Tensor scaled = ScoreFunction::scaled_dot().scores(q, k);
  Tensor additive = ScoreFunction::additive(w_q, w_k, vv).scores(q, k2);
  Tensor bilinear = ScoreFunction::bilinear(w).scores(q, k2);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) {
        double d = 0, bl = 0, ad = 0;
        for (int64_t e = 0; e < E; ++e) d += q.at({b, i, e}) * k.at({b, j, e});
        for (int64_t e = 0; e < E; ++e)
          for (int64_t f = 0; f < Ek; ++f) bl += q.at({b, i, e}) * w.at({e, f}) * k2.at({b, j, f});
        for (int64_t a = 0; a < A; ++a) {
          double h = 0;
          for (int64_t e = 0; e < E; ++e) h += w_q.at({a, e}) * q.at({b, i, e});
          for (int64_t f = 0; f < Ek; ++f) h += w_k.at({a, f}) * k2.at({b, j, f});
          ad += vv.at({a}) * std::tanh(h);
        }
        EXPECT_NEAR(dot.at({b, i, j}), d, 1e-12);
        EXPECT_NEAR(scaled.at({b, i, j}), d / std::sqrt(double(E)), 1e-12);
        EXPECT_NEAR(bilinear.at({b, i, j}), bl, 1e-11);
        EXPECT_NEAR(additive.at({b, i, j}), ad, 1e-12);
      }
}

TEST(ScoreFunctions, GeneralAttentionWithMaskAgreesWithSdpa) {
  Generator gen(12);
  Tensor q = Tensor::randn({2, 3, 4, 8}, gen, DType::kFloat64);
  Tensor k = Tensor::randn({2, 3, 5, 8}, gen, DType::kFloat64);
  Tensor v = Tensor::randn({2, 3, 5, 2}, gen, DType::kFloat64);
  Tensor keep = key_mask_for_heads(keep_mask_from_lengths({3, 5}, 5));
  AttentionResult general = attention(q, k, v, ScoreFunction::scaled_dot(), keep);
  SdpaOptions opt;
  opt.attn_mask = keep;
  opt.need_weights = true;
  SdpaResult sdpa = scaled_dot_product_attention(q, k, v, opt);
  EXPECT_LT(max_abs_diff(general.output, sdpa.output), 1e-12);
  EXPECT_LT(max_abs_diff(general.weights, sdpa.weights), 1e-12);
  // Padded keys (positions 3, 4 of batch 0) get weight exactly 0.
  EXPECT_EQ(general.weights.at({0, 1, 2, 3}), 0.0);
  EXPECT_EQ(general.weights.at({0, 1, 2, 4}), 0.0);
  // Every score kind runs through the same masked softmax; rows sum to 1.
  Tensor w = Tensor::randn({8, 8}, gen, DType::kFloat64);
  AttentionResult bl = attention(q, k, v, ScoreFunction::bilinear(w), keep);
  for (int64_t i = 0; i < 4; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < 5; ++j) sum += bl.weights.at({1, 2, i, j});
    EXPECT_NEAR(sum, 1.0, 1e-12);
  }
  // All keys masked: 0, not NaN.
  AttentionResult none = attention(q, k, v, ScoreFunction::dot(), Tensor::zeros({5}, DType::kBool));
  for (double x : none.output.to_vector()) EXPECT_EQ(x, 0.0);
}

TEST(ScoreFunctions, BadShapesAreReported) {
  Generator gen(13);
  Tensor q = Tensor::randn({3, 5}, gen), k = Tensor::randn({4, 6}, gen);
  EXPECT_THROW(ScoreFunction::dot().scores(q, k), Error);
  EXPECT_THROW(ScoreFunction::bilinear(Tensor::randn({6, 6}, gen)).scores(q, k), Error);
  EXPECT_THROW(ScoreFunction::additive(Tensor::randn({7, 5}, gen), Tensor::randn({8, 6}, gen),
                                       Tensor::randn({7}, gen)),
               Error);
  EXPECT_THROW(attention(q, q, q, ScoreFunction::dot(), Tensor::ones({2, 3}, DType::kBool)), Error);
}

TEST(Masks, HelpersHaveTheDocumentedPolarityAndShapes) {
  Tensor keep = keep_mask_from_lengths({2, 4}, 4);
  EXPECT_EQ(keep.to_vector(), (std::vector<double>{1, 1, 0, 0, 1, 1, 1, 1}));
  Tensor pad = padding_mask_from_lengths({2, 4}, 4);
  EXPECT_EQ(pad.to_vector(), (std::vector<double>{0, 0, 1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(logical_not(pad).to_vector(), keep.to_vector());
  EXPECT_EQ(key_mask_for_heads(keep).shape(), (Shape{2, 1, 1, 4}));
  Tensor add = keep_mask_to_additive(keep);
  EXPECT_EQ(add.at({0, 0}), 0.0);
  EXPECT_TRUE(std::isinf(add.at({0, 3})) && add.at({0, 3}) < 0);
  EXPECT_THROW(keep_mask_from_lengths({5}, 4), Error);
  EXPECT_THROW(key_mask_for_heads(Tensor::ones({4}, DType::kBool)), Error);
  EXPECT_THROW(causal_mask(2, 2, CausalMask::kNone), Error);
}
