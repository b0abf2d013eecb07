// models::BertModel: config.json parsing, weights from safetensors, and the
// forward pass as batched GEMMs (one per projection over all B·L tokens) around
// the fused attention kernel.
#include "qkv/models/bert.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "io/json_document.h"
#include "kernels/interrupt.h"
#include "nn/module_util.h"
#include "qkv/attention.h"
#include "qkv/functional.h"
#include "qkv/io/safetensors.h"
#include "qkv/linear.h"

namespace qkv::models {

namespace {

using Json = nlohmann::json;
using io::json_excerpt;

// Larger sizes are no model this library can hold: typos or hostile files.
constexpr int64_t kMaxSize = int64_t{1} << 24;

struct ActivationName {
  const char* name;
  BertActivation activation;
};
// transformers' ACT2FN names with the same function; the first of each is canonical.
constexpr ActivationName kActivations[] = {{"gelu", BertActivation::kGelu},
                                           {"gelu_new", BertActivation::kGeluTanh},
                                           {"gelu_pytorch_tanh", BertActivation::kGeluTanh},
                                           {"gelu_fast", BertActivation::kGeluTanh},
                                           {"relu", BertActivation::kRelu},
                                           {"silu", BertActivation::kSilu},
                                           {"swish", BertActivation::kSilu}};

std::string accepted_activations() {
  std::string names;
  for (const ActivationName& a : kActivations)
    names += std::string(names.empty() ? "\"" : ", \"") + a.name + "\"";
  return names;
}

// A required or optional config field, checked; `source` names the file.
class ConfigReader {
 public:
  ConfigReader(const Json& j, const std::string& source) : j_(j), source_(source) {}

  // A positive integer; required unless `fallback` > 0.
  int64_t positive(const char* field, int64_t fallback = 0) const {
    const Json* v = find(field, fallback <= 0);
    if (!v) return fallback;
    QKV_CHECK(v->is_number_integer() && v->get<int64_t>() > 0 &&
                  (v->is_number_unsigned() ? v->get<uint64_t>() : v->get<int64_t>()) <= kMaxSize,
              source_, ": \"", field, "\" must be a positive integer <= ", kMaxSize, ", got ",
              json_excerpt(*v));
    return v->get<int64_t>();
  }

  double eps(const char* field, double fallback) const {
    const Json* v = find(field, false);
    if (!v) return fallback;
    QKV_CHECK(v->is_number() && std::isfinite(v->get<double>()) && v->get<double>() >= 0.0 &&
                  v->get<double>() < 1.0,
              source_, ": \"", field, "\" must be a number in [0, 1), got ", json_excerpt(*v));
    return v->get<double>();
  }

  // The string value, or `fallback` when absent.
  std::string string(const char* field, const std::string& fallback) const {
    const Json* v = find(field, false);
    if (!v) return fallback;
    QKV_CHECK(v->is_string(), source_, ": \"", field, "\" must be a string, got ",
              json_excerpt(*v));
    return v->get<std::string>();
  }

  bool flag(const char* field) const {
    const Json* v = find(field, false);
    if (!v) return false;
    QKV_CHECK(v->is_boolean(), source_, ": \"", field, "\" must be true or false, got ",
              json_excerpt(*v));
    return v->get<bool>();
  }

 private:
  const Json* find(const char* field, bool required) const {
    const auto it = j_.find(field);
    QKV_CHECK(it != j_.end() || !required, source_, ": the required field \"", field,
              "\" is missing");
    return it == j_.end() ? nullptr : &*it;
  }

