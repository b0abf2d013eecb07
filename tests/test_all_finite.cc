// all_finite, the scan behind every "contains NaN or infinite values" error:
// one bad value anywhere in a large tensor or strided view (split over the
// threads) is found.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/checks.h"
#include "qkv/runtime.h"
#include "qkv/tensor.h"

namespace qkv {
namespace {

TEST(AllFinite, OneBadValueAnywhereInALargeTensorOnAnyThreadCount) {
  const int previous = num_threads();
  const int64_t n = (1 << 19) + 77;  // past the threshold that splits the scan, not whole chunks
  const double bad_values[] = {std::numeric_limits<double>::quiet_NaN(),
                               std::numeric_limits<double>::infinity(),
                               -std::numeric_limits<double>::infinity()};
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      Tensor t = Tensor::full({n}, 1.5, dtype);
      EXPECT_TRUE(all_finite(t));
      for (int64_t at : {int64_t{0}, n / 2 + 3, n - 1}) {
        for (double bad : bad_values) {
          t.set({at}, bad);
          EXPECT_FALSE(all_finite(t)) << "value " << bad << " at " << at << ", " << threads
                                      << " threads, " << dtype_name(dtype);
          t.set({at}, 1.5);
        }
      }
      // A strided view sees only its own elements.
      Tensor rows = Tensor::full({n / 64, 64}, 2.0, dtype);
      rows.set({5, 63}, std::numeric_limits<double>::quiet_NaN());
      EXPECT_TRUE(all_finite(rows.slice(1, 0, 63)));
      EXPECT_FALSE(all_finite(rows));
      // Heads view [B, H, L, E] of a [B, L, H, E] projection: many short rows,
      // split over the threads, and a bad value between its rows unseen.
      Tensor projection = Tensor::full({8, 128, 13, 32}, 0.5, dtype);
      const Tensor heads = projection.slice(2, 0, 12).transpose(1, 2);
      EXPECT_TRUE(all_finite(heads));
      projection.set({7, 100, 12, 7}, std::numeric_limits<double>::infinity());
      EXPECT_TRUE(all_finite(heads));
      projection.set({7, 100, 11, 31}, std::numeric_limits<double>::quiet_NaN());
      EXPECT_FALSE(all_finite(heads)) << threads << " threads, " << dtype_name(dtype);
    }
  }
  set_num_threads(previous);
}

// Broadcast views (stride 0, as the gradient of sum() that torch hands a
// backward): each element they repeat is checked, and found when bad.
TEST(AllFinite, BroadcastViewsCheckTheElementsTheyRepeat) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    Tensor one = Tensor::full({1}, 1.0, dtype);
    EXPECT_TRUE(all_finite(one.expand({32, 12, 128, 32})));
    one.set({0}, std::numeric_limits<double>::quiet_NaN());
    EXPECT_FALSE(all_finite(one.expand({32, 12, 128, 32})));

    Tensor rows = Tensor::full({4, 1, 64}, 2.0, dtype);
    EXPECT_TRUE(all_finite(rows.expand({4, 16, 64})));
    rows.set({3, 0, 63}, -std::numeric_limits<double>::infinity());
    EXPECT_FALSE(all_finite(rows.expand({4, 16, 64})));
    // A broadcast last dim: the column it repeats.
    Tensor column = Tensor::full({64, 1}, 2.0, dtype);
    EXPECT_TRUE(all_finite(column.expand({64, 32})));
    column.set({40, 0}, std::numeric_limits<double>::quiet_NaN());
    EXPECT_FALSE(all_finite(column.expand({64, 32})));
  }
}

}  // namespace
}  // namespace qkv
