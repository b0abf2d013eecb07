#include "tasks/fortunes_training.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "qkv/error.h"
#include "qkv/generator.h"
#include "qkv/loss.h"
#include "qkv/optim/adam.h"
#include "qkv/optim/clip_grad_norm.h"
#include "qkv/optim/lr_schedule.h"
#include "tasks/task_schedule.h"

namespace qkv::train {

namespace {

// Texts per evaluation batch (sorted by length, so little padding). Not tuned.
constexpr int64_t kEvalBatch = 128;
// Batches are cut from windows of this many batches sorted by length: rows of
// a batch are alike in length, while the order stays random. Not tuned.
constexpr int64_t kSortWindow = 8;

int64_t argmax_row(const float* row, int64_t c) { return std::max_element(row, row + c) - row; }

void shuffle(std::vector<int64_t>& v, Generator& gen) {
  for (int64_t i = static_cast<int64_t>(v.size()) - 1; i > 0; --i)
    std::swap(v[i], v[gen.next_u64() % static_cast<uint64_t>(i + 1)]);
}

// One epoch's batches: a random order, cut into windows sorted by length.
std::vector<std::vector<int64_t>> epoch_batches(const EncodedExamples& train, int64_t batch_size,
                                                int64_t max_length, Generator& gen) {
  std::vector<int64_t> order(train.tokens.size());
  std::iota(order.begin(), order.end(), 0);
  shuffle(order, gen);
  const auto length = [&](int64_t i) {
    return std::min<int64_t>(static_cast<int64_t>(train.tokens[i].size()), max_length);
  };
  std::vector<std::vector<int64_t>> batches;
  const int64_t n = static_cast<int64_t>(order.size());
  for (int64_t start = 0; start < n; start += kSortWindow * batch_size) {
    const auto first = order.begin() + start;
    const auto last = order.begin() + std::min(n, start + kSortWindow * batch_size);
    std::stable_sort(first, last, [&](int64_t a, int64_t b) { return length(a) < length(b); });
    for (auto it = first; it < last; it += std::min<int64_t>(batch_size, last - it))
      batches.emplace_back(it, it + std::min<int64_t>(batch_size, last - it));
  }
  // Shuffle the batch order (Fisher-Yates on indices).
  std::vector<int64_t> perm(batches.size());
  std::iota(perm.begin(), perm.end(), 0);
  shuffle(perm, gen);
  std::vector<std::vector<int64_t>> shuffled;
  for (int64_t i : perm) shuffled.push_back(std::move(batches[i]));
  return shuffled;
}

// Predictions of a text model, in batches of similar length.
template <class Model>
std::vector<int64_t> predict(Model& model, const EncodedExamples& examples) {
  QKV_CHECK(examples.tokens.size() == examples.labels.size(), "evaluate: ", examples.tokens.size(),
            " texts but ", examples.labels.size(), " labels");
  model.eval();
  const int64_t n = static_cast<int64_t>(examples.tokens.size());
  std::vector<int64_t> predictions(n, 0);
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return examples.tokens[a].size() < examples.tokens[b].size();
  });
  for (int64_t start = 0; start < n; start += kEvalBatch) {
    const std::span<const int64_t> rows(order.data() + start, std::min(kEvalBatch, n - start));
    const Tensor logits =
        model.forward(make_text_batch(examples.tokens, examples.labels, rows, model.max_length()))
            .contiguous();
    for (size_t i = 0; i < rows.size(); ++i)
      predictions[rows[i]] = argmax_row(logits.data<float>() + i * logits.size(1), logits.size(1));
  }
  return predictions;
}

// Rows `indices` of vectors [N, D]  ->  [B, D]
Tensor gather_rows(const Tensor& vectors, std::span<const int64_t> indices) {
  const int64_t d = vectors.size(1);
  Tensor out = Tensor::empty({static_cast<int64_t>(indices.size()), d});
  const float* src = vectors.data<float>();
  float* dst = out.data<float>();
  for (size_t i = 0; i < indices.size(); ++i)
    std::copy_n(src + indices[i] * d, d, dst + static_cast<int64_t>(i) * d);
  return out;
}

void check_embedded(const EmbeddedExamples& examples, const char* who) {
  QKV_CHECK(examples.vectors.defined() && examples.vectors.dim() == 2 &&
                examples.vectors.dtype() == DType::kFloat32 &&
                examples.vectors.size(0) == static_cast<int64_t>(examples.labels.size()),
            who, ": vectors must be float32 [N, D] with N = labels (", examples.labels.size(),
            "), got ",
            examples.vectors.defined() ? shape_str(examples.vectors.shape()) : "undefined");
}

std::vector<int64_t> predict(LinearProbe& probe, const EmbeddedExamples& examples) {
  check_embedded(examples, "evaluate");
  const Tensor vectors = examples.vectors.contiguous();
  const Tensor logits = probe.forward(vectors).contiguous();
  std::vector<int64_t> predictions(examples.labels.size());
  for (size_t i = 0; i < predictions.size(); ++i)
    predictions[i] = argmax_row(logits.data<float>() + i * logits.size(1), logits.size(1));
  return predictions;
}

