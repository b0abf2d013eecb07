// `qkv demo`: walks through the tutorial section by section, printing what
// the tutorial's Python prints, but computed by qkv.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "cli_options.h"
#include "command.h"
#include "qkv/attention.h"
#include "qkv/error.h"
#include "qkv/generator.h"
#include "qkv/masks.h"
#include "qkv/nn/multihead_attention.h"
#include "qkv/runtime.h"
#include "qkv/tensor.h"
#include "qkv/viz/heatmap.h"
#include "tasks/recall_training.h"
#include "terminal.h"

namespace qkv::cli {

namespace {

struct DemoOptions {
  uint64_t seed = 0;
  std::string out = "qkv-demo";
  int threads = 0;
};

// --- Formatting ------------------------------------------------------------

std::string fixed(double x, int precision) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", precision, x);
  return buffer;
}

// "0" for an exact zero (the point of a mask), else fixed decimals.
std::string exact_or_fixed(double x, int precision) { return x == 0.0 ? "0" : fixed(x, precision); }

// A 1-D or 2-D tensor on one line, as "[0.506, 0.307]" or "[[10, 0], [0, 20]]".
std::string inline_list(const Tensor& t, int precision) {
  if (t.dim() == 0) return fixed(t.item(), precision);
  std::string out = "[";
  for (int64_t i = 0; i < t.size(0); ++i) {
    if (i > 0) out += ", ";
    out += inline_list(t.select(0, i), precision);
  }
  return out + "]";
}

// A 0/1 matrix the way torch prints torch.tril(torch.ones(L, S)).
std::string torch_float_matrix(const Tensor& m) {
  std::string out = "tensor([";
  for (int64_t i = 0; i < m.size(0); ++i) {
    if (i > 0) out += ",\n        ";
    out += "[";
    for (int64_t j = 0; j < m.size(1); ++j) {
      if (j > 0) out += ", ";
      out += fixed(m.at({i, j}), 0) + ".";
    }
    out += "]";
  }
  return out + "])";
}

// Sample standard deviation (n - 1 in the denominator, as torch.std).
double sample_std(const Tensor& t) {
  const std::vector<double> v = t.to_vector();
  double mean = 0.0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double sum_sq = 0.0;
  for (double x : v) sum_sq += (x - mean) * (x - mean);
  return std::sqrt(sum_sq / static_cast<double>(v.size() - 1));
}

// Sums over the last dimension, as t.sum(dim=-1).
Tensor sum_last_dim(const Tensor& t) {
  const int64_t n = t.size(-1);
  const std::vector<double> v = t.to_vector();
  std::vector<double> sums(v.size() / n, 0.0);
  for (size_t i = 0; i < v.size(); ++i) sums[i / n] += v[i];
  Shape shape = t.shape();
  shape.pop_back();
  return Tensor::from_vector(shape, std::span<const double>(sums)).to(DType::kFloat32);
}

bool has_nan(const Tensor& t) {
  for (double x : t.to_vector()) {
    if (std::isnan(x)) return true;
  }
  return false;
}

Tensor float_tensor(const Shape& shape, std::vector<float> values) {
  return Tensor::from_vector(shape, std::span<const float>(values));
}

// --- Output ----------------------------------------------------------------

class Printer {
 public:
  explicit Printer(Style style) : style_(style) {}
  const Style& style() const { return style_; }

  void heading(std::string_view section, std::string_view title) {
    std::string text = "== " + std::string(section);
    if (!title.empty()) text += "  " + std::string(title);
    std::cout << "\n" << style_.heading(text) << "\n";
  }
  // One body line (or several, for printed tensors), indented under the heading.
  void line(std::string_view text) {
    size_t start = 0;
    while (start <= text.size()) {
      const size_t end = std::min(text.find('\n', start), text.size());
      const std::string_view piece = text.substr(start, end - start);
      if (!piece.empty()) std::cout << "  " << piece;
      std::cout << "\n";
      start = end + 1;
    }
  }
  void note(std::string_view text) { line(style_.muted(text)); }

