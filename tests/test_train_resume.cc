// Resuming the `qkv train` loops (tools/tasks/loop_checkpoint.h): a run
// stopped after k steps, saved to a checkpoint file and resumed in a fresh
// model equals an uninterrupted run bit for bit (parameters and losses);
// Generator states survive the text form exactly; broken states are errors.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/generator.h"
#include "qkv/io/checkpoint.h"
#include "tasks/char_lm.h"
#include "tasks/recall_training.h"
#include "test_util.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;

class TrainResume : public qkv_test::TempDirTest {};

// Bitwise equality of two parameter lists (float32 values).
void expect_same_bits(const std::vector<nn::Parameter>& a, const std::vector<nn::Parameter>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].name, b[i].name);
    const Tensor x = a[i].value.contiguous(), y = b[i].value.contiguous();
    ASSERT_EQ(x.numel(), y.numel()) << a[i].name;
    EXPECT_EQ(std::memcmp(x.data<float>(), y.data<float>(), x.numel() * sizeof(float)), 0)
        << a[i].name << " differs";
  }
}

TEST(GeneratorState, TextRoundTripDrawsTheSameNumbers) {
  Generator a(42);
  (void)a.normal();  // leaves a spare normal
  Generator b(7);
  io::restore_generator_state(b, io::generator_state_text(a), "test");
  EXPECT_EQ(a.state(), b.state());
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(a.normal(), b.normal());
    EXPECT_EQ(a.next_u64(), b.next_u64());
  }
}

TEST(GeneratorState, BrokenTextIsAnErrorNamingTheEntry) {
  Generator g(1);
  const std::string good = io::generator_state_text(g);
  for (const std::string& bad :
       {std::string(""), good.substr(0, good.size() - 3), std::string("xoshiro256 1 2 3 4 -"),
        std::string("xoshiro256 0000000000000000 0000000000000000 0000000000000000 "
                    "0000000000000000 -"),
        std::string("mt19937 ") + good.substr(11)}) {
    try {
      io::restore_generator_state(g, bad, "metadata \"rng.batches\"");
      ADD_FAILURE() << "accepted \"" << bad << "\"";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("metadata \"rng.batches\""), std::string::npos)
          << e.what();
    }
  }
}

// A training loop that continues from `resume` (nullptr: from the start) and,
// after step `stop_after` (0: never), saves a checkpoint to `save` and stops.
train::LoopControl resume_and_stop(const io::Checkpoint* resume, int64_t stop_after,
                                   const fs::path& save) {
  return {.resume = resume,
          .after_step = [stop_after, save](int64_t step, const train::Snapshot& snapshot) {
            if (step != stop_after) return true;
            io::save_checkpoint(save, snapshot());
            return false;
          }};
}

// Trains a fresh tiny char LM for `steps`, stopping after `stop_after` (0:
// never) and saving there, or resuming from `resume`. Returns the losses.
struct LmRun {
  std::vector<double> losses;
  std::vector<nn::Parameter> params;
  std::unique_ptr<nn::DecoderModel> model;
};

LmRun run_lm(const train::CharCorpus& corpus, int64_t stop_after, const fs::path& save,
             const io::Checkpoint* resume) {
  LmRun run;
  Generator init(3);
  run.model = std::make_unique<nn::DecoderModel>(
      nn::DecoderModelConfig{.vocab_size = corpus.vocabulary.size(),
                             .d_model = 16,
                             .num_layers = 1,
                             .num_heads = 2,
                             .max_seq_len = 16,
                             .ffn = nn::FeedForwardKind::kGelu},
      &init);
  train::init_gpt2(*run.model, init);
  train::CharLmTrainOptions o{.steps = 10,
                              .batch_size = 4,
                              .context = 16,
                              .lr = 3e-3,
                              .warmup_steps = 4,
                              .eval_every = 3,
                              .eval_predictions = 64,
                              .seed = 5};
  o.control = resume_and_stop(resume, stop_after, save);
  const train::CharLmTrainResult r =
      train::train_char_lm(*run.model, corpus, o, [&](const train::CharLmProgress& p) {
        run.losses.push_back(p.bits);
        if (p.held_out_bits) run.losses.push_back(*p.held_out_bits);
      });
  EXPECT_EQ(r.stopped, stop_after > 0);
  run.params = run.model->parameters();
  return run;
}

