// nn::TransformerEncoderLayer / DecoderLayer / Encoder / Decoder / Transformer
// against the independent float64 reference in reference_blocks.h, for both
// norm orders, both activations, every layout, masks of both polarities and
// kinds, eval and train with dropout 0, float64 and float32; plus state_dict
// names and round trips, initialisation, dropout and error messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <tuple>

#include "nn/transformer_common.h"
#include "qkv/error.h"
#include "qkv/nn/transformer.h"
#include "reference_blocks.h"
#include "test_util.h"

namespace qkv::nn {
namespace {

using qkv_test::expect_error;

namespace ref = qkv::reference;
using ref::Layout;

constexpr int64_t kB = 2, kT = 5, kS = 4, kD = 8, kH = 2, kF = 12;

// Uniform values in [-0.5, 0.5] for every parameter, so that LayerNorm's
// affine parameters and all biases take part.
void randomize(const std::map<std::string, Tensor>& state, Generator& gen) {
  for (const auto& [name, t] : state) {
    Tensor dst = t;
    dst.copy_from(Tensor::rand(t.shape(), gen, -0.5, 0.5, t.dtype()));
  }
}

Tensor make_seq(Layout layout, int64_t T, Generator& gen, DType dtype) {
  return ref::randn_seq(layout, kB, T, kD, gen, dtype);
}

// max |out - expected| / max |expected|.
double relative_error(const Tensor& out, const ref::Seq& expected, Layout layout) {
  const ref::Seq got = ref::read_seq(out, layout);
  EXPECT_EQ(got.x.size(), expected.x.size());
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < got.x.size(); ++i) {
    diff = std::max(diff, std::abs(got.x[i] - expected.x[i]));
    scale = std::max(scale, std::abs(expected.x[i]));
  }
  return diff / scale;
}

double tolerance(DType dtype) { return dtype == DType::kFloat64 ? 1e-12 : 1e-5; }

enum class Masks { kNone, kBool, kFloat, kPerHead, kCausalHint };

struct MaskSet {
  Tensor attn, padding;
  bool is_causal = false;
};

// Masks for L queries against S keys; no query row is masked entirely.
MaskSet make_masks(Masks kind, Layout layout, int64_t L, int64_t S, Generator& gen, DType dtype) {
  MaskSet m;
  const bool batched = layout != Layout::kUnbatched;
  const int64_t B = batched ? kB : 1;
  auto padding_of = [&](bool as_bool) {
    // Batch b has S - b real keys (at least one remains).
    Tensor pad = as_bool ? Tensor::zeros({B, S}, DType::kBool) : Tensor::zeros({B, S}, dtype);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = S - b; s < S; ++s) pad.set({b, s}, as_bool ? 1.0 : -INFINITY);
    return batched ? pad : pad.select(0, 0);
  };
  switch (kind) {
    case Masks::kNone:
      break;
    case Masks::kBool:  // top-left causal (key 0 always visible) + padding
    case Masks::kCausalHint:
      m.attn = Tensor::zeros({L, S}, DType::kBool);
      for (int64_t l = 0; l < L; ++l)
        for (int64_t s = l + 1; s < S; ++s) m.attn.set({l, s}, 1.0);
      if (kind == Masks::kBool) m.padding = padding_of(true);
      m.is_causal = kind == Masks::kCausalHint;
      break;
    case Masks::kFloat:  // random additive values, some -inf, key 0 always open
      m.attn = Tensor::randn({L, S}, gen, dtype);
      for (int64_t l = 0; l < L; ++l)
        for (int64_t s = 1; s < S; ++s)
          if ((l + 2 * s) % 5 == 0) m.attn.set({l, s}, -INFINITY);
      m.padding = padding_of(false);
      break;
    case Masks::kPerHead:  // [B*H, L, S] bool, different per batch and head
      m.attn = Tensor::zeros({B * kH, L, S}, DType::kBool);
      for (int64_t bh = 0; bh < B * kH; ++bh)
        for (int64_t l = 0; l < L; ++l)
          for (int64_t s = 1; s < S; ++s)
            if ((bh + l + s) % 3 == 0) m.attn.set({bh, l, s}, 1.0);
      break;
  }
  return m;
}

// (norm_first, gelu, layout, masks, train, float64)
using Config = std::tuple<bool, bool, Layout, Masks, bool, bool>;

