// Training the decoder-only model: the backward passes of RoPE,
// GroupedQueryAttention and DecoderModel against float64 central finite
// differences of their inference forwards, and the char-LM loop lowering
// the loss on a tiny text.
//
// Each case defines loss = Σ forward(inputs) ∘ R for a fixed random R, so
// ∂loss/∂output = R is the gradient given to backward(). Every parameter
// starts random (norm weights too, not torch's 1), and every element of
// every input and parameter is differentiated.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "finite_differences.h"
#include "qkv/nn/decoder_model.h"
#include "qkv/nn/grouped_query_attention.h"
#include "qkv/nn/positional_encoding.h"
#include "qkv/runtime.h"
#include "tasks/char_lm.h"
#include "test_util.h"

namespace qkv {
namespace {

constexpr DType kF64 = DType::kFloat64;
constexpr double kTolerance = 1e-6;

using namespace fd;
using qkv_test::state_names;

Tensor randn(const Shape& shape, Generator& gen) { return Tensor::randn(shape, gen, kF64); }

// Every parameter random, so that no gradient hides behind a 0 or a 1.
void randomize(const std::vector<nn::Parameter>& params, Generator& gen, double scale = 1.0) {
  for (const nn::Parameter& p : params) {
    Tensor v = p.value;
    v.copy_from(qkv::scale(Tensor::randn(p.value.shape(), gen, kF64), scale));
  }
}

void add_parameters(std::vector<Target>& targets, const std::vector<nn::Parameter>& params) {
  for (const nn::Parameter& p : params) targets.push_back({p.name, p.value, p.grad});
}

std::set<std::string> names_of(const std::vector<nn::Parameter>& params) {
  std::set<std::string> names;
  for (const nn::Parameter& p : params) names.insert(p.name);
  return names;
}

// --- RoPE ---------------------------------------------------------------------------

TEST(DecoderBackward, RotaryEmbeddingBothStyles) {
  for (nn::RopeStyle style : {nn::RopeStyle::kInterleaved, nn::RopeStyle::kHalfSplit})
    for (int64_t offset : {0, 5}) {
      Generator gen(1);
      const nn::RotaryEmbedding rope({.head_dim = 6, .base = 100.0, .style = style});
      const Tensor x = randn({2, 3, 4, 6}, gen), r = randn({2, 3, 4, 6}, gen);
      const Tensor grad = rope.backward(r, offset);
      const std::string name =
          style == nn::RopeStyle::kInterleaved ? "RoPE interleaved" : "RoPE half-split";
      check_fd(name, {{"x", x, grad}}, [&] { return weighted_sum(rope.forward(x, offset), r); });
      // float32 rounds the same float64 rotation once.
      const Tensor grad32 = rope.backward(r.to(DType::kFloat32), offset);
      EXPECT_EQ(grad32.dtype(), DType::kFloat32);
      const std::vector<double> a = grad.to_vector(), b = grad32.to_vector();
      for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5);
    }
}

TEST(DecoderBackward, FiniteDifferencesCatchAWrongGradient) {
  // The forward rotation in place of its inverse: the check must see it.
  Generator gen(2);
  const nn::RotaryEmbedding rope({.head_dim = 4});
  const Tensor x = randn({3, 4}, gen), r = randn({3, 4}, gen);
  const Tensor wrong = rope.forward(r, 1);
  const double err =
      fd_error({{"x", x, wrong}}, [&] { return weighted_sum(rope.forward(x, 1), r); });
  EXPECT_GT(err, 1e-2);
  // And so is a gradient that is off in one element by 1e-4.
  Tensor nearly = rope.backward(r, 1).clone();
  nearly.set({2, 3}, nearly.at({2, 3}) + 1e-4);
  EXPECT_GT(fd_error({{"x", x, nearly}}, [&] { return weighted_sum(rope.forward(x, 1), r); }),
            kTolerance);
}

TEST(DecoderBackward, RotaryEmbeddingRejectsBadGradients) {
  const nn::RotaryEmbedding rope({.head_dim = 4});
  EXPECT_THROW(rope.backward(Tensor::zeros({3, 6}, kF64)), Error);
  EXPECT_THROW(rope.backward(Tensor::zeros({3, 4}, kF64), -1), Error);
  EXPECT_THROW(rope.backward(Tensor()), Error);
}

// --- GroupedQueryAttention ------------------------------------------------------------

struct GqaCase {
  std::string name;
  nn::GroupedQueryAttentionOptions options;
  int64_t offset = 0;
  bool float_mask = false;  // an additive [H, L, L] mask on top of the causal one
};

TEST(DecoderBackward, GroupedQueryAttention) {
  const std::vector<GqaCase> cases = {
      {.name = "GQA H=4 Hkv=2 rope half-split",
       .options = {.embed_dim = 8, .num_heads = 4, .num_kv_heads = 2, .head_dim = 4}},
      {.name = "GQA H=4 Hkv=1 (MQA) rope interleaved, bias, offset",
       .options = {.embed_dim = 8,
                   .num_heads = 4,
                   .num_kv_heads = 1,
                   .head_dim = 2,
                   .bias = true,
                   .rope_style = nn::RopeStyle::kInterleaved},
       .offset = 3},
      {.name = "GQA H=2 Hkv=2 no rope",
       .options = {.embed_dim = 6, .num_heads = 2, .head_dim = 3, .rope = false}},
      {.name = "GQA H=4 Hkv=2 rope, float mask + causal",
       .options = {.embed_dim = 8, .num_heads = 4, .num_kv_heads = 2},
       .float_mask = true},
      {.name = "GQA H=4 Hkv=2 rope, dropout 0.3 replayed",
       .options = {.embed_dim = 8, .num_heads = 4, .num_kv_heads = 2, .dropout = 0.3}},
  };
  for (const GqaCase& c : cases) {
    SCOPED_TRACE(c.name);
    Generator gen(3);
    nn::GroupedQueryAttentionOptions o = c.options;
    o.dtype = kF64;
    nn::GroupedQueryAttention attn(o, &gen);
    randomize(attn.parameters(), gen, 0.5);
    Generator drop(99);
    attn.set_generator(&drop);
    const int64_t B = 2, L = 5, D = o.embed_dim;
    const Tensor x = randn({B, L, D}, gen), r = randn({B, L, D}, gen);
    nn::GroupedQueryAttentionForward args{.position_offset = c.offset,
                                          .causal = CausalMask::kTopLeft};
    if (c.float_mask) args.attn_mask = randn({o.num_heads, L, L}, gen);

    nn::GroupedQueryAttentionRecord rec;
    drop.manual_seed(99);
    const Tensor y = attn.forward(x, args, &rec);
    auto loss = [&] {
      drop.manual_seed(99);
      return weighted_sum(attn.forward(x, args), r);
    };
    EXPECT_EQ(weighted_sum(y, r), loss());  // the recorded forward is the same computation
    std::vector<Target> targets{{"x", x, attn.backward(r, rec)}};
    const std::vector<nn::Parameter> params = attn.parameters();
    EXPECT_EQ(names_of(params), state_names(attn));
    add_parameters(targets, params);
    check_fd("GroupedQueryAttention", targets, loss);

    attn.zero_grad();
    for (const nn::Parameter& p : attn.parameters())
      for (double g : p.grad.to_vector()) ASSERT_EQ(g, 0.0) << p.name;
  }
}

TEST(DecoderBackward, GroupedQueryAttentionKeyGradientsSumOverTheGroup) {
  // With Hkv = 1, k/v projections see the sum over all H query heads: the
  // same module with H copies of the kv head (Hkv = H, weights tiled) must
  // give k_proj a gradient equal to the sum of the tiled gradients.
  Generator gen(4);
  const int64_t D = 6, H = 3, E = 2, B = 1, L = 4;
  nn::GroupedQueryAttention gqa(
      {.embed_dim = D, .num_heads = H, .num_kv_heads = 1, .head_dim = E, .dtype = kF64}, &gen);
  nn::GroupedQueryAttention mha(
      {.embed_dim = D, .num_heads = H, .num_kv_heads = H, .head_dim = E, .dtype = kF64}, &gen);
  std::map<std::string, Tensor> tiled;
  for (const auto& [name, t] : gqa.state_dict()) {
    if (name == "k_proj.weight" || name == "v_proj.weight") {
      Tensor big = Tensor::empty({H * E, D}, kF64);
      for (int64_t h = 0; h < H; ++h) big.slice(0, h * E, (h + 1) * E).copy_from(t);
      tiled[name] = big;
    } else {
      tiled[name] = t.clone();
    }
  }
  mha.load_state_dict(tiled);
  const Tensor x = randn({B, L, D}, gen), r = randn({B, L, D}, gen);
  nn::GroupedQueryAttentionRecord rg, rm;
  const Tensor yg = gqa.forward(x, {.causal = CausalMask::kTopLeft}, &rg);
  const Tensor ym = mha.forward(x, {.causal = CausalMask::kTopLeft}, &rm);
  ASSERT_LT(std::abs(weighted_sum(yg, r) - weighted_sum(ym, r)), 1e-12);
  const Tensor gxg = gqa.backward(r, rg), gxm = mha.backward(r, rm);
  const std::vector<double> a = gxg.to_vector(), b = gxm.to_vector();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12);
  std::map<std::string, Tensor> gg, gm;
  for (const nn::Parameter& p : gqa.parameters()) gg[p.name] = p.grad;
  for (const nn::Parameter& p : mha.parameters()) gm[p.name] = p.grad;
  for (const char* name : {"k_proj.weight", "v_proj.weight"}) {
    Tensor sum = Tensor::zeros({E, D}, kF64);
    for (int64_t h = 0; h < H; ++h) sum = add(sum, gm[name].slice(0, h * E, (h + 1) * E));
    const std::vector<double> want = sum.to_vector(), got = gg[name].to_vector();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << name;
  }
}