TEST_F(TrainResume, CharLmResumedEqualsUninterruptedBitForBit) {
  std::vector<std::string> entries;
  for (int i = 0; i < 40; ++i)
    entries.push_back("The quick brown fox " + std::to_string(i) + " jumps over the lazy dog.\n");
  const train::CharCorpus corpus = train::make_char_corpus(entries);
  const fs::path ckpt = dir_ / "ckpt.safetensors";

  const LmRun straight = run_lm(corpus, 0, ckpt, nullptr);
  const LmRun first = run_lm(corpus, 4, ckpt, nullptr);
  const io::Checkpoint c = io::load_checkpoint(ckpt);
  EXPECT_EQ(c.step, 4);
  const LmRun rest = run_lm(corpus, 0, ckpt, &c);

  std::vector<double> joined = first.losses;
  joined.insert(joined.end(), rest.losses.begin(), rest.losses.end());
  EXPECT_EQ(joined, straight.losses);  // exact doubles, evaluations included
  expect_same_bits(rest.params, straight.params);
  // And the stopped run really is behind: not trivially equal.
  Tensor a = first.params[0].value.contiguous(), b = straight.params[0].value.contiguous();
  EXPECT_NE(std::memcmp(a.data<float>(), b.data<float>(), a.numel() * sizeof(float)), 0);
}

TEST_F(TrainResume, RecallResumedEqualsUninterruptedBitForBit) {
  const train::RecallTask task({.pairs = 2});
  const fs::path ckpt = dir_ / "ckpt.safetensors";
  const auto run = [&](int64_t stop_after, const io::Checkpoint* resume,
                       std::vector<double>& losses) {
    auto model = std::make_unique<train::RecallModel>(
        task, train::RecallModelOptions{
                  .d_model = 16, .nhead = 2, .num_layers = 1, .dim_feedforward = 16, .seed = 2});
    train::RecallTrainOptions o{.steps = 12,
                                .batch_size = 8,
                                .lr = 3e-3,
                                .warmup_steps = 2,
                                .eval_every = 5,
                                .eval_examples = 32,
                                .stop_at_target = false,
                                .seed = 9};
    o.control = resume_and_stop(resume, stop_after, ckpt);
    train::train_recall(*model, task, o, [&](const train::RecallProgress& p) {
      losses.push_back(p.loss);
      if (p.eval_accuracy) losses.push_back(*p.eval_accuracy);
    });
    return model;
  };
  std::vector<double> straight_losses, joined;
  auto straight = run(0, nullptr, straight_losses);
  (void)run(7, nullptr, joined);
  const io::Checkpoint c = io::load_checkpoint(ckpt);
  auto rest = run(0, &c, joined);
  EXPECT_EQ(joined, straight_losses);
  expect_same_bits(rest->parameters(), straight->parameters());
}

TEST_F(TrainResume, CheckpointOfAnotherShapeIsRefusedByName) {
  const train::RecallTask task({.pairs = 2});
  train::RecallModel small(task, {.d_model = 16, .nhead = 2, .num_layers = 1, .seed = 1});
  io::Checkpoint c;
  train::put_parameters(c, small.parameters());
  train::RecallModel wide(task, {.d_model = 32, .nhead = 2, .num_layers = 1, .seed = 1});
  try {
    train::restore_parameters(c, wide.parameters());
    ADD_FAILURE() << "accepted a checkpoint of another shape";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokens.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[33, 16]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qkv