  const Json& j_;
  const std::string& source_;
};

// Parameter names in the order transformers lists them, with their shapes.
std::vector<std::pair<std::string, Shape>> parameter_shapes(const BertConfig& c) {
  const int64_t D = c.hidden_size, I = c.intermediate_size;
  std::vector<std::pair<std::string, Shape>> shapes = {
      {"embeddings.word_embeddings.weight", {c.vocab_size, D}},
      {"embeddings.position_embeddings.weight", {c.max_position_embeddings, D}},
      {"embeddings.token_type_embeddings.weight", {c.type_vocab_size, D}},
      {"embeddings.LayerNorm.weight", {D}},
      {"embeddings.LayerNorm.bias", {D}}};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "encoder.layer." + std::to_string(i) + ".";
    for (const char* proj : {"query", "key", "value"}) {
      shapes.push_back({p + "attention.self." + proj + ".weight", {D, D}});
      shapes.push_back({p + "attention.self." + proj + ".bias", {D}});
    }
    shapes.push_back({p + "attention.output.dense.weight", {D, D}});
    shapes.push_back({p + "attention.output.dense.bias", {D}});
    shapes.push_back({p + "attention.output.LayerNorm.weight", {D}});
    shapes.push_back({p + "attention.output.LayerNorm.bias", {D}});
    shapes.push_back({p + "intermediate.dense.weight", {I, D}});
    shapes.push_back({p + "intermediate.dense.bias", {I}});
    shapes.push_back({p + "output.dense.weight", {D, I}});
    shapes.push_back({p + "output.dense.bias", {D}});
    shapes.push_back({p + "output.LayerNorm.weight", {D}});
    shapes.push_back({p + "output.LayerNorm.bias", {D}});
  }
  return shapes;
}

// Every tensor of the file under "embeddings." or "encoder." (with either
// prefix) is one BertModel uses: anything else there (a relative position
// table, a second copy of the encoder under the other prefix, ...) would be
// part of the model that transformers runs and qkv would not. The buffers
// transformers may save are accepted at the values it computes anyway.
void check_no_unused_tensors(const io::SafetensorsFile& file, const std::string& prefix,
                             const std::vector<std::pair<std::string, Shape>>& shapes,
                             int64_t max_positions) {
  std::set<std::string> used;
  for (const auto& [name, shape] : shapes) used.insert(prefix + name);
  const std::string& source = file.source();
  for (const std::string& name : file.names()) {
    std::string local = name;  // the name without "bert."
    if (local.starts_with("bert.")) local = local.substr(5);
    if (!local.starts_with("embeddings.") && !local.starts_with("encoder.")) continue;
    if (used.count(name)) continue;
    // Older transformers saved (and then used) these buffers: position_ids
    // must be arange(max_position_embeddings), token_type_ids zeros.
    const bool position_ids = local == "embeddings.position_ids";
    if ((position_ids || local == "embeddings.token_type_ids") && name == prefix + local) {
      const io::SafetensorsEntry& e = file.entry(name);
      bool expected = (e.shape == Shape{1, max_positions} || e.shape == Shape{max_positions}) &&
                      e.dtype != "BOOL" && io::safetensors_dtype_bits(e.dtype) >= 16;
      if (expected) {  // integers (I64 as saved) or floats; the values must be exact
        const Tensor values = file.load(name).to(DType::kFloat64);
        const double* v = values.data<double>();
        for (int64_t i = 0; expected && i < max_positions; ++i)
          expected = v[i] == (position_ids ? static_cast<double>(i) : 0.0);
      }
      QKV_CHECK(expected, source, ": the buffer \"", name, "\" (", e.dtype, " ", shape_str(e.shape),
                ") is not ", position_ids ? "0, 1, ..., max_position_embeddings - 1" : "all zeros",
                "; transformers would use its values, BertModel computes ",
                position_ids ? "positions from 0" : "token types 0", ". Remove it from the file");
      continue;
    }
    QKV_CHECK(false, source, ": tensor \"", name,
              "\" is not part of a BertModel (embeddings and encoder layers of config.json's "
              "sizes, prefix \"",
              prefix,
              "\"); qkv would ignore it and compute another model than transformers. "
              "Remove it, or use a model of model_type \"bert\" whose files hold only those");
  }
}

BertConfig validated(const BertConfig& config) {
  config.validate();
  return config;
}

Activation feed_forward_activation(BertActivation activation) {
  switch (activation) {
    case BertActivation::kGeluTanh:
      return Activation::kGeluTanh;
    case BertActivation::kRelu:
      return Activation::kRelu;
    case BertActivation::kSilu:
      return Activation::kSilu;
    case BertActivation::kGelu:
      break;
  }
  return Activation::kGelu;
}

}  // namespace

// --- BertConfig ------------------------------------------------------------------