 private:
  Style style_;
};

// --- Sections ----------------------------------------------------------------

struct TinyExample {
  Tensor query, keys, values;
};

// The §2.4 numbers: one query, three keys (the identity), three values.
TinyExample tiny_example() {
  return {float_tensor({3}, {1.0f, 0.5f, 0.0f}), float_tensor({3, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1}),
          float_tensor({3, 2}, {10, 0, 0, 20, 0, 0})};
}

void section_simple_attention(Printer& p) {
  p.heading("§2.4", "simple_attention: the output is a weighted sum of the values");
  const TinyExample ex = tiny_example();
  const AttentionResult r = simple_attention(ex.query, ex.keys, ex.values);
  p.line("query = " + inline_list(ex.query, 1) +
         "   keys = 3x3 identity   values = " + inline_list(ex.values, 0));
  p.line("attention weights: " + inline_list(r.weights, 3));
  p.line("output: " + inline_list(r.output, 2));
  p.note("The query matches key 0 best, so the output leans towards value 0 = [10, 0].");
}

void section_score_functions(Printer& p, Generator& gen) {
  p.heading("§2.2", "four score functions on the same query and keys");
  const TinyExample ex = tiny_example();
  const Tensor q = ex.query.view({1, 3});  // [L = 1, E = 3]
  const int64_t hidden = 4;                // A, the additive scorer's hidden size
  struct Row {
    const char* name;
    const char* formula;
    ScoreFunction score;
  };
  const Row rows[] = {
      {"dot", "q.k", ScoreFunction::dot()},
      {"scaled_dot", "q.k / sqrt(d_k)", ScoreFunction::scaled_dot()},
      {"additive", "v^T tanh(W_q q + W_k k)",
       ScoreFunction::additive(Tensor::randn({hidden, 3}, gen), Tensor::randn({hidden, 3}, gen),
                               Tensor::randn({hidden}, gen))},
      {"bilinear", "q^T W k", ScoreFunction::bilinear(Tensor::randn({3, 3}, gen))},
  };
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, "%-11s %-24s %-24s %s", "score", "formula", "scores",
                "softmax weights");
  p.line(p.style().strong(buffer));
  for (const Row& row : rows) {
    const Tensor scores = row.score.scores(q, ex.keys).select(0, 0);
    const Tensor weights = attention(q, ex.keys, ex.values, row.score).weights.select(0, 0);
    std::snprintf(buffer, sizeof buffer, "%-11s %-24s %-24s %s", row.name, row.formula,
                  inline_list(scores, 3).c_str(), inline_list(weights, 3).c_str());
    p.line(buffer);
  }
  p.note("W_q, W_k, v and W are random (as freshly initialised); training would learn them.");
}

struct MhaRun {
  Tensor x, output, weights;  // [B, L, D], [B, L, D], [B, H, L, S]
};

MhaRun section_multihead(Printer& p, Generator& gen) {
  p.heading("§5.2–5.5", "multi-head attention: batch 2, seq_len 4, d_model 8, 2 heads");
  MhaRun run;
  run.x = Tensor::randn({2, 4, 8}, gen);
  nn::MultiheadAttention mha({.embed_dim = 8, .num_heads = 2, .batch_first = true}, &gen);
  mha.eval();
  nn::MultiheadAttentionForward args;
  args.need_weights = true;
  args.average_attn_weights = false;  // one map per head: [B, H, L, S]
  nn::MultiheadAttentionOutput r = mha.forward(run.x, run.x, run.x, args);
  run.output = r.output;
  run.weights = r.weights;
  p.note("x = randn(2, 4, 8); nn::MultiheadAttention({.embed_dim = 8, .num_heads = 2,");
  p.note("    .batch_first = true}).forward(x, x, x, {.average_attn_weights = false})");
  p.line("input shape: " + shape_str(run.x.shape()));
  p.line("output shape: " + shape_str(run.output.shape()));
  p.line("attention shape: " + shape_str(run.weights.shape()) +
         p.style().muted("   (batch, head, query, key)"));
  return run;
}

