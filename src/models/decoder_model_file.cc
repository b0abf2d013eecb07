// nn::DecoderModel files: the config as JSON in the safetensors metadata,
// the parameters as tensors.
#include "qkv/models/decoder_model_file.h"

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "io/json_document.h"
#include "tensor/enum_names.h"

namespace qkv::models {

using nn::DecoderModel;
using nn::DecoderModelConfig;
using nn::FeedForwardKind;
using nn::NormKind;
using nn::PositionKind;
using nn::RopeStyle;

namespace {

using Json = nlohmann::json;
using io::json_excerpt;

// Larger sizes are no model this library can hold; they are typos or attacks.
constexpr int64_t kMaxSize = int64_t{1} << 24;

// Enum <-> name tables, so that the JSON stays readable and stable.
template <class Enum>
using Names = ::qkv::detail::EnumName<Enum>;
using ::qkv::detail::name_of;
constexpr Names<PositionKind> kPositions[] = {{PositionKind::kRope, "rope"},
                                              {PositionKind::kLearned, "learned"},
                                              {PositionKind::kSinusoidal, "sinusoidal"}};
constexpr Names<NormKind> kNorms[] = {{NormKind::kRMSNorm, "rmsnorm"},
                                      {NormKind::kLayerNorm, "layernorm"}};
constexpr Names<FeedForwardKind> kFfns[] = {{FeedForwardKind::kSwiGLU, "swiglu"},
                                            {FeedForwardKind::kGelu, "gelu"},
                                            {FeedForwardKind::kGeGLU, "geglu"}};
constexpr Names<RopeStyle> kRopeStyles[] = {{RopeStyle::kHalfSplit, "half_split"},
                                            {RopeStyle::kInterleaved, "interleaved"}};
constexpr Names<DType> kDtypes[] = {{DType::kFloat32, "float32"}, {DType::kFloat64, "float64"}};

// Throws unless `ok`: field "`field`" must be `what`, got (an excerpt of) j.
void expect(bool ok, const Json& j, const char* field, const std::string& what) {
  QKV_CHECK(ok, "DecoderModel config: \"", field, "\" must be ", what, ", got ", json_excerpt(j));
}

// One field from its JSON value, checked as its type wants.
void read_field(const Json& j, const char* key, int64_t& out) {
  expect(j.is_number_integer() && (j.is_number_unsigned() ? j.get<uint64_t>() <= kMaxSize
                                                          : j.get<int64_t>() <= kMaxSize),
         j, key, "an integer <= " + std::to_string(kMaxSize));
  out = j.get<int64_t>();
}
void read_field(const Json& j, const char* key, double& out) {
  expect(j.is_number(), j, key, "a number");
  out = j.get<double>();
}
void read_field(const Json& j, const char* key, bool& out) {
  expect(j.is_boolean(), j, key, "true or false");
  out = j.get<bool>();
}
template <class T>
void read_field(const Json& j, const char* key, std::vector<T>& out) {
  expect(j.is_array() && j.size() <= static_cast<size_t>(kMaxSize), j, key,
         std::is_same_v<T, double> ? "an array of numbers" : "an array of integers");
  out.assign(j.size(), T{});
  for (size_t i = 0; i < j.size(); ++i) read_field(j[i], key, out[i]);
}
template <class Enum, size_t N>
void read_field(const Json& j, const char* key, Enum& out, const Names<Enum> (&names)[N]) {
  expect(j.is_string(), j, key, "a string");
  std::string choices;
  for (const auto& entry : names) {
    if (j.get<std::string>() == entry.name) {
      out = entry.value;
      return;
    }
    choices += std::string(choices.empty() ? "" : ", ") + "\"" + entry.name + "\"";
  }
  expect(false, j, key, "one of " + choices);
}

// The config's sizes against the file's tensors, before a model of that size
// is allocated: a config saying 10^6 layers must not allocate them first.
void check_sizes_against(const io::SafetensorsFile& file, const DecoderModelConfig& config,
                         const std::filesystem::path& path) {
  const DecoderModelConfig c = nn::resolved_config(config);
  const std::string where = "load_decoder_model: " + path.string() + ": the config";
  const auto expect_shape = [&](const std::string& name, const Shape& shape, const char* sizes) {
    QKV_CHECK(file.contains(name), where, " needs a tensor \"", name, "\", which the file lacks");
    const Shape& got = file.entry(name).shape;
    QKV_CHECK(got == shape, where, " (", sizes, ") needs \"", name, "\" of shape ",
              shape_str(shape), " but the file's is ", shape_str(got));
  };
  expect_shape("tok_embeddings.weight", {c.vocab_size, c.d_model}, "vocab_size, d_model");
  if (c.positions == PositionKind::kLearned)
    expect_shape("pos_embeddings.weight", {c.max_seq_len, c.d_model}, "max_seq_len, d_model");
  std::set<int64_t> layers;
  for (const std::string& name : file.names()) {
    if (!name.starts_with("layers.")) continue;
    const size_t dot = name.find('.', 7);
    const std::string index = name.substr(7, dot == std::string::npos ? dot : dot - 7);
    if (!index.empty() && index.size() < 9 &&
        index.find_first_not_of("0123456789") == std::string::npos)
      layers.insert(std::stoll(index));
  }
  QKV_CHECK(static_cast<int64_t>(layers.size()) == c.num_layers &&
                (layers.empty() || *layers.rbegin() == c.num_layers - 1),
            where, " says num_layers = ", c.num_layers, " but the file holds ", layers.size(),
            " layers (\"layers.N.*\" tensors)");
  for (const char* ffn :
       {"layers.0.feed_forward.w1.weight", "layers.0.feed_forward.linear1.weight"}) {
    if (file.contains(ffn))
      QKV_CHECK(file.entry(ffn).shape.size() == 2 && file.entry(ffn).shape[0] == c.ffn_hidden,
                where, " says ffn_hidden = ", c.ffn_hidden, " but \"", ffn, "\" has shape ",
                shape_str(file.entry(ffn).shape));
  }
}

// Every config field once, in the JSON's order: f(key, field) for the sizes
// (int64_t), numbers, number lists and flags, f(key, field, names) for the
// enums. Writing and reading the JSON both walk this list.
template <class Config, class F>
void for_each_field(Config& c, F&& f) {
  f("vocab_size", c.vocab_size);
  f("d_model", c.d_model);
  f("num_layers", c.num_layers);
  f("num_heads", c.num_heads);
  f("num_kv_heads", c.num_kv_heads);
  f("ffn_hidden", c.ffn_hidden);
  f("max_seq_len", c.max_seq_len);
  f("positions", c.positions, kPositions);
  f("rope_base", c.rope_base);
  f("rope_style", c.rope_style, kRopeStyles);
  f("rope_freq_factors", c.rope_freq_factors);
  f("norm", c.norm, kNorms);
  f("norm_eps", c.norm_eps);
  f("ffn", c.ffn, kFfns);
  f("tie_embeddings", c.tie_embeddings);
  f("bias", c.bias);
  f("dtype", c.dtype, kDtypes);
  // The newer families' fields (written only when not their default).
  f("head_dim", c.head_dim);
  f("qkv_bias", c.qkv_bias);
  f("qk_norm", c.qk_norm);
  f("post_norms", c.post_norms);
  f("attention_scale", c.attention_scale);
  f("embedding_scale", c.embedding_scale);
  f("sliding_windows", c.sliding_windows);
  f("sliding_rope_base", c.sliding_rope_base);
  f("final_logit_softcap", c.final_logit_softcap);
}

// Fields written only when they differ from a default config: files of the
// models that do not use them stay as they were.
const std::set<std::string> kWrittenWhenSet = {
    "rope_freq_factors", "head_dim",           "qkv_bias",        "qk_norm",
    "post_norms",        "attention_scale",    "embedding_scale", "sliding_windows",
    "sliding_rope_base", "final_logit_softcap"};

}  // namespace

std::string decoder_config_to_json(const DecoderModelConfig& c) {
  Json j = Json::object();
  const DecoderModelConfig defaults;
  Json unset = Json::object();
  for_each_field(defaults, [&unset](const char* key, const auto& field, const auto&... names) {
    if constexpr (sizeof...(names) == 0) unset[key] = field;
  });
  for_each_field(c, [&](const char* key, const auto& field, const auto&... names) {
    if constexpr (sizeof...(names) > 0) {
      j[key] = name_of(names..., field);
    } else {
      const Json value = field;
      if (!kWrittenWhenSet.contains(key) || value != unset[key]) j[key] = value;
    }
  });
  return j.dump();
}

DecoderModelConfig decoder_config_from_json(const std::string& text) {
  const Json j = io::parse_json(text, "DecoderModel config");
  QKV_CHECK(j.is_object(), "DecoderModel config: expected a JSON object, got ", json_excerpt(j));
  DecoderModelConfig c;
  for (const auto& item : j.items()) {
    // Named copies, not a structured binding: clang 14 cannot capture those.
    const std::string& key = item.key();
    const Json& value = item.value();
    bool known = false;
    for_each_field(c, [&](const char* name, auto& field, const auto&... names) {
      if (known || key != name) return;
      read_field(value, name, field, names...);
      known = true;
    });
    QKV_CHECK(known, "DecoderModel config: unknown field \"", key, "\"");
  }
  return nn::resolved_config(c);
}

void save_decoder_model(const DecoderModel& model, const std::filesystem::path& path,
                        const io::SafetensorsMetadata& metadata) {
  io::SafetensorsMetadata meta = metadata;
  meta[kDecoderConfigKey] = decoder_config_to_json(model.config());
  io::save_safetensors(path, model.state_dict(), meta);
}

DecoderModel load_decoder_model(const std::filesystem::path& path,
                                io::SafetensorsMetadata* metadata) {
  const io::SafetensorsFile file(path);
  const auto config = file.metadata().find(kDecoderConfigKey);
  QKV_CHECK(config != file.metadata().end(), "load_decoder_model: ", path.string(), " has no \"",
            kDecoderConfigKey, "\" metadata; it was not written by save_decoder_model");
  const DecoderModelConfig c = decoder_config_from_json(config->second);
  check_sizes_against(file, c, path);
  Generator scratch(0);  // the initial values are overwritten by the file's
  DecoderModel model(c, &scratch);
  model.load_state_dict(file.load_all());
  if (metadata) *metadata = file.metadata();
  return model;
}

}  // namespace qkv::models