BertActivation bert_activation_from_string(const std::string& name) {
  for (const ActivationName& a : kActivations)
    if (name == a.name) return a.activation;
  QKV_CHECK(false, "hidden_act must be one of ", accepted_activations(), ", got \"", name, "\"");
  return BertActivation::kGelu;
}

const char* bert_activation_name(BertActivation activation) {
  for (const ActivationName& a : kActivations)
    if (a.activation == activation) return a.name;
  return "?";
}

BertConfig BertConfig::from_json(const std::string& text, const std::string& source) {
  const Json j = io::parse_json(text, source);
  QKV_CHECK(j.is_object(), source, ": expected a JSON object, got ", j.type_name());
  const ConfigReader r(j, source);
  BertConfig c;
  c.vocab_size = r.positive("vocab_size");
  c.hidden_size = r.positive("hidden_size");
  c.num_hidden_layers = r.positive("num_hidden_layers");
  c.num_attention_heads = r.positive("num_attention_heads");
  c.intermediate_size = r.positive("intermediate_size");
  c.max_position_embeddings = r.positive("max_position_embeddings", c.max_position_embeddings);
  c.type_vocab_size = r.positive("type_vocab_size", c.type_vocab_size);
  c.layer_norm_eps = r.eps("layer_norm_eps", c.layer_norm_eps);
  const std::string act = r.string("hidden_act", "gelu");
  bool known = false;
  for (const ActivationName& a : kActivations) known = known || act == a.name;
  QKV_CHECK(known, source, ": \"hidden_act\" must be one of ", accepted_activations(), ", got \"",
            act, "\"");
  c.hidden_act = bert_activation_from_string(act);

  // Fields that would make transformers compute something else than this model.
  const std::string model_type = r.string("model_type", "bert");
  QKV_CHECK(model_type == "bert", source, ": \"model_type\" is \"", model_type,
            "\"; BertModel reads \"bert\" models (others place positions or weights differently)");
  const std::string positions = r.string("position_embedding_type", "absolute");
  QKV_CHECK(positions == "absolute", source, ": \"position_embedding_type\" is \"", positions,
            "\"; only \"absolute\" (learned position embeddings) is implemented");
  QKV_CHECK(!r.flag("is_decoder") && !r.flag("add_cross_attention"), source,
            ": \"is_decoder\"/\"add_cross_attention\" are set; BertModel is an encoder only");
  // transformers removes these heads from the model at load time.
  if (const auto it = j.find("pruned_heads"); it != j.end())
    QKV_CHECK(it->is_null() || (it->is_object() && it->empty()), source, ": \"pruned_heads\" is ",
              json_excerpt(*it),
              "; pruned attention heads are not supported (only {} or no field)");
  c.validate(source);
  return c;
}

BertConfig BertConfig::from_file(const std::filesystem::path& config_json) {
  return from_json(io::read_text_file(config_json, "BertConfig::from_file"), config_json.string());
}

void BertConfig::validate(const std::string& source) const {
  const std::pair<const char*, int64_t> sizes[] = {
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"intermediate_size", intermediate_size},
      {"max_position_embeddings", max_position_embeddings},
      {"type_vocab_size", type_vocab_size}};
  for (const auto& [field, value] : sizes)
    QKV_CHECK(value > 0 && value <= kMaxSize, source, ": \"", field,
              "\" must be a positive integer <= ", kMaxSize, ", got ", value);
  QKV_CHECK(hidden_size % num_attention_heads == 0, source, ": \"hidden_size\" (", hidden_size,
            ") must be divisible by \"num_attention_heads\" (", num_attention_heads, ")");
  QKV_CHECK(std::isfinite(layer_norm_eps) && layer_norm_eps >= 0.0 && layer_norm_eps < 1.0, source,
            ": \"layer_norm_eps\" must be in [0, 1), got ", layer_norm_eps);
}

// --- BertModel: construction and weights ---------------------------------------------

BertModel::BertModel(const BertConfig& config, Generator* gen)
    : BertModel(config, gen ? gen : &default_generator(), true) {}

