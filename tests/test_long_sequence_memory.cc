// Issue 4: attention over L = 32,768 keys and queries (H = 1, E = 64) runs
// forward and backward with less than 64 MiB of memory beyond its inputs,
// outputs and gradients. No L×S matrix (4 GiB here) may ever exist.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>

#include "qkv/attention.h"

using namespace qkv;

namespace {
// Peak resident memory of this process so far, in bytes (Linux reports KiB).
double peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }
}  // namespace

TEST(LongSequence, ForwardAndBackwardAt32kStayUnder64MiBExtra) {
  const int64_t L = 32768, E = 64;
  Generator gen(1);
  Tensor q = Tensor::randn({1, 1, L, E}, gen), k = Tensor::randn({1, 1, L, E}, gen);
  Tensor v = Tensor::randn({1, 1, L, E}, gen), grad_out = Tensor::randn({1, 1, L, E}, gen);
  const double tensor_bytes = static_cast<double>(L * E * sizeof(float));
  // Touch everything the test itself owns before taking the baseline.
  const double baseline = peak_rss_bytes();

  const SdpaOptions options;
  SdpaResult forward = scaled_dot_product_attention(q, k, v, options);
  SdpaGradients grads = scaled_dot_product_attention_backward(grad_out, q, k, v, forward, options);

  // Allowed: the output, its log-sum-exp (float64, L values) and three gradients.
  const double allowed = 4 * tensor_bytes + L * sizeof(double);
  const double extra = peak_rss_bytes() - baseline - allowed;
  std::printf("peak RSS above inputs + outputs + gradients: %.1f MiB\n", mib(extra));
  EXPECT_LT(mib(extra), 64.0);
  // And the answer is sane.
  for (double x : grads.query.select(2, L - 1).to_vector()) ASSERT_TRUE(std::isfinite(x));
  EXPECT_EQ(forward.kernel.rfind("fused", 0), 0u);
}
