// The request bodies of `qkv serve`'s endpoints, read from OpenAI's JSON
// shapes into what the schedulers take. Every refusal is an ApiError 400
// naming the field (OpenAI's "param"), what it got and what it expects:
//   - malformed JSON, a body that is not an object, a field of the wrong type
//     or out of range;
//   - a field that would change the reply but that qkv does not implement
//     (n > 1, logprobs, penalties, logit_bias, tools, a JSON response format,
//     ...), unless it holds the value that changes nothing;
//   - a field this server does not know: it might change the reply.
// Fields that change nothing (user, metadata, store, ...) are accepted.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "qkv/sampling.h"
#include "qkv/text/chat_template.h"

namespace qkv::serve {

// The fields /v1/chat/completions and /v1/completions share.
struct GenerationFields {
  std::string model;
  std::optional<int64_t> max_tokens;  // max_completion_tokens or max_tokens
  std::string max_tokens_field;       // which of the two was given (for errors)
  SamplingOptions sampling;           // temperature (default 1), top_p, top_k (extension)
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool ignore_eos = false;  // llama-server's extension: end of turn does not end the reply
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

struct ChatRequest {
  GenerationFields fields;
  std::vector<text::ChatMessage> messages;
};

struct CompletionRequest {
  GenerationFields fields;
  std::string prompt;
};

struct EmbeddingsRequest {
  std::string model;
  std::vector<std::string> input;
  bool base64 = false;  // encoding_format "base64": little-endian float32 bytes
  std::optional<int64_t> dimensions;
};

// The body as a JSON object; ApiError 400 when it is not JSON or not an object.
nlohmann::json parse_json_body(const std::string& body);

ChatRequest parse_chat_request(const nlohmann::json& body);
CompletionRequest parse_completion_request(const nlohmann::json& body);
EmbeddingsRequest parse_embeddings_request(const nlohmann::json& body);

}  // namespace qkv::serve
