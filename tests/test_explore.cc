// viz::attention_maps against a float64 softmax of its own, the page's JSON
// read back, and the explorer on all-MiniLM-L6-v2 (when fetched).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkout_paths.h"
#include "qkv/generator.h"
#include "qkv/tensor.h"
#include "qkv/viz/explore.h"
#include "test_util.h"

namespace qkv::viz {
namespace {

using qkv_test::expect_error;
using Json = nlohmann::json;

constexpr int64_t B = 2, H = 4, Hkv = 2, L = 7, E = 8, Ev = 5;

// Two layers of random heads, GQA, causal (in the mask) with a window of 2
// keys back, and key 0 of batch row 1 padded.
std::vector<AttentionInputs> random_layers(Generator& gen) {
  std::vector<bool> keep;  // [B, 1, L, L]
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < L; ++j) keep.push_back(j <= i && !(b == 1 && j == 0));
  std::vector<AttentionInputs> layers;
  for (int l = 0; l < 2; ++l) {
    SdpaOptions o;
    o.attn_mask = Tensor::from_bools({B, 1, L, L}, keep);
    o.window_left = 2;
    o.enable_gqa = true;
    o.dropout_p = 0.5;  // the maps never drop
    if (l == 1) o.scale = 0.3;
    layers.push_back({Tensor::randn({B, H, L, E}, gen), Tensor::randn({B, Hkv, L, E}, gen),
                      Tensor::randn({B, Hkv, L, Ev}, gen), o});
  }
  return layers;
}

TEST(AttentionMaps, EqualFloat64SoftmaxOverTheAllowedKeys) {
  Generator gen(7);
  const std::vector<AttentionInputs> layers = random_layers(gen);
  const int64_t row = 1;
  const AttentionMaps maps = attention_maps(layers, row);
  ASSERT_EQ(maps.weights.shape(), (Shape{2, H, L, L}));
  ASSERT_EQ(maps.values.shape(), (Shape{2, Hkv, L, Ev}));
  for (int64_t l = 0; l < 2; ++l) {
    const AttentionInputs& in = layers[static_cast<size_t>(l)];
    const double scale = l == 1 ? 0.3 : 1.0 / std::sqrt(double(E));
    EXPECT_DOUBLE_EQ(maps.scales[static_cast<size_t>(l)], scale);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        std::vector<double> s(L, -std::numeric_limits<double>::infinity());
        double max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < L; ++j) {
          double dot = 0.0;
          for (int64_t e = 0; e < E; ++e)
            dot += in.q.at({row, h, i, e}) * in.k.at({row, h / 2, j, e});
          EXPECT_NEAR(maps.scores.at({l, h, i, j}), dot, 1e-5 * (1 + std::abs(dot)));
          const bool allowed = j <= i && j >= i - 2 && j != 0;
          EXPECT_EQ(maps.allowed.at({l, h, i, j}) != 0.0, allowed) << l << h << i << j;
          if (allowed) s[j] = dot * scale, max = std::max(max, s[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < L; ++j) sum += std::isinf(s[j]) ? 0.0 : std::exp(s[j] - max);
        for (int64_t j = 0; j < L; ++j) {
          const double want = std::isinf(s[j]) || sum == 0.0 ? 0.0 : std::exp(s[j] - max) / sum;
          EXPECT_NEAR(maps.weights.at({l, h, i, j}), want, 1e-6) << l << h << i << j;
        }
      }
    for (int64_t h = 0; h < Hkv; ++h)
      for (int64_t j = 0; j < L; ++j)
        for (int64_t e = 0; e < Ev; ++e)
          EXPECT_EQ(maps.values.at({l, h, j, e}), in.v.at({row, h, j, e}));
  }
  // Query 0 of row 1 may read only key 0, which is padding: a fully masked row.
  EXPECT_EQ(maps.weights.at({0, 0, 0, 0}), 0.0);
  EXPECT_EQ(maps.allowed.at({0, 0, 0, 0}), 0.0);
}

AttentionMaps named(AttentionMaps maps) {
  maps.model = "tiny";
  maps.architecture = "test";
  maps.text = "a </script> b";
  for (int64_t i = 0; i < L; ++i) {
    maps.tokens.push_back("t" + std::to_string(i));
    maps.segments.push_back(i < 4 ? 0 : 1);
  }
  return maps;
}

TEST(ExploreJson, ReadsBackAsTheMaps) {
  Generator gen(8);
  const AttentionMaps maps = named(attention_maps(random_layers(gen), 0));
  const Json j = Json::parse(explore_json(maps));
  EXPECT_EQ(j["format"], "qkv-explore-1");
  EXPECT_EQ(j["tokens"].size(), size_t(L));
  EXPECT_EQ(j["kv_heads"], Hkv);
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t h = 0; h < H; ++h) {
      const Json& mask = j["masks"][j["mask_of"][l][h].get<size_t>()];
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j2 = 0; j2 < L; ++j2) {
          // Shortest decimals, read back as the same float32.
          EXPECT_EQ(j["weights"][l][h][i][j2].get<float>(),
                    static_cast<float>(maps.weights.at({l, h, i, j2})));
          EXPECT_EQ(j["scores"][l][h][i][j2].get<float>(),
                    static_cast<float>(maps.scores.at({l, h, i, j2})));
          EXPECT_EQ(mask[i].get<std::string>()[static_cast<size_t>(j2)] == '1',
                    maps.allowed.at({l, h, i, j2}) != 0.0);
        }
    }
  // Row 0 has no padding: every head of both layers shares one mask.
  EXPECT_EQ(j["masks"].size(), 1u);
}

