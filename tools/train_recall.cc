// `qkv train recall`: trains a small Transformer on associative recall
// (k key-value pairs, then "which value had key X?"), next to a baseline that
// averages over positions instead of attending, and draws where each head of
// the trained model looks. The task, model and loop live in tools/tasks/.
#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli_options.h"
#include "command.h"
#include "qkv/error.h"
#include "qkv/io/safetensors.h"
#include "qkv/runtime.h"
#include "qkv/viz/heatmap.h"
#include "tasks/recall_model.h"
#include "tasks/recall_task.h"
#include "tasks/recall_training.h"
#include "terminal.h"
#include "train_run.h"
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
  RunOptions run;
  // One thread: the matrices are tiny, and on a busy machine two threads spent
  // most of their time waiting in OpenMP barriers (10x slower).
  int threads = 1;
  int64_t examples = 3;  // held-out sequences drawn as heatmaps
};

constexpr int64_t kTestExamples = 2000;

// Prints `heading` and the model's parameter count on a line of their own,
// then trains it with a progress line labelled `name`; `evaluated` sees each
// held-out evaluation.
train::RecallTrainResult train_one(train::RecallModel& model, const train::RecallTask& task,
                                   const train::RecallTrainOptions& options,
                                   const std::string& heading, const char* name, bool in_place,
                                   const std::function<void(int64_t, double)>& evaluated) {
  std::cout << "\n" << heading << model.num_parameters() << " parameters)\n";
  ProgressLine progress(name, in_place, 250);
  train::RecallTrainResult result =
      train::train_recall(model, task, options, [&](const train::RecallProgress& p) {
        progress.update(step_report(p, p.eval_accuracy),
                        p.eval_accuracy && *p.eval_accuracy >= 0.99);
        if (p.eval_accuracy && evaluated) evaluated(p.step, *p.eval_accuracy);
      });
  progress.finish();
  return result;
}

// The shortest text that reads back as the same double.
std::string exact(double value) {
  char buffer[32];
  return std::string(buffer, std::to_chars(buffer, buffer + sizeof buffer, value).ptr);
}

// A number a checkpoint of ours wrote, read back; `key` names it in errors.
template <class T>
T parse_meta(const io::Checkpoint& c, const std::string& key, const std::string& path) {
  const auto it = c.metadata.find(key);
  T value{};
  bool ok = it != c.metadata.end();
  if (ok) {
    const char* end = it->second.data() + it->second.size();
    const auto [ptr, ec] = std::from_chars(it->second.data(), end, value);
    ok = ec == std::errc() && ptr == end;
  }
  QKV_CHECK(ok, "--resume: '", path, "' has no valid metadata \"", key, "\" (",
            it == c.metadata.end() ? std::string("missing") : "\"" + it->second + "\"", ")");
  return value;
}

// name -> value copies of a model's parameters, for safetensors.
std::map<std::string, Tensor> weights(train::RecallModel& model) {
  std::map<std::string, Tensor> out;
  for (const nn::Parameter& p : model.parameters()) out[p.name] = p.value.clone();
  return out;
}

// The best held-out accuracy of the attention model so far (kept through checkpoints).
struct BestAccuracy {
  int64_t step = 0;  // 0: none yet
  double accuracy = 0;
};