// What one training step reports.
struct StepOutcome {
  double loss = 0;
  Tensor logits;                // [B, C]
  std::vector<int64_t> labels;  // [B]
  int64_t tokens = 0;           // real tokens read (text models)
};

// The loop all models share: epochs of batches (make_batches(gen) gives one
// epoch's row indices), AdamW with warmup + cosine, clipping, progress.
// step(rows, gen) runs forward and backward into the gradient buffers;
// held_out() gives the held-out accuracy (nullopt: none) after each epoch.
template <class MakeBatches, class Step, class HeldOut>
ClassifierTrainResult run_epochs(
    std::vector<nn::Parameter> params, int64_t n, const ClassifierTrainOptions& options,
    MakeBatches make_batches, Step step_fn, HeldOut held_out,
    const std::function<void(const ClassifierProgress&)>& on_progress) {
  QKV_CHECK(options.epochs >= 1, "train_classifier: epochs must be >= 1, got ", options.epochs);
  QKV_CHECK(options.batch_size >= 1, "train_classifier: batch_size must be >= 1, got ",
            options.batch_size);
  QKV_CHECK(options.word_dropout >= 0 && options.word_dropout < 1,
            "train_classifier: word_dropout must be in [0, 1), got ", options.word_dropout);
  QKV_CHECK(n >= 1, "train_classifier: no training examples");
  const int64_t per_epoch = (n + options.batch_size - 1) / options.batch_size;
  const int64_t steps = per_epoch * options.epochs;
  optim::AdamW opt(params, {.lr = options.lr, .weight_decay = options.weight_decay});
  const optim::WarmupCosineSchedule schedule =
      task_schedule(options.lr, options.warmup_steps, steps, options.min_lr);
  Generator gen(options.seed);

  ClassifierTrainResult result;
  ClassifierProgress progress;
  progress.steps = steps;
  int64_t step = 0, tokens_read = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t epoch = 1; epoch <= options.epochs; ++epoch) {
    double epoch_loss = 0;
    const std::vector<std::vector<int64_t>> batches = make_batches(gen);
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      opt.zero_grad();
      const StepOutcome out = step_fn(batches[bi], gen);
      if (options.clip_norm > 0) optim::clip_grad_norm(params, options.clip_norm);
      opt.set_lr(schedule.lr(step));
      opt.step();
      ++step;
      epoch_loss += out.loss;
      tokens_read += out.tokens;

      const Tensor l = out.logits.contiguous();
      int64_t right = 0;
      for (size_t i = 0; i < out.labels.size(); ++i)
        right += argmax_row(l.data<float>() + i * l.size(1), l.size(1)) == out.labels[i];
      progress.step = step;
      progress.epoch = epoch;
      progress.loss = out.loss;
      progress.batch_accuracy = static_cast<double>(right) / static_cast<double>(out.labels.size());
      progress.held_out.reset();
      if (bi + 1 == batches.size()) {
        progress.held_out = held_out();
        if (progress.held_out) result.held_out_accuracy = progress.held_out;
      }
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      progress.elapsed_seconds = elapsed;
      progress.tokens_per_second = elapsed > 0 ? tokens_read / elapsed : 0.0;
      progress.seconds_left = elapsed / step * (steps - step);
      result.seconds = elapsed;
      if (on_progress) on_progress(progress);
    }
    result.final_loss = epoch_loss / static_cast<double>(batches.size());
  }
  result.steps = step;
  return result;
}

// A text model: length-sorted batches, word dropout, the model's own record.
template <class Model, class Record>
ClassifierTrainResult train_text_model(
    Model& model, const EncodedExamples& train, const EncodedExamples* held_out,
    const ClassifierTrainOptions& options,
    const std::function<void(const ClassifierProgress&)>& on_progress) {
  QKV_CHECK(train.tokens.size() == train.labels.size(), "train_classifier: ", train.tokens.size(),
            " training texts but ", train.labels.size(), " labels");
  const int64_t num_classes = model.options().num_classes;
  model.train();
  return run_epochs(
      model.parameters(), static_cast<int64_t>(train.tokens.size()), options,
      [&](Generator& gen) {
        return epoch_batches(train, options.batch_size, model.max_length(), gen);
      },
      [&](const std::vector<int64_t>& rows, Generator& gen) {
        TextBatch batch = make_text_batch(train.tokens, train.labels, rows, model.max_length());
        if (options.word_dropout > 0)
          for (int64_t i = 0; i < batch.batch; ++i)
            for (int64_t t = 0; t < batch.lengths[i]; ++t)
              if (gen.uniform() < options.word_dropout)
                batch.tokens[i * batch.length + t] = WordVocabulary::kUnk;
        Record record;
        StepOutcome out;
        out.logits = model.forward(batch, &record);
        out.loss = cross_entropy(out.logits, batch.labels).item();
        Tensor grad_logits = Tensor::zeros(out.logits.shape());
        cross_entropy_backward(Tensor::ones({}), out.logits, batch.labels, {}, grad_logits);
        model.backward(grad_logits, record);
        out.labels = batch.labels;
        out.tokens = std::accumulate(batch.lengths.begin(), batch.lengths.end(), int64_t{0});
        return out;
      },
      [&]() -> std::optional<double> {
        if (held_out == nullptr) return std::nullopt;
        const double accuracy =
            score_predictions(predict(model, *held_out), held_out->labels, num_classes).accuracy;
        model.train();
        return accuracy;
      },
      on_progress);
}

}  // namespace

