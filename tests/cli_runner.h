// Runs the built `qkv` binary (cli_path(), checkout_paths.h) the way a user
// would, for the tests/test_cli*.cc files. Each TEST_F(Cli, ...) gets a fresh
// temporary directory dir_.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <string>

#include "test_util.h"

namespace qkv_test {

namespace fs = std::filesystem;

struct CliRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `qkv <args>` through the shell; arguments must be shell-safe.
inline CliRun run_qkv(const std::string& args) {
  CliRun run;
  if (*cli_path() == '\0') return run;  // not built: Cli skips its tests
  const std::string command = std::string("'") + cli_path() + "' " + args + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run " << command;
    return run;
  }
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) run.output.append(buffer, n);
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Expects the output of `run` to contain every one of `parts`.
inline void expect_output_has(const CliRun& run, std::initializer_list<std::string> parts,
                              CallSite where = {}) {
  const ::testing::ScopedTrace trace(where.file, where.line, "expect_output_has");
  for (const std::string& part : parts)
    EXPECT_TRUE(contains(run.output, part)) << "missing \"" << part << "\" in:\n" << run.output;
}

// Expects `run` to have failed (exit code other than 0) saying every one of `parts`.
inline void expect_failure(const CliRun& run, std::initializer_list<std::string> parts,
                           CallSite where = {}) {
  const ::testing::ScopedTrace trace(where.file, where.line, "expect_failure");
  EXPECT_NE(run.exit_code, 0) << run.output;
  expect_output_has(run, parts, where);
}

// Expects the output of `run` to contain none of `parts`.
inline void expect_output_lacks(const CliRun& run, std::initializer_list<std::string> parts,
                                CallSite where = {}) {
  const ::testing::ScopedTrace trace(where.file, where.line, "expect_output_lacks");
  for (const std::string& part : parts)
    EXPECT_FALSE(contains(run.output, part)) << "unexpected \"" << part << "\" in:\n" << run.output;
}

class Cli : public TempDirTest {
 protected:
  void SetUp() override {
    if (*cli_path() == '\0') GTEST_SKIP() << "the qkv CLI is not built (QKV_BUILD_TOOLS=OFF)";
    TempDirTest::SetUp();
  }
};

}  // namespace qkv_test
