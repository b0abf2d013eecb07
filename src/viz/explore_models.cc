// viz::AttentionExplorer: the models the explorer reads (BERT directories, GGUF
// decoders), their tokens, and each layer's attention inputs from the records
// their training paths keep.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <variant>

#include "qkv/error.h"
#include "qkv/models/bert.h"
#include "qkv/models/gguf_model.h"
#include "qkv/text/wordpiece_tokenizer.h"
#include "qkv/viz/explore.h"

namespace qkv::viz {

namespace {

struct Encoder {
  models::BertModel model;
  text::WordPieceTokenizer tokenizer;
};

// The ids of an input and what the page shows of them.
struct Tokens {
  std::vector<int64_t> ids;
  std::vector<int64_t> types;           // BERT's token_type_ids
  std::vector<int64_t> attention_mask;  // 1 real, 0 padding
  std::vector<std::string> text;
  std::vector<int> segments;
};

// Refuses maps of more than options.max_weights numbers, before the model runs.
void check_size(const std::string& model, int64_t tokens, int64_t layers, int64_t heads,
                const ExploreOptions& options) {
  QKV_CHECK(options.max_weights > 0, "AttentionExplorer: max_weights must be positive, got ",
            options.max_weights);
  const int64_t weights = tokens * tokens * layers * heads;
  QKV_CHECK(weights <= options.max_weights, "AttentionExplorer: ", tokens, " tokens x ", layers,
            " layers x ", heads, " heads of ", model, " make ", tokens, "^2 x ", layers * heads,
            " = ", weights, " attention weights, more than max_weights = ", options.max_weights,
            "; shorten the text or raise the limit");
}

// [CLS] text [SEP] (text_b [SEP]), token types 0 then 1, padded with [PAD] (type 0) to pad_to.
Tokens encoder_tokens(const Encoder& e, const std::string& text, const ExploreOptions& options) {
  Tokens t;
  const std::vector<int64_t> a = e.tokenizer.encode(text);
  t.ids = a;
  t.segments.assign(a.size(), 0);
  if (!options.text_b.empty()) {
    const std::vector<int64_t> b = e.tokenizer.encode(options.text_b);
    // Without its [CLS]: BERT's pair template is [CLS] A [SEP] B [SEP].
    const bool cls = !e.tokenizer.options().cls_token.empty();
    t.ids.insert(t.ids.end(), b.begin() + (cls ? 1 : 0), b.end());
    t.segments.resize(t.ids.size(), 1);
  }
  const int64_t real = static_cast<int64_t>(t.ids.size());
  const int64_t max_len = e.model.config().max_position_embeddings;
  QKV_CHECK(options.pad_to == 0 || options.pad_to >= real,
            "AttentionExplorer: pad_to = ", options.pad_to, " is shorter than the input's ", real,
            " tokens");
  const int64_t length = std::max(real, options.pad_to);
  QKV_CHECK(length <= max_len, "AttentionExplorer: ", length, " tokens, more than the model's ",
            "max_position_embeddings = ", max_len, "; shorten the text");
  if (length > real) {
    const std::string& pad = e.tokenizer.options().pad_token;
    const int64_t pad_id = pad.empty() ? -1 : e.tokenizer.token_to_id(pad);
    QKV_CHECK(pad_id >= 0,
              "AttentionExplorer: pad_to needs a padding token; the tokenizer has none");
    t.ids.resize(static_cast<size_t>(length), pad_id);
    t.segments.resize(static_cast<size_t>(length), 0);  // token type 0, as tokenizers pads
  }
  t.attention_mask.assign(static_cast<size_t>(length), 1);
  std::fill(t.attention_mask.begin() + real, t.attention_mask.end(), 0);
  for (size_t i = 0; i < t.ids.size(); ++i) {
    t.types.push_back(t.segments[i]);
    t.text.push_back(e.tokenizer.id_to_token(t.ids[i]));
  }
  return t;
}

// text (BOS first when the file says so), then text_b without special tokens.
Tokens decoder_tokens(const models::GgufModel& m, const std::string& text,
                      const ExploreOptions& options) {
  QKV_CHECK(options.pad_to == 0, "AttentionExplorer: pad_to is for encoders; ",
            m.name.empty() ? "a decoder" : m.name,
            " reads its tokens causally and has no padding mask");
  Tokens t;
  for (int32_t id : m.tokenizer.encode(text)) {
    t.ids.push_back(id);
    t.segments.push_back(0);
  }
  if (!options.text_b.empty())
    for (int32_t id : m.tokenizer.encode(options.text_b, /*add_special=*/false)) {
      t.ids.push_back(id);
      t.segments.push_back(1);
    }
  QKV_CHECK(!t.ids.empty(), "AttentionExplorer: the text has no tokens");
  const int64_t max_len = m.model.config().max_seq_len;
  QKV_CHECK(static_cast<int64_t>(t.ids.size()) <= max_len, "AttentionExplorer: ", t.ids.size(),
            " tokens, more than the model's context of ", max_len, "; shorten the text");
  for (int64_t id : t.ids) {
    const int32_t id32 = static_cast<int32_t>(id);
    t.text.push_back(m.tokenizer.decode(std::span<const int32_t>(&id32, 1)));
  }
  return t;
}

}  // namespace

struct AttentionExplorer::Model {
  std::string name;
  std::variant<Encoder, models::GgufModel> model;
};

namespace {

std::variant<Encoder, models::GgufModel> load_model(const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path)) {
    Encoder e{models::BertModel::from_pretrained(path),
              text::WordPieceTokenizer::from_json(path / "tokenizer.json")};
    e.tokenizer.set_max_length(0);  // too long is an error here, never cut silently
    return e;
  }
  QKV_CHECK(std::filesystem::is_regular_file(path), "AttentionExplorer: the model ", path.string(),
            " is neither a model directory (config.json, model.safetensors, tokenizer.json) "
            "nor a GGUF file");
  // Exact: float32 weights, as transformers loads the file, and records allowed.
  return models::load_gguf_model(path, {.exact = true});
}

}  // namespace

