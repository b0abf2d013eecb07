// Training checkpoints (qkv/io/checkpoint.h): round trip, a writer killed
// midway leaves the previous checkpoint loadable, clear errors for missing and
// corrupt files, and a run resumed from a checkpoint reproduces the losses of
// an uninterrupted run bit for bit.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "fork_writer.h"
#include "qkv/functional.h"
#include "qkv/gradients.h"
#include "qkv/io/checkpoint.h"
#include "qkv/io/safetensors.h"
#include "qkv/linear.h"
#include "qkv/loss.h"
#include "qkv/nn/linear.h"
#include "qkv/nn/parameter.h"
#include "qkv/optim/adam.h"
#include "qkv/optim/clip_grad_norm.h"
#include "qkv/optim/lr_schedule.h"
#include "test_util.h"

namespace fs = std::filesystem;
using qkv_test::fork_writer;
using qkv_test::signal_ready;

namespace qkv {
namespace {

class CheckpointTest : public qkv_test::TempDirTest {};

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a qkv::Error";
  return "";
}

// A checkpoint whose every value is derived from `version`.
io::Checkpoint make_checkpoint(double version, int64_t big = 1000) {
  io::Checkpoint c;
  c.model["encoder.weight"] = Tensor::full({big}, version);
  c.model["encoder.bias"] = Tensor::full({3}, version, DType::kFloat64);
  c.optimizer["encoder.weight.exp_avg"] = Tensor::full({big}, -version);
  c.optimizer["encoder.weight.step"] = Tensor::full({}, version, DType::kFloat64);
  c.step = static_cast<int64_t>(version);
  c.metadata["seed"] = std::to_string(static_cast<int64_t>(version));
  return c;
}

// Checks that `c` is make_checkpoint(v) for some v, returns v.
double consistent_version(const io::Checkpoint& c) {
  const double v = static_cast<double>(c.step);
  const std::vector<double> w = c.model.at("encoder.weight").to_vector();
  EXPECT_EQ(w.front(), v);
  EXPECT_EQ(w.back(), v);
  EXPECT_EQ(c.model.at("encoder.bias").to_vector(), std::vector<double>(3, v));
  EXPECT_EQ(c.optimizer.at("encoder.weight.exp_avg").to_vector().back(), -v);
  EXPECT_EQ(c.optimizer.at("encoder.weight.step").item(), v);
  EXPECT_EQ(c.metadata.at("seed"), std::to_string(c.step));
  return v;
}

TEST_F(CheckpointTest, RoundTrip) {
  const fs::path path = dir_ / "ckpt.safetensors";
  io::Checkpoint c = make_checkpoint(7.0);
  Generator gen(1);
  c.model["transposed"] = Tensor::randn({3, 4}, gen).transpose(0, 1);  // any strides
  c.model["mask"] = Tensor::from_bools({2}, {true, false});
  c.metadata["config"] = "{\"d_model\": 64}";
  io::save_checkpoint(path, c);
  const io::Checkpoint back = io::load_checkpoint(path);
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.metadata, c.metadata);
  ASSERT_EQ(back.model.size(), c.model.size());
  for (const auto& [name, t] : c.model) {
    EXPECT_EQ(back.model.at(name).shape(), t.shape()) << name;
    EXPECT_EQ(back.model.at(name).dtype(), t.dtype()) << name;
    EXPECT_EQ(back.model.at(name).to_vector(), t.to_vector()) << name;
  }
  ASSERT_EQ(back.optimizer.size(), c.optimizer.size());
  EXPECT_EQ(back.optimizer.at("encoder.weight.step").shape(), Shape{});
  // Any safetensors reader sees the prefixed names and the metadata.
  const io::SafetensorsFile file(path);
  EXPECT_TRUE(file.contains("model.encoder.weight"));
  EXPECT_TRUE(file.contains("optimizer.encoder.weight.exp_avg"));
  EXPECT_EQ(file.metadata().at("qkv.step"), "7");
  EXPECT_TRUE(others("ckpt.safetensors").empty());
}

