// The fused kernels of every ISA this CPU supports against the float64
// reference: awkward shapes, masks, causal alignments, GQA, dropout, weights.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_tables.h"
#include "qkv/attention.h"
#include "qkv/masks.h"
#include "tensor_comparison.h"
#include "test_util.h"

using namespace qkv;
using qkv::testing::relative_error;

namespace {

class FusedAttention : public qkv_test::ActiveKernelTableTest {
 protected:
  // Runs SDPA fused on float32 and as the reference on the same values in float64.
  void compare(const Tensor& q, const Tensor& k, const Tensor& v, SdpaOptions options,
               const std::string& what) {
    options.backend = SdpaBackend::kFused;
    options.need_weights = true;
    Generator g1(5), g2(5);
    options.generator = &g1;
    SdpaResult fused = scaled_dot_product_attention(q, k, v, options);
    EXPECT_EQ(fused.kernel, std::string("fused-") + GetParam()->name);
    SdpaOptions ref_options = options;
    ref_options.backend = SdpaBackend::kReference;
    ref_options.generator = &g2;
    if (ref_options.attn_mask.defined() && ref_options.attn_mask.dtype() != DType::kBool)
      ref_options.attn_mask = ref_options.attn_mask.to(DType::kFloat64);
    SdpaResult ref = scaled_dot_product_attention(q.to(DType::kFloat64), k.to(DType::kFloat64),
                                                  v.to(DType::kFloat64), ref_options);
    EXPECT_LE(relative_error(fused.output, ref.output), 1e-5) << what;
    EXPECT_LE(relative_error(fused.weights, ref.weights), 1e-5) << what;
    const std::vector<double> a = fused.logsumexp.to_vector(), b = ref.logsumexp.to_vector();
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::isinf(b[i])) {
        EXPECT_EQ(a[i], b[i]) << what;
      } else {
        EXPECT_NEAR(a[i], b[i], 1e-5 * (1 + std::abs(b[i]))) << what;
      }
    }
  }
};

TEST_P(FusedAttention, AwkwardShapes) {
  Generator gen(21);
  const int64_t shapes[][6] = {
      // B·H, L, S, E, Ev, unused
      {1, 1, 1, 1, 1, 0},     {2, 3, 17, 3, 5, 0},      {1, 17, 3, 17, 1, 0},
      {2, 80, 129, 8, 8, 0},  {1, 5, 7, 80, 3, 0},      {3, 9, 4, 128, 16, 0},
      {2, 1, 300, 64, 64, 0}, {1, 129, 257, 32, 33, 0}, {1, 200, 513, 64, 64, 0}};
  for (const auto& s : shapes) {
    Tensor q = Tensor::randn({s[0], s[1], s[3]}, gen);
    Tensor k = Tensor::randn({s[0], s[2], s[3]}, gen);
    Tensor v = Tensor::randn({s[0], s[2], s[4]}, gen);
    compare(q, k, v, {},
            "shape L=" + std::to_string(s[1]) + " S=" + std::to_string(s[2]) +
                " E=" + std::to_string(s[3]));
  }
}

