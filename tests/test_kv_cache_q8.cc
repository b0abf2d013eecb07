// nn::KVCache with q8_0 storage: the round trip stays within half a scale of
// every value (checked in float64), attention over the cache equals attention
// over keys and values fake-quantized by an independent float64 reference,
// cached decoding equals recomputation through a fresh q8_0 cache, edge and
// hostile settings give clear errors, and on SmolLM2 (when present) greedy
// choices with a q8_0 cache agree with the float32 cache's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "qkv/attention.h"
#include "qkv/generator.h"
#include "qkv/models/gguf_model.h"
#include "qkv/nn/decoder_session.h"
#include "qkv/nn/kv_cache.h"
#include "relative_diff.h"
#include "test_util.h"
#include "tiny_llama_model.h"

namespace qkv::nn {
namespace {

namespace fs = std::filesystem;
using qkv_test::expect_error;
using qkv_test::max_relative_diff;

KVCacheOptions q8_options(int64_t max_len = 16) {
  return {.num_layers = 2,
          .batch_size = 2,
          .num_kv_heads = 3,
          .max_len = max_len,
          .head_dim = 64,
          .value_dim = 32,
          .storage = KVCacheStorage::kQ8_0};
}

// Values with very different ranges per block: tiny, huge, an outlier, a zero block.
Tensor varied(const Shape& shape, Generator& gen) {
  Tensor t = Tensor::randn(shape, gen).contiguous();
  float* p = t.data<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t block = i / 32;
    if (block % 5 == 1) p[i] *= 1e-4f;
    if (block % 5 == 2) p[i] *= 3e3f;
    if (block % 5 == 3) p[i] = 0.0f;
    if (block % 5 == 4 && i % 32 == 7) p[i] = 250.0f;  // one outlier sets the scale
  }
  return t;
}

// The parts [B, H, L_i, E] one after another along L.
Tensor cat_positions(const std::vector<Tensor>& parts) {
  int64_t L = 0;
  for (const Tensor& p : parts) L += p.size(2);
  const Tensor& p0 = parts.front();
  Tensor out = Tensor::zeros({p0.size(0), p0.size(1), L, p0.size(3)});
  int64_t at = 0;
  for (const Tensor& p : parts) {
    Tensor dst = out.slice(2, at, at + p.size(2));
    dst.copy_from(p);
    at += p.size(2);
  }
  return out;
}

// Reference Q8_0 in float64: per block of 32 along the last dim, d = max|x| / 127
// and x̂ = d · round(x / d). x: [B, H, L, E] float32 -> float64 x̂ and the scales.
struct FakeQuant {
  Tensor values;               // float64 [B, H, L, E]
  std::vector<double> scales;  // per block, row-major
};

FakeQuant fake_quantize(const Tensor& x) {
  const Tensor xc = x.contiguous();
  FakeQuant out{Tensor::zeros(x.shape(), DType::kFloat64), {}};
  const float* in = xc.data<float>();
  double* o = out.values.data<double>();
  for (int64_t b0 = 0; b0 < xc.numel(); b0 += 32) {
    double amax = 0.0;
    for (int64_t i = 0; i < 32; ++i) amax = std::max(amax, std::abs(double(in[b0 + i])));
    const double d = amax / 127.0;
    out.scales.push_back(d);
    for (int64_t i = 0; i < 32; ++i) o[b0 + i] = d > 0 ? d * std::nearbyint(in[b0 + i] / d) : 0.0;
  }
  return out;
}

TEST(KVCacheQ8, RoundTripWithinHalfAScaleOfEveryValue) {
  KVCache cache(q8_options());
  Generator gen(3);
  std::vector<Tensor> ks, vs;
  for (int64_t L : {1, 5, 1, 3}) {
    // Strided inputs: [B, L, H, E] transposed to [B, H, L, E].
    ks.push_back(varied({2, L, 3, 64}, gen).transpose(1, 2));
    vs.push_back(varied({2, L, 3, 32}, gen).transpose(1, 2));
    cache.append(1, ks.back(), vs.back());
  }
  EXPECT_EQ(cache.length(1), 10);
  for (bool values : {false, true}) {
    const Tensor x = cat_positions(values ? vs : ks);  // [2, 3, 10, E]
    const Tensor got = (values ? cache.values(1) : cache.keys(1)).contiguous();
    ASSERT_EQ(got.shape(), x.shape());
    const FakeQuant ref = fake_quantize(x);
    int64_t exact_extremes = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double xi = x.data<float>()[i], gi = got.data<float>()[i];
      const double d = ref.scales[static_cast<size_t>(i / 32)];
      // d/2, plus the float32 roundings of the scale and of d·q (relative 2^-23 each).
      ASSERT_LE(std::abs(xi - gi), d / 2 + 4e-7 * std::abs(xi) + 1e-30)
          << (values ? "values" : "keys") << " element " << i << ": x = " << xi << ", read back "
          << gi << ", scale " << d;
      if (d > 0 && std::abs(xi) == d * 127.0) exact_extremes += std::abs(xi - gi) <= 1e-6 * d;
    }
    // The values that set each nonzero scale come back (nearly) exactly.
    EXPECT_GT(exact_extremes, 0);
  }
}

