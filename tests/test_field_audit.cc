// Issue 37, item 4: fields of the files behind BertModel, SentenceEncoder,
// WordPieceTokenizer and checkpoints that change what is computed are either
// used as the reference (transformers, sentence-transformers, tokenizers)
// uses them or refused by name. Each test here failed before its fix: the
// field was read as something else, or not at all.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qkv/io/checkpoint.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/bert.h"
#include "qkv/models/sentence_encoder.h"
#include "qkv/text/wordpiece_tokenizer.h"
#include "test_util.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using qkv_test::expect_error;

Json read_json(const fs::path& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

void write_json(const fs::path& path, const Json& j) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << j.dump(2);
}

// --- BertModel: config.json and model.safetensors ------------------------------------

const char* kTinyConfig = R"({
  "model_type": "bert", "vocab_size": 20, "hidden_size": 8, "num_hidden_layers": 1,
  "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 6
})";

class BertFieldAudit : public qkv_test::TempDirTest {
 protected:
  // A random tiny BERT saved as a model directory, with `extra` tensors added.
  void save(const std::map<std::string, Tensor>& extra = {}, const std::string& prefix = "") {
    Generator gen(5);
    const models::BertModel model(models::BertConfig::from_json(kTinyConfig), &gen);
    std::map<std::string, Tensor> state;
    for (const auto& [name, t] : model.state_dict()) state[prefix + name] = t;
    for (const auto& [name, t] : extra) state[name] = t;
    io::save_safetensors(dir_ / "model.safetensors", state);
    write("config.json", kTinyConfig);
  }
};

TEST(BertConfigAudit, PrunedHeadsAreRefusedByName) {
  std::string config = kTinyConfig;
  config.insert(1, R"("pruned_heads": {"0": [1]}, )");
  expect_error([&] { models::BertConfig::from_json(config); },
               {"\"pruned_heads\"", "{\"0\":[1]}", "not supported"});
  // No heads pruned: what every saved config holds.
  config = kTinyConfig;
  config.insert(1, R"("pruned_heads": {}, )");
  EXPECT_EQ(models::BertConfig::from_json(config).num_attention_heads, 2);
}

TEST_F(BertFieldAudit, AnUnusedEncoderTensorIsRefusedByName) {
  save({{"encoder.layer.0.attention.self.distance_embedding.weight", Tensor::zeros({11, 4})}});
  expect_error([&] { models::BertModel::from_pretrained(dir_); },
               {"model.safetensors", "\"encoder.layer.0.attention.self.distance_embedding.weight\"",
                "not part of a BertModel"});
  // The pooler and heads of derived models stay outside: still loaded.
  save({{"pooler.dense.weight", Tensor::zeros({8, 8})}});
  EXPECT_NO_THROW(models::BertModel::from_pretrained(dir_));
}

TEST_F(BertFieldAudit, TwoCopiesOfTheEncoderAreRefused) {
  // "bert.*" is read; a second, unprefixed embedding table would be ignored.
  save({{"embeddings.word_embeddings.weight", Tensor::zeros({20, 8})}}, "bert.");
  expect_error([&] { models::BertModel::from_pretrained(dir_); },
               {"\"embeddings.word_embeddings.weight\"", "prefix \"bert.\""});
}

TEST_F(BertFieldAudit, SavedBuffersMustHoldTransformersValues) {
  Tensor positions = Tensor::empty({1, 6}, DType::kFloat64);
  for (int64_t i = 0; i < 6; ++i) positions.data<double>()[i] = static_cast<double>(i);
  save({{"embeddings.position_ids", positions},
        {"embeddings.token_type_ids", Tensor::zeros({1, 6}, DType::kFloat64)}});
  EXPECT_NO_THROW(models::BertModel::from_pretrained(dir_));

  positions.data<double>()[3] = 5.0;  // transformers (< 4.31) would use these positions
  save({{"embeddings.position_ids", positions}});
  expect_error([&] { models::BertModel::from_pretrained(dir_); },
               {"\"embeddings.position_ids\"", "0, 1, ..., max_position_embeddings - 1"});
  save({{"embeddings.token_type_ids", Tensor::ones({1, 6}, DType::kFloat64)}});
  expect_error([&] { models::BertModel::from_pretrained(dir_); },
               {"\"embeddings.token_type_ids\"", "all zeros"});
}

