// `qkv generate`: prints text token by token from a decoder-only model file
// (written by models::save_decoder_model), decoding with a KV cache.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli_options.h"
#include "command.h"
#include "gguf_generation.h"
#include "qkv/error.h"
#include "qkv/io/char_vocabulary.h"
#include "qkv/models/decoder_model_file.h"
#include "qkv/nn/decoder_model.h"
#include "qkv/nn/decoder_session.h"
#include "qkv/runtime.h"

namespace qkv::cli {

namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt = "\n";
  int64_t max_new_tokens = 200;
  SamplingFlags sampling;
  std::string precision = "float32";
  bool stats = false;
  bool exact = false;
  int threads = 0;
  std::string kv_cache = "f32";
};

void run_generate(const GenerateOptions& o) {
  if (o.threads > 0) set_num_threads(o.threads);
  // By name too: a truncated or damaged x.gguf gets the GGUF reader's error, not the
  // safetensors reader's.
  if (is_gguf_file(o.model) || std::filesystem::path(o.model).extension() == ".gguf")
    return run_generate_gguf({.model = o.model,
                              .prompt = o.prompt,
                              .max_new_tokens = o.max_new_tokens,
                              .sampling = o.sampling.options(),
                              .seed = o.sampling.seed,
                              .precision = o.precision,
                              .exact = o.exact,
                              .stats = o.stats,
                              .kv_cache = o.kv_cache});
  QKV_CHECK(!o.exact, "--exact is for GGUF files (their weights dequantized to float32)");
  io::SafetensorsMetadata metadata;
  nn::DecoderModel model = models::load_decoder_model(o.model, &metadata);
  model.set_precision(parse_precision(o.precision));
  model.set_kv_cache_storage(nn::parse_kv_cache_storage(o.kv_cache, "--kv-cache"));
  const auto entry = metadata.find(io::CharVocabulary::kMetadataKey);
  const io::CharVocabulary vocab = entry != metadata.end()
                                       ? io::CharVocabulary::from_json(entry->second)
                                       : io::CharVocabulary::bytes();
  QKV_CHECK(vocab.size() <= model.config().vocab_size, "the vocabulary has ", vocab.size(),
            " tokens but the model only ", model.config().vocab_size);
  const std::vector<int64_t> prompt = vocab.encode(o.prompt);
  QKV_CHECK(!prompt.empty(), "--prompt is empty; give at least one character");
  for (int64_t id : prompt)
    QKV_CHECK(id < model.config().vocab_size, "the prompt's token ", id,
              " is outside the model's vocabulary of ", model.config().vocab_size);

  nn::GenerationOptions g;
  g.max_new_tokens = o.max_new_tokens;
  g.sampling = o.sampling.options();
  g.seed = o.sampling.seed;
  check_sampling_options(g.sampling);

  std::cout << o.prompt << std::flush;
  bool ends_with_newline = !o.prompt.empty() && o.prompt.back() == '\n';
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int64_t> ids = nn::generate(model, prompt, g, [&](int64_t id) {
    // Ids the vocabulary does not name (a model larger than it) print nothing.
    const std::string text = id < vocab.size() ? vocab.decode(id) : std::string();
    std::cout << text << std::flush;
    if (!text.empty()) ends_with_newline = text.back() == '\n';
    return true;
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!ends_with_newline) std::cout << "\n";
  std::cout << std::flush;
  if (o.stats)
    std::fprintf(stderr, "%zu tokens in %.3f s (%.1f tokens/s, prompt of %zu, %d threads)\n",
                 ids.size(), seconds, seconds > 0 ? ids.size() / seconds : 0.0, prompt.size(),
                 num_threads());
}

}  // namespace

Command add_generate_command(CLI::App& parent) {
  return make_command(
      parent, "generate",
      "Print text token by token from a decoder-only model file (KV-cached decoding)", run_generate,
      [](CLI::App& app, GenerateOptions& options) {
        add_model_file_argument(
            app, options.model,
            "Model file written by qkv train lm (models::save_decoder_model), or a "
            "GGUF model: llama, qwen2, qwen3 or gemma3 (e.g. "
            "models/SmolLM2-135M-Instruct.Q4_1.gguf)");
        app.add_option("-p,--prompt", options.prompt,
                       "Text to continue, printed first (default: a newline)");
        add_non_negative(app, "-n,--max-new-tokens", options.max_new_tokens,
                         "How many tokens to generate");
        add_sampling_options(app, options.sampling);
        add_precision_option(app, options.precision);
        app.add_flag("--stats", options.stats,
                     "Print tokens per second to stderr at the end (GGUF: prompt and generation "
                     "separately)");
        app.add_flag("--exact", options.exact,
                     "GGUF: dequantize every weight to float32 (slower, more memory) instead of "
                     "multiplying with the quantized blocks");
        add_threads_option(app, options.threads);
        add_kv_cache_option(app, options.kv_cache);
        app.footer(
            "Tokens are bytes unless the file's metadata holds a vocabulary (qkv.vocabulary);\n"
            "GGUF files bring their BPE tokenizer, and generation stops at <|im_end|>/eos.\n"
            "The prompt is fed in one pass; each new token then costs one cached decoding "
            "step.");
      });
}

}  // namespace qkv::cli