constexpr const char* kDone = "done.attention.";  // the finished first phase, in a checkpoint

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

  const RunIdentity identity{"recall",
                             {{"--pairs", std::to_string(o.pairs)},
                              {"--steps", std::to_string(o.steps)},
                              {"--batch-size", std::to_string(o.batch_size)},
                              {"--lr", exact(o.lr)},
                              {"--seed", std::to_string(o.seed)},
                              {"d_model", "64"}}};
  std::optional<io::Checkpoint> resume;
  std::string phase = "attention";  // or "mean-pool": the phase a checkpoint stopped in
  BestAccuracy best;
  const std::string& rpath = o.run.resume;
  if (!rpath.empty()) {
    resume = load_resume(rpath, identity);
    const auto it = resume->metadata.find("recall.phase");
    phase = it == resume->metadata.end() ? std::string() : it->second;
    QKV_CHECK(phase == "attention" || phase == "mean-pool", "--resume: '", rpath,
              "' has no valid \"recall.phase\" metadata (\"attention\" or \"mean-pool\")");
    best.step = parse_meta<int64_t>(*resume, "best.step", rpath);
    best.accuracy = parse_meta<double>(*resume, "best.accuracy", rpath);
    std::cout << "Resuming the " << phase << " model after step " << resume->step << " from "
              << rpath << "\n";
  }
  const std::filesystem::path out = prepare_run_dir(o.run, "recall");
  InterruptToSave interrupt;
  CheckpointSaver saver(o.run, identity, out, o.steps);

  train::RecallTrainOptions train_options{
      .steps = o.steps, .batch_size = o.batch_size, .lr = o.lr, .seed = o.seed};
  train::RecallModel attention(task, {.mixer = train::Mixer::kAttention, .seed = o.seed});
  const auto save_model = [&](const std::filesystem::path& path, int64_t step, double accuracy) {
    io::save_safetensors(path, weights(attention),
                         {{"qkv.train.task", "recall"},
                          {"qkv.train.step", std::to_string(step)},
                          {"qkv.train.held_out_accuracy", exact(accuracy)}});
  };
  const auto put_best = [&](io::Checkpoint& c) {
    c.metadata["best.step"] = std::to_string(best.step);
    c.metadata["best.accuracy"] = exact(best.accuracy);
  };
  train::RecallTrainResult trained;
  if (phase == "attention") {
    train_options.control.resume = resume ? &*resume : nullptr;
    train_options.control.after_step = [&](int64_t step, const train::Snapshot& snapshot) {
      return saver.after_step(step, snapshot, [&](io::Checkpoint& c) {
        c.metadata["recall.phase"] = "attention";
        put_best(c);
      });
    };
    trained = train_one(attention, task, train_options,
                        style.strong("Transformer") + " (2 layers, d_model 64, 4 heads, FFN 128; ",
                        "attention", in_place, [&](int64_t step, double accuracy) {
                          if (best.step > 0 && accuracy <= best.accuracy) return;
                          best = {.step = step, .accuracy = accuracy};
                          save_model(out / kBestModelFile, step, accuracy);
                        });
    if (trained.stopped) return saver.report_stop(std::cout);
  } else {
    // The attention model finished before the checkpoint: take it as it was.
    io::Checkpoint done;
    for (const auto& [name, t] : resume->model)
      if (name.starts_with(kDone)) done.model[name.substr(std::string(kDone).size())] = t;
    train::restore_parameters(done, attention.parameters());
    trained.steps = parse_meta<int64_t>(*resume, std::string(kDone) + "steps", rpath);
    trained.seconds = parse_meta<double>(*resume, std::string(kDone) + "seconds", rpath);
    if (resume->metadata.count(std::string(kDone) + "step_at_target")) {
      trained.step_at_target =
          parse_meta<int64_t>(*resume, std::string(kDone) + "step_at_target", rpath);
      trained.seconds_to_target =
          parse_meta<double>(*resume, std::string(kDone) + "seconds_to_target", rpath);
    }
    std::cout << "\n"
              << style.strong("Transformer") << ": trained before the checkpoint (" << trained.steps
              << " steps)\n";
  }
  save_model(out / kLastModelFile, trained.steps,
             train::accuracy(attention, train::held_out_batch(task, 512, o.seed)));

  // The baseline gets the same budget; it never reaches the target, so it runs all steps.
  train::RecallModel pooled(task, {.mixer = train::Mixer::kMeanPool, .seed = o.seed});
  train_options.control.resume = phase == "mean-pool" ? &*resume : nullptr;
  train_options.control.after_step = [&](int64_t step, const train::Snapshot& snapshot) {
    return saver.after_step(step, snapshot, [&](io::Checkpoint& c) {
      c.metadata["recall.phase"] = "mean-pool";
      put_best(c);
      for (const nn::Parameter& p : attention.parameters())
        c.model[kDone + p.name] = p.value.clone();
      c.metadata[std::string(kDone) + "steps"] = std::to_string(trained.steps);
      c.metadata[std::string(kDone) + "seconds"] = exact(trained.seconds);
      if (trained.step_at_target) {
        c.metadata[std::string(kDone) + "step_at_target"] = std::to_string(*trained.step_at_target);
        c.metadata[std::string(kDone) + "seconds_to_target"] = exact(*trained.seconds_to_target);
      }
    });
  };
  const train::RecallTrainResult baseline =
      train_one(pooled, task, train_options,
                style.strong("Baseline") + ": mean over positions instead of attention (",
                "mean-pool", in_place, nullptr);
  if (baseline.stopped) return saver.report_stop(std::cout);

  // Reported on sequences neither training nor the early stop looked at.
  const train::RecallBatch test = train::held_out_batch(task, kTestExamples, o.seed + 0x5eed);
  const double attention_accuracy = train::accuracy(attention, test);
  const double baseline_accuracy = train::accuracy(pooled, test);
  const std::vector<train::QueryAttention> looks = train::query_attention(attention, test);

  // Heatmaps: one per example, layer and head, labelled with the tokens; the
  // tokens also go in a text file next to them.
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
  std::cout << "  Last model: " << style.good((out / kLastModelFile).string()) << "\n";
  if (best.step > 0)
    std::cout << "  Best model: " << style.good((out / kBestModelFile).string()) << " (step "
              << best.step << ", held-out accuracy " << percent(best.accuracy) << ")\n";
  return 0;
}

}  // namespace

Command add_train_recall(CLI::App& train) {
  return make_command(
      train, "recall", "Key-value recall: a Transformer learns it, mean pooling cannot", run_recall,
      [](CLI::App& app, RecallOptions& options) {
        add_defaulted(app, "--pairs,-k", options.pairs, "Key-value pairs per sequence (1..16)")
            ->check(in_range(1, 16));
        add_positive(app, "--steps", options.steps, "Step limit; stops earlier at 99% held-out");
        add_positive(app, "--batch-size", options.batch_size, "Sequences per step");
        add_positive(app, "--lr", options.lr, "Peak learning rate (AdamW, warmup then cosine)");
        add_defaulted(app, "--seed", options.seed, "Seeds the data and the initialisation");
        add_run_options(app, options.run,
                        "Directory for the heatmaps, last.safetensors, best.safetensors (the "
                        "best held-out accuracy) and checkpoint.safetensors");
        add_threads_option(app, options.threads);
        add_non_negative(app, "--examples", options.examples,
                         "Held-out sequences drawn as heatmaps");
        app.footer(
            "Sequences are v1 k1 ... vk kk ? kq; the label is the value paired with kq.\n"
            "The heatmaps are labelled with the tokens; tokens.txt in --out lists them too.\n"
            "Ctrl-C finishes the step, saves checkpoint.safetensors in --out and prints the\n"
            "command that resumes it (a second Ctrl-C stops at once).");
      });
}

}  // namespace qkv::cli
