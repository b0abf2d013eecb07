// models::load_gguf_model never ignores what changes the math: Llama 3's rope_freqs.weight is
// applied (prefill and cached steps, fast and exact), every other llama.* key that changes
// the model is refused by name unless neutral, and every tensor of the file is one the model
// uses (a stray tensor, or blocks past block_count, are refused by name). Files shorter than
// the magic get the GGUF reader's error.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "float_quant_kernels.h"
#include "gguf_writer.h"
#include "qkv/models/decoder_model_file.h"
#include "qkv/models/gguf_model.h"
#include "qkv/nn/decoder_session.h"
#include "qkv/nn/positional_encoding.h"
#include "relative_diff.h"
#include "test_util.h"
#include "tiny_llama_model.h"

namespace {

namespace fs = std::filesystem;
using qkv::ErrorKind;
using qkv::Tensor;
using qkv::io::GgufFile;
using qkv::models::GgufModel;
using qkv::models::load_gguf_model;
using qkv_test::expect_error;
using qkv_test::GgufWriter;
using qkv_test::kD;
using qkv_test::le;
using qkv_test::load_tiny_llama;
using qkv_test::max_relative_diff;
using qkv_test::tiny_llama_file;
using qkv_test::TinySpec;

constexpr int64_t kHeadDim = 16;  // tiny_llama: 2 heads of 16

GgufModel load_tiny(const TinySpec& s, bool exact = false, int64_t max_seq_len = 8192) {
  return load_tiny_llama(s, {.exact = exact, .max_seq_len = max_seq_len});
}

// An F32 tensor of `values` (ggml dims = {values.size()}).
std::function<void(GgufWriter&)> f32_tensor(const std::string& name, std::vector<float> values) {
  return [name, values](GgufWriter& w) {
    std::string data;
    for (float v : values) data += le(v);
    w.tensor(name, {values.size()}, qkv_test::kTypeF32, data);
  };
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  return ac.shape() == bc.shape() &&
         std::memcmp(ac.data<float>(), bc.data<float>(), bc.numel() * sizeof(float)) == 0;
}

const std::vector<int64_t> kIds = {0, 5, 2, 3, 6, 1, 4, 4, 2, 7, 3, 3, 1, 0, 5, 6, 2, 2, 4, 1};

// --- Tensors: every one used, or the file refused naming it ------------------------------------

struct StrayTensor {
  std::string name;
  std::vector<float> values;
  std::vector<std::string> message;
};

class GgufStrayTensor : public ::testing::TestWithParam<StrayTensor> {};

TEST_P(GgufStrayTensor, IsRefusedByName) {
  const StrayTensor& p = GetParam();
  for (bool exact : {false, true})
    expect_error([&] { load_tiny({.more_tensors = f32_tensor(p.name, p.values)}, exact); },
                 p.message);
}

const std::vector<float> kOnesD(kD, 1.0f), kOnesHead(kHeadDim, 1.0f);
const std::string kUnused = "is not one a llama model uses";

INSTANTIATE_TEST_SUITE_P(
    Llama, GgufStrayTensor,
    ::testing::Values(
        StrayTensor{"blk.1.attn_q.bias", kOnesD, {"'tiny.gguf'", "\"blk.1.attn_q.bias\"", kUnused}},
        StrayTensor{
            "blk.0.attn_q_norm.weight", kOnesHead, {"\"blk.0.attn_q_norm.weight\"", kUnused}},
        StrayTensor{"blk.1.post_attention_norm.weight",
                    kOnesD,
                    {"\"blk.1.post_attention_norm.weight\"", kUnused}},
        StrayTensor{"output.bias",
                    std::vector<float>(qkv_test::kVocab, 0.0f),
                    {"\"output.bias\"", kUnused}},
        StrayTensor{"rope_factors_long.weight",
                    std::vector<float>(kHeadDim / 2, 1.0f),
                    {"\"rope_factors_long.weight\"", kUnused}},
        // Past block_count (2): the metadata understates the blocks.
        StrayTensor{
            "blk.2.attn_norm.weight",
            kOnesD,
            {"\"blk.2.attn_norm.weight\" is in block 2", "llama.block_count is 2 (blocks 0 to 1)"}},
        StrayTensor{"blk.3.attn_q.bias", kOnesD, {"\"blk.3.attn_q.bias\" is in block 3"}}),
    [](const ::testing::TestParamInfo<StrayTensor>& info) {
      std::string name = info.param.name;
      for (char& ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return name;
    });

TEST(GgufTensors, AMissingTensorIsNamed) {
  expect_error([] { load_tiny({.drop_tensor = "blk.1.attn_v.weight"}); },
               {"GGUF file 'tiny.gguf' has no tensor \"blk.1.attn_v.weight\""});
  expect_error([] { load_tiny({.drop_tensor = "token_embd.weight"}); },
               {"no tensor \"token_embd.weight\""});
}

// --- SmolLM2 with its block_count rewritten --------------------------------------------------

// The SmolLM2 file with llama.block_count (a u32) set to `blocks`, in memory.
GgufFile smollm2_with_block_count(const std::vector<std::byte>& file, uint32_t blocks) {
  const std::string key = qkv_test::gguf_str("llama.block_count") + le<uint32_t>(qkv_test::kU32);
  const auto* begin = reinterpret_cast<const char*>(file.data());
  const std::string_view bytes(begin, file.size());
  const size_t at = bytes.find(key);
  EXPECT_NE(at, std::string_view::npos);
  EXPECT_EQ(bytes.find(key, at + 1), std::string_view::npos);
  std::vector<std::byte> copy = file;
  std::memcpy(copy.data() + at + key.size(), &blocks, sizeof blocks);
  return GgufFile::from_bytes(std::move(copy), "smollm2-edited.gguf");
}

TEST(GgufTensors, SmolLM2WithUnderstatedBlockCountIsRefused) {
  const fs::path path = qkv_test::smollm2_path();
  if (!fs::exists(path)) GTEST_SKIP() << path << " is missing: run scripts/fetch_model.sh";
  std::ifstream in(path, std::ios::binary);
  const std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  const std::vector<std::byte> file(p, p + s.size());
  for (uint32_t blocks : {1u, 29u}) {
    SCOPED_TRACE(blocks);
    const GgufFile f = smollm2_with_block_count(file, blocks);
    ASSERT_EQ(f.integer("llama.block_count"), blocks);
    // The first tensor of a block past the count, in file order (SmolLM2 lists blk.N's
    // attn_norm first).
    std::string first;
    for (const auto& t : f.tensors())
      if (first.empty() && t.name.starts_with("blk." + std::to_string(blocks) + "."))
        first = t.name;
    EXPECT_EQ(first, "blk." + std::to_string(blocks) + ".attn_norm.weight");
    expect_error([&] { load_gguf_model(f); },
                 {"'smollm2-edited.gguf'", "tensor \"" + first + "\" is in block",
                  "llama.block_count is " + std::to_string(blocks)});
  }
  // One block too many: the tensor the metadata promises is missing.
  const GgufFile f = smollm2_with_block_count(file, 31);
  expect_error([&] { load_gguf_model(f); }, {"has no tensor \"blk.30."});
}

// --- Metadata keys that change the math ------------------------------------------------------

struct MathKey {
  std::string label;
  std::function<void(GgufWriter&)> write;
  std::vector<std::string> message;  // empty: the file loads
  int64_t max_seq_len = 8192;
};

class GgufMathKey : public ::testing::TestWithParam<MathKey> {};

TEST_P(GgufMathKey, IsRefusedByNameUnlessNeutral) {
  const MathKey& p = GetParam();
  const TinySpec spec{.more_keys = p.write};
  if (p.message.empty()) {
    GgufModel m = load_tiny(spec, false, p.max_seq_len);
    // Neutral: the same logits as the file without the key.
    GgufModel plain = load_tiny({}, false, p.max_seq_len);
    const std::vector<int64_t> ids(kIds.begin(), kIds.begin() + 8);
    EXPECT_TRUE(same_bits(m.model.forward(ids, 1), plain.model.forward(ids, 1)));
    return;
  }
  std::vector<std::string> parts = p.message;
  parts.insert(parts.begin(), "GGUF file 'tiny.gguf'");
  expect_error([&] { load_tiny(spec, false, p.max_seq_len); }, parts);
  // gguf_decoder_config, which reads the keys, refuses them too.
  expect_error([&] { qkv::models::gguf_decoder_config(tiny_llama_file(spec), p.max_seq_len); },
               parts);
}

auto f32_key(const char* key, float v) {
  return [=](GgufWriter& w) { w.f32(key, v); };
}
auto u32_key(const char* key, uint32_t v) {
  return [=](GgufWriter& w) { w.u32(key, v); };
}
auto str_key(const char* key, const char* v) {
  return [=](GgufWriter& w) { w.str(key, v); };
}
const std::string kNotSupported = "is not supported: qkv's llama has no such feature";

INSTANTIATE_TEST_SUITE_P(
    Llama, GgufMathKey,
    ::testing::Values(
        // Refused, one key each.
        MathKey{"attn_logit_softcapping",
                f32_key("llama.attn_logit_softcapping", 50.0f),
                {"metadata key \"llama.attn_logit_softcapping\" (f32 50)", kNotSupported}},
        MathKey{"final_logit_softcapping",
                f32_key("llama.final_logit_softcapping", 30.0f),
                {"metadata key \"llama.final_logit_softcapping\" (f32 30)", kNotSupported}},
        MathKey{"rope_scaling_type_yarn",
                str_key("llama.rope.scaling.type", "yarn"),
                {"llama.rope.scaling.type is \"yarn\"", "supported: \"none\"", "rope_freqs"}},
        MathKey{"rope_scaling_type_longrope",
                str_key("llama.rope.scaling.type", "longrope"),
                {"llama.rope.scaling.type is \"longrope\""}},
        MathKey{"rope_scaling_linear_factor_4",
                [](GgufWriter& w) {
                  w.str("llama.rope.scaling.type", "linear");
                  w.f32("llama.rope.scaling.factor", 4.0f);
                },
                {"llama.rope.scaling.factor is 4", "position scaling is not supported"}},
        MathKey{"rope_scaling_factor_2",
                f32_key("llama.rope.scaling.factor", 2.0f),
                {"llama.rope.scaling.factor is 2"}},
        MathKey{"rope_scale_linear_2",
                f32_key("llama.rope.scale_linear", 2.0f),
                {"llama.rope.scale_linear is 2"}},
        MathKey{"rope_scaling_attn_factor",
                f32_key("llama.rope.scaling.attn_factor", 0.5f),
                {"llama.rope.scaling.attn_factor is 0.5", "expected 1"}},
        MathKey{"rope_dimension_count",
                u32_key("llama.rope.dimension_count", 8),
                {"llama.rope.dimension_count is 8", "= 16 dims"}},
        MathKey{"attention_key_length",
                u32_key("llama.attention.key_length", 32),
                {"llama.attention.key_length is 32", "= 16 dims"}},
        MathKey{"attention_value_length",
                u32_key("llama.attention.value_length", 8),
                {"llama.attention.value_length is 8"}},
        MathKey{"attention_scale",
                f32_key("llama.attention.scale", 0.1f),
                {"llama.attention.scale is 0.1", "1/sqrt(head dim) = 0.25"}},
        MathKey{"expert_count",
                u32_key("llama.expert_count", 8),
                {"llama.expert_count is 8", "mixture-of-experts"}},
        MathKey{"expert_used_count",
                u32_key("llama.expert_used_count", 2),
                {"llama.expert_used_count is 2"}},
        MathKey{"sliding_window",
                u32_key("llama.attention.sliding_window", 16),
                {"llama.attention.sliding_window is 16", "the model's context is 64",
                 "max_seq_len <= 16"}},
        MathKey{"rope_freq_base_swa",
                f32_key("llama.rope.freq_base_swa", 10000.0f),
                {"\"llama.rope.freq_base_swa\"", kNotSupported}},
        MathKey{"embedding_scale",
                f32_key("llama.embedding_scale", 12.0f),
                {"\"llama.embedding_scale\" (f32 12)", kNotSupported}},
        MathKey{"logit_scale", f32_key("llama.logit_scale", 0.5f), {"\"llama.logit_scale\""}},
        MathKey{
            "residual_scale", f32_key("llama.residual_scale", 0.2f), {"\"llama.residual_scale\""}},
        MathKey{"expert_shared_feed_forward_length",
                u32_key("llama.expert_shared_feed_forward_length", 64),
                {"\"llama.expert_shared_feed_forward_length\" (u32 64)"}},
        MathKey{"hidden_activation",
                str_key("llama.hidden_activation", "gelu"),
                {"\"llama.hidden_activation\" (string \"gelu\")"}},
        // Neutral values load, with the logits of the file without them.
        MathKey{"neutral_rope_scaling_none", str_key("llama.rope.scaling.type", "none"), {}},
        MathKey{"neutral_rope_scaling_linear_1",
                [](GgufWriter& w) {
                  w.str("llama.rope.scaling.type", "linear");
                  w.f32("llama.rope.scaling.factor", 1.0f);
                },
                {}},
        MathKey{"neutral_rope_scaling_factor_0", f32_key("llama.rope.scaling.factor", 0.0f), {}},
        MathKey{"neutral_attn_factor_1", f32_key("llama.rope.scaling.attn_factor", 1.0f), {}},
        MathKey{"neutral_dims",
                [](GgufWriter& w) {
                  w.u32("llama.rope.dimension_count", 16);
                  w.u32("llama.attention.key_length", 16);
                  w.u32("llama.attention.value_length", 16);
                },
                {}},
        MathKey{"neutral_attention_scale", f32_key("llama.attention.scale", 0.25f), {}},
        MathKey{"neutral_experts",
                [](GgufWriter& w) {
                  w.u32("llama.expert_count", 0);
                  w.u32("llama.expert_used_count", 0);
                },
                {}},
        MathKey{"neutral_sliding_window_0", u32_key("llama.attention.sliding_window", 0), {}},
        MathKey{"neutral_sliding_window_covers_context",
                u32_key("llama.attention.sliding_window", 16),
                {},
                16},
        MathKey{"neutral_informational",
                [](GgufWriter& w) {
                  w.u32("llama.rope.scaling.original_context_length", 8192);
                  w.boolean("llama.rope.scaling.finetuned", true);
                },
                {}}),
    [](const ::testing::TestParamInfo<MathKey>& info) { return info.param.label; });

// --- Llama 3's RoPE frequency factors (rope_freqs.weight) ------------------------------------

TEST(GgufRopeFreqs, AllOnesGiveTheLogitsOfNoFactors) {
  for (bool exact : {false, true}) {
    SCOPED_TRACE(exact ? "exact" : "fast");
    GgufModel with = load_tiny(
        {.more_tensors = f32_tensor("rope_freqs.weight", std::vector<float>(8, 1.0f))}, exact);
    GgufModel without = load_tiny({}, exact);
    EXPECT_EQ(with.model.config().rope_freq_factors, std::vector<double>(8, 1.0));
    EXPECT_TRUE(without.model.config().rope_freq_factors.empty());
    EXPECT_TRUE(same_bits(with.model.forward(kIds, 1), without.model.forward(kIds, 1)));
  }
}

// Factors c^i divide θ_i = b^(-2i/E) into (b·c^(E/2))^(-2i/E): the model of base b with
// factors 2^i is the model of base b·2^8 without. Exact in float32 (10000, 2^i, 2,560,000),
// so the two differ by the rounding of pow only — through the prompt and the cached steps.
TEST(GgufRopeFreqs, FactorsDivideEachFrequency) {
  std::vector<float> powers;
  for (int i = 0; i < 8; ++i) powers.push_back(std::ldexp(1.0f, i));
  for (bool exact : {false, true}) {
    SCOPED_TRACE(exact ? "exact" : "fast");
    // x as it is on every route: decoding and the full forward differ by summation order only
    const qkv_test::FloatQuantKernels float_kernels;
    GgufModel factors = load_tiny({.more_tensors = f32_tensor("rope_freqs.weight", powers)}, exact);
    GgufModel base = load_tiny({.drop_key = "llama.rope.freq_base",
                                .more_keys = f32_key("llama.rope.freq_base", 2560000.0f)},
                               exact);
    GgufModel plain = load_tiny({}, exact);
    const Tensor a = factors.model.forward(kIds, 1);
    EXPECT_LT(max_relative_diff(a, base.model.forward(kIds, 1)), 1e-5);
    EXPECT_GT(max_relative_diff(a, plain.model.forward(kIds, 1)), 1e-3)
        << "the factors were ignored";

    // Decoding through the KV cache (prefill, then one step at a time) rotates by the same
    // angles: its logits are the full forward's at each position.
    qkv::nn::DecoderSession session(factors.model);
    const int64_t V = qkv_test::kVocab;
    const Tensor first = session.prefill(std::vector<int64_t>(kIds.begin(), kIds.begin() + 4));
    EXPECT_LT(max_relative_diff(first, a.select(1, 3)), 1e-5);
    for (size_t t = 4; t < kIds.size(); ++t) {
      const Tensor step = session.step({&kIds[t], 1});
      EXPECT_LT(max_relative_diff(step, a.select(1, static_cast<int64_t>(t))), 1e-4)
          << "position " << t;
    }
    EXPECT_EQ(a.size(2), V);
  }
}

TEST(GgufRopeFreqs, BadFactorsAreRefusedByName) {
  expect_error([] { load_tiny({.more_tensors = f32_tensor("rope_freqs.weight", kOnesHead)}); },
               {"'tiny.gguf'", "tensor \"rope_freqs.weight\" has shape [16]", "expected [8]"});
  std::vector<float> zero(8, 1.0f);
  zero[3] = 0.0f;
  expect_error([&] { load_tiny({.more_tensors = f32_tensor("rope_freqs.weight", zero)}); },
               {"tensor \"rope_freqs.weight\" holds 0 at 3", "finite and > 0"});
  expect_error(
      [] {
        load_tiny({.more_tensors = [](GgufWriter& w) {
          std::string data;
          for (int i = 0; i < 8; ++i) data += le(1.0);
          w.tensor("rope_freqs.weight", {8}, qkv_test::kTypeF64, data);
        }});
      },
      ErrorKind::kType, {"tensor \"rope_freqs.weight\" is F64", "F32, F16, BF16"});
}

// The factors are part of the config: saved with the model and read back, never dropped.
TEST(GgufRopeFreqs, ConfigKeepsTheFactors) {
  qkv::nn::DecoderModelConfig c{.vocab_size = 8, .d_model = 32, .num_layers = 1, .num_heads = 2};
  c.rope_freq_factors = {1, 1, 1.5, 2, 4, 8, 8, 8};
  const std::string json = qkv::models::decoder_config_to_json(c);
  EXPECT_NE(json.find("\"rope_freq_factors\":[1.0,1.0,1.5,2.0,4.0,8.0,8.0,8.0]"), std::string::npos)
      << json;
  EXPECT_EQ(qkv::models::decoder_config_from_json(json).rope_freq_factors, c.rope_freq_factors);
  // Without factors the JSON is as before (no key).
  EXPECT_EQ(qkv::models::decoder_config_to_json({}).find("rope_freq_factors"), std::string::npos);
  c.rope_freq_factors = {1, 2};
  expect_error(
      [&] { qkv::nn::resolved_config(c); },
      {"rope_freq_factors must be empty or, with RoPE, hold head_dim / 2 = 8 values", "got 2"});
  c.rope_freq_factors = std::vector<double>(8, 1.0);
  c.positions = qkv::nn::PositionKind::kLearned;
  expect_error([&] { qkv::nn::resolved_config(c); }, {"got 8 without RoPE"});
  c.positions = qkv::nn::PositionKind::kRope;
  c.rope_freq_factors[5] = -1.0;
  expect_error([&] { qkv::nn::resolved_config(c); }, {"rope_freq_factors[5] must be finite"});
}

TEST(GgufRopeFreqs, RotaryEmbeddingDividesTheFrequencies) {
  const qkv::nn::RotaryEmbedding plain({.head_dim = 8, .base = 100.0});
  const qkv::nn::RotaryEmbedding scaled(
      {.head_dim = 8, .base = 100.0, .freq_factors = {1, 2, 4, 8}});
  const std::vector<double> a = plain.inverse_frequencies(), b = scaled.inverse_frequencies();
  for (size_t i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(b[i], a[i] / std::ldexp(1.0, int(i)));
  expect_error([] { qkv::nn::RotaryEmbedding({.head_dim = 8, .freq_factors = {1, 2}}); },
               {"freq_factors must be empty or hold head_dim / 2 = 4 values", "got 2"});
  expect_error([] { qkv::nn::RotaryEmbedding({.head_dim = 4, .freq_factors = {1, std::nan("")}}); },
               {"freq_factors[1] must be finite and > 0"});
}

// --- Files too short for the magic -------------------------------------------------------------

// --- The newer families' keys: read, or refused by name ----------------------------------------

qkv::nn::DecoderModelConfig family_config(const std::string& architecture,
                                          std::function<void(GgufWriter&)> keys,
                                          int64_t layers = 2) {
  const TinySpec spec{.architecture = architecture, .layers = layers, .more_keys = keys};
  return qkv::models::gguf_decoder_config(tiny_llama_file(spec), 8192);
}

TEST(GgufFamilies, Gemma3ReadsItsWindowBasesAndScales) {
  const auto c = family_config("gemma3", u32_key("gemma3.attention.sliding_window", 16), 7);
  EXPECT_EQ(c.sliding_windows, (std::vector<int64_t>{16, 16, 16, 16, 16, 0, 16}));
  EXPECT_EQ(c.sliding_rope_base, 10000.0);  // llama.cpp's and transformers' default
  EXPECT_EQ(c.rope_base, 10000.0);
  EXPECT_EQ(c.embedding_scale, std::sqrt(double{kD}));
  EXPECT_TRUE(c.qk_norm && c.post_norms && !c.qkv_bias);
  EXPECT_EQ(c.ffn, qkv::nn::FeedForwardKind::kGeGLU);
  EXPECT_EQ(c.rope_style, qkv::nn::RopeStyle::kHalfSplit);
  EXPECT_EQ(c.attention_scale, 0.0);  // 1/sqrt(head_dim)
  const auto swa = family_config("gemma3", [](GgufWriter& w) {
    w.u32("gemma3.attention.sliding_window", 16);
    w.f32("gemma3.rope.freq_base_swa", 500.0f);
    w.u32("gemma3.attention.key_length", 32);
    w.u32("gemma3.attention.value_length", 32);
  });
  EXPECT_EQ(swa.sliding_rope_base, 500.0);
  EXPECT_EQ(swa.head_dim, 32);
  // 62 blocks is Gemma 3 27B, whose queries scale by 1/sqrt(width / heads) (llama.cpp).
  EXPECT_EQ(
      family_config("gemma3", u32_key("gemma3.attention.sliding_window", 16), 62).attention_scale,
      1.0 / std::sqrt(double{kD} / 2));
}

TEST(GgufFamilies, WhatTheyDoNotSupportIsRefusedByName) {
  expect_error([] { family_config("gemma3", {}); },
               {"no metadata key \"gemma3.attention.sliding_window\""});
  expect_error(
      [] {
        family_config("gemma3", [](GgufWriter& w) {
          w.u32("gemma3.attention.sliding_window", 16);
          w.f32("gemma3.attn_logit_softcapping", 50.0f);
        });
      },
      {"\"gemma3.attn_logit_softcapping\" (f32 50)", "qkv's gemma3 has no such feature"});
  expect_error([] { family_config("qwen2", u32_key("qwen2.attention.sliding_window", 16)); },
               {"qwen2.attention.sliding_window is 16", "max_seq_len <= 16"});
  expect_error([] { family_config("qwen3", f32_key("qwen3.rope.scaling.factor", 4.0f)); },
               {"qwen3.rope.scaling.factor is 4"});
  // llama and qwen2 split the width among the heads: a key_length of its own is refused.
  expect_error([] { family_config("qwen2", u32_key("qwen2.attention.key_length", 32)); },
               {"qwen2.attention.key_length is 32"});
  EXPECT_EQ(family_config("qwen3", u32_key("qwen3.attention.key_length", 32)).head_dim, 32);
}

TEST(GgufShortFile, GetsTheGgufReadersMessage) {
  for (const std::string& bytes : {std::string(""), std::string("GGU"), std::string("GG")}) {
    SCOPED_TRACE(bytes.size());
    const auto* p = reinterpret_cast<const std::byte*>(bytes.data());
    expect_error(
        [&] { GgufFile::from_bytes({p, p + bytes.size()}, "short.gguf"); },
        {"invalid GGUF file 'short.gguf'", "the magic \"GGUF\" needs 4 bytes", "truncated?"});
    const fs::path path = fs::temp_directory_path() / "qkv_test_gguf_short.gguf";
    std::ofstream(path, std::ios::binary) << bytes;
    expect_error([&] { load_gguf_model(path); },
                 {"invalid GGUF file '" + path.string() + "'", "the magic \"GGUF\""});
    fs::remove(path);
  }
}

}  // namespace
