// The blocks' inference paths (forward_into on a workspace, the decoding
// step's _into calls) against the general forward they stand in for.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "qkv/nn/decoder_block.h"
#include "qkv/nn/feed_forward.h"
#include "qkv/nn/positional_encoding.h"
#include "qkv/nn/transformer.h"
#include "qkv/nn/workspace.h"

namespace qkv::nn {
namespace {

constexpr int64_t kB = 3, kL = 7, kD = 8, kH = 2, kF = 12;

TransformerLayerOptions layer_options(bool norm_first, Activation activation, DType dtype) {
  return {.d_model = kD,
          .nhead = kH,
          .dim_feedforward = kF,
          .dropout = 0.1,  // eval mode: not applied
          .activation = activation,
          .batch_first = true,
          .norm_first = norm_first,
          .dtype = dtype};
}

double tolerance(DType dtype) { return dtype == DType::kFloat64 ? 1e-12 : 2e-5; }

class EncoderLayerInference : public ::testing::TestWithParam<std::tuple<bool, Activation, DType>> {
};

// forward() with a record always takes the general path (MultiheadAttention's
// masks and projections, separate norms); forward_into must give its result.
TEST_P(EncoderLayerInference, ForwardIntoMatchesTheGeneralPath) {
  const auto [norm_first, activation, dtype] = GetParam();
  Generator gen(21);
  TransformerEncoderLayer layer(layer_options(norm_first, activation, dtype), &gen);
  layer.eval();
  const Tensor src = Tensor::randn({kB, kL, kD}, gen, dtype);
  const Tensor original = src.clone();
  TransformerEncoderLayerRecord record;
  const Tensor general = layer.forward(src, {}, &record);

  Workspace workspace;
  Tensor x = src;
  layer.forward_into(x, Tensor(), /*causal=*/false, workspace);
  EXPECT_LE(max_abs_diff(x, general), tolerance(dtype));
  // forward() without a record or masks runs forward_into itself.
  EXPECT_LE(max_abs_diff(layer.forward(src), general), tolerance(dtype));
  EXPECT_EQ(max_abs_diff(src, original), 0.0);  // the input is left as it was

  // Padding: a keep mask [B, 1, 1, L] is the key padding mask's complement.
  Tensor padding = Tensor::zeros({kB, kL}, DType::kBool);
  Tensor keep = Tensor::ones({kB, 1, 1, kL}, DType::kBool);
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t l = kL - b; l < kL; ++l) {  // sequence b ends b positions early
      padding.set({b, l}, 1.0);
      keep.set({b, 0, 0, l}, 0.0);
    }
  const Tensor padded = layer.forward(src, {.src_key_padding_mask = padding});
  x = src;
  layer.forward_into(x, keep, /*causal=*/false, workspace);
  EXPECT_LE(max_abs_diff(x, padded), tolerance(dtype));

  // Causal: the mask the general path detects.
  Tensor causal = Tensor::zeros({kL, kL}, dtype);
  for (int64_t i = 0; i < kL; ++i)
    for (int64_t j = i + 1; j < kL; ++j) causal.set({i, j}, -INFINITY);
  const Tensor masked = layer.forward(src, {.src_mask = causal, .is_causal = true});
  x = src;
  layer.forward_into(x, Tensor(), /*causal=*/true, workspace);
  EXPECT_LE(max_abs_diff(x, masked), tolerance(dtype));
}

INSTANTIATE_TEST_SUITE_P(AllKinds, EncoderLayerInference,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(Activation::kRelu, Activation::kGelu,
                                                              Activation::kGeluTanh,
                                                              Activation::kSilu),
                                            ::testing::Values(DType::kFloat32, DType::kFloat64)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "PreNorm_" : "PostNorm_") +
                                  activation_name(std::get<1>(info.param)) + "_" +
                                  dtype_name(std::get<2>(info.param));
                         });