TEST_P(FusedAttention, MasksCausalGqaScaleDropout) {
  Generator gen(22);
  // 600 × 600: key tiles cut at the diagonal of every 96-query tile (250 ×
  // 250, three tiles, under the sanitizers: 96% of the time is this case).
  const int64_t big = qkv_test::kSanitized ? 250 : 600;
  for (auto [L, S] :
       {std::pair<int64_t, int64_t>{37, 37}, {20, 300}, {300, 20}, {1, 130}, {big, big}}) {
    Tensor q = Tensor::randn({2, 4, L, 16}, gen);
    Tensor k = Tensor::randn({2, 2, S, 16}, gen);
    Tensor v = Tensor::randn({2, 2, S, 24}, gen);
    const std::string at = " L=" + std::to_string(L) + " S=" + std::to_string(S);
    for (CausalMask c : {CausalMask::kNone, CausalMask::kTopLeft, CausalMask::kBottomRight}) {
      SdpaOptions o;
      o.enable_gqa = true;
      o.causal = c;
      compare(q, k, v, o, "causal " + std::to_string(int(c)) + at);
    }
    std::vector<int64_t> lengths = {S, std::max<int64_t>(1, S / 3)};
    SdpaOptions padded;
    padded.enable_gqa = true;
    padded.attn_mask = key_mask_for_heads(keep_mask_from_lengths(lengths, S));
    compare(q, k, v, padded, "padding mask" + at);
    // Key padding on both ends (skipped key tiles), and a batch entry with no key at all.
    Tensor both_ends = Tensor::zeros({2, 1, 1, S}, DType::kBool);
    for (int64_t j = 5; j < S - 3; ++j) both_ends.set({0, 0, 0, j}, 1);
    SdpaOptions trimmed;
    trimmed.enable_gqa = true;
    trimmed.attn_mask = both_ends;
    compare(q, k, v, trimmed, "key padding on both ends" + at);
    trimmed.dropout_p = 0.3;
    compare(q, k, v, trimmed, "key padding on both ends, dropout" + at);
    // The same as an additive float mask (0 or −inf), as MultiheadAttention builds it.
    trimmed.attn_mask = keep_mask_to_additive(both_ends);
    trimmed.dropout_p = 0.0;
    compare(q, k, v, trimmed, "additive key padding on both ends" + at);
    SdpaOptions soft;
    soft.enable_gqa = true;
    soft.scale = 0.37;
    soft.attn_mask = Tensor::randn({4, L, S}, gen);
    compare(q, k, v, soft, "float mask, scale" + at);
    SdpaOptions masked_row;
    masked_row.enable_gqa = true;
    Tensor keep = Tensor::ones({L, S}, DType::kBool);
    for (int64_t j = 0; j < S; ++j) keep.set({0, j}, 0);
    masked_row.attn_mask = keep;
    compare(q, k, v, masked_row, "fully masked row" + at);
    SdpaOptions dropout;
    dropout.enable_gqa = true;
    dropout.dropout_p = 0.3;
    compare(q, k, v, dropout, "dropout" + at);
  }
}

// Value heads of whole 64-float panels take the forward's wide P·V product
// (AVX-512: 6 queries × 64 values per step), on full and diagonal tiles.
TEST_P(FusedAttention, WideValueHeadsWithCausalWindowsAndPadding) {
  Generator gen(28);
  for (int64_t ev : {64, 128}) {
    Tensor q = Tensor::randn({1, 2, 300, 32}, gen), k = Tensor::randn({1, 2, 300, 32}, gen);
    Tensor v = Tensor::randn({1, 2, 300, ev}, gen);
    const std::string at = " Ev=" + std::to_string(ev);
    compare(q, k, v, {}, "no mask" + at);
    for (CausalMask c : {CausalMask::kTopLeft, CausalMask::kBottomRight})
      compare(q, k, v, {.causal = c}, "causal " + std::to_string(int(c)) + at);
    compare(q, k, v, {.window_left = 40, .window_right = 7}, "window" + at);
    Tensor keep = Tensor::zeros({1, 1, 1, 300}, DType::kBool);
    for (int64_t j = 11; j < 250; ++j) keep.set({0, 0, 0, j}, 1);
    compare(q, k, v, {.attn_mask = keep, .dropout_p = 0.2}, "key padding, dropout" + at);
  }
}

