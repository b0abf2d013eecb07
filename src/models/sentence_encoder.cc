// models::SentenceEncoder: reading a sentence-transformers model directory,
// length-sorted batches through BertModel, pooling and normalisation.
#include "qkv/models/sentence_encoder.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "io/json_document.h"
#include "kernels/interrupt.h"
#include "qkv/error.h"
#include "tensor/enum_names.h"

namespace qkv::models {

namespace {

using Json = nlohmann::json;

using io::json_excerpt;

Json read_json(const std::filesystem::path& path) {
  return io::parse_json(io::read_text_file(path, "SentenceEncoder"),
                        "SentenceEncoder: " + path.string());
}

bool flag(const Json& j, const char* field, const std::filesystem::path& source) {
  const auto it = j.find(field);
  if (it == j.end() || it->is_null()) return false;
  QKV_CHECK(it->is_boolean(), "SentenceEncoder: ", source.string(), ": \"", field,
            "\" must be true or false, got ", json_excerpt(*it));
  return it->get<bool>();
}

// The constructor's int8 calibration text: 16 lines of 40 random whole words
// of the vocabulary (lower-case ASCII letters, no "##" pieces), the same
// every time. What matters to smoothing is which features of the activations
// run large, and that shows on any text in the model's language.
std::vector<std::string> calibration_texts(const text::WordPieceTokenizer& tokenizer) {
  std::vector<int64_t> words;
  for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const std::string& t = tokenizer.id_to_token(id);
    if (t.size() >= 2 &&
        std::all_of(t.begin(), t.end(), [](char c) { return c >= 'a' && c <= 'z'; }))
      words.push_back(id);
  }
  std::vector<std::string> texts;
  if (words.empty()) return texts;
  std::mt19937 gen(2024);
  std::uniform_int_distribution<size_t> pick(0, words.size() - 1);
  for (int line = 0; line < 16; ++line) {
    std::string text;
    for (int w = 0; w < 40; ++w) {
      if (w) text += ' ';
      text += tokenizer.id_to_token(words[pick(gen)]);
    }
    texts.push_back(std::move(text));
  }
  return texts;
}

// sentence_bert_config.json keys that would make sentence-transformers load or
// run another model than config.json, tokenizer.json and model.safetensors
// describe: refused unless absent or at their defaults.
void check_transformer_module_config(const Json& j, const std::filesystem::path& file) {
  const auto where = [&](const char* key) {
    return "SentenceEncoder: " + file.string() + ": \"" + key + "\" is ";
  };
  for (const char* key : {"model_args", "model_kwargs", "tokenizer_args", "processor_kwargs",
                          "config_args", "config_kwargs", "processing_kwargs"}) {
    const auto it = j.find(key);
    QKV_CHECK(it == j.end() || it->is_null() || (it->is_object() && it->empty()), where(key),
              json_excerpt(*it),
              "; sentence-transformers would pass these settings on to transformers, and qkv "
              "reads the model's own files alone: put them into config.json / "
              "tokenizer_config.json, or remove them");
  }
  const std::pair<const char*, const char*> defaults[] = {
      {"transformer_task", "feature-extraction"}, {"module_output_name", "token_embeddings"}};
  for (const auto& [key, expected] : defaults) {
    const auto it = j.find(key);
    QKV_CHECK(it == j.end() || it->is_null() || *it == expected, where(key), json_excerpt(*it),
              "; qkv computes \"", expected, "\" (the last hidden state) only");
  }
  if (const auto it = j.find("modality_config"); it != j.end() && !it->is_null()) {
    const Json text_only = {
        {"text", {{"method", "forward"}, {"method_output_name", "last_hidden_state"}}}};
    QKV_CHECK(*it == text_only, where("modality_config"), json_excerpt(*it, 120),
              "; qkv computes {\"text\": {\"method\": \"forward\", \"method_output_name\": "
              "\"last_hidden_state\"}} only");
  }
}

// sentence-transformers tokenizes with transformers' AutoTokenizer. For
// tokenizer_class BertTokenizer (the class of a "bert" model without a
// tokenizer_config.json too), transformers 5 builds the normalizer, the
// continuation prefix and the [CLS] $A [SEP] template from
// tokenizer_config.json's fields and their defaults, not from tokenizer.json;
// qkv reads tokenizer.json. The two must agree. Either file sets the
// truncation and padding sides (tokenizer_config.json first).
void check_tokenizer_agrees(const std::filesystem::path& tokenizer_config,
                            const text::WordPieceTokenizer& tokenizer) {
  const std::string source = tokenizer_config.string();
  Json j = Json::object();
  const bool exists = std::filesystem::exists(tokenizer_config);
  if (exists) {
    j = read_json(tokenizer_config);
    QKV_CHECK(j.is_object(), "SentenceEncoder: ", source, " must be a JSON object");
  }
  const text::WordPieceOptions& o = tokenizer.options();
  const auto value = [&](const char* key) -> const Json* {
    const auto it = j.find(key);
    return it == j.end() ? nullptr : &*it;
  };
  const auto disagree = [&](const char* key, const Json& theirs, const std::string& ours) {
    QKV_CHECK(false, "SentenceEncoder: ", exists ? source : source + " (absent)", ": \"", key,
              "\" is ", json_excerpt(theirs), " but tokenizer.json gives ", ours,
              "; sentence-transformers would tokenize by the former, qkv by the latter. Make the "
              "two files agree");
  };
  const std::string tokenizer_class =
      value("tokenizer_class") && value("tokenizer_class")->is_string()
          ? value("tokenizer_class")->get<std::string>()
          : "BertTokenizer";
  if (tokenizer_class == "BertTokenizer" || tokenizer_class == "BertTokenizerFast") {
    const auto flag_or = [&](const char* key, bool fallback) -> std::pair<Json, bool> {
      const Json* v = value(key);
      if (!v || v->is_null()) return {v ? *v : Json(fallback), fallback};
      QKV_CHECK(v->is_boolean(), "SentenceEncoder: ", source, ": \"", key,
                "\" must be true, false or null, got ", json_excerpt(*v));
      return {*v, v->get<bool>()};
    };
    const auto bool_name = [](bool b) { return std::string(b ? "true" : "false"); };
    const auto [lower_json, lowercase] = flag_or("do_lower_case", true);
    if (lowercase != o.lowercase)
      disagree("do_lower_case", lower_json, "normalizer.lowercase " + bool_name(o.lowercase));
    // strip_accents null follows do_lower_case, as in BERT.
    const auto [strip_json, strip] = flag_or("strip_accents", lowercase);
    if (strip != o.strip_accents)
      disagree("strip_accents", strip_json,
               "accents " + std::string(o.strip_accents ? "stripped" : "kept"));
    const auto [chinese_json, chinese] = flag_or("tokenize_chinese_chars", true);
    if (chinese != o.split_chinese_chars)
      disagree("tokenize_chinese_chars", chinese_json,
               "normalizer.handle_chinese_chars " + bool_name(o.split_chinese_chars));
    if (!o.clean_text)
      disagree("tokenizer_class", Json(tokenizer_class),
               "no clean_text (BertTokenizer always cleans the text)");
    if (o.continuing_prefix != "##" || o.max_input_chars_per_word != 100)
      disagree("tokenizer_class", Json(tokenizer_class),
               "model.continuing_subword_prefix \"" + o.continuing_prefix +
                   "\" and max_input_chars_per_word " + std::to_string(o.max_input_chars_per_word) +
                   " (BertTokenizer uses \"##\" and 100)");
    const std::pair<const char*, const std::string*> specials[] = {
        {"cls_token", &o.cls_token}, {"sep_token", &o.sep_token}, {"unk_token", &o.unk_token}};
    for (const auto& [key, ours] : specials) {
      const std::string fallback = key == std::string("cls_token")   ? "[CLS]"
                                   : key == std::string("sep_token") ? "[SEP]"
                                                                     : "[UNK]";
      const Json* v = value(key);
      // transformers 5 writes a special token as a string; an older file may
      // hold an AddedToken object with its "content".
      const Json theirs = !v || v->is_null()                         ? Json(fallback)
                          : v->is_object() && v->contains("content") ? (*v)["content"]
                                                                     : *v;
      if (theirs != *ours)
        disagree(key, theirs, *ours == "" ? std::string("no such token") : "\"" + *ours + "\"");
    }
  } else {
    QKV_CHECK(
        tokenizer_class == "PreTrainedTokenizerFast" || tokenizer_class == "TokenizersBackend",
        "SentenceEncoder: ", source, ": \"tokenizer_class\" is \"", tokenizer_class,
        "\"; supported: BertTokenizer, BertTokenizerFast (checked against tokenizer.json), "
        "PreTrainedTokenizerFast and TokenizersBackend (which read tokenizer.json as qkv "
        "does)");
  }
  const auto side = [&](const char* key, bool left_in_json) -> std::string {
    const Json* v = value(key);
    if (!v || v->is_null()) return left_in_json ? "left" : "right";
    QKV_CHECK(v->is_string() && (*v == "left" || *v == "right"), "SentenceEncoder: ", source,
              ": \"", key, "\" must be \"left\" or \"right\", got ", json_excerpt(*v));
    return v->get<std::string>();
  };
  const std::string truncation = side("truncation_side", o.truncate_left);
  if ((truncation == "left") != o.truncate_left)
    disagree("truncation_side", Json(truncation),
             std::string("truncation.direction ") + (o.truncate_left ? "\"Left\"" : "\"Right\""));
  // BERT numbers positions from the first column, padding or not: padded on
  // the left, a shorter text's tokens would get other positions.
  QKV_CHECK(side("padding_side", o.pad_left) == "right", "SentenceEncoder: ", source,
            ": the padding side is \"left\" (\"padding_side\", else tokenizer.json's "
            "padding.direction); sentence-transformers would then shift the positions of "
            "shorter texts in a batch, qkv pads on the right. Set it to \"right\"");
}

}  // namespace

