// The functional ops of qkv/functional.h and the small modules built on them
// (nn::Linear, nn::LayerNorm, nn::RMSNorm, nn::Embedding), each against its
// formula evaluated here in float64.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/functional.h"
#include "qkv/nn/embedding.h"
#include "qkv/nn/layer_norm.h"
#include "qkv/nn/linear.h"
#include "qkv/nn/rms_norm.h"
#include "test_util.h"

namespace qkv {
namespace {

using qkv_test::expect_error;

double tolerance(DType dtype) { return dtype == DType::kFloat64 ? 1e-13 : 2e-6; }

// --- Normalisation -------------------------------------------------------------------

// (x - mean) / sqrt(var + eps) * w + b over rows of n elements, in float64.
std::vector<double> layer_norm_formula(const std::vector<double>& x, int64_t n,
                                       const std::vector<double>& w, const std::vector<double>& b,
                                       double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / n; ++r) {
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < n; ++i) mean += x[r * n + i];
    mean /= n;
    for (int64_t i = 0; i < n; ++i) var += std::pow(x[r * n + i] - mean, 2);
    var /= n;
    for (int64_t i = 0; i < n; ++i)
      y[r * n + i] = (x[r * n + i] - mean) / std::sqrt(var + eps) * (w.empty() ? 1.0 : w[i]) +
                     (b.empty() ? 0.0 : b[i]);
  }
  return y;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "at " << i;
}

TEST(LayerNorm, MatchesTheFormulaOverOneAndTwoTrailingDims) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    Generator gen(1);
    // A transposed (non-contiguous) input of shape [2, 3, 4].
    const Tensor x = Tensor::randn({2, 4, 3}, gen, dtype).transpose(1, 2);
    const Tensor w = Tensor::randn({4}, gen, dtype), b = Tensor::randn({4}, gen, dtype);
    expect_near_all(layer_norm(x, {4}, w, b, 1e-5).to_vector(),
                    layer_norm_formula(x.to_vector(), 4, w.to_vector(), b.to_vector(), 1e-5),
                    tolerance(dtype));
    expect_near_all(layer_norm(x, {3, 4}, Tensor(), Tensor(), 0.1).to_vector(),
                    layer_norm_formula(x.to_vector(), 12, {}, {}, 0.1), tolerance(dtype));
  }
}

TEST(RmsNorm, MatchesTheFormulaWithTheDtypesEpsilonByDefault) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    // Values so small that eps matters: mean(x²) is of the order of eps.
    const double eps = dtype == DType::kFloat32 ? std::numeric_limits<float>::epsilon()
                                                : std::numeric_limits<double>::epsilon();
    const double tiny = std::sqrt(eps);
    const std::vector<double> xs = {tiny, -2 * tiny, 0.5 * tiny, 3 * tiny, -tiny, tiny};
    const Tensor x = Tensor::from_vector({2, 3}, std::span<const double>(xs)).to(dtype);
    const Tensor w =
        Tensor::from_vector({3}, std::span<const double>(std::vector<double>{1.0, -2.0, 0.5}))
            .to(dtype);
    std::vector<double> want(6);
    for (int r = 0; r < 2; ++r) {
      double ms = 0.0;
      for (int i = 0; i < 3; ++i) ms += x.at({r, i}) * x.at({r, i}) / 3.0;
      for (int i = 0; i < 3; ++i) want[3 * r + i] = x.at({r, i}) / std::sqrt(ms + eps) * w.at({i});
    }
    expect_near_all(rms_norm(x, {3}, w).to_vector(), want, tolerance(dtype));
    // An explicit eps is used as given.
    const double ms0 =
        (std::pow(x.at({0, 0}), 2) + std::pow(x.at({0, 1}), 2) + std::pow(x.at({0, 2}), 2)) / 3.0;
    const double y = rms_norm(x, {3}, Tensor(), 1.0).at({0, 0});
    EXPECT_NEAR(y, x.at({0, 0}) / std::sqrt(ms0 + 1.0), tolerance(dtype) * tiny);
  }
}

TEST(Normalization, BadArgumentsAreReported) {
  const Tensor x = Tensor::zeros({2, 3});
  expect_error([&] { layer_norm(x, {4}); }, "must end with normalized_shape [4]");
  expect_error([&] { layer_norm(x, {3}, Tensor::ones({4})); }, "weight must have normalized_shape");
  expect_error([&] { rms_norm(x, {3}, Tensor::ones({3}, DType::kFloat64)); },
               "weight dtype float64 differs from input dtype float32", ErrorKind::kType);
  expect_error([&] { layer_norm(Tensor::zeros({3}, DType::kBool), {3}); },
               "must be float32 or float64, got bool", ErrorKind::kType);
}

// --- Activations ---------------------------------------------------------------------

