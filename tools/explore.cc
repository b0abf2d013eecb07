// `qkv explore`: the attention of every layer and head of a model on a text,
// written as one self-contained HTML page (qkv/viz/explore.h).
#include "qkv/viz/explore.h"

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <string>

#include "cli_options.h"
#include "command.h"
#include "qkv/io/atomic_file.h"
#include "qkv/runtime.h"

namespace qkv::cli {

namespace {

struct ExploreCommandOptions {
  std::string model;
  std::string text;
  std::string text_b;
  std::string output = "attention.html";
  int64_t max_weights = viz::ExploreOptions{}.max_weights;
  int64_t pad_to = 0;
  int threads = 0;
};

void run_explore(const ExploreCommandOptions& o) {
  if (o.threads > 0) set_num_threads(o.threads);
  io::AtomicFileWriter out(o.output);  // an unwritable -o fails before the model loads
  viz::AttentionExplorer explorer(o.model);
  const viz::AttentionMaps maps = explorer.explore(
      o.text, {.text_b = o.text_b, .max_weights = o.max_weights, .pad_to = o.pad_to});
  out.write(viz::explore_html(maps));
  out.commit();
  std::cout << "wrote " << o.output << ": " << maps.length() << " tokens x " << maps.layers()
            << " layers x " << maps.heads() << " heads of " << maps.model << "\n";
}

}  // namespace

Command add_explore_command(CLI::App& parent) {
  return make_command(
      parent, "explore",
      "Write a web page of the attention of every layer and head of a model on a text", run_explore,
      [](CLI::App& app, ExploreCommandOptions& options) {
        app.add_option("model", options.model,
                       "A BERT / sentence-transformers directory (models/all-MiniLM-L6-v2) or a "
                       "GGUF model (llama, qwen2, qwen3 or gemma3)")
            ->required()
            ->check(CLI::ExistingPath)
            ->type_name("PATH");
        app.add_option("--text", options.text, "The text whose attention is drawn")->required();
        app.add_option("--text-b", options.text_b,
                       "A second text: BERT reads the pair ([CLS] text [SEP] text-b [SEP]), a "
                       "decoder reads it after the first");
        app.add_option("-o,--output", options.output, "The HTML file to write")
            ->capture_default_str();
        add_positive(app, "--max-weights", options.max_weights,
                     "Refuse inputs whose tokens² x layers x heads exceed this (page size)");
        add_non_negative(app, "--pad-to", options.pad_to,
                         "Encoders: pad the tokens with [PAD] to this length, to see padding "
                         "masked (0: no padding)");
        add_threads_option(app, options.threads);
        app.footer(
            "The page opens from file:// with no network: a head view (lines from each token to\n"
            "the tokens it reads, one colour per head), a model view (every layer x head) and a\n"
            "tutorial view (one query's scores, scaled scores, softmax weights, weighted sum).\n"
            "The weights come from qkv's own attention kernel; GGUF models load as float32.");
      });
}

}  // namespace qkv::cli
