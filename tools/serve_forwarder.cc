// `qkv serve` inside `qkv`: runs the qkv-serve executable beside it with the
// same arguments (tools/serve_main.cc says why it is apart). exec keeps the
// process id, so a supervisor's SIGTERM reaches the server itself.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "command.h"
#include "qkv/error.h"

namespace qkv::cli {

namespace {

std::filesystem::path server_executable() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  QKV_CHECK(!error, "cannot find the qkv executable's directory (/proc/self/exe: ", error.message(),
            ")");
  return self.parent_path() / "qkv-serve";
}

}  // namespace

Command add_serve_forwarder(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand("serve", kServeDescription);
  app->prefix_command();  // every argument after `serve` goes to qkv-serve as it is,
  app->set_help_flag();   // --help too: qkv-serve prints the options
  return {app, [app]() -> int {
            const std::string path = server_executable().string();
            std::vector<std::string> rest = app->remaining();
            std::vector<char*> argv = {const_cast<char*>(path.c_str())};
            for (std::string& arg : rest) argv.push_back(arg.data());
            argv.push_back(nullptr);
            execv(path.c_str(), argv.data());
            throw Error(ErrorKind::kValue,
                        detail::concat("cannot run ", path, " (", std::strerror(errno),
                                       "); qkv-serve is built and installed beside qkv"));
          }};
}

}  // namespace qkv::cli