// --- SentenceEncoder: the sentence-transformers files ---------------------------------

// all-MiniLM-L6-v2's small files copied into dir_/m (the weights linked), to
// be edited one field at a time.
class SentenceEncoderAudit : public qkv_test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    if (!fs::exists(qkv_test::minilm_dir() / "model.safetensors")) return;
    const fs::path from = qkv_test::minilm_dir();
    model_ = dir_ / "m";
    fs::create_directories(model_ / "1_Pooling");
    for (const char* name : {"config.json", "tokenizer.json", "tokenizer_config.json",
                             "modules.json", "sentence_bert_config.json", "1_Pooling/config.json"})
      fs::copy_file(from / name, model_ / name);
    fs::create_symlink(from / "model.safetensors", model_ / "model.safetensors");
  }

  // Edits the JSON file `name` of the copy.
  template <class Edit>
  void edit(const std::string& name, Edit&& change) {
    Json j = read_json(model_ / name);
    change(j);
    write_json(model_ / name, j);
  }

  std::string refused(std::initializer_list<std::string_view> parts) {
    return expect_error([&] { models::SentenceEncoder encoder(model_); }, parts);
  }

  fs::path model_;
};

TEST_F(SentenceEncoderAudit, TheCopyLoadsAsTheOriginal) {
  QKV_SKIP_WITHOUT_MINILM();
  const models::SentenceEncoder copy(model_);
  const models::SentenceEncoder original(qkv_test::minilm_dir());
  EXPECT_EQ(copy.max_seq_length(), 256);
  EXPECT_TRUE(copy.normalize());
  const std::vector<std::string> texts = {"A cat sits.", "Accents: café, naïve."};
  EXPECT_EQ(copy.token_ids(texts[1]), original.token_ids(texts[1]));
  const Tensor a = copy.encode(texts), b = original.encode(texts);
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]);
}

TEST_F(SentenceEncoderAudit, ModulesWithoutPoolingAreRefused) {
  QKV_SKIP_WITHOUT_MINILM();
  // Transformer alone: sentence-transformers gives no sentence embedding (was: mean).
  edit("modules.json", [](Json& j) { j = Json::array({j[0]}); });
  refused({"modules.json", "no Pooling module"});
  // Transformer then Normalize: normalising what? (was: mean, then normalised)
  edit("modules.json", [](Json& j) {
    j.push_back({{"idx", 1},
                 {"name", "1"},
                 {"path", "2_Normalize"},
                 {"type", "sentence_transformers.models.Normalize"}});
  });
  refused({"modules.json", "module 1", "Normalize", "then Pooling"});
}

TEST_F(SentenceEncoderAudit, SentenceBertConfigSettingsForTransformersAreRefused) {
  QKV_SKIP_WITHOUT_MINILM();
  const Json original = read_json(model_ / "sentence_bert_config.json");
  const std::pair<const char*, Json> cases[] = {
      {"config_args", {{"hidden_act", "relu"}}},
      {"config_kwargs", {{"layer_norm_eps", 0.1}}},
      {"tokenizer_args", {{"do_lower_case", false}}},
      {"processor_kwargs", {{"truncation_side", "left"}}},
      {"model_kwargs", {{"dtype", "bfloat16"}}},
      {"processing_kwargs", {{"text", {{"max_length", 8}}}}},
      {"transformer_task", "fill-mask"},
      {"module_output_name", "scores"},
      {"modality_config",
       {{"text", {{"method", "forward"}, {"method_output_name", "pooler_output"}}}}}};
  for (const auto& [key, value] : cases) {
    SCOPED_TRACE(key);
    Json j = original;
    j[key] = value;
    write_json(model_ / "sentence_bert_config.json", j);
    refused({"sentence_bert_config.json", "\"" + std::string(key) + "\""});
  }
  // What sentence-transformers 6 writes: the defaults, accepted.
  Json j = original;
  j["transformer_task"] = "feature-extraction";
  j["module_output_name"] = "token_embeddings";
  j["modality_config"] = {
      {"text", {{"method", "forward"}, {"method_output_name", "last_hidden_state"}}}};
  j["model_args"] = Json::object();
  write_json(model_ / "sentence_bert_config.json", j);
  EXPECT_EQ(models::SentenceEncoder(model_).max_seq_length(), 256);
}