TransformerLayerOptions layer_options(const Config& c) {
  const auto& [norm_first, gelu, layout, masks, train, f64] = c;
  return {.d_model = kD,
          .nhead = kH,
          .dim_feedforward = kF,
          .dropout = 0.0,
          .activation = gelu ? Activation::kGelu : Activation::kRelu,
          .batch_first = layout == Layout::kBatchFirst,
          .norm_first = norm_first,
          .dtype = f64 ? DType::kFloat64 : DType::kFloat32};
}

ref::LayerConfig ref_config(const TransformerLayerOptions& o) {
  return {.H = o.nhead,
          .norm_first = o.norm_first,
          .gelu = o.activation == Activation::kGelu,
          .eps = o.layer_norm_eps};
}

class LayerTest : public ::testing::TestWithParam<Config> {
 protected:
  const TransformerLayerOptions o = layer_options(GetParam());

  // A Layer of options `o` whose parameters are uniform random from `gen`,
  // in training mode if the parameter says so.
  template <class Layer>
  Layer make_layer(Generator& gen) const {
    Layer layer(o, &gen);
    randomize(layer.state_dict(), gen);
    layer.train(std::get<4>(GetParam()));
    return layer;
  }
};

TEST_P(LayerTest, EncoderLayerMatchesReference) {
  const auto& [norm_first, gelu, layout, masks, train, f64] = GetParam();
  Generator gen(11);
  TransformerEncoderLayer layer = make_layer<TransformerEncoderLayer>(gen);
  const Tensor src = make_seq(layout, kT, gen, o.dtype);
  const MaskSet m = make_masks(masks, layout, kT, kT, gen, o.dtype);
  const Tensor out = layer.forward(
      src, {.src_mask = m.attn, .src_key_padding_mask = m.padding, .is_causal = m.is_causal});
  ASSERT_EQ(out.shape(), src.shape());
  ref::Params p = ref::read_params(layer.state_dict());
  const ref::Seq expected = ref::encoder_layer(ref::read_seq(src, layout), p, "", ref_config(o),
                                               ref::mha_mask(m.attn, m.padding, kH));
  EXPECT_LT(relative_error(out, expected, layout), tolerance(o.dtype));
}

TEST_P(LayerTest, DecoderLayerMatchesReference) {
  const auto& [norm_first, gelu, layout, masks, train, f64] = GetParam();
  Generator gen(12);
  TransformerDecoderLayer layer = make_layer<TransformerDecoderLayer>(gen);
  const Tensor tgt = make_seq(layout, kT, gen, o.dtype);
  const Tensor memory = make_seq(layout, kS, gen, o.dtype);
  const MaskSet self_m = make_masks(masks, layout, kT, kT, gen, o.dtype);
  // Cross-attention masks of the same kind (the causal hint applies to self-attention only).
  const MaskSet cross_m =
      make_masks(masks == Masks::kCausalHint ? Masks::kFloat : masks, layout, kT, kS, gen, o.dtype);
  const Tensor out = layer.forward(tgt, memory,
                                   {.tgt_mask = self_m.attn,
                                    .memory_mask = cross_m.attn,
                                    .tgt_key_padding_mask = self_m.padding,
                                    .memory_key_padding_mask = cross_m.padding,
                                    .tgt_is_causal = self_m.is_causal});
  ASSERT_EQ(out.shape(), tgt.shape());
  ref::Params p = ref::read_params(layer.state_dict());
  const ref::Seq expected =
      ref::decoder_layer(ref::read_seq(tgt, layout), ref::read_seq(memory, layout), p, "",
                         ref_config(o), ref::mha_mask(self_m.attn, self_m.padding, kH),
                         ref::mha_mask(cross_m.attn, cross_m.padding, kH));
  EXPECT_LT(relative_error(out, expected, layout), tolerance(o.dtype));
}

std::string config_name(const ::testing::TestParamInfo<Config>& info) {
  const auto& [norm_first, gelu, layout, masks, train, f64] = info.param;
  const char* layouts[] = {"SeqFirst", "BatchFirst", "Unbatched"};
  const char* mask_names[] = {"NoMask", "BoolMasks", "FloatMasks", "PerHeadMask", "CausalHint"};
  return std::string(norm_first ? "NormFirst" : "PostNorm") + (gelu ? "Gelu" : "Relu") +
         layouts[static_cast<int>(layout)] + mask_names[static_cast<int>(masks)] +
         (train ? "Train" : "Eval") + (f64 ? "F64" : "F32");
}

