// What `qkv embed` and `qkv similarity` share: the texts to encode (from the
// command line or stdin) and the sentence encoder of a model directory.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/models/sentence_encoder.h"

namespace qkv::cli {

// all-MiniLM-L6-v2 where scripts/fetch_model.sh puts it, relative to the working directory.
inline constexpr const char* kDefaultEmbeddingModel = "models/all-MiniLM-L6-v2";

// `texts` when any were given, else the lines of stdin (one text per line; a
// final newline ends the last line rather than starting an empty text).
inline std::vector<std::string> texts_or_stdin(const std::vector<std::string>& texts) {
  if (!texts.empty()) return texts;
  std::vector<std::string> lines;
  for (std::string line; std::getline(std::cin, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF files
    lines.push_back(line);
  }
  return lines;
}

// The encoder of `model_dir`, with a hint at the fetch script when the
// directory is missing.
inline models::SentenceEncoder load_sentence_encoder(const std::string& model_dir,
                                                     const std::string& precision = "float32") {
  QKV_CHECK(std::filesystem::is_directory(model_dir), "model directory '", model_dir,
            "' not found; run scripts/fetch_model.sh (from the repository root) to fetch ",
            "all-MiniLM-L6-v2 into ", kDefaultEmbeddingModel, ", or pass --model DIR");
  return models::SentenceEncoder(model_dir, parse_precision(precision));
}

// The texts (positional; `texts_help` says what they are for) and --model DIR.
inline void add_sentence_input_options(CLI::App& app, std::vector<std::string>& texts,
                                       const std::string& texts_help, std::string& model) {
  app.add_option("texts", texts, texts_help)->type_name("TEXT");
  app.add_option("--model", model,
                 "Model directory (sentence-transformers layout; scripts/fetch_model.sh)")
      ->capture_default_str()
      ->type_name("DIR");
}

}  // namespace qkv::cli