// What modules.json asks for: where the transformer and the pooling config
// live, and whether a Normalize module follows.
struct SentenceEncoder::Layout {
  std::filesystem::path transformer_dir;
  std::filesystem::path pooling_dir;  // empty: no Pooling module listed
  bool normalize = false;
};

SentenceEncoder::Layout SentenceEncoder::read_layout(const std::filesystem::path& model_dir) {
  io::require_directory(model_dir, "SentenceEncoder");
  Layout p{model_dir, {}, false};
  const std::filesystem::path file = model_dir / "modules.json";
  if (!std::filesystem::exists(file)) return p;  // a plain transformers model
  const Json modules = read_json(file);
  QKV_CHECK(modules.is_array(), "SentenceEncoder: ", file.string(),
            " must be a list of modules, got ", modules.type_name());
  for (size_t i = 0; i < modules.size(); ++i) {
    const Json& m = modules[i];
    QKV_CHECK(m.is_object() && m.contains("type") && m["type"].is_string(),
              "SentenceEncoder: ", file.string(), ": module ", i,
              " must be an object with a \"type\" string, got ", json_excerpt(m));
    std::string path;
    if (m.contains("path")) {
      QKV_CHECK(m["path"].is_string(), "SentenceEncoder: ", file.string(), ": module ", i,
                " has a \"path\" that is not a string: ", json_excerpt(m["path"]));
      path = m["path"].get<std::string>();
    }
    // "sentence_transformers.models.Pooling" (before version 6) or
    // "sentence_transformers.sentence_transformer.modules.pooling.Pooling": the class name.
    const std::string type = m["type"].get<std::string>();
    const std::string name =
        type.starts_with("sentence_transformers.") ? type.substr(type.rfind('.') + 1) : type;
    const bool first = i == 0;
    if (name == "Transformer" && first) {
      p.transformer_dir = model_dir / path;
    } else if (name == "Pooling" && i == 1) {
      p.pooling_dir = model_dir / path;
    } else if (name == "Normalize" && i + 1 == modules.size() && i == 2) {
      p.normalize = true;
    } else {
      QKV_CHECK(false, "SentenceEncoder: ", file.string(), ": module ", i, " is \"", type,
                "\"; supported: Transformer, then Pooling, then optionally Normalize");
    }
  }
  QKV_CHECK(!modules.empty(), "SentenceEncoder: ", file.string(), " lists no module");
  // Without a Pooling module sentence-transformers has no sentence embedding
  // to give; mean pooling here would be an invention.
  QKV_CHECK(!p.pooling_dir.empty(), "SentenceEncoder: ", file.string(),
            " lists no Pooling module after the Transformer; supported: Transformer, then "
            "Pooling, then optionally Normalize");
  return p;
}

