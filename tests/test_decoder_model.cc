// nn::DecoderModel and nn::DecoderSession: decoding with the KV cache equals
// recomputing the whole sequence, steps allocate nothing, files round-trip,
// and `qkv generate` prints from a model file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <string>
#include <vector>

#include "qkv/models/decoder_model_file.h"
#include "qkv/nn/decoder_batch.h"
#include "qkv/nn/decoder_model.h"
#include "qkv/nn/decoder_session.h"
#include "qkv/sampling.h"
#include "test_util.h"

// --- Counting every C++ allocation of this process ----------------------------
// Every replaceable operator new and delete is replaced, all on malloc/free:
// a form left to the runtime (the nothrow ones, which libstdc++ and
// OpenMP use) would pair its allocator with ours, which AddressSanitizer
// reports as alloc-dealloc-mismatch (scripts/sanitize.sh).

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};

void* counted_malloc(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* counted_aligned(std::size_t n, std::align_val_t al) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  const std::size_t a = static_cast<std::size_t>(al);
  // aligned_alloc wants a size that is a positive multiple of the alignment.
  if (void* p = std::aligned_alloc(a, (std::max<std::size_t>(n, 1) + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
template <class Allocate>
void* or_null(Allocate allocate) noexcept {
  try {
    return allocate();
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
}  // namespace

void* operator new(std::size_t n) { return counted_malloc(n); }
void* operator new[](std::size_t n) { return counted_malloc(n); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_aligned(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_aligned(n, a); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return or_null([n] { return counted_malloc(n); });
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return or_null([n] { return counted_malloc(n); });
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return or_null([n, a] { return counted_aligned(n, a); });
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return or_null([n, a] { return counted_aligned(n, a); });
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

namespace qkv::nn {
namespace {

DecoderModelConfig tiny(DecoderModelConfig c = {}) {
  c.vocab_size = 37;
  c.d_model = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.max_seq_len = 64;
  return c;
}

// Last-position logits of ids, recomputing the whole sequence.
std::vector<float> last_logits(DecoderModel& model, const std::vector<int64_t>& ids) {
  const Tensor logits = model.forward(ids, 1);  // [1, T, V]
  const Tensor row = logits.select(1, logits.size(1) - 1).contiguous();
  const float* p = row.data<float>();
  return {p, p + row.numel()};
}

double scale_of(const std::vector<float>& v) {
  double m = 1.0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

// Greedy decoding with the cache and by recomputation: the same tokens, and
// logits within 1e-5 (relative to the largest logit when that exceeds 1).
void expect_cached_equals_recomputed(DecoderModel& model, const std::vector<int64_t>& prompt,
                                     int steps) {
  DecoderSession session(model);
  session.prefill(prompt);
  std::vector<int64_t> recomputed = prompt;
  for (int s = 0; s < steps; ++s) {
    const std::vector<float> ref = last_logits(model, recomputed);
    const std::span<const float> got = session.logits_row(0);
    ASSERT_EQ(got.size(), ref.size());
    double diff = 0.0;
    for (size_t i = 0; i < ref.size(); ++i)
      diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - ref[i]));
    EXPECT_LE(diff, 1e-5 * scale_of(ref)) << "step " << s;
    const int64_t want = argmax(ref), have = argmax(got);
    ASSERT_EQ(have, want) << "step " << s;
    recomputed.push_back(want);
    session.step({&have, 1});
  }
  EXPECT_EQ(session.length(), static_cast<int64_t>(prompt.size()) + steps);
}

TEST(DecoderModel, ConfigDefaultsAndChecks) {
  const DecoderModelConfig c = resolved_config({});
  EXPECT_EQ(c.num_kv_heads, 6);
  EXPECT_EQ(c.ffn_hidden, 1024);  // ⌈8·384/3⌉ = 1024
  EXPECT_EQ(resolved_config({.ffn = FeedForwardKind::kGelu}).ffn_hidden, 4 * 384);
  EXPECT_EQ(resolved_config({.d_model = 100, .num_heads = 2}).ffn_hidden, 320);  // 267 -> 320
  EXPECT_THROW(resolved_config({.d_model = 30, .num_heads = 4}), Error);
  EXPECT_THROW(resolved_config({.num_heads = 6, .num_kv_heads = 4}), Error);
  EXPECT_THROW(resolved_config({.vocab_size = 0}), Error);
  EXPECT_THROW(resolved_config({.d_model = 18, .num_heads = 2}), Error);  // odd head dim, RoPE
}

TEST(DecoderModel, ConfigJsonRoundTripAndErrors) {
  DecoderModelConfig c = tiny({.num_kv_heads = 2,
                               .positions = PositionKind::kLearned,
                               .rope_style = RopeStyle::kInterleaved,
                               .norm = NormKind::kLayerNorm,
                               .ffn = FeedForwardKind::kGelu,
                               .tie_embeddings = false,
                               .bias = true});
  const DecoderModelConfig back =
      models::decoder_config_from_json(models::decoder_config_to_json(c));
  EXPECT_EQ(models::decoder_config_to_json(back),
            models::decoder_config_to_json(resolved_config(c)));
  EXPECT_EQ(back.positions, PositionKind::kLearned);
  EXPECT_EQ(back.norm, NormKind::kLayerNorm);
  EXPECT_EQ(models::decoder_config_from_json("{}").d_model, 384);
  EXPECT_THROW(models::decoder_config_from_json("{"), Error);
  EXPECT_THROW(models::decoder_config_from_json("[]"), Error);
  EXPECT_THROW(models::decoder_config_from_json(R"({"d_modle": 4})"), Error);
  EXPECT_THROW(models::decoder_config_from_json(R"({"norm": "batchnorm"})"), Error);
  EXPECT_THROW(models::decoder_config_from_json(R"({"d_model": "big"})"), Error);
}

TEST(DecoderModel, StateDictNames) {
  Generator gen(0);
  DecoderModel model(tiny({.num_kv_heads = 2}), &gen);
  const auto state = model.state_dict();
  EXPECT_EQ(state.at("tok_embeddings.weight").shape(), (Shape{37, 32}));
  EXPECT_EQ(state.at("layers.1.attention.k_proj.weight").shape(), (Shape{16, 32}));
  EXPECT_EQ(state.at("layers.0.feed_forward.w3.weight").shape(), (Shape{128, 32}));
  EXPECT_TRUE(state.count("layers.0.attention_norm.weight"));
  EXPECT_TRUE(state.count("layers.0.ffn_norm.weight"));
  EXPECT_TRUE(state.count("norm.weight"));
  EXPECT_FALSE(state.count("output.weight"));  // tied
  EXPECT_EQ(state.size(), 2u + 2u * 9u);

  DecoderModel untied(tiny({.positions = PositionKind::kLearned,
                            .norm = NormKind::kLayerNorm,
                            .ffn = FeedForwardKind::kGelu,
                            .tie_embeddings = false}),
                      &gen);
  const auto s2 = untied.state_dict();
  EXPECT_EQ(s2.at("output.weight").shape(), (Shape{37, 32}));
  EXPECT_EQ(s2.at("pos_embeddings.weight").shape(), (Shape{64, 32}));
  EXPECT_TRUE(s2.count("layers.1.feed_forward.linear2.weight"));
  EXPECT_TRUE(s2.count("layers.1.ffn_norm.weight"));
  EXPECT_FALSE(s2.count("layers.1.ffn_norm.bias"));  // bias = false
}

TEST(DecoderModel, ForwardIsCausal) {
  Generator gen(1);
  DecoderModel model(tiny(), &gen);
  const std::vector<int64_t> a = {1, 2, 3, 4, 5, 6}, b = {1, 2, 3, 30, 31, 32};
  const Tensor la = model.forward(a, 1), lb = model.forward(b, 1);
  EXPECT_EQ(la.shape(), (Shape{1, 6, 37}));
  EXPECT_EQ(max_abs_diff(la.slice(1, 0, 3), lb.slice(1, 0, 3)), 0.0);
  EXPECT_GT(max_abs_diff(la.slice(1, 3, 6), lb.slice(1, 3, 6)), 1e-3);
}

struct Variant {
  const char* name;
  DecoderModelConfig config;
};

std::vector<Variant> variants() {
  return {
      {"rope half-split, RMSNorm, SwiGLU, tied", tiny()},
      {"rope interleaved, GQA 4:2, untied",
       tiny({.num_kv_heads = 2, .rope_style = RopeStyle::kInterleaved, .tie_embeddings = false})},
      {"multi-query, bias", tiny({.num_kv_heads = 1, .bias = true})},
      {"learned positions, LayerNorm, GELU", tiny({.positions = PositionKind::kLearned,
                                                   .norm = NormKind::kLayerNorm,
                                                   .ffn = FeedForwardKind::kGelu,
                                                   .bias = true})},
      {"sinusoidal positions, LayerNorm",
       tiny({.positions = PositionKind::kSinusoidal, .norm = NormKind::kLayerNorm})},
  };
}

TEST(DecoderModel, CachedGreedyDecodingEqualsRecomputation) {
  for (const Variant& v : variants()) {
    SCOPED_TRACE(v.name);
    Generator gen(2);
    DecoderModel model(v.config, &gen);
    expect_cached_equals_recomputed(model, {3, 1, 4, 1, 5, 9, 2, 6}, 24);
  }
}

TEST(DecoderModel, CachedDecodingEqualsRecomputationInFloat64) {
  Generator gen(3);
  DecoderModel model(tiny({.num_kv_heads = 2, .dtype = DType::kFloat64}), &gen);
  DecoderSession session(model);
  std::vector<int64_t> ids = {5, 6, 7};
  session.prefill(ids);
  for (int s = 0; s < 10; ++s) {
    const Tensor ref = model.forward(ids, 1).select(1, static_cast<int64_t>(ids.size()) - 1);
    EXPECT_LT(max_abs_diff(session.logits(), ref), 1e-12) << "step " << s;
    const int64_t next = argmax(session.logits_row(0));
    ids.push_back(next);
    session.step({&next, 1});
  }
}

TEST(DecoderModel, AppendingSeveralPositionsAtOnceEqualsOneByOne) {
  Generator gen(4);
  DecoderModel model(tiny({.num_kv_heads = 2}), &gen);
  const std::vector<int64_t> ids = {7, 8, 9, 10, 11, 12, 13};
  // Whole prompt in one pass, then three positions, then one.
  KVCache chunked = model.make_cache();
  model.forward(std::span(ids).first(3), 1, chunked);
  const Tensor three = model.forward(std::span(ids).subspan(3, 3), 1, chunked);
  const Tensor one = model.forward(std::span(ids).subspan(6, 1), 1, chunked);
  const Tensor full = model.forward(ids, 1);
  EXPECT_LT(max_abs_diff(three, full.slice(1, 3, 6)), 1e-5);
  EXPECT_LT(max_abs_diff(one, full.slice(1, 6, 7)), 1e-5);
  // The same through single steps.
  DecoderSession session(model);
  session.prefill(std::span(ids).first(1));
  for (size_t t = 1; t < ids.size(); ++t) session.step(std::span(ids).subspan(t, 1));
  EXPECT_LT(max_abs_diff(session.logits(), full.select(1, 6)), 1e-5);
  EXPECT_LT(max_abs_diff(chunked.keys(1), session.cache().keys(1)), 1e-5);
}

TEST(DecoderModel, BatchedStepsMatchEachSequenceAlone) {
  Generator gen(5);
  DecoderModel model(tiny({.num_kv_heads = 2}), &gen);
  const std::vector<int64_t> prompts = {1, 2, 3, 4, 5, 6};  // [2, 3]
  DecoderSession session(model, 2);
  session.prefill(prompts);
  const std::vector<int64_t> next = {10, 20};
  session.step(next);
  for (int64_t b = 0; b < 2; ++b) {
    std::vector<int64_t> ids(prompts.begin() + 3 * b, prompts.begin() + 3 * b + 3);
    ids.push_back(next[b]);
    const Tensor ref = model.forward(ids, 1).select(1, 3);
    EXPECT_LT(max_abs_diff(session.logits().slice(0, b, b + 1), ref), 1e-5);
  }
}

TEST(DecoderModel, DecodingAThousandTokensAllocatesNothingPerToken) {
  Generator gen(6);
  DecoderModelConfig config = tiny({.num_kv_heads = 2});
  config.max_seq_len = 1100;
  DecoderModel model(config, &gen);
  DecoderSession session(model, 1, 1100);
  Sampler sampler({.temperature = 0.9, .top_k = 20, .top_p = 0.9}, 37);
  Generator draws(7);
  // Warm-up: a long prompt lets the attention kernel's per-thread scratch
  // (kept from call to call) reach its full size; then a fresh sequence.
  session.prefill(std::vector<int64_t>(600, 3));
  session.reset();
  const std::vector<int64_t> prompt = {1, 2, 3, 4};
  session.prefill(prompt);
  int64_t next = sampler.sample(session.logits_row(0), draws);
  session.step({&next, 1});
  g_allocations = 0;
  g_counting = true;
  for (int t = 0; t < 1000; ++t) {
    next = sampler.sample(session.logits_row(0), draws);
    session.step({&next, 1});
  }
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0) << "allocations in 1000 decoding steps";
  EXPECT_EQ(session.length(), 1005);
}

TEST(DecoderBatch, StepsAllocateNothingAfterWarmUp) {
  Generator gen(8);
  DecoderModel model(tiny({.num_kv_heads = 2}), &gen);
  DecoderBatch batch(model, 4);
  // Warm-up: a long prompt grows the attention kernel's scratch to its size.
  batch.remove(batch.add(std::vector<int64_t>(50, 3)));
  const std::vector<int64_t> ids = {batch.add(std::vector<int64_t>{1, 2, 3}),
                                    batch.add(std::vector<int64_t>{4}),
                                    batch.add(std::vector<int64_t>{5, 6, 7, 8, 9})};
  const std::vector<int64_t> tokens = {1, 2, 3}, some_ids = {ids[2], ids[0]}, some = {4, 5};
  batch.step(ids, tokens);
  g_allocations = 0;
  g_counting = true;
  for (int t = 0; t < 20; ++t) {
    batch.step(ids, tokens);
    batch.step(some_ids, some);  // a step of fewer rows, in another order
  }
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0) << "allocations in 40 batched decoding steps";
  EXPECT_EQ(batch.length(ids[1]), 1 + 21);
  EXPECT_EQ(batch.length(ids[2]), 5 + 41);
}

TEST(DecoderModel, StepErrors) {
  Generator gen(8);
  DecoderModel model(tiny({.positions = PositionKind::kLearned}), &gen);
  DecoderSession session(model, 1, 4);
  const std::vector<int64_t> prompt = {1, 2, 3};
  session.prefill(prompt);
  const std::vector<int64_t> two = {1, 2};
  EXPECT_THROW(session.step(two), Error);  // batch 1 takes one token
  const int64_t bad = 37;
  EXPECT_THROW(session.step({&bad, 1}), Error);
  const int64_t ok = 5;
  session.step({&ok, 1});
  try {
    session.step({&ok, 1});
    FAIL() << "expected a full-cache error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("full"), std::string::npos) << e.what();
  }
  EXPECT_THROW(DecoderSession(model, 1, 65), Error);  // beyond the position table
  EXPECT_THROW(model.forward(std::vector<int64_t>(65, 1), 1), Error);
  EXPECT_THROW(model.forward(std::vector<int64_t>{1, 2, 3}, 2), Error);
}

TEST(DecoderModel, GenerateIsDeterministicPerSeedAndStops) {
  Generator gen(9);
  // Untied: with tied N(0, 1) embeddings a tiny model repeats its input token.
  DecoderModel model(tiny({.tie_embeddings = false}), &gen);
  const std::vector<int64_t> prompt = {4, 5, 6};
  GenerationOptions o{
      .max_new_tokens = 20, .sampling = {.temperature = 1.0, .top_k = 10}, .seed = 11};
  const std::vector<int64_t> a = generate(model, prompt, o), b = generate(model, prompt, o);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 20u);
  o.seed = 12;
  EXPECT_NE(generate(model, prompt, o), a);
  // Greedy generation equals argmax decoding by recomputation.
  o.sampling = {.temperature = 0.0};
  const std::vector<int64_t> greedy = generate(model, prompt, o);
  std::vector<int64_t> ids = prompt;
  for (int i = 0; i < 20; ++i) ids.push_back(argmax(last_logits(model, ids)));
  EXPECT_EQ(greedy, std::vector<int64_t>(ids.begin() + 3, ids.end()));
  // stop_token ends generation after emitting it; on_token can stop too.
  o.stop_token = greedy[4];
  const auto stopped = generate(model, prompt, o);
  EXPECT_LE(stopped.size(), 5u);
  EXPECT_EQ(stopped.back(), greedy[4]);
  o.stop_token.reset();
  int seen = 0;
  const auto early = generate(model, prompt, o, [&](int64_t) { return ++seen < 3; });
  EXPECT_EQ(early.size(), 3u);
  o.max_new_tokens = 62;  // 3 + 61 positions: all of max_seq_len = 64
  EXPECT_EQ(generate(model, prompt, o).size(), 62u);
  // One more is refused by name, with RoPE too (it could compute further).
  o.max_new_tokens = 63;
  qkv_test::expect_error([&] { generate(model, prompt, o); },
                         "need 65 positions, but the context holds 64 (the model's max_seq_len)");
  EXPECT_THROW(model.forward(std::vector<int64_t>(65, 1), 1), Error);
  o.max_new_tokens = 100;
  DecoderSession small(model, 1, 10);
  EXPECT_THROW(small.generate(prompt, o), Error);
  EXPECT_THROW(small.generate({}, {.max_new_tokens = 1}), Error);
}

TEST(DecoderModel, SaveAndLoadRoundTrip) {
  Generator gen(10);
  DecoderModel model(
      tiny({.num_kv_heads = 2, .positions = PositionKind::kLearned, .tie_embeddings = false}),
      &gen);
  const auto path = std::filesystem::temp_directory_path() /
                    ("qkv_decoder_" + std::to_string(::getpid()) + ".safetensors");
  models::save_decoder_model(model, path, {{"qkv.note", "test"}});
  io::SafetensorsMetadata meta;
  DecoderModel loaded = models::load_decoder_model(path, &meta);
  EXPECT_EQ(meta.at("qkv.note"), "test");
  EXPECT_EQ(models::decoder_config_to_json(loaded.config()),
            models::decoder_config_to_json(model.config()));
  const std::vector<int64_t> ids = {1, 2, 3, 4};
  EXPECT_EQ(max_abs_diff(loaded.forward(ids, 1), model.forward(ids, 1)), 0.0);
  // A safetensors file without the config is refused with a clear message.
  io::save_safetensors(path, model.state_dict());
  try {
    models::load_decoder_model(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(models::kDecoderConfigKey), std::string::npos);
  }
  std::filesystem::remove(path);
}

// `qkv generate` from a model file (the CLI is built next to this test).
TEST(DecoderModel, GenerateCommandPrintsText) {
  const std::filesystem::path cli =
      std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "tools" / "qkv";
  if (!std::filesystem::exists(cli)) GTEST_SKIP() << "no qkv CLI at " << cli;
  Generator gen(12);
  DecoderModel model(
      {.vocab_size = 256, .d_model = 32, .num_layers = 1, .num_heads = 2, .max_seq_len = 128},
      &gen);
  const auto dir = std::filesystem::temp_directory_path();
  const auto path = dir / ("qkv_generate_" + std::to_string(::getpid()) + ".safetensors");
  models::save_decoder_model(model, path);
  auto run = [&](const std::string& args) {
    const std::string command = cli.string() + " generate " + path.string() + " " + args + " 2>&1";
    std::string out;
    FILE* pipe = ::popen(command.c_str(), "r");
    char buffer[4096];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
    const int status = ::pclose(pipe);
    return std::make_pair(status, out);
  };
  const auto [status, out] = run("--prompt 'Hello' --max-new-tokens 12 --temperature 0");
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out.rfind("Hello", 0), 0u) << out;  // the prompt, then the continuation
  // The continuation is what greedy generation makes (bytes of the ids).
  const std::vector<int64_t> prompt = {'H', 'e', 'l', 'l', 'o'};
  const auto ids = generate(model, prompt, {.max_new_tokens = 12, .sampling = {.temperature = 0}});
  std::string expected = "Hello";
  for (int64_t id : ids) expected += static_cast<char>(id);
  EXPECT_EQ(out.substr(0, expected.size()), expected);
  const auto [s1, o1] = run("--prompt 'Hi' --max-new-tokens 8 --seed 3 --top-k 5");
  const auto [s2, o2] = run("--prompt 'Hi' --max-new-tokens 8 --seed 3 --top-k 5");
  EXPECT_EQ(s1, 0);
  EXPECT_EQ(o1, o2);
  const auto [bad, message] = run("--prompt 'Hi' --top-p 2");
  EXPECT_NE(bad, 0);
  // Refused while parsing, naming the flag and its range.
  EXPECT_NE(message.find("--top-p: 2 is not in (0, 1]"), std::string::npos) << message;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace qkv::nn
