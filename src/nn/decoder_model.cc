// nn::DecoderModel: construction, the forward pass over whole sequences
// (with or without a KV cache) and the state_dict.
#include "qkv/nn/decoder_model.h"

#include <cmath>
#include <string>

#include "nn/decoder_variants.h"
#include "nn/module_util.h"
#include "qkv/functional.h"
#include "qkv/linear.h"
#include "qkv/nn/skip_weight_init.h"

namespace qkv::nn {

namespace {

int64_t window_of(const DecoderModelConfig& c, int64_t layer) {
  return c.sliding_windows.empty() ? 0 : c.sliding_windows[static_cast<size_t>(layer)];
}

// E: head_dim, or d_model / num_heads.
int64_t head_dim_of(const DecoderModelConfig& c) {
  return c.head_dim > 0 ? c.head_dim : c.d_model / c.num_heads;
}

}  // namespace

DecoderBlockOptions block_options(const DecoderModelConfig& c, int64_t layer) {
  const int64_t window = window_of(c, layer);
  return {.attention = {.embed_dim = c.d_model,
                        .num_heads = c.num_heads,
                        .num_kv_heads = c.num_kv_heads,
                        .head_dim = c.head_dim,
                        .bias = c.bias,
                        .qkv_bias = c.qkv_bias,
                        .qk_norm = c.qk_norm,
                        .qk_norm_eps = c.norm_eps,
                        .scale = c.attention_scale,
                        .sliding_window = window,
                        .rope = c.positions == PositionKind::kRope,
                        .rope_base = window > 0 && c.sliding_rope_base > 0 ? c.sliding_rope_base
                                                                           : c.rope_base,
                        .rope_style = c.rope_style,
                        .rope_freq_factors = c.rope_freq_factors,
                        .dtype = c.dtype},
          .ffn_hidden = c.ffn_hidden,
          .norm = c.norm,
          .norm_eps = c.norm_eps,
          .ffn = c.ffn,
          .post_norms = c.post_norms};
}

DecoderModelConfig resolved_config(const DecoderModelConfig& config) {
  DecoderModelConfig c = config;
  const char* m = "DecoderModel";
  detail::check_floating_dtype(m, c.dtype);
  QKV_CHECK(
      c.vocab_size > 0 && c.d_model > 0 && c.num_layers > 0 && c.num_heads > 0 && c.max_seq_len > 0,
      m, ": vocab_size, d_model, num_layers, num_heads and max_seq_len must be > 0, got ",
      "vocab_size=", c.vocab_size, ", d_model=", c.d_model, ", num_layers=", c.num_layers,
      ", num_heads=", c.num_heads, ", max_seq_len=", c.max_seq_len);
  QKV_CHECK(c.head_dim >= 0 && c.head_dim <= (int64_t{1} << 20), m,
            ": head_dim must be in [0, 2^20] (0 = d_model / num_heads), got ", c.head_dim);
  QKV_CHECK(c.head_dim > 0 || c.d_model % c.num_heads == 0, m, ": d_model (", c.d_model,
            ") must be divisible by num_heads (", c.num_heads, ") unless head_dim is given");
  QKV_CHECK(c.num_kv_heads >= 0 && c.ffn_hidden >= 0, m,
            ": num_kv_heads and ffn_hidden must be >= 0 (0 = default), got num_kv_heads=",
            c.num_kv_heads, ", ffn_hidden=", c.ffn_hidden);
  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;
  QKV_CHECK(c.num_heads % c.num_kv_heads == 0, m, ": num_kv_heads (", c.num_kv_heads,
            ") must divide num_heads (", c.num_heads, ")");
  const int64_t E = head_dim_of(c);
  QKV_CHECK(c.positions != PositionKind::kRope || E % 2 == 0, m,
            ": RoPE needs an even head dim, got ", E);
  QKV_CHECK(c.norm_eps >= 0.0 && c.norm_eps < 1.0, m, ": norm_eps must be in [0, 1), got ",
            c.norm_eps);
  // Checked here, not only by RotaryEmbedding: factors a model without RoPE would drop.
  const auto half = static_cast<size_t>(E / 2);
  QKV_CHECK(c.rope_freq_factors.empty() ||
                (c.positions == PositionKind::kRope && c.rope_freq_factors.size() == half),
            m, ": rope_freq_factors must be empty or, with RoPE, hold head_dim / 2 = ", half,
            " values; got ", c.rope_freq_factors.size(),
            c.positions == PositionKind::kRope ? "" : " without RoPE");
  for (size_t i = 0; i < c.rope_freq_factors.size(); ++i)
    QKV_CHECK(std::isfinite(c.rope_freq_factors[i]) && c.rope_freq_factors[i] > 0.0, m,
              ": rope_freq_factors[", i, "] must be finite and > 0 (it divides a frequency), got ",
              c.rope_freq_factors[i]);
  QKV_CHECK(
      c.sliding_windows.empty() || static_cast<int64_t>(c.sliding_windows.size()) == c.num_layers,
      m, ": sliding_windows must be empty or hold one value per layer (", c.num_layers, "), got ",
      c.sliding_windows.size());
  for (size_t i = 0; i < c.sliding_windows.size(); ++i)
    QKV_CHECK(c.sliding_windows[i] >= 0, m, ": sliding_windows[", i,
              "] must be >= 0 (0 = every earlier position), got ", c.sliding_windows[i]);
  for (const auto& [name, value] : {std::pair{"attention_scale", c.attention_scale},
                                    std::pair{"sliding_rope_base", c.sliding_rope_base},
                                    std::pair{"final_logit_softcap", c.final_logit_softcap}})
    QKV_CHECK(std::isfinite(value) && value >= 0.0, m, ": ", name,
              " must be finite and >= 0 (0 = none/default), got ", value);
  QKV_CHECK(std::isfinite(c.embedding_scale) && c.embedding_scale > 0.0, m,
            ": embedding_scale must be finite and > 0, got ", c.embedding_scale);
  if (c.ffn_hidden == 0) {
    if (c.ffn == FeedForwardKind::kGelu) {
      c.ffn_hidden = 4 * c.d_model;
    } else {
      const int64_t hidden = (8 * c.d_model + 2) / 3;  // ⌈8D/3⌉
      c.ffn_hidden = (hidden + 63) / 64 * 64;
    }
  }
  return c;
}

DecoderModel::DecoderModel(const DecoderModelConfig& config, Generator* gen)
    : ModuleBase("DecoderModel"),
      config_(resolved_config(config)),
      tok_embeddings_({.num_embeddings = config_.vocab_size,
                       .embedding_dim = config_.d_model,
                       .padding_idx = std::nullopt,
                       .dtype = config_.dtype},
                      gen),
      norm_(detail::make_norm(config_.norm, config_.d_model, config_.norm_eps, config_.bias,
                              config_.dtype)) {
  const DecoderModelConfig& c = config_;
  if (c.positions == PositionKind::kLearned)
    learned_positions_.emplace(
        LearnedPositionalEncodingOptions{
            .max_len = c.max_seq_len, .d_model = c.d_model, .batch_first = true, .dtype = c.dtype},
        gen);
  if (c.positions == PositionKind::kSinusoidal)
    sinusoidal_positions_.emplace(SinusoidalPositionalEncodingOptions{
        .d_model = c.d_model, .max_len = c.max_seq_len, .batch_first = true, .dtype = c.dtype});
  blocks_.reserve(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) blocks_.emplace_back(block_options(c, i), gen);
  if (!c.tie_embeddings && !SkipWeightInit::active()) {
    Generator& g = gen ? *gen : default_generator();
    output_ = detail::uniform_fan_in({c.vocab_size, c.d_model}, c.d_model, g, c.dtype);
  }
}

namespace {

// x ·= s, in the precision of the model (Gemma rounds √D to its dtype first).
void scale_in_place(Tensor& x, double s) {
  if (x.dtype() == DType::kFloat64) {
    double* p = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] *= s;
  } else {
    float* p = x.data<float>();
    const auto f = static_cast<float>(s);
    for (int64_t i = 0; i < x.numel(); ++i) p[i] *= f;
  }
}

// x = cap · tanh(x / cap) (Gemma 2's final logit soft-capping).
void softcap_in_place(Tensor& x, double cap) {
  if (x.dtype() == DType::kFloat64) {
    double* p = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] = cap * std::tanh(p[i] / cap);
  } else {
    float* p = x.data<float>();
    const auto c = static_cast<float>(cap);
    for (int64_t i = 0; i < x.numel(); ++i) p[i] = c * std::tanh(p[i] / c);
  }
}

}  // namespace

