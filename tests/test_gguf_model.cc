// models::load_gguf_model: tiny llama GGUF files written here (config, fast vs exact,
// KV cache vs recompute, hostile metadata and tensors), and SmolLM2 when
// scripts/fetch_model.sh has put it in models/.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "float_quant_kernels.h"
#include "gguf_writer.h"
#include "kernels/quant_gemm.h"
#include "qkv/models/gguf_model.h"
#include "qkv/nn/decoder_session.h"
#include "qkv/nn/skip_weight_init.h"
#include "relative_diff.h"
#include "test_util.h"
#include "tiny_llama_model.h"

namespace {

namespace fs = std::filesystem;
using qkv::DType;
using qkv::ErrorKind;
using qkv::Shape;
using qkv::Tensor;
using qkv::models::GgufModel;
using qkv::models::load_gguf_model;
using qkv_test::GgufWriter;
using qkv_test::kD;
using qkv_test::kHidden;
using qkv_test::kKv;
using qkv_test::kVocab;
using qkv_test::le;
using qkv_test::load_tiny_llama;
using qkv_test::max_relative_diff;
using qkv_test::TinySpec;

GgufModel load_tiny(const TinySpec& s = {}, bool exact = false) {
  return load_tiny_llama(s, {.exact = exact});
}

int64_t argmax_row(const float* row, int64_t n) { return std::max_element(row, row + n) - row; }

TEST(GgufModel, TinyConfigFromMetadata) {
  GgufModel m = load_tiny();
  const qkv::nn::DecoderModelConfig& c = m.model.config();
  EXPECT_EQ(m.architecture, "llama");
  EXPECT_EQ(m.name, "tiny");
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.d_model, kD);
  EXPECT_EQ(c.num_heads, 2);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.ffn_hidden, kHidden);
  EXPECT_EQ(c.vocab_size, kVocab);
  EXPECT_EQ(c.max_seq_len, 64);
  EXPECT_DOUBLE_EQ(c.rope_base, 10000.0);
  EXPECT_NEAR(c.norm_eps, 1e-5, 1e-12);
  EXPECT_EQ(c.rope_style, qkv::nn::RopeStyle::kInterleaved);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_FALSE(load_tiny({.untied = true}).model.config().tie_embeddings);
  // max_seq_len caps context_length.
  const GgufModel capped = load_tiny_llama({}, {.max_seq_len = 16});
  EXPECT_EQ(capped.model.config().max_seq_len, 16);

  EXPECT_EQ(m.tokenizer.encode("ab<|im_end|>"), (std::vector<int32_t>{5, 7}));
  EXPECT_EQ(m.end_of_turn(), 7);
  const std::vector<qkv::text::ChatMessage> chat = {{"user", "a"}};
  EXPECT_EQ(m.chat_template().apply(chat, true),
            "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n");
}

TEST(GgufModel, FastModeKeepsWeightsQuantized) {
  GgufModel fast = load_tiny();
  // Every linear and the embedding hold blocks, no float copy: the state dict has the norms only.
  for (const auto& [name, t] : fast.model.state_dict())
    EXPECT_NE(name.find("norm"), std::string::npos) << name;
  EXPECT_FALSE(fast.model.tok_embeddings().quantized_weight().empty());
  GgufModel exact = load_tiny({}, /*exact=*/true);
  EXPECT_TRUE(exact.model.tok_embeddings().quantized_weight().empty());
  EXPECT_EQ(exact.model.num_parameters(),
            kVocab * kD + 2 * (2 * kD + 2 * kD * kD + 2 * kKv * kD + 3 * kD * kHidden) + kD);
}

TEST(GgufModel, FastMatchesExactAndF32Loads) {
  const qkv_test::FloatQuantKernels float_kernels;  // x as it is: the few-rows route rounds it
  for (bool untied : {false, true}) {
    GgufModel fast = load_tiny({.untied = untied});
    GgufModel exact = load_tiny({.untied = untied}, true);
    const std::vector<int64_t> ids = {0, 5, 2, 3, 6, 1, 4, 4, 2, 7};
    const Tensor a = fast.model.forward(ids, 1);
    const Tensor b = exact.model.forward(ids, 1);
    ASSERT_EQ(b.shape(), (Shape{1, 10, kVocab}));
    // The same dequantized weights; only float32 summation order differs.
    EXPECT_LT(max_relative_diff(a, b), 1e-5) << "untied=" << untied;
  }
  GgufModel f32 = load_tiny({.quantized = false});  // F32 weights load as float in either mode
  EXPECT_TRUE(f32.model.tok_embeddings().quantized_weight().empty());
  EXPECT_EQ(f32.model.forward(std::vector<int64_t>{1, 2, 3}, 1).shape(), (Shape{1, 3, kVocab}));
}

