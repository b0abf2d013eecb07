// `qkv bench`: named workloads timed in repetitions, in the manner of
// llama-bench: attention (SDPA forward and forward+backward, float32 and
// bfloat16, at a few [B, H, L, E]), decoding a GGUF model (pp: a prompt of N
// tokens in one pass; tg: M tokens one by one) and sentence embeddings (B
// texts of L tokens). Each row: mean ± sd and median of the throughput over
// --reps timed runs, after one untimed warm-up run; as a markdown table, CSV
// or JSON lines. The Python bench/*.py scripts compare with torch, llama.cpp
// and sentence-transformers side by side; this one needs nothing but qkv.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "cli_options.h"
#include "command.h"
#include "gguf_generation.h"
#include "qkv/attention.h"
#include "qkv/error.h"
#include "qkv/generator.h"
#include "qkv/io/atomic_file.h"
#include "qkv/models/gguf_model.h"
#include "qkv/models/sentence_encoder.h"
#include "qkv/nn/decoder_session.h"
#include "qkv/runtime.h"
#include "qkv/sampling.h"
#include "qkv/tensor.h"

#ifndef QKV_VERSION_STRING
#define QKV_VERSION_STRING "unknown"
#endif

namespace qkv::cli {

namespace {

struct BenchOptions {
  std::vector<std::string> workloads;  // names or groups; empty: the default set
  std::string model;                   // -m: GGUF file for decode/*
  std::string kv_cache = "f32";        // --kv-cache of decode/*
  std::string embed_model;             // -e: sentence-transformers directory for embed/*
  int64_t prompt_tokens = 0;           // -p (0: 512, --quick 64)
  int64_t gen_tokens = 0;              // -n (0: 128, --quick 16)
  int64_t depth = 0;                   // -d: tokens already in the cache of decode/*
  int64_t reps = 0;                    // 0: 5, --quick 3
  std::vector<int> threads;            // empty: as the process has them
  std::string output = "md";
  bool quick = false;
  bool list = false;
};

// One timed run: prepares what must not be timed, then returns the seconds of
// the part that is.
using Run = std::function<double()>;

struct Workload {
  std::string name;  // "sdpa/fwd/fp32/B8-H8-L512-E64": group/.../point
  std::string what;  // for --list
  std::string unit;  // of the throughput: "GFLOP/s", "tok/s", "sent/s"
  double work = 0;   // per run, in the unit's numerator (GFLOP, tokens, sentences)
  bool quick = false;
  std::function<Run()> prepare;  // allocates inputs, loads models (once per workload)
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

template <class F>
double timed(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return seconds_since(start);
}

// --- Attention ---------------------------------------------------------------

struct AttentionPoint {
  int64_t B, H, L, E;
  bool quick;
};

// A few points of bench/attention_vs_torch.py's grid (B·L = 4,096 tokens,
// H·E = 512 at the large ones) and one small one for --quick.
constexpr AttentionPoint kAttentionPoints[] = {
    {2, 8, 256, 64, true},
    {8, 8, 512, 64, false},
    {2, 8, 2048, 64, false},
    {32, 16, 128, 32, false},
};

void add_attention(std::vector<Workload>& out) {
  for (const bool backward : {false, true})
    for (const bool bf16 : {false, true})
      for (const AttentionPoint& p : kAttentionPoints) {
        const std::string shape = "B" + std::to_string(p.B) + "-H" + std::to_string(p.H) + "-L" +
                                  std::to_string(p.L) + "-E" + std::to_string(p.E);
        // Forward 4·B·H·L·S·E FLOPs (two products); the backward 2.5 times that.
        const double forward = 4.0 * p.B * p.H * p.L * p.L * p.E / 1e9;
        Workload w;
        w.name = std::string("sdpa/") + (backward ? "fwdbwd/" : "fwd/") +
                 (bf16 ? "bf16/" : "fp32/") + shape;
        w.what = std::string("scaled_dot_product_attention") + (backward ? " + backward" : "") +
                 ", " + (bf16 ? "bfloat16" : "float32") + " q, k, v [B, H, L, E], S = L";
        w.unit = "GFLOP/s";
        w.work = backward ? 3.5 * forward : forward;
        w.quick = p.quick;
        w.prepare = [p, backward, bf16]() -> Run {
          Generator gen(0);
          const DType dtype = bf16 ? DType::kBFloat16 : DType::kFloat32;
          auto q = std::make_shared<Tensor>(Tensor::randn({p.B, p.H, p.L, p.E}, gen).to(dtype));
          auto k = std::make_shared<Tensor>(Tensor::randn({p.B, p.H, p.L, p.E}, gen).to(dtype));
          auto v = std::make_shared<Tensor>(Tensor::randn({p.B, p.H, p.L, p.E}, gen).to(dtype));
          auto grad = std::make_shared<Tensor>(Tensor::randn({p.B, p.H, p.L, p.E}, gen).to(dtype));
          return [q, k, v, grad, backward] {
            return timed([&] {
              const SdpaResult forward = scaled_dot_product_attention(*q, *k, *v);
              if (backward) scaled_dot_product_attention_backward(*grad, *q, *k, *v, forward);
            });
          };
        };
        out.push_back(std::move(w));
      }
}

// --- Decoding a GGUF model -----------------------------------------------------

// What a timed decode run works on.
struct DecodeRun {
  std::shared_ptr<models::GgufModel> model;
  std::shared_ptr<nn::DecoderSession> session;  // emptied before each run
  std::vector<int64_t> ids;                     // the prompt: random ids
};

// " @ d4096"-style suffix of llama-bench, here "@d4096" (nothing at depth 0).
std::string at_depth(int64_t depth) { return depth > 0 ? "@d" + std::to_string(depth) : ""; }

void add_decode(std::vector<Workload>& out, const std::string& model, int64_t prompt_tokens,
                int64_t gen_tokens, int64_t depth, const std::string& kv_cache) {
  // Loaded by the first decode workload that runs; shared by both.
  auto loaded = std::make_shared<std::shared_ptr<models::GgufModel>>();
  const auto load = [loaded, model, kv_cache, n = depth + prompt_tokens + gen_tokens + 1] {
    if (!*loaded) {
      QKV_CHECK(is_gguf_file(model), "-m '", model, "' is not a GGUF file");
      *loaded = std::make_shared<models::GgufModel>(models::load_gguf_model(
          model, {.max_seq_len = std::max<int64_t>(n, 16),
                  .kv_cache = nn::parse_kv_cache_storage(kv_cache, "--kv-cache")}));
    }
    return *loaded;
  };
  // A decode/* workload of `tokens` tokens per run, in the --quick set. Each run
  // starts from an empty session of `capacity` positions; `time_run` times the
  // part measured, given the model, the session and `prompt` random ids (the
  // cost of a pass does not depend on which tokens they are).
  const auto add = [&out, load](std::string name, std::string what, int64_t tokens,
                                int64_t capacity, int64_t prompt,
                                std::function<double(const DecodeRun&)> time_run) {
    out.push_back({.name = std::move(name),
                   .what = std::move(what),
                   .unit = "tok/s",
                   .work = static_cast<double>(tokens),
                   .quick = true,
                   .prepare = [load, capacity, prompt, time_run]() -> Run {
                     DecodeRun r;
                     r.model = load();
                     const int64_t context = r.model->model.config().max_seq_len;
                     QKV_CHECK(capacity <= context, "a decode run needs ", capacity,
                               " positions (-d plus -p, or -d plus -n), more than the model's "
                               "context of ",
                               context, " tokens; lower -d, -p or -n");
                     r.session = std::make_shared<nn::DecoderSession>(r.model->model, 1, capacity);
                     Generator gen(0);
                     r.ids.resize(prompt);
                     for (int64_t& id : r.ids)
                       id = static_cast<int64_t>(gen.next_u64() %
                                                 r.model->model.config().vocab_size);
                     return [r, time_run] {
                       r.session->reset();
                       return time_run(r);
                     };
                   }});
  };
  // At depth d, the first d ids fill the cache untimed (as llama-bench's -d).
  const std::string context =
      depth > 0 ? " after " + std::to_string(depth) + " tokens in the cache (untimed)" : "";
  add("decode/pp" + std::to_string(prompt_tokens) + at_depth(depth),
      "GGUF model (-m): a prompt of " + std::to_string(prompt_tokens) +
          " tokens in one pass (prefill)" + (depth > 0 ? context : ", from an empty cache"),
      prompt_tokens, depth + prompt_tokens, depth + prompt_tokens, [depth](const DecodeRun& r) {
        const std::span<const int64_t> ids = r.ids;
        if (depth > 0) r.session->prefill(ids.first(depth));
        return timed([&] { r.session->prefill(ids.subspan(depth)); });
      });
  const int64_t first = std::max<int64_t>(depth, 1);
  add("decode/tg" + std::to_string(gen_tokens) + at_depth(depth),
      "GGUF model (-m): " + std::to_string(gen_tokens) + " tokens generated one by one (greedy)" +
          (depth > 0 ? context : " after a 1-token prompt"),
      gen_tokens, first + gen_tokens, first, [gen_tokens](const DecodeRun& r) {
        r.session->prefill(r.ids);
        return timed([&] {
          for (int64_t i = 0; i < gen_tokens; ++i) {
            const int64_t next = argmax(r.session->logits_row(0));
            r.session->step({&next, 1});
          }
        });
      });
}

// --- Sentence embeddings -------------------------------------------------------

// `count` texts of exactly `tokens` tokens each ([CLS] and [SEP] included),
// from words that are one word piece each, each text starting elsewhere.
std::vector<std::string> texts_of_length(const models::SentenceEncoder& encoder, int64_t count,
                                         int64_t tokens) {
  static const char* const kWords[] = {"the", "cat", "sat", "on",   "a",    "mat", "and",
                                       "dog", "ran", "in",  "park", "with", "red", "ball"};
  const int64_t n_words = static_cast<int64_t>(std::size(kWords));
  std::vector<std::string> texts;
  for (int64_t i = 0; i < count; ++i) {
    std::string text;
    for (int64_t j = 0; j < tokens - 2; ++j) {
      if (j > 0) text += ' ';
      text += kWords[(i + j) % n_words];
    }
    const int64_t got = static_cast<int64_t>(encoder.token_ids(text).size());
    QKV_CHECK(got == tokens, "embed workload: a text of ", tokens - 2, " common words gave ", got,
              " tokens, expected ", tokens, " (a tokenizer that splits them?)");
    texts.push_back(text);
  }
  return texts;
}

struct EmbedPoint {
  int64_t B, L;
  bool quick;
};

constexpr EmbedPoint kEmbedPoints[] = {{8, 32, true}, {32, 128, false}, {1, 32, false}};

void add_embed(std::vector<Workload>& out, const std::string& model_dir) {
  auto loaded = std::make_shared<std::shared_ptr<models::SentenceEncoder>>();
  const auto load = [loaded, model_dir] {
    if (!*loaded) {
      QKV_CHECK(std::filesystem::is_directory(model_dir), "--embed-model '", model_dir,
                "' is not a directory (a sentence-transformers model: scripts/fetch_model.sh)");
      *loaded = std::make_shared<models::SentenceEncoder>(model_dir);
    }
    return *loaded;
  };
  for (const EmbedPoint& p : kEmbedPoints) {
    Workload w;
    w.name = "embed/B" + std::to_string(p.B) + "-L" + std::to_string(p.L);
    w.what = "sentence embeddings (--embed-model): " + std::to_string(p.B) + " texts of " +
             std::to_string(p.L) + " tokens, one batch, tokenizing included";
    w.unit = "sent/s";
    w.work = static_cast<double>(p.B);
    w.quick = p.quick;
    w.prepare = [load, p]() -> Run {
      std::shared_ptr<models::SentenceEncoder> encoder = load();
      QKV_CHECK(p.L <= encoder->max_seq_length(), "embed workload: ", p.L,
                " tokens exceed the model's max_seq_length ", encoder->max_seq_length());
      auto texts = std::make_shared<std::vector<std::string>>(texts_of_length(*encoder, p.B, p.L));
      return [encoder, texts, p] { return timed([&] { encoder->encode(*texts, p.B); }); };
    };
    out.push_back(std::move(w));
  }
}

// --- Selecting, running, printing ----------------------------------------------

std::vector<Workload> all_workloads(const BenchOptions& o) {
  std::vector<Workload> all;
  add_attention(all);
  add_decode(all, o.model, o.prompt_tokens, o.gen_tokens, o.depth, o.kv_cache);
  add_embed(all, o.embed_model);
  return all;
}

bool needs_model(const Workload& w) { return w.name.rfind("decode/", 0) == 0; }
bool needs_embed_model(const Workload& w) { return w.name.rfind("embed/", 0) == 0; }

// `pattern` names `w`: its whole name, or a group of it ("sdpa", "sdpa/fwd").
bool selects(const std::string& pattern, const Workload& w) {
  return w.name == pattern || w.name.rfind(pattern + "/", 0) == 0;
}

// --workload's choices in the catalogue's order (of a group, only the quick
// ones under --quick); without any, the --quick or full set of what the given
// files allow.
std::vector<const Workload*> select(const std::vector<Workload>& all, const BenchOptions& o) {
  std::vector<const Workload*> chosen;
  for (const std::string& pattern : o.workloads) {
    const bool any =
        std::any_of(all.begin(), all.end(), [&](const Workload& w) { return selects(pattern, w); });
    QKV_CHECK(any, "--workload '", pattern, "' names no workload; 'qkv bench --list' names them");
  }
  for (const Workload& w : all) {
    const bool wanted =
        o.workloads.empty()
            ? (!o.quick || w.quick) && (!needs_model(w) || !o.model.empty()) &&
                  (!needs_embed_model(w) || !o.embed_model.empty())
            : std::any_of(o.workloads.begin(), o.workloads.end(), [&](const std::string& pattern) {
                // A group under --quick: its quick workloads only.
                return pattern == w.name || (selects(pattern, w) && (!o.quick || w.quick));
              });
    if (!wanted) continue;
    QKV_CHECK(!needs_model(w) || !o.model.empty(), "workload ", w.name,
              " needs a GGUF model: -m FILE.gguf");
    QKV_CHECK(!needs_embed_model(w) || !o.embed_model.empty(), "workload ", w.name,
              " needs a sentence-transformers model: --embed-model DIR");
    chosen.push_back(&w);
  }
  return chosen;
}

struct Row {
  const Workload* workload;
  int threads;
  std::vector<double> seconds;  // one per rep
  // Throughput statistics over the reps: work / seconds.
  double mean = 0, sd = 0, median = 0;
  double mean_ms = 0;
};

Row statistics(const Workload& w, int threads, std::vector<double> seconds) {
  Row row{&w, threads, seconds};
  std::vector<double> rates;
  for (double s : seconds) rates.push_back(s > 0 ? w.work / s : 0.0);
  const double n = static_cast<double>(rates.size());
  row.mean = std::accumulate(rates.begin(), rates.end(), 0.0) / n;
  double squares = 0;
  for (double r : rates) squares += (r - row.mean) * (r - row.mean);
  row.sd = rates.size() > 1 ? std::sqrt(squares / (n - 1)) : 0.0;  // sample sd
  std::sort(rates.begin(), rates.end());
  const size_t m = rates.size() / 2;
  row.median = rates.size() % 2 ? rates[m] : (rates[m - 1] + rates[m]) / 2;
  row.mean_ms = 1e3 * std::accumulate(seconds.begin(), seconds.end(), 0.0) / n;
  return row;
}

std::string fixed(double x, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, x);
  return text;
}

// Throughputs with 3 significant digits or more: 1234, 123.4, 12.34, 1.234.
std::string rate(double x) {
  const int digits = x >= 1000 ? 0 : x >= 100 ? 1 : x >= 10 ? 2 : 3;
  return fixed(x, digits);
}

std::string pad(const std::string& text, size_t width, bool right) {
  // Columns by code points: "±" is two bytes but one column.
  size_t columns = 0;
  for (unsigned char c : text) columns += (c & 0xc0) != 0x80;
  const std::string fill(width > columns ? width - columns : 0, ' ');
  return right ? fill + text : text + fill;
}

// Where -o sends the results: a format (md, csv, jsonl) to stdout, as
// llama-bench's -o, or a file whose extension names the format.
struct BenchOutput {
  std::string format;
  std::filesystem::path file;  // empty: stdout
};

// "" when `value` is a format or such a file name; else why not.
std::string bench_output_error(const std::string& value) {
  for (const char* format : {"md", "csv", "jsonl"})
    if (value == format || std::filesystem::path(value).extension() == std::string(".") + format)
      return "";
  return "'" + value + "' is neither a format (md, csv, jsonl) nor a file name ending in .md, " +
         ".csv or .jsonl";
}

BenchOutput parse_bench_output(const std::string& value) {
  QKV_CHECK(bench_output_error(value).empty(), "-o: ", bench_output_error(value));
  for (const char* format : {"md", "csv", "jsonl"})
    if (value == format) return {format, {}};
  return {std::filesystem::path(value).extension().string().substr(1), value};
}

class Printer {
 public:
  Printer(std::string format, size_t name_width, std::ostream& out)
      : format_(std::move(format)), name_(name_width), out_(out) {}

