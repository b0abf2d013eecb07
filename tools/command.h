// The subcommands of the `qkv` CLI. Each lives in its own file (tools/<name>.cc)
// and is registered in main.cc, which only parses and dispatches.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace qkv::cli {

// Exit codes: 0 success, 1 an error while running (qkv::Error, out of memory),
// 2 a wrong command line (as argparse and getopt tools; CLI11's own codes,
// 105-114, would tell a script nothing more). docs/errors.md lists them.
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// A parsed subcommand and what to do when it was chosen. `run` returns the
// process exit code; it may throw qkv::Error, which main() reports.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

// Runs the process again with OPENBLAS_CORETYPE set when OpenBLAS chose its
// generic kernels on a CPU it did not recognise (tools/blas_kernels.cc).
void use_fast_blas_kernels(char** argv);

// `qkv demo`: the tutorial walked through with qkv's own output (tools/demo.cc).
Command add_demo_command(CLI::App& parent);

// `qkv generate`: text token by token from a decoder-only model file (tools/generate.cc).
Command add_generate_command(CLI::App& parent);

// `qkv chat`: an interactive conversation with a GGUF chat model (tools/chat.cc).
Command add_chat_command(CLI::App& parent);

// `qkv embed` and `qkv similarity`: sentence embeddings and their cosines (tools/embed.cc,
// tools/similarity.cc).
Command add_embed_command(CLI::App& parent);
Command add_similarity_command(CLI::App& parent);

// `qkv serve`: an OpenAI-compatible HTTP server (tools/serve.cc, tools/serve/),
// built into the qkv-serve executable (tools/serve_main.cc); `qkv` itself
// forwards `qkv serve ARGS` to it (tools/serve_forwarder.cc).
inline constexpr const char* kServeDescription =
    "OpenAI-compatible HTTP server: chat/completions with continuous batching, embeddings";
Command add_serve_command(CLI::App& parent);
Command add_serve_forwarder(CLI::App& parent);
// `qkv explore`: a web page of a model's attention on a text (tools/explore.cc).
Command add_explore_command(CLI::App& parent);

// `qkv bench`: named workloads timed like llama-bench (tools/bench.cc).
Command add_bench_command(CLI::App& parent);

// `qkv train recall`: a Transformer learns key-value recall (tools/train.cc).
Command add_train_command(CLI::App& parent);

}  // namespace qkv::cli
