// linear() on float32 through every ISA's own kernel for a few rows
// (gemv_rows, W read in place) and through the BLAS (more rows), against the
// same product in float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernel_tables.h"
#include "qkv/generator.h"
#include "qkv/linear.h"
#include "qkv/runtime.h"
#include "tensor_comparison.h"

using namespace qkv;
using qkv::testing::relative_error;

namespace {

class LinearKernels : public qkv_test::ActiveKernelTableTest {
 protected:
  void TearDown() override {
    ActiveKernelTableTest::TearDown();
    set_num_threads(threads_);
  }
  const int threads_ = num_threads();
};

TEST_P(LinearKernels, EveryRowCountAgainstFloat64) {
  Generator gen(3);
  const int64_t most = GetParam()->gemv_max_rows;
  const int64_t rows[] = {1, 2, 3, most / 3, most / 3 + 1, most - 1, most, most + 1, 70};
  const std::pair<int64_t, int64_t> sizes[] = {{1, 1},   {9, 3},    {8, 16},
                                               {40, 17}, {385, 64}, {96, 385}};
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (int64_t m : rows)
      for (auto [n, k] : sizes)
        for (bool with_bias : {false, true}) {
          const Tensor x = Tensor::randn({m, k}, gen), w = Tensor::randn({n, k}, gen);
          const Tensor b = with_bias ? Tensor::randn({n}, gen) : Tensor();
          const Tensor y = linear(x, w, b);
          const Tensor ref = linear(x.to(DType::kFloat64), w.to(DType::kFloat64),
                                    with_bias ? b.to(DType::kFloat64) : Tensor());
          EXPECT_LE(relative_error(y, ref), 1e-5)
              << "m=" << m << " n=" << n << " k=" << k << (with_bias ? " +bias" : "")
              << " threads=" << threads;
          Tensor into = Tensor::full({m, n}, NAN);
          linear_into(into, x, w, b);
          EXPECT_LE(relative_error(into, ref), 1e-5) << "linear_into m=" << m << " n=" << n;
        }
  }
}

QKV_INSTANTIATE_FOR_EVERY_KERNEL_TABLE(LinearKernels);

}  // namespace
