// `qkv train` cannot lose work, run as a user would: a run stopped by
// --stop-after or by Ctrl-C (SIGINT) saves a checkpoint and prints the
// command that resumes it; the resumed run ends with the parameters and the
// logged losses of an uninterrupted one, bit for bit; an existing --out is
// refused without --force; the best held-out model is kept beside the last;
// broken or foreign checkpoints are clear errors.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_files.h"
#include "cli_runner.h"
#include "qkv/io/safetensors.h"

namespace {

using namespace qkv_test;

std::string lm_args(const fs::path& text, int steps) {
  return "train lm --text '" + text.string() + "' --steps " + std::to_string(steps) +
         " --batch-size 4 --context 16 --layers 1 --d-model 16 --heads 2 --sample-tokens 0 "
         "--threads 1";
}

// Every tensor of two safetensors files, bit for bit.
void expect_same_tensors(const fs::path& a, const fs::path& b) {
  qkv::io::SafetensorsFile fa(a), fb(b);
  ASSERT_EQ(fa.names(), fb.names());
  for (const std::string& name : fa.names()) {
    const qkv::Tensor x = fa.load(name).contiguous(), y = fb.load(name).contiguous();
    ASSERT_EQ(x.numel(), y.numel()) << name;
    EXPECT_EQ(std::memcmp(x.data<float>(), y.data<float>(), x.numel() * sizeof(float)), 0)
        << name << " differs";
  }
}

// The progress lines ("lm  step  5/8  loss ...") of steps after `after`.
std::vector<std::string> step_lines(const std::string& output, int after) {
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find(" step ");
    if (at == std::string::npos || line.find(" loss ") == std::string::npos) continue;
    if (std::stoi(line.substr(at + 6)) > after)
      lines.push_back(line.substr(0, line.find(" tok/s") == std::string::npos
                                         ? line.size()
                                         : line.find("  ", line.find(" loss ") + 7)));
  }
  return lines;
}

TEST_F(Cli, TrainLmStoppedAndResumedEqualsStraightRun) {
  const fs::path text = dir_ / "t.fortunes";
  write_fortunes(text);
  const CliRun straight = run_qkv(lm_args(text, 10) + " --out '" + (dir_ / "a").string() + "'");
  ASSERT_EQ(straight.exit_code, 0) << straight.output;

  const fs::path b = dir_ / "b";
  const CliRun first = run_qkv(lm_args(text, 10) + " --stop-after 4 --out '" + b.string() + "'");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  expect_output_has(first, {"Stopped after step 4 of 10", "Resume with:", "--resume"});
  ASSERT_TRUE(fs::exists(b / "checkpoint.safetensors"));
  EXPECT_FALSE(fs::exists(b / "last.safetensors"));

  const CliRun rest =
      run_qkv(lm_args(text, 10) + " --resume '" + (b / "checkpoint.safetensors").string() + "'");
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  expect_output_has(rest, {"Resuming after step 4"});
  expect_same_tensors(dir_ / "a" / "last.safetensors", b / "last.safetensors");
  expect_same_tensors(dir_ / "a" / "best.safetensors", b / "best.safetensors");
  EXPECT_EQ(step_lines(rest.output, 4), step_lines(straight.output, 4)) << rest.output;
  EXPECT_EQ(step_lines(straight.output, 4).size(), 6u) << straight.output;
}