TEST(EncoderLayerInference, TrainingModeWithDropoutKeepsTheGeneralPath) {
  Generator gen(22);
  TransformerEncoderLayer layer(layer_options(false, Activation::kRelu, DType::kFloat32), &gen);
  Workspace workspace;
  Tensor x = Tensor::randn({kB, kL, kD}, gen);
  EXPECT_THROW(layer.forward_into(x, Tensor(), false, workspace), Error);
}

TEST(FeedForwardInference, ForwardIntoMatchesForward) {
  Generator gen(23);
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SwiGLUFeedForward swiglu({.d_model = kD, .hidden_dim = kF, .dtype = dtype}, &gen);
    FeedForward ffn(
        {.d_model = kD, .dim_feedforward = kF, .activation = Activation::kGelu, .dtype = dtype},
        &gen);
    const Tensor x = Tensor::randn({kB, kD}, gen, dtype);
    Tensor out = Tensor::empty({kB, kD}, dtype), hidden = Tensor::empty({kB, kF}, dtype),
           gate = Tensor::empty({kB, kF}, dtype);
    swiglu.forward_into(out, x, hidden, gate);
    EXPECT_LE(max_abs_diff(out, swiglu.forward(x)), tolerance(dtype));
    ffn.forward_into(out, x, hidden);
    EXPECT_LE(max_abs_diff(out, ffn.forward(x)), tolerance(dtype));
  }
}

// A decoding step of the block equals its cached forward of the same token:
// the same keys and values go into the cache, the same output comes out.
TEST(DecoderBlockInference, StepIntoMatchesTheCachedForward) {
  for (FeedForwardKind ffn : {FeedForwardKind::kSwiGLU, FeedForwardKind::kGelu}) {
    const DecoderBlockOptions o{
        .attention = {.embed_dim = kD, .num_heads = 4, .num_kv_heads = 2},
        .ffn_hidden = kF,
        .norm = ffn == FeedForwardKind::kGelu ? NormKind::kLayerNorm : NormKind::kRMSNorm,
        .ffn = ffn};
    Generator gen(25);
    DecoderBlock block(o, &gen);
    const KVCacheOptions cache_options{
        .num_layers = 1, .batch_size = kB, .num_kv_heads = 2, .max_len = 8, .head_dim = 2};
    KVCache by_forward(cache_options), by_step(cache_options);
    const Tensor prompt = Tensor::randn({kB, 3, kD}, gen);
    block.forward(prompt, 0, &by_forward, 0);
    block.forward(prompt, 0, &by_step, 0);
    const Tensor token = Tensor::randn({kB, kD}, gen);
    const Tensor expected = block.forward(token.view({kB, 1, kD}), 3, &by_forward, 0);
    DecoderBuffers buffers(o, kB);
    Tensor x = token.clone().view({kB, 1, kD});
    const int64_t position = 3;
    block.forward_into(x, {&position, 1}, {.shared = &by_step}, buffers);
    EXPECT_LE(max_abs_diff(x, expected), 2e-5);
    EXPECT_EQ(by_step.length(), 4);
    EXPECT_LE(max_abs_diff(by_step.keys(0), by_forward.keys(0)), 2e-6);
  }
}

TEST(RotaryInference, RotateInPlaceIsForwardAtOnePosition) {
  for (RopeStyle style : {RopeStyle::kHalfSplit, RopeStyle::kInterleaved}) {
    RotaryEmbedding rope({.head_dim = 8, .base = 500.0, .style = style});
    Generator gen(24);
    const Tensor rows = Tensor::randn({2, 3, 1, 8}, gen);  // [B, H, L = 1, E]
    Tensor in_place = rows.clone();
    rope.rotate_in_place(in_place, 11);
    // The same arithmetic, so the same bits.
    EXPECT_EQ(max_abs_diff(in_place, rope.forward(rows, 11)), 0.0);
  }
}

}  // namespace
}  // namespace qkv::nn