ClassifierEvaluation score_predictions(std::span<const int64_t> predictions,
                                       std::span<const int64_t> labels, int64_t num_classes) {
  QKV_CHECK(num_classes >= 1, "score_predictions: num_classes must be >= 1, got ", num_classes);
  QKV_CHECK(predictions.size() == labels.size(), "score_predictions: ", predictions.size(),
            " predictions but ", labels.size(), " labels");
  ClassifierEvaluation out;
  out.predictions.assign(predictions.begin(), predictions.end());
  out.confusion.assign(num_classes, std::vector<int64_t>(num_classes, 0));
  out.class_examples.assign(num_classes, 0);
  out.class_accuracy.assign(num_classes, 0.0);
  int64_t right = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    QKV_CHECK(labels[i] >= 0 && labels[i] < num_classes && predictions[i] >= 0 &&
                  predictions[i] < num_classes,
              "score_predictions: classes must be in [0, ", num_classes, "), got label ", labels[i],
              " and prediction ", predictions[i], " at ", i);
    ++out.confusion[labels[i]][predictions[i]];
    ++out.class_examples[labels[i]];
    right += predictions[i] == labels[i];
  }
  for (int64_t c = 0; c < num_classes; ++c)
    if (out.class_examples[c] > 0)
      out.class_accuracy[c] = static_cast<double>(out.confusion[c][c]) / out.class_examples[c];
  out.accuracy = labels.empty() ? 0.0 : static_cast<double>(right) / labels.size();
  return out;
}

ClassifierTrainResult train_classifier(
    EncoderClassifier& model, const EncodedExamples& train, const EncodedExamples* held_out,
    const ClassifierTrainOptions& options,
    const std::function<void(const ClassifierProgress&)>& on_progress) {
  return train_text_model<EncoderClassifier, EncoderClassifierRecord>(model, train, held_out,
                                                                      options, on_progress);
}

ClassifierTrainResult train_classifier(
    BagOfWordsClassifier& model, const EncodedExamples& train, const EncodedExamples* held_out,
    const ClassifierTrainOptions& options,
    const std::function<void(const ClassifierProgress&)>& on_progress) {
  return train_text_model<BagOfWordsClassifier, BagOfWordsRecord>(model, train, held_out, options,
                                                                  on_progress);
}

ClassifierTrainResult train_classifier(
    LinearProbe& probe, const EmbeddedExamples& train, const EmbeddedExamples* held_out,
    const ClassifierTrainOptions& options,
    const std::function<void(const ClassifierProgress&)>& on_progress) {
  check_embedded(train, "train_classifier");
  if (held_out != nullptr) check_embedded(*held_out, "train_classifier (held out)");
  const Tensor vectors = train.vectors.contiguous();
  const int64_t n = vectors.size(0);
  return run_epochs(
      probe.parameters(), n, options,
      [&](Generator& gen) {
        std::vector<int64_t> order(n);
        std::iota(order.begin(), order.end(), 0);
        shuffle(order, gen);
        std::vector<std::vector<int64_t>> batches;
        for (int64_t s = 0; s < n; s += options.batch_size)
          batches.emplace_back(order.begin() + s,
                               order.begin() + std::min(n, s + options.batch_size));
        return batches;
      },
      [&](const std::vector<int64_t>& rows, Generator&) {
        StepOutcome out;
        for (int64_t r : rows) out.labels.push_back(train.labels[r]);
        LinearProbeRecord record;
        out.logits = probe.forward(gather_rows(vectors, rows), &record);
        out.loss = cross_entropy(out.logits, out.labels).item();
        Tensor grad_logits = Tensor::zeros(out.logits.shape());
        cross_entropy_backward(Tensor::ones({}), out.logits, out.labels, {}, grad_logits);
        probe.backward(grad_logits, record);
        return out;
      },
      [&]() -> std::optional<double> {
        if (held_out == nullptr) return std::nullopt;
        return score_predictions(predict(probe, *held_out), held_out->labels,
                                 probe.options().num_classes)
            .accuracy;
      },
      on_progress);
}

ClassifierEvaluation evaluate(EncoderClassifier& model, const EncodedExamples& examples,
                              int64_t num_classes) {
  return score_predictions(predict(model, examples), examples.labels, num_classes);
}

ClassifierEvaluation evaluate(BagOfWordsClassifier& model, const EncodedExamples& examples,
                              int64_t num_classes) {
  return score_predictions(predict(model, examples), examples.labels, num_classes);
}

ClassifierEvaluation evaluate(LinearProbe& probe, const EmbeddedExamples& examples,
                              int64_t num_classes) {
  return score_predictions(predict(probe, examples), examples.labels, num_classes);
}

}  // namespace qkv::train
