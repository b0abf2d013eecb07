// Training and evaluating the fortune classifiers (fortunes_classifier.h):
// epochs over the training texts in shuffled batches of similar length
// (little padding), AdamW, linear warmup + cosine decay, gradient clipping,
// and word dropout (a training word becomes [UNK] with some probability).
// LinearProbe trains the same way on fixed vectors (EmbeddedExamples).
//
//   train::EncoderClassifier model({.vocab_size = data.vocab.size(), .num_classes = 5});
//   train::ClassifierTrainResult r = train::train_classifier(model, data.train, &data.held_out,
//       {.epochs = 12}, [](const train::ClassifierProgress& p) { ... });
//   train::ClassifierEvaluation e = train::evaluate(model, data.held_out, 5);
//   // e.accuracy, e.class_accuracy[c], e.confusion[true][predicted]
//
// Everything is drawn from generators seeded by the options, so a run is
// reproducible for a given seed and thread count. The held-out texts are only
// looked at for the progress report, never to choose or stop.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "qkv/tensor.h"
#include "tasks/fortunes_classifier.h"
#include "tasks/fortunes_data.h"

namespace qkv::train {

struct ClassifierTrainOptions {
  int64_t epochs = 12;
  int64_t batch_size = 32;
  double lr = 2e-3;
  double min_lr = 0.0;
  int64_t warmup_steps = 100;
  double weight_decay = 0.01;
  double clip_norm = 1.0;     // 0: no clipping
  double word_dropout = 0.1;  // probability that a training word is read as [UNK]
  uint64_t seed = 0;          // batch order and word dropout
};

// Reported after every step. held_out is set on the last step of each epoch
// when a held-out set was given.
struct ClassifierProgress {
  int64_t step = 0;  // steps done, 1 .. steps
  int64_t steps = 0;
  int64_t epoch = 0;  // 1 .. epochs
  double loss = 0;
  double batch_accuracy = 0;
  std::optional<double> held_out;
  double tokens_per_second = 0;  // real (not padding) tokens read
  double elapsed_seconds = 0;
  double seconds_left = 0;
};

struct ClassifierTrainResult {
  int64_t steps = 0;
  double final_loss = 0;                    // mean over the last epoch
  std::optional<double> held_out_accuracy;  // after the last epoch
  double seconds = 0;
};

// Fixed vectors per text (e.g. a pretrained encoder's embeddings) and their labels.
struct EmbeddedExamples {
  Tensor vectors;  // [N, D] float32
  std::vector<int64_t> labels;
};

// Trains in place; on_progress (optional) is called after every step.
ClassifierTrainResult train_classifier(
    EncoderClassifier& model, const EncodedExamples& train, const EncodedExamples* held_out,
    const ClassifierTrainOptions& options,
    const std::function<void(const ClassifierProgress&)>& on_progress = {});
ClassifierTrainResult train_classifier(
    BagOfWordsClassifier& model, const EncodedExamples& train, const EncodedExamples* held_out,
    const ClassifierTrainOptions& options,
    const std::function<void(const ClassifierProgress&)>& on_progress = {});
// The probe reads no words: word_dropout does not apply.
ClassifierTrainResult train_classifier(
    LinearProbe& probe, const EmbeddedExamples& train, const EmbeddedExamples* held_out,
    const ClassifierTrainOptions& options,
    const std::function<void(const ClassifierProgress&)>& on_progress = {});

// Predictions in eval mode (the model is left in eval mode), one per example.
struct ClassifierEvaluation {
  std::vector<int64_t> predictions;             // arg-max class per example
  std::vector<std::vector<int64_t>> confusion;  // [true class][predicted class] counts
  std::vector<int64_t> class_examples;          // examples per true class
  std::vector<double> class_accuracy;           // right / examples per class (0 for none)
  double accuracy = 0;
};

ClassifierEvaluation evaluate(EncoderClassifier& model, const EncodedExamples& examples,
                              int64_t num_classes);
ClassifierEvaluation evaluate(BagOfWordsClassifier& model, const EncodedExamples& examples,
                              int64_t num_classes);
ClassifierEvaluation evaluate(LinearProbe& probe, const EmbeddedExamples& examples,
                              int64_t num_classes);

// The counts and rates of a ClassifierEvaluation from predictions and true labels.
ClassifierEvaluation score_predictions(std::span<const int64_t> predictions,
                                       std::span<const int64_t> labels, int64_t num_classes);

}  // namespace qkv::train