const Tensor& DecoderModel::output_weight() const {
  return config_.tie_embeddings ? tok_embeddings_.weight() : output_;
}

namespace {

// Which weight the head multiplies with; throws when it has none.
struct HeadWeight {
  const Tensor* dense = nullptr;
  const QuantizedWeight* quantized = nullptr;
};

HeadWeight head_weight(const DecoderModelConfig& c, const Embedding& tok, const Tensor& output,
                       const QuantizedWeight& quantized_output) {
  if (c.tie_embeddings) {
    if (!tok.quantized_weight().empty()) return {nullptr, &tok.quantized_weight()};
    QKV_CHECK(tok.weight().defined(), "DecoderModel: the (tied) output head has no weight: ",
              "tok_embeddings was built under nn::SkipWeightInit and never set");
    return {&tok.weight(), nullptr};
  }
  if (!quantized_output.empty()) return {nullptr, &quantized_output};
  QKV_CHECK(output.defined(), "DecoderModel: the output head has no weight (built under ",
            "nn::SkipWeightInit; give one with set_output_weight)");
  return {&output, nullptr};
}

}  // namespace

Tensor DecoderModel::head(const Tensor& x) const {
  const HeadWeight w = head_weight(config_, tok_embeddings_, output_, quantized_output_);
  return w.quantized ? linear(x, *w.quantized) : linear(x, *w.dense);
}