TEST(Activations, MatchTheirFormulas) {
  const std::vector<double> xs = {-6.0, -2.5, -1.0, -0.1, 0.0, 1e-3, 0.7, 1.0, 3.0, 9.0};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const Tensor x = Tensor::from_vector({2, 5}, std::span<const double>(xs)).to(dtype);
    const std::vector<double> v = x.to_vector();
    std::vector<double> r, g, gt, s;
    for (double a : v) {
      r.push_back(a > 0 ? a : 0.0);
      g.push_back(0.5 * a * std::erfc(-a / std::sqrt(2.0)));
      gt.push_back(0.5 * a * (1 + std::tanh(std::sqrt(2 / M_PI) * (a + 0.044715 * a * a * a))));
      s.push_back(a / (1 + std::exp(-a)));
    }
    expect_near_all(relu(x).to_vector(), r, tolerance(dtype));
    expect_near_all(gelu(x).to_vector(), g, tolerance(dtype));
    expect_near_all(gelu(x, GeluApproximation::kTanh).to_vector(), gt, tolerance(dtype));
    expect_near_all(silu(x).to_vector(), s, tolerance(dtype));
  }
  // Φ(1) = 0.841344746068542948...
  EXPECT_NEAR(gelu(Tensor::ones({1}, DType::kFloat64)).item(), 0.8413447460685429, 1e-15);
  EXPECT_EQ(activate(Tensor::full({1}, -2.0), Activation::kRelu).item(), 0.0);
  EXPECT_EQ(activation_from_string("gelu"), Activation::kGelu);
  EXPECT_STREQ(activation_name(Activation::kRelu), "relu");
  expect_error([] { activation_from_string("swish"); }, "activation should be");
}

// --- Elementwise -----------------------------------------------------------------------

TEST(Elementwise, AddAndMulBroadcastLikeTorch) {
  Generator gen(2);
  const Tensor a = Tensor::randn({2, 1, 3}, gen, DType::kFloat64);
  const Tensor b = Tensor::randn({4, 1}, gen, DType::kFloat64);
  const Tensor sum = add(a, b), product = mul(a, b);
  ASSERT_EQ(sum.shape(), (Shape{2, 4, 3}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t k = 0; k < 3; ++k) {
        EXPECT_EQ(sum.at({i, j, k}), a.at({i, 0, k}) + b.at({j, 0}));
        EXPECT_EQ(product.at({i, j, k}), a.at({i, 0, k}) * b.at({j, 0}));
      }
  EXPECT_EQ(scale(Tensor::full({2}, 3.0), -0.5).to_vector(), (std::vector<double>{-1.5, -1.5}));
  expect_error([&] { add(a, Tensor::zeros({5})); }, "add", ErrorKind::kType);
  expect_error([&] { add(a, b.to(DType::kFloat32)); }, "add: a is float64 but b is float32",
               ErrorKind::kType);
}

// --- Dropout -------------------------------------------------------------------------

TEST(Dropout, ZeroesWithProbabilityPAndScalesTheRest) {
  Generator data(3);
  const Tensor x = Tensor::rand({200, 500}, data, 1.0, 2.0);
  // Identity (the same tensor) in eval mode and for p = 0.
  EXPECT_TRUE(dropout(x, 0.3, false).shares_storage_with(x));
  EXPECT_TRUE(dropout(x, 0.0, true).shares_storage_with(x));
  EXPECT_EQ(dropout(x, 1.0).to_vector(), std::vector<double>(x.numel(), 0.0));

  Generator g1(42), g2(42);
  const Tensor y = dropout(x, 0.25, true, &g1);
  EXPECT_EQ(max_abs_diff(y, dropout(x, 0.25, true, &g2)), 0.0);  // seeded: reproducible
  const std::vector<double> xv = x.to_vector(), yv = y.to_vector();
  int64_t zeros = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (yv[i] == 0.0) {
      ++zeros;
    } else {
      EXPECT_NEAR(yv[i], xv[i] / 0.75, 1e-6);
    }
  }
  // 100,000 draws: the fraction is 0.25 ± 0.0014 (one standard deviation).
  EXPECT_NEAR(static_cast<double>(zeros) / xv.size(), 0.25, 0.007);
  expect_error([&] { dropout(x, 1.5); }, "probability p must be in [0, 1], got 1.5");
}

// --- Embedding -----------------------------------------------------------------------

TEST(Embedding, GathersRowsIntoTheIdsShape) {
  Generator gen(4);
  const Tensor w = Tensor::randn({5, 3}, gen);
  const Tensor y = embedding({4, 0, 0, 2, 1, 4}, {2, 3}, w);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 3}));
  EXPECT_EQ(max_abs_diff(y.select(0, 1).select(0, 2), w.select(0, 4)), 0.0);
  EXPECT_EQ(max_abs_diff(y.select(0, 0).select(0, 1), w.select(0, 0)), 0.0);
  expect_error([&] { embedding({1, 5}, {2}, w); }, "id 5 at flat index 1 is out of range [0, 5)");
  expect_error([&] { embedding({-1}, {1}, w); }, "id -1");
  expect_error([&] { embedding({1, 2, 3}, {2}, w); }, "3 ids do not form the shape [2]");
}

