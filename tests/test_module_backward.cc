// Backward passes of the nn modules (forward with a record, backward into the
// modules' gradient buffers) against float64 central finite differences of
// their inference forwards.
//
// Each case defines loss = Σ forward(inputs) ∘ R for a fixed random R, so
// ∂loss/∂output = R is the grad_output given to backward(). Every parameter
// starts random (not torch's 1/0 for norms and zero biases), and every
// element of every input and parameter is differentiated. With dropout, the
// generator is reseeded before each forward, so the finite differences see
// the masks that the recorded forward drew: the backward must replay them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "finite_differences.h"
#include "qkv/functional.h"
#include "qkv/nn/embedding.h"
#include "qkv/nn/feed_forward.h"
#include "qkv/nn/layer_norm.h"
#include "qkv/nn/linear.h"
#include "qkv/nn/multihead_attention.h"
#include "qkv/nn/rms_norm.h"
#include "qkv/nn/transformer.h"

namespace qkv {
namespace {

constexpr DType kF64 = DType::kFloat64;
constexpr uint64_t kDropoutSeed = 1234;

using namespace fd;

Tensor randn(const Shape& shape, Generator& gen) { return Tensor::randn(shape, gen, kF64); }

// Every parameter random, so that no gradient hides behind a 0 or 1.
void randomize(std::vector<nn::Parameter> params, Generator& gen) {
  for (nn::Parameter& p : params) p.value.copy_from(Tensor::randn(p.value.shape(), gen, kF64));
}

// The module's parameters as targets.
void add_parameters(std::vector<Target>& targets, const std::vector<nn::Parameter>& params) {
  for (const nn::Parameter& p : params) targets.push_back({p.name, p.value, p.grad});
}

Tensor bool_mask(const Shape& shape, Generator& gen, double p_true) {
  std::vector<bool> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = gen.uniform() < p_true;
  return Tensor::from_bools(shape, v);
}

// --- Linear, norms, embedding --------------------------------------------------------

TEST(ModuleBackward, Linear) {
  for (bool bias : {true, false}) {
    Generator gen(1);
    nn::Linear lin({.in_features = 5, .out_features = 3, .bias = bias, .dtype = kF64}, &gen);
    const Tensor x = randn({2, 4, 5}, gen), r = randn({2, 4, 3}, gen);
    nn::LinearRecord rec;
    const Tensor y = lin.forward(x, &rec);
    EXPECT_EQ(max_abs_diff(y, lin.forward(x)), 0.0);
    const Tensor gx = lin.backward(r, rec);
    std::vector<Target> targets{{"x", x, gx}};
    add_parameters(targets, lin.parameters());
    EXPECT_EQ(targets.size(), bias ? 3u : 2u);
    check_fd("Linear", targets, [&] { return weighted_sum(lin.forward(x), r); });
  }
}

// A norm's backward to its input x [shape] and its parameters (randomized
// first), with the record type `Record` of its forward.
template <class Record, class Norm>
void check_norm(const std::string& name, Norm& norm, const Shape& shape, Generator& gen) {
  randomize(norm.parameters(), gen);
  const Tensor x = randn(shape, gen), r = randn(shape, gen);
  Record rec;
  norm.forward(x, &rec);
  std::vector<Target> targets{{"x", x, norm.backward(r, rec)}};
  add_parameters(targets, norm.parameters());
  check_fd(name, targets, [&] { return weighted_sum(norm.forward(x), r); });
}

TEST(ModuleBackward, LayerNormAndRMSNorm) {
  Generator gen(2);
  for (bool bias : {true, false}) {
    nn::LayerNorm norm({.normalized_shape = {6}, .eps = 1e-5, .bias = bias, .dtype = kF64});
    check_norm<nn::LayerNormRecord>("LayerNorm", norm, {3, 2, 6}, gen);
  }
  nn::RMSNorm rms({.normalized_shape = {2, 3}, .eps = 1e-6, .dtype = kF64});
  check_norm<nn::RMSNormRecord>("RMSNorm", rms, {4, 2, 3}, gen);
}

TEST(ModuleBackward, EmbeddingSkipsPaddingRow) {
  Generator gen(3);
  nn::Embedding emb({.num_embeddings = 7, .embedding_dim = 4, .padding_idx = 2, .dtype = kF64},
                    &gen);
  const std::vector<int64_t> ids{1, 2, 5, 1, 0, 2};
  const Tensor r = randn({2, 3, 4}, gen);
  nn::EmbeddingRecord rec;
  emb.forward(ids, {2, 3}, &rec);
  emb.backward(r, rec);
  const nn::Parameter weight = emb.parameters().at(0);
  // torch: the padding row never learns; every other row is the finite difference.
  for (int64_t d = 0; d < 4; ++d) EXPECT_EQ(weight.grad.at({2, d}), 0.0);
  Tensor analytic = weight.grad.clone();
  // The fd of the padding row is what the lookup would give; compare it with
  // the scatter-add of its rows instead, then check the rest by fd.
  const std::vector<double> rv = r.to_vector();
  for (int64_t d = 0; d < 4; ++d) analytic.set({2, d}, rv[1 * 4 + d] + rv[5 * 4 + d]);
  check_fd("Embedding", {{"weight", weight.value, analytic}}, [&] {
    return weighted_sum(emb.forward(ids, {2, 3}), r);
  });
}

// --- Feed-forward blocks --------------------------------------------------------------

TEST(ModuleBackward, FeedForward) {
  for (Activation act : {Activation::kRelu, Activation::kGelu})
    for (double p : {0.0, 0.4}) {
      Generator gen(4);
      nn::FeedForward ff(
          {.d_model = 4, .dim_feedforward = 6, .dropout = p, .activation = act, .dtype = kF64},
          &gen);
      Generator drop(kDropoutSeed);
      ff.set_generator(&drop);
      const Tensor x = randn({3, 4}, gen), r = randn({3, 4}, gen);
      nn::FeedForwardRecord rec;
      drop.manual_seed(kDropoutSeed);
      const Tensor y = ff.forward(x, &rec);
      EXPECT_EQ(rec.keep_mask.defined(), p > 0.0);
      std::vector<Target> targets{{"x", x, ff.backward(r, rec)}};
      add_parameters(targets, ff.parameters());
      auto loss = [&] {
        drop.manual_seed(kDropoutSeed);
        return weighted_sum(ff.forward(x), r);
      };
      EXPECT_EQ(weighted_sum(y, r), loss());  // same masks with and without a record
      check_fd("FeedForward", targets, loss);
    }
}

TEST(ModuleBackward, SwiGLUFeedForward) {
  for (double p : {0.0, 0.3}) {
    Generator gen(5);
    nn::SwiGLUFeedForward ff(
        {.d_model = 4, .hidden_dim = 5, .bias = true, .dropout = p, .dtype = kF64}, &gen);
    Generator drop(kDropoutSeed);
    ff.set_generator(&drop);
    const Tensor x = randn({2, 3, 4}, gen), r = randn({2, 3, 4}, gen);
    nn::SwiGLUFeedForwardRecord rec;
    drop.manual_seed(kDropoutSeed);
    ff.forward(x, &rec);
    std::vector<Target> targets{{"x", x, ff.backward(r, rec)}};
    add_parameters(targets, ff.parameters());
    EXPECT_EQ(targets.size(), 7u);
    check_fd("SwiGLUFeedForward", targets, [&] {
      drop.manual_seed(kDropoutSeed);
      return weighted_sum(ff.forward(x), r);
    });
  }
}

// --- MultiheadAttention ---------------------------------------------------------------

struct MhaCase {
  std::string name;
  nn::MultiheadAttentionOptions options;
  bool batched = true;
  bool self_attention = false;  // query = key = value (one input, gradients summed)
  int64_t L = 3, S = 4, B = 2;
  // Builds the forward arguments (masks) once the sizes are known.
  std::function<nn::MultiheadAttentionForward(Generator&, const MhaCase&)> args;
};

Shape seq_shape(const MhaCase& c, int64_t len, int64_t feat) {
  if (!c.batched) return {len, feat};
  return c.options.batch_first ? Shape{c.B, len, feat} : Shape{len, c.B, feat};
}

void run_mha_case(const MhaCase& c) {
  SCOPED_TRACE(c.name);
  Generator gen(6);
  nn::MultiheadAttentionOptions o = c.options;
  o.dtype = kF64;
  nn::MultiheadAttention mha(o, &gen);
  randomize(mha.parameters(), gen);
  Generator drop(kDropoutSeed);
  mha.set_generator(&drop);
  const int64_t D = o.embed_dim, kdim = o.kdim ? o.kdim : D, vdim = o.vdim ? o.vdim : D;
  const int64_t S = c.self_attention ? c.L : c.S;
  const Tensor query = randn(seq_shape(c, c.L, D), gen);
  const Tensor key = c.self_attention ? query : randn(seq_shape(c, S, kdim), gen);
  const Tensor value = c.self_attention ? query : randn(seq_shape(c, S, vdim), gen);
  const nn::MultiheadAttentionForward args =
      c.args ? c.args(gen, c) : nn::MultiheadAttentionForward{};
  const Tensor r = randn(query.shape(), gen);

  nn::MultiheadAttentionRecord rec;
  drop.manual_seed(kDropoutSeed);
  const Tensor out = mha.forward(query, key, value, args, &rec).output;
  // Self-attention goes through self_attention_backward (one product per
  // packed projection); its result must be the sum of backward()'s three.
  nn::MultiheadAttentionInputGradients g;
  Tensor grad_x;
  if (c.self_attention)
    grad_x = mha.self_attention_backward(r, rec);
  else
    g = mha.backward(r, rec);
  auto loss = [&] {
    drop.manual_seed(kDropoutSeed);
    return weighted_sum(mha.forward(query, key, value, args).output, r);
  };
  EXPECT_EQ(weighted_sum(out, r), loss());
  if (o.dropout > 0.0) {  // dropout really dropped something
    const double trained = loss();
    mha.eval();
    EXPECT_NE(weighted_sum(mha.forward(query, key, value, args).output, r), trained);
    mha.train();
  }
  std::vector<Target> targets;
  if (c.self_attention)
    targets.push_back({"x", query, grad_x});
  else
    targets = {{"query", query, g.query}, {"key", key, g.key}, {"value", value, g.value}};
  add_parameters(targets, mha.parameters());
  check_fd("MultiheadAttention", targets, loss);
  if (c.self_attention) {
    std::vector<Tensor> packed_grads;
    for (const nn::Parameter& p : mha.parameters()) packed_grads.push_back(p.grad.clone());
    mha.zero_grad();
    const nn::MultiheadAttentionInputGradients three = mha.backward(r, rec);
    EXPECT_LT(max_abs_diff(grad_x, add(add(three.query, three.key), three.value)), 1e-12);
    std::vector<nn::Parameter> params = mha.parameters();
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_LT(max_abs_diff(params[i].grad, packed_grads[i]), 1e-12) << params[i].name;
  }
}

nn::MultiheadAttentionForward bool_masks(Generator& gen, const MhaCase& c) {
  // Column 0 is never masked, so no query row loses all its keys.
  Tensor am = bool_mask({c.L, c.S}, gen, 0.4);
  for (int64_t l = 0; l < c.L; ++l) am.set({l, 0}, 0.0);
  Tensor kpm = bool_mask({c.B, c.S}, gen, 0.3);
  for (int64_t b = 0; b < c.B; ++b) kpm.set({b, 0}, 0.0);
  return {.key_padding_mask = kpm, .need_weights = false, .attn_mask = am};
}

nn::MultiheadAttentionForward float_masks(Generator& gen, const MhaCase& c) {
  const int64_t H = c.options.num_heads;
  return {.key_padding_mask = randn({c.B, c.S}, gen),
          .need_weights = true,
          .attn_mask = randn({c.B * H, c.L, c.S}, gen),
          .average_attn_weights = false};
}

TEST(ModuleBackward, MultiheadAttention) {
  const std::vector<MhaCase> cases = {
      {.name = "packed, bool masks, [L, B, D]",
       .options = {.embed_dim = 6, .num_heads = 2},
       .args = bool_masks},
      {.name = "self-attention, causal hint, batch_first",
       .options = {.embed_dim = 4, .num_heads = 2, .batch_first = true},
       .self_attention = true,
       .args =
           [](Generator&, const MhaCase& c) {
             Tensor causal = Tensor::zeros({c.L, c.L}, DType::kBool);
             for (int64_t i = 0; i < c.L; ++i)
               for (int64_t j = i + 1; j < c.L; ++j) causal.set({i, j}, 1.0);
             return nn::MultiheadAttentionForward{
                 .need_weights = false, .attn_mask = causal, .is_causal = true};
           }},
      {.name = "kdim/vdim, float 3-D masks, need_weights, batch_first",
       .options = {.embed_dim = 4, .num_heads = 2, .kdim = 3, .vdim = 5, .batch_first = true},
       .args = float_masks},
      {.name = "no bias, unbatched",
       .options = {.embed_dim = 6, .num_heads = 3, .bias = false},
       .batched = false},
      {.name = "add_bias_kv, add_zero_attn, key_padding_mask",
       .options = {.embed_dim = 4, .num_heads = 2, .add_bias_kv = true, .add_zero_attn = true},
       .args =
           [](Generator& gen, const MhaCase& c) {
             Tensor kpm = bool_mask({c.B, c.S}, gen, 0.5);
             return nn::MultiheadAttentionForward{.key_padding_mask = kpm, .need_weights = false};
           }},
      {.name = "dropout 0.3 replayed, bool masks",
       .options = {.embed_dim = 4, .num_heads = 2, .dropout = 0.3},
       .args = bool_masks},
      {.name = "self-attention, no bias, unbatched",
       .options = {.embed_dim = 6, .num_heads = 3, .bias = false},
       .batched = false,
       .self_attention = true},
      {.name = "self-attention, add_bias_kv, add_zero_attn, [L, B, D], dropout 0.3",
       .options = {.embed_dim = 4,
                   .num_heads = 2,
                   .dropout = 0.3,
                   .add_bias_kv = true,
                   .add_zero_attn = true},
       .self_attention = true,
       .S = 3,  // = L: the masks' key length
       .args = bool_masks},
      {.name = "dropout 0.5 replayed, kdim/vdim, need_weights",
       .options = {.embed_dim = 4, .num_heads = 1, .dropout = 0.5, .kdim = 2, .vdim = 3}},
  };
  for (const MhaCase& c : cases) run_mha_case(c);
}

TEST(ModuleBackward, MultiheadAttentionAccumulatesAndZeroGrad) {
  Generator gen(7);
  nn::MultiheadAttention mha({.embed_dim = 4, .num_heads = 2, .dtype = kF64}, &gen);
  const Tensor x = randn({3, 2, 4}, gen), r = randn({3, 2, 4}, gen);
  nn::MultiheadAttentionRecord rec;
  mha.forward(x, x, x, {.need_weights = false}, &rec);
  mha.backward(r, rec);
  std::vector<Tensor> once;
  for (const nn::Parameter& p : mha.parameters()) once.push_back(p.grad.clone());
  mha.backward(r, rec);
  std::vector<nn::Parameter> params = mha.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_LT(max_abs_diff(params[i].grad, add(once[i], once[i])), 1e-12) << params[i].name;
    EXPECT_GT(max_abs_diff(once[i], Tensor::zeros(once[i].shape(), kF64)), 0.0) << params[i].name;
  }
  mha.zero_grad();
  for (const nn::Parameter& p : mha.parameters())
    EXPECT_EQ(max_abs_diff(p.grad, Tensor::zeros(p.grad.shape(), kF64)), 0.0) << p.name;
  EXPECT_THROW(mha.backward(r, nn::MultiheadAttentionRecord{}), Error);
  EXPECT_THROW(mha.backward(randn({3, 2, 5}, gen), rec), Error);
  // self_attention_backward only for a forward of one tensor (x, x, x).
  const Tensor other = randn({3, 2, 4}, gen);
  mha.forward(x, other, other, {.need_weights = false}, &rec);
  EXPECT_THROW(mha.self_attention_backward(r, rec), Error);
}

// --- Transformer layers and stacks ------------------------------------------------------

nn::TransformerLayerOptions layer_options(bool norm_first, Activation act, double p) {
  return {.d_model = 4,
          .nhead = 2,
          .dim_feedforward = 6,
          .dropout = p,
          .activation = act,
          .batch_first = norm_first,  // both layouts, tied to the norm order
          .norm_first = norm_first,
          .dtype = kF64};
}

Tensor causal_bool(int64_t n) {
  Tensor m = Tensor::zeros({n, n}, DType::kBool);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) m.set({i, j}, 1.0);
  return m;
}