namespace {

// The pooling config: {"embedding_dimension": D, "pooling_mode": "mean"}
// (sentence-transformers 6) or {"word_embedding_dimension": D,
// "pooling_mode_mean_tokens": true, ...} (before; no mode set means mean).
Pooling read_pooling(const std::filesystem::path& dir, int64_t hidden_size) {
  const std::filesystem::path file = dir / "config.json";
  const Json j = read_json(file);
  QKV_CHECK(j.is_object(), "SentenceEncoder: ", file.string(), " must be a JSON object");
  for (const char* field : {"embedding_dimension", "word_embedding_dimension"}) {
    if (const auto it = j.find(field); it != j.end())
      QKV_CHECK(it->is_number_integer() && it->get<int64_t>() == hidden_size,
                "SentenceEncoder: ", file.string(), ": \"", field, "\" is ", json_excerpt(*it),
                " but the model's hidden_size is ", hidden_size);
  }
  const std::pair<const char*, Pooling> names[] = {{"mean", Pooling::kMean},
                                                   {"cls", Pooling::kCls},
                                                   {"max", Pooling::kMax},
                                                   {"mean_sqrt_len_tokens", Pooling::kMeanSqrtLen}};
  const std::pair<const char*, const char*> legacy[] = {
      {"pooling_mode_cls_token", "cls"},
      {"pooling_mode_max_tokens", "max"},
      {"pooling_mode_mean_tokens", "mean"},
      {"pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"},
      {"pooling_mode_weightedmean_tokens", "weightedmean"},
      {"pooling_mode_lasttoken", "lasttoken"}};
  std::vector<std::string> modes;
  if (const auto it = j.find("pooling_mode"); it != j.end()) {
    for (const Json& mode : it->is_array() ? *it : Json::array({*it})) {
      QKV_CHECK(mode.is_string(), "SentenceEncoder: ", file.string(),
                ": \"pooling_mode\" must be a string or a list of strings, got ",
                json_excerpt(*it));
      modes.push_back(mode.get<std::string>());
    }
  } else {
    for (const auto& [field, mode] : legacy)
      if (flag(j, field, file)) modes.push_back(mode);
    if (modes.empty()) modes.push_back("mean");
  }
  QKV_CHECK(modes.size() == 1, "SentenceEncoder: ", file.string(), ": ", modes.size(),
            " pooling modes are set; combining them is not implemented");
  for (const auto& [name, pooling] : names)
    if (modes.front() == name) return pooling;
  QKV_CHECK(false, "SentenceEncoder: ", file.string(), ": pooling mode \"", modes.front(),
            "\" is not implemented (mean, cls, max and mean_sqrt_len_tokens are)");
  return Pooling::kMean;
}

}  // namespace

