// nn::DecoderSession: prefill through DecoderModel::forward with the cache,
// then allocation-free single-token steps built from the `_into` ops.
#include "qkv/nn/decoder_session.h"

#include <algorithm>
#include <cmath>

#include "qkv/functional.h"
#include "qkv/linear.h"

namespace qkv::nn {

namespace {

// The entry `name` of a module's state_dict, or an undefined tensor.
Tensor entry(const std::map<std::string, Tensor>& state, const std::string& name) {
  const auto it = state.find(name);
  return it == state.end() ? Tensor() : it->second;
}

template <class Module>
std::map<std::string, Tensor> state_of(const Module& module) {
  return std::visit([](const auto& m) { return m.state_dict(); }, module);
}

// RoPE on rows of E values, as RotaryEmbedding::forward computes it (float64
// angles and products, one rounding), for one position.
template <class T>
void rotate_rows(T* rows, int64_t count, int64_t E, RopeStyle style, const double* cos_sin) {
  const int64_t half = E / 2;
  for (int64_t r = 0; r < count; ++r) {
    T* row = rows + r * E;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t ia = style == RopeStyle::kInterleaved ? 2 * i : i;
      const int64_t ib = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
      const double a = row[ia], b = row[ib], c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
      row[ia] = static_cast<T>(a * c - b * s);
      row[ib] = static_cast<T>(b * c + a * s);
    }
  }
}

}  // namespace

DecoderSession::DecoderSession(DecoderModel& model, int64_t batch_size, int64_t max_len)
    : model_(model),
      config_(model.config()),
      batch_size_(batch_size),
      cache_(model.make_cache(batch_size, max_len)) {
  const DecoderModelConfig& c = config_;
  QKV_CHECK(c.positions == PositionKind::kRope || cache_.max_len() <= c.max_seq_len,
            "DecoderSession: max_len (", cache_.max_len(),
            ") exceeds the model's position table (max_seq_len = ", c.max_seq_len, ")");
  const int64_t B = batch_size, D = c.d_model, H = c.num_heads, Hkv = c.num_kv_heads;
  const int64_t E = D / H, F = c.ffn_hidden;

  for (const DecoderModel::Block& block : model.blocks()) {
    BlockWeights w;
    const auto n1 = state_of(block.attention_norm), n2 = state_of(block.ffn_norm);
    w.norm1_w = entry(n1, "weight");
    w.norm1_b = entry(n1, "bias");
    w.norm2_w = entry(n2, "weight");
    w.norm2_b = entry(n2, "bias");
    const auto a = block.attention.state_dict();
    w.wq = entry(a, "q_proj.weight");
    w.wk = entry(a, "k_proj.weight");
    w.wv = entry(a, "v_proj.weight");
    w.wo = entry(a, "o_proj.weight");
    w.bq = entry(a, "q_proj.bias");
    w.bk = entry(a, "k_proj.bias");
    w.bv = entry(a, "v_proj.bias");
    w.bo = entry(a, "o_proj.bias");
    const auto f = state_of(block.feed_forward);
    const bool swiglu = c.ffn == FeedForwardKind::kSwiGLU;
    w.w1 = entry(f, swiglu ? "w1.weight" : "linear1.weight");
    w.b1 = entry(f, swiglu ? "w1.bias" : "linear1.bias");
    w.w2 = entry(f, swiglu ? "w2.weight" : "linear2.weight");
    w.b2 = entry(f, swiglu ? "w2.bias" : "linear2.bias");
    w.w3 = entry(f, "w3.weight");
    w.b3 = entry(f, "w3.bias");
    weights_.push_back(w);
  }
  const auto n = state_of(model.norm());
  norm_w_ = entry(n, "weight");
  norm_b_ = entry(n, "bias");
  output_w_ = model.output_weight();
  position_table_ = model.position_table();

  if (c.positions == PositionKind::kRope) {
    const std::vector<double> theta =
        RotaryEmbedding({.head_dim = E, .base = c.rope_base, .style = c.rope_style})
            .inverse_frequencies();
    rope_cos_sin_.resize(static_cast<size_t>(cache_.max_len() * E));
    for (int64_t p = 0; p < cache_.max_len(); ++p)
      for (int64_t i = 0; i < E / 2; ++i) {
        const double angle = static_cast<double>(p) * theta[i];
        rope_cos_sin_[p * E + 2 * i] = std::cos(angle);
        rope_cos_sin_[p * E + 2 * i + 1] = std::sin(angle);
      }
  }

  const DType dt = c.dtype;
  x_ = Tensor::zeros({B, D}, dt);
  h_ = Tensor::zeros({B, D}, dt);
  q_ = Tensor::zeros({B, H * E}, dt);
  k_ = Tensor::zeros({B, Hkv * E}, dt);
  v_ = Tensor::zeros({B, Hkv * E}, dt);
  q4_ = q_.view({B, H, 1, E});
  k4_ = k_.view({B, Hkv, 1, E});
  v4_ = v_.view({B, Hkv, 1, E});
  attn_ = Tensor::zeros({B, H, 1, E}, dt);
  attn2d_ = attn_.view({B, H * E});
  hidden_ = Tensor::zeros({B, F}, dt);
  if (c.ffn == FeedForwardKind::kSwiGLU) gate_ = Tensor::zeros({B, F}, dt);
  logits_ = Tensor::zeros({B, c.vocab_size}, dt);
  if (dt == DType::kFloat64) logits_f32_.resize(static_cast<size_t>(c.vocab_size));
}

