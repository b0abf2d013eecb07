// `qkv chat MODEL.gguf`: an interactive conversation with a GGUF chat model.
// Each line read from stdin is a user turn; the conversation is formatted with
// the file's chat template (or --chat-template's) and the reply streamed as it is generated. The KV
// cache keeps the conversation: each turn feeds only the tokens after the
// longest prefix the cache already holds. Ctrl-C ends the current reply (the
// part generated stays in the conversation); EOF (Ctrl-D) exits.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli_options.h"
#include "command.h"
#include "gguf_generation.h"
#include "line_input.h"
#include "qkv/error.h"
#include "qkv/runtime.h"

namespace qkv::cli {

namespace {

struct ChatOptions {
  std::string model;
  std::string system;
  int64_t max_new_tokens = 512;
  SamplingFlags sampling;
  int64_t context = 4096;
  bool exact = false;
  bool stats = false;
  int threads = 0;
  std::string kv_cache = "f32";
  std::string chat_template;  // a built-in template's name, instead of the file's
};

// "chatml, gemma, ..." for --chat-template's help and errors.
std::string builtin_template_names() {
  std::string names;
  for (const std::string& name : text::ChatTemplate::builtin_names())
    names += (names.empty() ? "" : ", ") + name;
  return names;
}

std::atomic<bool> interrupted{false};

extern "C" void on_sigint(int) { interrupted.store(true); }

// Long kernel calls (a prefill's attention) poll this and stop with kInterrupted.
bool interrupt_requested() { return interrupted.load(); }

// SIGINT sets the flag instead of ending the process; reads from stdin restart.
class SigintAsFlag {
 public:
  SigintAsFlag() {
    struct sigaction action = {};
    action.sa_handler = on_sigint;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGINT, &action, &previous_);
    set_interrupt_check(interrupt_requested);
  }
  ~SigintAsFlag() {
    set_interrupt_check(nullptr);
    sigaction(SIGINT, &previous_, nullptr);
  }

