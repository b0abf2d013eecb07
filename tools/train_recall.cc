// `qkv train recall`: trains a small Transformer on associative recall
// (k key-value pairs, then "which value had key X?"), next to a baseline that
// averages over positions instead of attending, and draws where each head of
// the trained model looks. The task, model and loop live in tools/tasks/.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli_options.h"
#include "command.h"
#include "qkv/error.h"
#include "qkv/runtime.h"
#include "qkv/viz/heatmap.h"
#include "tasks/recall_model.h"
#include "tasks/recall_task.h"
#include "tasks/recall_training.h"
#include "terminal.h"
#include "train_tasks.h"
#include "training_progress.h"

namespace qkv::cli {

namespace {

struct RecallOptions {
  int64_t pairs = 4;
  int64_t steps = 3000;
  int64_t batch_size = 64;
  double lr = 2e-3;
  uint64_t seed = 0;
  std::string out = "qkv-train-recall";
  // One thread: the matrices are tiny, and on a busy machine two threads spent
  // most of their time waiting in OpenMP barriers (10x slower).
  int threads = 1;
  int64_t examples = 3;  // held-out sequences drawn as heatmaps
};

constexpr int64_t kTestExamples = 2000;

// Prints `heading` and the model's parameter count on a line of their own,
// then trains it with a progress line labelled `name`.
train::RecallTrainResult train_one(train::RecallModel& model, const train::RecallTask& task,
                                   const train::RecallTrainOptions& options,
                                   const std::string& heading, const char* name, bool in_place) {
  std::cout << "\n" << heading << model.num_parameters() << " parameters)\n";
  ProgressLine progress(name, in_place, 250);
  train::RecallTrainResult result =
      train::train_recall(model, task, options, [&](const train::RecallProgress& p) {
        progress.update(step_report(p, p.eval_accuracy),
                        p.eval_accuracy && *p.eval_accuracy >= 0.99);
      });
  progress.finish();
  return result;
}

int run_recall(const RecallOptions& o) {
  if (o.threads > 0) set_num_threads(o.threads);
  const Style style(stdout_wants_color());
  const bool in_place = ::isatty(STDOUT_FILENO) != 0;
  const train::RecallTask task({.pairs = o.pairs});
  const int64_t num_values = task.options().num_values;
  std::cout << style.heading("Associative recall") << ": " << o.pairs << " key-value pairs from "
            << task.options().num_keys << " keys and " << num_values << " values, then "
            << "\"? key\"; predict the key's value.\n"
            << style.muted("sequence length " + std::to_string(task.sequence_length()) +
                           ", batch " + std::to_string(o.batch_size) + ", " +
                           std::to_string(num_threads()) + " threads, chance " +
                           percent(1.0 / num_values) + ", bag-of-tokens ceiling " +
                           percent(1.0 / o.pairs))
            << "\n";

  const train::RecallTrainOptions train_options{
      .steps = o.steps, .batch_size = o.batch_size, .lr = o.lr, .seed = o.seed};

  train::RecallModel attention(task, {.mixer = train::Mixer::kAttention, .seed = o.seed});
  const train::RecallTrainResult trained =
      train_one(attention, task, train_options,
                style.strong("Transformer") + " (2 layers, d_model 64, 4 heads, FFN 128; ",
                "attention", in_place);

  // The baseline gets the same budget; it never reaches the target, so it runs all steps.
  train::RecallModel pooled(task, {.mixer = train::Mixer::kMeanPool, .seed = o.seed});
  const train::RecallTrainResult baseline =
      train_one(pooled, task, train_options,
                style.strong("Baseline") + ": mean over positions instead of attention (",
                "mean-pool", in_place);

  // Reported on sequences neither training nor the early stop looked at.
  const train::RecallBatch test = train::held_out_batch(task, kTestExamples, o.seed + 0x5eed);
  const double attention_accuracy = train::accuracy(attention, test);
  const double baseline_accuracy = train::accuracy(pooled, test);
  const std::vector<train::QueryAttention> looks = train::query_attention(attention, test);

  // Heatmaps: one per example, layer and head, labelled with the tokens; the
  // tokens also go in a text file next to them.
  const std::filesystem::path out = o.out;
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  QKV_CHECK(!ec && std::filesystem::is_directory(out), "--out: cannot create directory '",
            out.string(), "': ", ec ? ec.message() : "exists and is not a directory");
  const int64_t examples = std::min<int64_t>(o.examples, test.batch);
  train::RecallBatch shown;
  shown.batch = examples;
  shown.length = test.length;
  shown.tokens.assign(test.tokens.begin(), test.tokens.begin() + examples * test.length);
  shown.labels.assign(test.labels.begin(), test.labels.begin() + examples);
  shown.key_positions.assign(test.key_positions.begin(), test.key_positions.begin() + examples);
  const std::vector<Tensor> weights =
      examples > 0 ? attention.attention_weights(shown) : std::vector<Tensor>{};
  const std::filesystem::path labels_path = out / "tokens.txt";
  std::ofstream labels(labels_path);
  QKV_CHECK(labels.good(), "--out: cannot write '", labels_path.string(), "'");
  labels << "# rows = query positions, columns = key positions, in this order\n";
  int64_t written = 0;
  for (int64_t e = 0; e < examples; ++e) {
    labels << "example" << e << ":";
    for (int64_t t = 0; t < test.length; ++t)
      labels << " " << task.token_name(shown.tokens[e * test.length + t]);
    labels << "  (answer V" << shown.labels[e] << ")\n";
    for (size_t l = 0; l < weights.size(); ++l) {
      for (int64_t h = 0; h < weights[l].size(1); ++h) {
        const std::string name = "example" + std::to_string(e) + "_layer" + std::to_string(l) +
                                 "_head" + std::to_string(h) + ".png";
        viz::HeatmapOptions heatmap;
        heatmap.cell_pixels = 20;
        for (int64_t t = 0; t < test.length; ++t)
          heatmap.row_labels.push_back(task.token_name(shown.tokens[e * test.length + t]));
        heatmap.col_labels = heatmap.row_labels;
        heatmap.title = "example " + std::to_string(e) + ", layer " + std::to_string(l) +
                        ", head " + std::to_string(h) + " (answer V" +
                        std::to_string(shown.labels[e]) + ")";
        heatmap.row_axis_label = "query";
        heatmap.col_axis_label = "key";
        viz::write_heatmap_png(out / name, weights[l].select(0, e).select(0, h), heatmap);
        ++written;
      }
    }
  }
  labels.close();
  QKV_CHECK(labels.good(), "--out: cannot write '", labels_path.string(), "'");

  std::cout << "\n"
            << style.heading("Summary") << " (" << kTestExamples << " held-out sequences)\n";
  std::cout << "  attention  accuracy " << percent(attention_accuracy) << "  after "
            << trained.steps << " steps, " << seconds(trained.seconds) << "\n";
  std::cout << "  mean-pool  accuracy " << percent(baseline_accuracy) << "  after "
            << baseline.steps << " steps "
            << style.muted("(chance " + percent(1.0 / num_values) + ", bag-of-tokens ceiling " +
                           percent(1.0 / o.pairs) + ")")
            << "\n";
  if (trained.seconds_to_target)
    std::cout << "  time to 99% held-out accuracy: " << seconds(*trained.seconds_to_target)
              << " (step " << *trained.step_at_target << ")\n";
  else
    std::cout << "  99% held-out accuracy not reached in " << trained.steps
              << " steps (try more --steps)\n";
  std::cout << "\n  Where the last position (the asked key) looks, averaged:\n"
            << "  layer  head  on matching key  on its value\n";
  for (const train::QueryAttention& a : looks) {
    char row[96];
    std::snprintf(row, sizeof row, "  %5lld  %4lld  %15.3f  %12.3f",
                  static_cast<long long>(a.layer), static_cast<long long>(a.head), a.on_key,
                  a.on_value);
    std::cout << row << "\n";
  }
  std::cout << "\n  " << written << " heatmaps (example<i>_layer<l>_head<h>.png) and their tokens: "
            << style.good((out / "").string()) << "\n";
  return 0;
}

}  // namespace

Command add_train_recall(CLI::App& train) {
  return make_command(
      train, "recall", "Key-value recall: a Transformer learns it, mean pooling cannot", run_recall,
      [](CLI::App& app, RecallOptions& options) {
        add_defaulted(app, "--pairs,-k", options.pairs, "Key-value pairs per sequence (1..16)")
            ->check(CLI::Range(1, 16));
        add_positive(app, "--steps", options.steps, "Step limit; stops earlier at 99% held-out");
        add_positive(app, "--batch-size", options.batch_size, "Sequences per step");
        add_positive(app, "--lr", options.lr, "Peak learning rate (AdamW, warmup then cosine)");
        add_defaulted(app, "--seed", options.seed, "Seeds the data and the initialisation");
        add_defaulted(app, "--out", options.out, "Directory for the attention heatmaps")
            ->type_name("DIR");
        add_threads_option(app, options.threads);
        add_non_negative(app, "--examples", options.examples,
                         "Held-out sequences drawn as heatmaps");
        app.footer(
            "Sequences are v1 k1 ... vk kk ? kq; the label is the value paired with kq.\n"
            "The heatmaps are labelled with the tokens; tokens.txt in --out lists them too.");
      });
}

}  // namespace qkv::cli