INSTANTIATE_TEST_SUITE_P(
    AllConfigs, LayerTest,
    ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                       ::testing::Values(Layout::kSeqFirst, Layout::kBatchFirst,
                                         Layout::kUnbatched),
                       ::testing::Values(Masks::kNone, Masks::kBool, Masks::kFloat, Masks::kPerHead,
                                         Masks::kCausalHint),
                       ::testing::Bool(), ::testing::Bool()),
    config_name);

// --- Stacks --------------------------------------------------------------------------

TEST(TransformerEncoder, ClonesTheLayerAndAppliesTheFinalNorm) {
  Generator gen(3);
  const TransformerLayerOptions o{
      .d_model = kD, .nhead = kH, .dim_feedforward = kF, .dropout = 0.0, .dtype = DType::kFloat64};
  TransformerEncoder encoder({.layer = o, .num_layers = 3, .norm = true}, &gen);
  ASSERT_EQ(encoder.layers().size(), 3u);
  // torch deep-copies one layer: all layers start with the same values.
  const auto s0 = encoder.layers()[0].state_dict(), s2 = encoder.layers()[2].state_dict();
  for (const auto& [name, t] : s0) {
    EXPECT_EQ(max_abs_diff(t, s2.at(name)), 0.0) << name;
    EXPECT_FALSE(t.shares_storage_with(s2.at(name))) << name;
  }
  randomize(encoder.state_dict(), gen);
  const Tensor src = make_seq(Layout::kSeqFirst, kT, gen, o.dtype);
  const MaskSet m = make_masks(Masks::kBool, Layout::kSeqFirst, kT, kT, gen, o.dtype);
  // The mask is the causal one: detected, as torch's _detect_is_causal_mask.
  const Tensor out = encoder.forward(src, {.mask = m.attn, .src_key_padding_mask = m.padding});
  ref::Params p = ref::read_params(encoder.state_dict());
  ref::Seq x = ref::read_seq(src, Layout::kSeqFirst);
  for (int i = 0; i < 3; ++i)
    x = ref::encoder_layer(x, p, "layers." + std::to_string(i) + ".", ref_config(o),
                           ref::mha_mask(m.attn, m.padding, kH));
  x.x = ref::norm(x.x, kD, p, "norm", o.layer_norm_eps);
  EXPECT_LT(relative_error(out, x, Layout::kSeqFirst), 1e-12);
}

TEST(TransformerEncoder, AnExplicitCausalHintReplacesTheMaskAsInTorch) {
  // torch: with is_causal=True, no key_padding_mask and need_weights=False,
  // MultiheadAttention ignores attn_mask and applies the causal mask.
  Generator gen(4);
  const TransformerLayerOptions o{
      .d_model = kD, .nhead = kH, .dim_feedforward = kF, .dropout = 0.0, .dtype = DType::kFloat64};
  TransformerEncoder encoder({.layer = o, .num_layers = 1}, &gen);
  randomize(encoder.state_dict(), gen);
  const Tensor src = make_seq(Layout::kSeqFirst, kT, gen, o.dtype);
  const Tensor not_causal = Tensor::zeros({kT, kT}, DType::kBool);
  const Tensor out = encoder.forward(src, {.mask = not_causal, .is_causal = true});
  const MaskSet causal = make_masks(Masks::kCausalHint, Layout::kSeqFirst, kT, kT, gen, o.dtype);
  ref::Params p = ref::read_params(encoder.state_dict());
  const ref::Seq expected =
      ref::encoder_layer(ref::read_seq(src, Layout::kSeqFirst), p, "layers.0.", ref_config(o),
                         ref::mha_mask(causal.attn, Tensor(), kH));
  EXPECT_LT(relative_error(out, expected, Layout::kSeqFirst), 1e-12);
}