TEST(ModuleBackward, TransformerEncoderLayer) {
  for (bool norm_first : {false, true})
    for (Activation act : {Activation::kRelu, Activation::kGelu})
      for (double p : {0.0, 0.25}) {
        SCOPED_TRACE(std::string(norm_first ? "norm_first " : "post-norm ") + activation_name(act) +
                     " dropout " + std::to_string(p));
        Generator gen(8);
        nn::TransformerEncoderLayer layer(layer_options(norm_first, act, p), &gen);
        randomize(layer.parameters(), gen);
        Generator drop(kDropoutSeed);
        layer.set_generator(&drop);
        const int64_t B = 2, L = 3;
        const Tensor x = randn(norm_first ? Shape{B, L, 4} : Shape{L, B, 4}, gen);
        const Tensor r = randn(x.shape(), gen);
        Tensor kpm = bool_mask({B, L}, gen, 0.3);
        for (int64_t b = 0; b < B; ++b) kpm.set({b, 0}, 0.0);
        const nn::TransformerEncoderLayerForward args{
            .src_mask = norm_first ? causal_bool(L) : randn({L, L}, gen),
            .src_key_padding_mask = kpm,
            .is_causal = norm_first};
        nn::TransformerEncoderLayerRecord rec;
        drop.manual_seed(kDropoutSeed);
        const Tensor y = layer.forward(x, args, &rec);
        std::vector<Target> targets{{"src", x, layer.backward(r, rec)}};
        add_parameters(targets, layer.parameters());
        EXPECT_EQ(targets.size(), 13u);
        auto loss = [&] {
          drop.manual_seed(kDropoutSeed);
          return weighted_sum(layer.forward(x, args), r);
        };
        EXPECT_EQ(weighted_sum(y, r), loss());
        EXPECT_EQ(rec.keep1.defined() && rec.keep2.defined() && rec.ff.keep_mask.defined(),
                  p > 0.0);
        check_fd("TransformerEncoderLayer", targets, loss);
      }
}

