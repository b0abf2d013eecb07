// The fused forward with bfloat16 products (bfloat16 tensors, and float32
// tensors with SdpaOptions::precision = kBFloat16) on every kernel table,
// against the float64 reference computed on the bfloat16-rounded q, k, v.
//
// The bound, per output element (query i, column e). Let q̃, k̃, ṽ be the
// rounded inputs, s_j = scale·q̃·k̃_j, w = softmax(s) and o = Σ_j w_j ṽ_j the
// reference (float64, exact for this purpose). The kernel computes
//   ŝ_j = s_j + Δ_j      products of bfloat16 values are exact in float32;
//                        the E-term float32 sum and the scale multiply give
//                        |Δ_j| ≤ δ = (E + 1)·u₃₂ · scale·‖q̃_i‖·max_j ‖k̃_j‖
//   p_j = exp(ŝ_j − m)   vector exp, relative error ε ≤ 5.4e-6 < 2⁻¹⁷ (the
//                        bf16 path's degree-4 exp; it enters p_j and l)
//   l   = Σ_j p_j        float32, relative error ≤ S·u₃₂
//   p̃_j = bf16(p_j)      relative error ≤ u₁₆ = 2⁻⁸ (8-bit significand, RNE)
//   ô   = Σ_j p̃_j ṽ_j / l   float32 sums, relative to Σ p̃|ṽ|: ≤ S·u₃₂
// so the weights the kernel applies are w_j(1 + η_j) with
//   |η_j| ≤ 2⁻⁸ + 2δ + 2ε + S·u₃₂ (to first order), and
//   |ô_e − o_e| ≤ Σ_j |η_j| w_j |ṽ_je| + S·u₃₂·Σ_j w_j |ṽ_je|
//             ≤ (2⁻⁸ + 2δ + 2⁻¹⁶ + 2·S·u₃₂) · A_e,     A_e = Σ_j w_j |ṽ_je|,
// times (1 + 2⁻⁷) for the second-order terms. u₃₂ = 2⁻²⁴. A_e is the reference
// attention applied to |ṽ|. A bfloat16 output adds its own rounding,
// 2⁻⁸·(|o_e| + bound). The 2⁻⁸ of P dominates: δ is ~1e-5 for these inputs.
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

// Errors against the float64 reference, summed over a test's calls.
struct ErrorStats : qkv_test::BoundedErrors {
  void print(const char* what) const {
    std::printf(
        "[ bf16 error ] %-44s max |err| %.3e, mean |err| %.3e over %lld outputs; "
        "max err/bound %.3f\n",
        what, max_abs, count ? sum_abs / count : 0.0, static_cast<long long>(count),
        worst_of_bound);
  }
};

class Bf16Attention : public qkv_test::ActiveKernelTableTest {
 protected:
  // Runs the fused kernel on q, k, v (float32 with bf16 products, or
  // bfloat16) and holds it to the bound above against the float64 reference
  // on the rounded values.
  void check(const Tensor& q, const Tensor& k, const Tensor& v, SdpaOptions options,
             const std::string& what, ErrorStats* stats) {
    options.backend = SdpaBackend::kFused;
    const bool bf16_out = q.dtype() == DType::kBFloat16;
    if (!bf16_out) options.precision = Precision::kBFloat16;
    const SdpaResult got = scaled_dot_product_attention(q, k, v, options);
    EXPECT_EQ(got.kernel, std::string("fused-") + GetParam()->name) << what;
    ASSERT_EQ(got.output.dtype(), q.dtype()) << what;

    auto rounded = [](const Tensor& t) { return t.to(DType::kBFloat16).to(DType::kFloat64); };
    const Tensor q64 = rounded(q), k64 = rounded(k), v64 = rounded(v);
    SdpaOptions ref_options = options;
    ref_options.backend = SdpaBackend::kReference;
    ref_options.precision = Precision::kFloat32;
    const SdpaResult ref = scaled_dot_product_attention(q64, k64, v64, ref_options);
    std::vector<double> abs_v = v64.contiguous().to_vector();
    for (double& x : abs_v) x = std::abs(x);
    const Tensor weighted_abs =
        scaled_dot_product_attention(q64, k64, Tensor::from_vector(v64.shape(), abs_v), ref_options)
            .output;

    const int64_t E = q.size(-1), S = k.size(-2);
    const double scale = options.scale ? *options.scale : 1.0 / std::sqrt(double(E));
    const double delta = (E + 1) * kU32 * std::abs(scale) *
                         qkv_test::max_row_norm(q64.contiguous().to_vector(), E) *
                         qkv_test::max_row_norm(k64.contiguous().to_vector(), E);
    const double factor = (kU16 + 2 * delta + 0x1p-16 + 2.0 * S * kU32) * (1 + 0x1p-7);

    const std::vector<double> o = got.output.to_vector(), r = ref.output.to_vector(),
                              a = weighted_abs.to_vector();
    ASSERT_EQ(o.size(), r.size());
    int reported = 0;
    for (size_t i = 0; i < o.size(); ++i) {
      double bound = factor * a[i];
      if (bf16_out) bound += kU16 * (std::abs(r[i]) + bound);
      const double err = std::abs(o[i] - r[i]);
      stats->add(err, bound);
      if (!(err <= bound) && reported++ < 3)
        ADD_FAILURE() << what << ": output " << i << " = " << o[i] << ", reference " << r[i]
                      << ", error " << err << " > bound " << bound;
    }
    // The log-sum-exp sees only the score error δ, the exp's ε (< 1e-5) and
    // float32 rounding.
    const std::vector<double> lg = got.logsumexp.to_vector(), lr = ref.logsumexp.to_vector();
    for (size_t i = 0; i < lg.size(); ++i) {
      if (std::isinf(lr[i])) {
        EXPECT_EQ(lg[i], lr[i]) << what;
      } else {
        EXPECT_NEAR(lg[i], lr[i], 2 * delta + 1e-5 * (1 + std::abs(lr[i]))) << what;
      }
    }
  }