  void header() {
    if (format_ == "md") {
      line({"workload", "threads", "reps", "ms/run", "mean ± sd", "median", "unit"});
      out_ << "|" << std::string(name_ + 2, '-') << "|--------:|-----:|---------:|"
           << "--------------------:|----------:|---------|\n";
    } else if (format_ == "csv") {
      out_ << "workload,unit,threads,reps,mean,sd,median,mean_ms,isa,qkv\n";
    }
    out_ << std::flush;
  }

  void row(const Row& r) {
    const Workload& w = *r.workload;
    if (format_ == "md") {
      line({w.name, std::to_string(r.threads), std::to_string(r.seconds.size()),
            fixed(r.mean_ms, 2), rate(r.mean) + " ± " + rate(r.sd), rate(r.median), w.unit});
    } else if (format_ == "csv") {
      out_ << w.name << "," << w.unit << "," << r.threads << "," << r.seconds.size() << ","
           << r.mean << "," << r.sd << "," << r.median << "," << r.mean_ms << "," << kernel_isa()
           << "," << QKV_VERSION_STRING << "\n";
    } else {
      const nlohmann::json j = {
          {"workload", w.name},       {"unit", w.unit},       {"threads", r.threads},
          {"reps", r.seconds.size()}, {"mean", r.mean},       {"sd", r.sd},
          {"median", r.median},       {"mean_ms", r.mean_ms}, {"work", w.work},
          {"seconds", r.seconds},     {"isa", kernel_isa()},  {"qkv", QKV_VERSION_STRING}};
      out_ << j.dump() << "\n";
    }
    out_ << std::flush;
  }