TEST(DecoderBackward, GroupedQueryAttentionChecksItsRecord) {
  nn::GroupedQueryAttention attn({.embed_dim = 4, .num_heads = 2, .dtype = kF64});
  nn::GroupedQueryAttentionRecord empty;
  EXPECT_THROW(attn.backward(Tensor::zeros({1, 3, 4}, kF64), empty), Error);
  nn::GroupedQueryAttentionRecord rec;
  attn.forward(Tensor::zeros({1, 3, 4}, kF64), {.causal = CausalMask::kTopLeft}, &rec);
  EXPECT_THROW(attn.backward(Tensor::zeros({1, 2, 4}, kF64), rec), Error);
  EXPECT_THROW(attn.backward(Tensor::zeros({1, 3, 4}, DType::kFloat32), rec), Error);
}

// --- DecoderModel ---------------------------------------------------------------------

std::string describe(const nn::DecoderModelConfig& c) {
  std::string s = c.positions == nn::PositionKind::kRope      ? "rope"
                  : c.positions == nn::PositionKind::kLearned ? "learned"
                                                              : "sinusoidal";
  s += c.norm == nn::NormKind::kRMSNorm ? " rmsnorm" : " layernorm";
  s += c.ffn == nn::FeedForwardKind::kSwiGLU ? " swiglu" : " gelu";
  s += c.tie_embeddings ? " tied" : " untied";
  if (c.bias) s += " bias";
  if (c.num_kv_heads != c.num_heads && c.num_kv_heads != 0) s += " gqa";
  return s;
}

