// The `qkv` commands' inputs and outputs, run as a user would: numeric flags
// refused in one short line naming the flag, --threads everywhere, texts from
// -f FILE, and `qkv embed`'s OpenAI-shaped JSON against its .npy.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_files.h"
#include "cli_runner.h"
#include "qkv/models/sentence_encoder.h"
#include "qkv/runtime.h"
#include "tiny_llama_gguf.h"

namespace {

using namespace qkv_test;

// The commands that compute. The train commands (their ranges use the same
// validators) are checked below by name: they would start training on a
// valid value.
const char* const kCommands[] = {"demo", "generate", "chat", "embed", "similarity", "bench"};
const char* const kTrainCommands[] = {"train recall", "train lm", "train fortunes"};

// The line of `output` that holds "error:", or "".
std::string error_line(const std::string& output) {
  const size_t at = output.find("error:");
  if (at == std::string::npos) return "";
  const size_t begin = output.rfind('\n', at);
  const size_t end = output.find('\n', at);
  return output.substr(begin == std::string::npos ? 0 : begin + 1,
                       end == std::string::npos
                           ? std::string::npos
                           : end - (begin == std::string::npos ? 0 : begin + 1));
}

// Expects `qkv <args>` to fail with a parse error whose one line is short and
// says `message`.
void expect_short_error(const std::string& args, const std::string& message, CallSite where = {}) {
  const ::testing::ScopedTrace trace(where.file, where.line, args);
  const CliRun run = run_qkv(args);
  EXPECT_EQ(run.exit_code, 2) << "a parse error, before running: " << run.output;
  const std::string line = error_line(run.output);
  EXPECT_TRUE(contains(line, message)) << "missing \"" << message << "\" in:\n" << run.output;
  EXPECT_LT(line.size(), 100u) << line;
}

TEST_F(Cli, RangeErrorsNameTheFlagTheValueAndTheRange) {
  const fs::path file = dir_ / "model.gguf";  // parsing fails before the file is read
  std::ofstream(file) << "x";
  const std::string gguf = "'" + file.string() + "'";
  expect_short_error("embed --batch-size 0 a", "qkv embed: error: --batch-size: 0 is not ≥ 1");
  expect_short_error("embed --batch-size=99999999999999999999 a",
                     "--batch-size: 99999999999999999999 is not in [1, 9223372036854775807]");
  expect_short_error("embed --batch-size=999999999999999999999999999999999 a",
                     "--batch-size: 9999999999999999… is not in [1, 9223372036854775807]");
  expect_short_error("embed --batch-size 1.5 a", "--batch-size: '1.5' is not an integer");
  expect_short_error("embed --threads two a", "--threads: 'two' is not an integer");
  expect_short_error("similarity --threads=-1 a", "--threads: -1 is not in [0, 1024]");
  expect_short_error("similarity --label-width 3 a", "--label-width: 3 is not in [4, 1000]");
  expect_short_error("generate " + gguf + " --top-p 1.5", "--top-p: 1.5 is not in (0, 1]");
  expect_short_error("generate " + gguf + " --top-p 0", "--top-p: 0 is not in (0, 1]");
  expect_short_error("generate " + gguf + " --temperature=-0.5", "--temperature: -0.5 is not ≥ 0");
  expect_short_error("generate " + gguf + " --temperature nan",
                     "--temperature: 'nan' is not a finite number");
  expect_short_error("chat " + gguf + " --top-k=-2", "--top-k: -2 is not ≥ 0");
  expect_short_error("chat " + gguf + " --seed=-1",
                     "--seed: -1 is not in [0, 18446744073709551615]");
  expect_short_error("chat " + gguf + " --context 0", "--context: 0 is not ≥ 1");
  expect_short_error("demo --threads 5000", "--threads: 5000 is not in [0, 1024]");
  expect_short_error("bench --threads 1,-2", "--threads: -2 is not in [0, 1024]");
  expect_short_error("train recall --steps 0", "--steps: 0 is not ≥ 1");
  expect_short_error("train lm --lr 0", "--lr: 0 is not > 0");
  expect_short_error("train lm --context 1", "--context: 1 is not in [2, 4096]");
  expect_short_error("train fortunes --held-out 5", "--held-out: 5 is not in [0.01, 0.9]");
  expect_short_error("train recall --pairs 17", "--pairs: 17 is not in [1, 16]");
}

// Every numeric option that --help lists, given a huge or a non-number value:
// refused in a line under 100 characters that names the option.
TEST_F(Cli, EveryNumericFlagRefusesBadValuesBriefly) {
  const fs::path file = dir_ / "model.gguf";  // for the commands' positional files
  std::ofstream(file) << "x";
  const std::regex numeric(R"(^\s+(?:-\w, ?)?(--[\w-]+)(?:,-\w)? (INT|UINT|FLOAT|N)\b)");
  int checked = 0;
  for (const char* command : kCommands) {
    const CliRun help = run_qkv(std::string(command) + " --help");
    ASSERT_EQ(help.exit_code, 0) << help.output;
    std::istringstream lines(help.output);
    for (std::string line; std::getline(lines, line);) {
      std::smatch m;
      if (!std::regex_search(line, m, numeric)) continue;
      const std::string flag = m[1];
      for (const std::string value : {"x", "-1e999", "9999999999999999999999999999"}) {
        const std::string args = std::string(command) + " " + flag + "=" + value + " '" +
                                 file.string() + "' < /dev/null";
        const CliRun run = run_qkv(args);
        // 1e28 is a valid value of an unbounded float (--temperature): then the
        // command runs and fails on the file, not on the flag.
        if (value.size() > 20 && m[2] == "FLOAT" && run.exit_code == 1) continue;
        EXPECT_EQ(run.exit_code, 2) << "a parse error, before running: " << args << "\n"
                                    << run.output;
        const std::string error = error_line(run.output);
        EXPECT_TRUE(contains(error, flag)) << args << "\n" << run.output;
        EXPECT_LT(error.size(), 100u) << args << "\n" << error;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 3 * 20);  // the options found in the help texts
}

TEST_F(Cli, EveryComputingCommandHasThreads) {
  std::vector<std::string> commands(std::begin(kCommands), std::end(kCommands));
  commands.insert(commands.end(), std::begin(kTrainCommands), std::end(kTrainCommands));
  for (const std::string& command : commands) {
    const CliRun help = run_qkv(command + " --help");
    expect_output_has(help, {"--threads"});
  }
  // And uses it: --stats reports the count.
  const fs::path model = dir_ / "tiny.gguf";
  const std::vector<std::byte> bytes = tiny_llama();
  std::ofstream(model, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  for (const char* threads : {"1", "2"}) {
    const CliRun run = run_qkv("generate '" + model.string() + "' --prompt ab --greedy " +
                               "--max-new-tokens 3 --stats --threads " + threads);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    expect_output_has(run, {std::string("; ") + threads + " threads"});
  }
}

TEST_F(Cli, TextFilesNeedToExistAndNotCompeteWithArguments) {
  // Checked before the model is loaded: no model needed.
  expect_failure(run_qkv("embed -f '" + (dir_ / "absent.txt").string() + "'"),
                 {"qkv embed: error: -f '", "absent.txt': cannot read it"});
  std::ofstream(dir_ / "blank.txt") << "\n  \n\t\n";
  expect_failure(run_qkv("similarity -f '" + (dir_ / "blank.txt").string() + "'"),
                 {"skipped 3 blank lines", "no texts in -f '"});
  expect_failure(run_qkv("embed a -f '" + (dir_ / "blank.txt").string() + "'"),
                 {"as arguments or with -f", "not both"});
  expect_failure(run_qkv("embed --format csv a"), {"--format", "csv"});
}

// --- With all-MiniLM-L6-v2 (scripts/fetch_model.sh) ----------------------------------

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

TEST_F(Cli, EmbedJsonHasOpenAisShapeAndTheNpyValues) {
  QKV_SKIP_WITHOUT_MINILM();
  const std::string model = "--model '" + minilm_dir().string() + "/'";
  // Blank and whitespace lines are skipped, CRLF ends are dropped.
  std::ofstream(dir_ / "in.txt") << "A cat sits.\r\n\n   \nStocks fell sharply.\n\n";
  const std::string file = " -f '" + (dir_ / "in.txt").string() + "'";
  const CliRun json = run_qkv("embed --format json " + model + file);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  // stderr (merged here) says what was skipped, before the JSON.
  expect_output_has(json, {"qkv embed: skipped 3 blank lines of -f '"});
  const nlohmann::json j = nlohmann::json::parse(json.output.substr(json.output.find('{')));
  EXPECT_EQ(j.at("object"), "list");
  EXPECT_EQ(j.at("model"), "all-MiniLM-L6-v2");
  ASSERT_EQ(j.at("data").size(), 2u) << json.output;
  const qkv::models::SentenceEncoder encoder(minilm_dir());
  const int64_t tokens = static_cast<int64_t>(encoder.token_ids("A cat sits.").size() +
                                              encoder.token_ids("Stocks fell sharply.").size());
  EXPECT_EQ(j.at("usage").at("prompt_tokens").get<int64_t>(), tokens);
  EXPECT_EQ(j.at("usage").at("total_tokens").get<int64_t>(), tokens);

  // --format npy whatever the file's name; the same values, float for float.
  const fs::path npy = dir_ / "e.bin";
  const CliRun binary = run_qkv("embed --format npy -o '" + npy.string() + "' " + model + file);
  ASSERT_EQ(binary.exit_code, 0) << binary.output;
  const auto rows = npy_rows(read_bytes(npy), 384);
  ASSERT_EQ(rows.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const nlohmann::json& item = j.at("data").at(i);
    EXPECT_EQ(item.at("object"), "embedding");
    EXPECT_EQ(item.at("index").get<size_t>(), i);
    const std::vector<float> embedding = item.at("embedding").get<std::vector<float>>();
    ASSERT_EQ(embedding.size(), 384u);
    EXPECT_EQ(embedding, rows[i]) << "row " << i;
  }
  // The file's texts are those of the arguments.
  const CliRun args = run_qkv("embed " + model + " 'A cat sits.' 'Stocks fell sharply.'");
  ASSERT_EQ(args.exit_code, 0) << args.output;
  EXPECT_EQ(nlohmann::json::parse(args.output), j);
}

TEST_F(Cli, EmbedPoolingAndNormalizeOverrideTheModel) {
  QKV_SKIP_WITHOUT_MINILM();
  const std::string model = "--model '" + minilm_dir().string() + "'";
  const std::vector<std::string> texts = {"A man is eating food.", "The market is crowded."};
  const std::string args = " '" + texts[0] + "' '" + texts[1] + "'";
  std::vector<std::vector<std::vector<float>>> results;
  for (const char* flags : {"--pooling cls --no-normalize", "--pooling cls --normalize"}) {
    const fs::path npy = dir_ / "e.npy";
    const CliRun run = run_qkv("embed --threads 1 " + std::string(flags) + " -o '" + npy.string() +
                               "' " + model + args);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    results.push_back(npy_rows(read_bytes(npy), 384));
    ASSERT_EQ(results.back().size(), 2u);
  }
  // The library with the same overrides is the reference.
  qkv::set_num_threads(1);
  qkv::models::SentenceEncoder encoder(minilm_dir());
  encoder.set_pooling(qkv::models::Pooling::kCls);
  encoder.set_normalize(false);
  const qkv::Tensor cls = encoder.encode(texts);  // [2, 384]
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_GT(std::abs(norm(results[0][i]) - 1.0), 0.1) << "not normalised";
    EXPECT_NEAR(norm(results[1][i]), 1.0, 1e-5);
    const double n = norm(results[0][i]);
    for (int64_t d = 0; d < 384; ++d) {
      EXPECT_NEAR(results[0][i][d], cls.at({i, d}), 1e-5) << i << ", " << d;
      EXPECT_NEAR(results[1][i][d], cls.at({i, d}) / n, 1e-5) << i << ", " << d;
    }
  }
  expect_failure(run_qkv("embed --normalize --no-normalize a " + model), {"--normalize"});
}

}  // namespace
