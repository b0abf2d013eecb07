// Gradients of scaled_dot_product_attention: the float64 reference against
// finite differences, then the fused kernels of every ISA against the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "kernel_tables.h"
#include "qkv/attention.h"
#include "qkv/masks.h"
#include "tensor_comparison.h"
#include "test_util.h"

using namespace qkv;
using qkv::testing::relative_error;

namespace {

// loss = Σ output ∘ weight, so ∂loss/∂output = weight.
double loss(const Tensor& q, const Tensor& k, const Tensor& v, const SdpaOptions& o,
            const Tensor& weight) {
  SdpaOptions forward = o;
  Generator gen(77);
  forward.generator = &gen;
  const std::vector<double> out = scaled_dot_product_attention(q, k, v, forward).output.to_vector();
  const std::vector<double> w = weight.to_vector();
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += out[i] * w[i];
  return s;
}

// Central differences of `loss` with respect to every element of `x`.
Tensor numeric_gradient(Tensor x, const std::function<double()>& f) {
  Tensor grad = Tensor::zeros(x.shape(), DType::kFloat64);
  Tensor flat = x.view({-1}), gflat = grad.view({-1});
  const double h = 1e-6;
  for (int64_t i = 0; i < flat.numel(); ++i) {
    const double old = flat.at({i});
    flat.set({i}, old + h);
    const double up = f();
    flat.set({i}, old - h);
    const double down = f();
    flat.set({i}, old);
    gflat.set({i}, (up - down) / (2 * h));
  }
  return grad;
}

SdpaGradients analytic(const Tensor& q, const Tensor& k, const Tensor& v, SdpaOptions o,
                       const Tensor& grad_out) {
  Generator gen(77);
  o.generator = &gen;
  SdpaResult fwd = scaled_dot_product_attention(q, k, v, o);
  return scaled_dot_product_attention_backward(grad_out, q, k, v, fwd, o);
}

}  // namespace

TEST(SdpaBackwardReference, MatchesFiniteDifferences) {
  Generator gen(31);
  struct Case {
    Shape q, k, v;
    bool gqa;
    CausalMask causal;
    bool float_mask;
    double dropout;
  };
  const Case cases[] = {
      {{2, 3, 4}, {2, 5, 4}, {2, 5, 3}, false, CausalMask::kNone, false, 0.0},
      {{1, 4, 3, 5}, {1, 2, 6, 5}, {1, 2, 6, 2}, true, CausalMask::kTopLeft, false, 0.0},
      {{2, 5, 3}, {2, 4, 3}, {2, 4, 3}, false, CausalMask::kBottomRight, false, 0.0},
      {{2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 5, 4}, false, CausalMask::kNone, true, 0.0},
      {{1, 2, 4, 4}, {1, 2, 4, 4}, {1, 2, 4, 4}, false, CausalMask::kNone, false, 0.4},
      {{3, 2, 4, 3},
       {1, 2, 5, 3},
       {1, 2, 5, 3},
       false,
       CausalMask::kNone,
       false,
       0.0},  // broadcast
  };
  for (const Case& c : cases) {
    Tensor q = Tensor::randn(c.q, gen, DType::kFloat64);
    Tensor k = Tensor::randn(c.k, gen, DType::kFloat64);
    Tensor v = Tensor::randn(c.v, gen, DType::kFloat64);
    SdpaOptions o;
    o.enable_gqa = c.gqa;
    o.causal = c.causal;
    o.dropout_p = c.dropout;
    Tensor mask;
    if (c.float_mask) {
      mask = Tensor::randn({c.q[c.q.size() - 2], c.k[c.k.size() - 2]}, gen, DType::kFloat64);
      o.attn_mask = mask;
    }
    Shape out_shape = scaled_dot_product_attention(q, k, v, o).output.shape();
    Tensor weight = Tensor::randn(out_shape, gen, DType::kFloat64);
    SdpaGradients g = analytic(q, k, v, o, weight);
    auto f = [&] { return loss(q, k, v, o, weight); };
    EXPECT_LT(max_abs_diff(g.query, numeric_gradient(q, f)), 1e-7);
    EXPECT_LT(max_abs_diff(g.key, numeric_gradient(k, f)), 1e-7);
    EXPECT_LT(max_abs_diff(g.value, numeric_gradient(v, f)), 1e-7);
    if (c.float_mask) {
      EXPECT_EQ(g.attn_mask.shape(), mask.shape());
      EXPECT_LT(max_abs_diff(g.attn_mask, numeric_gradient(mask, f)), 1e-7);
    }
  }
}

