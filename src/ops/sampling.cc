// Token sampling: greedy, temperature, top-k, top-p with a seeded generator.
#include "qkv/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace qkv {

void check_sampling_options(const SamplingOptions& o) {
  QKV_CHECK(std::isfinite(o.temperature) && o.temperature >= 0.0,
            "sampling: temperature must be finite and >= 0 (0 = greedy), got ", o.temperature);
  QKV_CHECK(o.top_k >= 0, "sampling: top_k must be >= 0 (0 = keep all tokens), got ", o.top_k);
  QKV_CHECK(o.top_p > 0.0 && o.top_p <= 1.0,
            "sampling: top_p must be in (0, 1] (1 = keep all tokens), got ", o.top_p);
  QKV_CHECK(o.min_p >= 0.0 && o.min_p <= 1.0,
            "sampling: min_p must be in [0, 1] (0 = keep all tokens), got ", o.min_p);
}

int64_t argmax(std::span<const float> logits) {
  QKV_CHECK(!logits.empty(), "argmax: logits are empty");
  int64_t best = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    QKV_CHECK(!std::isnan(logits[i]), "argmax: logit ", i, " is NaN");
    if (logits[i] > logits[best]) best = static_cast<int64_t>(i);
  }
  return best;
}

Sampler::Sampler(const SamplingOptions& options, int64_t vocab_size)
    : options_(options), vocab_size_(vocab_size) {
  check_sampling_options(options);
  QKV_CHECK(vocab_size > 0 && vocab_size <= std::numeric_limits<int32_t>::max(),
            "Sampler: vocab_size must be in [1, 2^31), got ", vocab_size);
  order_.resize(static_cast<size_t>(vocab_size));
  weights_.resize(static_cast<size_t>(vocab_size));
}

int64_t Sampler::filter(std::span<const float> logits, double& total) {
  const int64_t V = vocab_size_;
  QKV_CHECK(static_cast<int64_t>(logits.size()) == V, "Sampler: expected ", V,
            " logits (the vocabulary size), got ", logits.size());
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < V; ++i) {
    const float x = logits[i];
    QKV_CHECK(!std::isnan(x) && x != std::numeric_limits<float>::infinity(), "Sampler: logit ", i,
              " is ", x, "; logits must be finite or -inf");
    max = std::max(max, static_cast<double>(x));
  }
  QKV_CHECK(max > -std::numeric_limits<double>::infinity(),
            "Sampler: every logit is -inf; there is no token to draw");
  // Unnormalised softmax(logits / T), in float64; exp(-inf) = 0.
  const double inv_t = 1.0 / options_.temperature;
  for (int64_t i = 0; i < V; ++i) weights_[i] = std::exp((logits[i] - max) * inv_t);
  std::iota(order_.begin(), order_.end(), 0);

  const bool top_k = options_.top_k > 0 && options_.top_k < V;
  const bool top_p = options_.top_p < 1.0;
  const bool min_p = options_.min_p > 0.0;
  int64_t kept = V;
  // Most likely first; equal weights by id, so the order never depends on the sort.
  auto more_likely = [this](int32_t a, int32_t b) {
    return weights_[a] > weights_[b] || (weights_[a] == weights_[b] && a < b);
  };
  if (top_k) {
    kept = options_.top_k;
    std::partial_sort(order_.begin(), order_.begin() + kept, order_.end(), more_likely);
  } else if (top_p || min_p) {
    std::sort(order_.begin(), order_.end(), more_likely);
  }
  if (top_p) {
    double sum = 0.0;
    for (int64_t i = 0; i < kept; ++i) sum += weights_[order_[i]];
    // The fewest leading tokens whose share reaches top_p (at least one).
    const double target = options_.top_p * sum;
    double cumulative = 0.0;
    int64_t n = 0;
    while (n < kept) {
      cumulative += weights_[order_[n++]];
      if (cumulative >= target) break;
    }
    kept = n;
  }
  if (min_p) {
    // The most likely token's weight is exp(0) = 1; it always stays.
    const double floor = options_.min_p * weights_[order_[0]];
    int64_t n = 1;
    while (n < kept && weights_[order_[n]] >= floor) ++n;
    kept = n;
  }
  total = 0.0;
  for (int64_t i = 0; i < kept; ++i) total += weights_[order_[i]];
  return kept;
}

int64_t Sampler::sample(std::span<const float> logits, Generator& gen) {
  if (options_.temperature == 0.0) {
    QKV_CHECK(static_cast<int64_t>(logits.size()) == vocab_size_, "Sampler: expected ", vocab_size_,
              " logits (the vocabulary size), got ", logits.size());
    return argmax(logits);
  }
  double total = 0.0;
  const int64_t kept = filter(logits, total);
  const double target = gen.uniform() * total;
  double cumulative = 0.0;
  int64_t last_possible = order_[0];
  for (int64_t i = 0; i < kept; ++i) {
    const int32_t id = order_[i];
    if (weights_[id] == 0.0) continue;
    cumulative += weights_[id];
    last_possible = id;
    if (cumulative > target) return id;
  }
  return last_possible;  // only when rounding left target at the very top
}

std::vector<double> Sampler::probabilities(std::span<const float> logits) {
  std::vector<double> p(static_cast<size_t>(vocab_size_), 0.0);
  if (options_.temperature == 0.0) {
    QKV_CHECK(static_cast<int64_t>(logits.size()) == vocab_size_, "Sampler: expected ", vocab_size_,
              " logits (the vocabulary size), got ", logits.size());
    p[argmax(logits)] = 1.0;
    return p;
  }
  double total = 0.0;
  const int64_t kept = filter(logits, total);
  for (int64_t i = 0; i < kept; ++i) p[order_[i]] = weights_[order_[i]] / total;
  return p;
}

std::vector<int64_t> sample(const Tensor& logits, const SamplingOptions& options, Generator& gen) {
  QKV_CHECK(logits.defined() && logits.dim() >= 1, "sample: logits must be [..., V], got ",
            logits.defined() ? shape_str(logits.shape()) : std::string("an undefined tensor"));
  QKV_CHECK_TYPE(logits.dtype() == DType::kFloat32, "sample: logits must be float32, got ",
                 dtype_name(logits.dtype()));
  const int64_t V = logits.size(-1);
  QKV_CHECK(V > 0, "sample: logits have an empty vocabulary dim, shape ",
            shape_str(logits.shape()));
  const Tensor rows = logits.contiguous();
  Sampler sampler(options, V);
  std::vector<int64_t> ids;
  const float* data = rows.data<float>();
  for (int64_t r = 0; r < rows.numel() / V; ++r)
    ids.push_back(
        sampler.sample(std::span<const float>(data + r * V, static_cast<size_t>(V)), gen));
  return ids;
}

}  // namespace qkv