void DecoderModel::head_into(Tensor& out, const Tensor& x) const {
  const HeadWeight w = head_weight(config_, tok_embeddings_, output_, quantized_output_);
  if (w.quantized) return linear_into(out, x, *w.quantized);
  linear_into(out, x, *w.dense);
}

void DecoderModel::set_output_weight(Tensor weight) {
  const DecoderModelConfig& c = config_;
  QKV_CHECK(!c.tie_embeddings,
            "DecoderModel::set_output_weight: the head is tied to tok_embeddings; set that");
  detail::check_dense_weight(weight, c.vocab_size, c.d_model, c.dtype,
                             "DecoderModel::set_output_weight", "head weight");
  output_ = std::move(weight);
  quantized_output_ = QuantizedWeight();
}

void DecoderModel::set_quantized_output_weight(QuantizedWeight weight) {
  const DecoderModelConfig& c = config_;
  const char* m = "DecoderModel::set_quantized_output_weight";
  QKV_CHECK(!c.tie_embeddings, m, ": the head is tied to tok_embeddings; set that");
  detail::check_quantized_weight(weight, c.vocab_size, c.d_model, c.dtype, m, "head weight");
  quantized_output_ = std::move(weight);
  output_ = Tensor();
}

Tensor DecoderModel::position_table() const {
  if (learned_positions_) return learned_positions_->state_dict().at("weight");
  if (sinusoidal_positions_) return sinusoidal_positions_->table();
  return {};
}

KVCache DecoderModel::make_cache(int64_t batch_size, int64_t max_len) const {
  const DecoderModelConfig& c = config_;
  QKV_CHECK(max_len >= 0 && max_len <= c.max_seq_len,
            "DecoderModel::make_cache: max_len must be in [0, max_seq_len = ", c.max_seq_len,
            "] (0 = max_seq_len), got ", max_len);
  return KVCache({.num_layers = c.num_layers,
                  .batch_size = batch_size,
                  .num_kv_heads = c.num_kv_heads,
                  .max_len = max_len > 0 ? max_len : c.max_seq_len,
                  .head_dim = head_dim_of(c),
                  .dtype = c.dtype,
                  .storage = kv_cache_storage_,
                  .windows = c.sliding_windows});
}