TEST(TransformerEncoder, DetectsTheCausalMaskLikeTorch) {
  const Tensor causal_float = Transformer::generate_square_subsequent_mask(4, DType::kFloat64);
  EXPECT_TRUE(detail::detect_is_causal_mask(causal_float, std::nullopt, 4));
  EXPECT_FALSE(detail::detect_is_causal_mask(causal_float, std::nullopt, 5));  // wrong size
  EXPECT_FALSE(detail::detect_is_causal_mask(causal_float, false, 4));         // hint wins
  EXPECT_TRUE(detail::detect_is_causal_mask(Tensor(), true, 4));
  Tensor causal_bool = Tensor::zeros({4, 4}, DType::kBool);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = i + 1; j < 4; ++j) causal_bool.set({i, j}, 1.0);
  EXPECT_TRUE(detail::detect_is_causal_mask(causal_bool, std::nullopt, 4));
  causal_bool.set({3, 0}, 1.0);
  EXPECT_FALSE(detail::detect_is_causal_mask(causal_bool, std::nullopt, 4));
  Tensor large_negative = causal_float.clone();
  large_negative.set({0, 3}, -1e9);  // not -inf: not the causal mask
  EXPECT_FALSE(detail::detect_is_causal_mask(large_negative, std::nullopt, 4));
  // generate_square_subsequent_mask: 0 on and below the diagonal, -inf above.
  EXPECT_EQ(causal_float.at({2, 2}), 0.0);
  EXPECT_EQ(causal_float.at({2, 1}), 0.0);
  EXPECT_EQ(causal_float.at({2, 3}), -INFINITY);
}

TEST(Transformer, MatchesReferenceWithAllMasks) {
  for (bool norm_first : {false, true}) {
    SCOPED_TRACE(norm_first ? "norm_first" : "post-norm");
    Generator gen(5);
    TransformerOptions o{.d_model = kD,
                         .nhead = kH,
                         .num_encoder_layers = 2,
                         .num_decoder_layers = 2,
                         .dim_feedforward = kF,
                         .dropout = 0.0,
                         .activation = Activation::kGelu,
                         .batch_first = true,
                         .norm_first = norm_first,
                         .dtype = DType::kFloat64};
    Transformer model(o, &gen);
    randomize(model.state_dict(), gen);
    const Tensor src = make_seq(Layout::kBatchFirst, kS, gen, o.dtype);
    const Tensor tgt = make_seq(Layout::kBatchFirst, kT, gen, o.dtype);
    const MaskSet src_m = make_masks(Masks::kFloat, Layout::kBatchFirst, kS, kS, gen, o.dtype);
    const MaskSet mem_m = make_masks(Masks::kBool, Layout::kBatchFirst, kT, kS, gen, o.dtype);
    const Tensor tgt_mask = Transformer::generate_square_subsequent_mask(kT, o.dtype);
    const Tensor tgt_padding =
        make_masks(Masks::kBool, Layout::kBatchFirst, kT, kT, gen, o.dtype).padding;
    const Tensor out = model.forward(src, tgt,
                                     {.src_mask = src_m.attn,
                                      .tgt_mask = tgt_mask,
                                      .memory_mask = mem_m.attn,
                                      .src_key_padding_mask = src_m.padding,
                                      .tgt_key_padding_mask = tgt_padding,
                                      .memory_key_padding_mask = mem_m.padding});
    ref::Params p = ref::read_params(model.state_dict());
    const ref::LayerConfig c{.H = kH, .norm_first = norm_first, .gelu = true};
    ref::Seq memory = ref::read_seq(src, Layout::kBatchFirst);
    for (int i = 0; i < 2; ++i)
      memory = ref::encoder_layer(memory, p, "encoder.layers." + std::to_string(i) + ".", c,
                                  ref::mha_mask(src_m.attn, src_m.padding, kH));
    memory.x = ref::norm(memory.x, kD, p, "encoder.norm", 1e-5);
    ref::Seq x = ref::read_seq(tgt, Layout::kBatchFirst);
    for (int i = 0; i < 2; ++i)
      x = ref::decoder_layer(x, memory, p, "decoder.layers." + std::to_string(i) + ".", c,
                             ref::mha_mask(tgt_mask, tgt_padding, kH),
                             ref::mha_mask(mem_m.attn, mem_m.padding, kH));
    x.x = ref::norm(x.x, kD, p, "decoder.norm", 1e-5);
    EXPECT_LT(relative_error(out, x, Layout::kBatchFirst), 1e-12);
  }
}

