// Reading OpenAI request bodies: one helper per JSON type, each naming the
// field in its error; a table of the keys each endpoint knows.
#include "serve/openai_requests.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "serve/api_error.h"

namespace qkv::serve {

using nlohmann::json;

namespace {

// The JSON type of `value`, for messages.
std::string type_name(const json& value) {
  if (value.is_number_integer()) return "an integer";
  if (value.is_number()) return "a number";
  if (value.is_string()) return "a string";
  if (value.is_boolean()) return "a boolean";
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  return "null";
}

// `value` quoted in a message, at most ~60 characters.
std::string shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() <= 60 ? text : text.substr(0, 57) + "...";
}

// 0, 1, 0.5: a bound of a range, as a person writes it.
std::string bound(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", x);
  return text;
}

[[noreturn]] void refuse(const std::string& field, const std::string& message,
                         const std::string& code = "invalid_value") {
  throw ApiError(400, field + ": " + message, field, code);
}

[[noreturn]] void wrong_type(const std::string& field, const json& value, const char* expected) {
  refuse(field,
         std::string("expected ") + expected + ", got " + type_name(value) + " " + shown(value),
         "invalid_type");
}

// The field, or nullptr when absent or null (OpenAI treats null as absent).
const json* find(const json& body, const std::string& key) {
  const auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::string string_field(const json& value, const std::string& field) {
  if (!value.is_string()) wrong_type(field, value, "a string");
  return value.get<std::string>();
}

bool bool_field(const json& value, const std::string& field) {
  if (!value.is_boolean()) wrong_type(field, value, "a boolean");
  return value.get<bool>();
}

double number_field(const json& value, const std::string& field, double lo, double hi,
                    bool lo_open = false) {
  if (!value.is_number()) wrong_type(field, value, "a number");
  const double x = value.get<double>();
  if (!std::isfinite(x) || (lo_open ? x <= lo : x < lo) || x > hi)
    refuse(field, shown(value) + " is not in " + (lo_open ? "(" : "[") + bound(lo) + ", " +
                      bound(hi) + "]");
  return x;
}

int64_t integer_field(const json& value, const std::string& field, int64_t lo, int64_t hi) {
  if (!value.is_number_integer()) wrong_type(field, value, "an integer");
  const bool fits = value.is_number_unsigned()
                        ? value.get<uint64_t>() <= static_cast<uint64_t>(hi)
                        : value.get<int64_t>() >= lo && value.get<int64_t>() <= hi;
  if (!fits || value.get<int64_t>() < lo)
    refuse(field,
           shown(value) + " is not in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return value.get<int64_t>();
}

// The model field: required, a string.
std::string model_field(const json& body) {
  const json* model = find(body, "model");
  if (!model) refuse("model", "required: the id of a model GET /v1/models lists", "missing_field");
  return string_field(*model, "model");
}

// Fields qkv does not implement, allowed only at the value that changes nothing.
using NeutralCheck = std::function<bool(const json&)>;
bool is_number_equal(const json& v, double x) { return v.is_number() && v.get<double>() == x; }
bool is_false(const json& v) { return v.is_boolean() && !v.get<bool>(); }
bool is_empty(const json& v) { return (v.is_object() || v.is_array()) && v.empty(); }

const std::map<std::string, std::pair<NeutralCheck, const char*>>& unimplemented_fields() {
  static const std::map<std::string, std::pair<NeutralCheck, const char*>> fields = {
      {"n", {[](const json& v) { return is_number_equal(v, 1); }, "1 (one choice per request)"}},
      {"best_of", {[](const json& v) { return is_number_equal(v, 1); }, "1"}},
      {"presence_penalty", {[](const json& v) { return is_number_equal(v, 0); }, "0"}},
      {"frequency_penalty", {[](const json& v) { return is_number_equal(v, 0); }, "0"}},
      {"logprobs", {[](const json& v) { return is_false(v) || is_number_equal(v, 0); }, "false"}},
      {"top_logprobs", {[](const json& v) { return is_number_equal(v, 0); }, "0"}},
      {"logit_bias", {is_empty, "{}"}},
      {"echo", {is_false, "false"}},
      {"suffix",
       {[](const json& v) { return v.is_string() && v.get<std::string>().empty(); }, "\"\""}},
      {"tools", {is_empty, "[] (no tool calling)"}},
      {"functions", {is_empty, "[] (no function calling)"}},
      {"tool_choice", {[](const json& v) { return v == "none"; }, "\"none\""}},
      {"function_call", {[](const json& v) { return v == "none"; }, "\"none\""}},
      {"response_format",
       {[](const json& v) {
          return v.is_object() && v.size() == 1 && v.value("type", "") == "text";
        },
        "{\"type\": \"text\"}"}},
      {"modalities", {[](const json& v) { return v == json::array({"text"}); }, "[\"text\"]"}},
  };
  return fields;
}

// Fields that change nothing the server computes.
const std::set<std::string>& harmless_fields() {
  static const std::set<std::string> fields = {"user",
                                               "metadata",
                                               "store",
                                               "service_tier",
                                               "parallel_tool_calls",
                                               "prompt_cache_key",
                                               "safety_identifier"};
  return fields;
}

// Every key of `body` must be in `known`, harmless, or unimplemented at its neutral value.
void check_keys(const json& body, const std::set<std::string>& known) {
  for (const auto& [key, value] : body.items()) {
    if (known.count(key) || harmless_fields().count(key) || value.is_null()) continue;
    const auto it = unimplemented_fields().find(key);
    if (it == unimplemented_fields().end())
      refuse(key,
             "unknown field; qkv serve refuses what it does not implement, since it "
             "might change the reply",
             "unknown_field");
    if (!it->second.first(value))
      refuse(
          key,
          "qkv serve implements only " + std::string(it->second.second) + ", got " + shown(value),
          "unsupported_value");
  }
}

const std::set<std::string> kGenerationKeys = {
    "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed",
    "stop",  "stream",     "stream_options",        "ignore_eos"};

// The fields both completion endpoints share, after checking the body's keys
// against them and the endpoint's own `prompt_key`.
GenerationFields generation_fields(const json& body, const char* prompt_key) {
  std::set<std::string> known = kGenerationKeys;
  known.insert(prompt_key);
  check_keys(body, known);
  GenerationFields f;
  f.model = model_field(body);
  const json* max_completion = find(body, "max_completion_tokens");
  const json* max_tokens = find(body, "max_tokens");
  if (max_completion && max_tokens && *max_completion != *max_tokens)
    refuse("max_completion_tokens",
           "differs from max_tokens (" + shown(*max_tokens) + "); give one of them");
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (max_completion) {
    f.max_tokens = integer_field(*max_completion, "max_completion_tokens", 1, kMax);
    f.max_tokens_field = "max_completion_tokens";
  } else if (max_tokens) {
    f.max_tokens = integer_field(*max_tokens, "max_tokens", 1, kMax);
    f.max_tokens_field = "max_tokens";
  }
  if (const json* t = find(body, "temperature"))
    f.sampling.temperature = number_field(*t, "temperature", 0, 2);
  if (const json* p = find(body, "top_p")) f.sampling.top_p = number_field(*p, "top_p", 0, 1, true);
  if (const json* k = find(body, "top_k")) f.sampling.top_k = integer_field(*k, "top_k", 0, kMax);
  if (const json* seed = find(body, "seed")) {
    if (!seed->is_number_integer()) wrong_type("seed", *seed, "an integer");
    f.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                        : static_cast<uint64_t>(seed->get<int64_t>());
  }
  if (const json* stop = find(body, "stop")) {
    if (stop->is_string()) {
      f.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > 4) refuse("stop", "at most 4 stop strings, got " + shown(stop->size()));
      for (size_t i = 0; i < stop->size(); ++i)
        f.stop.push_back(string_field((*stop)[i], "stop[" + std::to_string(i) + "]"));
    } else {
      wrong_type("stop", *stop, "a string or an array of strings");
    }
    for (const std::string& s : f.stop)
      if (s.empty()) refuse("stop", "a stop string is empty; it would stop before any text");
  }
  if (const json* ignore = find(body, "ignore_eos"))
    f.ignore_eos = bool_field(*ignore, "ignore_eos");
  if (const json* stream = find(body, "stream")) f.stream = bool_field(*stream, "stream");
  if (const json* options = find(body, "stream_options")) {
    if (!options->is_object()) wrong_type("stream_options", *options, "an object");
    if (!f.stream) refuse("stream_options", "only allowed with \"stream\": true");
    for (const auto& [key, value] : options->items()) {
      if (key != "include_usage") refuse("stream_options." + key, "unknown field", "unknown_field");
      f.include_usage = bool_field(value, "stream_options.include_usage");
    }
  }
  return f;
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts.
std::string message_content(const json& content, const std::string& field) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) wrong_type(field, content, "a string or an array of text parts");
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string part = field + "[" + std::to_string(j) + "]";
    const json& p = content[j];
    if (!p.is_object()) wrong_type(part, p, "an object");
    const json* type = find(p, "type");
    if (!type || *type != "text")
      refuse(part + ".type", "only \"text\" parts are supported, got " +
                                 (type ? shown(*type) : std::string("none")));
    for (const auto& [key, value] : p.items())
      if (key != "type" && key != "text")
        refuse(part + "." + key, "unknown field", "unknown_field");
    const json* t = find(p, "text");
    if (!t) refuse(part + ".text", "required", "missing_field");
    text += string_field(*t, part + ".text");
  }
  return text;
}

}  // namespace