// The last query tile of a sequence takes one, two, three or four vectors of
// queries (four as two two-vector panels), or is cut at a panel: every such
// remainder, after whole 96-query blocks or alone, with the causal diagonal
// crossing it, key padding, and V read in place (Ev 64) or packed (Ev 40).
TEST_P(FusedAttention, EveryShapeOfTheLastQueryTile) {
  Generator gen(29);
  for (int64_t L : {20, 33, 40, 49, 50, 60, 64, 65, 80, 95, 146, 156, 160, 166, 190}) {
    for (int64_t ev : {64, 40}) {
      Tensor q = Tensor::randn({2, L, 64}, gen), k = Tensor::randn({2, L + 7, 64}, gen);
      Tensor v = Tensor::randn({2, L + 7, ev}, gen);
      const std::string at = " L=" + std::to_string(L) + " Ev=" + std::to_string(ev);
      compare(q, k, v, {}, "no mask" + at);
      compare(q, k, v, {.causal = CausalMask::kBottomRight}, "causal" + at);
      Tensor keep = Tensor::ones({1, 1, L + 7}, DType::kBool);
      for (int64_t j = L / 2; j < L + 7; j += 3) keep.set({0, 0, j}, 0);
      compare(q, k, v, {.attn_mask = keep}, "key padding" + at);
    }
  }
}

TEST_P(FusedAttention, DecodingWithGqaStacksQueryHeads) {
  Generator gen(25);
  // One new query per head against a cache, GQA 9:3, with and without a padding mask.
  for (int64_t S : {1, 130, 1000}) {
    Tensor q = Tensor::randn({2, 9, 1, 64}, gen);
    Tensor k = Tensor::randn({2, 3, S, 64}, gen), v = Tensor::randn({2, 3, S, 64}, gen);
    SdpaOptions o;
    o.enable_gqa = true;
    o.causal = CausalMask::kBottomRight;
    compare(q, k, v, o, "decode S=" + std::to_string(S));
    SdpaOptions masked;
    masked.enable_gqa = true;
    masked.attn_mask = key_mask_for_heads(keep_mask_from_lengths({S, (S + 1) / 2}, S));
    compare(q, k, v, masked, "decode with padding S=" + std::to_string(S));
    // The heads of a [B, 1, H, E] buffer (Hugging Face's layout), the output
    // laid out like them: stacked with the heads' spacing as the row stride.
    Tensor q_heads = Tensor::randn({2, 1, 9, 64}, gen).transpose(1, 2);
    SdpaOptions like = o;
    like.layout = SdpaLayout::kLikeInputs;
    compare(q_heads, k, v, like, "decode, heads of [B, 1, H, E], S=" + std::to_string(S));
    masked.layout = SdpaLayout::kLikeInputs;
    compare(q_heads, k, v, masked, "the same with padding S=" + std::to_string(S));
  }
  // A short prompt without causal mask stacks too.
  Tensor q = Tensor::randn({1, 6, 5, 32}, gen);
  Tensor k = Tensor::randn({1, 2, 77, 32}, gen), v = Tensor::randn({1, 2, 77, 32}, gen);
  compare(q, k, v, {.enable_gqa = true}, "prompt");
}

TEST_P(FusedAttention, WindowAlibiSoftcap) {
  Generator gen(26);
  for (auto [L, S] : {std::pair<int64_t, int64_t>{130, 130}, {40, 300}, {300, 40}, {600, 600}}) {
    Tensor q = Tensor::randn({2, 3, L, 16}, gen), k = Tensor::randn({2, 3, S, 16}, gen);
    Tensor v = Tensor::randn({2, 3, S, 16}, gen);
    const std::string at = " L=" + std::to_string(L) + " S=" + std::to_string(S);
    for (CausalMask c : {CausalMask::kNone, CausalMask::kTopLeft, CausalMask::kBottomRight}) {
      SdpaOptions window;
      window.causal = c;
      window.window_left = 20;
      window.window_right = c == CausalMask::kNone ? 7 : -1;
      compare(q, k, v, window, "window, causal " + std::to_string(int(c)) + at);
    }
    SdpaOptions alibi;
    alibi.alibi_slopes = {0.5, 0.25, 0.125};
    alibi.causal = CausalMask::kBottomRight;
    compare(q, k, v, alibi, "alibi" + at);
    SdpaOptions cap;
    cap.softcap = 2.0;
    cap.scale = 1.0;  // large logits, so the cap matters
    cap.attn_mask = Tensor::randn({L, S}, gen);
    compare(q, k, v, cap, "softcap" + at);
  }
}

