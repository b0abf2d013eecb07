// The `qkv` command-line tool, run as a user would run it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#ifndef QKV_EXPECTED_VERSION
#define QKV_EXPECTED_VERSION ""
#endif

namespace {

namespace fs = std::filesystem;

struct CliRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `qkv <args>` through the shell; arguments must be shell-safe.
CliRun run_qkv(const std::string& args) {
#ifdef QKV_CLI_PATH
  const std::string command = std::string("'") + QKV_CLI_PATH + "' " + args + " 2>&1";
  CliRun run;
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
#else
  (void)args;
  return {};
#endif
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef QKV_CLI_PATH
    GTEST_SKIP() << "the qkv CLI is not built (QKV_BUILD_TOOLS=OFF)";
#endif
    std::string pattern = (fs::temp_directory_path() / "qkv_cli_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  fs::path dir_;
};

TEST_F(Cli, DemoPrintsTheTutorialNumbersAndWritesTheHeatmap) {
  const fs::path out = dir_ / "demo-out";  // does not exist yet: the demo creates it
  const CliRun run = run_qkv("demo --out '" + out.string() + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string& text = run.output;
  // §2.4, computed by qkv::simple_attention.
  for (const char* number : {"0.506", "0.307", "0.186", "5.06", "6.14"}) {
    EXPECT_TRUE(contains(text, number)) << "missing " << number << " in:\n" << text;
  }
  // §5.2-5.5 shapes and §5.6 checks.
  EXPECT_TRUE(contains(text, "input shape: [2, 4, 8]")) << text;
  EXPECT_TRUE(contains(text, "output shape: [2, 4, 8]")) << text;
  EXPECT_TRUE(contains(text, "attention shape: [2, 2, 4, 4]")) << text;
  EXPECT_TRUE(contains(text, "output has nan: false")) << text;
  EXPECT_FALSE(contains(text, "output has nan: true")) << text;
  // §7.4: torch's print of tril(ones(4, 4)).
  EXPECT_TRUE(contains(text, "tensor([[1., 0., 0., 0.],\n")) << text;
  EXPECT_TRUE(contains(text, "[1., 1., 1., 1.]])")) << text;
  EXPECT_TRUE(contains(text, "README")) << text;
  // Output is piped here, so no colour codes.
  EXPECT_FALSE(contains(text, "\x1b[")) << text;

  const fs::path png = out / "attention_b0_h0.png";
  ASSERT_TRUE(fs::exists(png)) << text;
  EXPECT_TRUE(contains(text, png.string())) << text;
  std::ifstream in(png, std::ios::binary);
  std::string signature(8, '\0');
  in.read(signature.data(), 8);
  EXPECT_EQ(signature, "\x89PNG\r\n\x1a\n");
}

TEST_F(Cli, DemoIsReproducibleForASeed) {
  const std::string out = "--out '" + (dir_ / "a").string() + "'";
  const CliRun first = run_qkv("demo --seed 7 " + out);
  const CliRun second = run_qkv("demo --seed 7 " + out);
  const CliRun other = run_qkv("demo --seed 8 " + out);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(first.output, second.output);
  EXPECT_NE(first.output, other.output);
  // The §2.4 example has no randomness.
  EXPECT_TRUE(contains(other.output, "0.506")) << other.output;
}

TEST_F(Cli, UnknownOptionFailsWithAHint) {
  const CliRun run = run_qkv("demo --bogus");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_TRUE(contains(run.output, "--bogus")) << run.output;
  EXPECT_TRUE(contains(run.output, "qkv demo --help")) << run.output;
}

TEST_F(Cli, UnknownCommandFailsWithAHint) {
  const CliRun run = run_qkv("frobnicate");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_TRUE(contains(run.output, "frobnicate")) << run.output;
  EXPECT_TRUE(contains(run.output, "qkv --help")) << run.output;
}

TEST_F(Cli, UnusableOutDirIsAnErrorNotACrash) {
  const fs::path file = dir_ / "a-file";
  std::ofstream(file) << "not a directory";
  const CliRun run = run_qkv("demo --out '" + (file / "sub").string() + "'");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(contains(run.output, "qkv demo: error:")) << run.output;
  EXPECT_TRUE(contains(run.output, "--out")) << run.output;
}

TEST_F(Cli, HelpAndVersion) {
  const CliRun help = run_qkv("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(contains(help.output, "demo")) << help.output;

  const CliRun demo_help = run_qkv("demo --help");
  EXPECT_EQ(demo_help.exit_code, 0);
  EXPECT_TRUE(contains(demo_help.output, "--seed")) << demo_help.output;
  EXPECT_TRUE(contains(demo_help.output, "--out")) << demo_help.output;

  const CliRun version = run_qkv("--version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_TRUE(contains(version.output, std::string("qkv ") + QKV_EXPECTED_VERSION))
      << version.output;

  const CliRun bare = run_qkv("");
  EXPECT_NE(bare.exit_code, 0);
  EXPECT_TRUE(contains(bare.output, "demo")) << bare.output;
}

}  // namespace