json parse_json_body(const std::string& body) {
  json parsed;
  try {
    parsed = json::parse(body);
  } catch (const json::parse_error& e) {
    throw ApiError(400, std::string("the body is not valid JSON: ") + e.what(), "", "invalid_json");
  }
  if (!parsed.is_object())
    throw ApiError(400, "the body must be a JSON object, got " + type_name(parsed), "",
                   "invalid_json");
  return parsed;
}

ChatRequest parse_chat_request(const json& body) {
  ChatRequest r{.fields = generation_fields(body, "messages")};
  const json* messages = find(body, "messages");
  if (!messages) refuse("messages", "required: an array of {role, content}", "missing_field");
  if (!messages->is_array()) wrong_type("messages", *messages, "an array");
  if (messages->empty()) refuse("messages", "is empty; give at least one message");
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string field = "messages[" + std::to_string(i) + "]";
    const json& m = (*messages)[i];
    if (!m.is_object()) wrong_type(field, m, "an object");
    for (const auto& [key, value] : m.items())
      if (key != "role" && key != "content" && !value.is_null())
        refuse(field + "." + key, "unknown field; a message has a role and a content",
               "unknown_field");
    const json* role = find(m, "role");
    if (!role) refuse(field + ".role", "required", "missing_field");
    std::string role_name = string_field(*role, field + ".role");
    if (role_name == "developer") role_name = "system";  // OpenAI's newer name for it
    static const std::set<std::string> kRoles = {"system", "user", "assistant"};
    if (!kRoles.count(role_name))
      refuse(field + ".role",
             "expected \"system\", \"developer\", \"user\" or \"assistant\", got " + shown(*role));
    const json* content = find(m, "content");
    if (!content) refuse(field + ".content", "required", "missing_field");
    r.messages.push_back({role_name, message_content(*content, field + ".content")});
  }
  return r;
}