TEST(ModuleBackward, TransformerDecoderLayer) {
  for (bool norm_first : {false, true})
    for (double p : {0.0, 0.25}) {
      SCOPED_TRACE(std::string(norm_first ? "norm_first" : "post-norm") + " dropout " +
                   std::to_string(p));
      const Activation act = norm_first ? Activation::kGelu : Activation::kRelu;
      Generator gen(9);
      nn::TransformerDecoderLayer layer(layer_options(norm_first, act, p), &gen);
      randomize(layer.parameters(), gen);
      Generator drop(kDropoutSeed);
      layer.set_generator(&drop);
      const int64_t B = 2, T = 3, S = 4;
      auto shape = [&](int64_t len) { return norm_first ? Shape{B, len, 4} : Shape{len, B, 4}; };
      const Tensor tgt = randn(shape(T), gen), memory = randn(shape(S), gen);
      const Tensor r = randn(tgt.shape(), gen);
      Tensor mkpm = bool_mask({B, S}, gen, 0.3);
      for (int64_t b = 0; b < B; ++b) mkpm.set({b, 1}, 0.0);
      const nn::TransformerDecoderLayerForward args{.tgt_mask = causal_bool(T),
                                                    .memory_mask = randn({T, S}, gen),
                                                    .tgt_key_padding_mask = randn({B, T}, gen),
                                                    .memory_key_padding_mask = mkpm,
                                                    .tgt_is_causal = true};
      nn::TransformerDecoderLayerRecord rec;
      drop.manual_seed(kDropoutSeed);
      layer.forward(tgt, memory, args, &rec);
      const nn::TransformerDecoderInputGradients g = layer.backward(r, rec);
      std::vector<Target> targets{{"tgt", tgt, g.tgt}, {"memory", memory, g.memory}};
      add_parameters(targets, layer.parameters());
      EXPECT_EQ(targets.size(), 2u + 18u);
      check_fd("TransformerDecoderLayer", targets, [&] {
        drop.manual_seed(kDropoutSeed);
        return weighted_sum(layer.forward(tgt, memory, args), r);
      });
    }
}