TEST(KVCacheQ8, AttentionOverTheCacheEqualsAttentionOverFakeQuantizedKeysAndValues) {
  KVCacheOptions o = q8_options(40);
  o.value_dim = 64;
  KVCache cache(o);
  Generator gen(4);
  const Tensor k = Tensor::randn({2, 3, 33, 64}, gen), v = Tensor::randn({2, 3, 33, 64}, gen);
  cache.append(0, k.slice(2, 0, 30), v.slice(2, 0, 30));  // a prompt
  for (int64_t t = 30; t < 33; ++t) {                     // then single steps
    cache.append(0, k.slice(2, t, t + 1), v.slice(2, t, t + 1));
    const Tensor q = Tensor::randn({2, 6, 1, 64}, gen);  // GQA: 2 query heads per kv head
    SdpaOptions sdpa;
    sdpa.enable_gqa = true;
    sdpa.causal = CausalMask::kBottomRight;
    const Tensor got = scaled_dot_product_attention(q, cache.keys(0), cache.values(0), sdpa).output;
    const Tensor ref = scaled_dot_product_attention(
                           q.to(DType::kFloat64), fake_quantize(k.slice(2, 0, t + 1)).values,
                           fake_quantize(v.slice(2, 0, t + 1)).values, sdpa)
                           .output;
    EXPECT_LT(max_abs_diff(got, ref), 2e-5) << "length " << t + 1;
    // ... and the quantization is visible: not the float keys' attention.
    const Tensor plain =
        scaled_dot_product_attention(q, k.slice(2, 0, t + 1), v.slice(2, 0, t + 1), sdpa).output;
    EXPECT_GT(max_abs_diff(got, plain), 1e-5);
  }
}

TEST(KVCacheQ8, UsesAboutAQuarterOfTheMemory) {
  KVCacheOptions o = q8_options(64);
  const KVCache q8(o);
  o.storage = KVCacheStorage::kFloat;
  const KVCache f32(o);
  EXPECT_EQ(q8.storage_bytes(), 2 * 2 * 3 * 64 * (64 + 32) * 36 / 32);
  EXPECT_EQ(f32.storage_bytes(), 2 * 2 * 3 * 64 * (64 + 32) * 4);
}

TEST(KVCacheQ8, ResetAndTruncateForgetPositions) {
  KVCache cache(q8_options(8));
  Generator gen(5);
  const Tensor k = Tensor::randn({2, 3, 6, 64}, gen), v = Tensor::randn({2, 3, 6, 32}, gen);
  for (int64_t layer : {0, 1}) cache.append(layer, k, v);
  cache.truncate(2);
  EXPECT_EQ(cache.keys(0).size(2), 2);
  const Tensor k2 = Tensor::randn({2, 3, 6, 64}, gen), v2 = Tensor::randn({2, 3, 6, 32}, gen);
  cache.append(0, k2, v2);  // overwrites positions 2..7
  const Tensor keys = cache.keys(0);
  EXPECT_LT(max_abs_diff(keys.slice(2, 0, 2), k.slice(2, 0, 2)), 0.05);
  EXPECT_LT(max_abs_diff(keys.slice(2, 2, 8), k2), 0.05);
  cache.reset();
  EXPECT_EQ(cache.length(), 0);
  EXPECT_EQ(cache.keys(1).size(2), 0);
}

