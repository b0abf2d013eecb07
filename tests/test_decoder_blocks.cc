// The pieces of decoder-only models: nn::GroupedQueryAttention (projections,
// RoPE, GQA head sharing, causal and additive masks), nn::SwiGLUFeedForward
// and nn::FeedForward, against float64 computations written here.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/functional.h"
#include "qkv/nn/feed_forward.h"
#include "qkv/nn/grouped_query_attention.h"
#include "qkv/nn/positional_encoding.h"
#include "reference_blocks.h"
#include "test_util.h"

namespace qkv::nn {
namespace {

using qkv_test::expect_error;

namespace ref = qkv::reference;

double max_rel(const std::vector<double>& got, const std::vector<double>& want) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return diff / scale;
}

// Rotates rows of E values at positions offset + (row % L), pairs (i, i + E/2).
void rotate_half_split(std::vector<double>& x, int64_t L, int64_t E, int64_t offset) {
  for (size_t r = 0; r < x.size() / E; ++r) {
    const double pos = static_cast<double>(offset + static_cast<int64_t>(r) % L);
    for (int64_t i = 0; i < E / 2; ++i) {
      const double angle = pos * std::pow(10000.0, -2.0 * i / E);
      const double a = x[r * E + i], b = x[r * E + i + E / 2];
      x[r * E + i] = a * std::cos(angle) - b * std::sin(angle);
      x[r * E + i + E / 2] = b * std::cos(angle) + a * std::sin(angle);
    }
  }
}

// GQA from the formulas. x: [B, L, D]; bias(h, i, j) is added to the scores;
// key j is visible to query i when j <= i + offset (causal) or always.
std::vector<double> gqa_reference(const std::vector<double>& x, int64_t B, int64_t L, int64_t D,
                                  int64_t H, int64_t Hkv, int64_t E, int64_t offset, bool causal,
                                  ref::Params& p,
                                  const std::function<double(int64_t, int64_t, int64_t)>& bias) {
  const ref::Vec none;
  auto heads = [&](const std::string& name, int64_t n) {
    // [B, L, n*E] -> [B, n, L, E], rotated for q and k.
    const ref::Vec y = ref::linear(x, D, p[name + ".weight"], none);
    ref::Vec out(static_cast<size_t>(B * n * L * E));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < n; ++h)
        for (int64_t l = 0; l < L; ++l)
          for (int64_t e = 0; e < E; ++e)
            out[((b * n + h) * L + l) * E + e] = y[(b * L + l) * n * E + h * E + e];
    if (name != "v_proj") rotate_half_split(out, L, E, offset);
    return out;
  };
  const ref::Vec q = heads("q_proj", H), k = heads("k_proj", Hkv), v = heads("v_proj", Hkv);
  ref::Vec merged(static_cast<size_t>(B * L * H * E), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / Hkv);  // the key/value head this query head reads
      for (int64_t i = 0; i < L; ++i) {
        std::vector<double> w(static_cast<size_t>(L));
        double max_w = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < L; ++j) {
          double dot = 0.0;
          for (int64_t e = 0; e < E; ++e)
            dot += q[((b * H + h) * L + i) * E + e] * k[((b * Hkv + g) * L + j) * E + e];
          w[j] = causal && j > i ? -INFINITY : dot / std::sqrt(double(E)) + bias(h, i, j);
          max_w = std::max(max_w, w[j]);
        }
        for (double& s : w) sum += (s = std::exp(s - max_w));
        for (int64_t j = 0; j < L; ++j)
          for (int64_t e = 0; e < E; ++e)
            merged[(b * L + i) * H * E + h * E + e] +=
                w[j] / sum * v[((b * Hkv + g) * L + j) * E + e];
      }
    }
  return ref::linear(merged, H * E, p["o_proj.weight"], none);
}

TEST(GroupedQueryAttention, MatchesTheFormulasWithRopeCausalAndAlibi) {
  const int64_t B = 2, L = 6, D = 24, H = 6, Hkv = 2, E = 4, offset = 3;
  Generator gen(1);
  GroupedQueryAttention attn(
      {.embed_dim = D, .num_heads = H, .num_kv_heads = Hkv, .dtype = DType::kFloat64}, &gen);
  const Tensor x = Tensor::randn({B, L, D}, gen, DType::kFloat64);
  ref::Params p = ref::read_params(attn.state_dict());
  const auto no_bias = [](int64_t, int64_t, int64_t) { return 0.0; };

  // Causal, no extra mask.
  Tensor out = attn.forward(x, {.position_offset = offset, .causal = CausalMask::kTopLeft});
  ASSERT_EQ(out.shape(), (Shape{B, L, D}));
  EXPECT_LT(max_rel(out.to_vector(),
                    gqa_reference(x.to_vector(), B, L, D, H, Hkv, E, offset, true, p, no_bias)),
            1e-12);
  // Causal combined with an ALiBi-style float bias [H, L, L].
  const Tensor alibi =
      Alibi({.num_heads = H, .causal = false, .dtype = DType::kFloat64}).forward(L, L);
  out = attn.forward(
      x, {.position_offset = offset, .causal = CausalMask::kTopLeft, .attn_mask = alibi});
  const auto alibi_bias = [&](int64_t h, int64_t i, int64_t j) { return alibi.at({h, i, j}); };
  EXPECT_LT(max_rel(out.to_vector(),
                    gqa_reference(x.to_vector(), B, L, D, H, Hkv, E, offset, true, p, alibi_bias)),
            1e-12);
  // A bool keep mask equal to the causal one gives the causal result.
  Tensor keep = Tensor::zeros({L, L}, DType::kBool);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j <= i; ++j) keep.set({i, j}, 1.0);
  EXPECT_LT(
      max_abs_diff(attn.forward(x, {.position_offset = offset, .attn_mask = keep}),
                   attn.forward(x, {.position_offset = offset, .causal = CausalMask::kTopLeft})),
      1e-13);
}

