// nn::DecoderBatch: sequences of different lengths decoded together, joining
// and leaving between steps, give the logits of decoding each alone (a
// DecoderSession per sequence), for float and GGUF block weights and for the
// f32 and q8_0 KV caches.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "q8_cacheable_decoder.h"
#include "qkv/models/gguf_model.h"
#include "qkv/nn/decoder_batch.h"
#include "qkv/nn/decoder_model.h"
#include "qkv/nn/decoder_session.h"
#include "relative_diff.h"
#include "test_util.h"
#include "tiny_llama_model.h"

namespace {

using qkv::DType;
using qkv::Generator;
using qkv::Tensor;
using qkv::nn::DecoderBatch;
using qkv::nn::DecoderModel;
using qkv::nn::DecoderModelConfig;
using qkv::nn::DecoderSession;
using qkv::nn::KVCacheStorage;
using qkv_test::max_relative_diff;

constexpr double kTolerance = 1e-5;
constexpr int64_t kMaxLen = 48;

// A prompt of `length` ids below `vocab`, different for each sequence.
std::vector<int64_t> prompt_of(int64_t seq, int64_t length, int64_t vocab) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < length; ++i) ids.push_back((seq * 5 + i * 3 + 1) % vocab);
  return ids;
}

// The token sequence `seq` is fed at its step `t` (fixed, so both sides feed the same).
int64_t token_of(int64_t seq, int64_t t, int64_t vocab) { return (seq * 7 + t * 3 + 2) % vocab; }

Tensor row(const Tensor& logits, int64_t r) {
  return logits.select(0, r).contiguous().to(DType::kFloat32);
}

// 8 sequences of prompt lengths `lengths`: five start, two join after step 1
// (one leaves), one joins after step 3 (another leaves); `steps` steps (> 4).
// Every add() and every row of every step is checked against a DecoderSession
// of that sequence alone.
void expect_batched_equals_alone(DecoderModel& model,
                                 const std::vector<int64_t>& lengths = {7, 1, 12, 3, 15, 9, 2, 5},
                                 int64_t steps = 8) {
  const int64_t V = model.config().vocab_size;
  std::map<int64_t, int64_t> joins = {{0, 0}, {1, 0}, {2, 0}, {3, 0}, {4, 0},
                                      {5, 2}, {6, 2}, {7, 4}};  // sequence -> step it joins before
  std::map<int64_t, int64_t> leaves = {{1, 2}, {3, 4}};         // sequence -> step it leaves before

  DecoderBatch batch(model, 6, kMaxLen);
  std::map<int64_t, int64_t> id_of;  // sequence -> batch id
  std::map<int64_t, std::unique_ptr<DecoderSession>> alone;
  std::map<int64_t, int64_t> fed;  // sequence -> tokens fed so far
  for (int64_t t = 0; t < steps; ++t) {
    for (const auto& [seq, when] : leaves)
      if (when == t) {
        batch.remove(id_of.at(seq));
        id_of.erase(seq);
      }
    for (const auto& [seq, when] : joins)
      if (when == t) {
        const std::vector<int64_t> prompt = prompt_of(seq, lengths[seq], V);
        id_of[seq] = batch.add(prompt);
        alone[seq] = std::make_unique<DecoderSession>(model, 1, kMaxLen);
        const Tensor expected = alone[seq]->prefill(prompt);
        EXPECT_LE(max_relative_diff(row(batch.logits(), 0), row(expected, 0)), kTolerance)
            << "prompt of sequence " << seq;
      }
    std::vector<int64_t> ids, tokens, seqs;
    for (const auto& [seq, id] : id_of) {
      seqs.push_back(seq);
      ids.push_back(id);
      tokens.push_back(token_of(seq, fed[seq]++, V));
    }
    const Tensor& logits = batch.step(ids, tokens);
    ASSERT_EQ(logits.size(0), static_cast<int64_t>(ids.size()));
    for (size_t r = 0; r < seqs.size(); ++r) {
      const int64_t seq = seqs[r];
      const Tensor expected = alone[seq]->step({&tokens[r], 1});
      EXPECT_LE(max_relative_diff(row(logits, static_cast<int64_t>(r)), row(expected, 0)),
                kTolerance)
          << "sequence " << seq << " at step " << t;
      EXPECT_EQ(batch.length(ids[r]), alone[seq]->length());
    }
  }
  EXPECT_EQ(batch.size(), 6);
}