// --- Modules -------------------------------------------------------------------------

TEST(LinearModule, InitialisesAsTorchAndComputesXWtPlusB) {
  Generator gen(5);
  nn::Linear lin({.in_features = 16, .out_features = 4}, &gen);
  const double bound = 1.0 / 4.0;  // 1 / sqrt(16)
  for (const char* name : {"weight", "bias"}) {
    const Tensor p = lin.state_dict().at(name);
    double max_abs = 0.0;
    for (double v : p.to_vector()) max_abs = std::max(max_abs, std::abs(v));
    EXPECT_LE(max_abs, bound) << name;
    EXPECT_GT(max_abs, 0.5 * bound) << name;
  }
  const Tensor x = Tensor::randn({2, 3, 16}, gen);
  const Tensor y = lin.forward(x);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4}));
  double want = lin.bias().at({2});
  for (int64_t i = 0; i < 16; ++i) want += x.at({1, 2, i}) * lin.weight().at({2, i});
  EXPECT_NEAR(y.at({1, 2, 2}), want, 1e-5);

  nn::Linear no_bias({.in_features = 16, .out_features = 4, .bias = false});
  EXPECT_EQ(no_bias.state_dict().size(), 1u);
  no_bias.load_state_dict({{"weight", lin.weight()}});
  EXPECT_LT(max_abs_diff(no_bias.forward(x), add(lin.forward(x), scale(lin.bias(), -1.0))), 1e-6);
  nn::Linear copy = lin.clone();
  EXPECT_FALSE(copy.weight().shares_storage_with(lin.weight()));
  expect_error([&] { lin.forward(Tensor::zeros({2, 15})); }, "in_features=16");
  expect_error(
      [&] {
        no_bias.load_state_dict({{"weight", Tensor::zeros({4, 15})}});
      },
      "size mismatch for \"weight\": expected shape [4, 16], got [4, 15]");
}

TEST(NormModules, InitialiseToIdentityAffineAndForwardTheFunctionalOps) {
  Generator gen(6);
  nn::LayerNorm ln({.normalized_shape = {6}, .eps = 1e-3, .dtype = DType::kFloat64});
  EXPECT_EQ(ln.state_dict().at("weight").to_vector(), std::vector<double>(6, 1.0));
  EXPECT_EQ(ln.state_dict().at("bias").to_vector(), std::vector<double>(6, 0.0));
  const Tensor x = Tensor::randn({3, 6}, gen, DType::kFloat64);
  EXPECT_EQ(max_abs_diff(ln.forward(x), layer_norm(x, {6}, Tensor(), Tensor(), 1e-3)), 0.0);
  EXPECT_EQ(nn::LayerNorm({.normalized_shape = {6}, .bias = false}).state_dict().size(), 1u);
  EXPECT_TRUE(
      nn::LayerNorm({.normalized_shape = {6}, .elementwise_affine = false}).state_dict().empty());

  nn::RMSNorm rms({.normalized_shape = {6}, .dtype = DType::kFloat64});
  EXPECT_EQ(rms.state_dict().at("weight").to_vector(), std::vector<double>(6, 1.0));
  EXPECT_EQ(max_abs_diff(rms.forward(x), rms_norm(x, {6})), 0.0);
  expect_error([&] { rms.forward(x.to(DType::kFloat32)); }, "module's dtype float64",
               ErrorKind::kType);
  expect_error([] { nn::RMSNorm({.normalized_shape = {}}); }, "at least one dimension");
}

TEST(EmbeddingModule, DrawsStandardNormalRowsAndZeroesThePaddingRow) {
  Generator gen(7);
  nn::Embedding emb({.num_embeddings = 400, .embedding_dim = 50, .padding_idx = -1}, &gen);
  EXPECT_EQ(emb.options().padding_idx, 399);
  const std::vector<double> w = emb.weight().to_vector();
  double mean = 0.0, sq = 0.0;
  for (double v : w) mean += v / w.size(), sq += v * v / w.size();
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(sq, 1.0, 0.03);
  EXPECT_EQ(emb.weight().select(0, 399).to_vector(), std::vector<double>(50, 0.0));
  EXPECT_EQ(emb.forward({399, 3}, {2}).shape(), (Shape{2, 50}));
  expect_error([] { nn::Embedding({.num_embeddings = 4, .embedding_dim = 2, .padding_idx = 4}); },
               "padding_idx must be in [-4, 4), got 4");
}

}  // namespace
}  // namespace qkv
