// The fused kernels' vector log (each query row's log-sum-exp goes through
// it), on every ISA this CPU runs, held to std::log in float64.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernel_tables.h"

namespace qkv {
namespace {

using KernelLog = qkv_test::KernelTableTest;

// The error that matters is absolute: lse = m + log l enters exp(s − lse).
TEST_P(KernelLog, AbsoluteErrorBelow2e7AroundOneAndWithinAFloatUlpFarOut) {
  std::vector<float> x;
  for (double v = 0.5; v <= 4.0; v += 1.0 / 65536) x.push_back(static_cast<float>(v));
  // Every binade of the normal floats, 64 mantissas each.
  for (int e = -126; e <= 127; ++e)
    for (int i = 0; i < 64; ++i) x.push_back(std::ldexp(1.0f + static_cast<float>(i) / 64, e));
  x.push_back(std::numeric_limits<float>::min());
  x.push_back(std::numeric_limits<float>::max());
  const std::vector<float> y = qkv_test::apply_vector_function(GetParam()->log_into, x);
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::log(static_cast<double>(x[i]));
    // 2e-7 absolute, or 2 ulp of the result when that is larger (|log| > 1).
    const double tolerance = std::max(2e-7, 2.4e-7 * std::abs(want));
    ASSERT_NEAR(y[i], want, tolerance) << "log(" << x[i] << ")";
  }
}

TEST_P(KernelLog, ExactlyZeroAtOneAndPowersOfTwoAreMultiplesOfLn2) {
  const std::vector<float> y =
      qkv_test::apply_vector_function(GetParam()->log_into, {1.0f, 2.0f, 0.5f, 1024.0f, 0x1p-100f});
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_NEAR(y[1], std::log(2.0), 1e-7);
  EXPECT_NEAR(y[2], -std::log(2.0), 1e-7);
  EXPECT_NEAR(y[3], 10 * std::log(2.0), 1e-6);
  EXPECT_NEAR(y[4], -100 * std::log(2.0), 1e-5);
}

TEST_P(KernelLog, ALengthThatIsNoWholeNumberOfVectorsIsDoneToTheLastElement) {
  std::vector<float> x(37);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0f + 3.5f * static_cast<float>(i);
  const std::vector<float> y = qkv_test::apply_vector_function(GetParam()->log_into, x);
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(y[i], std::log(static_cast<double>(x[i])), 1e-6) << "element " << i;
}

QKV_INSTANTIATE_FOR_EVERY_KERNEL_TABLE(KernelLog);

}  // namespace
}  // namespace qkv
