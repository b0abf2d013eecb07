// `qkv generate MODEL.gguf` and the streaming loop it shares with `qkv chat`.
#include "gguf_generation.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "qkv/error.h"
#include "qkv/precision.h"
#include "qkv/runtime.h"

namespace qkv::cli {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double rate(int64_t n, double seconds) { return seconds > 0 ? n / seconds : 0.0; }

}  // namespace

bool is_gguf_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

std::vector<int64_t> stream_reply(nn::DecoderSession& session, const text::BpeTokenizer& tokenizer,
                                  std::span<const int64_t> ids,
                                  const nn::GenerationOptions& options, std::ostream& out,
                                  GenerationTimes* times, const std::function<bool()>& keep_going) {
  const auto start = std::chrono::steady_clock::now();
  session.prefill(ids);
  const double prompt_seconds = seconds_since(start);
  text::BpeStreamDecoder decoder(tokenizer, /*skip_special=*/true);
  const auto decode_start = std::chrono::steady_clock::now();
  std::vector<int64_t> new_ids = session.decode(options, [&](int64_t id) {
    out << decoder.push(static_cast<int32_t>(id)) << std::flush;
    return !keep_going || keep_going();
  });
  out << decoder.finish() << std::flush;
  if (times)
    *times = {.prompt_tokens = static_cast<int64_t>(ids.size()),
              .prompt_seconds = prompt_seconds,
              .new_tokens = static_cast<int64_t>(new_ids.size()),
              .decode_seconds = seconds_since(decode_start)};
  return new_ids;
}

std::string format_times(const GenerationTimes& t) {
  char line[256];
  std::snprintf(line, sizeof line,
                "prompt: %lld tokens in %.3f s (%.1f tokens/s); generation: %lld tokens in "
                "%.3f s (%.1f tokens/s); %d threads",
                static_cast<long long>(t.prompt_tokens), t.prompt_seconds,
                rate(t.prompt_tokens, t.prompt_seconds), static_cast<long long>(t.new_tokens),
                t.decode_seconds, rate(t.new_tokens, t.decode_seconds), num_threads());
  return line;
}

void run_generate_gguf(const GgufGenerateOptions& o) {
  const Precision precision = parse_precision(o.precision);
  QKV_CHECK(o.exact || precision == Precision::kFloat32, "--precision ", o.precision,
            " needs --exact: the fast mode multiplies with the file's quantized weights");
  models::GgufModel m = models::load_gguf_model(
      o.model,
      {.exact = o.exact, .kv_cache = nn::parse_kv_cache_storage(o.kv_cache, "--kv-cache")});
  m.model.set_precision(precision);
  const std::vector<int32_t> ids32 = m.tokenizer.encode(o.prompt);
  QKV_CHECK(!ids32.empty(), "--prompt is empty; give at least one token of text");
  const std::vector<int64_t> ids(ids32.begin(), ids32.end());

  nn::GenerationOptions g;
  g.max_new_tokens = o.max_new_tokens;
  g.sampling = o.sampling;
  g.seed = o.seed;
  if (const auto end = m.end_of_turn()) g.stop_token = *end;
  check_sampling_options(g.sampling);
  const int64_t needed = static_cast<int64_t>(ids.size()) + std::max<int64_t>(g.max_new_tokens, 1);
  nn::DecoderSession session(m.model, 1, std::min(needed, m.model.config().max_seq_len));

  std::cout << o.prompt << std::flush;
  GenerationTimes times;
  stream_reply(session, m.tokenizer, ids, g, std::cout, &times);
  std::cout << "\n" << std::flush;
  if (o.stats)
    std::fprintf(stderr, "%s; KV cache %.2f MiB\n", format_times(times).c_str(),
                 static_cast<double>(session.cache().storage_bytes()) / (1 << 20));
}

}  // namespace qkv::cli
