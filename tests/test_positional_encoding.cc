// Positional encodings against their formulas in float64: sinusoidal (§3.4),
// learned, RoPE in both conventions (each against an independent
// implementation, and against each other through the permutation of E
// indices), ALiBi slopes and biases, T5 buckets and bias.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/functional.h"
#include "qkv/nn/positional_encoding.h"
#include "test_util.h"

namespace qkv::nn {
namespace {

using qkv_test::expect_error;

// --- Sinusoidal ----------------------------------------------------------------------

TEST(Sinusoidal, PutsSinOnEvenAndCosOnOddColumns) {
  const int64_t L = 50, D = 10, offset = 7;
  const Tensor pe = sinusoidal_encoding(L, D, offset, DType::kFloat64);
  ASSERT_EQ(pe.shape(), (Shape{L, D}));
  for (int64_t row = 0; row < L; ++row) {
    const double pos = static_cast<double>(row + offset);
    for (int64_t i = 0; 2 * i < D; ++i) {
      // 1 / 10000^(2i/d) written as exp(-2i ln(10000) / d).
      const double angle = pos * std::exp(-2.0 * i * std::log(10000.0) / D);
      EXPECT_NEAR(pe.at({row, 2 * i}), std::sin(angle), 1e-12) << row << ", " << 2 * i;
      EXPECT_NEAR(pe.at({row, 2 * i + 1}), std::cos(angle), 1e-12) << row << ", " << 2 * i + 1;
    }
  }
  // Position 0: sin 0 = 0 on even columns, cos 0 = 1 on odd ones.
  const Tensor first = sinusoidal_encoding(1, 4, 0, DType::kFloat64);
  EXPECT_EQ(first.to_vector(), (std::vector<double>{0.0, 1.0, 0.0, 1.0}));
  // An odd d_model ends with a sin column.
  EXPECT_NEAR(sinusoidal_encoding(3, 5, 0, DType::kFloat64).at({2, 4}),
              std::sin(2.0 / std::pow(10000.0, 4.0 / 5.0)), 1e-15);
}

TEST(Sinusoidal, ModuleAddsTheRowsAtTheOffsetInEveryLayout) {
  Generator gen(1);
  SinusoidalPositionalEncoding seq_first({.d_model = 6, .max_len = 20, .dtype = DType::kFloat64});
  SinusoidalPositionalEncoding batch_first(
      {.d_model = 6, .max_len = 20, .batch_first = true, .dtype = DType::kFloat64});
  const Tensor x =
      Tensor::randn({3, 4, 6}, gen, DType::kFloat64);  // [L=3, B=4, D] or [B=3, L=4, D]
  const Tensor pe = sinusoidal_encoding(20, 6, 0, DType::kFloat64);
  const Tensor a = seq_first.forward(x, 5), b = batch_first.forward(x, 5);
  EXPECT_DOUBLE_EQ(a.at({2, 1, 3}), x.at({2, 1, 3}) + pe.at({7, 3}));
  EXPECT_DOUBLE_EQ(b.at({2, 1, 3}), x.at({2, 1, 3}) + pe.at({6, 3}));
  EXPECT_DOUBLE_EQ(seq_first.forward(x.select(1, 0), 0).at({2, 0}),
                   x.at({2, 0, 0}) + pe.at({2, 0}));
  EXPECT_TRUE(seq_first.state_dict().empty());
  expect_error([&] { seq_first.forward(x, 18); }, "exceed max_len = 20");
  expect_error([&] { seq_first.forward(Tensor::zeros({3, 4, 5}, DType::kFloat64)); }, "D = 6");
}

TEST(Learned, AddsTheLearnedRowsAndLoadsThem) {
  Generator gen(2);
  LearnedPositionalEncoding enc({.max_len = 8, .d_model = 4, .batch_first = true}, &gen);
  const Tensor table = Tensor::randn({8, 4}, gen);
  enc.load_state_dict({{"weight", table}});
  const Tensor x = Tensor::randn({2, 3, 4}, gen);
  const Tensor y = enc.forward(x, 2);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t l = 0; l < 3; ++l)
      for (int64_t d = 0; d < 4; ++d)
        EXPECT_FLOAT_EQ(y.at({b, l, d}), x.at({b, l, d}) + table.at({l + 2, d}));
  expect_error([&] { enc.load_state_dict({{"weight", Tensor::zeros({9, 4})}}); }, "size mismatch");
}

// --- RoPE ----------------------------------------------------------------------------

// Interleaved convention as complex multiplication (Meta's LLaMA code):
// (x[2i] + i·x[2i+1]) · e^{i·pos·θ_i}.
std::vector<double> rope_interleaved_reference(const std::vector<double>& x, int64_t L, int64_t E,
                                               int64_t offset, double base) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / E; ++r) {
    const double pos = static_cast<double>(offset + static_cast<int64_t>(r) % L);
    for (int64_t i = 0; i < E / 2; ++i) {
      const std::complex<double> z(x[r * E + 2 * i], x[r * E + 2 * i + 1]);
      const std::complex<double> w = z * std::polar(1.0, pos / std::pow(base, 2.0 * i / E));
      y[r * E + 2 * i] = w.real();
      y[r * E + 2 * i + 1] = w.imag();
    }
  }
  return y;
}

