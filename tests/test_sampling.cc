// Sampling: greedy, temperature, top-k, top-p, min-p; distributions, filters,
// determinism and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "qkv/sampling.h"

namespace qkv {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  double max = -INFINITY;
  for (float x : logits) max = std::max(max, static_cast<double>(x));
  std::vector<double> p;
  double sum = 0.0;
  for (float x : logits) {
    p.push_back(std::exp((x - max) / temperature));
    sum += p.back();
  }
  for (double& x : p) x /= sum;
  return p;
}

// Frequencies of `draws` samples.
std::vector<double> frequencies(Sampler& sampler, const std::vector<float>& logits, int draws,
                                uint64_t seed) {
  Generator gen(seed);
  std::vector<double> counts(logits.size(), 0.0);
  for (int i = 0; i < draws; ++i) counts[sampler.sample(logits, gen)] += 1.0;
  for (double& c : counts) c /= draws;
  return counts;
}

// Each frequency within 5 standard deviations of its probability.
void expect_matches(const std::vector<double>& freq, const std::vector<double>& p, int draws) {
  ASSERT_EQ(freq.size(), p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const double sd = std::sqrt(p[i] * (1.0 - p[i]) / draws);
    EXPECT_NEAR(freq[i], p[i], 5.0 * sd + 1e-12) << "token " << i;
  }
}

const std::vector<float> kLogits = {1.0f, 3.0f, -0.5f, 2.0f, 0.0f, 2.5f, -2.0f, 1.5f};

TEST(Sampling, GreedyIsArgmaxFirstOfTiesAndDrawsNothing) {
  Sampler sampler({.temperature = 0.0}, 5);
  Generator gen(7), untouched(7);
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  EXPECT_EQ(sampler.sample(logits, gen), 1);
  EXPECT_EQ(argmax(logits), 1);
  EXPECT_EQ(gen.next_u64(), untouched.next_u64());  // no random number used
  const std::vector<double> p = sampler.probabilities(logits);
  EXPECT_EQ(p, (std::vector<double>{0, 1, 0, 0, 0}));
}

TEST(Sampling, FullDistributionMatchesSoftmax) {
  Sampler sampler({.temperature = 1.0}, static_cast<int64_t>(kLogits.size()));
  const std::vector<double> p = softmax(kLogits, 1.0);
  const std::vector<double> q = sampler.probabilities(kLogits);
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(q[i], p[i], 1e-12);
  const int draws = 40000;
  expect_matches(frequencies(sampler, kLogits, draws, 1), p, draws);
}

TEST(Sampling, TemperatureSharpensAndFlattens) {
  for (double t : {0.5, 2.0}) {
    Sampler sampler({.temperature = t}, static_cast<int64_t>(kLogits.size()));
    const std::vector<double> p = softmax(kLogits, t);
    const std::vector<double> q = sampler.probabilities(kLogits);
    for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(q[i], p[i], 1e-12) << "T=" << t;
    const int draws = 30000;
    expect_matches(frequencies(sampler, kLogits, draws, 2), p, draws);
  }
}

TEST(Sampling, TopKNeverPicksOutsideTheTopK) {
  // Sorted by logit: ids 1 (3.0), 5 (2.5), 3 (2.0), 7 (1.5), 0 (1.0), ...
  Sampler sampler({.temperature = 1.5, .top_k = 3}, static_cast<int64_t>(kLogits.size()));
  const std::set<int64_t> top = {1, 5, 3};
  Generator gen(3);
  for (int i = 0; i < 20000; ++i) EXPECT_TRUE(top.count(sampler.sample(kLogits, gen)));
  // Within the top k, the softmax renormalised.
  const std::vector<double> full = softmax(kLogits, 1.5);
  const double kept = full[1] + full[5] + full[3];
  std::vector<double> p(kLogits.size(), 0.0);
  for (int64_t id : top) p[id] = full[id] / kept;
  const std::vector<double> q = sampler.probabilities(kLogits);
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(q[i], p[i], 1e-12);
  expect_matches(frequencies(sampler, kLogits, 30000, 4), p, 30000);
}