AttentionExplorer::AttentionExplorer(const std::filesystem::path& path) {
  const std::filesystem::path absolute = std::filesystem::absolute(path).lexically_normal();
  model_ = std::make_unique<Model>(
      Model{(absolute.has_filename() ? absolute : absolute.parent_path()).filename().string(),
            load_model(path)});
}

AttentionExplorer::~AttentionExplorer() = default;
AttentionExplorer::AttentionExplorer(AttentionExplorer&&) noexcept = default;
AttentionExplorer& AttentionExplorer::operator=(AttentionExplorer&&) noexcept = default;

const std::string& AttentionExplorer::name() const { return model_->name; }

bool AttentionExplorer::causal() const {
  return std::holds_alternative<models::GgufModel>(model_->model);
}

AttentionMaps AttentionExplorer::explore(const std::string& text, const ExploreOptions& options) {
  std::vector<AttentionInputs> layers;
  Tokens tokens;
  std::string architecture;
  if (auto* e = std::get_if<Encoder>(&model_->model)) {
    tokens = encoder_tokens(*e, text, options);
    const models::BertConfig& c = e->model.config();
    check_size(model_->name, static_cast<int64_t>(tokens.ids.size()), c.num_hidden_layers,
               c.num_attention_heads, options);
    std::vector<nn::MultiheadAttentionRecord> records;
    e->model.forward_recording_attention(tokens.ids, tokens.attention_mask, 1, tokens.types,
                                         records);
    for (const nn::MultiheadAttentionRecord& r : records) layers.push_back({r.q, r.k, r.v, r.sdpa});
    architecture = "bert";
  } else {
    auto& m = std::get<models::GgufModel>(model_->model);
    tokens = decoder_tokens(m, text, options);
    const nn::DecoderModelConfig& c = m.model.config();
    check_size(model_->name, static_cast<int64_t>(tokens.ids.size()), c.num_layers, c.num_heads,
               options);
    nn::DecoderModelRecord record;
    m.model.forward(tokens.ids, 1, &record);
    for (const nn::DecoderBlockRecord& b : record.blocks)
      layers.push_back({b.attention.q, b.attention.k, b.attention.v, b.attention.sdpa});
    architecture = m.architecture;
  }
  AttentionMaps maps = attention_maps(layers);
  maps.model = model_->name;
  maps.architecture = architecture;
  maps.text = text;
  maps.text_b = options.text_b;
  maps.ids = std::move(tokens.ids);
  maps.tokens = std::move(tokens.text);
  maps.segments = std::move(tokens.segments);
  return maps;
}

}  // namespace qkv::viz