// Half-split convention as Hugging Face writes it: x·cos + rotate_half(x)·sin
// with rotate_half(x) = [-x2, x1] and cos, sin repeated over both halves.
std::vector<double> rope_half_split_reference(const std::vector<double>& x, int64_t L, int64_t E,
                                              int64_t offset, double base) {
  std::vector<double> y(x.size());
  const int64_t half = E / 2;
  for (size_t r = 0; r < x.size() / E; ++r) {
    const double pos = static_cast<double>(offset + static_cast<int64_t>(r) % L);
    for (int64_t c = 0; c < E; ++c) {
      const double angle = pos / std::pow(base, 2.0 * (c % half) / E);
      const double rotated = c < half ? -x[r * E + c + half] : x[r * E + c - half];
      y[r * E + c] = x[r * E + c] * std::cos(angle) + rotated * std::sin(angle);
    }
  }
  return y;
}

TEST(Rope, EachConventionMatchesAnIndependentImplementation) {
  Generator gen(3);
  const int64_t L = 9, E = 16, offset = 4;
  const Tensor x = Tensor::randn({2, 3, L, E}, gen, DType::kFloat64);
  for (double base : {10000.0, 500000.0}) {
    for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalfSplit}) {
      RotaryEmbedding rope({.head_dim = E, .base = base, .style = style});
      const std::vector<double> got = rope.forward(x, offset).to_vector();
      const std::vector<double> want =
          style == RopeStyle::kInterleaved
              ? rope_interleaved_reference(x.to_vector(), L, E, offset, base)
              : rope_half_split_reference(x.to_vector(), L, E, offset, base);
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-12) << i;
    }
  }
}

// P lists the even coordinates first, then the odd ones: (P x)[i] = x[2i],
// (P x)[i + E/2] = x[2i + 1].
Tensor permute_even_odd(const Tensor& x) {
  const int64_t E = x.size(-1);
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  for (int64_t i = 0; i < E / 2; ++i) {
    y.slice(-1, i, i + 1).copy_from(x.slice(-1, 2 * i, 2 * i + 1));
    y.slice(-1, i + E / 2, i + E / 2 + 1).copy_from(x.slice(-1, 2 * i + 1, 2 * i + 2));
  }
  return y;
}

TEST(Rope, TheConventionsDifferExactlyByTheEvenOddPermutation) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    Generator gen(4);
    const Tensor x = Tensor::randn({2, 7, 12}, gen, dtype);
    RotaryEmbedding interleaved({.head_dim = 12, .style = RopeStyle::kInterleaved});
    RotaryEmbedding half_split({.head_dim = 12, .style = RopeStyle::kHalfSplit});
    // half_split(P x) = P interleaved(x), bit for bit.
    EXPECT_EQ(max_abs_diff(half_split.forward(permute_even_odd(x), 3),
                           permute_even_odd(interleaved.forward(x, 3))),
              0.0);
    // …and they are not the same map.
    EXPECT_GT(max_abs_diff(half_split.forward(x, 3), interleaved.forward(x, 3)), 1e-2);
  }
}

TEST(Rope, ScoresDependOnlyOnRelativePositionAndOffsetsCompose) {
  Generator gen(5);
  RotaryEmbedding rope({.head_dim = 8});
  const Tensor q = Tensor::randn({1, 8}, gen, DType::kFloat64);
  const Tensor k = Tensor::randn({1, 8}, gen, DType::kFloat64);
  auto score = [&](int64_t m, int64_t n) {
    const std::vector<double> a = rope.forward(q, m).to_vector(),
                              b = rope.forward(k, n).to_vector();
    double dot = 0.0;
    for (size_t i = 0; i < a.size(); ++i) dot += a[i] * b[i];
    return dot;
  };
  EXPECT_NEAR(score(3, 1), score(12, 10), 1e-12);
  EXPECT_NEAR(score(0, 5), score(100, 105), 1e-12);
  // Rotating rows 4..9 of a sequence equals rotating them alone at offset 4.
  const Tensor seq = Tensor::randn({3, 10, 8}, gen, DType::kFloat64);
  EXPECT_LT(max_abs_diff(rope.forward(seq).slice(1, 4, 10), rope.forward(seq.slice(1, 4, 10), 4)),
            1e-15);
  // Position 0 is the identity.
  EXPECT_EQ(max_abs_diff(rope.forward(q, 0), q), 0.0);
  expect_error([] { RotaryEmbedding({.head_dim = 7}); }, "head_dim must be positive and even");
  expect_error([&] { rope.forward(Tensor::zeros({2, 6})); }, "E = head_dim = 8");
}

// --- ALiBi ---------------------------------------------------------------------------