void section_checks(Printer& p, const MhaRun& run) {
  p.heading("§5.6", "checks: each row of weights sums to 1, no NaN");
  p.line("attention weights sum:");
  p.line(sum_last_dim(run.weights).to_string(4));
  p.line(std::string("output has nan: ") + (has_nan(run.output) ? "true" : "false"));
}

void section_heatmap(Printer& p, const MhaRun& run, const std::filesystem::path& out_dir) {
  p.heading("§6.1", "looking at the weights: attn[0, 0] (batch 0, head 0)");
  const Tensor head = run.weights.select(0, 0).select(0, 0);  // [L, S]
  p.line(head.to_string(2));

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    throw Error(ErrorKind::kIO,
                "cannot create the --out directory '" + out_dir.string() + "': " + ec.message());
  }
  const std::filesystem::path path = out_dir / "attention_b0_h0.png";
  viz::HeatmapOptions options;
  options.cell_pixels = 64;
  options.auto_range = true;  // as plt.imshow, which scales to the data
  options.title = "attn[0, 0]: batch 0, head 0 (untrained)";
  for (int64_t i = 0; i < head.size(0); ++i) options.row_labels.push_back("x" + std::to_string(i));
  options.col_labels = options.row_labels;  // self-attention: the same positions
  options.row_axis_label = "query";
  options.col_axis_label = "key";
  const viz::HeatmapImage image = viz::render_heatmap(head, options);
  viz::write_png(path, image);
  p.line("heatmap: " + p.style().good(path.string()));
  p.note("Blues as plt.imshow(cmap=\"Blues\"): white = " + fixed(image.vmin, 2) +
         ", dark blue = " + fixed(image.vmax, 2) + "; colour bar with values on the right.");
  p.note("Untrained weights are close to uniform (§6.2): patterns come from training.");
}

void section_sqrt_dk(Printer& p, Generator& gen) {
  p.heading("§7.3", "why divide by sqrt(d_k): d_k = 64");
  const int64_t d_k = 64;
  // 4096 independent query-key pairs, one per "head", instead of the
  // tutorial's 8 x 8 = 64 scores: the printed std then stays within ~2% of 8.
  const int64_t pairs = 4096;
  const Tensor q = Tensor::randn({1, pairs, 1, d_k}, gen);
  const Tensor k = Tensor::randn({1, pairs, 1, d_k}, gen);
  const double raw = sample_std(ScoreFunction::dot().scores(q, k));
  const double scaled = sample_std(ScoreFunction::scaled_dot().scores(q, k));
  p.note("q, k = randn(1, 4096, 1, 64): 4096 independent pairs, so the numbers are stable;");
  p.note("the tutorial's randn(1, 1, 8, 64) has 64 scores, whose std ranges over ~6.7 to 9.3.");
  p.line("scores std: " + fixed(raw, 2) + p.style().muted("          expected sqrt(64) = 8"));
  p.line("scaled scores std: " + fixed(scaled, 2) + p.style().muted("   expected 1"));
}

void section_causal(Printer& p, Generator& gen) {
  p.heading("§7.4", "masks: causal (no peeking at later positions)");
  p.line("causal_mask(4, 4), as print(torch.tril(torch.ones(4, 4))):");
  p.line(torch_float_matrix(causal_mask(4, 4).to(DType::kFloat32)));

  const Tensor q = Tensor::randn({1, 1, 4, 8}, gen);
  const Tensor k = Tensor::randn({1, 1, 4, 8}, gen);
  const Tensor v = Tensor::randn({1, 1, 4, 8}, gen);
  SdpaOptions options;
  options.causal = CausalMask::kTopLeft;  // torch's is_causal=True
  options.need_weights = true;
  const Tensor w = scaled_dot_product_attention(q, k, v, options).weights.select(0, 0).select(0, 0);
  double upper = 0.0;
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = i + 1; j < 4; ++j) upper = std::max(upper, std::abs(w.at({i, j})));
  }
  p.line("scaled_dot_product_attention(q, k, v, is_causal) weights, q, k, v = randn(1, 1, 4, 8):");
  p.line(w.to_string(2));
  p.line("largest weight above the diagonal: " + exact_or_fixed(upper, 2) +
         p.style().muted("   future keys get weight 0"));
}