BertModel::BertModel(const BertConfig& config, Generator* gen, bool random)
    : config_(validated(config)),
      embeddings_norm_({.normalized_shape = {config_.hidden_size}, .eps = config_.layer_norm_eps}) {
  const BertConfig& c = config_;
  const int64_t D = c.hidden_size;
  word_embeddings_ = Tensor::zeros({c.vocab_size, D});
  position_embeddings_ = Tensor::zeros({c.max_position_embeddings, D});
  token_type_embeddings_ = Tensor::zeros({c.type_vocab_size, D});
  // The layers draw torch's initialisation from a scratch generator: every
  // value is set below (or by a file), so `gen` sees transformers' draws only.
  Generator scratch(0);
  const nn::TransformerLayerOptions layer{.d_model = D,
                                          .nhead = c.num_attention_heads,
                                          .dim_feedforward = c.intermediate_size,
                                          .dropout = 0.0,
                                          .activation = feed_forward_activation(c.hidden_act),
                                          .layer_norm_eps = c.layer_norm_eps,
                                          .batch_first = true,
                                          .norm_first = false};
  layers_.reserve(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    layers_.emplace_back(layer, &scratch);
    layers_.back().eval();
  }
  // transformers' _init_weights: normal(0, initializer_range = 0.02) for
  // embeddings and linear weights, zero biases, LayerNorm 1 and 0. Without
  // `random` the weights are zeros, to be overwritten by a file's.
  for (const auto& [name, t] : state_dict()) {
    Tensor value = t;
    const bool norm = name.find("LayerNorm") != std::string::npos;
    if (norm && name.ends_with(".weight"))
      value.fill(1.0);
    else if (!random || name.ends_with(".bias"))
      value.fill(0.0);
    else
      value.copy_from(scale(Tensor::randn(value.shape(), *gen), 0.02));
  }
}

nn::StateDict BertModel::state_dict() const {
  const int64_t D = config_.hidden_size;
  nn::StateDict state = {
      {"embeddings.word_embeddings.weight", word_embeddings_},
      {"embeddings.position_embeddings.weight", position_embeddings_},
      {"embeddings.token_type_embeddings.weight", token_type_embeddings_},
      {"embeddings.LayerNorm.weight", embeddings_norm_.state_dict().at("weight")},
      {"embeddings.LayerNorm.bias", embeddings_norm_.state_dict().at("bias")}};
  for (size_t i = 0; i < layers_.size(); ++i) {
    const nn::StateDict layer = layers_[i].state_dict();
    const std::string p = "encoder.layer." + std::to_string(i) + ".";
    const char* projections[] = {"query", "key", "value"};
    for (int64_t j = 0; j < 3; ++j) {  // rows [j·D, (j+1)·D) of the packed projection
      const std::string name = p + "attention.self." + projections[j];
      state.insert(name + ".weight",
                   layer.at("self_attn.in_proj_weight").slice(0, j * D, (j + 1) * D));
      state.insert(name + ".bias", layer.at("self_attn.in_proj_bias").slice(0, j * D, (j + 1) * D));
    }
    const std::pair<const char*, const char*> renamed[] = {
        {"attention.output.dense", "self_attn.out_proj"},
        {"attention.output.LayerNorm", "norm1"},
        {"intermediate.dense", "linear1"},
        {"output.dense", "linear2"},
        {"output.LayerNorm", "norm2"}};
    for (const auto& [bert, torch] : renamed)
      for (const char* kind : {".weight", ".bias"})
        state.insert(p + bert + kind, layer.at(std::string(torch) + kind));
  }
  return state;
}

void BertModel::load_state_dict(const std::map<std::string, Tensor>& state) {
  nn::detail::load_strict("BertModel", state_dict(), state);
  if (precision_ != Precision::kFloat32) set_precision(precision_);  // convert the new weights
}

void BertModel::set_precision(Precision precision) {
  for (nn::TransformerEncoderLayer& layer : layers_) layer.set_precision(precision);
  precision_ = precision;
}

void BertModel::record_input_ranges(bool on) {
  for (nn::TransformerEncoderLayer& layer : layers_) layer.record_input_ranges(on);
}

int64_t BertModel::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, t] : state_dict()) n += t.numel();
  return n;
}

