// The bfloat16 and int8 linear kernels (kernels/low_precision_gemm.h) of every
// table this CPU supports, against float64 references computed here from the
// same rounded (bf16) or quantised (int8) values: awkward shapes, strided x
// and y, bias or none, zero rows, NaN and Inf in x, both threading paths,
// sub-blocks through gemm_block, and the tables against each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernel_tables.h"
#include "kernels/cpu_features.h"
#include "kernels/low_precision_gemm.h"
#include "kernels/row_kernels.h"
#include "low_precision_reference.h"
#include "qkv/error.h"
#include "qkv/runtime.h"
#include "qkv/tensor.h"

namespace {

using qkv::Precision;
using qkv::kernels::LowPrecisionKernels;
using qkv::kernels::PackedWeights;
using namespace qkv_test::lowp;

std::vector<const LowPrecisionKernels*> all_tables() {
  std::vector<const LowPrecisionKernels*> all;
  for (Precision p : {Precision::kBFloat16, Precision::kInt8})
    for (const LowPrecisionKernels* t : qkv::kernels::supported_low_precision_kernels(p))
      all.push_back(t);
  return all;
}

class LowPrecisionGemm
    : public qkv_test::ActiveFamilyTableTest<LowPrecisionKernels,
                                             qkv::kernels::override_low_precision_kernels> {
 protected:
  Precision precision() const { return GetParam()->precision; }
};

TEST_P(LowPrecisionGemm, IsTheActiveTable) {
  EXPECT_EQ(&qkv::kernels::active_low_precision_kernels(precision()), GetParam());
}

TEST_P(LowPrecisionGemm, AwkwardShapesAgainstFloat64) {
  std::mt19937 gen(7);
  qkv::set_num_threads(1);
  for (int64_t m : {1, 3, 17, 80, 129})
    for (int64_t n : {1, 5, 33, 64, 100})
      for (int64_t k : {1, 2, 3, 7, 64, 385}) {
        const bool bias = (m + n + k) % 2 == 0;
        const int64_t x_pad = (m + k) % 2 == 0 ? 3 : 0, y_pad = n % 2 == 1 ? 5 : 0;
        const Problem p = make_problem(m, n, k, x_pad, y_pad, bias, gen);
        const PackedWeights w(p.w.data(), n, k, precision());
        check(p, w, run(p, w));
        if (HasFailure()) return;
      }
}

TEST_P(LowPrecisionGemm, BothThreadingPathsAgainstFloat64) {
  std::mt19937 gen(11);
  qkv::set_num_threads(2);
  // 500 rows: items of rows; 17 rows: the columns split between threads.
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{500, 100, 64},
                         {17, 100, 385},
                         {4096, 40, 7},
                         {128, 384, 96}})
    for (bool bias : {false, true}) {
      const Problem p = make_problem(m, n, k, 1, 2, bias, gen);
      const PackedWeights w(p.w.data(), n, k, precision());
      check(p, w, run(p, w));
    }
}

// gemm_block on a sub-rectangle writes exactly that rectangle.
TEST_P(LowPrecisionGemm, GemmBlockWritesOnlyItsBlock) {
  std::mt19937 gen(5);
  const Problem p = make_problem(40, 100, 37, 0, 0, true, gen);
  const PackedWeights w(p.w.data(), p.n, p.k, precision());
  const std::vector<float> full = run(p, w);
  const int64_t r0 = 3, r1 = 29, c0 = 7, c1 = 71;
  std::vector<float> y(p.m * p.ldy, kSentinel);
  GetParam()->gemm_block(p.x.data(), p.ldx, w, p.bias.data(), y.data(), p.ldy, r0, r1, c0, c1);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      const bool inside = i >= r0 && i < r1 && j >= c0 && j < c1;
      ASSERT_EQ(y[i * p.ldy + j], inside ? full[i * p.ldy + j] : kSentinel)
          << "y[" << i << ", " << j << "]";
    }
}