TEST(ModuleBackward, TransformerEncoderAndDecoderStacks) {
  for (double p : {0.0, 0.2}) {
    Generator gen(10);
    nn::TransformerEncoder enc(
        {.layer = layer_options(false, Activation::kGelu, p), .num_layers = 2, .norm = true}, &gen);
    randomize(enc.parameters(), gen);  // the layers stop being copies of each other
    Generator drop(kDropoutSeed);
    enc.set_generator(&drop);
    const Tensor x = randn({3, 2, 4}, gen), r = randn({3, 2, 4}, gen);
    const nn::TransformerEncoderForward args{.mask = causal_bool(3)};  // detected as causal
    nn::TransformerEncoderRecord rec;
    drop.manual_seed(kDropoutSeed);
    enc.forward(x, args, &rec);
    std::vector<Target> targets{{"src", x, enc.backward(r, rec)}};
    add_parameters(targets, enc.parameters());
    EXPECT_EQ(targets.size(), 1u + 2 * 12u + 2u);
    EXPECT_EQ(targets.back().name, "norm.bias");  // torch's order: the final norm last
    check_fd("TransformerEncoder", targets, [&] {
      drop.manual_seed(kDropoutSeed);
      return weighted_sum(enc.forward(x, args), r);
    });

    nn::TransformerDecoder dec(
        {.layer = layer_options(true, Activation::kRelu, p), .num_layers = 2, .norm = true}, &gen);
    randomize(dec.parameters(), gen);
    dec.set_generator(&drop);
    const Tensor tgt = randn({2, 3, 4}, gen), memory = randn({2, 2, 4}, gen);
    const Tensor rt = randn(tgt.shape(), gen);
    nn::TransformerDecoderRecord drec;
    drop.manual_seed(kDropoutSeed);
    dec.forward(tgt, memory, {}, &drec);
    const nn::TransformerDecoderInputGradients g = dec.backward(rt, drec);
    std::vector<Target> dtargets{{"tgt", tgt, g.tgt}, {"memory", memory, g.memory}};
    add_parameters(dtargets, dec.parameters());
    check_fd("TransformerDecoder", dtargets, [&] {
      drop.manual_seed(kDropoutSeed);
      return weighted_sum(dec.forward(tgt, memory), rt);
    });
  }
}