TEST(DecoderBackward, DecoderModelEveryKind) {
  int index = 0;
  for (nn::PositionKind pos :
       {nn::PositionKind::kRope, nn::PositionKind::kLearned, nn::PositionKind::kSinusoidal})
    for (nn::NormKind norm : {nn::NormKind::kRMSNorm, nn::NormKind::kLayerNorm})
      for (nn::FeedForwardKind ffn : {nn::FeedForwardKind::kSwiGLU, nn::FeedForwardKind::kGelu})
        for (bool tied : {true, false}) {
          ++index;
          nn::DecoderModelConfig c{
              .vocab_size = 7,
              .d_model = 8,
              .num_layers = 2,
              .num_heads = 2,
              .num_kv_heads = (index / 3) % 2 == 0 ? 1 : 2,
              .ffn_hidden = 6,
              .max_seq_len = 8,
              .positions = pos,
              .rope_base = 50.0,
              .rope_style = index % 4 < 2 ? nn::RopeStyle::kHalfSplit : nn::RopeStyle::kInterleaved,
              .norm = norm,
              .ffn = ffn,
              .tie_embeddings = tied,
              .bias = index % 3 == 0,
              .dtype = kF64};
          SCOPED_TRACE(describe(c));
          Generator gen(10 + index);
          nn::DecoderModel model(c, &gen);
          const std::vector<nn::Parameter> params = model.parameters();
          EXPECT_EQ(names_of(params), state_names(model));
          randomize(params, gen, 0.5);
          const int64_t B = 2, T = 5;
          std::vector<int64_t> ids(B * T);
          for (int64_t& id : ids) id = static_cast<int64_t>(gen.uniform() * 7) % 7;
          const Tensor r = randn({B, T, 7}, gen);

          nn::DecoderModelRecord rec;
          const Tensor logits = model.forward(ids, B, &rec);
          const Tensor plain = model.forward(ids, B);
          EXPECT_EQ(weighted_sum(logits, r), weighted_sum(plain, r));
          model.backward(r, rec);
          std::vector<Target> targets;
          add_parameters(targets, params);
          check_fd("DecoderModel " + describe(c), targets,
                   [&] { return weighted_sum(model.forward(ids, B), r); });

          // A second backward adds the same again; zero_grad clears every buffer.
          const std::vector<double> once = params.front().grad.to_vector();
          model.backward(r, rec);
          const std::vector<double> twice = params.front().grad.to_vector();
          for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2 * once[i], 1e-12);
          model.zero_grad();
          for (const nn::Parameter& p : params)
            for (double g : p.grad.to_vector()) ASSERT_EQ(g, 0.0) << p.name;
        }
}

