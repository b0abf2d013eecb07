// serve::HttpServer: cpp-httplib's server with OpenAI's routes. Handlers run
// on httplib's thread pool; they parse, tokenize and queue, then wait on the
// request's GenerationStream (a streamed reply waits inside httplib's
// chunked content provider, one event at a time).
#include "serve/http_server.h"

#include <httplib.h>

#include <chrono>
#include <ctime>
#include <random>
#include <thread>

#include "qkv/error.h"
#include "serve/api_error.h"
#include "serve/openai_requests.h"
#include "serve/openai_responses.h"

namespace qkv::serve {

using nlohmann::json;

namespace {

constexpr auto kPoll = std::chrono::milliseconds(100);  // how often a waiting handler looks up
constexpr int kRetryAfterSeconds = 1;

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status;
  if (error.status == 503) res.set_header("Retry-After", std::to_string(kRetryAfterSeconds));
  if (error.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(error.json(), "application/json");
}

// Runs a handler; what it throws becomes an OpenAI error response.
template <class Handler>
void answer(httplib::Response& res, Handler&& handler) {
  try {
    handler();
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const Error& e) {
    // Library errors while serving a request come from its content (a chat
    // template it cannot render, a text it cannot tokenize).
    send_error(res, ApiError(e.kind() == ErrorKind::kMemory ? 503 : 400, e.what()));
  } catch (const std::exception& e) {
    send_error(res, ApiError(500, std::string("internal error: ") + e.what()));
  }
}

// Equal strings, in a time that does not depend on where they differ.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i % (b.empty() ? 1 : b.size())];
  return diff == 0 && !b.empty();
}

// Counts a request in flight while it lives (a streamed reply keeps it until
// its last chunk).
class InFlight {
 public:
  explicit InFlight(std::atomic<int64_t>& count) : count_(count) { ++count_; }
  ~InFlight() { --count_; }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  std::atomic<int64_t>& count_;
};

int64_t unix_seconds() { return static_cast<int64_t>(std::time(nullptr)); }

// A request id: the prefix, then 24 random hex digits.
std::string request_id(const char* prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  char digits[32];
  std::snprintf(digits, sizeof digits, "%012llx%012llx",
                static_cast<unsigned long long>(rng() & 0xffffffffffffULL),
                static_cast<unsigned long long>(rng() & 0xffffffffffffULL));
  return std::string(prefix) + digits;
}

uint64_t random_seed() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

// The label of /metrics' request counter: the route, or "other".
std::string endpoint_label(const std::string& path) {
  for (const char* route : {"/v1/chat/completions", "/v1/completions", "/v1/embeddings",
                            "/v1/models", "/health", "/metrics"})
    if (path == route) return route;
  return "other";
}

// A streamed completion: what the content provider keeps between calls.
struct StreamState {
  std::shared_ptr<GenerationStream> stream;
  CompletionHeader header;
  bool include_usage = false;
  bool started = false;
  bool finished = false;
  std::unique_ptr<InFlight> in_flight;
  ~StreamState() {
    if (!finished) stream->cancel();  // the client went away (or the write failed)
  }
};

}  // namespace

class HttpServer::Routes {
 public:
  explicit Routes(HttpServer& s) : s_(s) {}

  void chat_completions(const httplib::Request& req, httplib::Response& res) {
    const ChatRequest r = parse_chat_request(parse_json_body(req.body));
    check_chat_model(r.fields.model);
    if (!s_.chat_.chat_template)
      throw ApiError(400,
                     "messages: the model's chat template cannot be used (" +
                         s_.chat_.chat_template_error + "); use /v1/completions with a prompt",
                     "messages", "no_chat_template");
    const std::string text = s_.chat_.chat_template->apply(r.messages, true);
    generate(res, r.fields, encode(text), /*chat=*/true, "messages");
  }

  void completions(const httplib::Request& req, httplib::Response& res) {
    const CompletionRequest r = parse_completion_request(parse_json_body(req.body));
    check_chat_model(r.fields.model);
    generate(res, r.fields, encode(r.prompt), /*chat=*/false, "prompt");
  }