const char* pooling_name(Pooling pooling) {
  constexpr ::qkv::detail::EnumName<Pooling> kNames[] = {
      {Pooling::kMean, "mean"},
      {Pooling::kCls, "cls"},
      {Pooling::kMax, "max"},
      {Pooling::kMeanSqrtLen, "mean_sqrt_len_tokens"}};
  return ::qkv::detail::name_of(kNames, pooling);
}

SentenceEncoder::SentenceEncoder(const std::filesystem::path& model_dir, Precision precision)
    : SentenceEncoder(read_layout(model_dir), precision) {}

SentenceEncoder::SentenceEncoder(const Layout& p, Precision precision)
    : model_(BertModel::from_pretrained(p.transformer_dir)),
      tokenizer_(text::WordPieceTokenizer::from_json(p.transformer_dir / "tokenizer.json")),
      pooling_(p.pooling_dir.empty() ? Pooling::kMean
                                     : read_pooling(p.pooling_dir, model_.config().hidden_size)),
      normalize_(p.normalize) {
  const BertConfig& c = model_.config();
  // max_seq_length as sentence-transformers finds it: sentence_bert_config.json's
  // "max_seq_length", else min(tokenizer_config.json's "model_max_length",
  // max_position_embeddings) (where version 6 keeps it), else max_position_embeddings.
  max_seq_length_ = c.max_position_embeddings;
  const std::filesystem::path tokenizer_config = p.transformer_dir / "tokenizer_config.json";
  if (std::filesystem::exists(tokenizer_config)) {
    const Json j = read_json(tokenizer_config);
    // Unset, transformers writes a huge float (1e30): only integers count.
    if (const auto it = j.find("model_max_length");
        j.is_object() && it != j.end() && it->is_number_integer()) {
      QKV_CHECK(it->get<int64_t>() >= 2, "SentenceEncoder: ", tokenizer_config.string(),
                ": \"model_max_length\" is ", json_excerpt(*it),
                "; it must leave room for [CLS] and [SEP] (>= 2)");
      max_seq_length_ = std::min(max_seq_length_, it->get<int64_t>());
    }
  }
  check_tokenizer_agrees(tokenizer_config, tokenizer_);
  const std::filesystem::path st_config = p.transformer_dir / "sentence_bert_config.json";
  if (std::filesystem::exists(st_config)) {
    const Json j = read_json(st_config);
    QKV_CHECK(j.is_object(), "SentenceEncoder: ", st_config.string(), " must be a JSON object");
    check_transformer_module_config(j, st_config);
    if (const auto it = j.find("max_seq_length"); it != j.end() && !it->is_null()) {
      QKV_CHECK(it->is_number_integer() && it->get<int64_t>() >= 2 &&
                    it->get<int64_t>() <= c.max_position_embeddings,
                "SentenceEncoder: ", st_config.string(),
                ": \"max_seq_length\" must be an integer in [2, max_position_embeddings = ",
                c.max_position_embeddings, "], got ", json_excerpt(*it));
      max_seq_length_ = it->get<int64_t>();
    }
    QKV_CHECK(!flag(j, "do_lower_case", st_config) || tokenizer_.options().lowercase,
              "SentenceEncoder: ", st_config.string(),
              ": \"do_lower_case\" is set but the tokenizer does not lower-case");
  }
  const int64_t vocab = tokenizer_.vocab_size();
  QKV_CHECK(vocab <= c.vocab_size, "SentenceEncoder: the tokenizer has ", vocab,
            " tokens but the model's vocab_size is ", c.vocab_size);
  // As sentence-transformers: max_seq_length replaces tokenizer.json's truncation.
  tokenizer_.set_max_length(max_seq_length_);
  pad_id_ = std::max<int64_t>(0, tokenizer_.token_to_id(tokenizer_.options().pad_token));
  if (precision == Precision::kInt8) calibrate(calibration_texts(tokenizer_));
  model_.set_precision(precision);
}