// Tiles of at most four queries take the few-query (decoding) kernel: every
// option on head dims with and without a vector tail, several key tiles.
TEST_P(FusedAttention, FewQueriesEveryOption) {
  Generator gen(27);
  for (int64_t L : {1, 2, 3, 4, 5}) {
    for (auto [E, Ev] : {std::pair<int64_t, int64_t>{64, 64}, {17, 5}, {1, 33}, {80, 16}}) {
      const int64_t S = 600;  // three key tiles of 256
      Tensor q = Tensor::randn({2, 2, L, E}, gen), k = Tensor::randn({2, 2, S, E}, gen);
      Tensor v = Tensor::randn({2, 2, S, Ev}, gen);
      const std::string at = " L=" + std::to_string(L) + " E=" + std::to_string(E);
      for (CausalMask c : {CausalMask::kNone, CausalMask::kTopLeft, CausalMask::kBottomRight})
        compare(q, k, v, {.causal = c}, "causal " + std::to_string(int(c)) + at);
      compare(q, k, v, {.attn_mask = Tensor::randn({L, S}, gen), .scale = 0.3}, "float mask" + at);
      compare(q, k, v, {.attn_mask = key_mask_for_heads(keep_mask_from_lengths({S, 5}, S))},
              "padding" + at);
      compare(q, k, v, {.dropout_p = 0.25}, "dropout" + at);
      SdpaOptions variants{.causal = CausalMask::kBottomRight};
      variants.window_left = 100;
      variants.alibi_slopes = {0.5, 0.125};
      variants.softcap = 3.0;
      compare(q, k, v, variants, "window, alibi, softcap" + at);
    }
  }
  // Keys and values strided along E ([B, H, E, S] memory) take the tiled kernel.
  Tensor kt = Tensor::randn({1, 2, 16, 300}, gen);
  Tensor q = Tensor::randn({1, 2, 1, 16}, gen);
  compare(q, kt.transpose(2, 3), kt.transpose(2, 3), {}, "keys strided along E");
}

// The few-query scores sum a vector of keys at a time, holding q in registers
// where E is 1, 2, 4 or 8 vectors of the ISA (4, 8 or 16 lanes): every such
// E, and keys that end mid-vector.
TEST_P(FusedAttention, FewQueriesEveryHeadDimOfWholeVectors) {
  Generator gen(29);
  for (int64_t E : {4, 8, 16, 32, 64, 128, 256, 24})
    for (int64_t L : {1, 3}) {
      Tensor q = Tensor::randn({1, 2, L, E}, gen), k = Tensor::randn({1, 2, 75, E}, gen);
      Tensor v = Tensor::randn({1, 2, 75, 8}, gen);
      compare(q, k, v, {.causal = CausalMask::kBottomRight},
              "E=" + std::to_string(E) + " L=" + std::to_string(L));
    }
}

