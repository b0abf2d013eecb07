// The `qkv` command-line tool, run as a user would run it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_files.h"
#include "cli_runner.h"

#ifndef QKV_EXPECTED_VERSION
#define QKV_EXPECTED_VERSION ""
#endif

namespace {

using namespace qkv_test;

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
  expect_output_has(other, {"0.506"});
}

TEST_F(Cli, UnknownOptionFailsWithAHint) {
  const CliRun run = run_qkv("demo --bogus");
  expect_failure(run, {"--bogus", "qkv demo --help"});
  EXPECT_EQ(run.exit_code, 2) << "a wrong command line exits 2";
}

TEST_F(Cli, UnknownCommandFailsWithAHint) {
  const CliRun run = run_qkv("frobnicate");
  expect_failure(run, {"frobnicate", "qkv --help"});
  EXPECT_EQ(run.exit_code, 2) << "a wrong command line exits 2";
}

TEST_F(Cli, UnusableOutDirIsAnErrorNotACrash) {
  const fs::path file = dir_ / "a-file";
  std::ofstream(file) << "not a directory";
  const CliRun run = run_qkv("demo --out '" + (file / "sub").string() + "'");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  expect_output_has(run, {"qkv demo: error:", "--out"});
}

TEST_F(Cli, HelpAndVersion) {
  const CliRun help = run_qkv("--help");
  EXPECT_EQ(help.exit_code, 0);
  expect_output_has(help, {"demo"});

  const CliRun demo_help = run_qkv("demo --help");
  EXPECT_EQ(demo_help.exit_code, 0);
  expect_output_has(demo_help, {"--seed", "--out"});

  const CliRun version = run_qkv("--version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_TRUE(contains(version.output, std::string("qkv ") + QKV_EXPECTED_VERSION))
      << version.output;

  const CliRun bare = run_qkv("");
  expect_failure(bare, {"demo"});
  EXPECT_EQ(bare.exit_code, 2) << "no command: the help, and exit 2";
}

// `qkv serve` runs qkv-serve, built beside qkv: its help, and its errors
// named as `qkv serve`'s, with the usage exit code.
TEST_F(Cli, ServeRunsTheServerExecutableWithTheSameArguments) {
  const CliRun help = run_qkv("serve --help");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  expect_output_has(help, {"Usage: qkv serve", "--parallel", "--embed-model"});

  const CliRun wrong = run_qkv("serve --port 99999");
  expect_failure(wrong, {"qkv serve: error: --port", "qkv serve --help"});
  EXPECT_EQ(wrong.exit_code, 2) << wrong.output;

  const CliRun nothing = run_qkv("serve");
  expect_failure(nothing, {"qkv serve: error: give --model"});
  EXPECT_EQ(nothing.exit_code, 1) << nothing.output;
}

}  // namespace

// --- `qkv embed` and `qkv similarity` (all-MiniLM-L6-v2 from scripts/fetch_model.sh) ---------
// Their numbers are checked against sentence-transformers in
// python/tests/test_sentence_embeddings.py; here: files, formats and errors.

