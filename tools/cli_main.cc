#include "cli_main.h"

#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "qkv/error.h"

#ifndef QKV_VERSION_STRING
#define QKV_VERSION_STRING "unknown"
#endif

namespace qkv::cli {

namespace {

// "qkv demo" for the deepest subcommand the parser got to, else "qkv".
std::string command_path(const CLI::App& app) {
  std::string path = "qkv";
  const CLI::App* current = &app;
  while (true) {
    const std::vector<const CLI::App*> chosen =
        current->get_subcommands([](const CLI::App* sub) { return sub->parsed(); });
    if (chosen.empty()) return path;
    current = chosen.front();
    path += " " + current->get_name();
  }
}

// Help and --version go to stdout with exit code 0; real errors go to stderr
// with one line pointing at the right --help.
int report_parse_error(CLI::App& app, const CLI::ParseError& error) {
  if (error.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(error);
  const std::string path = command_path(app);
  std::cerr << path << ": error: " << error.what() << "\n"
            << "Run '" << path << " --help' for usage.\n";
  return kExitUsage;
}

}  // namespace

int run_cli(int argc, char** argv, std::span<const AddCommand> commands) {
  CLI::App app(
      "qkv: attention from Query/Key/Value to the Transformer, as a C++ library.\n"
      "The commands below run the tutorial's examples with qkv's own code.",
      "qkv");
  app.set_version_flag("--version", std::string("qkv ") + QKV_VERSION_STRING,
                       "Print the version and exit");
  app.footer("Run 'qkv <command> --help' for the options of a command.");

  std::vector<Command> added;
  for (const AddCommand add : commands) added.push_back(add(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return report_parse_error(app, error);
  }

  for (const Command& command : added) {
    if (!command.app->parsed()) continue;
    const std::string path = "qkv " + command.app->get_name();
    try {
      return command.run();
    } catch (const qkv::Error& error) {
      std::cerr << path << ": error: " << error.what() << "\n";
    } catch (const std::bad_alloc&) {
      std::cerr << path << ": error: out of memory; try a smaller batch, model or input\n";
    } catch (const std::exception& error) {
      std::cerr << path << ": internal error: " << error.what() << "\n";
    }
    return kExitFailure;
  }

  // No command: show what there is.
  std::cout << app.help();
  return kExitUsage;
}

}  // namespace qkv::cli