DecoderModelConfig small(DType dtype = DType::kFloat32) {
  return qkv_test::q8_cacheable_decoder(50, dtype);
}

TEST(DecoderBatch, FloatWeightsEqualDecodingAloneWithEitherCache) {
  qkv_test::for_each_kv_cache_storage(
      small(), 1, [](DecoderModel& model) { expect_batched_equals_alone(model); });
}

TEST(DecoderBatch, LearnedPositionsLayerNormGeluEqualDecodingAlone) {
  Generator gen(3);
  DecoderModelConfig c = small();
  c.positions = qkv::nn::PositionKind::kLearned;
  c.norm = qkv::nn::NormKind::kLayerNorm;
  c.ffn = qkv::nn::FeedForwardKind::kGelu;
  c.tie_embeddings = false;
  c.bias = true;
  DecoderModel model(c, &gen);
  expect_batched_equals_alone(model);
}

TEST(DecoderBatch, Float64EqualsDecodingAlone) {
  Generator gen(4);
  DecoderModel model(small(DType::kFloat64), &gen);
  expect_batched_equals_alone(model);
}

TEST(DecoderBatch, TinyGgufExactAndQuantizedEqualDecodingAlone) {
  for (bool exact : {true, false}) {
    SCOPED_TRACE(exact ? "exact" : "quantized");
    qkv::models::GgufModel m =
        qkv_test::load_tiny_llama({}, {.exact = exact, .max_seq_len = kMaxLen});
    expect_batched_equals_alone(m.model);
  }
}

TEST(DecoderBatch, SmolLM2EqualsDecodingAlone) {
  if (!std::filesystem::exists(qkv_test::smollm2_path()))
    GTEST_SKIP() << qkv_test::smollm2_path() << " is missing: run scripts/fetch_model.sh";
  // The q8_0 cache (float caches with block weights: the tiny GGUF above);
  // shorter prompts and fewer steps: 30 layers of 135M parameters.
  qkv::models::GgufModel m = qkv::models::load_gguf_model(
      qkv_test::smollm2_path(), {.max_seq_len = kMaxLen, .kv_cache = KVCacheStorage::kQ8_0});
  expect_batched_equals_alone(m.model, {4, 1, 6, 2, 7, 5, 2, 3}, 5);
}

TEST(DecoderBatch, Errors) {
  Generator gen(5);
  DecoderModel model(small(), &gen);
  DecoderBatch batch(model, 2, 4);
  const std::vector<int64_t> prompt = {1, 2, 3};
  const int64_t a = batch.add(prompt);
  const int64_t b = batch.add(prompt);
  qkv_test::expect_error([&] { batch.add(prompt); }, {"all 2 sequences are in use"});
  const std::vector<int64_t> twice = {a, a}, tokens = {1, 2};
  qkv_test::expect_error([&] { batch.step(twice, tokens); }, {"id 0 is given twice"});
  batch.remove(b);
  const std::vector<int64_t> removed = {a, b};
  qkv_test::expect_error([&] { batch.step(removed, tokens); }, {"no sequence has id 1"});
  qkv_test::expect_error([&] { batch.add(std::vector<int64_t>(5, 1)); }, {"do not fit"});
  EXPECT_EQ(batch.ids(), std::vector<int64_t>{a});
  const std::vector<int64_t> just_a = {a}, one = {4};
  batch.step(just_a, one);  // position 3: the last of max_len 4
  qkv_test::expect_error([&] { batch.step(just_a, one); }, {"sequence 0 fills its cache"});
  EXPECT_EQ(batch.length(a), 4);
  // A removed id is not reused: the new sequence gets the next one.
  EXPECT_EQ(batch.add(prompt), 2);
}

}  // namespace