TEST(DecoderBackward, DecoderModelChecksItsInputs) {
  nn::DecoderModel model({.vocab_size = 5,
                          .d_model = 4,
                          .num_layers = 1,
                          .num_heads = 2,
                          .max_seq_len = 4,
                          .positions = nn::PositionKind::kLearned,
                          .dtype = kF64});
  nn::DecoderModelRecord rec;
  const std::vector<int64_t> ids{1, 2, 3, 4, 0, 1};
  EXPECT_THROW(model.forward(ids, 1, &rec), Error);  // 6 positions > max_seq_len 4
  EXPECT_THROW(model.forward(ids, 4, &rec), Error);  // 6 ids are not 4 sequences
  EXPECT_THROW(model.backward(Tensor::zeros({2, 3, 5}, kF64), nn::DecoderModelRecord{}), Error);
  model.forward(ids, 2, &rec);
  EXPECT_THROW(model.backward(Tensor::zeros({2, 3, 4}, kF64), rec), Error);
  EXPECT_THROW(model.backward(Tensor::zeros({2, 3, 5}, DType::kFloat32), rec), Error);
  EXPECT_NO_THROW(model.backward(Tensor::zeros({2, 3, 5}, kF64), rec));
}

// --- The char-LM task -----------------------------------------------------------------

TEST(CharLm, TrainingLowersTheLossOnARepeatedText) {
  // Tiny matrices: one thread. Two took 20x longer when another job held a core.
  qkv::set_num_threads(1);
  std::vector<std::string> entries;
  const char* lines[] = {"the cat sat on the mat.\n", "a dog ate the hat.\n",
                         "the hat sat on a cat.\n"};
  for (int i = 0; i < 60; ++i) entries.push_back(lines[i % 3]);
  const train::CharCorpus corpus = train::make_char_corpus(entries);
  const double unigram = train::unigram_bits_per_char(corpus.train_ids, corpus.vocabulary.size());
  nn::DecoderModelConfig c{.vocab_size = corpus.vocabulary.size(),
                           .d_model = 32,
                           .num_layers = 2,
                           .num_heads = 2,
                           .max_seq_len = 32};
  Generator init(0);
  nn::DecoderModel model(c, &init);
  train::init_gpt2(model, init);
  const double before = train::bits_per_char(model, corpus.held_out_ids, 32);
  const train::CharLmTrainResult r = train::train_char_lm(model, corpus,
                                                          {.steps = 150,
                                                           .batch_size = 16,
                                                           .context = 32,
                                                           .lr = 3e-3,
                                                           .warmup_steps = 10,
                                                           .eval_every = 1000});
  EXPECT_EQ(r.steps, 150);
  EXPECT_TRUE(std::isfinite(r.held_out_bits));
  // The text is a cycle of three lines: after the first words every
  // character is nearly certain, far below the unigram baseline.
  EXPECT_LT(r.held_out_bits, 0.5 * unigram) << "before " << before << ", unigram " << unigram;
  EXPECT_LT(r.held_out_bits, 0.25 * before);
  std::printf("[char-lm] held-out %.3f bits/char after 150 steps (before %.3f, unigram %.3f)\n",
              r.held_out_bits, before, unigram);
}