TEST(KVCacheQ8, EdgeAndHostileSettingsAreClearErrors) {
  KVCache cache(q8_options(4));
  const Tensor k = Tensor::zeros({2, 3, 3, 64}), v = Tensor::zeros({2, 3, 3, 32});
  cache.append(0, k, v);
  expect_error([&] { cache.append(0, k, v); }, {"full", "max_len = 4", "layer 0 holds 3"});
  EXPECT_EQ(cache.length(0), 3);  // unchanged
  // Head dims that do not split into blocks of 32.
  KVCacheOptions o = q8_options();
  o.head_dim = 48;
  expect_error([&] { KVCache c(o); }, {"q8_0", "multiples of 32", "head_dim=48"});
  o = q8_options();
  o.value_dim = 40;
  expect_error([&] { KVCache c(o); }, {"multiples of 32", "value_dim=40"});
  o = q8_options();
  o.dtype = DType::kFloat64;
  expect_error([&] { KVCache c(o); }, ErrorKind::kType, {"q8_0", "float32", "float64"});
  // The in-place float accessors refuse.
  expect_error([&] { cache.key_slots(0, 1); }, {"key_slots", "q8_0"});
  expect_error([&] { cache.value_storage(0); }, {"value_storage", "q8_0"});
  // Wrong shapes are still refused before anything is written.
  EXPECT_THROW(cache.append(1, Tensor::zeros({2, 3, 1, 32}), Tensor::zeros({2, 3, 1, 32})), Error);
  EXPECT_EQ(cache.length(1), 0);
  // Names.
  EXPECT_EQ(parse_kv_cache_storage("q8_0"), KVCacheStorage::kQ8_0);
  EXPECT_EQ(parse_kv_cache_storage("f32"), KVCacheStorage::kFloat);
  expect_error([] { parse_kv_cache_storage("q4_0", "--kv-cache"); },
               {"--kv-cache", "\"q4_0\"", "f32", "q8_0"});
}

DecoderModelConfig small_model() {
  return {.vocab_size = 40,
          .d_model = 128,
          .num_layers = 3,
          .num_heads = 4,
          .num_kv_heads = 2,
          .max_seq_len = 64};
}

TEST(KVCacheQ8, CachedDecodingEqualsRecomputationWithQuantizedKeysAndValues) {
  Generator gen(6);
  DecoderModel model(small_model(), &gen);
  model.eval();
  model.set_kv_cache_storage(KVCacheStorage::kQ8_0);
  const std::vector<int64_t> prompt = {3, 9, 1, 30, 2, 7};
  DecoderSession session(model, 1, 32);
  std::vector<int64_t> seq = prompt;
  std::vector<Tensor> cached = {session.prefill(seq).clone()};
  for (int64_t i = 0; i < 12; ++i) {
    const std::span<const float> row = session.logits_row(0);
    const int64_t next = std::max_element(row.begin(), row.end()) - row.begin();
    seq.push_back(next);
    cached.push_back(session.step({&next, 1}).clone());
  }
  // Recomputation: the whole sequence in one pass through a fresh q8_0 cache,
  // whose attention reads every key and value quantized.
  KVCache fresh = model.make_cache(1, 32);
  const Tensor full = model.forward(seq, 1, fresh);  // [1, T, V]
  // ... and through a float32 cache, which it must differ from (a little).
  model.set_kv_cache_storage(KVCacheStorage::kFloat);
  KVCache f32 = model.make_cache(1, 32);
  const Tensor full_f32 = model.forward(seq, 1, f32);
  double worst_f32 = 0.0;
  for (size_t k = 0; k < cached.size(); ++k) {
    const int64_t pos = static_cast<int64_t>(prompt.size() + k) - 1;
    EXPECT_LT(max_relative_diff(cached[k], full.select(1, pos)), 1e-5) << "position " << pos;
    worst_f32 = std::max(worst_f32, max_relative_diff(cached[k], full_f32.select(1, pos)));
  }
  EXPECT_GT(worst_f32, 1e-6);
  EXPECT_LT(worst_f32, 0.05);
}

