#include "tasks/fortunes_classifier.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "qkv/error.h"
#include "qkv/functional.h"
#include "tasks/model_parameters.h"

namespace qkv::train {

namespace {

void check_batch(const TextBatch& batch, const char* who) {
  QKV_CHECK(batch.batch >= 1 && batch.length >= 1 &&
                static_cast<int64_t>(batch.tokens.size()) == batch.batch * batch.length &&
                static_cast<int64_t>(batch.lengths.size()) == batch.batch,
            who,
            ": the batch must hold B * L tokens and B lengths (B, L >= 1), got B = ", batch.batch,
            ", L = ", batch.length, ", ", batch.tokens.size(), " tokens, ", batch.lengths.size(),
            " lengths");
  for (int64_t len : batch.lengths)
    QKV_CHECK(len >= 1 && len <= batch.length, who, ": row lengths must be in [1, ", batch.length,
              "], got ", len);
}

// The models' option checks: "<who>: <name> must be >= <least>, got <value>".
void check_at_least(const char* who, const char* name, int64_t value, int64_t least) {
  QKV_CHECK(value >= least, who, ": ", name, " must be >= ", least, ", got ", value);
}

nn::Embedding scaled_embedding(int64_t rows, int64_t dim, double std, Generator& gen) {
  nn::EmbeddingOptions options;
  options.num_embeddings = rows;
  options.embedding_dim = dim;
  nn::Embedding e(options, &gen);
  for (nn::Parameter& p : e.parameters()) {
    float* v = p.value.data<float>();
    for (int64_t i = 0; i < p.value.numel(); ++i) v[i] = static_cast<float>(v[i] * std);
  }
  return e;
}

}  // namespace

// --- EncoderClassifier ----------------------------------------------------------

EncoderClassifier::EncoderClassifier(const EncoderClassifierOptions& options)
    : options_(options),
      init_gen_(options.seed),
      dropout_gen_(std::make_unique<Generator>(options.seed ^ 0xD5A61266F0C9392Cull)),
      tokens_(scaled_embedding(std::max<int64_t>(options.vocab_size, 1), options.d_model,
                               options.embedding_std, init_gen_)),
      positions_(scaled_embedding(std::max<int64_t>(options.max_length, 1), options.d_model,
                                  options.embedding_std, init_gen_)),
      encoder_(
          nn::TransformerEncoderOptions{.layer = {.d_model = options.d_model,
                                                  .nhead = options.nhead,
                                                  .dim_feedforward = options.dim_feedforward,
                                                  .dropout = options.dropout,
                                                  .batch_first = true},
                                        .num_layers = std::max<int64_t>(options.num_layers, 1)},
          &init_gen_),
      head_({.in_features = options.d_model,
             .out_features = std::max<int64_t>(options.num_classes, 1)},
            &init_gen_) {
  check_at_least("EncoderClassifier", "vocab_size", options.vocab_size, 2);
  check_at_least("EncoderClassifier", "num_classes", options.num_classes, 2);
  check_at_least("EncoderClassifier", "max_length", options.max_length, 1);
  check_at_least("EncoderClassifier", "num_layers", options.num_layers, 1);
  QKV_CHECK(options.embedding_std > 0, "EncoderClassifier: embedding_std must be > 0, got ",
            options.embedding_std);
  if (options.pooling == Pooling::kAttention)
    score_.emplace(nn::LinearOptions{.in_features = options.d_model, .out_features = 1},
                   &init_gen_);
  encoder_.set_generator(dropout_gen_.get());
}

Tensor EncoderClassifier::forward(const TextBatch& batch, EncoderClassifierRecord* record) {
  check_batch(batch, "EncoderClassifier");
  QKV_CHECK(batch.length <= options_.max_length, "EncoderClassifier: texts of at most ",
            options_.max_length, " tokens (max_length), got a batch of length ", batch.length);
  const int64_t b = batch.batch, l = batch.length;
  const Shape shape = {b, l};
  std::vector<int64_t> position_ids(b * l);
  for (int64_t i = 0; i < b * l; ++i) position_ids[i] = i % l;
  for (int64_t id : batch.tokens)
    QKV_CHECK(id >= 0 && id < options_.vocab_size, "EncoderClassifier: token ids must be in [0, ",
              options_.vocab_size, "), got ", id);
  const Tensor x =
      add(tokens_.forward(batch.tokens, shape, record ? &record->tokens : nullptr),
          positions_.forward(position_ids, shape, record ? &record->positions : nullptr));
  nn::TransformerEncoderForward args;
  args.src_key_padding_mask = batch.key_padding_mask();
  const Tensor h =
      encoder_.forward(x, args, record ? &record->encoder : nullptr).contiguous();  // [B, L, D]

  // Pooling weights [B, L]: zero at padding, each row sums to 1.
  Tensor weights = Tensor::zeros({b, l});
  float* w = weights.data<float>();
  if (score_) {
    const Tensor s =
        score_->forward(h, record ? &record->score : nullptr).contiguous();  // [B, L, 1]
    const float* sp = s.data<float>();
    for (int64_t i = 0; i < b; ++i) {
      const int64_t n = batch.lengths[i];
      const float top = *std::max_element(sp + i * l, sp + i * l + n);
      double sum = 0;
      for (int64_t t = 0; t < n; ++t) sum += w[i * l + t] = std::exp(sp[i * l + t] - top);
      for (int64_t t = 0; t < n; ++t) w[i * l + t] = static_cast<float>(w[i * l + t] / sum);
    }
  } else {
    for (int64_t i = 0; i < b; ++i)
      for (int64_t t = 0; t < batch.lengths[i]; ++t) w[i * l + t] = 1.0f / batch.lengths[i];
  }
  // pooled[i] = Σ_t w[i, t] h[i, t]; padding has weight 0.
  const Tensor pooled = sum(mul(weights.unsqueeze(2), h), 1);  // [B, D]
  if (record != nullptr) {
    record->encoded = h;
    record->lengths = batch.lengths;
    record->weights = weights;
  }
  return head_.forward(pooled, record ? &record->head : nullptr);
}

void EncoderClassifier::backward(const Tensor& grad_logits, const EncoderClassifierRecord& record) {
  QKV_CHECK(record.encoded.defined(),
            "EncoderClassifier::backward: the record is empty; pass one to forward() first");
  const int64_t b = record.encoded.size(0), l = record.encoded.size(1), d = options_.d_model;
  QKV_CHECK(grad_logits.shape() == Shape({b, options_.num_classes}),
            "EncoderClassifier::backward: grad_logits must be [", b, ", ", options_.num_classes,
            "], got ", shape_str(grad_logits.shape()));
  const Tensor grad_pooled = head_.backward(grad_logits, record.head).contiguous();  // [B, D]
  const float* gp = grad_pooled.data<float>();
  const float* w = record.weights.data<float>();
  const float* hp = record.encoded.data<float>();
  // pooled[i] = Σ_t w[i, t] h[i, t]  ->  grad_h[i, t] = w[i, t] grad_pooled[i]
  Tensor grad_h = Tensor::zeros({b, l, d});
  float* gh = grad_h.data<float>();
  for (int64_t i = 0; i < b; ++i)
    for (int64_t t = 0; t < record.lengths[i]; ++t)
      for (int64_t j = 0; j < d; ++j) gh[(i * l + t) * d + j] = w[i * l + t] * gp[i * d + j];
  if (score_) {
    // w[i] = softmax(s[i]) over the real positions, s = score(h):
    // grad_s[i, t] = w[i, t] (g[i, t] − Σ_u w[i, u] g[i, u]) with g[i, t] = grad_pooled[i]·h[i, t].
    Tensor grad_s = Tensor::zeros({b, l, 1});
    float* gs = grad_s.data<float>();
    for (int64_t i = 0; i < b; ++i) {
      double mean = 0;
      for (int64_t t = 0; t < record.lengths[i]; ++t) {
        double g = 0;
        for (int64_t j = 0; j < d; ++j) g += gp[i * d + j] * hp[(i * l + t) * d + j];
        gs[i * l + t] = static_cast<float>(g);
        mean += w[i * l + t] * g;
      }
      for (int64_t t = 0; t < record.lengths[i]; ++t)
        gs[i * l + t] = static_cast<float>(w[i * l + t] * (gs[i * l + t] - mean));
    }
    const Tensor via_score = score_->backward(grad_s, record.score).contiguous();  // [B, L, D]
    const float* vs = via_score.data<float>();
    for (int64_t i = 0; i < b * l * d; ++i) gh[i] += vs[i];
  }
  const Tensor grad_x = encoder_.backward(grad_h, record.encoder).contiguous();
  tokens_.backward(grad_x, record.tokens);
  positions_.backward(grad_x, record.positions);
}

std::vector<nn::Parameter> EncoderClassifier::parameters() {
  std::vector<nn::Parameter> out = embedding_parameters(tokens_, positions_);
  nn::append_parameters(out, "encoder", encoder_.parameters());
  if (score_) nn::append_parameters(out, "score", score_->parameters());
  nn::append_parameters(out, "head", head_.parameters());
  return out;
}

void EncoderClassifier::zero_grad() { zero_gradients(parameters()); }

void EncoderClassifier::train(bool on) { encoder_.train(on); }

std::vector<std::vector<float>> EncoderClassifier::pooling_weights(const TextBatch& batch) {
  EncoderClassifierRecord record;
  forward(batch, &record);
  std::vector<std::vector<float>> out(batch.batch);
  const float* w = record.weights.data<float>();
  for (int64_t i = 0; i < batch.batch; ++i)
    out[i].assign(w + i * batch.length, w + i * batch.length + batch.lengths[i]);
  return out;
}

int64_t EncoderClassifier::num_parameters() { return count_parameters(parameters()); }

// --- BagOfWordsClassifier -------------------------------------------------------

namespace {

// `options`, once they are checked: before the probe checks its own.
const BagOfWordsOptions& checked(const BagOfWordsOptions& options) {
  check_at_least("BagOfWordsClassifier", "vocab_size", options.vocab_size, 2);
  check_at_least("BagOfWordsClassifier", "num_classes", options.num_classes, 2);
  return options;
}

}  // namespace

BagOfWordsClassifier::BagOfWordsClassifier(const BagOfWordsOptions& options)
    : options_(checked(options)),
      idf_(options.vocab_size, 1.0f),
      probe_({.in_features = options.vocab_size,
              .num_classes = options.num_classes,
              .seed = options.seed}) {}

void BagOfWordsClassifier::fit_idf(std::span<const std::vector<int64_t>> documents) {
  std::vector<int64_t> df(options_.vocab_size, 0);
  std::vector<int64_t> last_seen(options_.vocab_size, -1);
  for (size_t doc = 0; doc < documents.size(); ++doc)
    for (int64_t id : documents[doc]) {
      QKV_CHECK(id >= 0 && id < options_.vocab_size,
                "BagOfWordsClassifier::fit_idf: token ids must be in [0, ", options_.vocab_size,
                "), got ", id);
      if (last_seen[id] != static_cast<int64_t>(doc)) ++df[id];
      last_seen[id] = static_cast<int64_t>(doc);
    }
  const double n = static_cast<double>(documents.size());
  for (int64_t v = 0; v < options_.vocab_size; ++v)
    idf_[v] = static_cast<float>(1.0 + std::log((1.0 + n) / (1.0 + df[v])));
}

Tensor BagOfWordsClassifier::features(const TextBatch& batch) const {
  check_batch(batch, "BagOfWordsClassifier");
  const int64_t v = options_.vocab_size;
  Tensor out = Tensor::zeros({batch.batch, v});
  float* f = out.data<float>();
  for (int64_t i = 0; i < batch.batch; ++i) {
    float* row = f + i * v;
    std::vector<int64_t> present;
    for (int64_t t = 0; t < batch.lengths[i]; ++t) {
      const int64_t id = batch.tokens[i * batch.length + t];
      QKV_CHECK(id >= 0 && id < v, "BagOfWordsClassifier: token ids must be in [0, ", v, "), got ",
                id);
      if (id == WordVocabulary::kPad) continue;
      if (row[id] == 0) present.push_back(id);
      row[id] += 1;
    }
    double norm = 0;
    for (int64_t id : present) {
      row[id] = static_cast<float>((1.0 + std::log(row[id])) * idf_[id]);
      norm += static_cast<double>(row[id]) * row[id];
    }
    if (norm > 0)
      for (int64_t id : present) row[id] = static_cast<float>(row[id] / std::sqrt(norm));
  }
  return out;
}

Tensor BagOfWordsClassifier::forward(const TextBatch& batch, BagOfWordsRecord* record) {
  return probe_.forward(features(batch), record);
}

void BagOfWordsClassifier::backward(const Tensor& grad_logits, const BagOfWordsRecord& record) {
  QKV_CHECK(record.head.input.defined(),
            "BagOfWordsClassifier::backward: the record is empty; pass one to forward() first");
  probe_.backward(grad_logits, record);  // the features have no parameters
}

std::vector<nn::Parameter> BagOfWordsClassifier::parameters() { return probe_.parameters(); }

void BagOfWordsClassifier::zero_grad() { probe_.zero_grad(); }

std::vector<int64_t> BagOfWordsClassifier::top_words(int64_t label, int64_t count) const {
  QKV_CHECK(label >= 0 && label < options_.num_classes,
            "BagOfWordsClassifier::top_words: label must be in [0, ", options_.num_classes,
            "), got ", label);
  const Tensor w = probe_.head().weight().select(0, label).contiguous();
  const float* p = w.data<float>();
  std::vector<int64_t> ids(options_.vocab_size);
  std::iota(ids.begin(), ids.end(), 0);
  ids.erase(ids.begin());  // [PAD] never has a feature
  count = std::clamp<int64_t>(count, 0, static_cast<int64_t>(ids.size()));
  std::partial_sort(ids.begin(), ids.begin() + count, ids.end(),
                    [&](int64_t a, int64_t b) { return p[a] > p[b]; });
  ids.resize(count);
  return ids;
}

int64_t BagOfWordsClassifier::num_parameters() { return count_parameters(parameters()); }

// --- LinearProbe -----------------------------------------------------------------

LinearProbe::LinearProbe(const LinearProbeOptions& options)
    : options_(options),
      init_gen_(options.seed),
      head_({.in_features = std::max<int64_t>(options.in_features, 1),
             .out_features = std::max<int64_t>(options.num_classes, 1)},
            &init_gen_) {
  check_at_least("LinearProbe", "in_features", options.in_features, 1);
  check_at_least("LinearProbe", "num_classes", options.num_classes, 2);
}

Tensor LinearProbe::forward(const Tensor& x, LinearProbeRecord* record) {
  QKV_CHECK(x.dim() == 2 && x.size(1) == options_.in_features, "LinearProbe: x must be [B, ",
            options_.in_features, "], got ", shape_str(x.shape()));
  return head_.forward(x, record ? &record->head : nullptr);
}

void LinearProbe::backward(const Tensor& grad_logits, const LinearProbeRecord& record) {
  QKV_CHECK(record.head.input.defined(),
            "LinearProbe::backward: the record is empty; pass one to forward() first");
  head_.backward(grad_logits, record.head);
}

std::vector<nn::Parameter> LinearProbe::parameters() {
  std::vector<nn::Parameter> out;
  nn::append_parameters(out, "head", head_.parameters());
  return out;
}

void LinearProbe::zero_grad() { head_.zero_grad(); }

int64_t LinearProbe::num_parameters() { return count_parameters(parameters()); }

}  // namespace qkv::train
