// `qkv embed`: sentence embeddings (all-MiniLM-L6-v2 by default) of texts given
// as arguments or on stdin, as JSON on stdout or into a .json / .npy file.
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
  std::vector<std::string> texts;
  std::string model = kDefaultEmbeddingModel;
  std::string output;
  std::string precision = "float32";
  int64_t batch_size = 32;
  bool stats = false;
};

// A JSON string literal; invalid UTF-8 becomes U+FFFD rather than an error.
std::string json_string(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// {"model": ..., "precision": ..., "dimension": D, "pooling": ..., "normalized": ...,
//  "texts": [...],
//  "embeddings": [[...], ...]}, one embedding per line. %.9g gives every
// float32 back exactly.
// embeddings: [N, D]
std::string embeddings_json(const std::vector<std::string>& texts, const Tensor& embeddings,
                            const models::SentenceEncoder& encoder, const std::string& model) {
  const int64_t n = embeddings.size(0), d = embeddings.size(1);
  std::string out =
      "{\"model\": " + json_string(model) + ", \"precision\": \"" +
      precision_name(encoder.precision()) + "\", \"dimension\": " + std::to_string(d) +
      ", \"pooling\": \"" + models::pooling_name(encoder.pooling()) +
      "\", \"normalized\": " + (encoder.normalize() ? "true" : "false") + ",\n \"texts\": [";
  for (int64_t i = 0; i < n; ++i) out += (i ? ", " : "") + json_string(texts[i]);
  out += "],\n \"embeddings\": [";
  const float* e = embeddings.data<float>();
  char number[32];
  for (int64_t i = 0; i < n; ++i) {
    out += i ? ",\n  [" : "\n  [";
    for (int64_t j = 0; j < d; ++j) {
      std::snprintf(number, sizeof number, "%s%.9g", j ? ", " : "", e[i * d + j]);
      out += number;
    }
    out += "]";
  }
  return out + (n ? "\n ]}\n" : "]}\n");
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

int run_embed(const EmbedOptions& o) {
  const std::filesystem::path output = o.output;
  const std::string extension = output.extension().string();
  QKV_CHECK(o.output.empty() || extension == ".json" || extension == ".npy", "--output '", o.output,
            "' must end in .json or .npy");
  const std::vector<std::string> texts = texts_or_stdin(o.texts);
  const models::SentenceEncoder encoder = load_sentence_encoder(o.model, o.precision);

  const auto start = std::chrono::steady_clock::now();
  const Tensor embeddings = encoder.encode(texts, o.batch_size);  // [N, D]
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const std::string bytes = extension == ".npy"
                                ? npy_bytes(embeddings)
                                : embeddings_json(texts, embeddings, encoder, o.model);
  if (o.output.empty()) {
    std::cout << bytes << std::flush;
  } else {
    io::write_file_atomically(output, std::as_bytes(std::span(bytes.data(), bytes.size())));
    std::cerr << "wrote " << texts.size() << " embeddings of " << encoder.dimension() << " to "
              << o.output << "\n";
  }
  if (o.stats)
    std::fprintf(stderr, "%zu texts in %.3f s (%.1f texts/s, %s, batch size %lld, %d threads)\n",
                 texts.size(), seconds, seconds > 0 ? texts.size() / seconds : 0.0,
                 precision_name(encoder.precision()), static_cast<long long>(o.batch_size),
                 num_threads());
  return 0;
}

}  // namespace

Command add_embed_command(CLI::App& parent) {
  return make_command(
      parent, "embed", "Sentence embeddings (all-MiniLM-L6-v2) of texts, as JSON or .npy",
      run_embed, [](CLI::App& app, EmbedOptions& options) {
        add_sentence_input_options(
            app, options.texts, "Texts to embed (default: one per line from stdin)", options.model);
        app.add_option("-o,--output", options.output,
                       "Write to FILE.json or FILE.npy (float32 [N, D]) instead of JSON on stdout")
            ->type_name("FILE");
        add_positive(app, "--batch-size", options.batch_size, "Texts per forward pass");
        add_precision_option(app, options.precision);
        app.add_flag("--stats", options.stats, "Print texts per second to stderr");
        app.footer(
            "Embeddings are mean-pooled over the tokens and L2-normalised (as the model's\n"
            "modules.json says), so the dot product of two rows is their cosine similarity.\n"
            "Texts longer than the model's max_seq_length (256 tokens) are truncated.");
      });
}

}  // namespace qkv::cli
