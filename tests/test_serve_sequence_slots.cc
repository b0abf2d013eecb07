// serve::SequenceSlots (tools/serve/, the decoding state of `qkv serve`):
// 16 sequences decoded together — joining at different steps, prompts fed in
// chunks between steps, some reusing the cached prefix of a finished
// sequence — each give the greedy tokens and logits of decoding it alone
// (nn::DecoderSession), for a float model with f32 and q8_0 caches and for
// GGUF block weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include "float_quant_kernels.h"
#include "q8_cacheable_decoder.h"
#include "qkv/models/gguf_model.h"
#include "qkv/nn/decoder_model.h"
#include "qkv/nn/decoder_session.h"
#include "qkv/sampling.h"
#include "relative_diff.h"
#include "serve/sequence_slots.h"
#include "test_util.h"
#include "tiny_llama_model.h"

namespace {

using qkv::Generator;
using qkv::nn::DecoderModel;
using qkv::nn::DecoderModelConfig;
using qkv::nn::DecoderSession;
using qkv::nn::KVCacheStorage;
using qkv::serve::SequenceSlots;
using qkv_test::max_relative_diff;

constexpr int64_t kSlots = 16, kMaxLen = 48, kNewTokens = 10, kChunk = 3;
constexpr double kTolerance = 1e-5;

// Sequence i's prompt: a shared 6-token prefix for even i, then its own ids.
std::vector<int64_t> prompt_of(int64_t i, int64_t vocab) {
  std::vector<int64_t> ids;
  if (i % 2 == 0)
    for (int64_t t = 0; t < 6; ++t) ids.push_back((t * 7 + 3) % vocab);
  for (int64_t t = 0; t < 1 + i % 9; ++t) ids.push_back((i * 11 + t * 5 + 1) % vocab);
  return ids;
}

struct Alone {
  std::vector<int64_t> tokens;             // greedy, kNewTokens
  std::vector<std::vector<float>> logits;  // the logits each token was chosen from
};

// Greedy decoding of one prompt in a session of its own.
Alone decode_alone(DecoderModel& model, const std::vector<int64_t>& prompt) {
  DecoderSession session(model, 1, kMaxLen);
  Alone out;
  session.prefill(prompt);
  for (int64_t t = 0; t < kNewTokens; ++t) {
    const std::span<const float> row = session.logits_row(0);
    out.logits.emplace_back(row.begin(), row.end());
    out.tokens.push_back(qkv::argmax(row));
    session.step({&out.tokens.back(), 1});
  }
  return out;
}

void expect_slots_equal_decoding_alone(DecoderModel& model, double tolerance = kTolerance) {
  const int64_t V = model.config().vocab_size;
  SequenceSlots slots(model, kSlots, kMaxLen);

  // A first wave of 4 even sequences (sharing the prefix), decoded to the end
  // and released: their caches keep the prefix for the second wave.
  std::vector<int64_t> first_wave;
  for (int64_t i = 0; i < 4; ++i) {
    first_wave.push_back(slots.acquire(prompt_of(100 + 2 * i, V)));
    ASSERT_GE(first_wave.back(), 0);
    ASSERT_TRUE(slots.prefill(first_wave.back(), 0));
  }
  for (int64_t s : first_wave) slots.release(s);

  // Then 16 sequences; sequence i joins before step i / 2, its prompt fed
  // kChunk tokens per step, and leaves after kNewTokens tokens.
  struct Running {
    int64_t seq, slot;
    std::vector<int64_t> tokens;
    bool prefilled = false;
  };
  std::vector<Running> running;
  std::map<int64_t, Alone> alone;
  int64_t joined = 0, finished = 0, reused = 0;
  for (int64_t t = 0; finished < kSlots; ++t) {
    ASSERT_LT(t, 200) << "the sequences never finished";
    for (; joined < kSlots && joined / 2 <= t; ++joined) {
      const std::vector<int64_t> prompt = prompt_of(joined, V);
      alone[joined] = decode_alone(model, prompt);
      const int64_t s = slots.acquire(prompt);
      ASSERT_GE(s, 0) << "no free slot for sequence " << joined;
      reused += slots.reused(s);
      running.push_back({joined, s});
    }
    // Prompt chunks; a prompt that is in gives its sequence's first token.
    for (Running& r : running) {
      if (r.prefilled) continue;
      if (!slots.prefill(r.slot, kChunk)) continue;
      r.prefilled = true;
      const std::span<const float> logits = slots.prompt_logits();
      EXPECT_LE(max_relative_diff(logits, alone[r.seq].logits[0]), tolerance)
          << "prompt of sequence " << r.seq;
      r.tokens.push_back(qkv::argmax(logits));
    }
    // One step for every sequence whose prompt is in.
    std::vector<int64_t> step_slots, step_tokens;
    std::vector<Running*> rows;
    for (Running& r : running)
      if (r.prefilled) {
        rows.push_back(&r);
        step_slots.push_back(r.slot);
        step_tokens.push_back(r.tokens.back());
      }
    if (!rows.empty()) slots.step(step_slots, step_tokens);
    for (size_t row = 0; row < rows.size(); ++row) {
      Running& r = *rows[row];
      const std::span<const float> logits = slots.logits_row(static_cast<int64_t>(row));
      const auto n = r.tokens.size();
      if (n < static_cast<size_t>(kNewTokens)) {
        EXPECT_LE(max_relative_diff(logits, alone[r.seq].logits[n]), tolerance)
            << "sequence " << r.seq << " at its token " << n;
        r.tokens.push_back(qkv::argmax(logits));
      }
    }
    // Sequences with all their tokens leave.
    for (auto it = running.begin(); it != running.end();) {
      if (it->tokens.size() < static_cast<size_t>(kNewTokens)) {
        ++it;
        continue;
      }
      EXPECT_EQ(it->tokens, alone[it->seq].tokens) << "sequence " << it->seq;
      slots.release(it->slot);
      ++finished;
      it = running.erase(it);
    }
  }
  // The 8 even prompts of the second wave share 6 tokens with a cached one:
  // f32 caches copy them from any slot; q8_0 caches reuse only the 4 released.
  const bool copies = model.kv_cache_storage() == KVCacheStorage::kFloat;
  EXPECT_GE(reused, (copies ? 8 : 4) * 6);  // more where small vocabularies repeat ids
  EXPECT_EQ(slots.busy(), 0);
}

DecoderModelConfig small() { return qkv_test::q8_cacheable_decoder(64); }

TEST(SequenceSlots, SixteenSequencesEqualDecodingAloneWithEitherCache) {
  qkv_test::for_each_kv_cache_storage(
      small(), 11, [](DecoderModel& model) { expect_slots_equal_decoding_alone(model); });
}

TEST(SequenceSlots, GgufBlockWeightsEqualDecodingAlone) {
  // Prompt chunks of kChunk rows take the few-rows route and whole prompts the
  // other, which differ by x's 16-bit rounding where the active table rounds x
  // (kernels/quant_gemm.h: |x − x̂| ≤ 1.6e-5 of a block's largest |x|): equal
  // to float32 summation order with x kept, within that rounding without.
  qkv::models::GgufModel m = qkv_test::load_tiny_llama({}, {.max_seq_len = kMaxLen});
  expect_slots_equal_decoding_alone(m.model, 1e-3);
  const qkv_test::FloatQuantKernels float_kernels;
  expect_slots_equal_decoding_alone(m.model);
}

TEST(SequenceSlots, ReuseKeepsOnePromptTokenAndCopiesFromBusySlots) {
  Generator gen(13);
  DecoderModel model(small(), &gen);
  SequenceSlots slots(model, 2, 8);
  const std::vector<int64_t> prompt = {1, 2, 3};
  const int64_t a = slots.acquire(prompt);
  ASSERT_TRUE(slots.prefill(a, 0));
  slots.release(a);
  // The same prompt again: all but its last token come from the cache.
  EXPECT_EQ(slots.acquire(prompt), a);
  EXPECT_EQ(slots.reused(a), 2);
  EXPECT_EQ(slots.pending(a), 1);
  // a is busy: b gets a's keys and values of the prefix, copied.
  const int64_t b = slots.acquire(prompt);
  EXPECT_NE(b, a);
  EXPECT_EQ(slots.reused(b), 2);
  EXPECT_EQ(slots.length(b), 2);
  EXPECT_EQ(slots.acquire(prompt), -1);  // both busy
  qkv_test::expect_error([&] { slots.acquire(std::vector<int64_t>(9, 1)); },
                         {"9 tokens", "8 positions"});
  qkv_test::expect_error([&] { slots.acquire({}); }, {"prompt is empty"});
  const std::vector<int64_t> ab = {a, b}, tokens = {1, 2};
  qkv_test::expect_error([&] { slots.step(ab, tokens); }, {"prompt fed"});
}

}  // namespace
