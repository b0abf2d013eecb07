// `qkv explore` as a user runs it: the page written, limits and bad input refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "checkout_paths.h"
#include "cli_runner.h"

namespace qkv_test {
namespace {

std::string minilm() { return std::string(source_dir()) + "/models/all-MiniLM-L6-v2"; }

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_F(Cli, ExploreWritesOneSelfContainedPage) {
  if (!fs::exists(fs::path(minilm()) / "model.safetensors")) GTEST_SKIP() << "no MiniLM";
  const fs::path page = dir_ / "attention.html";
  const CliRun run = run_qkv("explore " + minilm() +
                             " --text 'A cat sat.' --text-b 'It slept.' -o " + page.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  expect_output_has(run, {"10 tokens x 6 layers x 12 heads of all-MiniLM-L6-v2"});
  const std::string html = read(page);
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>"));
  EXPECT_NE(html.find("\"tokens\":[\"[CLS]\",\"a\",\"cat\",\"sat\",\".\",\"[SEP]\",\"it\""),
            std::string::npos);
  // Nothing to fetch: no src= or href= but the empty icon, no URL but SVG's namespace.
  EXPECT_EQ(html.find(" src="), std::string::npos);
  EXPECT_EQ(html.find("href=", html.find("data:,") + 1), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
}

TEST_F(Cli, ExploreRefusesLargeInputsAndBadModels) {
  if (!fs::exists(fs::path(minilm()) / "model.safetensors")) GTEST_SKIP() << "no MiniLM";
  const fs::path page = dir_ / "attention.html";
  expect_failure(run_qkv("explore " + minilm() + " --text 'A cat sat.' --max-weights 1000 -o " +
                         page.string()),
                 {"qkv explore: error:", "6 tokens x 6 layers x 12 heads", "2592 attention weights",
                  "max_weights = 1000"});
  EXPECT_FALSE(fs::exists(page));
  expect_failure(run_qkv("explore " + dir_.string() + " --text x -o " + page.string()),
                 {"qkv explore: error:", "config.json"});
  expect_failure(run_qkv("explore " + minilm() + " -o " + page.string()), {"--text is required"});
}

}  // namespace
}  // namespace qkv_test