 private:
  struct sigaction previous_ = {};
};

void run_chat(const ChatOptions& o) {
  if (o.threads > 0) set_num_threads(o.threads);
  QKV_CHECK(is_gguf_file(o.model), "'", o.model, "' is not a GGUF file; qkv chat needs one");
  models::GgufModel m = models::load_gguf_model(
      o.model, {.exact = o.exact,
                .max_seq_len = o.context,
                .kv_cache = nn::parse_kv_cache_storage(o.kv_cache, "--kv-cache")});
  QKV_CHECK(!o.chat_template.empty() || m.chat_template_source, "'", o.model,
            "' has no chat template (tokenizer.chat_template): pass --chat-template NAME, "
            "NAME one of ",
            builtin_template_names());
  const auto token_text = [&](std::optional<int32_t> id) {
    return id ? m.tokenizer.token(*id) : std::string();
  };
  const text::ChatTemplate chat =
      o.chat_template.empty()
          ? m.chat_template()
          : text::ChatTemplate::builtin(
                o.chat_template, {token_text(m.tokenizer.bos()), token_text(m.tokenizer.eos())});
  const std::optional<int32_t> end = m.end_of_turn();

  nn::GenerationOptions g;
  g.max_new_tokens = o.max_new_tokens;
  g.sampling = o.sampling.options();
  g.seed = o.sampling.seed;
  if (end) g.stop_token = *end;
  check_sampling_options(g.sampling);

  nn::DecoderSession session(m.model, 1, m.model.config().max_seq_len);
  std::vector<int64_t> cached;  // the ids whose keys and values the session holds
  std::vector<text::ChatMessage> messages;
  if (!o.system.empty()) messages.push_back({"system", o.system});

  // The conversation as ids, through the template.
  auto encode = [&] {
    const std::vector<int32_t> ids32 = m.tokenizer.encode(chat.apply(messages, true));
    return std::vector<int64_t>(ids32.begin(), ids32.end());
  };
  const int64_t context = session.max_len();
  // A conversation must leave this much room for the reply.
  const int64_t reply_room = std::max<int64_t>(1, std::min<int64_t>(g.max_new_tokens, context / 4));
  const size_t first_turn = o.system.empty() ? 0 : 1;

  SigintAsFlag sigint;
  LineInput input;
  std::fprintf(stderr, "%s (%s mode); Ctrl-C ends a reply, Ctrl-D exits.\n",
               m.name.empty() ? o.model.c_str() : m.name.c_str(), o.exact ? "exact" : "fast");
  std::string line;
  while (input.read("> ", line)) {
    interrupted.store(false);  // a Ctrl-C at the idle prompt does not cut the next reply
    if (line.empty()) continue;
    messages.push_back({"user", line});
    std::vector<int64_t> ids = encode();
    // Too long with the reply's room: the oldest turns go first (the system
    // prompt stays); a message too long on its own is refused, and the
    // conversation goes on without it.
    size_t dropped = 0;
    while (static_cast<int64_t>(ids.size()) + reply_room > context &&
           messages.size() > first_turn + 1) {
      messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(first_turn));
      ++dropped;
      ids = encode();
    }
    if (static_cast<int64_t>(ids.size()) + reply_room > context) {
      std::cerr << "[this message makes a prompt of " << ids.size() << " tokens; with "
                << reply_room << " for the reply it does not fit the context of " << context
                << " tokens: shorten it, or start with a larger --context]\n";
      messages.pop_back();
      continue;
    }
    if (dropped > 0)
      std::cerr << "[the " << dropped << " oldest messages left the conversation to fit the "
                << "context of " << context << " tokens]\n";
    // Reuse the cached prefix; never the whole prompt (prefill needs a token).
    size_t keep =
        std::mismatch(cached.begin(), cached.end(), ids.begin(), ids.end()).first - cached.begin();
    keep = std::min(keep, ids.size() - 1);
    // A sliding-window layer's ring may have overwritten the positions before
    // `keep`; then the whole conversation is fed again.
    if (static_cast<int64_t>(keep) < session.cache().min_truncate_length()) keep = 0;
    session.cache().truncate(static_cast<int64_t>(keep));
    cached.resize(keep);
    const std::span<const int64_t> fresh(ids.data() + keep, ids.size() - keep);
    // The reply ends at --max-new-tokens or where the context is full.
    nn::GenerationOptions turn = g;
    turn.max_new_tokens = std::min<int64_t>(g.max_new_tokens, context - ids.size());
    std::vector<int64_t> reply;
    GenerationTimes times;
    try {
      reply = stream_reply(session, m.tokenizer, fresh, turn, std::cout, &times,
                           [] { return !interrupted.load(); });
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kInterrupted) throw;
      // The prefill did not finish: back to `keep`, or to nothing when the
      // ring has overwritten what came before.
      if (static_cast<int64_t>(keep) < session.cache().min_truncate_length()) {
        keep = 0;
        cached.clear();
      }
      session.cache().truncate(static_cast<int64_t>(keep));
    }
    std::cout << "\n" << std::flush;
    const bool ended = !reply.empty() && end && reply.back() == *end;
    if (interrupted.load())
      std::cerr << "[interrupted]\n";
    else if (!ended && static_cast<int64_t>(reply.size()) >= turn.max_new_tokens)
      std::cerr << (turn.max_new_tokens < g.max_new_tokens
                        ? "[reply cut: the context of " + std::to_string(context) +
                              " tokens is full]\n"
                        : "[reply cut at --max-new-tokens " + std::to_string(g.max_new_tokens) +
                              "]\n");
    if (o.stats && times.prompt_tokens > 0)
      std::fprintf(stderr, "%s\n", format_times(times).c_str());
    // The cache now holds the fed ids and every reply token but the last.
    if (session.length() > static_cast<int64_t>(keep)) {
      cached.insert(cached.end(), fresh.begin(), fresh.end());
      cached.insert(cached.end(), reply.begin(), reply.end() - (reply.empty() ? 0 : 1));
    }
    cached.resize(std::min<size_t>(cached.size(), static_cast<size_t>(session.length())));
    if (ended) reply.pop_back();
    const std::vector<int32_t> reply32(reply.begin(), reply.end());
    messages.push_back({"assistant", m.tokenizer.decode(reply32, /*skip_special=*/true)});
  }
  std::cout << "\n" << std::flush;
}

}  // namespace

Command add_chat_command(CLI::App& parent) {
  return make_command(
      parent, "chat", "Chat with a GGUF chat model, replies streamed as generated", run_chat,
      [](CLI::App& app, ChatOptions& options) {
        add_model_file_argument(
            app, options.model,
            "GGUF chat model (llama, qwen2, qwen3 or gemma3) with a chat template "
            "(e.g. models/SmolLM2-135M-Instruct.Q4_1.gguf)");
        app.add_option("--system", options.system,
                       "System prompt (default: the template's own, if it has one)");
        add_positive(app, "-n,--max-new-tokens", options.max_new_tokens,
                     "Longest reply, in tokens");
        add_sampling_options(app, options.sampling);
        add_positive(app, "-c,--context", options.context,
                     "Longest conversation in tokens (capped by the model's context length)");
        app.add_flag("--exact", options.exact, "Dequantize every weight to float32");
        app.add_flag("--stats", options.stats, "Print tokens per second after each reply");
        add_threads_option(app, options.threads);
        add_kv_cache_option(app, options.kv_cache);
        app.add_option(
            "--chat-template", options.chat_template,
            "A built-in chat template instead of the file's: " + builtin_template_names());
        app.footer(
            "Reads one user message per line from stdin. Ctrl-C ends the current reply, "
            "Ctrl-D exits.");
      });
}

}  // namespace qkv::cli