// Already refused before the audit; held here with the rest.
TEST_F(SentenceEncoderAudit, PoolingModesItCannotComputeAreRefused) {
  QKV_SKIP_WITHOUT_MINILM();
  const Json original = read_json(model_ / "1_Pooling/config.json");
  const std::pair<Json, const char*> cases[] = {
      {{{"pooling_mode", "weightedmean"}}, "\"weightedmean\" is not implemented"},
      {{{"pooling_mode", "lasttoken"}}, "\"lasttoken\" is not implemented"},
      {{{"pooling_mode", {"mean", "max"}}}, "2 pooling modes"},
      {{{"pooling_mode_max_tokens", true}}, "2 pooling modes"},  // with mean, as the file has
      {{{"pooling_mode_lasttoken", true}, {"pooling_mode_mean_tokens", false}},
       "\"lasttoken\" is not implemented"}};
  for (const auto& [change, message] : cases) {
    SCOPED_TRACE(change.dump());
    Json j = original;
    j.update(change);
    write_json(model_ / "1_Pooling/config.json", j);
    refused({"1_Pooling/config.json", message});
  }
  // sentence_bert_config.json's do_lower_case over a tokenizer that keeps case.
  edit("sentence_bert_config.json", [](Json& j) { j["do_lower_case"] = true; });
  edit("tokenizer.json", [](Json& t) { t["normalizer"]["lowercase"] = false; });
  edit("tokenizer_config.json", [](Json& t) { t["do_lower_case"] = false; });
  write_json(model_ / "1_Pooling/config.json", original);
  refused({"sentence_bert_config.json", "\"do_lower_case\" is set"});
}

// transformers 5's BertTokenizer builds its normalizer and template from
// tokenizer_config.json, not tokenizer.json; qkv reads tokenizer.json.
TEST_F(SentenceEncoderAudit, TokenizerConfigMustAgreeWithTokenizerJson) {
  QKV_SKIP_WITHOUT_MINILM();
  const Json original = read_json(model_ / "tokenizer_config.json");
  const std::pair<const char*, Json> cases[] = {
      {"do_lower_case", false},
      {"strip_accents", false},  // tokenizer.json: null, i.e. as lowercase (true)
      {"tokenize_chinese_chars", false},
      {"cls_token", "[SEP]"},
      {"truncation_side", "left"},
      {"tokenizer_class", "XLMRobertaTokenizer"}};
  for (const auto& [key, value] : cases) {
    SCOPED_TRACE(key);
    Json j = original;
    j[key] = value;
    write_json(model_ / "tokenizer_config.json", j);
    refused({"tokenizer_config.json", "\"" + std::string(key) + "\"", value.dump()});
  }
  Json j = original;
  j["padding_side"] = "left";
  write_json(model_ / "tokenizer_config.json", j);
  refused({"tokenizer_config.json", "padding side is \"left\""});
  j = original;
  j["model_max_length"] = 1;  // was: ignored, 256 kept
  write_json(model_ / "tokenizer_config.json", j);
  refused({"\"model_max_length\" is 1"});

  // Without tokenizer_config.json transformers' defaults apply: do_lower_case true.
  write_json(model_ / "tokenizer_config.json", original);
  edit("tokenizer.json", [](Json& t) { t["normalizer"]["lowercase"] = false; });
  fs::remove(model_ / "tokenizer_config.json");
  refused({"tokenizer_config.json (absent)", "\"do_lower_case\" is true",
           "normalizer.lowercase false"});
  // A tokenizer class that reads tokenizer.json as it is: accepted.
  j = original;
  j["tokenizer_class"] = "PreTrainedTokenizerFast";
  write_json(model_ / "tokenizer_config.json", j);
  EXPECT_FALSE(models::SentenceEncoder(model_).tokenizer().options().lowercase);
}