// A zero row of x gives y = bias exactly; a zero row of W (an output channel)
// gives bias there exactly; other rows and channels are as usual.
TEST_P(LowPrecisionGemm, ZeroRowsGiveTheBias) {
  std::mt19937 gen(3);
  Problem p = make_problem(30, 45, 70, 2, 1, true, gen);
  for (int64_t i : {0, 13, 29}) std::fill_n(&p.x[i * p.ldx], p.k, 0.0f);
  for (int64_t j : {4, 44}) std::fill_n(&p.w[j * p.k], p.k, 0.0f);
  const PackedWeights w(p.w.data(), p.n, p.k, precision());
  const std::vector<float> y = run(p, w);
  check(p, w, y);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j)
      if (i == 0 || i == 13 || i == 29 || j == 4 || j == 44) {
        EXPECT_EQ(y[i * p.ldy + j], p.bias[j]) << "y[" << i << ", " << j << "]";
      }
  // All of x zero, no bias: all of y zero (and no NaN from 0 / 0 scales).
  p.bias.clear();
  std::fill(p.x.begin(), p.x.end(), 0.0f);
  const std::vector<float> zeros = run(p, w);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) ASSERT_EQ(zeros[i * p.ldy + j], 0.0f);
}

// A NaN or an Inf in a row of x makes that row of y NaN (int8: the whole
// row, by the row's scale; bf16: NaN propagates through every product, and
// Inf gives ±Inf or NaN), never finite numbers; the other rows are unharmed.
TEST_P(LowPrecisionGemm, NonFiniteRowsOfXAreNotFinite) {
  std::mt19937 gen(9);
  Problem p = make_problem(26, 70, 50, 0, 0, true, gen);
  p.x[5 * p.ldx + 17] = std::numeric_limits<float>::quiet_NaN();
  p.x[20 * p.ldx + 49] = std::numeric_limits<float>::infinity();
  const PackedWeights w(p.w.data(), p.n, p.k, precision());
  const std::vector<float> y = run(p, w);
  for (int64_t j = 0; j < p.n; ++j) {
    EXPECT_TRUE(std::isnan(y[5 * p.ldy + j])) << "y[5, " << j << "] = " << y[5 * p.ldy + j];
    EXPECT_FALSE(std::isfinite(y[20 * p.ldy + j])) << "y[20, " << j << "] = " << y[20 * p.ldy + j];
    if (precision() == Precision::kInt8) {
      EXPECT_TRUE(std::isnan(y[20 * p.ldy + j]));
    }
  }
  // The other rows: as without the bad values.
  Problem clean = p;
  clean.x[5 * p.ldx + 17] = clean.x[20 * p.ldx + 49] = 0.0f;
  const std::vector<float> y_clean = run(clean, w);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j)
      if (i != 5 && i != 20) {
        ASSERT_EQ(y[i * p.ldy + j], y_clean[i * p.ldy + j]);
      }
}

// One-sided rows (as after GELU or ReLU) use all 256 steps of u8: against
// float32, int8's error is then about half that of a symmetric scale.
TEST_P(LowPrecisionGemm, OneSidedRowsAgainstFloat64) {
  std::mt19937 gen(21);
  Problem p = make_problem(37, 70, 200, 1, 0, true, gen);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t t = 0; t < p.k; ++t) {
      float& v = p.x[i * p.ldx + t];
      v = i % 2 == 0 ? std::fabs(v) : -std::fabs(v);
    }
  const PackedWeights w(p.w.data(), p.n, p.k, precision());
  check(p, w, run(p, w));
  if (precision() == Precision::kInt8) {
    const Int8Operands q = quantize(p);
    for (int64_t i = 0; i < p.m; ++i) {
      float max = 0.0f;
      for (int64_t t = 0; t < p.k; ++t) max = std::max(max, std::fabs(p.x[i * p.ldx + t]));
      ASSERT_LE(q.x[i].scale, max / 255.0f * 1.0001f) << "row " << i;
    }
  }
}

