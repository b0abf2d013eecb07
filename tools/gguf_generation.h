// Text generation with a GGUF model (models::load_gguf_model), shared by
// `qkv generate MODEL.gguf` (tools/generate.cc) and `qkv chat` (tools/chat.cc).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "qkv/models/gguf_model.h"
#include "qkv/nn/decoder_session.h"

namespace qkv::cli {

// Whether `path` starts with the GGUF magic.
bool is_gguf_file(const std::filesystem::path& path);

struct GgufGenerateOptions {
  std::string model;
  std::string prompt;
  int64_t max_new_tokens = 200;
  SamplingOptions sampling;
  uint64_t seed = 0;
  std::string precision = "float32";  // exact mode only
  bool exact = false;
  bool stats = false;
  std::string kv_cache = "f32";  // --kv-cache: f32 or q8_0
};

// `qkv generate MODEL.gguf`: prints the prompt, then the continuation as it comes.
void run_generate_gguf(const GgufGenerateOptions& options);

// Timings of one prefill + decode.
struct GenerationTimes {
  int64_t prompt_tokens = 0;
  double prompt_seconds = 0.0;
  int64_t new_tokens = 0;
  double decode_seconds = 0.0;
};

// Feeds `ids` after what `session` holds, then samples up to max_new_tokens
// tokens (stopping after `stop` when given), streaming each one's text to
// `out` through a BPE stream decoder (special tokens left out). on_token may
// stop early by returning false. -> the new ids
std::vector<int64_t> stream_reply(nn::DecoderSession& session, const text::BpeTokenizer& tokenizer,
                                  std::span<const int64_t> ids,
                                  const nn::GenerationOptions& options, std::ostream& out,
                                  GenerationTimes* times = nullptr,
                                  const std::function<bool()>& keep_going = {});

// "prompt: 9 tokens in 0.05 s (180.0 tokens/s); generation: ..." for --stats.
std::string format_times(const GenerationTimes& times);

}  // namespace qkv::cli