void SentenceEncoder::calibrate(const std::vector<std::string>& texts) {
  const Precision precision = model_.precision();
  model_.set_precision(Precision::kFloat32);
  model_.record_input_ranges(true);
  try {
    encode(texts);
  } catch (...) {
    model_.record_input_ranges(false);
    model_.set_precision(precision);
    throw;
  }
  model_.record_input_ranges(false);
  model_.set_precision(precision);
}

std::vector<int64_t> SentenceEncoder::token_ids(const std::string& text) const {
  return tokenizer_.encode(text);
}

void SentenceEncoder::set_max_seq_length(int64_t length) {
  const int64_t limit = model_.config().max_position_embeddings;
  QKV_CHECK(length >= 2 && length <= limit,
            "SentenceEncoder: max_seq_length must be in [2, max_position_embeddings = ", limit,
            "], got ", length);
  max_seq_length_ = length;
  tokenizer_.set_max_length(length);
}

void SentenceEncoder::run_batches(const std::vector<std::string>& texts, int64_t batch_size,
                                  const Progress& progress, const char* function,
                                  const BatchSink& sink) const {
  QKV_CHECK(batch_size > 0, "SentenceEncoder::", function, ": batch_size must be positive, got ",
            batch_size);
  const int64_t n = static_cast<int64_t>(texts.size());
  // Many batches can take minutes: Ctrl-C (runtime.h) is heard while
  // tokenizing and between batches (and between layers, in BertModel).
  kernels::InterruptPoll poll;
  const auto stopped = [&] {
    poll.throw_if_stopped((std::string("SentenceEncoder::") + function).c_str());
  };
  std::vector<std::vector<int64_t>> ids(texts.size());
  for (size_t i = 0; i < texts.size() && !poll.stop(); ++i) ids[i] = token_ids(texts[i]);
  stopped();

  // Longest first, so that each batch pads to a length close to its texts'.
  std::vector<int64_t> order(texts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return ids[a].size() > ids[b].size(); });

  for (int64_t start = 0; start < n && !poll.stop(); start += batch_size) {
    const std::vector<int64_t> rows(order.begin() + start,
                                    order.begin() + std::min(n, start + batch_size));
    const int64_t B = static_cast<int64_t>(rows.size());
    const int64_t L = static_cast<int64_t>(ids[rows.front()].size());
    std::vector<int64_t> flat(static_cast<size_t>(B * L), pad_id_), mask(flat.size(), 0);
    std::vector<int64_t> lengths;
    for (int64_t b = 0; b < B; ++b) {
      const std::vector<int64_t>& row = ids[rows[b]];
      std::copy(row.begin(), row.end(), flat.begin() + b * L);
      std::fill(mask.begin() + b * L, mask.begin() + b * L + row.size(), 1);
      lengths.push_back(static_cast<int64_t>(row.size()));
    }
    sink(model_.forward(flat, mask, B), lengths, rows);
    if (progress) progress(start + B);
  }
  stopped();
}

