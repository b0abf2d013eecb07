// The fused backward with bfloat16 products (bfloat16 tensors, and float32
// tensors with SdpaOptions::precision = kBFloat16) on every kernel table,
// against the float64 reference backward on the bfloat16-rounded q, k, v, dO.
//
// The bound. Let q̃, k̃, ṽ, dõ be the rounded inputs and, in float64, P the
// reference weights, o the reference output, dP_ij = dõ_i·ṽ_j,
// D_i = Σ_j P_ij dP_ij, dS_ij = P_ij (dP_ij − D_i). The kernel computes
//   P̂_ij = exp(ŝ_ij − lse_i) = P_ij (1 + π_ij),
//          |π_ij| ≤ π_i = 3δ + 1e-5·(1 + |lse_i|) + 1e-6: the score error δ of
//          the forward's test (bfloat16 products exact in float32, E-term
//          float32 sums), once here and ≤ 2δ + 1e-5(1 + |lse|) in the saved
//          log-sum-exp, plus the float32 exp;
//   dP̂_ij = dP_ij + ρ_ij,  |ρ_ij| ≤ (Ev + 1)·u₃₂·Σ_e |dõ_ie ṽ_je| (exact
//          bfloat16 products, float32 sums);
//   D̂_i  = Σ_e dO_ie Ô_ie with the forward's output Ô and the unrounded dO:
//          |D̂_i − D_i| ≤ ΔD_i = Σ_e |dO_ie − dõ_ie||Ô_ie| + Σ_e |dõ_ie||Ô_ie − o_ie|
//          + u₃₂|D_i| (computed from the actual Ô: its error is the forward's,
//          bounded in test_bf16_attention);
//   dŜ_ij = bf16(P̂_ij (dP̂_ij − D̂_i)):
//          |dŜ_ij − dS_ij| ≤ σ_ij = P_ij [(π_i + u₁₆)|dP_ij − D_i| + ρ_ij + ΔD_i];
//   P̃_ij = bf16(P̂_ij) = P_ij (1 + η), |η| ≤ π_i + u₁₆.
// The three gradient products multiply exactly in float32 and add in float32
// (n terms: relative n·u₃₂ of the sum of absolute terms):
//   |ΔdV_je| ≤ Σ_i (π_i + u₁₆ + L·u₃₂) P_ij |dõ_ie|
//   |ΔdK_je| ≤ scale · Σ_i (σ_ij + (L + 1)·u₃₂·|dS_ij|) |q̃_ie|
//   |ΔdQ_ie| ≤ scale · Σ_j (σ_ij + (S + 1)·u₃₂·|dS_ij|) |k̃_je|
// each times (1 + 2⁻⁷) for second-order terms, summed over the query heads of
// a GQA group for dK and dV. u₃₂ = 2⁻²⁴, u₁₆ = 2⁻⁸. Gradients of bfloat16
// tensors add their own rounding, u₁₆·(|reference| + bound). The u₁₆ of P̃
// and dŜ dominates.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bounded_errors.h"
#include "kernel_tables.h"
#include "qkv/attention.h"
#include "qkv/masks.h"
#include "test_util.h"

using namespace qkv;

namespace {

constexpr double kU32 = 0x1p-24;
constexpr double kU16 = 0x1p-8;

struct ErrorStats : qkv_test::BoundedErrors {
  double max_rel = 0.0;
  void print(const char* what) const {
    if (count == 0) return;
    std::printf(
        "[ bf16 bwd error ] %-34s max |err| %.3e, mean |err| %.3e over %lld gradients; "
        "max |err|/max|grad| %.3e; max err/bound %.3f\n",
        what, max_abs, count ? sum_abs / count : 0.0, static_cast<long long>(count), max_rel,
        worst_of_bound);
  }
};

std::vector<double> values(const Tensor& t) { return t.contiguous().to_vector(); }

class Bf16AttentionBackward : public qkv_test::ActiveKernelTableTest {
 protected:
  void SetUp() override {
    qkv_test::ActiveKernelTableTest::SetUp();
    kernels::override_bf16_backward(1);
  }
  void TearDown() override {
    float32_stats_.print("float32, precision=bf16");
    bf16_stats_.print("bfloat16 tensors");
    kernels::override_bf16_backward(-1);
    qkv_test::ActiveKernelTableTest::TearDown();
  }

