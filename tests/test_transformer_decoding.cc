// nn::TransformerDecoderSession: incremental decoding of an encoder-decoder
// nn::Transformer equals recomputing the decoder over all targets each step.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "qkv/linear.h"
#include "qkv/masks.h"
#include "qkv/nn/transformer_decoding.h"
#include "qkv/sampling.h"

namespace qkv::nn {
namespace {

constexpr int64_t kVocab = 11;

struct Case {
  const char* name;
  TransformerOptions options;
  bool padding = false;
};

TransformerOptions small(TransformerOptions o) {
  o.d_model = 16;
  o.nhead = 4;
  o.num_encoder_layers = 2;
  o.num_decoder_layers = 2;
  o.dim_feedforward = 32;
  o.dropout = 0.0;
  return o;
}

// Rows [b, t] of a sequence in the model's layout.
Tensor position(const Tensor& seq, int64_t t, bool batch_first) {
  return batch_first ? seq.slice(1, t, t + 1) : seq.slice(0, t, t + 1);
}

// A toy sequence-to-sequence model around nn::Transformer: target tokens are
// rows of `embed`, logits are decoder outputs times `embed`ᵀ. Greedy decoding
// with the session must give the same tokens, and logits within 1e-5, as
// recomputing Transformer::forward over all targets each step.
void check_case(const Case& c) {
  SCOPED_TRACE(c.name);
  Generator gen(0);
  Transformer model(c.options, &gen);
  model.eval();
  const bool bf = c.options.batch_first;
  const int64_t B = 2, S = 7, D = c.options.d_model, steps = 8;
  const Tensor embed = Tensor::randn({kVocab, D}, gen);
  const Tensor src = bf ? Tensor::randn({B, S, D}, gen) : Tensor::randn({S, B, D}, gen);
  Tensor padding;  // sequence 1 has 2 padded source positions
  if (c.padding) padding = padding_mask_from_lengths({S, S - 2}, S);

  TransformerDecoderSession session(model, 16);
  session.encode(src, {.src_key_padding_mask = padding, .memory_key_padding_mask = padding});
  std::vector<std::vector<int64_t>> tokens(B, std::vector<int64_t>{0});  // BOS = 0
  // Targets so far, in the model's layout.
  auto targets = [&](int64_t T) {
    Tensor t = Tensor::zeros(bf ? Shape{B, T, D} : Shape{T, B, D});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < T; ++i) {
        Tensor row = bf ? t.select(0, b).select(0, i) : t.select(0, i).select(0, b);
        row.copy_from(embed.select(0, tokens[b][i]));
      }
    return t;
  };
  for (int64_t step = 0; step < steps; ++step) {
    const int64_t T = step + 1;
    const Tensor all = targets(T);
    TransformerForward args;
    args.tgt_mask = Transformer::generate_square_subsequent_mask(T);
    args.src_key_padding_mask = padding;
    args.memory_key_padding_mask = padding;
    const Tensor full = model.forward(src, all, args);
    const Tensor expected = position(full, T - 1, bf);
    const Tensor got = session.step(position(all, T - 1, bf));
    ASSERT_EQ(got.shape(), expected.shape());
    EXPECT_LT(max_abs_diff(got, expected), 1e-5) << "step " << step;
    // Greedy next tokens from both; the cached ones must be the same.
    for (int64_t b = 0; b < B; ++b) {
      const Tensor out_b = (bf ? got.select(0, b) : got.select(1, b)).reshape({1, D});
      const Tensor ref_b = (bf ? expected.select(0, b) : expected.select(1, b)).reshape({1, D});
      const Tensor logits = linear(out_b, embed).contiguous();
      const Tensor ref_logits = linear(ref_b, embed).contiguous();
      EXPECT_LT(max_abs_diff(logits, ref_logits), 1e-5);
      const int64_t next = argmax({logits.data<float>(), static_cast<size_t>(kVocab)});
      ASSERT_EQ(next, argmax({ref_logits.data<float>(), static_cast<size_t>(kVocab)}));
      tokens[b].push_back(next);
    }
  }
  EXPECT_EQ(session.length(), steps);
}

TEST(TransformerDecoding, CachedEqualsRecomputedPostNormRelu) {
  check_case({"post-norm, relu, [T, B, D]", small({})});
}

TEST(TransformerDecoding, CachedEqualsRecomputedPreNormGeluBatchFirst) {
  check_case({"norm_first, gelu, batch_first",
              small({.activation = Activation::kGelu, .batch_first = true, .norm_first = true})});
}

TEST(TransformerDecoding, CachedEqualsRecomputedWithPaddingAndNoBias) {
  check_case({"padding, bias off", small({.batch_first = true, .bias = false}), true});
}

TEST(TransformerDecoding, SeveralPositionsAtOnceAndUnbatched) {
  Generator gen(1);
  Transformer model(small({}), &gen);
  model.eval();
  const Tensor src = Tensor::randn({5, 16}, gen);  // unbatched [S, D]
  const Tensor tgt = Tensor::randn({6, 16}, gen);  // [T, D]
  TransformerForward args;
  args.tgt_mask = Transformer::generate_square_subsequent_mask(6);
  const Tensor full = model.forward(src, tgt, args);
  TransformerDecoderSession session(model, 6);
  session.encode(src);
  const Tensor first = session.step(tgt.slice(0, 0, 4));  // four positions in one pass
  const Tensor rest = session.step(tgt.slice(0, 4, 6));
  EXPECT_LT(max_abs_diff(first, full.slice(0, 0, 4)), 1e-5);
  EXPECT_LT(max_abs_diff(rest, full.slice(0, 4, 6)), 1e-5);
  EXPECT_THROW(session.step(tgt.slice(0, 0, 1)), Error);  // full: 6 of 6
  session.reset();
  EXPECT_LT(max_abs_diff(session.step(tgt.slice(0, 0, 1)), full.slice(0, 0, 1)), 1e-5);
}

// float64, and the memory's padding as a float mask (added, -inf = padding).
TEST(TransformerDecoding, Float64WithAFloatPaddingMask) {
  Generator gen(3);
  TransformerOptions o = small({.batch_first = true, .norm_first = true});
  o.dtype = DType::kFloat64;
  Transformer model(o, &gen);
  model.eval();
  const int64_t S = 5, T = 4;
  const Tensor src = Tensor::randn({2, S, 16}, gen, DType::kFloat64);
  const Tensor tgt = Tensor::randn({2, T, 16}, gen, DType::kFloat64);
  Tensor padding = Tensor::zeros({2, S}, DType::kFloat64);
  for (int64_t s = S - 2; s < S; ++s) padding.set({1, s}, -INFINITY);
  TransformerForward args;
  args.tgt_mask = Transformer::generate_square_subsequent_mask(T, DType::kFloat64);
  args.src_key_padding_mask = padding;
  args.memory_key_padding_mask = padding;
  const Tensor full = model.forward(src, tgt, args);
  TransformerDecoderSession session(model, T);
  session.encode(src, {.src_key_padding_mask = padding, .memory_key_padding_mask = padding});
  for (int64_t t = 0; t < T; ++t)
    EXPECT_LT(max_abs_diff(session.step(tgt.slice(1, t, t + 1)), full.slice(1, t, t + 1)), 1e-12)
        << "position " << t;
}

// The decoder's own step() on a cache, without nn::Transformer or a final norm.
TEST(TransformerDecoding, DecoderStackStepsOnItsCache) {
  Generator gen(4);
  const TransformerLayerOptions o{
      .d_model = 16, .nhead = 2, .dim_feedforward = 24, .dropout = 0.1, .batch_first = true};
  TransformerDecoder decoder({.layer = o, .num_layers = 3}, &gen);
  const int64_t B = 3, S = 4, T = 5;
  const Tensor memory = Tensor::randn({B, S, 16}, gen);
  const Tensor tgt = Tensor::randn({B, T, 16}, gen);
  EXPECT_THROW(TransformerDecoderCache(decoder, memory, {}, T), Error);  // training, dropout 0.1
  decoder.eval();
  const Tensor full =
      decoder.forward(tgt, memory, {.tgt_mask = Transformer::generate_square_subsequent_mask(T)});
  TransformerDecoderCache cache(decoder, memory, {}, T);
  ASSERT_EQ(cache.memory.size(), 3u);
  for (int64_t t = 0; t < T; ++t)
    EXPECT_LT(max_abs_diff(decoder.step(tgt.slice(1, t, t + 1), cache), full.slice(1, t, t + 1)),
              1e-5)
        << "position " << t;
  EXPECT_EQ(cache.self_attn.length(), T);
  EXPECT_THROW(decoder.step(tgt.slice(1, 0, 1), cache), Error);  // full
  TransformerDecoder shorter({.layer = o, .num_layers = 2}, &gen);
  shorter.eval();
  cache.self_attn.reset();
  EXPECT_THROW(shorter.step(tgt.slice(1, 0, 1), cache), Error);  // 3 layers' memory
}

TEST(TransformerDecoding, Errors) {
  Generator gen(2);
  TransformerOptions o = small({.batch_first = true});
  o.dropout = 0.1;
  Transformer model(o, &gen);
  TransformerDecoderSession session(model, 4);
  EXPECT_THROW(session.step(Tensor::zeros({1, 1, 16})), Error);  // no memory yet
  const Tensor src = Tensor::zeros({2, 3, 16});
  EXPECT_THROW(session.encode(src), Error);  // training mode with dropout 0.1
  model.eval();
  session.encode(src);
  EXPECT_THROW(session.step(Tensor::zeros({3, 1, 16})), Error);  // batch differs
  EXPECT_THROW(session.step(Tensor::zeros({2, 1, 8})), Error);   // D differs
  EXPECT_THROW(session.set_memory(src, Tensor::zeros({2, 4}, DType::kBool)), Error);
  EXPECT_THROW(TransformerDecoderSession(model, 0), Error);
}

}  // namespace
}  // namespace qkv::nn