void section_padding(Printer& p, Generator& gen) {
  p.heading("§7.4", "masks: padding, and a row with every key masked");
  const Tensor keep = keep_mask_from_lengths({2, 0}, 4);  // [B, S]
  const Tensor keep4 = key_mask_for_heads(keep);          // [B, 1, 1, S]
  p.line("keep_mask_from_lengths({2, 0}, 4)   (True = real token, takes part):");
  p.line(keep.to_string());
  p.line("key_mask_for_heads: " + shape_str(keep.shape()) + " -> " + shape_str(keep4.shape()) +
         p.style().muted("   broadcasts over heads and queries"));

  const Tensor q = Tensor::randn({2, 2, 4, 8}, gen);
  const Tensor k = Tensor::randn({2, 2, 4, 8}, gen);
  const Tensor v = Tensor::randn({2, 2, 4, 8}, gen);
  SdpaOptions options;
  options.attn_mask = keep4;
  options.need_weights = true;
  const SdpaResult r = scaled_dot_product_attention(q, k, v, options);
  p.line("SDPA weights, sequence 0, head 0 (keys 2 and 3 are padding):");
  p.line(r.weights.select(0, 0).select(0, 0).to_string(2));
  const Tensor empty_seq_out = r.output.select(0, 1);  // [H, L, Ev]
  double largest_out = 0.0;
  for (double x : empty_seq_out.to_vector()) largest_out = std::max(largest_out, std::abs(x));
  p.line("sequence 1 has no real token: weight row sums " +
         inline_list(sum_last_dim(r.weights.select(0, 1).select(0, 0)), 0) + ", largest |output| " +
         exact_or_fixed(largest_out, 2));
  p.line(std::string("output has nan: ") + (has_nan(r.output) ? "true" : "false"));
  p.note("qkv gives 0 for such rows, as torch's SDPA does; torch's nn.MultiheadAttention");
  p.note("with need_weights=True gives NaN there.");
}