TEST(ModuleBackward, TransformerEncoderDecoder) {
  for (bool norm_first : {false, true}) {
    Generator gen(12);
    nn::Transformer model({.d_model = 4,
                           .nhead = 2,
                           .num_encoder_layers = 2,
                           .num_decoder_layers = 1,
                           .dim_feedforward = 6,
                           .dropout = 0.0,
                           .norm_first = norm_first,
                           .dtype = kF64},
                          &gen);
    randomize(model.parameters(), gen);
    const Tensor src = randn({3, 2, 4}, gen), tgt = randn({2, 2, 4}, gen);
    const Tensor r = randn(tgt.shape(), gen);
    const nn::TransformerForward args{.tgt_mask = causal_bool(2),
                                      .src_key_padding_mask = Tensor::from_bools(
                                          {2, 3}, {false, false, true, false, false, false})};
    nn::TransformerRecord rec;
    model.forward(src, tgt, args, &rec);
    const nn::TransformerInputGradients g = model.backward(r, rec);
    std::vector<Target> targets{{"src", src, g.src}, {"tgt", tgt, g.tgt}};
    add_parameters(targets, model.parameters());
    EXPECT_EQ(targets.size(), 2u + 2 * 12u + 2u + 18u + 2u);
    check_fd("Transformer", targets,
             [&] { return weighted_sum(model.forward(src, tgt, args), r); });
  }
}

TEST(ModuleBackward, ParameterNamesMatchStateDict) {
  Generator gen(11);
  nn::TransformerDecoderLayer layer(layer_options(false, Activation::kRelu, 0.0), &gen);
  std::vector<std::string> names;
  for (const nn::Parameter& p : layer.parameters()) names.push_back(p.name);
  std::vector<std::string> expected;
  for (const auto& [name, t] : layer.state_dict()) expected.push_back(name);
  EXPECT_EQ(names, expected);  // the same names in the same (torch's) order
  // The parameters share the module's tensors: an optimizer's update is the module's.
  nn::Parameter first = layer.parameters().front();
  first.value.fill(0.5);
  EXPECT_EQ(layer.state_dict().at(first.name).to_vector().front(), 0.5);

  nn::Transformer model({.d_model = 4,
                         .nhead = 2,
                         .num_encoder_layers = 1,
                         .num_decoder_layers = 1,
                         .dim_feedforward = 6},
                        &gen);
  names.clear();
  for (const nn::Parameter& p : model.parameters()) names.push_back(p.name);
  expected.clear();
  for (const auto& [name, t] : model.state_dict()) expected.push_back(name);
  EXPECT_EQ(names, expected);
}

}  // namespace
}  // namespace qkv