TEST_F(CheckpointTest, ReservedMetadataKeysAreRejected) {
  io::Checkpoint c = make_checkpoint(1.0);
  c.metadata["qkv.step"] = "99";
  const std::string message = error_of([&] { io::save_checkpoint(dir_ / "x.safetensors", c); });
  EXPECT_NE(message.find("\"qkv.step\" is reserved"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(dir_ / "x.safetensors"));
}

void kill_after(pid_t pid, int ready, int milliseconds) {
  char c = 0;
  ASSERT_EQ(::read(ready, &c, 1), 1) << "the child failed before writing";
  ::close(ready);
  std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the child ended before it was killed, status " << status;
}

TEST_F(CheckpointTest, WriterKilledMidwayLeavesPreviousCheckpointLoadable) {
  const fs::path path = dir_ / "ckpt.safetensors";
  io::save_checkpoint(path, make_checkpoint(1.0));
  int ready = -1;
  const pid_t pid = fork_writer(ready, [&](int fd) {
    // 2 × 16 Mi floats = 128 MB: far more than is written when the parent strikes.
    const io::Checkpoint big = make_checkpoint(2.0, int64_t{16} << 20);
    signal_ready(fd);
    io::save_checkpoint(path, big);
  });
  ASSERT_GT(pid, 0);
  char c = 0;
  ASSERT_EQ(::read(ready, &c, 1), 1) << "the child failed before writing";
  ::close(ready);
  // Kill the child once its temporary file holds 1 MiB: certainly in the middle of the write.
  bool mid_write = false;
  for (int i = 0; i < 20000 && !mid_write; ++i) {
    for (const std::string& name : others("ckpt.safetensors")) {
      std::error_code ec;
      mid_write |= fs::file_size(dir_ / name, ec) >= (size_t{1} << 20) && !ec;
    }
    if (!mid_write) std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(mid_write) << "the child's temporary file never reached 1 MiB";
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the child finished its write before it was killed, status " << status;
  // The killed write left its temporary file behind, and the target untouched.
  const std::vector<std::string> leftovers = others("ckpt.safetensors");
  ASSERT_EQ(leftovers.size(), 1u);
  EXPECT_EQ(leftovers[0].rfind(".ckpt.safetensors.tmp-", 0), 0u) << leftovers[0];
  const io::Checkpoint back = io::load_checkpoint(path);
  EXPECT_EQ(consistent_version(back), 1.0);
  EXPECT_EQ(back.model.at("encoder.weight").numel(), 1000);
}

TEST_F(CheckpointTest, KilledAtAnyMomentTheCheckpointIsOldOrNewNeverTorn) {
  const fs::path path = dir_ / "ckpt.safetensors";
  io::save_checkpoint(path, make_checkpoint(0.0, 1 << 20));
  for (int round = 0; round < 3; ++round) {
    int ready = -1;
    const pid_t pid = fork_writer(ready, [&](int fd) {
      signal_ready(fd);
      for (int v = 1;; ++v) io::save_checkpoint(path, make_checkpoint(v, 1 << 20));
    });
    ASSERT_GT(pid, 0);
    kill_after(pid, ready, 15 + 40 * round);
    consistent_version(io::load_checkpoint(path));  // throws if torn
    for (const std::string& name : others("ckpt.safetensors")) fs::remove(dir_ / name);
  }
}

TEST_F(CheckpointTest, MissingCorruptAndForeignFilesAreClearErrors) {
  const fs::path missing = dir_ / "nope.safetensors";
  std::string message = error_of([&] { io::load_checkpoint(missing); });
  EXPECT_NE(message.find(missing.string()), std::string::npos) << message;
  EXPECT_NE(message.find("No such file or directory"), std::string::npos) << message;

  // Truncated in the middle of the data, as a copy cut short would be.
  const fs::path truncated = dir_ / "truncated.safetensors";
  io::save_checkpoint(truncated, make_checkpoint(3.0));
  fs::resize_file(truncated, fs::file_size(truncated) - 100);
  message = error_of([&] { io::load_checkpoint(truncated); });
  EXPECT_NE(message.find(truncated.string()), std::string::npos) << message;

  // Garbage in the header.
  const fs::path garbled = dir_ / "garbled.safetensors";
  io::save_checkpoint(garbled, make_checkpoint(3.0));
  {
    std::fstream f(garbled, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12);
    f.write("\xff\xfe{{", 4);
  }
  message = error_of([&] { io::load_checkpoint(garbled); });
  EXPECT_NE(message.find(garbled.string()), std::string::npos) << message;

  // A valid safetensors file that is not a checkpoint.
  const fs::path weights = dir_ / "weights.safetensors";
  io::save_safetensors(weights, {{"w", Tensor::zeros({2})}});
  message = error_of([&] { io::load_checkpoint(weights); });
  EXPECT_NE(message.find(weights.string()), std::string::npos) << message;
  EXPECT_NE(message.find("not a qkv checkpoint"), std::string::npos) << message;
}

// --- Resuming reproduces an uninterrupted run -----------------------------------------------

// A two-layer classifier trained with AdamW, warmup-cosine, clipping and dropout.
class Trainer {
 public:
  explicit Trainer(uint64_t init_seed)
      : gen_(init_seed),
        fc1_({.in_features = 6, .out_features = 16}, &gen_),
        fc2_({.in_features = 16, .out_features = 4}, &gen_),
        params_(nn::make_parameters(state_dict())),
        opt_(params_, {.lr = 0.0, .weight_decay = 0.05}),
        schedule_({.base_lr = 0.02, .warmup_steps = 3, .total_steps = 12, .min_lr = 0.002}) {
    for (nn::Parameter& p : params_) by_name_[p.name] = &p;
  }

  std::map<std::string, Tensor> state_dict() const {
    std::map<std::string, Tensor> s;
    for (const auto& [k, v] : fc1_.state_dict()) s["fc1." + k] = v;
    for (const auto& [k, v] : fc2_.state_dict()) s["fc2." + k] = v;
    return s;
  }

  void load(const io::Checkpoint& c) {
    std::map<std::string, Tensor> s1, s2;
    for (const auto& [k, v] : c.model) (k.rfind("fc1.", 0) == 0 ? s1 : s2)[k.substr(4)] = v;
    fc1_.load_state_dict(s1);
    fc2_.load_state_dict(s2);
    opt_.load_state_dict(c.optimizer);
    step_ = c.step;
  }

  io::Checkpoint checkpoint() const {
    return {.model = state_dict(), .optimizer = opt_.state_dict(), .step = step_};
  }

  // One training step on a fixed batch; dropout is seeded by the step number.
  double train_step() {
    Generator data(99);
    const Tensor x = Tensor::randn({8, 6}, data);
    const std::vector<int64_t> targets = {0, 1, 2, 3, 3, 2, 1, 0};
    Generator dropout_gen(1000 + step_);

    const Tensor h = linear(x, fc1_.weight(), fc1_.bias());
    const Tensor a = gelu(h);
    const DropoutResult d = dropout_forward(a, 0.1, true, &dropout_gen);
    const Tensor logits = linear(d.output, fc2_.weight(), fc2_.bias());
    const double loss = cross_entropy(logits, targets).item();

    opt_.zero_grad();
    Tensor g_logits = Tensor::zeros(logits.shape());
    cross_entropy_backward(Tensor::ones({}), logits, targets, {}, g_logits);
    Tensor g_d = Tensor::zeros(a.shape());
    linear_backward(g_logits, d.output, fc2_.weight(), fc2_.bias(),
                    {.input = g_d, .weight = grad("fc2.weight"), .bias = grad("fc2.bias")});
    Tensor g_a = Tensor::zeros(a.shape());
    dropout_backward(g_d, d.keep_mask, 0.1, g_a);
    Tensor g_h = Tensor::zeros(h.shape());
    gelu_backward(g_a, h, GeluApproximation::kNone, g_h);
    linear_backward(g_h, x, fc1_.weight(), fc1_.bias(),
                    {.weight = grad("fc1.weight"), .bias = grad("fc1.bias")});
    optim::clip_grad_norm(params_, 1.0);
    opt_.set_lr(schedule_.lr(step_));
    opt_.step();
    ++step_;
    return loss;
  }

 private:
  Tensor grad(const std::string& name) { return by_name_.at(name)->grad; }

  Generator gen_;
  nn::Linear fc1_, fc2_;
  std::vector<nn::Parameter> params_;
  std::map<std::string, nn::Parameter*> by_name_;
  optim::AdamW opt_;
  optim::WarmupCosineSchedule schedule_;
  int64_t step_ = 0;
};

TEST_F(CheckpointTest, ResumingGivesTheSameLossesAsAnUninterruptedRun) {
  std::vector<double> uninterrupted;
  {
    Trainer t(5);
    for (int i = 0; i < 12; ++i) uninterrupted.push_back(t.train_step());
  }
  EXPECT_LT(uninterrupted.back(), uninterrupted.front() * 0.8) << "training must make progress";

  const fs::path path = dir_ / "resume.safetensors";
  std::vector<double> resumed;
  {
    Trainer t(5);
    for (int i = 0; i < 6; ++i) resumed.push_back(t.train_step());
    io::save_checkpoint(path, t.checkpoint());
  }                  // the process "ends" here
  Trainer t(12345);  // different initial weights: everything must come from the file
  t.load(io::load_checkpoint(path));
  for (int i = 6; i < 12; ++i) resumed.push_back(t.train_step());
  EXPECT_EQ(resumed, uninterrupted);
}

}  // namespace
}  // namespace qkv