  // q [B, H, L, E], k [B, Hkv, S, E], v [B, Hkv, S, Ev], dO [B, H, L, Ev].
  void check(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& grad_out,
             SdpaOptions options, const std::string& what, ErrorStats* stats) {
    options.backend = SdpaBackend::kFused;
    const bool bf16 = q.dtype() == DType::kBFloat16;
    if (!bf16) options.precision = Precision::kBFloat16;
    const SdpaResult fwd = scaled_dot_product_attention(q, k, v, options);
    const SdpaGradients got =
        scaled_dot_product_attention_backward(grad_out, q, k, v, fwd, options);
    ASSERT_EQ(got.query.dtype(), q.dtype()) << what;
    ASSERT_EQ(got.key.dtype(), q.dtype()) << what;

    auto rounded = [](const Tensor& t) { return t.to(DType::kBFloat16).to(DType::kFloat64); };
    const Tensor q64 = rounded(q), k64 = rounded(k), v64 = rounded(v), go64 = rounded(grad_out);
    SdpaOptions ref_options = options;
    ref_options.backend = SdpaBackend::kReference;
    ref_options.precision = Precision::kFloat32;
    ref_options.need_weights = true;
    if (ref_options.attn_mask.defined() && ref_options.attn_mask.dtype() != DType::kBool)
      ref_options.attn_mask = ref_options.attn_mask.to(DType::kFloat64);
    const SdpaResult ref = scaled_dot_product_attention(q64, k64, v64, ref_options);
    const SdpaGradients want =
        scaled_dot_product_attention_backward(go64, q64, k64, v64, ref, ref_options);

    const int64_t B = q.size(0), H = q.size(1), L = q.size(2), E = q.size(3);
    const int64_t Hkv = k.size(1), S = k.size(2), Ev = v.size(3), group = H / Hkv;
    const double scale = options.scale ? *options.scale : 1.0 / std::sqrt(double(E));
    const std::vector<double> qv = values(q64), kv = values(k64), vv = values(v64),
                              gov = values(go64), go_raw = values(grad_out.to(DType::kFloat64)),
                              w = values(ref.weights), o = values(ref.output),
                              o_hat = values(fwd.output.to(DType::kFloat64)),
                              lse = values(ref.logsumexp);
    const double delta = (E + 1) * kU32 * std::abs(scale) * qkv_test::max_row_norm(qv, E) *
                         qkv_test::max_row_norm(kv, E);
    std::vector<double> bq(qv.size(), 0.0), bk(kv.size(), 0.0), bv(vv.size(), 0.0);
    std::vector<double> dp(S), rho(S);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t hk = h / group;
        const int64_t qo = (b * H + h) * L, ko = (b * Hkv + hk) * S;
        for (int64_t i = 0; i < L; ++i) {
          const double* pi = &w[(qo + i) * S];
          const double* goi = &gov[(qo + i) * Ev];
          const double* gri = &go_raw[(qo + i) * Ev];
          double d = 0.0, d_err = 0.0;
          for (int64_t j = 0; j < S; ++j) {
            double sum = 0.0, abs_sum = 0.0;
            for (int64_t e = 0; e < Ev; ++e) {
              const double t = goi[e] * vv[(ko + j) * Ev + e];
              sum += t;
              abs_sum += std::abs(t);
            }
            dp[j] = sum;
            rho[j] = (Ev + 1) * kU32 * abs_sum;
            d += pi[j] * sum;
          }
          for (int64_t e = 0; e < Ev; ++e) {
            const double oh = o_hat[(qo + i) * Ev + e];
            d_err += std::abs(gri[e] - goi[e]) * std::abs(oh) +
                     std::abs(goi[e]) * std::abs(oh - o[(qo + i) * Ev + e]);
          }
          d_err += kU32 * std::abs(d);
          const double pi_err =
              std::isinf(lse[qo + i]) ? 0.0 : 3 * delta + 1e-5 * (1 + std::abs(lse[qo + i])) + 1e-6;
          for (int64_t j = 0; j < S; ++j) {
            const double p = pi[j];
            if (p == 0.0) continue;
            const double ds = p * (dp[j] - d);
            const double sigma = p * ((pi_err + kU16) * std::abs(dp[j] - d) + rho[j] + d_err);
            for (int64_t e = 0; e < Ev; ++e)
              bv[(ko + j) * Ev + e] += (pi_err + kU16 + L * kU32) * p * std::abs(goi[e]);
            const double tk = std::abs(scale) * (sigma + (L + 1) * kU32 * std::abs(ds));
            const double tq = std::abs(scale) * (sigma + (S + 1) * kU32 * std::abs(ds));
            for (int64_t e = 0; e < E; ++e) {
              bk[(ko + j) * E + e] += tk * std::abs(qv[(qo + i) * E + e]);
              bq[(qo + i) * E + e] += tq * std::abs(kv[(ko + j) * E + e]);
            }
          }
        }
      }
    compare(got.query, want.query, bq, bf16, what + " dQ", stats);
    compare(got.key, want.key, bk, bf16, what + " dK", stats);
    compare(got.value, want.value, bv, bf16, what + " dV", stats);
  }

