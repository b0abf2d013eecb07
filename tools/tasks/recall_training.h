// Training and inspecting a RecallModel (recall_model.h) on the recall task:
// AdamW, linear warmup + cosine decay, gradient clipping, fresh batches every
// step, and an early stop once the held-out accuracy reaches a target.
//
//   train::RecallTask task({.pairs = 8});
//   train::RecallModel model(task, {.seed = 0});
//   train::RecallTrainResult r = train::train_recall(model, task, {.steps = 3000},
//       [](const train::RecallProgress& p) { ... print p.step, p.loss ... });
//   // r.eval_accuracy, r.seconds_to_target
//
// Everything is drawn from generators seeded by the options, so a run is
// reproducible for a given seed and thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "tasks/loop_checkpoint.h"
#include "tasks/recall_model.h"
#include "tasks/recall_task.h"

namespace qkv::train {

struct RecallTrainOptions {
  int64_t steps = 3000;  // the limit; training stops earlier at target_accuracy
  int64_t batch_size = 64;
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 100;
  double weight_decay = 0.01;
  double clip_norm = 1.0;
  int64_t eval_every = 50;      // steps between held-out evaluations
  int64_t eval_examples = 512;  // size of the held-out set used for stopping
  double target_accuracy = 0.99;
  bool stop_at_target = true;
  uint64_t seed = 0;  // batches and the held-out set (the model's own seed initialises it)
  // Checkpoints: the generator "batches", the optimizer "adamw".
  LoopControl control;
};

// Reported after every step. eval_accuracy is set on the steps that evaluated.
struct RecallProgress {
  int64_t step = 0;   // steps done, 1 .. steps
  int64_t steps = 0;  // the limit
  double loss = 0;
  double batch_accuracy = 0;
  std::optional<double> eval_accuracy;
  double best_eval_accuracy = 0;
  double tokens_per_second = 0;
  double elapsed_seconds = 0;
  double seconds_left = 0;  // at the current pace, up to the step limit
};

struct RecallTrainResult {
  int64_t steps = 0;     // steps taken (those before a resumed checkpoint included)
  bool stopped = false;  // control.after_step stopped the loop
  double final_loss = 0;
  double eval_accuracy = 0;  // on the held-out set, after the last step
  double seconds = 0;
  std::optional<int64_t> step_at_target;  // first evaluation at or above target_accuracy
  std::optional<double> seconds_to_target;
};

// Trains `model` in place; `on_progress` (optional) is called after every step.
RecallTrainResult train_recall(RecallModel& model, const RecallTask& task,
                               const RecallTrainOptions& options,
                               const std::function<void(const RecallProgress&)>& on_progress = {});

// The held-out set of a seed: drawn from a generator that training batches never use.
RecallBatch held_out_batch(const RecallTask& task, int64_t examples, uint64_t seed);

// Fraction of sequences whose arg-max logit is the label.
double accuracy(RecallModel& model, const RecallBatch& batch);

// Where the last position (the queried key) looks, per layer and head,
// averaged over a batch: the weight on the matching key's position and on
// its value's position (the one before it).
struct QueryAttention {
  int64_t layer = 0;
  int64_t head = 0;
  double on_key = 0;
  double on_value = 0;
};
std::vector<QueryAttention> query_attention(RecallModel& model, const RecallBatch& batch);

}  // namespace qkv::train