namespace {

// The embeddings of `qkv embed`'s JSON (OpenAI's shape: data[i].embedding),
// among whatever else the command printed (stderr comes after it).
std::vector<std::vector<double>> json_embeddings(const std::string& output) {
  const size_t begin = output.find('{'), end = output.rfind('}');
  if (begin == std::string::npos || end == std::string::npos) return {};
  const nlohmann::json json = nlohmann::json::parse(output.substr(begin, end + 1 - begin));
  std::vector<std::vector<double>> rows;
  for (const nlohmann::json& item : json.at("data"))
    rows.push_back(item.at("embedding").get<std::vector<double>>());
  return rows;
}

// In double, of float rows (.npy) or double ones (JSON).
template <class T>
double dot(const std::vector<T>& a, const std::vector<T>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

}  // namespace

TEST_F(Cli, EmbedWithoutTheModelSaysHowToFetchIt) {
  const fs::path absent = dir_ / "models" / "all-MiniLM-L6-v2";
  const CliRun run = run_qkv("embed hello --model '" + absent.string() + "'");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  expect_output_has(
      run, {"qkv embed: error:",
            absent.string() + "' is not a directory, nor a model id in the Hugging Face cache",
            "scripts/fetch_model.sh"});
  // The default, relative to the working directory, is where that script puts the model.
  const CliRun help = run_qkv("embed --help");
  expect_output_has(help, {"models/all-MiniLM-L6-v2"});

  const CliRun other = run_qkv("similarity a b --model '" + (dir_ / "nope").string() + "'");
  EXPECT_EQ(other.exit_code, 1) << other.output;
  expect_output_has(other, {(dir_ / "nope").string()});

  const CliRun format = run_qkv("embed hello --output '" + (dir_ / "e.csv").string() + "'");
  EXPECT_EQ(format.exit_code, 1) << format.output;
  expect_output_has(format, {".json or .npy"});
  EXPECT_FALSE(fs::exists(dir_ / "e.csv"));
}

// The default model path works from any directory: the binary of a build
// tree knows its checkout's models/, and QKV_MODELS names another folder.
TEST_F(Cli, DefaultModelPathWorksFromAnyDirectory) {
  const fs::path models = fs::path(source_dir()) / "models";
  if (!fs::is_directory(models / "all-MiniLM-L6-v2"))
    GTEST_SKIP() << "models/all-MiniLM-L6-v2 is missing: run scripts/fetch_model.sh";
  const std::string elsewhere = "cd '" + dir_.string() + "' && ";
  const CliRun run = run_qkv("similarity a b");  // from the test's working directory
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const std::string qkv = std::string("'") + cli_path() + "'";
  for (const std::string& env : {std::string(), "QKV_MODELS='" + models.string() + "' "}) {
    const std::string command = elsewhere + env + qkv + " similarity a b >/dev/null 2>&1";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
  }
}

// A Hugging Face id found in the local cache, as qkv.SentenceEncoder finds it.
TEST_F(Cli, EmbedFindsAModelIdInTheHuggingFaceCache) {
  QKV_SKIP_WITHOUT_MINILM();
  const fs::path repo = dir_ / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2";
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  fs::create_directories(repo / "snapshots");
  fs::create_directory_symlink(qkv_test::minilm_dir(), repo / "snapshots" / commit);
  fs::create_directories(repo / "refs");
  std::ofstream(repo / "refs" / "main") << commit;
  const std::string cache = "HF_HUB_CACHE='" + (dir_ / "hub").string() + "' ";
  const std::string qkv = std::string("'") + cli_path() + "'";
  const std::string direct = "'" + qkv_test::minilm_dir().string() + "'";
  std::string outputs[3];
  const std::string models[3] = {direct, "sentence-transformers/all-MiniLM-L6-v2",
                                 "all-MiniLM-L6-v2"};
  for (int i = 0; i < 3; ++i) {
    const fs::path out = dir_ / ("e" + std::to_string(i) + ".npy");
    const std::string command = "cd '" + dir_.string() + "' && " + cache + qkv +
                                " embed 'A cat sits.' --model " + models[i] + " -o '" +
                                out.string() + "' >/dev/null 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    outputs[i] = read_bytes(out);
  }
  EXPECT_EQ(outputs[1], outputs[0]);
  EXPECT_EQ(outputs[2], outputs[0]);
}

TEST_F(Cli, EmbedWritesJsonAndNpyWithTheSameRows) {
  QKV_SKIP_WITHOUT_MINILM();
  const std::string model = "--model '" + qkv_test::minilm_dir().string() + "'";
  // Arguments and stdin give the same texts, in order; an argument may be
  // empty, a blank line of stdin is skipped.
  const CliRun json = run_qkv("embed " + model + " 'A cat sits.' 'Stocks fell \"sharply\".' ''");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  expect_output_has(json, {"\"object\": \"list\"", "\"model\": \"all-MiniLM-L6-v2\""});
  const auto from_json = json_embeddings(json.output);
  ASSERT_EQ(from_json.size(), 3u);

  std::ofstream(dir_ / "in.txt") << "A cat sits.\r\nStocks fell \"sharply\".\n\n";
  const fs::path npy = dir_ / "e.npy";
  const CliRun file = run_qkv("embed " + model + " -o '" + npy.string() + "' < '" +
                              (dir_ / "in.txt").string() + "'");
  ASSERT_EQ(file.exit_code, 0) << file.output;
  const std::string bytes = read_bytes(npy);
  ASSERT_GT(bytes.size(), 128u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_TRUE(contains(bytes.substr(0, 128),
                       "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 384), }"));
  EXPECT_EQ((10 + static_cast<unsigned char>(bytes[8])) % 64, 0u);  // data aligned to 64
  EXPECT_EQ(bytes.size(), 128u + 2 * 384 * 4);
  const auto from_npy = npy_rows(bytes, 384);
  expect_output_has(file, {"skipped 1 blank line of stdin; 2 texts remain"});

  ASSERT_EQ(from_npy.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(from_json[i].size(), 384u);
    EXPECT_NEAR(dot(from_npy[i], from_npy[i]), 1.0, 1e-5);  // L2-normalised
    for (size_t j = 0; j < 384; ++j)
      ASSERT_EQ(static_cast<float>(from_json[i][j]), static_cast<float>(from_npy[i][j]))
          << "row " << i << " element " << j;
  }
  EXPECT_LT(dot(from_npy[0], from_npy[1]), 0.5);  // unrelated texts
}

TEST_F(Cli, EmbedPrecisionIsAChoiceOfTheModel) {
  QKV_SKIP_WITHOUT_MINILM();
  const std::string model = "--model '" + qkv_test::minilm_dir().string() + "'";
  const std::string texts = "'A cat sits on the mat.' 'Stocks fell sharply.'";
  std::vector<std::vector<std::vector<double>>> rows;
  for (const char* precision : {"float32", "bf16", "int8"}) {
    const CliRun run =
        run_qkv("embed --stats --precision " + std::string(precision) + " " + model + " " + texts);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const char* canonical = precision == std::string("bf16") ? "bfloat16" : precision;
    expect_output_has(run, {std::string(canonical) + ", mean pooling, normalized, batch size"});
    rows.push_back(json_embeddings(run.output));
    ASSERT_EQ(rows.back().size(), 2u) << run.output;
  }
  for (size_t p = 1; p < 3; ++p)
    for (size_t i = 0; i < 2; ++i) {
      const double cosine = dot(rows[p][i], rows[0][i]);
      EXPECT_GT(cosine, p == 1 ? 0.9995 : 0.995) << "precision " << p << ", row " << i;
      EXPECT_LT(cosine, 1.0 - 1e-9) << "precision " << p << " computed in float32";
    }
  const CliRun bad = run_qkv("embed --precision fp16 hello " + model);
  EXPECT_NE(bad.exit_code, 0);
  expect_output_has(bad, {"--precision", "fp16", "bfloat16", "int8"});
}

TEST_F(Cli, SimilarityPrintsTheCosinesWithCutLabels) {
  QKV_SKIP_WITHOUT_MINILM();
  const std::string model = "--model '" + qkv_test::minilm_dir().string() + "'";
  const std::string texts =
      "'A man is eating food.' 'A man is eating a piece of bread.' "
      "'The girl is carrying a baby on her back through the crowded market.'";
  const CliRun run = run_qkv("similarity --label-width 24 " + model + " " + texts);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const CliRun embed =
      run_qkv("embed " + model + " -o '" + (dir_ / "e.npy").string() + "' " + texts);
  ASSERT_EQ(embed.exit_code, 0) << embed.output;
  const auto e = npy_rows(read_bytes(dir_ / "e.npy"), 384);
  ASSERT_EQ(e.size(), 3u);

  std::vector<std::string> lines;
  for (size_t at = 0, end; (end = run.output.find('\n', at)) != std::string::npos; at = end + 1)
    lines.push_back(run.output.substr(at, end - at));
  ASSERT_EQ(lines.size(), 4u) << run.output;
  EXPECT_TRUE(contains(lines[0], "[1]") && contains(lines[0], "[3]")) << run.output;
  EXPECT_TRUE(contains(lines[1], "[1] A man is eating food.")) << run.output;
  EXPECT_TRUE(contains(lines[2], "[2] A man is eating a piece\xe2\x80\xa6")) << run.output;
  EXPECT_TRUE(contains(lines[3], "[3] The girl is carrying a\xe2\x80\xa6")) << run.output;
  for (size_t i = 1; i <= 3; ++i) {
    // Every cell: cos(e_i, e_j) to 3 decimals, aligned in 8 columns.
    const std::string cells = lines[i].substr(lines[i].size() - 24);
    for (size_t j = 0; j < 3; ++j) {
      char expected[16];
      std::snprintf(expected, sizeof expected, "%8.3f", dot(e[i - 1], e[j]));
      EXPECT_EQ(cells.substr(8 * j, 8), expected) << run.output;
    }
  }
  EXPECT_TRUE(contains(lines[1], "   1.000   0.7")) << run.output;  // close meanings
}

// --- `qkv train recall` ------------------------------------------------------------------
// Learning itself is tested in test_recall_task.cc; here: output, files and errors.

namespace {

TEST_F(Cli, TrainRecallPrintsBothAccuraciesAndWritesHeatmaps) {
  const fs::path out = dir_ / "recall";
  const CliRun run =
      run_qkv("train recall --pairs 2 --steps 100 --seed 1 --threads 1 --examples 2 --out '" +
              out.string() + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string& text = run.output;
  for (const char* part : {"attention  accuracy", "mean-pool  accuracy", "on matching key",
                           "step   100/100", "tok/s", "left"})
    EXPECT_TRUE(contains(text, part)) << "missing '" << part << "' in:\n" << text;
  // Piped: plain lines, no redrawing or colour.
  EXPECT_FALSE(contains(text, "\r")) << text;
  EXPECT_FALSE(contains(text, "\x1b[")) << text;
  for (int e = 0; e < 2; ++e)
    for (int layer = 0; layer < 2; ++layer)
      for (int head = 0; head < 4; ++head) {
        const fs::path png =
            out / ("example" + std::to_string(e) + "_layer" + std::to_string(layer) + "_head" +
                   std::to_string(head) + ".png");
        ASSERT_TRUE(fs::exists(png)) << png;
        EXPECT_EQ(read_bytes(png).substr(0, 8), "\x89PNG\r\n\x1a\n");
      }
  EXPECT_FALSE(fs::exists(out / "example2_layer0_head0.png"));
  const std::string tokens = read_bytes(out / "tokens.txt");
  EXPECT_TRUE(contains(tokens, "example0: V")) << tokens;
  EXPECT_TRUE(contains(tokens, "example1: V")) << tokens;
}

TEST_F(Cli, TrainRecallRejectsBadOptions) {
  const CliRun zero = run_qkv("train recall --pairs 0");
  expect_failure(zero, {"qkv train recall --help"});
  EXPECT_EQ(zero.exit_code, 2);
  const CliRun bare = run_qkv("train");
  expect_failure(bare, {"recall"});
  EXPECT_EQ(bare.exit_code, 2);
}

}  // namespace