TEST(CharLm, CorpusSplitsEveryTenthEntry) {
  std::vector<std::string> entries;
  for (int i = 0; i < 20; ++i) entries.push_back("entry " + std::to_string(i) + "\n");
  const train::CharCorpus corpus = train::make_char_corpus(entries);
  EXPECT_EQ(corpus.entries, 20);
  EXPECT_EQ(corpus.held_out_text, "entry 9\n\nentry 19\n");
  EXPECT_EQ(corpus.train_text.find("entry 9\n"), std::string::npos);
  EXPECT_NE(corpus.train_text.find("entry 8\n\nentry 10\n"), std::string::npos);
  EXPECT_EQ(corpus.vocabulary.decode(corpus.train_ids), corpus.train_text);
  EXPECT_EQ(corpus.vocabulary.decode(corpus.held_out_ids), corpus.held_out_text);
  // One entry: the tail is held out, from a line start.
  std::string lines;
  for (int i = 0; i < 10; ++i) lines += "line " + std::to_string(i) + "\n";
  const train::CharCorpus one = train::make_char_corpus({lines});
  EXPECT_EQ(one.held_out_text, "line 9\n");
  EXPECT_EQ(one.train_text + one.held_out_text, lines);
  EXPECT_THROW(train::make_char_corpus({"a"}), Error);
}

TEST(CharLm, WindowsAndUnigramBaseline) {
  std::vector<int64_t> ids(50);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  Generator gen(5);
  const train::CharBatch b = train::sample_windows(ids, 4, 8, gen);
  ASSERT_EQ(b.inputs.size(), 32u);
  for (int64_t w = 0; w < 4; ++w)
    for (int64_t t = 0; t < 8; ++t) {
      EXPECT_EQ(b.targets[w * 8 + t], b.inputs[w * 8 + t] + 1);  // the next character
      if (t > 0) {
        EXPECT_EQ(b.inputs[w * 8 + t], b.inputs[w * 8 + t - 1] + 1);
      }
    }
  EXPECT_THROW(train::sample_windows(std::vector<int64_t>(8, 0), 1, 8, gen), Error);
  EXPECT_DOUBLE_EQ(train::unigram_bits_per_char(std::vector<int64_t>{0, 0, 1, 1}, 3), 1.0);
  EXPECT_DOUBLE_EQ(train::unigram_bits_per_char(std::vector<int64_t>{2, 2, 2}, 3), 0.0);
  EXPECT_NEAR(train::unigram_bits_per_char(std::vector<int64_t>{0, 1, 2, 3}, 4), 2.0, 1e-15);
}

TEST(CharLm, BitsPerCharIsTheMeanCrossEntropyOfEveryPrediction) {
  // Windows of 4 over 11 ids: 10 predictions in windows 4, 4 and a tail of 2.
  nn::DecoderModel model(
      {.vocab_size = 5, .d_model = 8, .num_layers = 1, .num_heads = 2, .dtype = kF64});
  const std::vector<int64_t> ids{0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0};
  double nats = 0.0;
  for (int64_t start : {0, 4, 8}) {
    const int64_t len = std::min<int64_t>(4, 10 - start);
    const std::vector<int64_t> in(ids.begin() + start, ids.begin() + start + len);
    const Tensor logits = model.forward(in, 1);
    for (int64_t t = 0; t < len; ++t) {
      double mx = -1e300, z = 0.0;
      for (int64_t v = 0; v < 5; ++v) mx = std::max(mx, logits.at({0, t, v}));
      for (int64_t v = 0; v < 5; ++v) z += std::exp(logits.at({0, t, v}) - mx);
      nats += -(logits.at({0, t, ids[start + t + 1]}) - mx - std::log(z));
    }
  }
  EXPECT_NEAR(train::bits_per_char(model, ids, 4, 0, 2), nats / 10 / std::log(2.0), 1e-12);
}

}  // namespace
}  // namespace qkv
