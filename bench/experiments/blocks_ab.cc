// Sentence embeddings, decoding and a training step, timed in one process:
// the A/B benchmark of issues 17 and 38 (docs/benchmarks.md, "One way to run a
// block" and "One block for every model").
//
// Uses only API that d191fe6, 746898c and the commits after them have, so the
// same file compiles against either tree's headers and links that tree's
// libqkv (bench/experiments/blocks_ab.py builds both and alternates them):
//
//   g++ -O3 -std=c++20 -fopenmp bench/experiments/blocks_ab.cc -I<tree>/include
//       <tree>/build/libqkv.so -Wl,-rpath,<tree>/build -o blocks_ab
//   OMP_NUM_THREADS=2 ./blocks_ab [--model models/all-MiniLM-L6-v2] [--warmup 1]
//       [--gguf models/SmolLM2-135M-Instruct.Q4_1.gguf]
//       [--reps-embed 5] [--reps-decode 5] [--reps-train 5] [--only embed,decode,train]
//
// Prints one line of JSON: the median wall time in milliseconds of each
// measurement (and its repetitions), after `warmup` untimed runs of each.
//   embed_ms   BertModel::forward of 32 sequences × 128 random ids, mask all ones
//   embed_bf16_ms, embed_int8_ms   the same after set_precision (int8 uncalibrated)
//   gguf_prompt_ms   SmolLM2 (--gguf) DecoderSession::prefill of 512 tokens
//   gguf_gen_ms      128 greedy DecoderSession::step calls after a 1-token prompt
//   decode_ms  512 greedy DecoderSession::step calls after a 16-token prefill
//              (vocab 256, d_model 384, 6 layers, 6 heads, RoPE, SwiGLU, max_seq_len 1024)
//   train_ms   forward with a record, backward from a fixed gradient, AdamW step,
//              zero_grad of 6 post-norm encoder layers (d_model 384, 12 heads,
//              FFN 1536, GELU, batch-first, dropout 0) on [32, 128, 384]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "qkv/generator.h"
#include "qkv/models/bert.h"
#include "qkv/models/gguf_model.h"
#include "qkv/nn/decoder_model.h"
#include "qkv/nn/decoder_session.h"
#include "qkv/nn/transformer.h"
#include "qkv/optim/adam.h"
#include "qkv/precision.h"
#include "qkv/runtime.h"
#include "qkv/tensor.h"

namespace {

using namespace qkv;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = "models/all-MiniLM-L6-v2";
  std::string gguf = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  int warmup = 1;
  int reps_embed = 5, reps_decode = 5, reps_train = 5;
  std::string only = "embed,decode,train";
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// `warmup` untimed calls, then `reps` timed ones -> milliseconds each.
std::vector<double> time_ms(int warmup, int reps, const std::function<void()>& run) {
  for (int i = 0; i < warmup; ++i) run();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    run();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return ms;
}

std::vector<double> bench_embed_at(const Options& o, Precision precision) {
  constexpr int64_t kBatch = 32, kTokens = 128;
  auto model = models::BertModel::from_pretrained(o.model);
  model.set_precision(precision);
  std::mt19937_64 rng(17);
  std::uniform_int_distribution<int64_t> id(1000, model.config().vocab_size - 1);
  std::vector<int64_t> ids(kBatch * kTokens), mask(kBatch * kTokens, 1);
  for (auto& x : ids) x = id(rng);
  float sink = 0;
  auto ms = time_ms(o.warmup, o.reps_embed, [&] {
    const Tensor hidden = model.forward(ids, mask, kBatch);
    sink += hidden.data<float>()[0];
  });
  if (sink != sink) std::fprintf(stderr, "embed: NaN\n");
  return ms;
}

std::vector<double> bench_embed(const Options& o) { return bench_embed_at(o, Precision::kFloat32); }
std::vector<double> bench_embed_bf16(const Options& o) {
  return bench_embed_at(o, Precision::kBFloat16);
}
std::vector<double> bench_embed_int8(const Options& o) {
  return bench_embed_at(o, Precision::kInt8);
}

// The GGUF model's prompt (prompt_tokens > 1) or generation (new_tokens steps
// after a 1-token prompt) -> milliseconds of each rep.
std::vector<double> bench_gguf(const Options& o, int64_t prompt_tokens, int64_t new_tokens) {
  models::GgufModel m = models::load_gguf_model(o.gguf, {.max_seq_len = 1024});
  nn::DecoderSession session(m.model, 1, 1024);
  const int64_t vocab = m.model.config().vocab_size;
  std::vector<int64_t> prompt(static_cast<size_t>(prompt_tokens));
  for (int64_t i = 0; i < prompt_tokens; ++i) prompt[i] = (7919 * i + 101) % vocab;
  int64_t checksum = 0;
  std::vector<double> ms;
  for (int rep = 0; rep < o.warmup + o.reps_decode; ++rep) {
    session.reset();
    auto t0 = Clock::now();
    session.prefill(prompt);
    if (new_tokens > 0) t0 = Clock::now();  // generation: the 1-token prompt is not timed
    for (int64_t i = 0; i < new_tokens; ++i) {
      const auto row = session.logits_row(0);
      int64_t next = std::max_element(row.begin(), row.end()) - row.begin();
      checksum += next;
      session.step({&next, 1});
    }
    const double t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (rep >= o.warmup) ms.push_back(t);
  }
  std::fprintf(stderr, "gguf: token checksum %lld\n", static_cast<long long>(checksum));
  return ms;
}
std::vector<double> bench_gguf_prompt(const Options& o) { return bench_gguf(o, 512, 0); }
std::vector<double> bench_gguf_gen(const Options& o) { return bench_gguf(o, 1, 128); }

std::vector<double> bench_decode(const Options& o) {
  constexpr int64_t kPrompt = 16, kNew = 512;
  Generator gen(1234);
  nn::DecoderModel model({.vocab_size = 256, .d_model = 384, .num_layers = 6, .num_heads = 6,
                          .max_seq_len = 1024, .positions = nn::PositionKind::kRope,
                          .ffn = nn::FeedForwardKind::kSwiGLU},
                         &gen);
  nn::DecoderSession session(model);
  std::vector<int64_t> prompt(kPrompt);
  for (int64_t i = 0; i < kPrompt; ++i) prompt[i] = (37 * i + 11) % 256;
  auto argmax = [&] {
    const auto row = session.logits_row(0);
    return static_cast<int64_t>(std::max_element(row.begin(), row.end()) - row.begin());
  };
  int64_t checksum = 0;
  std::vector<double> ms;
  for (int rep = 0; rep < o.warmup + o.reps_decode; ++rep) {
    session.reset();
    session.prefill(prompt);  // not timed
    int64_t next = argmax();
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < kNew; ++i) {
      session.step({&next, 1});
      next = argmax();
      checksum += next;
    }
    const double t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (rep >= o.warmup) ms.push_back(t);
  }
  std::fprintf(stderr, "decode: token checksum %lld\n", static_cast<long long>(checksum));
  return ms;
}