CompletionRequest parse_completion_request(const json& body) {
  CompletionRequest r{.fields = generation_fields(body, "prompt")};
  const json* prompt = find(body, "prompt");
  if (!prompt) refuse("prompt", "required: the text to continue", "missing_field");
  if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string())
    r.prompt = (*prompt)[0].get<std::string>();
  else if (prompt->is_array())
    refuse("prompt",
           "one prompt per request: a string or an array of one string, got " + shown(*prompt));
  else
    r.prompt = string_field(*prompt, "prompt");
  return r;
}

EmbeddingsRequest parse_embeddings_request(const json& body) {
  check_keys(body, {"model", "input", "encoding_format", "dimensions"});
  EmbeddingsRequest r;
  r.model = model_field(body);
  const json* input = find(body, "input");
  if (!input) refuse("input", "required: a string or an array of strings", "missing_field");
  if (input->is_string()) {
    r.input.push_back(input->get<std::string>());
  } else if (input->is_array()) {
    if (input->empty()) refuse("input", "is empty; give at least one string");
    constexpr size_t kMaxInputs = 2048;  // OpenAI's limit
    if (input->size() > kMaxInputs)
      refuse("input", "at most 2048 strings, got " + std::to_string(input->size()));
    for (size_t i = 0; i < input->size(); ++i) {
      const json& text = (*input)[i];
      if (!text.is_string())
        wrong_type("input[" + std::to_string(i) + "]", text,
                   "a string (token-id input is not supported)");
      r.input.push_back(text.get<std::string>());
    }
  } else {
    wrong_type("input", *input, "a string or an array of strings");
  }
  for (size_t i = 0; i < r.input.size(); ++i)
    if (r.input[i].empty())
      refuse(input->is_string() ? "input" : "input[" + std::to_string(i) + "]",
             "is an empty string");
  if (const json* format = find(body, "encoding_format")) {
    const std::string f = string_field(*format, "encoding_format");
    if (f != "float" && f != "base64")
      refuse("encoding_format", "expected \"float\" or \"base64\", got " + shown(*format));
    r.base64 = f == "base64";
  }
  if (const json* dims = find(body, "dimensions"))
    r.dimensions = integer_field(*dims, "dimensions", 1, std::numeric_limits<int32_t>::max());
  return r;
}

}  // namespace qkv::serve
