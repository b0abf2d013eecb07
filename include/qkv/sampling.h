// Choosing the next token from a model's logits (tutorial §8.3, generation).
//
//   greedy         the most likely token (temperature 0)
//   temperature    softmax(logits / T): T < 1 sharpens, T > 1 flattens
//   top-k          only the k most likely tokens may be drawn
//   top-p          only the nucleus may be drawn: the fewest most likely tokens
//                  whose probabilities sum to at least p
//   min-p          only tokens at least min_p times as likely as the most
//                  likely one may be drawn
//
// The filters compose in that order (temperature, then top-k, then top-p on
// the renormalised survivors, then min-p), as in Hugging Face transformers. Each draw
// takes exactly one uniform number from a seeded qkv::Generator, so the same
// seed and logits give the same tokens on every machine.
//
//   Sampler sampler({.temperature = 0.8, .top_k = 40, .top_p = 0.95}, vocab_size);
//   Generator gen(42);
//   int64_t next = sampler.sample(logits_row, gen);   // allocates nothing
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "qkv/generator.h"
#include "qkv/tensor.h"

namespace qkv {

struct SamplingOptions {
  // Divides the logits; 0 means greedy (argmax, no random number drawn).
  double temperature = 1.0;
  // Keep only the k most likely tokens; 0 keeps all (k > vocab keeps all too).
  int64_t top_k = 0;
  // Keep the smallest set of most likely tokens whose probability reaches
  // top_p, in (0, 1]; 1 keeps all.
  double top_p = 1.0;
  // Keep only tokens whose probability is at least min_p times the most
  // likely token's, in [0, 1]; 0 keeps all.
  double min_p = 0.0;
};

// Throws qkv::Error naming the option when temperature is negative or not
// finite, top_k is negative, top_p is not in (0, 1] or min_p not in [0, 1].
void check_sampling_options(const SamplingOptions& options);

// Index of the largest logit (the first of equal ones); NaN logits are an error.
// logits: [V]  ->  id in [0, V)
int64_t argmax(std::span<const float> logits);

// Draws token ids with fixed options; its workspace is sized once for the
// vocabulary, so sample() allocates nothing.
class Sampler {
 public:
  // Checks the options (check_sampling_options) and vocab_size > 0.
  Sampler(const SamplingOptions& options, int64_t vocab_size);

  // One id drawn from the filtered distribution. Logits may be −inf (never
  // drawn) but not NaN or +inf, and not all −inf.
  // logits: [V]  ->  id in [0, V)
  int64_t sample(std::span<const float> logits, Generator& gen);

  // The distribution sample() draws from: probabilities summing to 1, zero
  // outside the kept tokens; one-hot at the argmax for greedy.
  // logits: [V]  ->  V probabilities
  std::vector<double> probabilities(std::span<const float> logits);

  const SamplingOptions& options() const { return options_; }
  int64_t vocab_size() const { return vocab_size_; }

 private:
  // Fills order_ (kept ids, most likely first when filtered) and weights_
  // (their unnormalised probabilities); returns how many are kept and their sum.
  int64_t filter(std::span<const float> logits, double& total);

  SamplingOptions options_;
  int64_t vocab_size_ = 0;
  std::vector<int32_t> order_;   // candidate ids
  std::vector<double> weights_;  // exp((logit − max) / T) per id
};

// One id per row of a float32 logits tensor, drawn in row order.
// logits: [..., V]  ->  one id per row
std::vector<int64_t> sample(const Tensor& logits, const SamplingOptions& options, Generator& gen);

}  // namespace qkv