TEST_F(Cli, TrainLmCtrlCSavesAndResumesBitForBit) {
  const fs::path text = dir_ / "t.fortunes";
  write_fortunes(text);
  const int steps = 600;
  const fs::path b = dir_ / "b", log = dir_ / "log.txt";
  const std::string command = std::string("exec '") + cli_path() + "' " + lm_args(text, steps) +
                              " --out '" + b.string() + "' > '" + log.string() + "' 2>&1";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait for the first progress lines, then press Ctrl-C once.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::string seen;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(log);
    seen.assign(std::istreambuf_iterator<char>(in), {});
    if (seen.find("step    40/") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  std::ifstream in(log);
  const std::string output(std::istreambuf_iterator<char>(in), {});
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    GTEST_SKIP() << "the run finished before the interrupt arrived";
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 130) << output;
  EXPECT_TRUE(contains(output, "checkpoint saved to")) << output;
  EXPECT_TRUE(contains(output, "Resume with:")) << output;

  const CliRun rest =
      run_qkv(lm_args(text, steps) + " --resume '" + (b / "checkpoint.safetensors").string() + "'");
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  const CliRun straight = run_qkv(lm_args(text, steps) + " --out '" + (dir_ / "a").string() + "'");
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  expect_same_tensors(dir_ / "a" / "last.safetensors", b / "last.safetensors");
  EXPECT_EQ(
      step_lines(rest.output, 0),
      step_lines(straight.output,
                 std::stoi(rest.output.substr(rest.output.find("Resuming after step ") + 20))));
}

TEST_F(Cli, TrainRefusesAnExistingOutWithoutForce) {
  const fs::path text = dir_ / "t.fortunes";
  write_fortunes(text);
  const fs::path out = dir_ / "out";
  fs::create_directories(out);
  std::ofstream(out / "last.safetensors") << "a good model";
  const CliRun refused = run_qkv(lm_args(text, 2) + " --out '" + out.string() + "'");
  expect_failure(refused, {out.string(), "exists", "--force"});
  std::ifstream kept(out / "last.safetensors");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "a good model");

  const CliRun forced = run_qkv(lm_args(text, 2) + " --force --out '" + out.string() + "'");
  ASSERT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_GT(fs::file_size(out / "last.safetensors"), 100u);

  const CliRun recall = run_qkv("train recall --steps 2 --examples 0 --out '" + out.string() + "'");
  expect_failure(recall, {"exists", "--force"});
}

// The held-out entries (every 10th) use letters the training text never
// has: the better the model learns "ab ab", the worse it does on "xyz", so
// the best evaluation is the first, not the last. best.safetensors keeps it.
TEST_F(Cli, TrainLmKeepsTheBestModelBesideTheLast) {
  const fs::path text = dir_ / "shift.fortunes";
  {
    std::ofstream file(text);
    for (int i = 0; i < 30; ++i)
      file << (i % 10 == 9 ? "xyz xyz xyz xyz xyz xyz\n" : "ab ab ab ab ab ab ab ab\n") << "%\n";
  }
  const fs::path out = dir_ / "out";
  const CliRun run = run_qkv(lm_args(text, 40) + " --lr 0.01 --out '" + out.string() + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // Held-out evaluations: every 8 steps; the printed scores and their minimum.
  std::vector<std::pair<int, double>> evals;
  std::istringstream in(run.output);
  int step = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find(" step ") != std::string::npos)
      step = std::stoi(line.substr(line.find(" step ") + 6));
    if (line.find("held-out ") != std::string::npos &&
        line.find("bits/char") != std::string::npos && line.find(" step ") == std::string::npos &&
        line.find("loss") == std::string::npos)
      evals.emplace_back(step, std::stod(line.substr(line.find("held-out ") + 9)));
  }
  ASSERT_EQ(evals.size(), 5u) << run.output;
  auto best = evals[0];
  for (const auto& e : evals)
    if (e.second < best.second) best = e;
  ASSERT_LT(best.first, 40) << run.output;
  expect_output_has(run, {"Best model: " + (out / "best.safetensors").string() + " (step " +
                          std::to_string(best.first)});
  qkv::io::SafetensorsFile best_file(out / "best.safetensors"), last(out / "last.safetensors");
  EXPECT_EQ(best_file.metadata().at("qkv.train.step"), std::to_string(best.first));
  EXPECT_EQ(last.metadata().at("qkv.train.step"), "40");
}