// Decoding over a long cache splits each few-query problem's keys into chunks
// (512 keys or more each) whose softmax states are merged: against the
// float64 reference with every option that moves the keys a query sees, and
// equal to the bit on one and two threads (the chunks depend on the problem
// only). Without weights, which keep the one-pass kernel.
TEST_P(FusedAttention, LongDecodingMergesChunksOfKeys) {
  Generator gen(28);
  for (int64_t S : {1100, 3000}) {
    for (int64_t L : {1, 4}) {
      for (auto [E, Ev] : {std::pair<int64_t, int64_t>{64, 64}, {17, 5}}) {
        Tensor q = Tensor::randn({2, 2, L, E}, gen), k = Tensor::randn({2, 2, S, E}, gen);
        Tensor v = Tensor::randn({2, 2, S, Ev}, gen);
        const std::string at =
            " S=" + std::to_string(S) + " L=" + std::to_string(L) + " E=" + std::to_string(E);
        SdpaOptions window{.causal = CausalMask::kBottomRight};
        window.window_left = 1100;  // 1101 keys: two chunks, the first starting mid-cache
        SdpaOptions variants{.causal = CausalMask::kBottomRight};
        variants.alibi_slopes = {0.5, 0.125};
        variants.softcap = 3.0;
        const std::pair<SdpaOptions, std::string> cases[] = {
            {{.causal = CausalMask::kBottomRight}, "causal"},
            {{.attn_mask = key_mask_for_heads(keep_mask_from_lengths({S, S / 3}, S))}, "padding"},
            {{.attn_mask = Tensor::randn({L, S}, gen), .scale = 0.3}, "float mask"},
            {window, "window"},
            {variants, "alibi, softcap"},
            {{.dropout_p = 0.25}, "dropout"}};
        for (const auto& [options, what] : cases) {
          SdpaOptions o = options;
          o.backend = SdpaBackend::kFused;
          Generator g1(5), g2(5), g3(5);
          o.generator = &g1;
          const int threads = qkv::num_threads();
          qkv::set_num_threads(1);
          const SdpaResult one = scaled_dot_product_attention(q, k, v, o);
          qkv::set_num_threads(2);
          o.generator = &g2;
          const SdpaResult two = scaled_dot_product_attention(q, k, v, o);
          qkv::set_num_threads(threads);
          EXPECT_EQ(one.output.to_vector(), two.output.to_vector()) << what << at;
          SdpaOptions ref = o;
          ref.backend = SdpaBackend::kReference;
          ref.generator = &g3;
          if (ref.attn_mask.defined() && ref.attn_mask.dtype() != DType::kBool)
            ref.attn_mask = ref.attn_mask.to(DType::kFloat64);
          const SdpaResult r = scaled_dot_product_attention(
              q.to(DType::kFloat64), k.to(DType::kFloat64), v.to(DType::kFloat64), ref);
          EXPECT_LE(relative_error(two.output, r.output), 1e-5) << what << at;
          const std::vector<double> a = two.logsumexp.to_vector(), b = r.logsumexp.to_vector();
          for (size_t i = 0; i < a.size(); ++i)
            EXPECT_NEAR(a[i], b[i], 1e-5 * (1 + std::abs(b[i]))) << what << at;
        }
      }
    }
  }
  // A NaN value in a chunk whose scores sit far below another chunk's (its
  // factor e^(m_c − m) underflows to 0) still makes the output NaN: reported.
  {
    Tensor q = Tensor::ones({1, 1, 1, 16}), k = Tensor::ones({1, 1, 1100, 16});
    Tensor v = Tensor::randn({1, 1, 1100, 16}, gen);
    for (int64_t j = 550; j < 1100; ++j)  // the second chunk
      for (int64_t e = 0; e < 16; ++e) k.set({0, 0, j, e}, -100.0);
    v.set({0, 0, 700, 5}, std::nan(""));
    EXPECT_THROW(scaled_dot_product_attention(q, k, v, {.backend = SdpaBackend::kFused}), Error);
  }
  // Many problems take fewer chunks (at most 256 items), 130 none at all.
  for (int64_t H : {70, 130}) {
    Tensor q = Tensor::randn({1, H, 1, 16}, gen), k = Tensor::randn({1, H, 1100, 16}, gen);
    Tensor v = Tensor::randn({1, H, 1100, 16}, gen);
    const SdpaResult got = scaled_dot_product_attention(q, k, v, {.backend = SdpaBackend::kFused});
    const SdpaResult want =
        scaled_dot_product_attention(q.to(DType::kFloat64), k.to(DType::kFloat64),
                                     v.to(DType::kFloat64), {.backend = SdpaBackend::kReference});
    EXPECT_LE(relative_error(got.output, want.output), 1e-5) << "H=" << H;
  }
}