BertModel BertModel::load(const BertConfig& config, const std::filesystem::path& safetensors) {
  config.validate();
  const std::string source = safetensors.string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(safetensors, ec))
    throw Error(ErrorKind::kIO, "BertModel: " + source + " does not exist or is not a file",
                std::filesystem::exists(safetensors, ec) ? EISDIR : ENOENT);
  const io::SafetensorsFile file(safetensors);
  // Checkpoints of derived models (BertForMaskedLM, ...) name the encoder "bert.".
  const std::string prefix = file.contains("bert.embeddings.word_embeddings.weight") ? "bert." : "";

  // The layers the file holds, before the config's count of them is trusted
  // (even to list their tensor names: 10^12 layers would be 16·10^12 names).
  std::set<int64_t> layers;
  const std::string layer_prefix = prefix + "encoder.layer.";
  for (const std::string& name : file.names()) {
    if (!name.starts_with(layer_prefix)) continue;
    const std::string index =
        name.substr(layer_prefix.size(), name.find('.', layer_prefix.size()) - layer_prefix.size());
    if (!index.empty() && index.size() < 9 &&
        index.find_first_not_of("0123456789") == std::string::npos)
      layers.insert(std::stoll(index));
  }
  QKV_CHECK(static_cast<int64_t>(layers.size()) == config.num_hidden_layers, source,
            ": the config says \"num_hidden_layers\" = ", config.num_hidden_layers,
            " but the file holds ", layers.size(), " layers (\"", layer_prefix, "N.*\" tensors)");
  // Every tensor is checked against the config before the model is allocated.
  const auto shapes = parameter_shapes(config);
  for (const auto& [name, shape] : shapes) {
    const std::string key = prefix + name;
    QKV_CHECK(file.contains(key), source, ": missing tensor \"", key, "\"",
              prefix.empty() ? " (nor \"bert." + name + "\")" : std::string(),
              "; a BertModel with ", config.num_hidden_layers, " layers needs it");
    const io::SafetensorsEntry& e = file.entry(key);
    QKV_CHECK_TYPE(e.dtype == "F32" || e.dtype == "F16" || e.dtype == "BF16" || e.dtype == "F64",
                   source, ": tensor \"", key, "\" has dtype ", e.dtype,
                   "; weights must be F32, F16, BF16 or F64");
    QKV_CHECK(e.shape == shape, source, ": tensor \"", key, "\" has shape ", shape_str(e.shape),
              " but the config (hidden_size ", config.hidden_size, ", intermediate_size ",
              config.intermediate_size, ", vocab_size ", config.vocab_size,
              ", max_position_embeddings ", config.max_position_embeddings, ", type_vocab_size ",
              config.type_vocab_size, ") needs ", shape_str(shape));
  }
  check_no_unused_tensors(file, prefix, shapes, config.max_position_embeddings);
  BertModel model(config, nullptr, /*random=*/false);
  std::map<std::string, Tensor> own = model.state_dict();
  for (const auto& [name, shape] : shapes) {
    const Tensor src = file.load(prefix + name);
    own.at(name).copy_from(src.dtype() == DType::kFloat32 ? src : src.to(DType::kFloat32));
  }
  return model;
}

BertModel BertModel::from_pretrained(const std::filesystem::path& model_dir) {
  io::require_directory(model_dir, "BertModel::from_pretrained");
  return load(BertConfig::from_file(model_dir / "config.json"), model_dir / "model.safetensors");
}

// --- BertModel: forward --------------------------------------------------------------

Tensor BertModel::forward(std::span<const int64_t> ids, std::span<const int64_t> attention_mask,
                          int64_t batch_size, std::span<const int64_t> token_type_ids) const {
  return run("BertModel::forward", ids, attention_mask, batch_size, token_type_ids, {});
}

Tensor BertModel::forward_recording_attention(
    std::span<const int64_t> ids, std::span<const int64_t> attention_mask, int64_t batch_size,
    std::span<const int64_t> token_type_ids,
    std::vector<nn::MultiheadAttentionRecord>& attention_records) {
  const char* fn = "BertModel::forward_recording_attention";
  QKV_CHECK(precision_ == Precision::kFloat32, fn, ": needs float32 precision, the model has ",
            precision_name(precision_));
  attention_records.assign(layers_.size(), {});
  // Each layer's self-attention once more, as its training path runs it,
  // keeping the heads and the mask it computed with.
  Tensor padding;  // key_padding_mask [B, S]: True = padding; undefined without padding
  const BeforeLayer record = [&](size_t layer, const Tensor& x) {
    const bool padded =
        std::find(attention_mask.begin(), attention_mask.end(), 0) != attention_mask.end();
    if (layer == 0 && padded) {  // run() has checked the mask against x's [B, L]
      padding = Tensor::empty({x.size(0), x.size(1)}, DType::kBool);
      bool* p = padding.data<bool>();
      for (size_t i = 0; i < attention_mask.size(); ++i) p[i] = attention_mask[i] == 0;
    }
    layers_[layer].self_attn().forward(
        x, x, x, {.key_padding_mask = padding, .need_weights = false}, &attention_records[layer]);
  };
  return run(fn, ids, attention_mask, batch_size, token_type_ids, record);
}