void DecoderSession::norm_into(Tensor& out, const Tensor& x, const Tensor& w,
                               const Tensor& b) const {
  const Shape shape{config_.d_model};
  if (config_.norm == NormKind::kLayerNorm)
    layer_norm_into(out, x, shape, w, b, config_.norm_eps);
  else
    rms_norm_into(out, x, shape, w, config_.norm_eps);
}

void DecoderSession::rotate(Tensor& rows, int64_t pos) const {
  const int64_t E = config_.d_model / config_.num_heads;
  const double* cs = rope_cos_sin_.data() + pos * E;
  const int64_t count = rows.numel() / E;
  if (rows.dtype() == DType::kFloat64)
    rotate_rows(rows.data<double>(), count, E, config_.rope_style, cs);
  else
    rotate_rows(rows.data<float>(), count, E, config_.rope_style, cs);
}

const Tensor& DecoderSession::prefill(std::span<const int64_t> ids) {
  QKV_CHECK(!ids.empty() && static_cast<int64_t>(ids.size()) % batch_size_ == 0,
            "DecoderSession::prefill: ", ids.size(), " ids do not form batch_size = ", batch_size_,
            " non-empty sequences");
  const Tensor all = model_.forward(ids, batch_size_, cache_);  // [B, T, vocab]
  logits_.copy_from(all.select(1, all.size(1) - 1));
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
  QKV_CHECK(pos < cache_.max_len(), m, ": the cache is full (", cache_.max_len(),
            " positions); reset() the session or make one with a larger max_len");

  embedding_into(x_, tokens, model_.tok_embeddings().weight());
  if (position_table_.defined()) {
    const Tensor row = position_table_.select(0, pos);
    for (int64_t b = 0; b < batch_size_; ++b) {
      Tensor xb = x_.select(0, b);
      add_into(xb, xb, row);
    }
  }
  SdpaOptions attention;
  attention.enable_gqa = c.num_kv_heads != c.num_heads;
  attention.causal = CausalMask::kBottomRight;  // the new query sees every cached key
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const BlockWeights& w = weights_[i];
    // x = x + o_proj(attention(rope(q), cache + rope(k), cache + v))
    norm_into(h_, x_, w.norm1_w, w.norm1_b);
    linear_into(q_, h_, w.wq, w.bq);
    linear_into(k_, h_, w.wk, w.bk);
    linear_into(v_, h_, w.wv, w.bv);
    if (c.positions == PositionKind::kRope) {
      rotate(q_, pos);
      rotate(k_, pos);
    }
    cache_.append(i, k4_, v4_);
    scaled_dot_product_attention_into(attn_, q4_, cache_.keys(i), cache_.values(i), attention,
                                      workspace_);
    linear_into(h_, attn2d_, w.wo, w.bo);
    add_into(x_, x_, h_);
    // x = x + feed_forward(norm(x))
    norm_into(h_, x_, w.norm2_w, w.norm2_b);
    linear_into(hidden_, h_, w.w1, w.b1);
    if (c.ffn == FeedForwardKind::kSwiGLU) {
      linear_into(gate_, h_, w.w3, w.b3);
      silu_into(hidden_, hidden_);
      mul_into(hidden_, hidden_, gate_);
    } else {
      activate_into(hidden_, hidden_, Activation::kGelu);
    }
    linear_into(h_, hidden_, w.w2, w.b2);
    add_into(x_, x_, h_);
  }
  norm_into(h_, x_, norm_w_, norm_b_);
  linear_into(logits_, h_, output_w_);
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
            " positions, but the context holds ", cache_.max_len());
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
            " positions, but the context holds ", cache_.max_len());
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
  if (c.positions != PositionKind::kRope) max_len = std::min(max_len, c.max_seq_len);
  DecoderSession session(model, 1, max_len);
  return session.generate(prompt, options, on_token);
}

}  // namespace qkv::nn