TEST(Alibi, SlopesFollowTheGeometricSequenceForAnyHeadCount) {
  std::vector<double> eight = alibi_slopes(8);
  ASSERT_EQ(eight.size(), 8u);
  for (int h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(eight[h], std::pow(2.0, -(h + 1)));
  // 6 heads: the 4 slopes of H = 4, then every other slope of H = 8.
  const std::vector<double> six = alibi_slopes(6);
  const std::vector<double> want6 = {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125};
  ASSERT_EQ(six.size(), 6u);
  for (int h = 0; h < 6; ++h) EXPECT_DOUBLE_EQ(six[h], want6[h]);
  // 12 heads: the 8 of H = 8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 from H = 16.
  const std::vector<double> twelve = alibi_slopes(12);
  ASSERT_EQ(twelve.size(), 12u);
  for (int h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(twelve[h], std::pow(2.0, -(h + 1)));
  for (int h = 0; h < 4; ++h) EXPECT_NEAR(twelve[8 + h], std::pow(2.0, -0.5 - h), 1e-15);
  EXPECT_DOUBLE_EQ(alibi_slopes(1)[0], 1.0 / 256);
  expect_error([] { alibi_slopes(0); }, "num_heads must be > 0");
}

TEST(Alibi, BiasIsSlopeTimesDistanceWithQueriesBottomRight) {
  const int64_t H = 3, L = 2, S = 5;
  Alibi causal({.num_heads = H, .dtype = DType::kFloat64});
  Alibi bidirectional({.num_heads = H, .causal = false, .dtype = DType::kFloat64});
  const Tensor c = causal.forward(L, S), b = bidirectional.forward(L, S);
  ASSERT_EQ(c.shape(), (Shape{H, L, S}));
  const std::vector<double> m = alibi_slopes(H);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) {
        const int64_t pos = i + S - L;  // query 0 is at position 3, query 1 at 4
        if (j <= pos)
          EXPECT_DOUBLE_EQ(c.at({h, i, j}), -m[h] * (pos - j));
        else
          EXPECT_EQ(c.at({h, i, j}), -INFINITY);
        EXPECT_DOUBLE_EQ(b.at({h, i, j}), -m[h] * std::abs(pos - j));
      }
  expect_error([&] { causal.forward(6, 5); }, "need 0 <= L <= S");
}

// --- T5 relative position bias ----------------------------------------------------------

TEST(RelativePositionBias, BucketsMatchT5) {
  // Expected values from transformers' T5Attention._relative_position_bucket.
  const std::vector<int64_t> rp = {-300, -128, -127, -100, -64, -40, -33, -32, -20, -16, -15,
                                   -9,   -8,   -7,   -1,   0,   1,   2,   7,   8,   9,   12,
                                   16,   31,   32,   33,   50,  64,  100, 127, 128, 129, 1000};
  const std::vector<int64_t> bidirectional = {15, 15, 15, 15, 14, 12, 12, 12, 10, 10, 9,
                                              8,  8,  7,  1,  0,  17, 18, 23, 24, 24, 25,
                                              26, 27, 28, 28, 29, 30, 31, 31, 31, 31, 31};
  const std::vector<int64_t> causal = {31, 31, 31, 30, 26, 23, 21, 21, 17, 16, 15, 9, 8, 7, 1, 0, 0,
                                       0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0, 0, 0, 0, 0};
  const std::vector<int64_t> small = {7,  7,  7,  7,  7,  7,  7,  7,  6,  6,  6,
                                      5,  5,  4,  1,  0,  9,  10, 12, 13, 13, 13,
                                      14, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15};
  for (size_t i = 0; i < rp.size(); ++i) {
    EXPECT_EQ(relative_position_bucket(rp[i], true, 32, 128), bidirectional[i]) << rp[i];
    EXPECT_EQ(relative_position_bucket(rp[i], false, 32, 128), causal[i]) << rp[i];
    EXPECT_EQ(relative_position_bucket(rp[i], true, 16, 50), small[i]) << rp[i];
  }
  expect_error([] { relative_position_bucket(0, false, 64, 20); },
               "max_distance (20) must exceed the exact range");
}

TEST(RelativePositionBias, LooksUpTheTableByBucketOfKeyMinusQuery) {
  Generator gen(6);
  RelativePositionBias bias({.num_heads = 3,
                             .num_buckets = 8,
                             .max_distance = 20,
                             .bidirectional = false,
                             .dtype = DType::kFloat64},
                            &gen);
  const Tensor table = bias.state_dict().at("relative_attention_bias.weight");
  ASSERT_EQ(table.shape(), (Shape{8, 3}));
  const int64_t L = 3, S = 30;
  const Tensor out = bias.forward(L, S);
  ASSERT_EQ(out.shape(), (Shape{3, L, S}));
  for (int64_t h = 0; h < 3; ++h)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) {
        const int64_t bucket = relative_position_bucket(j - (i + S - L), false, 8, 20);
        EXPECT_EQ(out.at({h, i, j}), table.at({bucket, h}));
      }
  expect_error(
      [&] {
        bias.load_state_dict({{"weight", table}});
      },
      "unexpected key(s) in state_dict: \"weight\"");
}

}  // namespace
}  // namespace qkv::nn