TEST(Sampling, TopKOfOneIsGreedyAndLargeKKeepsAll) {
  Sampler one({.temperature = 1.0, .top_k = 1}, static_cast<int64_t>(kLogits.size()));
  Generator gen(5);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(one.sample(kLogits, gen), 1);
  Sampler all({.temperature = 1.0, .top_k = 1000}, static_cast<int64_t>(kLogits.size()));
  const std::vector<double> p = softmax(kLogits, 1.0);
  const std::vector<double> q = all.probabilities(kLogits);
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(q[i], p[i], 1e-12);
}

TEST(Sampling, TopPRespectsTheNucleus) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 (as logits: their logs).
  const std::vector<float> logits = {std::log(0.15f), std::log(0.5f), std::log(0.05f),
                                     std::log(0.3f)};
  struct Case {
    double top_p;
    std::set<int64_t> nucleus;
  };
  for (const Case& c : {Case{0.4, {1}}, Case{0.7, {1, 3}}, Case{0.79, {1, 3}}, Case{0.9, {1, 3, 0}},
                        Case{0.99, {1, 3, 0, 2}}}) {
    Sampler sampler({.temperature = 1.0, .top_p = c.top_p}, 4);
    Generator gen(6);
    std::set<int64_t> seen;
    for (int i = 0; i < 5000; ++i) seen.insert(sampler.sample(logits, gen));
    EXPECT_EQ(seen, c.nucleus) << "top_p=" << c.top_p;
    // Renormalised within the nucleus.
    const std::vector<double> q = sampler.probabilities(logits);
    const std::vector<double> full = softmax(logits, 1.0);
    double kept = 0.0;
    for (int64_t id : c.nucleus) kept += full[id];
    for (int64_t id = 0; id < 4; ++id)
      EXPECT_NEAR(q[id], c.nucleus.count(id) ? full[id] / kept : 0.0, 1e-9);
  }
}

TEST(Sampling, TopKThenTopP) {
  // top_k = 3 keeps ids 1, 5, 3; top_p then keeps the nucleus of those three.
  Sampler sampler({.temperature = 1.0, .top_k = 3, .top_p = 0.5}, 8);
  const std::vector<double> q = sampler.probabilities(kLogits);
  const std::vector<double> full = softmax(kLogits, 1.0);
  const double top3 = full[1] + full[5] + full[3];
  // id 1 alone has full[1] / top3 ≈ 0.51 ≥ 0.5 of the top 3.
  ASSERT_GE(full[1] / top3, 0.5);
  EXPECT_NEAR(q[1], 1.0, 1e-12);
}

// min-p keeps the tokens at least min_p times as likely as the most likely
// one, after the temperature (Hugging Face's MinPLogitsWarper), renormalised.
TEST(Sampling, MinPKeepsTokensNearTheMostLikely) {
  for (const double temperature : {1.0, 0.5, 2.0})
    for (const double min_p : {0.0, 0.05, 0.3, 0.6, 1.0}) {
      Sampler sampler({.temperature = temperature, .min_p = min_p}, 8);
      const std::vector<double> q = sampler.probabilities(kLogits);
      const std::vector<double> full = softmax(kLogits, temperature);
      const double top = *std::max_element(full.begin(), full.end());
      double kept = 0.0;
      for (double p : full) kept += p >= min_p * top ? p : 0.0;
      for (size_t id = 0; id < full.size(); ++id)
        EXPECT_NEAR(q[id], full[id] >= min_p * top ? full[id] / kept : 0.0, 1e-9)
            << "T=" << temperature << " min_p=" << min_p << " id " << id;
    }
  // After top-k: of ids 1, 5, 3 (logits 3, 2.5, 2; weights 1, e^-0.5 ≈ 0.61,
  // e^-1 ≈ 0.37 of the most likely), min_p 0.6 keeps 1 and 5.
  Sampler both({.temperature = 1.0, .top_k = 3, .min_p = 0.6}, 8);
  const std::vector<double> q = both.probabilities(kLogits);
  EXPECT_GT(q[1], 0.0);
  EXPECT_GT(q[5], 0.0);
  EXPECT_EQ(q[3], 0.0);
  Generator gen(3);
  for (int i = 0; i < 2000; ++i) {
    const int64_t id = both.sample(kLogits, gen);
    EXPECT_TRUE(id == 1 || id == 5) << id;
  }
}

