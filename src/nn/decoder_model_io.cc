// nn::DecoderModel files: the config as JSON in the safetensors metadata,
// the parameters as tensors.
#include <nlohmann/json.hpp>
#include <string>

#include "qkv/nn/decoder_model.h"

namespace qkv::nn {

namespace {

using Json = nlohmann::json;

// Enum <-> name tables, so that the JSON stays readable and stable.
template <class Enum>
struct Names {
  Enum value;
  const char* name;
};
constexpr Names<PositionKind> kPositions[] = {{PositionKind::kRope, "rope"},
                                              {PositionKind::kLearned, "learned"},
                                              {PositionKind::kSinusoidal, "sinusoidal"}};
constexpr Names<NormKind> kNorms[] = {{NormKind::kRMSNorm, "rmsnorm"},
                                      {NormKind::kLayerNorm, "layernorm"}};
constexpr Names<FeedForwardKind> kFfns[] = {{FeedForwardKind::kSwiGLU, "swiglu"},
                                            {FeedForwardKind::kGelu, "gelu"}};
constexpr Names<RopeStyle> kRopeStyles[] = {{RopeStyle::kHalfSplit, "half_split"},
                                            {RopeStyle::kInterleaved, "interleaved"}};
constexpr Names<DType> kDtypes[] = {{DType::kFloat32, "float32"}, {DType::kFloat64, "float64"}};

template <class Enum, size_t N>
const char* name_of(const Names<Enum> (&table)[N], Enum value) {
  for (const auto& entry : table)
    if (entry.value == value) return entry.name;
  return "?";
}

template <class Enum, size_t N>
Enum value_of(const Names<Enum> (&table)[N], const Json& j, const char* field) {
  QKV_CHECK(j.is_string(), "DecoderModel config: \"", field, "\" must be a string, got ", j.dump());
  std::string choices;
  for (const auto& entry : table) {
    if (j.get<std::string>() == entry.name) return entry.value;
    choices += std::string(choices.empty() ? "" : ", ") + "\"" + entry.name + "\"";
  }
  QKV_CHECK(false, "DecoderModel config: \"", field, "\" must be one of ", choices, ", got ",
            j.dump());
  return table[0].value;
}

int64_t integer(const Json& j, const char* field) {
  QKV_CHECK(j.is_number_integer(), "DecoderModel config: \"", field, "\" must be an integer, got ",
            j.dump());
  return j.get<int64_t>();
}

double number(const Json& j, const char* field) {
  QKV_CHECK(j.is_number(), "DecoderModel config: \"", field, "\" must be a number, got ", j.dump());
  return j.get<double>();
}

bool boolean(const Json& j, const char* field) {
  QKV_CHECK(j.is_boolean(), "DecoderModel config: \"", field, "\" must be true or false, got ",
            j.dump());
  return j.get<bool>();
}

}  // namespace

std::string config_to_json(const DecoderModelConfig& c) {
  Json j = Json::object();
  j["vocab_size"] = c.vocab_size;
  j["d_model"] = c.d_model;
  j["num_layers"] = c.num_layers;
  j["num_heads"] = c.num_heads;
  j["num_kv_heads"] = c.num_kv_heads;
  j["ffn_hidden"] = c.ffn_hidden;
  j["max_seq_len"] = c.max_seq_len;
  j["positions"] = name_of(kPositions, c.positions);
  j["rope_base"] = c.rope_base;
  j["rope_style"] = name_of(kRopeStyles, c.rope_style);
  j["norm"] = name_of(kNorms, c.norm);
  j["norm_eps"] = c.norm_eps;
  j["ffn"] = name_of(kFfns, c.ffn);
  j["tie_embeddings"] = c.tie_embeddings;
  j["bias"] = c.bias;
  j["dtype"] = name_of(kDtypes, c.dtype);
  return j.dump();
}

DecoderModelConfig config_from_json(const std::string& text) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    QKV_CHECK(false, "DecoderModel config: not valid JSON (", e.what(), ")");
  }
  QKV_CHECK(j.is_object(), "DecoderModel config: expected a JSON object, got ", j.dump());
  DecoderModelConfig c;
  for (const auto& [key, value] : j.items()) {
    const char* k = key.c_str();
    if (key == "vocab_size")
      c.vocab_size = integer(value, k);
    else if (key == "d_model")
      c.d_model = integer(value, k);
    else if (key == "num_layers")
      c.num_layers = integer(value, k);
    else if (key == "num_heads")
      c.num_heads = integer(value, k);
    else if (key == "num_kv_heads")
      c.num_kv_heads = integer(value, k);
    else if (key == "ffn_hidden")
      c.ffn_hidden = integer(value, k);
    else if (key == "max_seq_len")
      c.max_seq_len = integer(value, k);
    else if (key == "positions")
      c.positions = value_of(kPositions, value, k);
    else if (key == "rope_base")
      c.rope_base = number(value, k);
    else if (key == "rope_style")
      c.rope_style = value_of(kRopeStyles, value, k);
    else if (key == "norm")
      c.norm = value_of(kNorms, value, k);
    else if (key == "norm_eps")
      c.norm_eps = number(value, k);
    else if (key == "ffn")
      c.ffn = value_of(kFfns, value, k);
    else if (key == "tie_embeddings")
      c.tie_embeddings = boolean(value, k);
    else if (key == "bias")
      c.bias = boolean(value, k);
    else if (key == "dtype")
      c.dtype = value_of(kDtypes, value, k);
    else
      QKV_CHECK(false, "DecoderModel config: unknown field \"", key, "\"");
  }
  return resolved_config(c);
}

void DecoderModel::save(const std::filesystem::path& path,
                        const io::SafetensorsMetadata& metadata) const {
  io::SafetensorsMetadata meta = metadata;
  meta[kDecoderConfigKey] = config_to_json(config_);
  io::save_safetensors(path, state_dict(), meta);
}

DecoderModel DecoderModel::load(const std::filesystem::path& path,
                                io::SafetensorsMetadata* metadata) {
  const io::SafetensorsFile file(path);
  const auto config = file.metadata().find(kDecoderConfigKey);
  QKV_CHECK(config != file.metadata().end(), "DecoderModel::load: ", path.string(), " has no \"",
            kDecoderConfigKey, "\" metadata; it was not written by DecoderModel::save");
  Generator scratch(0);  // the initial values are overwritten by the file's
  DecoderModel model(config_from_json(config->second), &scratch);
  model.load_state_dict(file.load_all());
  if (metadata) *metadata = file.metadata();
  return model;
}

}  // namespace qkv::nn