// Decoding with the cache (prefill, then one token at a time) gives the logits of
// recomputing the whole sequence, in both modes.
void expect_cache_matches_recompute(GgufModel& m, const std::vector<int64_t>& prompt, int64_t steps,
                                    double tolerance) {
  const qkv_test::FloatQuantKernels float_kernels;
  qkv::nn::DecoderSession session(m.model);
  const int64_t V = m.model.config().vocab_size;
  std::vector<int64_t> seq = prompt;
  std::vector<Tensor> cached;
  cached.push_back(session.prefill(seq).clone());
  for (int64_t i = 0; i < steps; ++i) {
    const int64_t next = argmax_row(session.logits_row(0).data(), V);
    seq.push_back(next);
    cached.push_back(session.step({&next, 1}).clone());
  }
  const Tensor full = m.model.forward(seq, 1);  // [1, T, V]
  for (size_t k = 0; k < cached.size(); ++k) {
    const int64_t pos = static_cast<int64_t>(prompt.size() + k) - 1;
    const Tensor row = full.select(1, pos);  // [1, V]
    EXPECT_LT(max_relative_diff(cached[k], row), tolerance) << "position " << pos;
    const Tensor rc = row.contiguous();
    EXPECT_EQ(argmax_row(cached[k].data<float>(), V), argmax_row(rc.data<float>(), V))
        << "position " << pos;
  }
}

TEST(GgufModel, TinyCacheMatchesRecompute) {
  for (bool exact : {false, true}) {
    GgufModel m = load_tiny({}, exact);
    expect_cache_matches_recompute(m, {0, 5, 2, 3}, 12, 1e-5);
  }
}

TEST(GgufModel, HostileFilesNameWhatIsWrong) {
  using qkv_test::expect_error;
  expect_error([] { load_tiny({.architecture = "gpt2"}); },
               {"'tiny.gguf'", "general.architecture is \"gpt2\"",
                "supported: \"llama\", \"qwen2\", \"qwen3\", \"gemma3\""});
  for (const char* k : {"general.architecture", "llama.block_count", "llama.embedding_length",
                        "llama.feed_forward_length", "llama.attention.head_count",
                        "llama.attention.layer_norm_rms_epsilon", "llama.context_length",
                        "tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.model"}) {
    SCOPED_TRACE(k);
    expect_error([&] { load_tiny({.drop_key = k}); }, {"'tiny.gguf'", k});
  }
  expect_error([] { load_tiny({.tokenizer_model = "t5"}); },
               {"tokenizer.ggml.model is \"t5\"", "gpt2", "llama"});
  expect_error([] { load_tiny({.drop_tensor = "blk.1.ffn_up.weight"}); },
               {"'tiny.gguf'", "no tensor \"blk.1.ffn_up.weight\""});
  expect_error([] { load_tiny({.drop_tensor = "output_norm.weight"}); },
               {"no tensor \"output_norm.weight\""});
  expect_error([] { load_tiny({.reshape_tensor = "blk.0.attn_k.weight"}); },
               {"'tiny.gguf'", "\"blk.0.attn_k.weight\"", "shape [17, 32]", "expected [16, 32]"});
  expect_error([] { load_tiny({.reshape_tensor = "token_embd.weight"}); },
               {"\"token_embd.weight\"", "shape [9, 32]", "expected [8, 32]"});
  expect_error([] { load_tiny({.f64_tensor = "blk.0.ffn_norm.weight"}); }, ErrorKind::kType,
               {"\"blk.0.ffn_norm.weight\" is F64",
                "supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, "
                "IQ4_NL"});
  // Counts beyond the tensors the file has fail on the first missing tensor, before any
  // allocation sized by them.
  expect_error([] { load_tiny({.drop_tensor = "blk.2.attn_q.weight", .layers = 3}); },
               {"no tensor \"blk.2.attn_q.weight\""});
}

TEST(GgufModel, SkipWeightInitLeavesWeightsUnset) {
  qkv::nn::Linear lin = [] {
    qkv::nn::SkipWeightInit skip;
    EXPECT_TRUE(qkv::nn::SkipWeightInit::active());
    return qkv::nn::Linear({.in_features = 4, .out_features = 3, .bias = false});
  }();
  EXPECT_FALSE(qkv::nn::SkipWeightInit::active());
  EXPECT_FALSE(lin.weight().defined());
  qkv_test::expect_error([&] { lin.forward(Tensor::ones({2, 4})); },
                         {"Linear [3, 4]: no weight", "SkipWeightInit"});
  qkv_test::expect_error([&] { lin.set_weight(Tensor::ones({4, 3})); },
                         {"expected a weight of shape [3, 4]", "[4, 3]"});
  lin.set_weight(Tensor::ones({3, 4}));
  EXPECT_FLOAT_EQ(lin.forward(Tensor::ones({1, 4})).data<float>()[0], 4.0f);
}