  // Both modes on the same values: float32 tensors with bf16 products, and
  // the same values as bfloat16 tensors.
  void check_both(const Tensor& q, const Tensor& k, const Tensor& v, const SdpaOptions& options,
                  const std::string& what) {
    // Problems of at most four float32 queries keep float32 products
    // (decoding): given bfloat16-representable values, they too must meet
    // the bound.
    auto representable = [](const Tensor& t) { return t.to(DType::kBFloat16).to(DType::kFloat32); };
    if (q.size(-2) <= 4)
      check(representable(q), representable(k), representable(v), options,
            what + " [float32, precision bf16, representable]", &float32_stats_);
    else
      check(q, k, v, options, what + " [float32, precision bf16]", &float32_stats_);
    check(q.to(DType::kBFloat16), k.to(DType::kBFloat16), v.to(DType::kBFloat16), options,
          what + " [bfloat16 tensors]", &bf16_stats_);
  }

  void TearDown() override {
    float32_stats_.print("float32 inputs, precision=bf16, vs float64");
    bf16_stats_.print("bfloat16 tensors (bf16 output), vs float64");
    qkv_test::ActiveKernelTableTest::TearDown();
  }

  ErrorStats float32_stats_, bf16_stats_;
};

TEST_P(Bf16Attention, AwkwardLengthsAndHeadDims) {
  Generator gen(41);
  const int64_t lengths[] = {1, 3, 17, 80, 129, 300};
  const int64_t dims[] = {16, 32, 64, 80, 128};
  int n = 0;
  for (int64_t L : lengths)
    for (int64_t S : lengths) {
      const int64_t E = dims[n % 5], Ev = n % 3 == 0 ? E : dims[(n + 2) % 5] + (n % 2);
      ++n;
      const Tensor q = Tensor::randn({2, L, E}, gen), k = Tensor::randn({2, S, E}, gen),
                   v = Tensor::randn({2, S, Ev}, gen);
      check_both(q, k, v, {},
                 "L=" + std::to_string(L) + " S=" + std::to_string(S) + " E=" + std::to_string(E) +
                     " Ev=" + std::to_string(Ev));
    }
}

TEST_P(Bf16Attention, CausalMaskGqaAndScale) {
  Generator gen(42);
  // 300 queries or 300 keys span several tiles (both at once adds only time).
  // Head dim 32 is a whole number of vectors, 80 is not: the sanitizers run
  // the one with a tail.
  // Under the sanitizers one batch and no 129 × 129 (the float64 reference
  // is most of the time there; every tile edge is still crossed).
  const std::vector<int64_t> head_dims =
      qkv_test::kSanitized ? std::vector<int64_t>{80} : std::vector<int64_t>{32, 80};
  const int64_t B = qkv_test::kSanitized ? 1 : 2;
  std::vector<std::pair<int64_t, int64_t>> lengths = {{17, 17}, {80, 300}, {300, 80}, {3, 129}};
  if (!qkv_test::kSanitized) lengths.emplace_back(129, 129);
  for (auto [L, S] : lengths) {
    for (int64_t E : head_dims) {
      const Tensor q = Tensor::randn({B, 4, L, E}, gen);
      const Tensor k = Tensor::randn({B, 2, S, E}, gen);
      const Tensor v = Tensor::randn({B, 2, S, 48}, gen);
      const std::string at =
          " L=" + std::to_string(L) + " S=" + std::to_string(S) + " E=" + std::to_string(E);
      for (CausalMask c : {CausalMask::kNone, CausalMask::kTopLeft, CausalMask::kBottomRight})
        check_both(q, k, v, {.causal = c, .enable_gqa = true},
                   "GQA causal " + std::to_string(int(c)) + at);
      SdpaOptions padded{.enable_gqa = true};
      padded.attn_mask = key_mask_for_heads(
          keep_mask_from_lengths(B == 2 ? std::vector<int64_t>{S, std::max<int64_t>(1, S / 3)}
                                        : std::vector<int64_t>{std::max<int64_t>(1, S / 3)},
                                 S));
      check_both(q, k, v, padded, "GQA key padding" + at);
      Tensor keep = Tensor::zeros({L, S}, DType::kBool);
      Generator coin(7);
      const Tensor u = Tensor::rand({L, S}, coin);
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < S; ++j)
          if (u.at({i, j}) < 0.7 && i != 0) keep.set({i, j}, 1);  // row 0 fully masked
      SdpaOptions masked{.attn_mask = keep, .enable_gqa = true};
      masked.scale = 0.29;
      check_both(q, k, v, masked, "GQA bool mask, scale 0.29" + at);
    }
  }
}