  void compare(const Tensor& got, const Tensor& want, const std::vector<double>& bounds, bool bf16,
               const std::string& what, ErrorStats* stats) {
    const std::vector<double> g = values(got.to(DType::kFloat64)), r = values(want);
    ASSERT_EQ(g.size(), r.size()) << what;
    double largest = 0.0, worst = 0.0;
    int reported = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      double bound = bounds[i] * (1 + 0x1p-7);
      if (bf16) bound += kU16 * (std::abs(r[i]) + bound);
      const double err = std::abs(g[i] - r[i]);
      largest = std::max(largest, std::abs(r[i]));
      worst = std::max(worst, err);
      stats->add(err, bound);
      if (!(err <= bound) && reported++ < 3)
        ADD_FAILURE() << what << ": element " << i << " = " << g[i] << ", reference " << r[i]
                      << ", error " << err << " > bound " << bound;
    }
    if (largest > 0) stats->max_rel = std::max(stats->max_rel, worst / largest);
  }

  void check_both(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& grad_out,
                  const SdpaOptions& options, const std::string& what) {
    // Float32 problems of at most four queries keep float32 products in the
    // forward and the backward (decoding): given bfloat16-representable
    // values, they too must meet the bound.
    auto representable = [](const Tensor& t) { return t.to(DType::kBFloat16).to(DType::kFloat32); };
    if (q.size(-2) <= 4)
      check(representable(q), representable(k), representable(v), representable(grad_out), options,
            what + " [float32, precision bf16, representable]", &float32_stats_);
    else
      check(q, k, v, grad_out, options, what + " [float32, precision bf16]", &float32_stats_);
    const DType bf = DType::kBFloat16;
    check(q.to(bf), k.to(bf), v.to(bf), grad_out.to(bf), options, what + " [bfloat16]",
          &bf16_stats_);
  }

  ErrorStats float32_stats_, bf16_stats_;
};

