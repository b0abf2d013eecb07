#include <gtest/gtest.h>

#include <cmath>

#include "qkv/generator.h"
#include "qkv/tensor.h"

using namespace qkv;

namespace {
Tensor iota(const Shape& shape) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return Tensor::from_vector(shape, std::span<const double>(v));
}
// copy_from between views that keep rows contiguous (head split/merge,
// slices, broadcasts of a row) against an element-by-element copy.
TEST(Tensor, CopyFromStridedViewsRowByRow) {
  Generator gen(5);
  const Tensor x = Tensor::randn({2, 3, 4, 5}, gen);
  struct Case {
    Tensor src;
    Shape dst_shape;
  };
  const std::vector<Case> cases = {
      {x.permute({0, 2, 1, 3}), {2, 4, 3, 5}},
      {x.slice(3, 1, 4), {2, 3, 4, 3}},
      {x.select(1, 2), {2, 4, 5}},
      {x.select(0, 1).select(0, 0).select(0, 3).reshape({1, 5}).expand({6, 5}), {6, 5}},
  };
  for (const Case& c : cases) {
    Tensor dst = Tensor::zeros(c.dst_shape);
    dst.copy_from(c.src);
    EXPECT_EQ(dst.to_vector(), c.src.to_vector());
    // Into a strided destination: the merge direction.
    Tensor wide = Tensor::zeros(c.dst_shape);
    Tensor into = wide.transpose(0, 1).contiguous().transpose(0, 1);
    if (c.dst_shape.size() >= 3) {
      into.copy_from(c.src);
      EXPECT_EQ(into.to_vector(), c.src.to_vector());
    }
  }
}

}  // namespace

TEST(Tensor, CreationAndProperties) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.strides(), (Strides{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.dtype(), DType::kFloat32);
  EXPECT_EQ(Tensor::full({2}, 1.5, DType::kFloat64).at({1}), 1.5);
  EXPECT_FALSE(Tensor().defined());
}

TEST(Tensor, ViewTransposeAndContiguousFollowTorch) {
  // The §5.4 head split: [B, L, D] -> view [B, L, H, E] -> transpose(1, 2) -> [B, H, L, E]
  Tensor x = iota({2, 4, 8});
  Tensor heads = x.view({2, 4, 2, 4}).transpose(1, 2);
  EXPECT_EQ(heads.shape(), (Shape{2, 2, 4, 4}));
  EXPECT_FALSE(heads.is_contiguous());
  EXPECT_TRUE(heads.shares_storage_with(x));
  // element [b, h, l, e] is x[b, l, h*4 + e]
  EXPECT_EQ(heads.at({1, 1, 2, 3}), x.at({1, 2, 7}));
  // Back to [B, L, D]: view fails without contiguous(), as in the tutorial's warning.
  EXPECT_THROW(heads.view({2, 4, 8}), Error);
  Tensor merged = heads.transpose(1, 2).contiguous().view({2, 4, 8});
  EXPECT_EQ(max_abs_diff(merged, x), 0.0);
  EXPECT_EQ(heads.reshape({2, -1}).shape(), (Shape{2, 32}));
}