TEST(Transformer, UsesXavierInitialisationAndTorchNames) {
  Generator gen(6);
  Transformer model({.d_model = 16,
                     .nhead = 4,
                     .num_encoder_layers = 2,
                     .num_decoder_layers = 1,
                     .dim_feedforward = 32},
                    &gen);
  const auto state = model.state_dict();
  // 12 per encoder layer, 18 per decoder layer, 2 + 2 final norm.
  EXPECT_EQ(state.size(), 2u * 12u + 18u + 4u);
  for (const char* name :
       {"encoder.layers.0.self_attn.in_proj_weight", "encoder.layers.1.linear2.bias",
        "encoder.norm.weight", "encoder.norm.bias", "decoder.layers.0.multihead_attn.in_proj_bias",
        "decoder.layers.0.norm3.weight", "decoder.norm.bias"})
    EXPECT_TRUE(state.count(name)) << name;
  const Tensor w = state.at("encoder.layers.0.linear1.weight");  // [32, 16]
  const double bound = std::sqrt(6.0 / (16 + 32));
  double max_abs = 0.0;
  for (double v : w.to_vector()) max_abs = std::max(max_abs, std::abs(v));
  EXPECT_LE(max_abs, bound);
  EXPECT_GT(max_abs, 0.8 * bound);
  // After xavier the cloned layers differ.
  EXPECT_GT(max_abs_diff(w, state.at("encoder.layers.1.linear1.weight")), 0.0);
  EXPECT_EQ(state.at("encoder.layers.0.self_attn.in_proj_bias").to_vector(),
            std::vector<double>(48, 0.0));
}

// --- Modes, dropout, state_dict ----------------------------------------------------

TEST(TransformerEncoderLayer, DropoutActsOnlyInTrainingMode) {
  Generator gen(7), drop_a(100), drop_b(100);
  TransformerEncoderLayer layer(
      {.d_model = kD, .nhead = kH, .dim_feedforward = kF, .dropout = 0.5, .batch_first = true},
      &gen);
  const Tensor src = make_seq(Layout::kBatchFirst, kT, gen, DType::kFloat32);
  layer.eval();
  const Tensor eval_a = layer.forward(src), eval_b = layer.forward(src);
  EXPECT_EQ(max_abs_diff(eval_a, eval_b), 0.0);
  layer.train();
  EXPECT_TRUE(layer.is_training());
  EXPECT_TRUE(layer.self_attn().is_training());
  layer.set_generator(&drop_a);
  const Tensor train_a = layer.forward(src);
  layer.set_generator(&drop_b);
  const Tensor train_b = layer.forward(src);
  EXPECT_GT(max_abs_diff(train_a, eval_a), 1e-3);
  EXPECT_EQ(max_abs_diff(train_a, train_b), 0.0);  // same seed, same drops
  layer.eval();
  EXPECT_FALSE(layer.self_attn().is_training());
}

TEST(TransformerEncoderLayer, StateDictHasTorchNames) {
  TransformerEncoderLayer layer({.d_model = kD, .nhead = kH, .dim_feedforward = kF});
  const std::set<std::string> expected = {"self_attn.in_proj_weight",
                                          "self_attn.in_proj_bias",
                                          "self_attn.out_proj.weight",
                                          "self_attn.out_proj.bias",
                                          "linear1.weight",
                                          "linear1.bias",
                                          "linear2.weight",
                                          "linear2.bias",
                                          "norm1.weight",
                                          "norm1.bias",
                                          "norm2.weight",
                                          "norm2.bias"};
  EXPECT_EQ(qkv_test::state_names(layer), expected);
  EXPECT_EQ(layer.state_dict().at("linear1.weight").shape(), (Shape{kF, kD}));

  TransformerDecoderLayer no_bias(
      {.d_model = kD, .nhead = kH, .dim_feedforward = kF, .bias = false});
  const std::set<std::string> expected_no_bias = {"self_attn.in_proj_weight",
                                                  "self_attn.out_proj.weight",
                                                  "multihead_attn.in_proj_weight",
                                                  "multihead_attn.out_proj.weight",
                                                  "linear1.weight",
                                                  "linear2.weight",
                                                  "norm1.weight",
                                                  "norm2.weight",
                                                  "norm3.weight"};
  EXPECT_EQ(qkv_test::state_names(no_bias), expected_no_bias);
}