  void footer(const BenchOptions& o) {
    if (format_ != "md") return;
    out_ << "\nqkv " << QKV_VERSION_STRING << ", " << kernel_isa() << " kernels, BLAS "
         << blas_core_name();
    if (!o.model.empty()) out_ << ", -m " << o.model;
    if (!o.embed_model.empty()) out_ << ", --embed-model " << o.embed_model;
    out_ << "\n" << std::flush;
  }

 private:
  void line(const std::vector<std::string>& cells) {
    const size_t widths[] = {name_, 7, 4, 8, 19, 9, 7};
    const bool right[] = {false, true, true, true, true, true, false};
    out_ << "|";
    for (size_t i = 0; i < cells.size(); ++i)
      out_ << " " << pad(cells[i], widths[i], right[i]) << " |";
    out_ << "\n";
  }

  std::string format_;
  size_t name_;
  std::ostream& out_;
};

// "[3/12] sdpa/fwd/fp32/B8-H8-L512-E64  rep 2/5" redrawn on stderr, when that is a terminal.
class Progress {
 public:
  Progress() : enabled_(isatty(STDERR_FILENO) == 1) {}
  void show(size_t index, size_t total, const std::string& name, const std::string& stage) {
    if (!enabled_) return;
    std::fprintf(stderr, "\r\x1b[K[%zu/%zu] %s  %s", index + 1, total, name.c_str(), stage.c_str());
    std::fflush(stderr);
  }
  void clear() {
    if (enabled_) std::fprintf(stderr, "\r\x1b[K");
  }

