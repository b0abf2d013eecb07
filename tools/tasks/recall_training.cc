#include "tasks/recall_training.h"

#include <algorithm>
#include <chrono>

#include "qkv/error.h"
#include "qkv/loss.h"
#include "qkv/optim/adam.h"
#include "qkv/optim/clip_grad_norm.h"
#include "qkv/optim/lr_schedule.h"
#include "tasks/task_schedule.h"

namespace qkv::train {

namespace {

// Held-out sequences come from their own stream, never from the training one.
constexpr uint64_t kHeldOutStream = 0x9E3779B97F4A7C15ull;

// Per row, whether the arg-max of the logits is the label.
int64_t count_correct(const Tensor& logits, const std::vector<int64_t>& labels) {
  const Tensor l = logits.contiguous();
  const int64_t n = l.size(0), c = l.size(1);
  const float* p = l.data<float>();
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = p + i * c;
    correct += (std::max_element(row, row + c) - row) == labels[i];
  }
  return correct;
}

}  // namespace

RecallBatch held_out_batch(const RecallTask& task, int64_t examples, uint64_t seed) {
  Generator gen(seed ^ kHeldOutStream);
  return task.sample(examples, gen);
}

double accuracy(RecallModel& model, const RecallBatch& batch) {
  return static_cast<double>(count_correct(model.forward(batch), batch.labels)) / batch.batch;
}

RecallTrainResult train_recall(RecallModel& model, const RecallTask& task,
                               const RecallTrainOptions& options,
                               const std::function<void(const RecallProgress&)>& on_progress) {
  QKV_CHECK(options.steps >= 1, "train_recall: steps must be >= 1, got ", options.steps);
  QKV_CHECK(options.batch_size >= 1, "train_recall: batch_size must be >= 1, got ",
            options.batch_size);
  QKV_CHECK(options.eval_every >= 1 && options.eval_examples >= 1,
            "train_recall: eval_every and eval_examples must be >= 1, got ", options.eval_every,
            " and ", options.eval_examples);
  std::vector<nn::Parameter> params = model.parameters();
  optim::AdamW opt(params, {.lr = options.lr, .weight_decay = options.weight_decay});
  const optim::WarmupCosineSchedule schedule =
      task_schedule(options.lr, options.warmup_steps, options.steps, options.min_lr);
  Generator gen(options.seed);
  const RecallBatch held_out = held_out_batch(task, options.eval_examples, options.seed);

  int64_t first = 0;
  if (const io::Checkpoint* resume = options.control.resume) {
    QKV_CHECK(resume->step >= 0 && resume->step < options.steps,
              "train_recall: the checkpoint is at step ", resume->step, ", this run has ",
              options.steps, " steps");
    restore_parameters(*resume, params);
    restore_optimizer(*resume, "adamw", opt);
    restore_generator(*resume, "batches", gen);
    first = resume->step;
  }

  RecallTrainResult result;
  RecallProgress progress;
  progress.steps = options.steps;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = first; step < options.steps; ++step) {
    const RecallBatch batch = task.sample(options.batch_size, gen);
    opt.zero_grad();
    RecallModelRecord record;
    const Tensor logits = model.forward(batch, &record);
    const double loss = cross_entropy(logits, batch.labels).item();
    Tensor grad_logits = Tensor::zeros(logits.shape());
    cross_entropy_backward(Tensor::ones({}), logits, batch.labels, {}, grad_logits);
    model.backward(grad_logits, record);
    if (options.clip_norm > 0) optim::clip_grad_norm(params, options.clip_norm);
    opt.set_lr(schedule.lr(step));
    opt.step();

    progress.step = step + 1;
    progress.loss = loss;
    progress.batch_accuracy =
        static_cast<double>(count_correct(logits, batch.labels)) / batch.batch;
    progress.eval_accuracy.reset();
    if (progress.step % options.eval_every == 0 || progress.step == options.steps) {
      const double acc = accuracy(model, held_out);
      progress.eval_accuracy = acc;
      progress.best_eval_accuracy = std::max(progress.best_eval_accuracy, acc);
      result.eval_accuracy = acc;
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    progress.elapsed_seconds = elapsed;
    const int64_t done_here = progress.step - first;  // steps of this process
    progress.tokens_per_second =
        elapsed > 0 ? done_here * options.batch_size * batch.length / elapsed : 0.0;
    progress.seconds_left = elapsed / done_here * (options.steps - progress.step);
    const bool reached =
        progress.eval_accuracy.has_value() && *progress.eval_accuracy >= options.target_accuracy;
    if (reached && !result.step_at_target) {
      result.step_at_target = progress.step;
      result.seconds_to_target = elapsed;
    }
    result.steps = progress.step;
    result.final_loss = loss;
    result.seconds = elapsed;
    if (on_progress) on_progress(progress);
    if (reached && options.stop_at_target) break;
    if (options.control.after_step && progress.step < options.steps &&
        !options.control.after_step(progress.step, [&] {
          io::Checkpoint c;
          c.step = progress.step;
          put_parameters(c, params);
          put_optimizer(c, "adamw", opt);
          put_generator(c, "batches", gen);
          return c;
        })) {
      result.stopped = true;
      break;
    }
  }
  return result;
}

std::vector<QueryAttention> query_attention(RecallModel& model, const RecallBatch& batch) {
  const std::vector<Tensor> weights = model.attention_weights(batch);  // each [B, H, L, L]
  const int64_t q = batch.length - 1;
  std::vector<QueryAttention> out;
  for (size_t layer = 0; layer < weights.size(); ++layer) {
    const Tensor w = weights[layer].contiguous();
    const int64_t heads = w.size(1), l = w.size(2);
    const float* p = w.data<float>();
    for (int64_t h = 0; h < heads; ++h) {
      QueryAttention entry{.layer = static_cast<int64_t>(layer), .head = h};
      for (int64_t b = 0; b < batch.batch; ++b) {
        const float* row = p + ((b * heads + h) * l + q) * l;
        entry.on_key += row[batch.key_positions[b]];
        entry.on_value += row[batch.key_positions[b] - 1];
      }
      entry.on_key /= batch.batch;
      entry.on_value /= batch.batch;
      out.push_back(entry);
    }
  }
  return out;
}

}  // namespace qkv::train
