// `qkv bench`, run as a user would: --quick in well under a minute, its JSON
// lines and CSV rows, the workload selection and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "tiny_llama_gguf.h"

namespace {

using namespace qkv_test;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t at = 0, end; (end = text.find('\n', at)) != std::string::npos; at = end + 1)
    lines.push_back(text.substr(at, end - at));
  return lines;
}

// Checks one JSON line's statistics against its own per-rep seconds.
void expect_consistent(const nlohmann::json& row, int64_t reps) {
  const std::vector<double> seconds = row.at("seconds").get<std::vector<double>>();
  ASSERT_EQ(static_cast<int64_t>(seconds.size()), reps) << row;
  EXPECT_EQ(row.at("reps").get<int64_t>(), reps);
  const double work = row.at("work").get<double>();
  std::vector<double> rates;
  for (double s : seconds) {
    EXPECT_GT(s, 0.0) << row;
    rates.push_back(work / s);
  }
  const double mean = std::accumulate(rates.begin(), rates.end(), 0.0) / reps;
  double squares = 0;
  for (double r : rates) squares += (r - mean) * (r - mean);
  std::sort(rates.begin(), rates.end());
  EXPECT_NEAR(row.at("mean").get<double>(), mean, 1e-9 * mean) << row;
  EXPECT_NEAR(row.at("sd").get<double>(), std::sqrt(squares / (reps - 1)), 1e-9 * mean) << row;
  EXPECT_NEAR(row.at("median").get<double>(), rates[reps / 2], 1e-9 * mean) << row;  // odd reps
  EXPECT_GE(row.at("threads").get<int64_t>(), 1);
}

TEST_F(Cli, BenchQuickPrintsATableWellUnderAMinute) {
  const auto start = std::chrono::steady_clock::now();
  const CliRun run = run_qkv("bench --quick");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_LT(seconds, 60.0);
  const std::vector<std::string> lines = lines_of(run.output);
  ASSERT_GE(lines.size(), 6u) << run.output;
  EXPECT_TRUE(contains(lines[0], "| workload")) << run.output;
  EXPECT_TRUE(contains(lines[0], "mean ± sd")) << run.output;
  int rows = 0;
  for (const std::string& line : lines) rows += contains(line, "| sdpa/");
  EXPECT_EQ(rows, 4) << run.output;  // fwd and fwd+bwd, fp32 and bf16, one small point
  expect_output_has(run, {"sdpa/fwdbwd/bf16/B2-H8-L256-E64", "GFLOP/s", "qkv "});
  // Not a terminal: no progress redrawing.
  expect_output_lacks(run, {"\r", "\x1b["});
}

TEST_F(Cli, BenchJsonLinesParseAndAgreeWithTheirSamples) {
  const CliRun run = run_qkv("bench --quick --reps 3 --threads 1 -o jsonl -w sdpa/fwd");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<std::string> lines = lines_of(run.output);
  ASSERT_EQ(lines.size(), 2u) << run.output;  // fp32 and bf16
  for (const std::string& line : lines) {
    const nlohmann::json row = nlohmann::json::parse(line);
    EXPECT_EQ(row.at("unit"), "GFLOP/s");
    EXPECT_TRUE(row.at("workload").get<std::string>().starts_with("sdpa/fwd/")) << row;
    EXPECT_EQ(row.at("threads").get<int64_t>(), 1);
    // 4·B·H·L·S·E of B2-H8-L256-E64, in GFLOP.
    EXPECT_DOUBLE_EQ(row.at("work").get<double>(), 4.0 * 2 * 8 * 256 * 256 * 64 / 1e9);
    expect_consistent(row, 3);
  }
}

