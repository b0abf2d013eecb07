// The fused kernels' vector exp (every softmax weight goes through it), on
// every ISA this CPU runs, held to std::exp in float64.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernel_tables.h"

namespace qkv {
namespace {

using KernelExp = qkv_test::KernelTableTest;

TEST_P(KernelExp, RelativeErrorBelow3e7FromMinus87To88) {
  std::vector<float> x;
  for (double v = -87.3; v <= 88.3; v += 1.0 / 4096) x.push_back(static_cast<float>(v));
  const std::vector<float> y = qkv_test::apply_vector_function(GetParam()->exp_into, x);
  double worst = 0.0;
  float worst_at = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    const double rel = std::abs(static_cast<double>(y[i]) / want - 1.0);
    if (rel > worst) {
      worst = rel;
      worst_at = x[i];
    }
    ASSERT_EQ(std::fpclassify(y[i]), FP_NORMAL) << "exp(" << x[i] << ") = " << y[i];
  }
  EXPECT_LT(worst, 3e-7) << "worst at x = " << worst_at;
}

TEST_P(KernelExp, ZeroBelowTheRangeNaNStaysNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {
      -inf, -1e30f, -200.0f, -87.31f, 0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN()};
  const std::vector<float> y = qkv_test::apply_vector_function(GetParam()->exp_into, x);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(y[i], 0.0f) << "exp(" << x[i] << ")";
  EXPECT_EQ(y[4], 1.0f);
  EXPECT_EQ(y[5], 1.0f);
  EXPECT_TRUE(std::isnan(y[6]));
}

TEST_P(KernelExp, ALengthThatIsNoWholeNumberOfVectorsIsDoneToTheLastElement) {
  std::vector<float> x(37);
  for (size_t i = 0; i < x.size(); ++i) x[i] = -0.25f * static_cast<float>(i);
  const std::vector<float> y = qkv_test::apply_vector_function(GetParam()->exp_into, x);
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(y[i], std::exp(static_cast<double>(x[i])), 3e-7 * std::exp(double(x[i])))
        << "element " << i;
}

QKV_INSTANTIATE_FOR_EVERY_KERNEL_TABLE(KernelExp);

}  // namespace
}  // namespace qkv