Tensor SentenceEncoder::encode(const std::vector<std::string>& texts, int64_t batch_size,
                               const Progress& progress) const {
  Tensor out = Tensor::empty({static_cast<int64_t>(texts.size()), dimension()});
  run_batches(texts, batch_size, progress, "encode",
              [&](const Tensor& hidden, const std::vector<int64_t>& lengths,
                  const std::vector<int64_t>& rows) { pool(hidden, lengths, rows, out); });
  return out;
}

std::vector<Tensor> SentenceEncoder::token_embeddings(const std::vector<std::string>& texts,
                                                      int64_t batch_size,
                                                      const Progress& progress) const {
  std::vector<Tensor> out(texts.size());
  run_batches(texts, batch_size, progress, "token_embeddings",
              [&](const Tensor& hidden, const std::vector<int64_t>& lengths,
                  const std::vector<int64_t>& rows) {
                const int64_t L = hidden.size(1), D = hidden.size(2);
                const float* h = hidden.data<float>();
                for (size_t b = 0; b < rows.size(); ++b) {
                  Tensor t = Tensor::empty({lengths[b], D});
                  const float* src = h + static_cast<int64_t>(b) * L * D;
                  std::copy(src, src + lengths[b] * D, t.data<float>());
                  out[rows[b]] = std::move(t);
                }
              });
  return out;
}

