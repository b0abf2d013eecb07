// `qkv`: the command-line front end. Parses arguments and dispatches to one
// subcommand (tools/cli_main.cc); the subcommands themselves live in one file
// each (command.h). `qkv serve` runs the qkv-serve executable (serve_main.cc).
#include "cli_main.h"
#include "command.h"

int main(int argc, char** argv) {
  qkv::cli::use_fast_blas_kernels(argv);
  static constexpr qkv::cli::AddCommand kCommands[] = {
      &qkv::cli::add_demo_command,       &qkv::cli::add_generate_command,
      &qkv::cli::add_chat_command,       &qkv::cli::add_embed_command,
      &qkv::cli::add_similarity_command, &qkv::cli::add_train_command,
      &qkv::cli::add_bench_command,      &qkv::cli::add_serve_forwarder,
      &qkv::cli::add_explore_command,
  };
  return qkv::cli::run_cli(argc, argv, kCommands);
}
