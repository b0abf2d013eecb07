// nn::DecoderSession: the prompt and then each token through
// DecoderModel::forward_into with the session's cache (the steps with
// buffers allocated once).
#include "qkv/nn/decoder_session.h"

#include <algorithm>
#include <cmath>
#include <variant>
#include <vector>

#include "nn/decoder_variants.h"
#include "qkv/functional.h"
#include "qkv/linear.h"
#include "qkv/runtime.h"

namespace qkv::nn {

DecoderSession::DecoderSession(DecoderModel& model, int64_t batch_size, int64_t max_len)
    : model_(model),
      config_(model.config()),
      batch_size_(batch_size),
      cache_(model.make_cache(batch_size, max_len)),
      buffers_(model.make_buffers(batch_size)) {
  const DecoderModelConfig& c = config_;
  logits_ = Tensor::zeros({batch_size, c.vocab_size}, c.dtype);
  if (c.dtype == DType::kFloat64) logits_f32_.resize(static_cast<size_t>(c.vocab_size));
}

std::string DecoderSession::context_limit() const {
  std::string limit = std::to_string(cache_.max_len());
  if (cache_.max_len() == config_.max_seq_len) return limit + " (the model's max_seq_len)";
  return limit + " (this session's max_len; the model's max_seq_len is " +
         std::to_string(config_.max_seq_len) + ")";
}

namespace {

// Longer prompts go in passes of this many tokens per sequence: a pass's
// working tensors grow with its rows, and 256 rows keep the integer prompt
// kernels as fast as more do (docs/benchmarks.md, issue 39's peak RSS).
constexpr int64_t kPrefillPass = 256;

}  // namespace

const Tensor& DecoderSession::prefill(std::span<const int64_t> ids) {
  const char* m = "DecoderSession::prefill";
  QKV_CHECK(!ids.empty() && static_cast<int64_t>(ids.size()) % batch_size_ == 0, m, ": ",
            ids.size(), " ids do not form batch_size = ", batch_size_, " non-empty sequences");
  const int64_t B = batch_size_, T = static_cast<int64_t>(ids.size()) / B;
  if (T <= kPrefillPass) {
    logits_.copy_from(model_.forward_last(ids, B, cache_));  // [B, vocab]
  } else {
    // What a later pass would refuse is refused before the first one fills the cache.
    for (int64_t id : ids)
      QKV_CHECK(id >= 0 && id < config_.vocab_size, m, ": token id ", id,
                " is out of range for vocab_size = ", config_.vocab_size);
    QKV_CHECK(T <= cache_.remaining(), m, ": ", T, " tokens do not fit the cache (",
              cache_.remaining(), " of ", context_limit(), " positions left)");
    std::vector<int64_t> pass;
    for (int64_t t0 = 0; t0 < T; t0 += kPrefillPass) {
      const int64_t len = std::min(kPrefillPass, T - t0);
      pass.clear();
      for (int64_t b = 0; b < B; ++b)
        pass.insert(pass.end(), ids.begin() + b * T + t0, ids.begin() + b * T + t0 + len);
      Tensor last = model_.forward_last(pass, B, cache_);
      if (t0 + len == T) logits_.copy_from(last);
    }
  }
  // The prompt's working tensors now sit in the buffer cache (runtime.h), but
  // the steps that follow allocate nothing: hand that memory back, so that
  // decoding does not raise the process's peak above the prompt's.
  empty_buffer_cache();
  return logits_;
}

const Tensor& DecoderSession::step(std::span<const int64_t> tokens) {
  const DecoderModelConfig& c = config_;
  const char* m = "DecoderSession::step";
  QKV_CHECK(static_cast<int64_t>(tokens.size()) == batch_size_, m, ": expected one token per ",
            "sequence (batch_size = ", batch_size_, "), got ", tokens.size());
  const int64_t pos = cache_.length();
  for (int64_t i = 0; i < c.num_layers; ++i)
    QKV_CHECK(cache_.length(i) == pos, m, ": the cache's layers hold different lengths (layer ", i,
              ": ", cache_.length(i), ", fewest: ", pos, "); truncate() it first");
  QKV_CHECK(pos < cache_.max_len(), m, ": the cache is full (", context_limit(),
            " positions); reset() the session or make one with a larger max_len");

  model_.forward_into(
      logits_, tokens,
      {.batch_size = batch_size_, .positions = {&pos, 1}, .caches = {.shared = &cache_}}, buffers_);
  return logits_;
}

std::span<const float> DecoderSession::logits_row(int64_t b) const {
  QKV_CHECK(b >= 0 && b < batch_size_, "DecoderSession::logits_row: b must be in [0, ", batch_size_,
            "), got ", b);
  const int64_t V = config_.vocab_size;
  if (logits_.dtype() == DType::kFloat32)
    return {logits_.data<float>() + b * V, static_cast<size_t>(V)};
  // float64 models: the sampler reads float32, rounded once here.
  const double* row = logits_.data<double>() + b * V;
  std::transform(row, row + V, logits_f32_.begin(), [](double x) { return static_cast<float>(x); });
  return logits_f32_;
}

std::vector<int64_t> DecoderSession::decode(const GenerationOptions& options,
                                            const std::function<bool(int64_t)>& on_token) {
  const char* m = "DecoderSession::decode";
  QKV_CHECK(batch_size_ == 1, m, ": needs a session of batch_size 1, got ", batch_size_);
  QKV_CHECK(length() > 0, m, ": the session holds no tokens; prefill() a prompt first");
  QKV_CHECK(options.max_new_tokens >= 0, m, ": max_new_tokens must be >= 0, got ",
            options.max_new_tokens);
  const int64_t V = config_.vocab_size;
  QKV_CHECK(!options.stop_token || (*options.stop_token >= 0 && *options.stop_token < V), m,
            ": stop_token must be in [0, ", V, "), got ", options.stop_token.value_or(0));
  // The last new token is never fed back.
  const int64_t needed = length() + std::max<int64_t>(options.max_new_tokens - 1, 0);
  QKV_CHECK(needed <= cache_.max_len(), m, ": ", length(),
            " tokens so far and max_new_tokens = ", options.max_new_tokens, " need ", needed,
            " positions, but the context holds ", context_limit());
  Sampler sampler(options.sampling, V);
  Generator gen(options.seed);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(options.max_new_tokens));
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    int64_t id = sampler.sample(logits_row(0), gen);
    out.push_back(id);
    if (on_token && !on_token(id)) break;
    if (options.stop_token && id == *options.stop_token) break;
    if (i + 1 < options.max_new_tokens) step({&id, 1});
  }
  return out;
}

