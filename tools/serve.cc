// `qkv serve`: an OpenAI-compatible HTTP server (tools/serve/): chat and text
// completions from a GGUF model, decoded with continuous batching, and
// sentence embeddings. Binds 127.0.0.1 unless --host says otherwise. SIGTERM
// or Ctrl-C: new requests get 503, the running ones finish, then it exits.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "cli_options.h"
#include "command.h"
#include "gguf_generation.h"
#include "qkv/error.h"
#include "qkv/models/sentence_encoder.h"
#include "qkv/runtime.h"
#include "qkv/viz/explore.h"
#include "serve/embedding_batcher.h"
#include "serve/generation_scheduler.h"
#include "serve/http_server.h"
#include "serve/metrics.h"

namespace qkv::cli {

namespace {

struct ServeOptions {
  std::string model;
  std::string embed_model;
  std::string host = "127.0.0.1";
  int port = 8080;
  int64_t parallel = 4;
  int64_t ctx_size = 2048;
  int64_t max_queue = 64;
  int64_t prefill_chunk = 128;
  std::string api_key;
  int threads = 0;
  int timeout = 600;
  int64_t max_body_bytes = 8 << 20;
  std::string kv_cache = "f32";
};

// SIGTERM and SIGINT, blocked in every thread so that one thread takes them with sigwait.
sigset_t shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

// The id /v1/models lists for a file or directory: its name (a GGUF file's without .gguf).
std::string model_id(const std::string& path) {
  std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return p.extension() == ".gguf" ? p.stem().string() : p.filename().string();
}

void run_serve(const ServeOptions& o) {
  QKV_CHECK(!o.model.empty() || !o.embed_model.empty(),
            "give --model FILE.gguf, --embed-model DIR, or both");
  QKV_CHECK(o.model.empty() || is_gguf_file(o.model), "--model '", o.model, "' is not a GGUF file");
  const sigset_t signals = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts
  signal(SIGPIPE, SIG_IGN);                       // a closed socket is an error, not an exit
  if (o.threads > 0) set_num_threads(o.threads);

  serve::Metrics metrics;
  std::optional<models::GgufModel> model;
  std::unique_ptr<serve::GenerationScheduler> scheduler;
  serve::ChatSide chat;
  if (!o.model.empty()) {
    model.emplace(models::load_gguf_model(
        o.model, {.max_seq_len = o.ctx_size,
                  .kv_cache = nn::parse_kv_cache_storage(o.kv_cache, "--kv-cache")}));
    const int64_t context = std::min(o.ctx_size, model->model.config().max_seq_len);
    scheduler = std::make_unique<serve::GenerationScheduler>(
        *model,
        serve::SchedulerOptions{.slots = o.parallel,
                                .context = context,
                                .max_queue = o.max_queue,
                                .prefill_chunk = o.prefill_chunk,
                                .threads = o.threads},
        metrics);
    chat = {.model_id = model_id(o.model), .model = &*model, .scheduler = scheduler.get()};
    try {
      chat.chat_template = model->chat_template();
    } catch (const Error& e) {
      chat.chat_template_error = e.what();
    }
  }
  std::optional<models::SentenceEncoder> encoder;
  std::unique_ptr<serve::EmbeddingBatcher> batcher;
  serve::EmbedSide embed;
  if (!o.embed_model.empty()) {
    encoder.emplace(o.embed_model);
    batcher = std::make_unique<serve::EmbeddingBatcher>(
        *encoder, serve::EmbeddingOptions{.max_queue = o.max_queue, .threads = o.threads}, metrics);
    embed = {.model_id = model_id(o.embed_model), .batcher = batcher.get()};
  }

  // Enough connections for every slot and every queued request, and a few
  // more for /health, /metrics and refusals.
  const int connections = static_cast<int>(std::min<int64_t>(o.parallel + o.max_queue + 8, 1024));
  serve::HttpServer server({.host = o.host,
                            .port = o.port,
                            .api_key = o.api_key,
                            .max_body_bytes = static_cast<size_t>(o.max_body_bytes),
                            .timeout_seconds = o.timeout,
                            .threads = connections},
                           chat, embed, metrics);
  // The live attention explorer at /explore: the embedding model's attention,
  // else the language model's, loaded (float32) at the first visit.
  const std::string explore_model = !o.embed_model.empty() ? o.embed_model : o.model;
  std::mutex explore_mutex;
  std::unique_ptr<viz::AttentionExplorer> explorer;
  auto maps = [&](const std::string& text, const std::string& text_b) {
    std::lock_guard<std::mutex> lock(explore_mutex);
    if (!explorer) explorer = std::make_unique<viz::AttentionExplorer>(explore_model);
    auto result = explorer->explore(text, {.text_b = text_b});
    release_idle_threads();  // an HTTP thread: its workers would idle on
    return result;
  };
  server.set_explore({.page =
                          [&] {
                            return viz::explore_html(maps("The cat sat on the mat.", ""),
                                                     {.live_endpoint = "/explore/attention"});
                          },
                      .attention =
                          [&](const std::string& text, const std::string& text_b) {
                            return viz::explore_json(maps(text, text_b));
                          }});
  // From here on this thread only accepts connections; the schedulers compute.
  release_idle_threads();
  const int port = server.bind();
  std::fprintf(stderr, "qkv serve: listening on http://%s:%d", o.host.c_str(), port);
  if (scheduler)
    std::fprintf(stderr, "; %s: %lld slots of %lld tokens", chat.model_id.c_str(),
                 static_cast<long long>(o.parallel), static_cast<long long>(scheduler->context()));
  if (batcher) std::fprintf(stderr, "; embeddings: %s", embed.model_id.c_str());
  std::fprintf(stderr, "\n");
  std::fflush(stderr);

  std::thread on_signal([&] {
    int received = 0;
    sigwait(&signals, &received);
    std::fprintf(stderr, "qkv serve: %s: finishing the requests in flight\n",
                 received == SIGINT ? "SIGINT" : "SIGTERM");
    server.shutdown();
  });
  std::exception_ptr failure;
  try {
    server.listen();
  } catch (...) {
    failure = std::current_exception();
  }
  kill(getpid(), SIGTERM);  // wakes on_signal if listen() ended by itself
  on_signal.join();
  if (failure) std::rethrow_exception(failure);
  std::fprintf(stderr, "qkv serve: stopped\n");
}

}  // namespace

Command add_serve_command(CLI::App& parent) {
  return make_command(
      parent, "serve", kServeDescription, run_serve, [](CLI::App& app, ServeOptions& options) {
        app.add_option("-m,--model", options.model,
                       "GGUF language model (e.g. models/SmolLM2-135M-Instruct.Q4_1.gguf)")
            ->check(CLI::ExistingFile)
            ->type_name("FILE");
        app.add_option("--embed-model", options.embed_model,
                       "Sentence-transformers model directory (e.g. models/all-MiniLM-L6-v2)")
            ->check(CLI::ExistingDirectory)
            ->type_name("DIR");
        add_defaulted(app, "--host", options.host,
                      "Address to listen on (0.0.0.0: every interface; mind --api-key)");
        add_in_range(app, "--port", options.port, 0, 65535, "Port (0: any free port)");
        add_in_range<int64_t>(app, "--parallel", options.parallel, 1, 256,
                              "Decoding slots: requests generated at once");
        add_positive(app, "--ctx-size", options.ctx_size,
                     "Positions per slot, prompt and reply (capped by the model's context)");
        add_non_negative(app, "--max-queue", options.max_queue,
                         "Requests that may wait for a slot; more get 503 with Retry-After");
        add_positive(app, "--prefill-chunk", options.prefill_chunk,
                     "Prompt tokens fed per step while other requests decode");
        app.add_option("--api-key", options.api_key,
                       "Require 'Authorization: Bearer KEY' on /v1/ routes")
            ->envname("QKV_API_KEY")
            ->type_name("KEY");
        add_threads_option(app, options.threads);
        add_positive(app, "--timeout", options.timeout,
                     "Seconds to read a request or write a response before dropping the client");
        add_positive(app, "--max-body-bytes", options.max_body_bytes,
                     "Largest request body; larger gets 413");
        add_kv_cache_option(app, options.kv_cache);
        app.footer(
            "Routes: POST /v1/chat/completions, /v1/completions, /v1/embeddings; GET /v1/models,\n"
            "/health, /metrics (Prometheus). SIGTERM or Ctrl-C: new requests get 503, running\n"
            "ones finish, then the server exits. docs/serving.md has the details.");
      });
}

}  // namespace qkv::cli
