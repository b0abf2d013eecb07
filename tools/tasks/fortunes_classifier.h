// The two text classifiers of `qkv train fortunes` (fortunes_data.h):
//
//   EncoderClassifier: word embedding + learned position embedding, a small
//     nn::TransformerEncoder (batch_first, post-norm, dropout) that reads the
//     words with a key padding mask, a pooling over the real (not padded)
//     positions, and an nn::Linear head -> class logits.
//   BagOfWordsClassifier: the baseline without word order: multinomial
//     logistic regression (one nn::Linear) on a text's tf-idf vector,
//     (1 + log count) · idf, scaled to unit length. idf = 1 + log((1 + N) /
//     (1 + document frequency)) over the N training texts.
//   LinearProbe: logistic regression on fixed vectors per text, such as the
//     embeddings of a frozen pretrained encoder (models::SentenceEncoder).
//
//   train::EncoderClassifier model({.vocab_size = data.vocab.size(), .num_classes = 5});
//   train::EncoderClassifierRecord rec;
//   Tensor logits = model.forward(batch, &rec);           // [B, C]
//   ... cross_entropy_backward(..., grad_logits) ...
//   model.backward(grad_logits, rec);                     // into parameters()' grads
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "qkv/generator.h"
#include "qkv/nn/embedding.h"
#include "qkv/nn/linear.h"
#include "qkv/nn/parameter.h"
#include "qkv/nn/transformer.h"
#include "qkv/tensor.h"
#include "tasks/fortunes_data.h"

namespace qkv::train {

// How the encoder's outputs [B, L, D] become one vector per text.
enum class Pooling {
  kMean,       // the average over the real positions
  kAttention,  // softmax(h·w + b) over the real positions weighs them
};

struct EncoderClassifierOptions {
  int64_t vocab_size = 0;
  int64_t num_classes = 0;
  int64_t max_length = 64;  // positions learned; longer texts are cut (make_text_batch)
  int64_t d_model = 64;
  int64_t nhead = 4;
  int64_t num_layers = 1;
  int64_t dim_feedforward = 128;
  double dropout = 0.1;  // the encoder layers' three dropouts (training mode only)
  // Word and position embeddings start as N(0, std²). With torch's N(0, 1)
  // a PyTorch prototype overfit at once: 56% held-out on the default topics
  // of `qkv train fortunes`, against 70% with 0.1 (and word dropout 0.1).
  double embedding_std = 0.1;
  // `qkv train fortunes` uses kAttention: 71.7% held-out against 70.8% with
  // kMean, averaged over the splits of seeds 0-4 (within noise of each other).
  Pooling pooling = Pooling::kMean;
  uint64_t seed = 0;  // initialisation and dropout
};

// What EncoderClassifier::forward saves for backward.
struct EncoderClassifierRecord {
  nn::EmbeddingRecord tokens, positions;
  nn::TransformerEncoderRecord encoder;
  Tensor encoded;                // [B, L, D] the encoder's output
  std::vector<int64_t> lengths;  // [B] real positions per row
  nn::LinearRecord score, head;  // score: kAttention's h·w + b
  Tensor weights;                // [B, L] pooling weights (0 at padding)
};

class EncoderClassifier {
 public:
  explicit EncoderClassifier(const EncoderClassifierOptions& options);

  // batch.tokens [B, L] (L <= max_length)  ->  logits [B, num_classes]
  // With a record, also saves what backward() needs (nullptr: inference).
  Tensor forward(const TextBatch& batch, EncoderClassifierRecord* record = nullptr);

  // Adds every parameter's gradient into its buffer (see parameters()).
  // grad_logits: [B, num_classes]
  void backward(const Tensor& grad_logits, const EncoderClassifierRecord& record);

  // "tokens.weight", "positions.weight", "encoder.layers.0....", ["score.*",] "head.*".
  std::vector<nn::Parameter> parameters();
  void zero_grad();
  // Dropout on (the default) or off.
  void train(bool on = true);
  void eval() { train(false); }

  // Pooling weights of each real position, per text (kMean: 1/length each):
  // where the classifier looks. Row b has batch.lengths[b] entries.
  std::vector<std::vector<float>> pooling_weights(const TextBatch& batch);

  const EncoderClassifierOptions& options() const { return options_; }
  int64_t max_length() const { return options_.max_length; }
  int64_t num_parameters();

 private:
  EncoderClassifierOptions options_;
  Generator init_gen_;
  std::unique_ptr<Generator> dropout_gen_;  // the layers keep its address: stable across moves
  nn::Embedding tokens_;
  nn::Embedding positions_;
  nn::TransformerEncoder encoder_;
  std::optional<nn::Linear> score_;  // kAttention
  nn::Linear head_;
};

// Logistic regression on fixed text vectors.
struct LinearProbeOptions {
  int64_t in_features = 0;
  int64_t num_classes = 0;
  uint64_t seed = 0;  // initialisation
};

// What LinearProbe::forward saves for backward.
struct LinearProbeRecord {
  nn::LinearRecord head;
};

class LinearProbe {
 public:
  explicit LinearProbe(const LinearProbeOptions& options);

  // x: [B, in_features]  ->  logits [B, num_classes]
  Tensor forward(const Tensor& x, LinearProbeRecord* record = nullptr);
  // grad_logits: [B, num_classes]
  void backward(const Tensor& grad_logits, const LinearProbeRecord& record);

  // "head.weight", "head.bias".
  std::vector<nn::Parameter> parameters();
  void zero_grad();

  const LinearProbeOptions& options() const { return options_; }
  const nn::Linear& head() const { return head_; }
  int64_t num_parameters();

 private:
  LinearProbeOptions options_;
  Generator init_gen_;
  nn::Linear head_;
};

// Bag-of-words baseline.
struct BagOfWordsOptions {
  int64_t vocab_size = 0;
  int64_t num_classes = 0;
  uint64_t seed = 0;  // initialisation
};

// What BagOfWordsClassifier::forward saves for backward: its probe's record.
using BagOfWordsRecord = LinearProbeRecord;

// A LinearProbe on the texts' tf-idf vectors.
class BagOfWordsClassifier {
 public:
  explicit BagOfWordsClassifier(const BagOfWordsOptions& options);

  // Document frequencies from the training texts (word ids); until then idf = 1.
  void fit_idf(std::span<const std::vector<int64_t>> documents);

  // Unit-length tf-idf rows; [PAD] never counts, [UNK] counts as a word.
  // batch.tokens [B, L]  ->  [B, vocab_size]
  Tensor features(const TextBatch& batch) const;

  // batch.tokens [B, L]  ->  logits [B, num_classes]
  Tensor forward(const TextBatch& batch, BagOfWordsRecord* record = nullptr);
  // grad_logits: [B, num_classes]
  void backward(const Tensor& grad_logits, const BagOfWordsRecord& record);

  // "head.weight", "head.bias".
  std::vector<nn::Parameter> parameters();
  void zero_grad();
  // No dropout: present so that training code treats both models alike.
  void train(bool = true) {}
  void eval() {}

  // The words with the largest weight for a class, most telling first.
  std::vector<int64_t> top_words(int64_t label, int64_t count) const;

  const BagOfWordsOptions& options() const { return options_; }
  // Reads whole texts.
  int64_t max_length() const { return std::numeric_limits<int64_t>::max(); }
  int64_t num_parameters();

 private:
  BagOfWordsOptions options_;
  std::vector<float> idf_;
  LinearProbe probe_;
};

}  // namespace qkv::train