 private:
  bool enabled_;
};

void run_bench(const BenchOptions& given) {
  BenchOptions o = given;
  if (o.reps == 0) o.reps = o.quick ? 3 : 5;
  if (o.prompt_tokens == 0) o.prompt_tokens = o.quick ? 64 : 512;
  if (o.gen_tokens == 0) o.gen_tokens = o.quick ? 16 : 128;
  const std::vector<Workload> all = all_workloads(o);

  if (o.list) {
    size_t width = 0;
    for (const Workload& w : all) width = std::max(width, w.name.size());
    for (const Workload& w : all)
      std::cout << pad(w.name, width, false) << "  " << (w.quick ? "quick " : "      ") << w.what
                << "\n";
    std::cout << "Groups select every workload under them: sdpa, sdpa/fwd, sdpa/fwdbwd/bf16, "
                 "decode, embed, ...\n"
              << std::flush;
    return;
  }

  const std::vector<const Workload*> chosen = select(all, o);
  QKV_CHECK(!chosen.empty(), "no workload selected");
  std::vector<int> thread_counts = o.threads;
  if (thread_counts.empty()) thread_counts.push_back(0);

  size_t name_width = 8;
  for (const Workload* w : chosen) name_width = std::max(name_width, w->name.size());
  // -o FILE: the table goes to the file, written whole at the end.
  const BenchOutput output = parse_bench_output(o.output);
  std::ostringstream buffer;
  Printer printer(output.format, name_width, output.file.empty() ? std::cout : buffer);
  printer.header();
  Progress progress;
  const size_t total = chosen.size() * thread_counts.size();
  size_t index = 0;
  for (const Workload* w : chosen) {
    progress.show(index, total, w->name, "preparing");
    const Run run = w->prepare();
    for (int threads : thread_counts) {
      if (threads > 0) set_num_threads(threads);
      progress.show(index, total, w->name, "warm-up");
      run();
      std::vector<double> seconds;
      for (int64_t rep = 0; rep < o.reps; ++rep) {
        progress.show(index, total, w->name,
                      "rep " + std::to_string(rep + 1) + "/" + std::to_string(o.reps));
        seconds.push_back(run());
      }
      progress.clear();
      printer.row(statistics(*w, num_threads(), seconds));
      ++index;
    }
  }
  printer.footer(o);
  if (!output.file.empty()) {
    const std::string text = buffer.str();
    io::write_file_atomically(output.file, std::as_bytes(std::span(text.data(), text.size())));
    std::fprintf(stderr, "wrote %s\n", output.file.c_str());
  }
}

}  // namespace

Command add_bench_command(CLI::App& parent) {
  return make_command(
      parent, "bench", "Time named workloads (attention, decoding, embeddings) like llama-bench",
      run_bench, [](CLI::App& app, BenchOptions& options) {
        app.add_option("-w,--workload", options.workloads,
                       "Workloads or groups to run (repeatable, comma-separated; see --list); "
                       "default: all the given files allow")
            ->delimiter(',')
            ->type_name("NAME");
        app.add_option("-m,--model", options.model,
                       "GGUF file for the decode/* workloads (e.g. "
                       "models/SmolLM2-135M-Instruct.Q4_1.gguf)")
            ->check(CLI::ExistingFile);
        app.add_option("-e,--embed-model", options.embed_model,
                       "Sentence-transformers directory for the embed/* workloads (e.g. "
                       "models/all-MiniLM-L6-v2)")
            ->check(CLI::ExistingDirectory);
        add_kv_cache_option(app, options.kv_cache);
        app.add_option("-p,--prompt-tokens", options.prompt_tokens,
                       "Tokens of decode/pp (default 512, --quick 64)")
            ->check(in_range(int64_t{1}, int64_t{32768}));
        app.add_option("-n,--gen-tokens", options.gen_tokens,
                       "Tokens of decode/tg (default 128, --quick 16)")
            ->check(in_range(int64_t{1}, int64_t{32768}));
        app.add_option("-d,--depth", options.depth,
                       "Tokens already in the cache before decode/pp and decode/tg are timed "
                       "(llama-bench's -d; default 0)")
            ->check(in_range(int64_t{0}, int64_t{131072}));
        app.add_option("-r,--reps", options.reps, "Timed runs per workload (default 5, --quick 3)")
            ->check(in_range(int64_t{1}, int64_t{1000}));
        app.add_option("-t,--threads", options.threads,
                       "Thread counts to run each workload with, e.g. 1,2 (0 = as set by "
                       "OMP_NUM_THREADS or all cores)")
            ->delimiter(',')
            ->check(in_range(0, kMaxThreads))
            ->type_name("N");
        app.add_option("-o,--output", options.output,
                       "md (a table), csv or jsonl to stdout, or a file whose extension "
                       "(.md, .csv, .jsonl) names the format")
            ->capture_default_str()
            ->check(CLI::Validator(bench_output_error, "FORMAT|FILE"))
            ->type_name("FORMAT|FILE");
        app.add_flag("-q,--quick", options.quick,
                     "Small workloads and 3 reps: a table in a few seconds");
        app.add_flag("-l,--list", options.list, "Name the workloads and exit");
        app.footer(
            "Each workload runs once untimed, then --reps times; rows give the throughput's\n"
            "mean ± sample sd and median over the reps, and the mean time of a run. GFLOP/s\n"
            "count 4·B·H·L·S·E for the forward and 2.5 times that for the backward. Progress\n"
            "goes to stderr when it is a terminal; results go to stdout.");
      });
}

}  // namespace qkv::cli