  void embeddings(const httplib::Request& req, httplib::Response& res) {
    const EmbeddingsRequest r = parse_embeddings_request(parse_json_body(req.body));
    if (!s_.embed_.batcher)
      throw ApiError(400, unknown_model(r.model, "no embedding model (start with --embed-model)"),
                     "model", "model_not_found");
    if (r.model != s_.embed_.model_id)
      throw ApiError(400, unknown_model(r.model, "'" + s_.embed_.model_id + "'"), "model",
                     "model_not_found");
    const int64_t d = s_.embed_.batcher->dimension();
    if (r.dimensions && *r.dimensions != d)
      throw ApiError(400,
                     "dimensions: " + s_.embed_.model_id + " gives " + std::to_string(d) +
                         "-dimensional embeddings and cannot shorten them; got " +
                         std::to_string(*r.dimensions),
                     "dimensions", "invalid_value");
    const EmbeddingResult result = s_.embed_.batcher->embed(r.input);
    res.set_content(embeddings_json(result.embeddings, r.base64, r.model, result.prompt_tokens),
                    "application/json");
  }

  void models(httplib::Response& res) {
    json data = json::array();
    const int64_t created = unix_seconds();
    for (const std::string* id : {&s_.chat_.model_id, &s_.embed_.model_id})
      if (!id->empty())
        data.push_back(
            {{"id", *id}, {"object", "model"}, {"created", created}, {"owned_by", "qkv"}});
    res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  }

 private:
  static std::string unknown_model(const std::string& got, const std::string& have) {
    return "model: unknown model '" + got + "'; this server has " + have;
  }

  void check_chat_model(const std::string& model) const {
    if (!s_.chat_.scheduler)
      throw ApiError(400, unknown_model(model, "no language model (start with --model)"), "model",
                     "model_not_found");
    if (model != s_.chat_.model_id)
      throw ApiError(400, unknown_model(model, "'" + s_.chat_.model_id + "'"), "model",
                     "model_not_found");
  }

  std::vector<int64_t> encode(const std::string& text) const {
    const std::vector<int32_t> ids = s_.chat_.model->tokenizer.encode(text);
    return {ids.begin(), ids.end()};
  }