// bfloat16 in and out, float32 inside: against the float64 reference on the
// same (bfloat16-rounded) values, forward and gradients, within 1e-2.
TEST_P(FusedAttention, BFloat16InputsWithFloat32Accumulation) {
  Generator gen(28);
  auto bf16 = [&](const Shape& shape) { return Tensor::randn(shape, gen).to(DType::kBFloat16); };
  for (auto [L, S] : {std::pair<int64_t, int64_t>{1, 300}, {37, 130}, {200, 200}}) {
    const Tensor q = bf16({2, 4, L, 32}), k = bf16({2, 2, S, 32}), v = bf16({2, 2, S, 24});
    const Tensor mask = bf16({L, S});
    const Tensor grad_out = bf16({2, 4, L, 24});
    for (bool with_mask : {false, true}) {
      SdpaOptions o{.enable_gqa = true, .backend = SdpaBackend::kFused};
      if (with_mask) o.attn_mask = mask;
      const SdpaResult got = scaled_dot_product_attention(q, k, v, o);
      EXPECT_EQ(got.output.dtype(), DType::kBFloat16);
      EXPECT_EQ(got.kernel, std::string("fused-") + GetParam()->name);
      SdpaOptions ref_o = o;
      ref_o.backend = SdpaBackend::kReference;
      if (with_mask) ref_o.attn_mask = mask.to(DType::kFloat64);
      const Tensor q64 = q.to(DType::kFloat64), k64 = k.to(DType::kFloat64),
                   v64 = v.to(DType::kFloat64);
      const SdpaResult ref = scaled_dot_product_attention(q64, k64, v64, ref_o);
      const std::string at = " L=" + std::to_string(L) + (with_mask ? " mask" : "");
      EXPECT_LE(relative_error(got.output, ref.output), 1e-2) << at;
      EXPECT_GT(relative_error(got.output, ref.output), 0.0) << "rounded to bfloat16" << at;

      const SdpaGradients g = scaled_dot_product_attention_backward(grad_out, q, k, v, got, o);
      const SdpaGradients rg = scaled_dot_product_attention_backward(grad_out.to(DType::kFloat64),
                                                                     q64, k64, v64, ref, ref_o);
      EXPECT_EQ(g.query.dtype(), DType::kBFloat16);
      EXPECT_LE(relative_error(g.query, rg.query), 1e-2) << at;
      EXPECT_LE(relative_error(g.key, rg.key), 1e-2) << at;
      EXPECT_LE(relative_error(g.value, rg.value), 1e-2) << at;
      if (with_mask) {
        EXPECT_LE(relative_error(g.attn_mask, rg.attn_mask), 1e-2) << at;
      }
    }
  }
  // Mixed dtypes are an error that names them.
  qkv_test::expect_error(
      [&] {
        scaled_dot_product_attention(bf16({1, 1, 4, 8}), Tensor::randn({1, 1, 4, 8}, gen),
                                     bf16({1, 1, 4, 8}));
      },
      "bfloat16, float32", ErrorKind::kType);
}