TEST(KVCacheQ8, ModelRefusesQ8WhenItsHeadDimIsNotAMultipleOf32) {
  DecoderModelConfig c = small_model();
  c.d_model = 96;  // head dim 24
  Generator gen(7);
  DecoderModel model(c, &gen);
  expect_error([&] { model.set_kv_cache_storage(KVCacheStorage::kQ8_0); },
               {"q8_0", "multiples of 32", "head_dim=24"});
  EXPECT_EQ(model.kv_cache_storage(), KVCacheStorage::kFloat);
  // A GGUF model too: the tiny test file has head dim 16.
  expect_error([] { qkv_test::load_tiny_llama({}, {.kv_cache = KVCacheStorage::kQ8_0}); },
               {"q8_0", "head_dim=16"});
}

// --- SmolLM2 ---------------------------------------------------------------------------------

using qkv_test::smollm2_path;

int64_t argmax(std::span<const float> row) {
  return std::max_element(row.begin(), row.end()) - row.begin();
}

// 20 prompts × 32 tokens: the float32 cache's greedy continuation of each,
// teacher-forced through a q8_0 cache; the greedy choices agree at ≥ 95 % of
// the positions. Also counts free-running agreement (tokens before the first
// difference), reported, not checked.
TEST(KVCacheQ8SmolLM2, GreedyChoicesAgreeWithTheFloatCache) {
  if (!fs::exists(smollm2_path()))
    GTEST_SKIP() << smollm2_path() << " is missing: run scripts/fetch_model.sh";
  models::GgufModel m = models::load_gguf_model(smollm2_path(), {.max_seq_len = 256});
  std::ifstream in(qkv_test::tokenizer_corpus_path());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<int32_t> ids = m.tokenizer.encode(text);
  constexpr size_t kPrompts = 20, kPromptLen = 24;
  constexpr int64_t kTokens = 32;
  ASSERT_GE(ids.size(), kPrompts * kPromptLen);
  int64_t agree = 0, total = 0, leading = 0;
  for (size_t p = 0; p < kPrompts; ++p) {
    const size_t at = p * (ids.size() / kPrompts);
    const std::vector<int64_t> prompt(ids.begin() + at, ids.begin() + at + kPromptLen);
    m.model.set_kv_cache_storage(KVCacheStorage::kFloat);
    const std::vector<int64_t> ref =
        generate(m.model, prompt, {.max_new_tokens = kTokens, .sampling = {.temperature = 0.0}});
    m.model.set_kv_cache_storage(KVCacheStorage::kQ8_0);
    DecoderSession q8(m.model, 1, kPromptLen + kTokens);
    q8.prefill(prompt);
    bool same_so_far = true;
    for (int64_t t = 0; t < kTokens; ++t) {
      const bool same = argmax(q8.logits_row(0)) == ref[t];
      agree += same;
      ++total;
      same_so_far = same_so_far && same;
      leading += same_so_far;
      if (t + 1 < kTokens) q8.step({&ref[t], 1});  // teacher-forced: the float cache's token
    }
  }
  std::printf(
      "q8_0 vs f32 KV cache, greedy choices: %lld of %lld teacher-forced positions agree "
      "(%.1f%%); %lld tokens before the first difference (free-running)\n",
      static_cast<long long>(agree), static_cast<long long>(total), 100.0 * agree / total,
      static_cast<long long>(leading));
  EXPECT_EQ(total, static_cast<int64_t>(kPrompts) * kTokens);
  EXPECT_GE(static_cast<double>(agree) / total, 0.95) << agree << " of " << total;
}

}  // namespace
}  // namespace qkv::nn