TEST_F(Cli, TrainResumeNamesATruncatedOrForeignCheckpoint) {
  const fs::path text = dir_ / "t.fortunes";
  write_fortunes(text);
  const fs::path r = dir_ / "r";
  const CliRun recall =
      run_qkv("train recall --steps 20 --stop-after 3 --examples 0 --out '" + r.string() + "'");
  ASSERT_EQ(recall.exit_code, 0) << recall.output;
  const fs::path ckpt = r / "checkpoint.safetensors";
  ASSERT_TRUE(fs::exists(ckpt)) << recall.output;

  const CliRun foreign = run_qkv(lm_args(text, 10) + " --resume '" + ckpt.string() + "'");
  expect_failure(foreign,
                 {"--resume: checkpoint '" + ckpt.string() + "' is for 'recall' with d_model 64",
                  "this run is 'lm' with d_model 16"});

  const CliRun other_steps =
      run_qkv("train recall --steps 30 --examples 0 --resume '" + ckpt.string() + "'");
  expect_failure(other_steps, {"--steps 20", "--steps 30", "qkv train recall --pairs"});

  const fs::path cut = dir_ / "cut.safetensors";
  fs::copy_file(ckpt, cut);
  fs::resize_file(cut, fs::file_size(ckpt) / 2);
  const CliRun truncated = run_qkv(lm_args(text, 10) + " --resume '" + cut.string() + "'");
  expect_failure(truncated, {"--resume", cut.string()});
  EXPECT_FALSE(contains(truncated.output, "terminate")) << truncated.output;

  // The recall checkpoint resumes and finishes.
  const CliRun rest =
      run_qkv("train recall --steps 20 --examples 0 --resume '" + ckpt.string() + "'");
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_TRUE(fs::exists(r / "last.safetensors"));
}

// Recall trains two models in turn: stopped in the first, then in the second
// (the baseline), and resumed, it ends as the straight run.
TEST_F(Cli, TrainRecallResumesInEitherPhase) {
  const std::string args = "train recall --steps 30 --examples 0 --threads 1";
  const CliRun straight = run_qkv(args + " --out '" + (dir_ / "s").string() + "'");
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const fs::path p = dir_ / "p", ckpt = p / "checkpoint.safetensors";
  const CliRun first = run_qkv(args + " --stop-after 3 --out '" + p.string() + "'");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const CliRun second = run_qkv(args + " --stop-after 3 --resume '" + ckpt.string() + "'");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  expect_output_has(second, {"Resuming the attention model after step 3", "Stopped after step 3"});
  const CliRun rest = run_qkv(args + " --resume '" + ckpt.string() + "'");
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  expect_output_has(rest, {"Resuming the mean-pool model after step 3"});
  expect_same_tensors(dir_ / "s" / "last.safetensors", p / "last.safetensors");
  expect_same_tensors(dir_ / "s" / "best.safetensors", p / "best.safetensors");
  const auto summary = [](const std::string& output) {
    return output.substr(output.find("mean-pool  accuracy"), 28);
  };
  EXPECT_EQ(summary(rest.output), summary(straight.output));
}

TEST_F(Cli, TrainRecallWritesUnderRunsByDefault) {
  const std::string command =
      "cd '" + dir_.string() + "' && '" + cli_path() + "' train recall --steps 2 --examples 1 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[4096];
  std::string output;
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  ASSERT_EQ(::pclose(pipe), 0) << output;
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(dir_)) entries.push_back(e.path().filename());
  ASSERT_EQ(entries, std::vector<std::string>{"runs"}) << output;
  const fs::directory_iterator runs(dir_ / "runs");
  ASSERT_NE(runs, fs::directory_iterator());
  EXPECT_EQ(runs->path().filename().string().rfind("recall-", 0), 0u);
  EXPECT_TRUE(fs::exists(runs->path() / "last.safetensors"));
}

}  // namespace