void DecoderModel::set_kv_cache_storage(KVCacheStorage storage) {
  const DecoderModelConfig& c = config_;
  // A one-position cache checks what the real ones will need.
  KVCache({.num_kv_heads = c.num_kv_heads,
           .max_len = 1,
           .head_dim = head_dim_of(c),
           .dtype = c.dtype,
           .storage = storage});
  kv_cache_storage_ = storage;
}

Tensor DecoderModel::forward(std::span<const int64_t> ids, int64_t batch_size) const {
  return forward_whole(ids, batch_size, nullptr);
}

Tensor DecoderModel::forward(std::span<const int64_t> ids, int64_t batch_size,
                             KVCache& cache) const {
  return forward_whole(ids, batch_size, &cache);
}

Tensor DecoderModel::forward_last(std::span<const int64_t> ids, int64_t batch_size,
                                  KVCache& cache) const {
  return forward_whole(ids, batch_size, &cache, /*last_only=*/true);
}

Tensor DecoderModel::forward(std::span<const int64_t> ids, int64_t batch_size,
                             DecoderModelRecord* record) const {
  return forward_whole(ids, batch_size, nullptr, false, record);
}

int64_t DecoderModel::sequence_length(std::span<const int64_t> ids, int64_t batch_size) const {
  const int64_t n = static_cast<int64_t>(ids.size());
  QKV_CHECK(batch_size > 0 && n > 0 && n % batch_size == 0, "DecoderModel::forward: ", n,
            " ids do not form batch_size = ", batch_size, " non-empty sequences");
  return n / batch_size;
}

void DecoderModel::check_cache(const KVCache& cache, int64_t batch_size, int64_t T) const {
  const DecoderModelConfig& c = config_;
  const char* m = "DecoderModel::forward";
  const KVCacheOptions& o = cache.options();
  QKV_CHECK(o.num_layers == c.num_layers && o.batch_size == batch_size &&
                o.num_kv_heads == c.num_kv_heads && o.head_dim == head_dim_of(c) &&
                o.value_dim == o.head_dim && o.dtype == c.dtype,
            m, ": the cache does not fit this model and batch (make it with make_cache(",
            batch_size, ")): it has num_layers=", o.num_layers, ", batch_size=", o.batch_size,
            ", num_kv_heads=", o.num_kv_heads, ", head_dim=", o.head_dim);
  // A ring must be the layer's own window (a full layer serves any window).
  for (int64_t i = 0; i < c.num_layers; ++i)
    QKV_CHECK(cache.window(i) == 0 || cache.window(i) == window_of(c, i), m, ": layer ", i,
              " of the cache keeps the last ", cache.window(i),
              " positions but the model's sliding window there is ", window_of(c, i),
              " (make the cache with make_cache)");
  const int64_t offset = cache.length();
  for (int64_t i = 0; i < c.num_layers; ++i)
    QKV_CHECK(cache.length(i) == offset, m, ": the cache's layers hold different lengths (",
              "layer ", i, ": ", cache.length(i), ", fewest: ", offset,
              "); truncate() it to a common length first");
  QKV_CHECK(T <= cache.remaining(), m, ": ", T, " new positions do not fit in the cache (", offset,
            " of ", cache.max_len(), " used)");
}

Tensor DecoderModel::forward_whole(std::span<const int64_t> ids, int64_t batch_size, KVCache* cache,
                                   bool last_only, DecoderModelRecord* record) const {
  const int64_t T = sequence_length(ids, batch_size);
  if (cache) check_cache(*cache, batch_size, T);
  const int64_t offset = cache ? cache->length() : 0;
  DecoderBuffers buffers = make_buffers(batch_size * T);
  Tensor logits = last_only ? Tensor::zeros({batch_size, config_.vocab_size}, config_.dtype)
                            : Tensor::zeros({batch_size, T, config_.vocab_size}, config_.dtype);
  forward_into(logits, ids,
               {.batch_size = batch_size,
                .positions = {&offset, 1},
                .caches = {.shared = cache},
                .last_only = last_only},
               buffers, record);
  return logits;
}

DecoderBuffers DecoderModel::make_buffers(int64_t rows) const {
  DecoderBuffers buffers(block_options(config_), rows);
  buffers.positions = position_table();
  return buffers;
}

