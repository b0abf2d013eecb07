// The response bodies of `qkv serve`, in OpenAI's JSON shapes: completions
// whole or as server-sent-event chunks, embeddings as floats or base64.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "qkv/tensor.h"

namespace qkv::serve {

// What every response of one completion request shares.
struct CompletionHeader {
  bool chat = true;     // chat.completion(.chunk), else text_completion
  std::string id;       // "chatcmpl-…" or "cmpl-…"
  int64_t created = 0;  // Unix seconds
  std::string model;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

nlohmann::json usage_json(const Usage& usage);

// The whole reply: {"id", "object", "created", "model", "choices": [one], "usage"}.
nlohmann::json completion_json(const CompletionHeader& header, const std::string& text,
                               const std::string& finish_reason, const Usage& usage);

// One streamed chunk of choice 0: a text piece (chat: {"delta": {"content"}};
// `role` adds "role": "assistant" to the delta), or the end with its
// finish_reason (text empty). include_usage adds "usage": null.
nlohmann::json chunk_json(const CompletionHeader& header, const std::string& text,
                          const std::string& finish_reason, bool include_usage, bool role = false);

// The last chunk when stream_options.include_usage: no choices, the usage.
nlohmann::json usage_chunk_json(const CompletionHeader& header, const Usage& usage);

// "data: <json>\n\n"; invalid UTF-8 becomes U+FFFD.
std::string sse_event(const nlohmann::json& data);

// The standard base64 alphabet with padding (RFC 4648 §4).
std::string base64(const void* data, size_t size);

// The embeddings response; each row as floats or as base64 of its float32 bytes.
// embeddings: [N, D] float32
std::string embeddings_json(const Tensor& embeddings, bool base64_rows, const std::string& model,
                            int64_t prompt_tokens);

}  // namespace qkv::serve
