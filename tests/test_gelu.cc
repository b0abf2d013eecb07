// The float32 activations (the kernels' vector erf and exp, per ISA in
// src/kernels/simd/activation_rows.h) against their formulas evaluated in
// float64 with the C library, over a dense grid of float32 inputs and at the
// extremes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <span>
#include <vector>

#include "qkv/functional.h"
#include "qkv/gradients.h"

namespace qkv {
namespace {

double gelu_f64(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double gelu_tanh_f64(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double silu_f64(double x) { return x / (1.0 + std::exp(-x)); }

// Every 2^-12 on [-16, 16] (131,073 points, covering erf's and exp's
// saturation), then larger magnitudes up to float32's largest, and specials.
std::vector<double> grid() {
  std::vector<double> xs;
  for (int i = -16 * 4096; i <= 16 * 4096; ++i) xs.push_back(i / 4096.0);
  for (double m = 16.0; m < 3e38; m *= 1.37) {
    xs.push_back(m);
    xs.push_back(-m);
  }
  const double big = std::numeric_limits<float>::max(), tiny = std::numeric_limits<float>::min();
  for (double v : {big, -big, tiny, -tiny, 1e-30, -1e-30, 1e-8, -1e-8}) xs.push_back(v);
  return xs;
}

// |got - want| <= tol (|x| + 1) at every point; returns the worst ratio to the
// bound so that the figure can be printed.
template <class Want>
double check_float32(Tensor (*fn)(const Tensor&), Want want, double tol, const char* name) {
  const std::vector<double> xs = grid();
  const Tensor x =
      Tensor::from_vector({static_cast<int64_t>(xs.size())}, std::span(xs)).to(DType::kFloat32);
  const std::vector<double> xf = x.to_vector(), got = fn(x).to_vector();
  double worst = 0.0;
  for (size_t i = 0; i < xf.size(); ++i) {
    const double w = want(xf[i]), bound = tol * (std::abs(xf[i]) + 1.0);
    EXPECT_NEAR(got[i], w, bound) << name << "(" << xf[i] << ")";
    worst = std::max(worst, std::abs(got[i] - w) / bound);
  }
  std::printf("%s float32: max |error| / (%.0e (|x| + 1)) = %.3f over %zu points\n", name, tol,
              worst, xf.size());
  return worst;
}

TEST(Gelu, Float32ErfFormMatchesFloat64Erf) {
  check_float32([](const Tensor& x) { return gelu(x); }, gelu_f64, 2e-7, "gelu");
}

TEST(Gelu, Float32TanhFormMatchesFloat64Tanh) {
  check_float32([](const Tensor& x) { return gelu(x, GeluApproximation::kTanh); }, gelu_tanh_f64,
                2e-7, "gelu_tanh");
}

TEST(Silu, Float32MatchesFloat64Exp) {
  check_float32([](const Tensor& x) { return silu(x); }, silu_f64, 2e-7, "silu");
}

TEST(Gelu, Float32SpecialValuesAndTheInPlaceForm) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  const std::vector<double> xs = {inf, -inf, nan, 0.0, -0.0};
  Tensor x = Tensor::from_vector({5}, std::span(xs)).to(DType::kFloat32);
  for (GeluApproximation a : {GeluApproximation::kNone, GeluApproximation::kTanh}) {
    const std::vector<double> y = gelu(x, a).to_vector();
    EXPECT_EQ(y[0], inf);
    EXPECT_TRUE(std::isnan(y[2]));
    EXPECT_EQ(y[3], 0.0);
    EXPECT_EQ(y[4], 0.0);
  }
  EXPECT_TRUE(std::isnan(silu(x).to_vector()[2]));
  // A large tensor (run on several threads) in place equals the out-of-place result.
  std::vector<double> values(257 * 1031);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 8.0 * std::sin(0.37 * i);
  const Tensor big = Tensor::from_vector({257, 1031}, std::span(values)).to(DType::kFloat32);
  Tensor in_place = big.clone();
  gelu_into(in_place, in_place);
  EXPECT_EQ(in_place.to_vector(), gelu(big).to_vector());
}

// --- Backward: the float32 derivative kernels against the derivatives in float64 ------

double gelu_grad_f64(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}
double gelu_tanh_grad_f64(double x) {
  const double k = std::sqrt(2.0 / M_PI), t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}
double silu_grad_f64(double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  return s * (1.0 + x * (1.0 - s));
}

// grad_input starts at 0.5 and grad_output is 1, so the kernel must add
// f'(x) to what is there: |got - (0.5 + f'(x))| <= tol (|x| + 1).
template <class Backward, class Want>
void check_backward_float32(Backward backward, Want want, double tol, const char* name) {
  const std::vector<double> xs = grid();
  const int64_t n = static_cast<int64_t>(xs.size());
  const Tensor x = Tensor::from_vector({n}, std::span(xs)).to(DType::kFloat32);
  const Tensor ones = Tensor::full({n}, 1.0, DType::kFloat32);
  Tensor grad = Tensor::full({n}, 0.5, DType::kFloat32);
  backward(ones, x, grad);
  const std::vector<double> xf = x.to_vector(), got = grad.to_vector();
  double worst = 0.0;
  for (size_t i = 0; i < xf.size(); ++i) {
    const double w = 0.5 + want(xf[i]), bound = tol * (std::abs(xf[i]) + 1.0);
    EXPECT_NEAR(got[i], w, bound) << name << "'(" << xf[i] << ")";
    worst = std::max(worst, std::abs(got[i] - w) / bound);
  }
  std::printf("%s' float32: max |error| / (%.0e (|x| + 1)) = %.3f over %zu points\n", name, tol,
              worst, xf.size());
}

TEST(GeluBackward, Float32ErfFormMatchesFloat64Derivative) {
  check_backward_float32(
      [](const Tensor& go, const Tensor& x, Tensor& gi) { gelu_backward(go, x, {}, gi); },
      gelu_grad_f64, 1e-6, "gelu");
}

TEST(GeluBackward, Float32TanhFormMatchesFloat64Derivative) {
  check_backward_float32([](const Tensor& go, const Tensor& x,
                            Tensor& gi) { gelu_backward(go, x, GeluApproximation::kTanh, gi); },
                         gelu_tanh_grad_f64, 1e-6, "gelu_tanh");
}

TEST(SiluBackward, Float32MatchesFloat64Derivative) {
  check_backward_float32(
      [](const Tensor& go, const Tensor& x, Tensor& gi) { silu_backward(go, x, gi); },
      silu_grad_f64, 1e-6, "silu");
}

TEST(ReluBackward, Float32PassesTheGradientWherePositive) {
  check_backward_float32(
      [](const Tensor& go, const Tensor& x, Tensor& gi) { relu_backward(go, x, gi); },
      [](double x) { return x > 0.0 ? 1.0 : 0.0; }, 1e-12, "relu");
}

}  // namespace
}  // namespace qkv