// --- SmolLM2 ---------------------------------------------------------------------------------

using qkv_test::smollm2_path;

#define SKIP_WITHOUT_SMOLLM2()     \
  if (!fs::exists(smollm2_path())) \
  GTEST_SKIP() << smollm2_path() << " is missing: run scripts/fetch_model.sh"

TEST(GgufModelSmolLM2, LoadsWithItsConfig) {
  SKIP_WITHOUT_SMOLLM2();
  const GgufModel m = load_gguf_model(smollm2_path());
  const qkv::nn::DecoderModelConfig& c = m.model.config();
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.d_model, 576);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.ffn_hidden, 1536);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.max_seq_len, 8192);
  EXPECT_DOUBLE_EQ(c.rope_base, 100000.0);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(m.tokenizer.eos(), 2);
  EXPECT_EQ(m.end_of_turn(), m.tokenizer.id_of("<|im_end|>"));
  EXPECT_EQ(quant_format_name(m.model.tok_embeddings().quantized_weight().format()),
            std::string("Q8_0"));
}

// `count` teacher-forced sequences of `length` ids cut from tests/data's text.
std::vector<std::vector<int64_t>> corpus_sequences(const GgufModel& m, size_t count,
                                                   size_t length) {
  std::ifstream in(qkv_test::tokenizer_corpus_path());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<int32_t> ids = m.tokenizer.encode(text);
  EXPECT_GE(ids.size(), count * length);
  std::vector<std::vector<int64_t>> out;
  const size_t stride = ids.size() / count;
  for (size_t i = 0; i < count && i * stride + length <= ids.size(); ++i)
    out.emplace_back(ids.begin() + i * stride, ids.begin() + i * stride + length);
  return out;
}

// The fast mode's greedy choice equals the exact mode's on ≥ 99% of
// teacher-forced positions, 20 sequences × 64 tokens, on both routes of the
// quantised kernels: the batched prompt route (forward) and the decoding
// route (a 16-token prefill, then the 64 tokens fed one at a time through the
// KV cache: the few-rows GEMV, which rounds x on the avx512_vnni* tables).
TEST(GgufModelSmolLM2, FastGreedyAgreesWithExact) {
  SKIP_WITHOUT_SMOLLM2();
  GgufModel exact = load_gguf_model(smollm2_path(), {.exact = true, .max_seq_len = 256});
  GgufModel fast = load_gguf_model(smollm2_path(), {.max_seq_len = 256});
  constexpr int64_t kPrompt = 16, kTokens = 64, kSequences = 20, V = 49152;
  int64_t agree_batched = 0, agree_decoded = 0, total = 0;
  qkv::nn::DecoderSession session(fast.model);
  for (const std::vector<int64_t>& seq : corpus_sequences(exact, kSequences, kPrompt + kTokens)) {
    const Tensor a = fast.model.forward(seq, 1).contiguous();
    const Tensor b = exact.model.forward(seq, 1).contiguous();
    session.reset();
    session.prefill(std::span(seq).first(kPrompt));
    for (int64_t t = kPrompt; t < kPrompt + kTokens; ++t) {  // teacher-forced positions
      session.step(std::span(seq).subspan(t, 1));
      const int64_t want = argmax_row(b.data<float>() + t * V, V);
      agree_batched += argmax_row(a.data<float>() + t * V, V) == want;
      agree_decoded += argmax_row(session.logits_row(0).data(), V) == want;
      ++total;
    }
  }
  EXPECT_EQ(total, kSequences * kTokens);
  const char* table = qkv::kernels::active_quant_kernels().name;
  EXPECT_GE(static_cast<double>(agree_batched) / total, 0.99) << agree_batched << " of " << total;
  // QKV_INT8_DECODE=1 (8-bit x, opt-in as llama.cpp's arithmetic) is not held to it
  if (qkv::kernels::active_quant_kernels().x_bits != 8) {
    EXPECT_GE(static_cast<double>(agree_decoded) / total, 0.99)
        << agree_decoded << " of " << total << " decoding with " << table;
  }
  std::printf("greedy agreement with exact: batched %lld / %lld, decoded (%s) %lld / %lld\n",
              static_cast<long long>(agree_batched), static_cast<long long>(total), table,
              static_cast<long long>(agree_decoded), static_cast<long long>(total));
}

TEST(GgufModelSmolLM2, CacheMatchesRecompute) {
  SKIP_WITHOUT_SMOLLM2();
  GgufModel fast = load_gguf_model(smollm2_path(), {.max_seq_len = 256});
  const std::vector<int32_t> ids = fast.tokenizer.encode("The capital of France is");
  expect_cache_matches_recompute(fast, std::vector<int64_t>(ids.begin(), ids.end()), 24, 1e-4);
}

}  // namespace