TEST(Sampling, SameSeedSameTokensDifferentSeedDifferentTokens) {
  Sampler sampler({.temperature = 1.0, .top_k = 6, .top_p = 0.95}, 8);
  auto draw = [&](uint64_t seed) {
    Generator gen(seed);
    std::vector<int64_t> ids;
    for (int i = 0; i < 64; ++i) ids.push_back(sampler.sample(kLogits, gen));
    return ids;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
}

TEST(Sampling, NegativeInfinityIsNeverDrawn) {
  const std::vector<float> logits = {kNegInf, 0.0f, kNegInf, 0.0f};
  Sampler sampler({.temperature = 1.0}, 4);
  Generator gen(8);
  for (int i = 0; i < 2000; ++i) {
    const int64_t id = sampler.sample(logits, gen);
    EXPECT_TRUE(id == 1 || id == 3);
  }
  Sampler top_k({.temperature = 1.0, .top_k = 3}, 4);  // keeps one -inf token
  for (int i = 0; i < 2000; ++i) {
    const int64_t id = top_k.sample(logits, gen);
    EXPECT_TRUE(id == 1 || id == 3);
  }
}

TEST(Sampling, TensorRowsAreSampledInOrder) {
  const std::vector<float> values = {0.0f, 5.0f, 1.0f, 9.0f, 0.0f, 0.0f};
  const Tensor logits = Tensor::from_vector({2, 3}, std::span<const float>(values));
  Generator gen(0);
  EXPECT_EQ(sample(logits, {.temperature = 0.0}, gen), (std::vector<int64_t>{1, 0}));
}

TEST(Sampling, BadOptionsAreClearErrors) {
  auto message = [](const SamplingOptions& o) {
    try {
      Sampler sampler(o, 4);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({.temperature = -1.0}).find("temperature"), std::string::npos);
  EXPECT_NE(message({.temperature = NAN}).find("temperature"), std::string::npos);
  EXPECT_NE(message({.temperature = INFINITY}).find("temperature"), std::string::npos);
  EXPECT_NE(message({.top_k = -1}).find("top_k"), std::string::npos);
  EXPECT_NE(message({.top_p = 0.0}).find("top_p"), std::string::npos);
  EXPECT_NE(message({.top_p = 1.5}).find("top_p"), std::string::npos);
  EXPECT_NE(message({.top_p = NAN}).find("top_p"), std::string::npos);
  EXPECT_NE(message({.min_p = -0.1}).find("min_p"), std::string::npos);
  EXPECT_NE(message({.min_p = 1.5}).find("min_p"), std::string::npos);
  EXPECT_NE(message({.min_p = NAN}).find("min_p"), std::string::npos);
  EXPECT_THROW(Sampler({}, 0), Error);
}

TEST(Sampling, BadLogitsAreClearErrors) {
  Sampler sampler({.temperature = 1.0}, 3);
  Generator gen(0);
  const std::vector<float> nan = {0.0f, NAN, 1.0f};
  const std::vector<float> inf = {0.0f, INFINITY, 1.0f};
  const std::vector<float> all_masked = {kNegInf, kNegInf, kNegInf};
  const std::vector<float> short_row = {0.0f, 1.0f};
  EXPECT_THROW(sampler.sample(nan, gen), Error);
  EXPECT_THROW(sampler.sample(inf, gen), Error);
  EXPECT_THROW(sampler.sample(all_masked, gen), Error);
  EXPECT_THROW(sampler.sample(short_row, gen), Error);
  EXPECT_THROW(argmax(nan), Error);
  EXPECT_THROW(argmax(std::vector<float>{}), Error);
}

}  // namespace
}  // namespace qkv
