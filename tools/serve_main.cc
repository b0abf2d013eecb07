// `qkv-serve`: the server behind `qkv serve` (tools/serve.cc), an executable
// of its own so that the other commands do not load cpp-httplib and, through
// it, OpenSSL (a few MiB resident, and its initialisation at every start).
// `qkv serve ARGS` runs `qkv-serve ARGS` from qkv's own directory
// (tools/serve_forwarder.cc); both take the same arguments.
#include <vector>

#include "cli_main.h"
#include "command.h"

int main(int argc, char** argv) {
  qkv::cli::use_fast_blas_kernels(argv);
  // Parsed as `qkv serve ARGS`: the same help, errors and exit codes.
  std::vector<char*> args = {argv[0], const_cast<char*>("serve")};
  args.insert(args.end(), argv + 1, argv + argc);
  args.push_back(nullptr);
  static constexpr qkv::cli::AddCommand kCommands[] = {&qkv::cli::add_serve_command};
  return qkv::cli::run_cli(static_cast<int>(args.size()) - 1, args.data(), kCommands);
}