std::vector<int64_t> DecoderSession::generate(std::span<const int64_t> prompt,
                                              const GenerationOptions& options,
                                              const std::function<bool(int64_t)>& on_token) {
  QKV_CHECK(batch_size_ == 1, "generate: needs a session of batch_size 1, got ", batch_size_);
  QKV_CHECK(!prompt.empty(), "generate: the prompt is empty; give at least one token");
  const int64_t needed =
      static_cast<int64_t>(prompt.size()) + std::max<int64_t>(options.max_new_tokens - 1, 0);
  QKV_CHECK(needed <= cache_.max_len(), "generate: a prompt of ", prompt.size(),
            " tokens and max_new_tokens = ", options.max_new_tokens, " need ", needed,
            " positions, but the context holds ", context_limit());
  check_sampling_options(options.sampling);
  reset();
  prefill(prompt);
  return decode(options, on_token);
}

std::vector<int64_t> generate(DecoderModel& model, std::span<const int64_t> prompt,
                              const GenerationOptions& options,
                              const std::function<bool(int64_t)>& on_token) {
  const DecoderModelConfig& c = model.config();
  int64_t max_len =
      static_cast<int64_t>(prompt.size()) + std::max<int64_t>(options.max_new_tokens - 1, 0);
  max_len = std::max<int64_t>(max_len, 1);
  // Past max_seq_len, session.generate() below names the limit.
  max_len = std::min(max_len, c.max_seq_len);
  DecoderSession session(model, 1, max_len);
  return session.generate(prompt, options, on_token);
}

}  // namespace qkv::nn