Tensor BertModel::run(const char* fn, std::span<const int64_t> ids,
                      std::span<const int64_t> attention_mask, int64_t batch_size,
                      std::span<const int64_t> token_type_ids,
                      const BeforeLayer& before_layer) const {
  const BertConfig& c = config_;
  const int64_t n = static_cast<int64_t>(ids.size()), D = c.hidden_size;
  QKV_CHECK(batch_size > 0 && n > 0 && n % batch_size == 0, fn, ": ", n,
            " ids do not form batch_size = ", batch_size, " non-empty sequences");
  const int64_t B = batch_size, L = n / batch_size;
  QKV_CHECK(L <= c.max_position_embeddings, fn, ": sequences of ", L,
            " tokens exceed max_position_embeddings = ", c.max_position_embeddings,
            "; truncate them");
  QKV_CHECK(attention_mask.empty() || static_cast<int64_t>(attention_mask.size()) == n, fn,
            ": attention_mask must have one value per id (", n, "), got ", attention_mask.size());
  QKV_CHECK(token_type_ids.empty() || static_cast<int64_t>(token_type_ids.size()) == n, fn,
            ": token_type_ids must have one value per id (", n, "), got ", token_type_ids.size());
  for (int64_t i = 0; i < n; ++i) {
    QKV_CHECK(ids[i] >= 0 && ids[i] < c.vocab_size, fn, ": id ", ids[i], " at [", i / L, ", ",
              i % L, "] is outside the vocabulary [0, ", c.vocab_size, ")");
    QKV_CHECK(
        token_type_ids.empty() || (token_type_ids[i] >= 0 && token_type_ids[i] < c.type_vocab_size),
        fn, ": token type ", token_type_ids.empty() ? 0 : token_type_ids[i], " at [", i / L, ", ",
        i % L, "] is outside [0, ", c.type_vocab_size, ")");
  }

  // Embeddings, summed in transformers' order: (word + token type) + position.
  Tensor x = Tensor::empty({B, L, D});  // [B, L, D]
  {
    const float* word = word_embeddings_.data<float>();
    const float* type = token_type_embeddings_.data<float>();
    const float* pos = position_embeddings_.data<float>();
    float* out = x.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      const float* w = word + ids[i] * D;
      const float* t = type + (token_type_ids.empty() ? 0 : token_type_ids[i]) * D;
      const float* p = pos + (i % L) * D;
      float* o = out + i * D;
      for (int64_t d = 0; d < D; ++d) o[d] = (w[d] + t[d]) + p[d];
    }
  }
  embeddings_norm_.norm_in_place(x);

  // Padding keys take no part: a keep mask [B, 1, 1, S] broadcast over heads and
  // queries. Without padding there is no mask at all (the kernel's fast case).
  Tensor keep;
  bool padded = false;
  for (int64_t m : attention_mask) padded = padded || m == 0;
  if (padded) {
    keep = Tensor::empty({B, 1, 1, L}, DType::kBool);
    bool* k = keep.data<bool>();
    for (int64_t i = 0; i < n; ++i) k[i] = attention_mask[i] != 0;
  }
  nn::Workspace workspace;
  // A large batch takes seconds on a loaded machine: Ctrl-C is heard between layers.
  kernels::InterruptPoll poll;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (before_layer) before_layer(i, x);
    layers_[i].forward_into(x, keep, /*causal=*/false, workspace);
    if (poll.stop()) poll.throw_if_stopped(fn);
  }
  return x;
}

}  // namespace qkv::models
