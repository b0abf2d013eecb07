// What `qkv embed` and `qkv similarity` share: the texts to encode (from the
// command line, a file or stdin) and the sentence encoder of a model directory.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "cli_options.h"
#include "model_paths.h"
#include "qkv/error.h"
#include "qkv/io/hf_cache.h"
#include "qkv/models/sentence_encoder.h"
#include "qkv/runtime.h"

namespace qkv::cli {

// all-MiniLM-L6-v2 where scripts/fetch_model.sh puts it (found from any
// directory: model_paths.h).
inline constexpr const char* kDefaultEmbeddingModel = "models/all-MiniLM-L6-v2";

// The options of both commands.
struct SentenceInput {
  std::vector<std::string> texts;  // positional
  std::string file;                // -f: one text a line ("-": stdin)
  std::string model = kDefaultEmbeddingModel;
  std::string pooling;  // "" = as the model directory says
  int64_t batch_size = 32;
  int threads = 0;
};

// The non-blank lines of `in`, one text each (a trailing "\r" of CRLF files
// dropped); `blank` counts the lines skipped for being empty or whitespace.
inline std::vector<std::string> read_texts(std::istream& in, int64_t& blank) {
  std::vector<std::string> lines;
  blank = 0;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t\v\f\r") == std::string::npos)
      ++blank;
    else
      lines.push_back(line);
  }
  return lines;
}

// The texts: the arguments when any were given, else the lines of -f FILE,
// else those of stdin. Blank lines are skipped and counted on stderr (the
// arguments are kept as given: '' is an empty text). `command` names the
// command in messages.
inline std::vector<std::string> input_texts(const SentenceInput& o, const std::string& command) {
  QKV_CHECK(o.texts.empty() || o.file.empty(), "give the texts as arguments or with -f '", o.file,
            "', not both");
  if (!o.texts.empty()) return o.texts;
  const bool from_stdin = o.file.empty() || o.file == "-";
  const std::string source = from_stdin ? std::string("stdin") : "-f '" + o.file + "'";
  int64_t blank = 0;
  std::vector<std::string> texts;
  if (from_stdin) {
    texts = read_texts(std::cin, blank);
  } else {
    std::ifstream in(o.file, std::ios::binary);
    QKV_CHECK(!std::filesystem::is_directory(o.file) && in, "-f '", o.file,
              "': cannot read it (missing, a directory or not readable)");
    texts = read_texts(in, blank);
  }
  if (blank > 0)
    std::cerr << command << ": skipped " << blank << " blank line" << (blank == 1 ? "" : "s")
              << " of " << source << "; " << texts.size() << " texts remain\n";
  QKV_CHECK(!texts.empty(), "no texts in ", source, ": give one per line, or as arguments");
  return texts;
}

// `path` with a leading $HOME written "~" (messages stay short and read the
// same for every user).
inline std::string home_as_tilde(const std::string& path) {
  const char* home = std::getenv("HOME");
  const std::string prefix = home == nullptr ? std::string() : std::string(home) + "/";
  if (prefix.size() > 1 && path.compare(0, prefix.size(), prefix) == 0)
    return "~/" + path.substr(prefix.size());
  return path;
}

// The encoder of `model`: a directory, or a Hugging Face id in the local
// cache (as qkv.SentenceEncoder finds it), with a hint at the fetch script
// when it is neither.
inline models::SentenceEncoder load_sentence_encoder(const std::string& model,
                                                     const std::string& precision = "float32") {
  std::string found = find_model(model);
  if (!std::filesystem::is_directory(found))
    if (const auto cached = io::find_cached_model(model)) found = cached->string();
  QKV_CHECK(std::filesystem::is_directory(found), "model '", model,
            "' is not a directory, nor a model id in the Hugging Face cache ",
            home_as_tilde(io::hub_cache_dir().string()),
            "; run scripts/fetch_model.sh (in the qkv checkout) ",
            "to fetch all-MiniLM-L6-v2 into ", kDefaultEmbeddingModel,
            ", set QKV_MODELS to the folder that holds it, or pass --model DIR or an id that ",
            "huggingface-cli downloaded (e.g. sentence-transformers/all-MiniLM-L6-v2)");
  return models::SentenceEncoder(found, parse_precision(precision));
}

// --threads applied, the encoder loaded, --pooling applied.
inline models::SentenceEncoder load_sentence_encoder(const SentenceInput& o,
                                                     const std::string& precision = "float32") {
  if (o.threads > 0) set_num_threads(o.threads);
  models::SentenceEncoder encoder = load_sentence_encoder(o.model, precision);
  if (o.pooling == "mean") encoder.set_pooling(models::Pooling::kMean);
  if (o.pooling == "cls") encoder.set_pooling(models::Pooling::kCls);
  if (o.pooling == "max") encoder.set_pooling(models::Pooling::kMax);
  return encoder;
}

// The texts (positional; `texts_help` says what they are for), -f FILE,
// --model DIR, --pooling, --batch-size and --threads.
inline void add_sentence_input_options(CLI::App& app, SentenceInput& o,
                                       const std::string& texts_help) {
  app.add_option("texts", o.texts, texts_help)->type_name("TEXT");
  app.add_option("-f,--file", o.file,
                 "Read the texts from FILE, one a line ('-': stdin); blank lines are skipped")
      ->type_name("FILE");
  app.add_option(
         "--model", o.model,
         "Model directory (sentence-transformers layout; scripts/fetch_model.sh), or a Hugging "
         "Face id in the local cache (e.g. sentence-transformers/all-MiniLM-L6-v2)")
      ->capture_default_str()
      ->type_name("DIR|ID");
  app.add_option("--pooling", o.pooling,
                 "Pool the token vectors by mean, cls (the first token) or max "
                 "(default: as the model's pooling config says)")
      ->check(CLI::IsMember({"mean", "cls", "max"}))
      ->type_name("P");
  add_positive(app, "--batch-size", o.batch_size, "Texts per forward pass");
  add_threads_option(app, o.threads);
}

}  // namespace qkv::cli