std::vector<double> bench_train(const Options& o) {
  constexpr int64_t kBatch = 32, kTokens = 128, kD = 384;
  Generator gen(4321);
  nn::TransformerEncoderOptions options;
  options.layer = {.d_model = kD, .nhead = 12, .dim_feedforward = 1536, .dropout = 0.0,
                   .activation = Activation::kGelu, .batch_first = true};
  options.num_layers = 6;
  nn::TransformerEncoder encoder(options, &gen);
  const Tensor x = Tensor::randn({kBatch, kTokens, kD}, gen);
  const Tensor grad_out = Tensor::randn({kBatch, kTokens, kD}, gen);
  optim::AdamW opt(encoder.parameters(), {.lr = 1e-4, .weight_decay = 0.01});
  float sink = 0;
  auto ms = time_ms(o.warmup, o.reps_train, [&] {
    nn::TransformerEncoderRecord record;
    const Tensor out = encoder.forward(x, {}, &record);
    encoder.backward(grad_out, record);
    opt.step();
    encoder.zero_grad();
    sink += out.data<float>()[0];
  });
  if (sink != sink) std::fprintf(stderr, "train: NaN\n");
  return ms;
}

void print_json_list(const std::vector<double>& v) {
  std::printf("[");
  for (size_t i = 0; i < v.size(); ++i) std::printf("%s%.2f", i ? ", " : "", v[i]);
  std::printf("]");
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--model DIR] [--gguf FILE] [--warmup N] [--reps-embed N] "
               "[--reps-decode N] [--reps-train N] [--only embed,embed_bf16,...]\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage(argv[0]);
    const char* v = argv[++i];
    if (a == "--model") o.model = v;
    else if (a == "--gguf") o.gguf = v;
    else if (a == "--warmup") o.warmup = std::atoi(v);
    else if (a == "--reps-embed") o.reps_embed = std::atoi(v);
    else if (a == "--reps-decode") o.reps_decode = std::atoi(v);
    else if (a == "--reps-train") o.reps_train = std::atoi(v);
    else if (a == "--only") o.only = v;
    else return usage(argv[0]);
  }
  if (o.warmup < 0 || o.reps_embed < 1 || o.reps_decode < 1 || o.reps_train < 1)
    return usage(argv[0]);
  auto wanted = [&](const std::string& name) {
    return ("," + o.only + ",").find("," + name + ",") != std::string::npos;
  };

  std::printf("{\"threads\": %d", num_threads());
  struct Item {
    const char* name;
    std::vector<double> (*run)(const Options&);
  };
  for (const Item& item : {Item{"embed", bench_embed}, Item{"embed_bf16", bench_embed_bf16},
                           Item{"embed_int8", bench_embed_int8},
                           Item{"gguf_prompt", bench_gguf_prompt}, Item{"gguf_gen", bench_gguf_gen},
                           Item{"decode", bench_decode}, Item{"train", bench_train}}) {
    if (!wanted(item.name)) continue;
    const std::vector<double> ms = item.run(o);
    std::printf(", \"%s_ms\": %.2f, \"%s_reps_ms\": ", item.name, median(ms), item.name);
    print_json_list(ms);
  }
  std::printf("}\n");
  return 0;
}