class FusedBackward : public qkv_test::ActiveKernelTableTest {
 protected:
  void compare(const Tensor& q, const Tensor& k, const Tensor& v, SdpaOptions o,
               const std::string& what) {
    Generator gen(5);
    Tensor grad_out;
    {
      SdpaOptions probe = o;
      probe.dropout_p = 0;
      grad_out = Tensor::randn(scaled_dot_product_attention(q, k, v, probe).output.shape(), gen);
    }
    o.backend = SdpaBackend::kFused;
    SdpaGradients fused = analytic(q, k, v, o, grad_out);
    SdpaOptions r = o;
    r.backend = SdpaBackend::kReference;
    if (r.attn_mask.defined() && r.attn_mask.dtype() != DType::kBool)
      r.attn_mask = r.attn_mask.to(DType::kFloat64);
    SdpaGradients ref = analytic(q.to(DType::kFloat64), k.to(DType::kFloat64),
                                 v.to(DType::kFloat64), r, grad_out.to(DType::kFloat64));
    EXPECT_LE(relative_error(fused.query, ref.query), 1e-5) << what << " dq";
    EXPECT_LE(relative_error(fused.key, ref.key), 1e-5) << what << " dk";
    EXPECT_LE(relative_error(fused.value, ref.value), 1e-5) << what << " dv";
    EXPECT_EQ(fused.attn_mask.defined(), o.attn_mask.defined() &&
                                             o.attn_mask.dtype() != DType::kBool &&
                                             o.attn_mask_requires_grad)
        << what;
    if (ref.attn_mask.defined()) {
      EXPECT_LE(relative_error(fused.attn_mask, ref.attn_mask), 1e-5) << what << " dmask";
      // (relative_error passes NaN where both have it: a mask's gradient has none)
      for (double g : fused.attn_mask.to_vector()) ASSERT_TRUE(std::isfinite(g)) << what;
    }
  }
};

TEST_P(FusedBackward, ShapesMasksCausalGqaDropout) {
  Generator gen(41);
  for (auto [L, S] : {std::pair<int64_t, int64_t>{1, 1}, {17, 3}, {80, 193}, {200, 97}, {3, 400}}) {
    const std::string at = " L=" + std::to_string(L) + " S=" + std::to_string(S);
    Tensor q = Tensor::randn({2, 4, L, 17}, gen);
    Tensor k = Tensor::randn({2, 2, S, 17}, gen);
    Tensor v = Tensor::randn({2, 2, S, 9}, gen);
    for (CausalMask c : {CausalMask::kNone, CausalMask::kTopLeft, CausalMask::kBottomRight}) {
      SdpaOptions o;
      o.enable_gqa = true;
      o.causal = c;
      compare(q, k, v, o, "causal " + std::to_string(int(c)) + at);
    }
    SdpaOptions masked;
    masked.enable_gqa = true;
    masked.attn_mask = Tensor::randn({4, L, S}, gen);
    compare(q, k, v, masked, "float mask" + at);
    masked.attn_mask_requires_grad = false;  // a constant mask: no score gradients
    compare(q, k, v, masked, "float mask, no gradient of its own" + at);
    SdpaOptions padded;
    padded.enable_gqa = true;
    padded.attn_mask = key_mask_for_heads(keep_mask_from_lengths({S, (S + 1) / 2}, S));
    compare(q, k, v, padded, "padding" + at);
    // Key padding on both ends (whole key tiles skipped), one batch entry without keys.
    Tensor both_ends = Tensor::zeros({2, 1, 1, S}, DType::kBool);
    for (int64_t j = 5; j < S / 3; ++j) both_ends.set({0, 0, 0, j}, 1);
    padded.attn_mask = both_ends;
    compare(q, k, v, padded, "key padding on both ends" + at);
    // As an additive float mask (its gradient is 0 on the skipped keys).
    padded.attn_mask = keep_mask_to_additive(both_ends);
    compare(q, k, v, padded, "additive key padding on both ends" + at);
    // Holes among the kept keys: the same for every query, not a padded end.
    Tensor holes = Tensor::ones({2, 1, 1, S}, DType::kBool);
    for (int64_t j = 1; j < S; j += 3) holes.set({1, 0, 0, j}, 0);
    padded.attn_mask = holes;
    compare(q, k, v, padded, "key mask with holes" + at);
    padded.attn_mask = keep_mask_to_additive(holes);
    compare(q, k, v, padded, "additive key mask with holes" + at);
    SdpaOptions dropout;
    dropout.enable_gqa = true;
    dropout.dropout_p = 0.2;
    compare(q, k, v, dropout, "dropout" + at);
    SdpaOptions variants;
    variants.enable_gqa = true;
    variants.causal = CausalMask::kBottomRight;
    variants.window_left = 30;
    variants.alibi_slopes = {0.5, 0.25, 0.125, 0.0625};
    variants.softcap = 1.5;
    compare(q, k, v, variants, "window+alibi+softcap" + at);
  }
}

