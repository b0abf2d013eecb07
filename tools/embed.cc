// `qkv embed`: sentence embeddings (all-MiniLM-L6-v2 by default) of texts given
// as arguments, in a file or on stdin, as JSON in the shape of OpenAI's
// embeddings response or as .npy, on stdout or into a file.
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "cli_options.h"
#include "command.h"
#include "qkv/error.h"
#include "qkv/io/atomic_file.h"
#include "qkv/models/sentence_encoder.h"
#include "qkv/runtime.h"
#include "sentence_input.h"

namespace qkv::cli {

namespace {

struct EmbedOptions {
  SentenceInput input;
  std::string output;
  std::string format;  // "" = from --output's extension, else json
  std::string precision = "float32";
  bool normalize = false;
  bool no_normalize = false;
  bool stats = false;
};

// The name of the model in the JSON: its directory's name.
std::string model_name(const std::string& dir) {
  std::filesystem::path path = std::filesystem::path(dir).lexically_normal();
  if (!path.has_filename()) path = path.parent_path();
  return path.filename().string();
}

// The response of OpenAI's embeddings endpoint:
//   {"object": "list",
//    "data": [{"object": "embedding", "index": 0, "embedding": [...]}, ...],
//    "model": "...",
//    "usage": {"prompt_tokens": N, "total_tokens": N}}
// one embedding per line; %.9g gives every float32 back exactly.
// embeddings: [N, D]
std::string embeddings_json(const Tensor& embeddings, const std::string& model, int64_t tokens) {
  const int64_t n = embeddings.size(0), d = embeddings.size(1);
  std::string out = "{\"object\": \"list\",\n \"data\": [";
  const float* e = embeddings.data<float>();
  char number[32];
  for (int64_t i = 0; i < n; ++i) {
    out += (i ? ",\n  " : "\n  ");
    out += "{\"object\": \"embedding\", \"index\": " + std::to_string(i) + ", \"embedding\": [";
    for (int64_t j = 0; j < d; ++j) {
      std::snprintf(number, sizeof number, "%s%.9g", j ? ", " : "", e[i * d + j]);
      out += number;
    }
    out += "]}";
  }
  // Invalid UTF-8 in the name becomes U+FFFD rather than an error.
  const std::string name =
      nlohmann::json(model).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return out + (n ? "\n ],\n" : "],\n") + " \"model\": " + name +
         ",\n \"usage\": {\"prompt_tokens\": " + std::to_string(tokens) +
         ", \"total_tokens\": " + std::to_string(tokens) + "}}\n";
}

// NumPy's .npy format, version 1.0: the magic "\x93NUMPY", the version bytes
// 1 and 0, the header's length (uint16, little-endian), the header (a Python
// dict literal padded with spaces and a final newline so that the data starts
// at a multiple of 64 bytes), then the float32 data, row-major, little-endian.
// embeddings: [N, D]
std::string npy_bytes(const Tensor& embeddings) {
  static_assert(std::endian::native == std::endian::little, "writes the host's floats as '<f4'");
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(embeddings.size(0)) + ", " +
                       std::to_string(embeddings.size(1)) + "), }";
  const size_t preamble = 10;  // magic (6) + version (2) + header length (2)
  header.append((64 - (preamble + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  const char* data = static_cast<const char*>(embeddings.raw_data());
  out.append(data, data + embeddings.numel() * sizeof(float));
  return out;
}

// "npy" or "json": --format, else what --output ends in, else json.
std::string output_format(const EmbedOptions& o) {
  if (!o.format.empty()) return o.format;
  const std::string extension = std::filesystem::path(o.output).extension().string();
  QKV_CHECK(o.output.empty() || extension == ".json" || extension == ".npy", "--output '", o.output,
            "' must end in .json or .npy, or give --format npy|json");
  return extension == ".npy" ? "npy" : "json";
}

void run_embed(const EmbedOptions& o) {
  const std::string format = output_format(o);
  QKV_CHECK(format != "npy" || !o.output.empty() || !isatty(STDOUT_FILENO),
            "--format npy writes binary: give --output FILE.npy or redirect stdout");
  const std::vector<std::string> texts = input_texts(o.input, "qkv embed");
  models::SentenceEncoder encoder = load_sentence_encoder(o.input, o.precision);
  if (o.normalize) encoder.set_normalize(true);
  if (o.no_normalize) encoder.set_normalize(false);

  const auto start = std::chrono::steady_clock::now();
  const Tensor embeddings = encoder.encode(texts, o.input.batch_size);  // [N, D]
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::string bytes;
  if (format == "npy") {
    bytes = npy_bytes(embeddings);
  } else {
    int64_t tokens = 0;  // as fed to the model: [CLS] and [SEP] included, truncated
    for (const std::string& text : texts)
      tokens += static_cast<int64_t>(encoder.token_ids(text).size());
    bytes = embeddings_json(embeddings, model_name(o.input.model), tokens);
  }
  if (o.output.empty()) {
    std::cout << bytes << std::flush;
  } else {
    io::write_file_atomically(o.output, std::as_bytes(std::span(bytes.data(), bytes.size())));
    std::cerr << "wrote " << texts.size() << " embeddings of " << encoder.dimension() << " to "
              << o.output << "\n";
  }
  if (o.stats)
    std::fprintf(stderr,
                 "%zu texts in %.3f s (%.1f texts/s, %s, %s pooling%s, batch size %lld, "
                 "%d threads)\n",
                 texts.size(), seconds, seconds > 0 ? texts.size() / seconds : 0.0,
                 precision_name(encoder.precision()), models::pooling_name(encoder.pooling()),
                 encoder.normalize() ? ", normalized" : "",
                 static_cast<long long>(o.input.batch_size), num_threads());
}

}  // namespace

Command add_embed_command(CLI::App& parent) {
  return make_command(
      parent, "embed", "Sentence embeddings (all-MiniLM-L6-v2) of texts, as JSON or .npy",
      run_embed, [](CLI::App& app, EmbedOptions& options) {
        add_sentence_input_options(app, options.input,
                                   "Texts to embed (default: -f, else one a line from stdin)");
        app.add_option("-o,--output", options.output,
                       "Write to FILE (atomically) instead of stdout")
            ->type_name("FILE");
        app.add_option("--format", options.format,
                       "json (OpenAI's embeddings response) or npy (float32 [N, D]); default: "
                       "--output's extension, else json")
            ->check(CLI::IsMember({"json", "npy"}))
            ->type_name("F");
        CLI::Option* normalize = app.add_flag("--normalize", options.normalize,
                                              "L2-normalise every embedding (default: as the "
                                              "model's modules.json says)");
        app.add_flag("--no-normalize", options.no_normalize, "Keep the pooled vectors as they are")
            ->excludes(normalize);
        add_precision_option(app, options.precision);
        app.add_flag("--stats", options.stats, "Print texts per second to stderr");
        app.footer(
            "all-MiniLM-L6-v2 mean-pools the tokens and L2-normalises (its modules.json), so\n"
            "the dot product of two rows is their cosine similarity. Texts longer than the\n"
            "model's max_seq_length (256 tokens) are truncated; usage.prompt_tokens counts\n"
            "the tokens fed, [CLS] and [SEP] included.");
      });
}

}  // namespace qkv::cli