TEST(ExploreHtml, EmbedsTheDataSafely) {
  Generator gen(9);
  const AttentionMaps maps = named(attention_maps(random_layers(gen), 0));
  const std::string page = explore_html(maps, {.live_endpoint = "/explore/attention"});
  EXPECT_EQ(page.find("__QKV_DATA__"), std::string::npos);
  EXPECT_EQ(page.find("a </script> b"), std::string::npos);
  EXPECT_NE(page.find("a <\\/script> b"), std::string::npos);
  EXPECT_NE(page.find("const LIVE_ENDPOINT = \"/explore/attention\";"), std::string::npos);
  EXPECT_NE(explore_html(maps).find("const LIVE_ENDPOINT = \"\";"), std::string::npos);
}

TEST(AttentionMaps, RefusesWhatDoesNotFit) {
  Generator gen(10);
  std::vector<AttentionInputs> layers = random_layers(gen);
  expect_error([&] { attention_maps({}); }, "no layers");
  expect_error([&] { attention_maps(layers, 2); }, "row 2 is outside the batch [0, 2)");
  layers[1].k = Tensor::randn({B, Hkv, L + 1, E}, gen);
  expect_error([&] { attention_maps(layers); }, "layer 1 has q, k, v of shapes");
  AttentionMaps maps = named(attention_maps(random_layers(gen)));
  maps.tokens.pop_back();
  expect_error([&] { explore_json(maps); }, {"the maps do not fit together", "6 tokens"});
}

// The real model, when scripts/fetch_model.sh has fetched it.
std::filesystem::path minilm() {
  return std::filesystem::path(qkv_test::source_dir()) / "models" / "all-MiniLM-L6-v2";
}

TEST(AttentionExplorer, MiniLMPairPaddedRowsSumToOneOverRealKeys) {
  if (!std::filesystem::exists(minilm() / "model.safetensors")) GTEST_SKIP() << "no MiniLM";
  AttentionExplorer explorer(minilm());
  EXPECT_EQ(explorer.name(), "all-MiniLM-L6-v2");
  EXPECT_FALSE(explorer.causal());
  const AttentionMaps maps = explorer.explore("A cat.", {.text_b = "A dog.", .pad_to = 12});
  const std::vector<std::string> tokens = {"[CLS]", "a", "cat",   ".",     "[SEP]", "a",
                                           "dog",   ".", "[SEP]", "[PAD]", "[PAD]", "[PAD]"};
  EXPECT_EQ(maps.tokens, tokens);
  EXPECT_EQ(maps.segments, (std::vector<int>{0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0}));
  ASSERT_EQ(maps.weights.shape(), (Shape{6, 12, 12, 12}));
  for (int64_t l = 0; l < 6; ++l)
    for (int64_t h = 0; h < 12; ++h)
      for (int64_t i = 0; i < 12; ++i) {
        double sum = 0.0;
        for (int64_t j = 0; j < 12; ++j) {
          EXPECT_EQ(maps.allowed.at({l, h, i, j}) != 0.0, j < 9);
          sum += maps.weights.at({l, h, i, j});
        }
        EXPECT_NEAR(sum, 1.0, 1e-5);
      }
  expect_error([&] { explorer.explore("A cat.", {.max_weights = 100}); },
               {"5 tokens x 6 layers x 12 heads", "1800 attention weights", "max_weights = 100",
                "shorten the text"});
}

}  // namespace
}  // namespace qkv::viz