TEST(GroupedQueryAttention, ProjectAndAttendComposeToForward) {
  Generator gen(2);
  GroupedQueryAttention attn({.embed_dim = 16, .num_heads = 4, .num_kv_heads = 1}, &gen);
  const Tensor x = Tensor::randn({1, 5, 16}, gen);
  const ProjectedQkv p = attn.project(x, 2);
  EXPECT_EQ(p.q.shape(), (Shape{1, 4, 5, 4}));
  EXPECT_EQ(p.k.shape(), (Shape{1, 1, 5, 4}));
  EXPECT_EQ(max_abs_diff(attn.attend(p.q, p.k, p.v, {.causal = CausalMask::kBottomRight}),
                         attn.forward(x, {.position_offset = 2, .causal = CausalMask::kTopLeft})),
            0.0);
  // The last query over all keys equals the full causal result's last row.
  const Tensor last =
      attn.attend(p.q.slice(2, 4, 5), p.k, p.v, {.causal = CausalMask::kBottomRight});
  const Tensor full = attn.forward(x, {.position_offset = 2, .causal = CausalMask::kTopLeft});
  EXPECT_LT(max_abs_diff(last, full.slice(1, 4, 5)), 1e-6);
}

TEST(GroupedQueryAttention, NamesAndErrors) {
  GroupedQueryAttention attn({.embed_dim = 8, .num_heads = 4, .num_kv_heads = 2});
  const auto state = attn.state_dict();
  ASSERT_EQ(state.size(), 4u);
  EXPECT_EQ(state.at("q_proj.weight").shape(), (Shape{8, 8}));
  EXPECT_EQ(state.at("k_proj.weight").shape(), (Shape{4, 8}));
  EXPECT_EQ(state.at("o_proj.weight").shape(), (Shape{8, 8}));
  expect_error([] { GroupedQueryAttention({.embed_dim = 8, .num_heads = 4, .num_kv_heads = 3}); },
               "num_heads (4) must be a multiple of num_kv_heads (3)");
  expect_error([] { GroupedQueryAttention({.embed_dim = 6, .num_heads = 2}); },
               "RoPE needs an even head_dim, got 3");
  expect_error([&] { attn.forward(Tensor::zeros({2, 8})); }, "input must be [B, L, D] with D = 8");
}

TEST(SwiGLUFeedForward, ComputesW2OfSiluGateTimesUp) {
  Generator gen(3);
  SwiGLUFeedForward ff({.d_model = 6, .hidden_dim = 10, .dtype = DType::kFloat64}, &gen);
  ref::Params p = ref::read_params(ff.state_dict());
  ASSERT_EQ(p.size(), 3u);  // no biases by default
  const Tensor x = Tensor::randn({2, 3, 6}, gen, DType::kFloat64);
  const ref::Vec none;
  const ref::Vec gate = ref::linear(x.to_vector(), 6, p["w1.weight"], none);
  const ref::Vec up = ref::linear(x.to_vector(), 6, p["w3.weight"], none);
  ref::Vec h(gate.size());
  for (size_t i = 0; i < h.size(); ++i) h[i] = ref::silu(gate[i]) * up[i];
  EXPECT_LT(max_rel(ff.forward(x).to_vector(), ref::linear(h, 10, p["w2.weight"], none)), 1e-13);
}

TEST(FeedForward, ComputesLinear2OfActivationOfLinear1) {
  for (Activation act : {Activation::kRelu, Activation::kGelu}) {
    Generator gen(4);
    FeedForward ff(
        {.d_model = 6, .dim_feedforward = 9, .activation = act, .dtype = DType::kFloat64}, &gen);
    ref::Params p = ref::read_params(ff.state_dict());
    const Tensor x = Tensor::randn({4, 6}, gen, DType::kFloat64);
    EXPECT_LT(max_rel(ff.forward(x).to_vector(),
                      ref::ffn(x.to_vector(), 6, p, "", act == Activation::kGelu)),
              1e-13);
  }
}

}  // namespace
}  // namespace qkv::nn