SentenceEncoder::Features SentenceEncoder::forward_features(std::span<const int64_t> ids,
                                                            std::span<const int64_t> attention_mask,
                                                            int64_t batch) const {
  const char* fn = "SentenceEncoder::forward_features";
  QKV_CHECK(batch > 0 && ids.size() % static_cast<size_t>(batch) == 0 && !ids.empty(), fn,
            ": input_ids must be [batch, T] with batch, T >= 1, got ", ids.size(),
            " ids for batch ", batch);
  QKV_CHECK(attention_mask.size() == ids.size(), fn,
            ": attention_mask must have input_ids' shape [", batch, ", ",
            static_cast<int64_t>(ids.size()) / batch, "], got ", attention_mask.size(), " values");
  const int64_t T = static_cast<int64_t>(ids.size()) / batch;
  std::vector<int64_t> lengths, rows;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t* m = attention_mask.data() + b * T;
    int64_t n = 0;
    while (n < T && m[n] == 1) ++n;
    for (int64_t t = n; t < T; ++t)
      QKV_CHECK(m[t] == 0, fn, ": attention_mask row ", b,
                " must be ones then zeros (right padding, as tokenize() gives), got ", m[t],
                " at position ", t, " after ", n, " ones");
    QKV_CHECK(n > 0, fn, ": attention_mask row ", b, " has no real token");
    lengths.push_back(n);
    rows.push_back(b);
  }
  Features out;
  out.token_embeddings = model_.forward(ids, attention_mask, batch);
  out.sentence_embedding = Tensor::empty({batch, dimension()});
  pool(out.token_embeddings, lengths, rows, out.sentence_embedding);
  return out;
}

void SentenceEncoder::pool(const Tensor& hidden, const std::vector<int64_t>& lengths,
                           const std::vector<int64_t>& rows, Tensor& out) const {
  const int64_t L = hidden.size(1), D = hidden.size(2);
  const float* h = hidden.data<float>();
  std::vector<double> v(static_cast<size_t>(D));
  for (size_t b = 0; b < rows.size(); ++b) {
    const float* tokens = h + static_cast<int64_t>(b) * L * D;
    const int64_t n = lengths[b];  // real tokens: the first n
    std::fill(v.begin(), v.end(), pooling_ == Pooling::kMax ? -INFINITY : 0.0);
    for (int64_t t = 0; t < (pooling_ == Pooling::kCls ? 1 : n); ++t)
      for (int64_t d = 0; d < D; ++d)
        v[d] = pooling_ == Pooling::kMax ? std::max(v[d], static_cast<double>(tokens[t * D + d]))
                                         : v[d] + tokens[t * D + d];
    const double divisor = pooling_ == Pooling::kMean          ? static_cast<double>(n)
                           : pooling_ == Pooling::kMeanSqrtLen ? std::sqrt(static_cast<double>(n))
                                                               : 1.0;
    for (double& x : v) x /= divisor;
    double norm = 1.0;
    if (normalize_) {  // torch.nn.functional.normalize: x / max(‖x‖, 1e-12)
      norm = 0.0;
      for (double x : v) norm += x * x;
      norm = std::max(std::sqrt(norm), 1e-12);
    }
    float* dst = out.data<float>() + rows[b] * D;
    for (int64_t d = 0; d < D; ++d) dst[d] = static_cast<float>(v[d] / norm);
  }
}

}  // namespace qkv::models