  // Queues the prompt and answers: the whole reply, or its chunks as they come.
  void generate(httplib::Response& res, const GenerationFields& f, std::vector<int64_t> prompt,
                bool chat, const char* prompt_field) {
    const int64_t context = s_.chat_.scheduler->context();
    const auto n = static_cast<int64_t>(prompt.size());
    if (n == 0)
      throw ApiError(400, std::string(prompt_field) + ": the prompt has no tokens", prompt_field);
    if (!f.max_tokens && n >= context)
      throw ApiError(400,
                     std::string(prompt_field) + ": the prompt's " + std::to_string(n) +
                         " tokens leave no room for a reply in the context of " +
                         std::to_string(context) + " tokens (--ctx-size)",
                     prompt_field, "context_length_exceeded");
    const int64_t max_tokens = f.max_tokens.value_or(context - n);
    if (n + max_tokens > context)
      throw ApiError(400,
                     f.max_tokens_field + ": the prompt's " + std::to_string(n) + " tokens plus " +
                         f.max_tokens_field + " " + std::to_string(max_tokens) + " exceed the " +
                         "context of " + std::to_string(context) + " tokens (--ctx-size)",
                     f.max_tokens_field, "context_length_exceeded");
    GenerationRequest request{.prompt = std::move(prompt),
                              .max_tokens = max_tokens,
                              .sampling = f.sampling,
                              .seed = f.seed.value_or(random_seed()),
                              .stop = f.stop,
                              .ignore_eos = f.ignore_eos};
    const CompletionHeader header{.chat = chat,
                                  .id = request_id(chat ? "chatcmpl-" : "cmpl-"),
                                  .created = unix_seconds(),
                                  .model = f.model};
    std::shared_ptr<GenerationStream> stream = s_.chat_.scheduler->submit(std::move(request));
    if (f.stream) return stream_reply(res, std::move(stream), header, f.include_usage);
    std::string text;
    while (true) {
      const std::optional<GenerationEvent> event = stream->next(kPoll);
      if (!event) continue;
      if (event->kind == GenerationEvent::Kind::kText) {
        text += event->text;
      } else if (event->kind == GenerationEvent::Kind::kError) {
        throw ApiError(500, "generation failed: " + event->text);
      } else {
        const json body = completion_json(header, text, event->finish_reason,
                                          {event->prompt_tokens, event->completion_tokens});
        res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace),
                        "application/json");
        return;
      }
    }
  }

  void stream_reply(httplib::Response& res, std::shared_ptr<GenerationStream> stream,
                    const CompletionHeader& header, bool include_usage) {
    auto state = std::make_shared<StreamState>();
    state->stream = std::move(stream);
    state->header = header;
    state->include_usage = include_usage;
    state->in_flight = std::make_unique<InFlight>(s_.in_flight_);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [state](size_t, httplib::DataSink& sink) {
      StreamState& st = *state;
      auto write = [&](const std::string& text) { return sink.write(text.data(), text.size()); };
      if (!st.started) {
        st.started = true;
        if (st.header.chat && !write(sse_event(chunk_json(st.header, "", "", st.include_usage,
                                                          /*role=*/true))))
          return false;
      }
      const std::optional<GenerationEvent> event = st.stream->next(kPoll);
      if (!event) return true;  // called again: a poll, not a busy loop
      switch (event->kind) {
        case GenerationEvent::Kind::kText:
          return write(sse_event(chunk_json(st.header, event->text, "", st.include_usage)));
        case GenerationEvent::Kind::kError:
          st.finished = true;
          write(sse_event(json::parse(ApiError(500, "generation failed: " + event->text).json())));
          sink.done();
          return true;
        case GenerationEvent::Kind::kDone: {
          st.finished = true;
          std::string out =
              sse_event(chunk_json(st.header, "", event->finish_reason, st.include_usage));
          if (st.include_usage)
            out += sse_event(
                usage_chunk_json(st.header, {event->prompt_tokens, event->completion_tokens}));
          out += "data: [DONE]\n\n";
          if (!write(out)) return false;
          sink.done();
          return true;
        }
      }
      return false;
    });
  }

  HttpServer& s_;
};