TEST(Tensor, PermuteSliceSelectExpand) {
  Tensor x = iota({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.at({3, 1, 2}), x.at({1, 2, 3}));
  Tensor s = x.slice(2, 1, 4, 2);  // columns 1 and 3
  EXPECT_EQ(s.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(s.at({1, 2, 1}), x.at({1, 2, 3}));
  EXPECT_EQ(x.slice(-1, -2, 4).size(-1), 2);
  EXPECT_EQ(x.select(1, -1).at({0, 0}), x.at({0, 2, 0}));
  Tensor e = iota({3, 1}).expand({2, 3, 4});
  EXPECT_EQ(e.strides()[0], 0);
  EXPECT_EQ(e.at({1, 2, 3}), 2.0);
  EXPECT_EQ(x.unsqueeze(1).shape(), (Shape{2, 1, 3, 4}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Shape{2, 3, 4, 1}));
  EXPECT_EQ(x.unsqueeze(1).squeeze(1).shape(), x.shape());
  EXPECT_THROW(x.expand({2, 5, 4}), Error);
  EXPECT_THROW(x.select(0, 2), Error);
  EXPECT_THROW(x.transpose(0, 3), Error);
  EXPECT_THROW(x.view({5, -1}), Error);
  EXPECT_THROW(x.permute({0, 0, 1}), Error);
}

TEST(Tensor, ReshapeOfExpandedViewCopiesOnlyWhenNeeded) {
  Tensor m = iota({2, 1, 1, 5}).expand({2, 3, 4, 5});
  Tensor r = m.reshape({6, 4, 5});  // stride pattern cannot be merged: copy
  EXPECT_EQ(r.at({4, 2, 3}), m.at({1, 1, 2, 3}));
  Tensor c = iota({1, 1, 4, 5}).expand({2, 3, 4, 5}).reshape({6, 4, 5});  // stays a view
  EXPECT_EQ(c.strides()[0], 0);
}

TEST(Tensor, DtypeConversionAndCopy) {
  Tensor x = iota({2, 3});
  Tensor f = x.to(DType::kFloat32);
  EXPECT_EQ(f.dtype(), DType::kFloat32);
  EXPECT_EQ(f.at({1, 2}), 5.0);
  Tensor b = x.to(DType::kBool);
  EXPECT_EQ(b.at({0, 0}), 0.0);
  EXPECT_EQ(b.at({0, 1}), 1.0);
  Tensor y = Tensor::zeros({3, 2}, DType::kFloat64);
  y.copy_from(x.transpose(0, 1));
  EXPECT_EQ(y.at({2, 1}), 5.0);
  EXPECT_THROW(f.data<double>(), Error);
}

TEST(Tensor, BFloat16RoundsToNearestEven) {
  // bfloat16 keeps 7 mantissa bits: around 1.0 its step is 2^-7.
  const float step = std::ldexp(1.0f, -7);
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(1.0f + step / 2), 0x3f80);      // tie: to the even 1.0
  EXPECT_EQ(float_to_bfloat16(1.0f + 3 * step / 2), 0x3f82);  // tie: to the even 1 + 2 step
  EXPECT_EQ(float_to_bfloat16(1.0f + step * 0.51f), 0x3f81);  // above the tie: up
  EXPECT_EQ(float_to_bfloat16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bfloat16(INFINITY), 0x7f80);
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(NAN))));
  EXPECT_EQ(float_to_bfloat16(3.4e38f), 0x7f80);  // beyond the largest bfloat16: inf
  const Tensor x =
      Tensor::from_vector({2, 2}, std::vector<float>{1.0f, 1.0f + step / 4, -3.5f, 1e-3f});
  const Tensor b = x.to(DType::kBFloat16);
  EXPECT_EQ(b.dtype(), DType::kBFloat16);
  EXPECT_EQ(dtype_size(b.dtype()), 2u);
  EXPECT_STREQ(dtype_name(b.dtype()), "bfloat16");
  const std::vector<double> back = b.to(DType::kFloat32).to_vector();
  EXPECT_EQ(back[0], 1.0);
  EXPECT_EQ(back[1], 1.0);
  EXPECT_EQ(back[2], -3.5);
  EXPECT_NEAR(back[3], 1e-3, 1e-3 * step);
  // Strided views convert through the general path with the same rounding.
  EXPECT_EQ(x.transpose(0, 1).to(DType::kBFloat16).to_vector(),
            b.transpose(0, 1).contiguous().to_vector());
}

TEST(Tensor, SeededRandomIsReproducible) {
  Generator a(42), b(42), c(7);
  Tensor x = Tensor::randn({1000}, a), y = Tensor::randn({1000}, b), z = Tensor::randn({1000}, c);
  EXPECT_EQ(max_abs_diff(x, y), 0.0);
  EXPECT_GT(max_abs_diff(x, z), 0.1);
  double mean = 0, sq = 0;
  for (double v : x.to_vector()) mean += v, sq += v * v;
  mean /= 1000;
  EXPECT_NEAR(mean, 0.0, 0.15);
  EXPECT_NEAR(sq / 1000, 1.0, 0.15);
  Tensor u = Tensor::rand({1000}, a, 2.0, 3.0);
  for (double v : u.to_vector()) EXPECT_TRUE(v >= 2.0 && v < 3.0);
}

TEST(Tensor, PrintsShapeAndRoundedValues) {
  Tensor x = Tensor::from_vector(
      {2, 2}, std::span<const double>(std::vector<double>{0.5061, 0.307, 0.1, 1.0}));
  const std::string s = x.to_string(2);
  EXPECT_NE(s.find("[[0.51, 0.31],"), std::string::npos) << s;
  EXPECT_NE(s.find("shape=[2, 2]"), std::string::npos) << s;
  EXPECT_NE(s.find("dtype=float64"), std::string::npos) << s;
  EXPECT_EQ(shape_str({2, 4, 8}), "[2, 4, 8]");
  // Large tensors are summarised.
  EXPECT_NE(Tensor::zeros({2000}).to_string().find("..."), std::string::npos);
}

TEST(Tensor, BroadcastShapes) {
  EXPECT_EQ(broadcast_shapes({2, 1, 4}, {3, 1}, "t"), (Shape{2, 3, 4}));
  EXPECT_THROW(broadcast_shapes({2, 3}, {4, 3}, "t"), Error);
  EXPECT_THROW(Tensor::empty({-1, 2}), Error);
}