TEST_P(Bf16AttentionBackward, AwkwardShapesCausalGqa) {
  Generator gen(51);
  const int64_t lengths[] = {1, 3, 17, 80, 129};
  const int64_t dims[] = {16, 32, 64, 80};
  const CausalMask causal[] = {CausalMask::kNone, CausalMask::kTopLeft, CausalMask::kBottomRight};
  int n = 0;
  for (int64_t L : lengths)
    for (int64_t S : lengths) {
      const int64_t E = dims[n % 4], Ev = n % 3 == 0 ? E : dims[(n + 1) % 4] + (n % 2);
      const int64_t H = n % 2 == 0 ? 4 : 2, Hkv = 2;
      const CausalMask c = causal[n % 3];
      ++n;
      const Tensor q = Tensor::randn({1, H, L, E}, gen), k = Tensor::randn({1, Hkv, S, E}, gen),
                   v = Tensor::randn({1, Hkv, S, Ev}, gen), go = Tensor::randn({1, H, L, Ev}, gen);
      check_both(q, k, v, go, {.causal = c, .enable_gqa = H != Hkv},
                 "L=" + std::to_string(L) + " S=" + std::to_string(S) + " E=" + std::to_string(E) +
                     " Ev=" + std::to_string(Ev) + " H=" + std::to_string(H) + " causal " +
                     std::to_string(int(c)));
    }
}

// Several key tiles and query tiles (96 × 192 without AMX, whose key tiles
// are 256), a bool mask with a fully masked row, and a scale.
TEST_P(Bf16AttentionBackward, LongerMaskedAndScaled) {
  Generator gen(52);
  const int64_t L = 200, S = 230, E = 64, Ev = 48;
  const Tensor q = Tensor::randn({2, 2, L, E}, gen), k = Tensor::randn({2, 1, S, E}, gen),
               v = Tensor::randn({2, 1, S, Ev}, gen), go = Tensor::randn({2, 2, L, Ev}, gen);
  check_both(q, k, v, go, {.causal = CausalMask::kBottomRight, .enable_gqa = true},
             "L=200 S=230 GQA causal");
  Tensor keep = Tensor::zeros({L, S}, DType::kBool);
  Generator coin(9);
  const Tensor u = Tensor::rand({L, S}, coin);
  for (int64_t i = 1; i < L; ++i)
    for (int64_t j = 0; j < S; ++j)
      if (u.at({i, j}) < 0.7) keep.set({i, j}, 1);
  SdpaOptions masked{.attn_mask = keep, .enable_gqa = true};
  masked.scale = 0.29;
  check_both(q, k, v, go, masked, "bool mask, scale 0.29");
  // The same as an additive mask that needs no gradient: bfloat16 products too.
  SdpaOptions additive = masked;
  additive.attn_mask = keep_mask_to_additive(keep);
  additive.attn_mask_requires_grad = false;
  check(q, k, v, go, additive, "additive mask, no gradient [float32, precision bf16]",
        &float32_stats_);
}

// Operands that are views: Q and dO rows strided ([B, L, H, E] memory read
// as [B, H, L, E]), K and V strided along the head dimension.
TEST_P(Bf16AttentionBackward, StridedOperands) {
  Generator gen(54);
  const Tensor x = Tensor::randn({2, 70, 3, 48}, gen), g = Tensor::randn({2, 70, 3, 40}, gen);
  const Tensor kt = Tensor::randn({2, 3, 48, 90}, gen), vt = Tensor::randn({2, 3, 40, 90}, gen);
  check_both(x.transpose(1, 2), kt.transpose(2, 3), vt.transpose(2, 3), g.transpose(1, 2),
             {.causal = CausalMask::kBottomRight}, "strided q, dO; k, v along E");
}

