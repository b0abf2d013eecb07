// OpenAI's response shapes, built with nlohmann::json (embeddings by hand: a
// few hundred floats per row, printed so that float32 round-trips).
#include "serve/openai_responses.h"

#include <bit>
#include <cstdio>

namespace qkv::serve {

using nlohmann::json;

namespace {

const char* object_name(const CompletionHeader& h, bool chunk) {
  if (!h.chat) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

json header_json(const CompletionHeader& h, bool chunk) {
  return {
      {"id", h.id}, {"object", object_name(h, chunk)}, {"created", h.created}, {"model", h.model}};
}

}  // namespace

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

json completion_json(const CompletionHeader& h, const std::string& text,
                     const std::string& finish_reason, const Usage& usage) {
  json choice = {{"index", 0}, {"finish_reason", finish_reason}, {"logprobs", nullptr}};
  if (h.chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  json out = header_json(h, false);
  out["choices"] = json::array({choice});
  out["usage"] = usage_json(usage);
  return out;
}

json chunk_json(const CompletionHeader& h, const std::string& text,
                const std::string& finish_reason, bool include_usage, bool role) {
  json choice = {{"index", 0},
                 {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)},
                 {"logprobs", nullptr}};
  if (h.chat) {
    json delta = json::object();
    if (role) delta["role"] = "assistant";
    if (!text.empty() || role) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  json out = header_json(h, true);
  out["choices"] = json::array({choice});
  if (include_usage) out["usage"] = nullptr;
  return out;
}

json usage_chunk_json(const CompletionHeader& h, const Usage& usage) {
  json out = header_json(h, true);
  out["choices"] = json::array();
  out["usage"] = usage_json(usage);
  return out;
}

std::string sse_event(const json& data) {
  return "data: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string base64(const void* data, size_t size) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve((size + 2) / 3 * 4);
  for (size_t i = 0; i < size; i += 3) {
    const uint32_t b0 = bytes[i], b1 = i + 1 < size ? bytes[i + 1] : 0,
                   b2 = i + 2 < size ? bytes[i + 2] : 0;
    const uint32_t triple = (b0 << 16) | (b1 << 8) | b2;
    out += kAlphabet[(triple >> 18) & 63];
    out += kAlphabet[(triple >> 12) & 63];
    out += i + 1 < size ? kAlphabet[(triple >> 6) & 63] : '=';
    out += i + 2 < size ? kAlphabet[triple & 63] : '=';
  }
  return out;
}

std::string embeddings_json(const Tensor& embeddings, bool base64_rows, const std::string& model,
                            int64_t prompt_tokens) {
  static_assert(std::endian::native == std::endian::little, "base64 of little-endian float32");
  const int64_t n = embeddings.size(0), d = embeddings.size(1);
  const float* e = embeddings.data<float>();
  std::string out = "{\"object\":\"list\",\"data\":[";
  char number[32];
  for (int64_t i = 0; i < n; ++i) {
    out += i ? ",{" : "{";
    out += "\"object\":\"embedding\",\"index\":" + std::to_string(i) + ",\"embedding\":";
    if (base64_rows) {
      out += "\"" + base64(e + i * d, static_cast<size_t>(d) * sizeof(float)) + "\"";
    } else {
      out += "[";
      for (int64_t j = 0; j < d; ++j) {
        std::snprintf(number, sizeof number, "%s%.9g", j ? "," : "", e[i * d + j]);
        out += number;
      }
      out += "]";
    }
    out += "}";
  }
  out += "],\"model\":" + json(model).dump(-1, ' ', false, json::error_handler_t::replace);
  const std::string tokens = std::to_string(prompt_tokens);
  out += ",\"usage\":{\"prompt_tokens\":" + tokens + ",\"total_tokens\":" + tokens + "}}";
  return out;
}

}  // namespace qkv::serve