TEST_P(FusedBackward, OneHeadLongSequenceUsesBothPartitions) {
  Generator gen(42);
  // B·H = 1: the key tiles of one problem are spread over threads (300
  // under the sanitizers: still two key tiles of 192).
  const int64_t L = qkv_test::kSanitized ? 300 : 500;
  Tensor q = Tensor::randn({1, 1, L, 64}, gen), k = Tensor::randn({1, 1, L, 64}, gen);
  Tensor v = Tensor::randn({1, 1, L, 64}, gen);
  compare(q, k, v, {}, "B*H = 1");
  SdpaOptions causal;
  causal.causal = CausalMask::kTopLeft;
  compare(q, k, v, causal, "B*H = 1 causal");
  // Diagonal tiles trimmed to what each panel of queries sees, with dropout
  // and with a window on both sides.
  causal.dropout_p = 0.25;
  compare(q, k, v, causal, "B*H = 1 causal dropout");
  SdpaOptions window;
  window.window_left = 40;
  window.window_right = 70;
  compare(q, k, v, window, "B*H = 1 window");
  // Many heads: whole groups per thread.
  Tensor q2 = Tensor::randn({4, 8, 40, 32}, gen), k2 = Tensor::randn({4, 8, 60, 32}, gen);
  Tensor v2 = Tensor::randn({4, 8, 60, 32}, gen);
  compare(q2, k2, v2, {}, "B*H = 32");
  // Broadcast K/V over the batch: groups span batches.
  compare(q2, k2.slice(0, 0, 1), v2.slice(0, 0, 1), {}, "broadcast K/V");
}

// Heads of whole 64-float panels take the wide dK/dV products (AVX-512: 6 keys
// × 64 columns a step), dO and Q read in place; a Q strided along E is packed.
TEST_P(FusedBackward, WideHeadsWithGqaPaddingAndCausalMasks) {
  Generator gen(43);
  for (auto [E, Ev] : {std::pair<int64_t, int64_t>{64, 128}, {128, 64}}) {
    const std::string at = " E=" + std::to_string(E) + " Ev=" + std::to_string(Ev);
    // (One batch under the sanitizers: the float64 reference is most of the time.)
    // 200 keys: two key tiles of 192, the second of 8.
    const int64_t B = qkv_test::kSanitized ? 1 : 2;
    Tensor q = Tensor::randn({B, 4, 150, E}, gen), k = Tensor::randn({B, 2, 200, E}, gen);
    Tensor v = Tensor::randn({B, 2, 200, Ev}, gen);
    compare(q, k, v, {.enable_gqa = true}, "gqa" + at);
    compare(q, k, v, {.causal = CausalMask::kBottomRight, .enable_gqa = true}, "causal" + at);
    Tensor keep = Tensor::zeros({B, 1, 1, 200}, DType::kBool);
    for (int64_t j = 7; j < 120; ++j) keep.set({0, 0, 0, j}, 1);
    compare(q, k, v, {.attn_mask = keep, .dropout_p = 0.2, .enable_gqa = true},
            "key padding, dropout" + at);
  }
  // Q with E strided (its columns not contiguous): packed, not read in place.
  Tensor qt = Tensor::randn({1, 3, 64, 140}, gen).transpose(2, 3);
  Tensor k = Tensor::randn({1, 3, 100, 64}, gen), v = Tensor::randn({1, 3, 100, 64}, gen);
  compare(qt, k, v, {}, "strided Q");
}

QKV_INSTANTIATE_FOR_EVERY_KERNEL_TABLE(FusedBackward);