// The variants beyond torch's (a sliding window, soft-capping, ALiBi) alone
// and together, with a padding mask, odd head sizes (24, 80) and lengths
// that leave partial tiles, chunks and halves of every product's blocks.
TEST_P(Bf16AttentionBackward, WindowSoftcapAlibi) {
  Generator gen(55);
  struct Case {
    int64_t B, H, Hkv, L, S, E, Ev;
    CausalMask causal;
    int64_t left, right;
    double softcap;
    bool alibi, padding;
  };
  const Case cases[] = {
      {2, 2, 2, 97, 131, 24, 80, CausalMask::kNone, 20, 7, 0.0, false, false},
      {1, 4, 2, 150, 150, 80, 24, CausalMask::kTopLeft, 33, -1, 0.0, true, false},
      {2, 3, 3, 70, 190, 32, 40, CausalMask::kNone, 50, -1, 2.5, false, true},
      {2, 3, 3, 70, 190, 32, 40, CausalMask::kBottomRight, -1, -1, 2.5, false, false},
      {1, 2, 1, 129, 67, 64, 64, CausalMask::kNone, 40, 40, 5.0, true, true},
      {3, 2, 2, 2, 45, 24, 24, CausalMask::kNone, -1, -1, 3.0, true, false},
      {1, 2, 2, 3, 3, 16, 48, CausalMask::kTopLeft, -1, -1, 0.0, false, false},
      // Several long key tiles (the amx backward's 256) and a short last one.
      {2, 2, 1, 130, 600, 64, 32, CausalMask::kBottomRight, 300, -1, 0.0, false, false},
  };
  for (const Case& c : cases) {
    const Tensor q = Tensor::randn({c.B, c.H, c.L, c.E}, gen),
                 k = Tensor::randn({c.B, c.Hkv, c.S, c.E}, gen),
                 v = Tensor::randn({c.B, c.Hkv, c.S, c.Ev}, gen),
                 go = Tensor::randn({c.B, c.H, c.L, c.Ev}, gen);
    SdpaOptions o{.causal = c.causal, .enable_gqa = c.H != c.Hkv};
    o.window_left = c.left;
    o.window_right = c.right;
    o.softcap = c.softcap;
    if (c.alibi)
      for (int64_t h = 0; h < c.H; ++h) o.alibi_slopes.push_back(0.5 / double(h + 1));
    if (c.padding) {
      // Key padding [B, 1, 1, S]: batch 0 keeps every key, the others drop
      // the last third.
      Tensor keep = Tensor::zeros({c.B, 1, 1, c.S}, DType::kBool);
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t j = 0; j < c.S; ++j)
          if (b == 0 || j < 2 * c.S / 3) keep.set({b, 0, 0, j}, 1);
      o.attn_mask = keep;
    }
    check_both(q, k, v, go, o,
               "B=" + std::to_string(c.B) + " H=" + std::to_string(c.H) + " L=" +
                   std::to_string(c.L) + " S=" + std::to_string(c.S) + " E=" + std::to_string(c.E) +
                   " Ev=" + std::to_string(c.Ev) + " window " + std::to_string(c.left) + "," +
                   std::to_string(c.right) + " softcap " + std::to_string(c.softcap) +
                   (c.alibi ? " alibi" : "") + (c.padding ? " padding" : ""));
  }
}

// The route is the bfloat16-product kernel: it differs from the float32
// backward on the same (bfloat16-representable) values, and is what runs
// by default.
TEST_P(Bf16AttentionBackward, RunsTheBf16Kernel) {
  Generator gen(53);
  auto representable = [](const Tensor& t) { return t.to(DType::kBFloat16).to(DType::kFloat32); };
  const Tensor q = representable(Tensor::randn({1, 2, 40, 32}, gen)),
               k = representable(Tensor::randn({1, 2, 50, 32}, gen)),
               v = representable(Tensor::randn({1, 2, 50, 32}, gen)),
               go = representable(Tensor::randn({1, 2, 40, 32}, gen));
  const SdpaOptions o{.precision = Precision::kBFloat16};
  const SdpaResult fwd = scaled_dot_product_attention(q, k, v, o);
  const SdpaGradients bf = scaled_dot_product_attention_backward(go, q, k, v, fwd, o);
  kernels::override_bf16_backward(0);
  const SdpaGradients wide = scaled_dot_product_attention_backward(go, q, k, v, fwd, o);
  kernels::override_bf16_backward(-1);
  const SdpaGradients by_default = scaled_dot_product_attention_backward(go, q, k, v, fwd, o);
  kernels::override_bf16_backward(1);
  EXPECT_NE(bf.key.to_vector(), wide.key.to_vector());
  EXPECT_EQ(bf.key.to_vector(), by_default.key.to_vector());
}

QKV_INSTANTIATE_FOR_EVERY_KERNEL_TABLE(Bf16AttentionBackward);

}  // namespace
