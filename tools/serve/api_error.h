// serve::ApiError — a request the server refuses, in OpenAI's error shape:
//   HTTP `status` with {"error": {"message", "type", "param", "code"}}
// thrown by request parsing and the schedulers, answered by the HTTP layer.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>

namespace qkv::serve {

struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = "", std::string code = "",
           std::string type = "")
      : std::runtime_error(message),
        status(status),
        param(std::move(param)),
        code(std::move(code)),
        type(type.empty() ? default_type(status) : std::move(type)) {}

  int status;
  std::string param;  // the request field at fault, or ""
  std::string code;   // a short machine-readable reason, or ""
  std::string type;   // OpenAI's error types: invalid_request_error, ...

  // {"error": {...}}; empty param and code are null. Invalid UTF-8 (a quoted
  // field of the request) becomes U+FFFD.
  std::string json() const {
    const nlohmann::json body = {
        {"error",
         {{"message", what()},
          {"type", type},
          {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
          {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code)}}}};
    return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }

  static std::string default_type(int status) {
    if (status == 401) return "authentication_error";
    if (status == 404) return "not_found_error";
    if (status == 429 || status == 503) return "server_overloaded";
    if (status >= 500) return "server_error";
    return "invalid_request_error";
  }
};

}  // namespace qkv::serve