// int8 with smoothing factors s: the kernel quantises W · s per channel and
// x · (1 / s) per row; checked against float64 on those operands, and
// loosely against the float32 product x · Wᵀ, which smoothing leaves as it is.
TEST_P(LowPrecisionGemm, SmoothedInt8AgainstFloat64) {
  if (precision() != Precision::kInt8) GTEST_SKIP() << "smoothing is for int8";
  std::mt19937 gen(13);
  std::uniform_int_distribution<int> e(-6, 6);
  for (auto [m, n, k] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 33, 7}, {29, 100, 385}, {130, 64, 96}}) {
    Problem p = make_problem(m, n, k, 2, 1, true, gen);
    std::vector<float> smoothing(k);
    for (float& f : smoothing) f = std::ldexp(1.0f, e(gen)) * 1.37f;
    for (int64_t i = 0; i < m; ++i)  // an outlier feature, as LayerNorm outputs have
      p.x[i * p.ldx + k / 2] *= 40.0f;
    const PackedWeights w(p.w.data(), n, k, precision(), smoothing.data());
    const std::vector<float> y = run(p, w);
    Problem smoothed = p;
    for (int64_t t = 0; t < k; ++t) {
      const float inv = 1.0f / smoothing[t];
      for (int64_t i = 0; i < m; ++i) smoothed.x[i * p.ldx + t] = p.x[i * p.ldx + t] * inv;
      for (int64_t j = 0; j < n; ++j) smoothed.w[j * k + t] = p.w[j * k + t] * smoothing[t];
    }
    check(smoothed, w, y);
    const Int8Operands q = quantize(smoothed);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const Expected loose = expected_int8_vs_float(smoothed, q, i, j);
        double exact = p.bias[j];
        for (int64_t t = 0; t < k; ++t)
          exact += static_cast<double>(p.x[i * p.ldx + t]) * p.w[j * k + t];
        ASSERT_NEAR(y[i * p.ldy + j], exact, loose.bound * 1.01) << describe(p);
      }
  }
}

// A NaN in a channel of W makes that column of y NaN, every row of it.
TEST_P(LowPrecisionGemm, NonFiniteChannelsOfWAreNaN) {
  std::mt19937 gen(4);
  Problem p = make_problem(20, 40, 33, 0, 0, true, gen);
  p.w[3 * p.k + 8] = std::numeric_limits<float>::quiet_NaN();
  const PackedWeights w(p.w.data(), p.n, p.k, precision());
  const std::vector<float> y = run(p, w);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      ASSERT_EQ(std::isnan(y[i * p.ldy + j]), j == 3) << "y[" << i << ", " << j << "]";
    }
}

// An activation passed to the driver is applied to y's blocks as they are
// computed: the same bits as applying it to the whole y afterwards, on every
// threading path.
TEST_P(LowPrecisionGemm, ThenAppliesTheRowMapToEveryBlock) {
  std::mt19937 gen(17);
  const qkv::kernels::RowMap gelu = qkv::kernels::active_row_kernels().gelu;
  for (int threads : {1, 2})
    for (auto [m, n, k] :
         {std::tuple<int64_t, int64_t, int64_t>{500, 100, 64}, {17, 100, 385}, {130, 33, 40}}) {
      qkv::set_num_threads(threads);
      const Problem p = make_problem(m, n, k, 1, 2, true, gen);
      const PackedWeights w(p.w.data(), n, k, precision());
      std::vector<float> want = run(p, w);
      for (int64_t i = 0; i < m; ++i) gelu(&want[i * p.ldy], &want[i * p.ldy], n);
      std::vector<float> got(want.size(), kSentinel);
      qkv::kernels::low_precision_gemm(p.x.data(), p.ldx, m, w, p.bias.data(), got.data(), p.ldy,
                                       gelu);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < p.ldy; ++j)
          ASSERT_EQ(got[i * p.ldy + j], want[i * p.ldy + j])
              << describe(p) << " threads=" << threads << " y[" << i << ", " << j << "]";
    }
}

TEST_P(LowPrecisionGemm, KZeroGivesTheBias) {
  std::mt19937 gen(1);
  const Problem p = make_problem(5, 9, 0, 1, 0, true, gen);
  const PackedWeights w(nullptr, p.n, 0, precision());
  const std::vector<float> y = run(p, w);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) EXPECT_EQ(y[i * p.ldy + j], p.bias[j]);
}

std::string table_name(const ::testing::TestParamInfo<const LowPrecisionKernels*>& info) {
  return std::string(qkv::precision_name(info.param->precision)) + "_" + info.param->name;
}

