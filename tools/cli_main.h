// The front end `qkv` and `qkv-serve` share: parses the command line into one
// of the commands and runs it; errors end as "qkv <command>: error: ...".
#pragma once

#include <span>

#include "command.h"

namespace qkv::cli {

// Adds one subcommand to the top-level app (command.h's add_*_command).
using AddCommand = Command (*)(CLI::App& parent);

// argv as main() got it: argv[1] names one of `commands`. Returns the exit code.
int run_cli(int argc, char** argv, std::span<const AddCommand> commands);

}  // namespace qkv::cli