void DecoderModel::forward_into(Tensor& logits, std::span<const int64_t> ids,
                                const DecoderPass& pass, DecoderBuffers& b,
                                DecoderModelRecord* r) const {
  const DecoderModelConfig& c = config_;
  const char* m = "DecoderModel::forward";
  const int64_t B = pass.batch_size, T = sequence_length(ids, B), D = c.d_model;
  const auto P = static_cast<int64_t>(pass.positions.size());
  QKV_CHECK(P == 1 || P == B, m, ": expected one first position or one per sequence (", B,
            "), got ", P);
  auto first_position = [&](int64_t s) { return pass.positions[P == 1 ? 0 : s]; };
  for (int64_t s = 0; s < P; ++s) {
    // RoPE could compute further, but max_seq_len is the context the model
    // was built or loaded for (a GGUF file's context_length, or the caller's cap).
    QKV_CHECK(first_position(s) >= 0 && first_position(s) + T <= c.max_seq_len, m, ": positions ",
              first_position(s), " to ", first_position(s) + T - 1,
              " exceed max_seq_len = ", c.max_seq_len,
              " (the longest sequence of this model); shorten the input or build/load the model "
              "with a larger max_seq_len");
  }
  QKV_CHECK(r == nullptr || (pass.caches.empty() && !pass.last_only && P == 1), m,
            ": a record (training) needs whole sequences: no cache, every position's logits");
  const int64_t rows = pass.last_only ? B : B * T;
  QKV_CHECK(logits.is_contiguous() && logits.numel() == rows * c.vocab_size, m,
            ": logits must be contiguous with ", rows, " × vocab_size = ", rows * c.vocab_size,
            " elements, got ", shape_str(logits.shape()));

  // x = tok_embeddings(ids) + the positions' rows of the table (unless RoPE)
  Tensor x;
  if (r) {
    *r = {.batch_size = B, .length = T};
    r->blocks.resize(blocks_.size());
    x = tok_embeddings_.forward(std::vector<int64_t>(ids.begin(), ids.end()), {B, T},
                                &r->tok_embeddings);
  } else {
    x = b.x.slice(0, 0, B * T);
    tok_embeddings_.forward_into(x, ids);
    x = x.view({B, T, D});
  }
  if (c.embedding_scale != 1.0) scale_in_place(x, c.embedding_scale);
  if (b.positions.defined())
    for (int64_t s = 0; s < B; ++s)
      for (int64_t t = 0; t < T; ++t) {
        Tensor token = x.select(0, s).select(0, t);
        add_into(token, token, b.positions.select(0, first_position(s) + t));
      }

  PassCaches caches = pass.caches;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    caches.layer = static_cast<int64_t>(i);
    blocks_[i].forward_into(x, pass.positions, caches, b, r ? &r->blocks[i] : nullptr);
  }

  // logits = output(norm(x)), of every position or each sequence's last
  Tensor h = b.h.slice(0, 0, rows);
  if (pass.last_only) {
    h.view({B, D}).copy_from(x.select(1, T - 1));
    detail::norm_into(h, h, norm_);
  } else if (r) {
    detail::norm_into(h, x, norm_, &r->norm);
    r->head_input = h;  // [B, T, D]
  } else {
    detail::norm_into(h, x.view({B * T, D}), norm_);
  }
  Tensor out = logits.view({rows, c.vocab_size});
  head_into(out, h.view({rows, D}));
  if (c.final_logit_softcap > 0.0) softcap_in_place(out, c.final_logit_softcap);
}

void DecoderModel::list_members(MemberList& m) {
  m.module("tok_embeddings", tok_embeddings_);
  if (learned_positions_) m.module("pos_embeddings", *learned_positions_);
  for (size_t i = 0; i < blocks_.size(); ++i) m.module("layers." + std::to_string(i), blocks_[i]);
  m.module("norm", detail::module_of(norm_));
  m.parameter("output.weight", output_);
}

int64_t DecoderModel::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, t] : state_dict()) n += t.numel();
  return n;
}

}  // namespace qkv::nn
