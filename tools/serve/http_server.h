// serve::HttpServer — the HTTP side of `qkv serve` (cpp-httplib): OpenAI's
// routes on top of the two schedulers, API-key checks, body and time limits,
// server-sent events, and a drain on shutdown.
//
//   POST /v1/chat/completions   messages through the model's chat template
//   POST /v1/completions        a prompt continued
//   POST /v1/embeddings         sentence embeddings
//   GET  /v1/models             the served models
//   GET  /health                {"status": "ok"} (no API key needed)
//   GET  /metrics               Prometheus text (no API key needed)
//   GET  /explore               the attention explorer's live page (set_explore)
//   POST /explore/attention     {"text", "text_b"} -> the maps the page draws
//
// Every refusal is OpenAI's {"error": {"message", "type", "param", "code"}}
// with the status it means: 400 a bad request (naming the field), 401 a
// missing or wrong API key, 404 an unknown route, 413 a body over the limit,
// 503 a full queue (with Retry-After) or a server shutting down.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "qkv/text/chat_template.h"
#include "serve/api_error.h"
#include "serve/embedding_batcher.h"
#include "serve/generation_scheduler.h"
#include "serve/metrics.h"

namespace httplib {
class Server;
struct Request;
}  // namespace httplib

namespace qkv::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port (bind() says which)
  std::string api_key;  // "": no key needed
  size_t max_body_bytes = 8 << 20;
  int timeout_seconds = 600;  // reading a request, writing a response
  int threads = 16;           // connections served at once
};

// The language model side: what /v1/chat/completions and /v1/completions need.
struct ChatSide {
  std::string model_id;
  const models::GgufModel* model = nullptr;
  GenerationScheduler* scheduler = nullptr;
  std::optional<text::ChatTemplate> chat_template;  // none: /v1/chat/completions refuses
  std::string chat_template_error;                  // why there is none
};

// The embedding side: /v1/embeddings.
struct EmbedSide {
  std::string model_id;
  EmbeddingBatcher* batcher = nullptr;
};

// The live attention explorer (qkv explore's page with a text box).
struct ExploreSide {
  // The page, and the maps of a text (and text_b) as the page's JSON, which
  // throw qkv::Error for an input too long. Empty: the routes answer 404.
  std::function<std::string()> page;
  std::function<std::string(const std::string& text, const std::string& text_b)> attention;
};

class HttpServer {
 public:
  // Either side may be absent (model null, batcher null): its routes answer 400.
  HttpServer(const HttpOptions& options, ChatSide chat, EmbedSide embed, Metrics& metrics);
  ~HttpServer();

  // Serves GET /explore and POST /explore/attention; call before listen().
  void set_explore(ExploreSide explore) { explore_ = std::move(explore); }

  // Binds the listening socket. -> the port (the chosen one for port 0)
  int bind();
  // Serves until shutdown() has drained the requests in flight. Blocks;
  // throws when accepting fails otherwise.
  void listen();
  // From any thread: new requests get 503, requests in flight run to their
  // end, then listen() returns.
  void shutdown();

 private:
  void add_routes();
  // 503 while draining, 401 for a missing or wrong API key, else nothing.
  std::optional<ApiError> refuse_before_routing(const httplib::Request& req) const;
  class Routes;

  HttpOptions options_;
  ChatSide chat_;
  EmbedSide embed_;
  ExploreSide explore_;
  Metrics& metrics_;
  std::unique_ptr<httplib::Server> server_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> in_flight_{0};  // requests being answered, streams included
};

}  // namespace qkv::serve