// Operands that are views: rows strided ([B, L, H, E] memory read as
// [B, H, L, E]) and K, V strided along the head dimension (no in-place reads).
TEST_P(Bf16Attention, StridedOperands) {
  Generator gen(45);
  const Tensor x = Tensor::randn({2, 70, 3, 48}, gen);
  const Tensor kt = Tensor::randn({2, 3, 48, 90}, gen), vt = Tensor::randn({2, 3, 40, 90}, gen);
  check_both(x.transpose(1, 2), kt.transpose(2, 3), vt.transpose(2, 3),
             {.causal = CausalMask::kBottomRight}, "strided q, k and v along E");
  check_both(x.transpose(1, 2), x.transpose(1, 2), x.transpose(1, 2), {}, "transposed views");
}

// The rounding is round-to-nearest-even of each input, inside the kernel:
// float32 inputs give the same output as their bfloat16-rounded values, bit
// for bit; bfloat16 tensors give that output rounded to bfloat16. (Problems
// of at most four float32 queries keep float32 products: L > 4 here.)
TEST_P(Bf16Attention, RoundsInputsToNearestEven) {
  Generator gen(43);
  for (auto [L, S, E, Ev] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{129, 300, 64, 64},
                             {17, 80, 80, 16},
                             {80, 129, 33, 19}}) {
    const Tensor q = Tensor::randn({3, L, E}, gen), k = Tensor::randn({3, S, E}, gen),
                 v = Tensor::randn({3, S, Ev}, gen);
    auto round = [](const Tensor& t) { return t.to(DType::kBFloat16).to(DType::kFloat32); };
    const SdpaOptions o{.causal = CausalMask::kBottomRight, .precision = Precision::kBFloat16};
    const SdpaResult from_f32 = scaled_dot_product_attention(q, k, v, o);
    const SdpaResult from_rounded = scaled_dot_product_attention(round(q), round(k), round(v), o);
    const SdpaResult from_bf16 = scaled_dot_product_attention(
        q.to(DType::kBFloat16), k.to(DType::kBFloat16), v.to(DType::kBFloat16), o);
    const std::string at = "L=" + std::to_string(L) + " E=" + std::to_string(E);
    EXPECT_EQ(from_f32.output.to_vector(), from_rounded.output.to_vector()) << at;
    EXPECT_EQ(from_bf16.output.to_vector(), from_rounded.output.to(DType::kBFloat16).to_vector())
        << at;
    EXPECT_EQ(from_bf16.logsumexp.to_vector(), from_rounded.logsumexp.to_vector()) << at;
    // and it is not the float32 kernel
    const SdpaResult exact = scaled_dot_product_attention(round(q), round(k), round(v),
                                                          {.causal = CausalMask::kBottomRight});
    EXPECT_NE(exact.output.to_vector(), from_rounded.output.to_vector()) << at;
  }
}

// Weights asked for with bf16 products come from the same scores as the
// output; the scaled_dot_product_attention_into path honours the precision.
TEST_P(Bf16Attention, WeightsAndIntoFollowThePrecision) {
  Generator gen(44);
  const Tensor q = Tensor::randn({2, 3, 40, 64}, gen), k = Tensor::randn({2, 3, 90, 64}, gen),
               v = Tensor::randn({2, 3, 90, 64}, gen);
  SdpaOptions o{.causal = CausalMask::kTopLeft, .precision = Precision::kBFloat16};
  const SdpaResult plain = scaled_dot_product_attention(q, k, v, o);
  o.need_weights = true;
  const SdpaResult with_weights = scaled_dot_product_attention(q, k, v, o);
  EXPECT_EQ(plain.output.to_vector(), with_weights.output.to_vector());
  // Rows of weights sum to 1 up to float32 rounding (they come from the lse).
  const std::vector<double> w = with_weights.weights.to_vector();
  for (size_t row = 0; row < w.size() / 90; ++row) {
    double sum = 0.0;
    for (size_t j = 0; j < 90; ++j) sum += w[row * 90 + j];
    ASSERT_NEAR(sum, 1.0, 1e-5) << row;
  }
  o.need_weights = false;
  SdpaWorkspace workspace;
  Tensor out = Tensor::empty({2, 3, 40, 64});
  scaled_dot_product_attention_into(out, q, k, v, o, workspace);
  EXPECT_EQ(out.to_vector(), plain.output.to_vector());
  // Precision kInt8 means bfloat16 attention.
  o.precision = Precision::kInt8;
  EXPECT_EQ(scaled_dot_product_attention(q, k, v, o).output.to_vector(), plain.output.to_vector());
}

QKV_INSTANTIATE_FOR_EVERY_KERNEL_TABLE(Bf16Attention);

}  // namespace
