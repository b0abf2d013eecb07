// sum and mean (qkv/functional.h) against a float64 loop: over each dimension,
// with and without keepdim, over all elements, on float32 and float64, on
// non-contiguous inputs, on empty ones, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/functional.h"
#include "qkv/generator.h"

namespace qkv {
namespace {

// Σ over dimension d of the row-major values x of `shape`, in float64, in
// index order, then / n for the mean.
std::vector<double> reference(const std::vector<double>& x, const Shape& shape, int64_t d,
                              bool mean) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= shape[i];
  for (int64_t i = d + 1; i < static_cast<int64_t>(shape.size()); ++i) inner *= shape[i];
  const int64_t n = shape[d];
  std::vector<double> out(outer * inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double s = 0;
      for (int64_t k = 0; k < n; ++k) s += x[(o * n + k) * inner + i];
      out[o * inner + i] = mean ? s / n : s;
    }
  return out;
}

// The reference rounded to x's dtype, as the op rounds once.
std::vector<double> rounded(std::vector<double> v, DType dtype) {
  if (dtype == DType::kFloat32)
    for (double& e : v) e = static_cast<float>(e);
  return v;
}

Shape reduced_shape(const Shape& shape, int64_t d, bool keepdim) {
  Shape out;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    if (i != d)
      out.push_back(shape[i]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

class Reductions : public ::testing::TestWithParam<DType> {};

TEST_P(Reductions, OverEachDimensionMatchTheFloat64Loop) {
  const DType dtype = GetParam();
  Generator gen(7);
  for (const Shape& shape : {Shape{5}, Shape{3, 4}, Shape{2, 3, 5}, Shape{2, 1, 3, 4}}) {
    // Values around 100 with small parts, so float32 accumulation would differ.
    const Tensor x = add(Tensor::randn(shape, gen, dtype), Tensor::full({1}, 100.0, dtype));
    const std::vector<double> values = x.to_vector();
    const int64_t ndim = static_cast<int64_t>(shape.size());
    for (int64_t d = 0; d < ndim; ++d)
      for (bool keepdim : {false, true})
        for (bool is_mean : {false, true}) {
          SCOPED_TRACE(shape_str(shape) + " dim " + std::to_string(d) +
                       (keepdim ? " keepdim" : "") + (is_mean ? " mean" : " sum"));
          const Tensor y = is_mean ? mean(x, d, keepdim) : sum(x, d, keepdim);
          EXPECT_EQ(y.dtype(), dtype);
          EXPECT_EQ(y.shape(), reduced_shape(shape, d, keepdim));
          EXPECT_EQ(y.to_vector(), rounded(reference(values, shape, d, is_mean), dtype));
          // A negative dim counts from the end.
          const Tensor z = is_mean ? mean(x, d - ndim, keepdim) : sum(x, d - ndim, keepdim);
          EXPECT_EQ(z.to_vector(), y.to_vector());
        }
  }
}

TEST_P(Reductions, OfAllElementsMatchTheFloat64Loop) {
  const DType dtype = GetParam();
  Generator gen(8);
  const Shape shape{3, 7, 5};
  const Tensor x = Tensor::randn(shape, gen, dtype);
  const std::vector<double> values = x.to_vector();
  const Tensor s = sum(x), m = mean(x);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(m.dim(), 0);
  const Shape flat{x.numel()};
  EXPECT_EQ(s.item(), rounded(reference(values, flat, 0, false), dtype)[0]);
  EXPECT_EQ(m.item(), rounded(reference(values, flat, 0, true), dtype)[0]);
}

TEST_P(Reductions, NonContiguousInputsReduceTheirLogicalValues) {
  const DType dtype = GetParam();
  Generator gen(9);
  const Tensor x = Tensor::randn({4, 6}, gen, dtype).transpose(0, 1);  // [6, 4]
  ASSERT_FALSE(x.is_contiguous());
  const Tensor xc = x.contiguous();
  for (int64_t d : {0, 1}) {
    EXPECT_EQ(sum(x, d).to_vector(), sum(xc, d).to_vector());
    EXPECT_EQ(mean(x, d, true).to_vector(), mean(xc, d, true).to_vector());
  }
  EXPECT_EQ(sum(x).item(), sum(xc).item());
}

TEST_P(Reductions, LargeInputsGiveTheSameNumbersOnAnyThreadCount) {
  const DType dtype = GetParam();
  Generator gen(10);
  const Shape shape{300, 17, 40};  // above the threshold for splitting over threads
  const Tensor x = Tensor::randn(shape, gen, dtype);
  const std::vector<double> values = x.to_vector();
  for (int64_t d : {0, 1, 2})
    EXPECT_EQ(mean(x, d).to_vector(), rounded(reference(values, shape, d, true), dtype));
}

TEST_P(Reductions, EmptyInputsSumToZeroAndAverageToNaN) {
  const DType dtype = GetParam();
  const Tensor x = Tensor::zeros({3, 0}, dtype);
  EXPECT_EQ(sum(x).item(), 0.0);
  EXPECT_TRUE(std::isnan(mean(x).item()));
  EXPECT_EQ(sum(x, 1).to_vector(), std::vector<double>(3, 0.0));
  for (double v : mean(x, 1).to_vector()) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(sum(x, 0).shape(), Shape({0}));
  EXPECT_EQ(mean(x, 0, true).shape(), Shape({1, 0}));
}

INSTANTIATE_TEST_SUITE_P(DTypes, Reductions, ::testing::Values(DType::kFloat32, DType::kFloat64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(ReductionErrors, NameTheOpAndTheArgument) {
  const Tensor x = Tensor::zeros({2, 3});
  try {
    sum(x, 2);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue);
    EXPECT_NE(std::string(e.what()).find("sum: dimension 2 is out of range"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(mean(x, -3), Error);
  try {
    mean(Tensor::zeros({2}, DType::kBool));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kType);
    EXPECT_NE(std::string(e.what()).find("mean"), std::string::npos) << e.what();
  }
  EXPECT_THROW(sum(Tensor()), Error);
}

}  // namespace
}  // namespace qkv
