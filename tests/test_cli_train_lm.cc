// `qkv train lm`, run as a user would: a tiny run on a text file of the
// test's own writes a model that `qkv generate` reads unchanged; a missing
// text file is a clear error.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "cli_files.h"
#include "cli_runner.h"

namespace {

using namespace qkv_test;

TEST_F(Cli, TrainLmWritesAModelThatGenerateReads) {
  const fs::path text = dir_ / "tiny.fortunes";
  write_fortunes(text);
  const fs::path out = dir_ / "tiny";
  const CliRun run = run_qkv("train lm --text '" + text.string() +
                             "' --steps 12 --batch-size 4 --context 16 --layers 1 --d-model 16 "
                             "--heads 2 --sample-tokens 16 --threads 1 --out '" +
                             out.string() + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const fs::path model = out / "last.safetensors";
  expect_output_has(run, {"bits/char", "unigram baseline", "step    12/12", "qkv generate",
                          model.string(), (out / "best.safetensors").string()});
  EXPECT_FALSE(contains(run.output, "\x1b[")) << run.output;  // piped: no colour
  ASSERT_TRUE(fs::exists(model));
  ASSERT_TRUE(fs::exists(out / "best.safetensors"));

  const CliRun gen = run_qkv("generate '" + model.string() + "' --max-new-tokens 16 --seed 3");
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  // Every generated character comes from the training text's vocabulary
  // (none is '%', which only appeared in separator lines).
  const std::string vocab =
      "The early bird gets the worm, but the second mouse gets the cheese.\n"
      "A clean desk is a sign of a cluttered desk drawer.\n"
      "Never put off until tomorrow what you can do the day after tomorrow.\n\t\t-- Mark Twain\n"
      "Time flies like an arrow; fruit flies like a banana.\n";
  for (char c : gen.output)
    EXPECT_NE(vocab.find(c), std::string::npos) << "character " << int(c) << " in:\n" << gen.output;

  // The same model in low precision: greedy text from the same vocabulary.
  for (const char* precision : {"bf16", "int8"}) {
    const CliRun low = run_qkv("generate '" + model.string() +
                               "' --greedy --max-new-tokens 16 --precision " + precision);
    ASSERT_EQ(low.exit_code, 0) << precision << ": " << low.output;
    for (char c : low.output)
      EXPECT_NE(vocab.find(c), std::string::npos) << precision << " character " << int(c);
  }
}

TEST_F(Cli, TrainLmNamesAMissingTextFile) {
  const fs::path missing = dir_ / "no-such-file.txt";
  const CliRun run = run_qkv("train lm --text '" + missing.string() + "' --steps 1 --out '" +
                             (dir_ / "m.safetensors").string() + "'");
  expect_failure(run, {missing.string(), "no such file"});
  EXPECT_FALSE(fs::exists(dir_ / "m.safetensors"));
}

TEST_F(Cli, TrainLmRejectsAnEmptyTextFile) {
  const fs::path empty = dir_ / "empty.txt";
  std::ofstream(empty) << "\n%\n\n";
  const CliRun run = run_qkv("train lm --text '" + empty.string() + "' --steps 1 --out '" +
                             (dir_ / "m.safetensors").string() + "'");
  expect_failure(run, {empty.string(), "empty"});
}

// The sample after training cannot continue past the model's context
// (max_seq_len): refused before the first step, not after the last.
TEST_F(Cli, TrainLmRefusesASampleLongerThanTheContextBeforeTraining) {
  const fs::path text = dir_ / "tiny.fortunes";
  write_fortunes(text);
  const CliRun run =
      run_qkv("train lm --text '" + text.string() +
              "' --steps 100000 --context 16 --sample-tokens 17 --threads 1 --out '" +
              (dir_ / "m").string() + "'");
  expect_failure(run, {"--sample-tokens (17) must be at most --context (16)"});
  EXPECT_FALSE(contains(run.output, "step ")) << run.output;  // no training started
}

// Training would run every step and then fail to save the vocabulary: the
// corpus is checked first. Overlong forms, UTF-16 surrogates and stray bytes.
TEST_F(Cli, TrainLmRejectsInvalidUtf8BeforeTraining) {
  const char* cases[] = {"\xc0\xaf", "\xed\xa0\x80", "\xe0\x80\xaf", "\xf4\x90\x80\x80", "\xff"};
  for (const char* bad : cases) {
    const fs::path text = dir_ / "bad.txt";
    write_fortunes(text);
    std::ofstream(text, std::ios::app) << "line two\nan odd byte: " << bad << "\n%\n";
    const CliRun run =
        run_qkv("train lm --text '" + text.string() + "' --steps 100000 --threads 1 --out '" +
                (dir_ / "m.safetensors").string() + "'");
    EXPECT_EQ(run.exit_code, 1) << run.output;
    expect_output_has(run, {"not valid UTF-8", "line 69"});
    EXPECT_FALSE(contains(run.output, "step ")) << run.output;  // no training started
    expect_output_lacks(run, {"internal error"});
  }
}

// An --out that cannot be written, exists or names a file is found before the first step.
TEST_F(Cli, TrainLmChecksItsOutputBeforeTraining) {
  const fs::path text = dir_ / "tiny.fortunes";
  write_fortunes(text);
  const auto train_into = [&](const std::string& out) {
    return run_qkv("train lm --text '" + text.string() + "' --steps 100000 --threads 1 --out '" +
                   out + "'");
  };
  for (const std::string& out :
       {std::string("/proc/qkv-test"), (text / "sub").string()}) {  // text is a file
    const CliRun run = train_into(out);
    EXPECT_EQ(run.exit_code, 1) << run.output;
    expect_output_has(run, {"cannot create directory '" + out + "'"});
    expect_output_lacks(run, {"step "});
  }
  const CliRun exists = train_into(dir_.string());
  EXPECT_EQ(exists.exit_code, 1) << exists.output;
  expect_output_has(exists, {dir_.string(), "exists", "--force"});
  const CliRun file_name = train_into((dir_ / "lm.safetensors").string());
  EXPECT_EQ(file_name.exit_code, 1) << file_name.output;
  expect_output_has(file_name, {"looks like a file name", "last.safetensors"});
  expect_output_lacks(file_name, {"step "});
}

}  // namespace