INSTANTIATE_TEST_SUITE_P(EveryIsa, LowPrecisionGemm, ::testing::ValuesIn(all_tables()), table_name);

// Every table of a precision against the first (the fastest): int8 to the
// bit (exact int32 sums, the same float32 epilogue), bf16 within twice the
// float32 summation bound (only the order of the additions differs).
TEST(LowPrecisionGemmTables, AgreeWithEachOther) {
  struct ResetOverride {  // also when an ASSERT returns early
    ~ResetOverride() { qkv::kernels::override_low_precision_kernels(nullptr); }
  } reset;
  std::mt19937 gen(13);
  for (Precision precision : {Precision::kBFloat16, Precision::kInt8}) {
    const auto tables = qkv::kernels::supported_low_precision_kernels(precision);
    ASSERT_FALSE(tables.empty());
    EXPECT_STREQ(tables.back()->name, "portable");
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{37, 67, 385}, {129, 33, 64}}) {
      const Problem p = make_problem(m, n, k, 1, 3, true, gen);
      const PackedWeights w(p.w.data(), n, k, precision);
      qkv::kernels::override_low_precision_kernels(tables.front());
      const std::vector<float> first = run(p, w);
      for (const LowPrecisionKernels* t : tables) {
        qkv::kernels::override_low_precision_kernels(t);
        const std::vector<float> y = run(p, w);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            const float a = first[i * p.ldy + j], b = y[i * p.ldy + j];
            if (precision == Precision::kInt8) {
              ASSERT_EQ(a, b) << t->name << " y[" << i << ", " << j << "]";
            } else {
              ASSERT_LE(std::fabs(a - b), 2 * expected_bf16(p, i, j).bound)
                  << t->name << " y[" << i << ", " << j << "]";
            }
          }
      }
    }
  }
}

TEST(LowPrecisionGemmTables, SmoothingFactorsAreChecked) {
  const std::vector<float> w(6, 0.5f);
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    const std::vector<float> s = {1.0f, bad, 2.0f};
    try {
      PackedWeights(w.data(), 2, 3, Precision::kInt8, s.data());
      ADD_FAILURE() << "accepted smoothing factor " << bad;
    } catch (const qkv::Error& e) {
      EXPECT_NE(std::string(e.what()).find("input feature 1"), std::string::npos) << e.what();
    }
  }
  const std::vector<float> ones(3, 1.0f);
  EXPECT_THROW(PackedWeights(w.data(), 2, 3, Precision::kBFloat16, ones.data()), qkv::Error);
}

TEST(LowPrecisionGemmTables, PackedWeightsDescribeThemselves) {
  std::vector<float> w(70 * 9, 0.5f);
  const PackedWeights bf16(w.data(), 70, 9, Precision::kBFloat16);
  EXPECT_EQ(bf16.precision(), Precision::kBFloat16);
  EXPECT_EQ(bf16.n(), 70);
  EXPECT_EQ(bf16.k(), 9);
  EXPECT_FALSE(bf16.empty());
  // 3 panels of 32 channels, each of 16 steps (k = 9: 5 pairs or 3 quads, padded to 16).
  EXPECT_EQ(bf16.bytes(), 3 * 32 * 16 * 2 * 2);
  const PackedWeights int8(w.data(), 70, 9, Precision::kInt8);
  EXPECT_EQ(int8.bytes(), 3 * 32 * 16 * 4 + 96 * 4 + 96 * 4);
  EXPECT_TRUE(PackedWeights().empty());
  EXPECT_THROW(PackedWeights(w.data(), 70, 9, Precision::kFloat32), qkv::Error);
  EXPECT_THROW(qkv::kernels::active_low_precision_kernels(Precision::kFloat32), qkv::Error);
  // Without a cap (QKV_ISA may set one for the whole run), the fastest table is the default.
  qkv::kernels::override_isa_ceiling(qkv::kernels::supported_isas().front());
  for (Precision p : {Precision::kBFloat16, Precision::kInt8})
    EXPECT_EQ(&qkv::kernels::active_low_precision_kernels(p),
              qkv::kernels::supported_low_precision_kernels(p).front());
  qkv::kernels::reset_isa_ceiling();
}

}  // namespace
