// nn::DecoderModel files: the config as JSON in the safetensors metadata,
// the parameters as tensors.
#include "qkv/models/decoder_model_file.h"

#include <nlohmann/json.hpp>
#include <set>
#include <string>
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
                                            {FeedForwardKind::kGelu, "gelu"}};
constexpr Names<RopeStyle> kRopeStyles[] = {{RopeStyle::kHalfSplit, "half_split"},
                                            {RopeStyle::kInterleaved, "interleaved"}};
constexpr Names<DType> kDtypes[] = {{DType::kFloat32, "float32"}, {DType::kFloat64, "float64"}};

template <class Enum, size_t N>
Enum value_of(const Names<Enum> (&table)[N], const Json& j, const char* field) {
  QKV_CHECK(j.is_string(), "DecoderModel config: \"", field, "\" must be a string, got ",
            json_excerpt(j));
  std::string choices;
  for (const auto& entry : table) {
    if (j.get<std::string>() == entry.name) return entry.value;
    choices += std::string(choices.empty() ? "" : ", ") + "\"" + entry.name + "\"";
  }
  QKV_CHECK(false, "DecoderModel config: \"", field, "\" must be one of ", choices, ", got ",
            json_excerpt(j));
  return table[0].value;
}

int64_t integer(const Json& j, const char* field) {
  QKV_CHECK(j.is_number_integer() && (j.is_number_unsigned() ? j.get<uint64_t>() <= kMaxSize
                                                             : j.get<int64_t>() <= kMaxSize),
            "DecoderModel config: \"", field, "\" must be an integer <= ", kMaxSize, ", got ",
            json_excerpt(j));
  return j.get<int64_t>();
}

double number(const Json& j, const char* field) {
  QKV_CHECK(j.is_number(), "DecoderModel config: \"", field, "\" must be a number, got ",
            json_excerpt(j));
  return j.get<double>();
}

std::vector<double> numbers(const Json& j, const char* field) {
  QKV_CHECK(j.is_array() && j.size() <= static_cast<size_t>(kMaxSize), "DecoderModel config: \"",
            field, "\" must be an array of numbers, got ", json_excerpt(j));
  std::vector<double> out;
  for (const Json& v : j) out.push_back(number(v, field));
  return out;
}

bool boolean(const Json& j, const char* field) {
  QKV_CHECK(j.is_boolean(), "DecoderModel config: \"", field, "\" must be true or false, got ",
            json_excerpt(j));
  return j.get<bool>();
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

}  // namespace

std::string decoder_config_to_json(const DecoderModelConfig& c) {
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
  // Only when set: the configs of every other model stay as they were.
  if (!c.rope_freq_factors.empty()) j["rope_freq_factors"] = c.rope_freq_factors;
  j["norm"] = name_of(kNorms, c.norm);
  j["norm_eps"] = c.norm_eps;
  j["ffn"] = name_of(kFfns, c.ffn);
  j["tie_embeddings"] = c.tie_embeddings;
  j["bias"] = c.bias;
  j["dtype"] = name_of(kDtypes, c.dtype);
  return j.dump();
}

DecoderModelConfig decoder_config_from_json(const std::string& text) {
  const Json j = io::parse_json(text, "DecoderModel config");
  QKV_CHECK(j.is_object(), "DecoderModel config: expected a JSON object, got ", json_excerpt(j));
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
    else if (key == "rope_freq_factors")
      c.rope_freq_factors = numbers(value, k);
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