HttpServer::HttpServer(const HttpOptions& options, ChatSide chat, EmbedSide embed, Metrics& metrics)
    : options_(options),
      chat_(std::move(chat)),
      embed_(std::move(embed)),
      metrics_(metrics),
      server_(std::make_unique<httplib::Server>()) {
  add_routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::add_routes() {
  httplib::Server& svr = *server_;
  const int threads = options_.threads;
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // SO_REUSEADDR (a restart need not wait out TIME_WAIT) but not httplib's
  // SO_REUSEPORT: a second server on a port in use must fail, not share it.
  svr.set_socket_options([](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  svr.set_payload_max_length(options_.max_body_bytes);
  svr.set_read_timeout(options_.timeout_seconds, 0);
  svr.set_write_timeout(options_.timeout_seconds, 0);
  svr.set_keep_alive_timeout(std::min(options_.timeout_seconds, 5));

  // Refusals before routing leave the request's body unread in the socket:
  // the connection is closed after the answer, or httplib would read the
  // body as the next request (and wait --timeout for its first line).
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const std::optional<ApiError> refusal = refuse_before_routing(req);
    if (!refusal) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, *refusal);
    res.set_header("Connection", "close");
    return httplib::Server::HandlerResponse::Handled;
  });

  auto routes = std::make_shared<Routes>(*this);
  // Each POST counts itself in flight, then looks at draining_ again: with
  // shutdown() doing the opposite, one of the two sees the other.
  auto post = [this, routes](void (Routes::*handler)(const httplib::Request&, httplib::Response&)) {
    return [this, routes, handler](const httplib::Request& req, httplib::Response& res) {
      InFlight counted(in_flight_);
      answer(res, [&] {
        if (draining_.load())
          throw ApiError(503, "the server is shutting down", "", "shutting_down");
        ((*routes).*handler)(req, res);
      });
    };
  };
  svr.Post("/v1/chat/completions", post(&Routes::chat_completions));
  svr.Post("/v1/completions", post(&Routes::completions));
  svr.Post("/v1/embeddings", post(&Routes::embeddings));
  svr.Get("/v1/models", [routes](const httplib::Request&, httplib::Response& res) {
    answer(res, [&] { routes->models(res); });
  });
  svr.Get("/explore", [this](const httplib::Request&, httplib::Response& res) {
    answer(res, [&] {
      if (!explore_.page) throw ApiError(404, "this server has no attention explorer");
      res.set_content(explore_.page(), "text/html; charset=utf-8");
    });
  });
  svr.Post("/explore/attention", [this](const httplib::Request& req, httplib::Response& res) {
    InFlight counted(in_flight_);
    answer(res, [&] {
      if (!explore_.attention) throw ApiError(404, "this server has no attention explorer");
      const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
      if (!body.is_object()) throw ApiError(400, "the body must be a JSON object");
      if (!body.contains("text") || !body["text"].is_string())
        throw ApiError(400, "text: expected a string", "text");
      if (body.contains("text_b") && !body["text_b"].is_string())
        throw ApiError(400, "text_b: expected a string", "text_b");
      res.set_content(
          explore_.attention(body["text"].get<std::string>(), body.value("text_b", std::string())),
          "application/json");
    });
  });
  svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.prometheus_text(), "text/plain; version=0.0.4");
  });

  // Errors httplib answers itself (no route, a body over the limit, a
  // malformed request) get OpenAI's error body too.
  svr.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string message;
        if (res.status == 404)
          message = "no route " + req.method + " " + req.path;
        else if (res.status == 413)
          message = "the body is larger than the limit of " +
                    std::to_string(options_.max_body_bytes) + " bytes (--max-body-bytes)";
        else
          message = "HTTP " + std::to_string(res.status) + " for " + req.method + " " + req.path;
        const int status = res.status;
        send_error(res, ApiError(status, message, "", status == 413 ? "body_too_large" : ""));
        return httplib::Server::HandlerResponse::Handled;
      }));
  svr.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          send_error(res, ApiError(500, std::string("internal error: ") + e.what()));
        } catch (...) {
          send_error(res, ApiError(500, "internal error"));
        }
      });
  svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.count_request(endpoint_label(req.path), res.status);
  });
}

std::optional<ApiError> HttpServer::refuse_before_routing(const httplib::Request& req) const {
  if (draining_.load()) return ApiError(503, "the server is shutting down", "", "shutting_down");
  const bool open = req.path == "/health" || req.path == "/metrics";
  if (options_.api_key.empty() || open) return std::nullopt;
  const std::string auth = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (auth.empty())
    return ApiError(401, "an API key is required: send the header 'Authorization: Bearer KEY'", "",
                    "missing_api_key");
  if (auth.rfind(prefix, 0) != 0 || !same_secret(auth.substr(prefix.size()), options_.api_key))
    return ApiError(401, "the API key is wrong", "", "invalid_api_key");
  return std::nullopt;
}

int HttpServer::bind() {
  const int port = options_.port == 0
                       ? server_->bind_to_any_port(options_.host)
                       : (server_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  QKV_CHECK(port > 0, "cannot listen on ", options_.host, ":", options_.port,
            " (--host, --port): the port is in use, or the address is not one of this machine's");
  options_.port = port;
  return port;
}

void HttpServer::listen() {
  QKV_CHECK(server_->listen_after_bind() || draining_.load(), "the server on ", options_.host, ":",
            options_.port, " stopped accepting connections");
}

void HttpServer::shutdown() {
  draining_.store(true);
  while (in_flight_.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  server_->stop();
}

}  // namespace qkv::serve