// §6.2: patterns appear with training. The recall task ("Zhang San works in
// Hangzhou, Li Si in Shanghai: who works in Hangzhou?") with 2 pairs trains
// in a few seconds; `qkv train recall` is the full version.
void section_trained_recall(Printer& p, const std::filesystem::path& out_dir) {
  p.heading("§6.2", "attention after training: key-value recall, 2 pairs");
  const train::RecallTask task({.pairs = 2});
  train::RecallModel model(task, {.seed = 0});
  const int threads = num_threads();
  set_num_threads(1);  // tiny batches: one thread is fastest (tools/train.cc)
  const train::RecallTrainResult r = train::train_recall(model, task, {.steps = 600, .lr = 3e-3});
  set_num_threads(threads);
  const train::RecallBatch test = train::held_out_batch(task, 1000, 12345);
  // No time in the output: the demo prints the same text for the same seed.
  p.line("trained " + std::to_string(r.steps) + " steps; held-out accuracy " +
         fixed(100 * train::accuracy(model, test), 1) + "%");
  // The head that looks hardest at the asked pair: its key, or the value before it.
  train::QueryAttention best;
  for (const train::QueryAttention& a : train::query_attention(model, test))
    if (std::max(a.on_key, a.on_value) > std::max(best.on_key, best.on_value)) best = a;
  p.line("the query's attention, layer " + std::to_string(best.layer) + " head " +
         std::to_string(best.head) + ": " + fixed(best.on_key, 2) + " on the matching key, " +
         fixed(best.on_value, 2) + " on its value");
  train::RecallBatch one = test;
  one.batch = 1;
  one.tokens.resize(test.length);
  one.labels.resize(1);
  one.key_positions.resize(1);
  const std::vector<Tensor> weights = model.attention_weights(one);
  const std::filesystem::path path = out_dir / "recall_trained_last_layer.png";
  std::string tokens;
  viz::HeatmapOptions options;
  options.cell_pixels = 48;
  for (int64_t t = 0; t < test.length; ++t) {
    options.row_labels.push_back(task.token_name(one.tokens[t]));
    tokens += " " + options.row_labels.back();
  }
  options.col_labels = options.row_labels;
  options.title = "trained recall: layer " + std::to_string(best.layer) + ", head " +
                  std::to_string(best.head) + ";" + tokens;
  options.row_axis_label = "query";
  options.col_axis_label = "key";
  viz::write_heatmap_png(path, weights[best.layer].select(0, 0).select(0, best.head), options);
  p.line("heatmap of that head on" + tokens + ": " + p.style().good(path.string()));
  if (best.on_key >= best.on_value) {
    p.note("Its last row (the query) lights up on the asked key: under causal attention");
    p.note("the only position that has seen the key's value.");
  } else {
    p.note("Its last row (the query) lights up on the value just before the asked key:");
    p.note("a layer below found where the key stands (`qkv train recall`, 4 pairs, learns");
    p.note("a head that reads the key itself).");
  }
  p.note("`qkv train recall` trains 4 pairs and compares with a model without attention.");
}

void section_next_steps(Printer& p, const std::filesystem::path& out_dir) {
  p.heading("Next steps", "");
  p.line("README.md: build qkv, use it from C++ (find_package(qkv)) and Python (import qkv).");
  p.line("qkv --help: the other commands.");
  p.line("Open " + (out_dir / "attention_b0_h0.png").string() + " to see the §6.1 heatmap.");
}

int run_demo(const DemoOptions& options) {
  QKV_CHECK(!options.out.empty(), "--out must name a directory, got an empty string");
  if (options.threads > 0) set_num_threads(options.threads);
  Printer p{Style{stdout_wants_color()}};
  std::cout << p.style().strong("qkv demo") << ": the attention tutorial, computed by qkv (seed "
            << options.seed << ")\n";
  Generator gen(options.seed);
  const std::filesystem::path out_dir = options.out;
  section_simple_attention(p);
  section_score_functions(p, gen);
  const MhaRun run = section_multihead(p, gen);
  section_checks(p, run);
  section_heatmap(p, run, out_dir);
  section_sqrt_dk(p, gen);
  section_causal(p, gen);
  section_padding(p, gen);
  section_trained_recall(p, out_dir);
  section_next_steps(p, out_dir);
  std::cout.flush();
  return std::cout ? 0 : 1;
}

}  // namespace

Command add_demo_command(CLI::App& parent) {
  return make_command(
      parent, "demo", "Walk through the attention tutorial (§2 to §7) with qkv's own output",
      run_demo, [](CLI::App& app, DemoOptions& options) {
        add_defaulted(app, "--seed", options.seed, "Seed of the random inputs and weights");
        add_defaulted(app, "--out", options.out,
                      "Directory for the heatmap PNG (created if missing)")
            ->type_name("DIR");
        add_threads_option(app, options.threads);
        app.footer(
            "Sections: §2.4 simple attention, §2.2 score functions, §5.2-5.6 multi-head\n"
            "attention, §6.1 weights and a heatmap PNG, §7.3 why divide by sqrt(d_k), §7.4 "
            "masks.\n"
            "Colour is used when stdout is a terminal and NO_COLOR is not set.");
      });
}

}  // namespace qkv::cli