// tiny_llama's GGUF file in dir.
fs::path write_tiny_llama(const fs::path& dir) {
  const fs::path model = dir / "tiny.gguf";
  const std::vector<std::byte> bytes = tiny_llama();
  std::ofstream(model, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  return model;
}

TEST_F(Cli, BenchDecodesAGgufModelAndWritesCsv) {
  const fs::path model = write_tiny_llama(dir_);
  const CliRun csv =
      run_qkv("bench -m '" + model.string() + "' -w decode -p 8 -n 5 -r 3 -t 1,2 -o csv");
  ASSERT_EQ(csv.exit_code, 0) << csv.output;
  const std::vector<std::string> lines = lines_of(csv.output);
  ASSERT_EQ(lines.size(), 5u) << csv.output;  // header, pp and tg at 1 and 2 threads
  EXPECT_TRUE(lines[0].starts_with("workload,unit,threads,reps,mean,sd,median")) << csv.output;
  EXPECT_TRUE(lines[1].starts_with("decode/pp8,tok/s,1,3,")) << csv.output;
  EXPECT_TRUE(lines[2].starts_with("decode/pp8,tok/s,2,3,")) << csv.output;
  EXPECT_TRUE(lines[3].starts_with("decode/tg5,tok/s,1,3,")) << csv.output;
  EXPECT_TRUE(lines[4].starts_with("decode/tg5,tok/s,2,3,")) << csv.output;

  const CliRun json = run_qkv("bench -m '" + model.string() + "' -w decode/tg5 -n 5 -r 3 -o jsonl");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json row = nlohmann::json::parse(lines_of(json.output).at(0));
  EXPECT_EQ(row.at("work").get<double>(), 5.0);  // tokens per run
  expect_consistent(row, 3);

  // -o FILE: the extension names the format, the file holds what stdout would.
  const fs::path out = dir_ / "decode.csv";
  const CliRun to_file = run_qkv("bench -m '" + model.string() + "' -w decode/tg5 -n 5 -r 3 -o '" +
                                 out.string() + "'");
  ASSERT_EQ(to_file.exit_code, 0) << to_file.output;
  std::ifstream in(out);
  const std::string written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(lines_of(written).size(), 2u) << written;
  EXPECT_TRUE(lines_of(written)[1].starts_with("decode/tg5,tok/s,")) << written;
  expect_failure(run_qkv("bench -m '" + model.string() + "' -w decode/tg5 -o out.txt"),
                 {"'out.txt' is neither a format (md, csv, jsonl) nor a file name ending in"});
  // --kv-cache reaches the model: q8_0 blocks need a head dim of 32s, this one has 16.
  expect_failure(run_qkv("bench -m '" + model.string() + "' -w decode/tg5 -n 5 --kv-cache q8_0"),
                 {"q8_0"});
}

// -d, as llama-bench's: the cache holds that many tokens before the timed part.
TEST_F(Cli, BenchDecodesAtADepth) {
  const fs::path model = write_tiny_llama(dir_);
  const std::string m = "bench -m '" + model.string() + "' -w decode -p 8 -n 5 -r 2 -t 1 ";
  const CliRun csv = run_qkv(m + "-d 20 -o csv");
  ASSERT_EQ(csv.exit_code, 0) << csv.output;
  const std::vector<std::string> lines = lines_of(csv.output);
  ASSERT_EQ(lines.size(), 3u) << csv.output;
  EXPECT_TRUE(lines[1].starts_with("decode/pp8@d20,tok/s,1,2,")) << csv.output;
  EXPECT_TRUE(lines[2].starts_with("decode/tg5@d20,tok/s,1,2,")) << csv.output;
  const CliRun list = run_qkv(m + "-d 20 --list");
  EXPECT_TRUE(contains(list.output, "after 20 tokens in the cache (untimed)")) << list.output;
  // Past the model's context: refused by name, before any run.
  expect_failure(run_qkv(m + "-d 60"),  // tiny_llama's context_length is 64
                 {"needs 68 positions", "context of 64 tokens", "lower -d, -p or -n"});
  expect_failure(run_qkv(m + "-d -1"), {"--depth"});
}

TEST_F(Cli, BenchEmbedsWithASentenceModel) {
  QKV_SKIP_WITHOUT_MINILM();
  const CliRun run =
      run_qkv("bench -e '" + minilm_dir().string() + "' -w embed/B8-L32 -r 3 -o jsonl");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json row = nlohmann::json::parse(lines_of(run.output).at(0));
  EXPECT_EQ(row.at("unit"), "sent/s");
  EXPECT_EQ(row.at("work").get<double>(), 8.0);
  expect_consistent(row, 3);
}

TEST_F(Cli, BenchListsAndChecksItsWorkloads) {
  const CliRun list = run_qkv("bench --list");
  ASSERT_EQ(list.exit_code, 0) << list.output;
  expect_output_has(list, {"sdpa/fwd/fp32/B8-H8-L512-E64", "sdpa/fwdbwd/bf16/B2-H8-L2048-E64",
                           "decode/pp512", "decode/tg128", "embed/B32-L128"});
  expect_failure(run_qkv("bench -w nothing"), {"--workload 'nothing' names no workload"});
  expect_failure(run_qkv("bench -w decode"), {"needs a GGUF model: -m FILE.gguf"});
  expect_failure(run_qkv("bench -w embed/B8-L32"), {"--embed-model DIR"});
  expect_failure(run_qkv("bench -o xml"), {"--output", "xml"});
  expect_failure(run_qkv("bench --reps=0"), {"--reps: 0 is not in [1, 1000]"});
}

}  // namespace