TEST_F(SentenceEncoderAudit, LeftPaddingInTokenizerJsonIsRefused) {
  QKV_SKIP_WITHOUT_MINILM();
  edit("tokenizer.json", [](Json& t) { t["padding"]["direction"] = "Left"; });
  refused({"padding side is \"left\"", "padding.direction"});
  // tokenizer_config.json's padding_side comes first, as in transformers.
  edit("tokenizer_config.json", [](Json& t) { t["padding_side"] = "right"; });
  EXPECT_NO_THROW(models::SentenceEncoder encoder(model_));
}

// --- WordPieceTokenizer: tokenizer.json ------------------------------------------------

class TokenizerJsonAudit : public qkv_test::TempDirTest {
 protected:
  template <class Edit>
  fs::path edited(Edit&& change) {
    Json j = read_json(qkv_test::minilm_dir() / "tokenizer.json");
    change(j);
    write_json(dir_ / "tokenizer.json", j);
    return dir_ / "tokenizer.json";
  }
};

TEST_F(TokenizerJsonAudit, ATokenTypeOtherThanZeroIsRefused) {
  QKV_SKIP_WITHOUT_MINILM();
  for (int piece : {0, 1}) {
    const fs::path file = edited([&](Json& j) {
      Json& single = j["post_processor"]["single"][piece];
      single[piece == 0 ? "SpecialToken" : "Sequence"]["type_id"] = 1;
    });
    expect_error([&] { text::WordPieceTokenizer::from_json(file); },
                 {"post_processor.single", "type_id 1", "type 0"});
  }
}

TEST_F(TokenizerJsonAudit, TruncationStrategyOnlySecondIsRefused) {
  QKV_SKIP_WITHOUT_MINILM();
  const fs::path file = edited([](Json& j) { j["truncation"]["strategy"] = "OnlySecond"; });
  expect_error([&] { text::WordPieceTokenizer::from_json(file); },
               {"truncation.strategy", "OnlySecond"});
  const fs::path first = edited([](Json& j) { j["truncation"]["strategy"] = "OnlyFirst"; });
  EXPECT_EQ(text::WordPieceTokenizer::from_json(first).options().max_length, 128);
}

// --- Checkpoints ------------------------------------------------------------------------

class CheckpointAudit : public qkv_test::TempDirTest {};

TEST_F(CheckpointAudit, AnUnknownQkvKeyIsRefused) {
  const fs::path path = dir_ / "c.safetensors";
  io::save_safetensors(path, {{"model.w", Tensor::zeros({2})}},
                       {{"qkv.format", "checkpoint"},
                        {"qkv.format_version", "1"},
                        {"qkv.step", "3"},
                        {"qkv.loss_scale", "1024"}});
  expect_error([&] { io::load_checkpoint(path); },
               {"c.safetensors", "\"qkv.loss_scale\"", "\"qkv.step\""});
  io::save_checkpoint(
      path, {.model = {{"w", Tensor::zeros({2})}}, .step = 3, .metadata = {{"seed", "7"}}});
  EXPECT_EQ(io::load_checkpoint(path).metadata.at("seed"), "7");
}

}  // namespace
}  // namespace qkv