TEST(TransformerDecoder, StateDictRoundTripGivesTheSameOutputs) {
  Generator gen_a(8), gen_b(9);
  const TransformerLayerOptions o{
      .d_model = kD, .nhead = kH, .dim_feedforward = kF, .dropout = 0.0, .norm_first = true};
  TransformerDecoder a({.layer = o, .num_layers = 2, .norm = true}, &gen_a);
  TransformerDecoder b({.layer = o, .num_layers = 2, .norm = true}, &gen_b);
  randomize(a.state_dict(), gen_a);
  const Tensor tgt = make_seq(Layout::kSeqFirst, kT, gen_a, DType::kFloat32);
  const Tensor memory = make_seq(Layout::kSeqFirst, kS, gen_a, DType::kFloat32);
  EXPECT_GT(max_abs_diff(a.forward(tgt, memory), b.forward(tgt, memory)), 1e-3);
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(max_abs_diff(a.forward(tgt, memory), b.forward(tgt, memory)), 0.0);
  // Loaded values are copies, not shared.
  EXPECT_FALSE(
      a.state_dict().at("norm.weight").shares_storage_with(b.state_dict().at("norm.weight")));
}

TEST(TransformerEncoderLayer, LoadStateDictIsStrictAndAtomic) {
  TransformerEncoderLayer layer({.d_model = kD, .nhead = kH, .dim_feedforward = kF});
  const Tensor before = layer.state_dict().at("linear1.weight").clone();
  auto state = layer.state_dict();
  for (auto& [name, t] : state) t = Tensor::zeros(t.shape());
  state.erase("norm2.bias");
  state["norm3.weight"] = Tensor::ones({kD});
  expect_error([&] { layer.load_state_dict(state); },
               {"missing key(s) in state_dict: \"norm2.bias\"",
                "unexpected key(s) in state_dict: \"norm3.weight\""});
  EXPECT_EQ(max_abs_diff(layer.state_dict().at("linear1.weight"), before), 0.0);
  state = layer.state_dict();
  state["linear1.weight"] = Tensor::zeros({kD, kF});
  expect_error([&] { layer.load_state_dict(state); }, "size mismatch for \"linear1.weight\"");
}

// --- Errors --------------------------------------------------------------------------

TEST(TransformerErrors, BadOptionsAndInputsAreReported) {
  expect_error([] { TransformerEncoderLayer({.d_model = 10, .nhead = 3}); },
               "d_model (10) must be divisible by nhead (3)");
  expect_error([] { TransformerDecoderLayer({.d_model = 8, .nhead = 2, .dropout = 1.5}); },
               "dropout probability must be in [0, 1]");
  expect_error([] { activation_from_string("tanh"); }, "\"tanh\"");
  expect_error([] { TransformerEncoder({.layer = {.d_model = 8}, .num_layers = 0}); },
               "num_layers must be > 0");

  TransformerEncoderLayer enc({.d_model = kD, .nhead = kH, .dim_feedforward = kF});
  expect_error(
      [&] {
        enc.forward(Tensor::zeros({kT, kB, kD + 1}));
      },
      "TransformerEncoderLayer: src must be [L, B, d_model] or unbatched [L, d_model]");
  expect_error(
      [&] {
        enc.forward(Tensor::zeros({kT, kB, kD}, DType::kFloat64));
      },
      "src must have the module's dtype float32, got float64", ErrorKind::kType);
  expect_error(
      [&] {
        enc.forward(Tensor::zeros({kT, kB, kD}), {.src_mask = Tensor::zeros({3, 3})});
      },
      "attn_mask must have shape [L, S] = [5, 5], got [3, 3]");
  expect_error(
      [&] {
        enc.forward(Tensor::zeros({kT, kB, kD}), {.is_causal = true});
      },
      "is_causal is only a hint");

  TransformerDecoderLayer dec({.d_model = kD, .nhead = kH, .dim_feedforward = kF});
  expect_error(
      [&] {
        dec.forward(Tensor::zeros({kT, kB, kD}), Tensor::zeros({kS, kB + 1, kD}));
      },
      "tgt and memory must have the same batch size");
  expect_error(
      [&] {
        dec.forward(Tensor::zeros({kT, kB, kD}), Tensor::zeros({kS, kD}));
      },
      "must both be batched (3-D) or both unbatched (2-D)");

  Transformer model({.d_model = kD,
                     .nhead = kH,
                     .num_encoder_layers = 1,
                     .num_decoder_layers = 1,
                     .dim_feedforward = kF});
  expect_error(
      [&] {
        model.forward(Tensor::zeros({kS, kB, kD}), Tensor::zeros({kT, kB + 1, kD}));
      },
      "the batch number of src and tgt must be equal");
  expect_error([&] { model.forward(Tensor::zeros({kS, kB, kD}), Tensor()); }, "tgt is undefined");
}

}  // namespace
}  // namespace qkv::nn