// Without a float mask or weights, bfloat16 runs in the fused kernel itself
// with bfloat16 products: the same arithmetic as float32 inputs of the same
// values with precision kBFloat16, so the output must be that output
// rounded, bit for bit (tests/test_bf16_attention.cc holds both to float64).
TEST_P(FusedAttention, BFloat16TilesMatchFloat32WithBFloat16ProductsExactly) {
  Generator gen(29);
  auto bf16 = [&](const Shape& shape) { return Tensor::randn(shape, gen).to(DType::kBFloat16); };
  const Tensor kt = bf16({2, 2, 64, 150});  // keys strided along E
  struct Case {
    std::string name;
    Tensor q, k, v;
    SdpaOptions options;
  };
  const Case cases[] = {
      {"E=Ev=64", bf16({2, 4, 130, 64}), bf16({2, 4, 150, 64}), bf16({2, 4, 150, 64}), {}},
      {"GQA, Ev=24, bool mask",
       bf16({2, 4, 37, 32}),
       bf16({2, 2, 90, 32}),
       bf16({2, 2, 90, 24}),
       {.attn_mask = key_mask_for_heads(keep_mask_from_lengths({90, 61}, 90)), .enable_gqa = true}},
      {"causal bottom-right, 3 queries",
       bf16({1, 3, 3, 64}),
       bf16({1, 3, 40, 64}),
       bf16({1, 3, 40, 64}),
       {.causal = CausalMask::kBottomRight}},
      {"keys strided along E, dropout",
       bf16({2, 2, 20, 64}),
       kt.transpose(2, 3),
       bf16({2, 2, 150, 64}),
       {.dropout_p = 0.25}},
  };
  for (const Case& c : cases) {
    SdpaOptions o = c.options;
    Generator g1(3), g2(3);
    o.generator = &g1;
    const SdpaResult got = scaled_dot_product_attention(c.q, c.k, c.v, o);
    EXPECT_EQ(got.kernel, std::string("fused-") + GetParam()->name) << c.name;
    ASSERT_EQ(got.output.dtype(), DType::kBFloat16) << c.name;
    o.generator = &g2;
    o.precision = Precision::kBFloat16;
    const SdpaResult wide = scaled_dot_product_attention(
        c.q.to(DType::kFloat32), c.k.to(DType::kFloat32), c.v.to(DType::kFloat32), o);
    if (c.q.size(-2) > 4) {
      EXPECT_EQ(got.output.to_vector(), wide.output.to(DType::kBFloat16).to_vector()) << c.name;
      EXPECT_EQ(got.logsumexp.to_vector(), wide.logsumexp.to_vector()) << c.name;
    } else {  // float32 keeps the few-query kernel (float32 products): P's rounding apart
      EXPECT_LE(relative_error(got.output, wide.output), 1e-2) << c.name;
      EXPECT_LE(relative_error(got.logsumexp, wide.logsumexp), 1e-5) << c.name;
    }
  }
}

TEST_P(FusedAttention, StridedInputs) {
  Generator gen(23);
  // [B, L, H, E] memory viewed as [B, H, L, E], as MultiheadAttention produces.
  Tensor x = Tensor::randn({2, 50, 3, 16}, gen);
  Tensor q = x.transpose(1, 2);
  compare(q, q, q, {}, "transposed view");
}

TEST_P(FusedAttention, NonFiniteInputsAreReportedNotHidden) {
  Generator gen(24);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16})
    for (const char* arg : {"query", "key", "value"}) {
      // (Ev 19: the outputs past the last whole vector are checked too; Ev 64:
      // the vector narrowing of bfloat16 outputs)
      for (double bad : {std::nan(""), double(INFINITY), -double(INFINITY)}) {
        for (int64_t ev : {16, 19, 64}) {
          Tensor q = Tensor::randn({1, 2, 40, 16}, gen), k = Tensor::randn({1, 2, 70, 16}, gen);
          Tensor v = Tensor::randn({1, 2, 70, ev}, gen);
          Tensor& t = arg[0] == 'q' ? q : arg[0] == 'k' ? k : v;
          t.set({0, 1, 5, arg[0] == 'v' ? ev - 1 : 3}, bad);
          try {
            scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype),
                                         {.backend = SdpaBackend::kFused});
            ADD_FAILURE() << "no error for " << bad << " in " << arg;
          } catch (const Error& e) {
            // The input is named, not reported as an overflow of finite inputs.
            const std::string what = e.what();
            EXPECT_NE(what.find(std::string(": ") + arg + " of shape"), std::string::npos)
                << dtype_name(dtype) << ": " << what;
            EXPECT_NE(what.find("contains NaN or infinite"), std::string::npos)
                << dtype_name(dtype) << ": " << what;
          }
        }
      }
    }
}

QKV_INSTANTIATE_FOR_EVERY_KERNEL_TABLE(FusedAttention);

}  // namespace
