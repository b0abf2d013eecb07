// Hostile JSON and configs: every JSON qkv reads goes through one depth-limited
// parser (io/json_document.h), so values nested 100,000 deep, numbers such as
// 1e400 and configs far larger than their weights give a short qkv::Error
// naming the file, never a stack overflow (which would kill this binary), an
// nlohmann message or a 13 GB allocation.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "io/json_document.h"
#include "qkv/error.h"
#include "qkv/io/char_vocabulary.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/bert.h"
#include "qkv/models/decoder_model_file.h"
#include "qkv/models/sentence_encoder.h"
#include "qkv/nn/decoder_model.h"
#include "qkv/text/wordpiece_tokenizer.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using qkv::Error;
using qkv::ErrorKind;
using qkv::Tensor;

constexpr int kDeep = 100000;
std::string deep_array() { return std::string(kDeep, '[') + std::string(kDeep, ']'); }
std::string deep_object() {
  std::string s;
  for (int i = 0; i < kDeep; ++i) s += "{\"a\":";
  return s + "1" + std::string(kDeep, '}');
}

// Runs `f`, expecting a short qkv::Error of `kind` whose message holds every
// part and nothing of nlohmann's own wording.
template <class F>
void expect_clean_error(F&& f, std::initializer_list<std::string_view> parts,
                        ErrorKind kind = ErrorKind::kValue, qkv_test::CallSite where = {}) {
  const std::string message = qkv_test::expect_error(std::forward<F>(f), parts, kind, where);
  EXPECT_EQ(message.find("json.exception"), std::string::npos) << message;
  EXPECT_LT(message.size(), 500u) << message;
}

class HostileFiles : public qkv_test::TempDirTest {};

// The 8-byte little-endian length and the header, no data.
std::vector<std::byte> safetensors_bytes(const std::string& header) {
  std::vector<std::byte> bytes(8 + header.size());
  uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  return bytes;
}

// --- The parser itself -------------------------------------------------------------

TEST(ParseJson, RejectsDeepNestingWhileParsing) {
  for (const std::string& text : {deep_array(), deep_object(), "{\"x\": " + deep_array() + "}"})
    expect_clean_error([&] { qkv::io::parse_json(text, "src.json"); },
                       {"src.json", "not valid JSON at line 1", "more than 64 levels deep"});
  // The position is that of the 65th bracket.
  expect_clean_error([&] { qkv::io::parse_json(deep_array(), "s"); }, {"line 1, column 65"});
  std::string ok = std::string(64, '[') + std::string(64, ']');
  EXPECT_NO_THROW(qkv::io::parse_json(ok, "s"));
  expect_clean_error([&] { qkv::io::parse_json("[" + ok + "]", "s"); }, {"64 levels"});
}

TEST(ParseJson, NamesThePositionOfEveryError) {
  expect_clean_error([] { qkv::io::parse_json("{\n  \"a\": 1e400\n}", "n.json"); },
                     {"n.json", "line 2, column", "1e400"});
  expect_clean_error([] { qkv::io::parse_json("[1, 2", "t.json"); }, {"t.json", "not valid JSON"});
  expect_clean_error([] { qkv::io::parse_json("[1]\n x", "g.json"); }, {"g.json", "line 2"});
  expect_clean_error([] { qkv::io::parse_json(std::string("[1]\0", 4), "z.json"); },
                     {"z.json", "NUL byte"});
  expect_clean_error([] { qkv::io::parse_json("[\"\xff\xfe\"]", "u.json"); }, {"u.json", "UTF-8"});
  expect_clean_error([] { qkv::io::parse_json("", "e.json"); }, {"e.json", "not valid JSON"});
  // A long bad token is cut short.
  expect_clean_error(
      [] { qkv::io::parse_json("[\"" + std::string(10000, 'x') + "\\q\"]", "l.json"); },
      {"l.json"});
}

TEST(ParseJson, ParsesAsNlohmannDoesAndReportsRepeatedKeys) {
  const std::string text =
      R"({"a": [1, -2, 3.5, true, null, "s", {"b": {}}], "c": {"d": 18446744073709551615}})";
  EXPECT_EQ(qkv::io::parse_json(text, "s"), nlohmann::json::parse(text));
  qkv::io::JsonDuplicateKey duplicate;
  const auto j = qkv::io::parse_json(R"({"a": {"k": 1, "k": 2}})", "s", &duplicate);
  EXPECT_TRUE(duplicate.found);
  EXPECT_EQ(duplicate.key, "k");
  EXPECT_EQ(duplicate.enclosing, std::vector<std::string>{"a"});
  EXPECT_EQ(j["a"]["k"], 2);  // the last value, as Python's json
  qkv::io::JsonDuplicateKey none;
  qkv::io::parse_json(R"({"a": {"k": 1}, "k": 2})", "s", &none);
  EXPECT_FALSE(none.found);
}

TEST(ParseJson, ExcerptsAreShort) {
  nlohmann::json big = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) big.push_back(i);
  EXPECT_LE(qkv::io::json_excerpt(big).size(), 60u);
  EXPECT_EQ(qkv::io::json_excerpt(big).substr(0, 6), "[0,1,2");
  nlohmann::json nested = qkv::io::parse_json(std::string(64, '[') + std::string(64, ']'), "s");
  EXPECT_LE(qkv::io::json_excerpt(nested).size(), 60u);
  EXPECT_EQ(qkv::io::json_excerpt(nlohmann::json("a\xff")), "\"a\xEF\xBF\xBD\"");
  EXPECT_EQ(qkv::io::json_excerpt(nlohmann::json{{"a", "b"}}), "{\"a\":\"b\"}");
  EXPECT_LE(qkv::io::json_excerpt(nlohmann::json(std::string(5000, 'x'))).size(), 60u);
}

// --- Every reader ------------------------------------------------------------------

TEST_F(HostileFiles, TokenizerJson) {
  const fs::path deep = write("deep/tokenizer.json", "{\"model\": " + deep_array() + "}");
  expect_clean_error([&] { qkv::text::WordPieceTokenizer::from_json(deep); },
                     {deep.string(), "more than 64 levels deep"});
  const fs::path big = write("big/tokenizer.json", R"({"truncation": {"max_length": 1e400}})");
  expect_clean_error([&] { qkv::text::WordPieceTokenizer::from_json(big); },
                     {big.string(), "line 1", "1e400"});
}

TEST_F(HostileFiles, BertConfig) {
  expect_clean_error([] { qkv::models::BertConfig::from_json(deep_array(), "d/config.json"); },
                     {"d/config.json", "64 levels"});
  expect_clean_error(
      [] { qkv::models::BertConfig::from_json(R"({"vocab_size": 1e400})", "c.json"); },
      {"c.json", "1e400"});
  const fs::path path = write("config.json", "{\"vocab_size\": " + deep_object() + "}");
  expect_clean_error([&] { qkv::models::BertConfig::from_file(path); },
                     {path.string(), "64 levels"});
  // Integers only, and sane ones.
  const std::string rest =
      R"("hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": )";
  expect_clean_error([&] { qkv::models::BertConfig::from_json("{" + rest + "1e15}"); },
                     {"vocab_size", "1e+15"});
  expect_clean_error([&] { qkv::models::BertConfig::from_json("{" + rest + "1000000000000000}"); },
                     {"vocab_size", "1000000000000000"});
  expect_clean_error(
      [&] { qkv::models::BertConfig::from_json("{" + rest + "18446744073709551615}"); },
      {"vocab_size", "18446744073709551615"});
}

TEST_F(HostileFiles, SentenceEncoderFolder) {
  write("m/config.json", deep_array());
  expect_clean_error([&] { qkv::models::SentenceEncoder encoder(dir_ / "m"); },
                     {"config.json", "64 levels"});
  write("n/modules.json", "[" + deep_object() + "]");
  expect_clean_error([&] { qkv::models::SentenceEncoder encoder(dir_ / "n"); },
                     {"modules.json", "64 levels"});
  write("p/modules.json", R"([{"type": 1e400}])");
  expect_clean_error([&] { qkv::models::SentenceEncoder encoder(dir_ / "p"); },
                     {"modules.json", "1e400"});
}

TEST_F(HostileFiles, MissingFilesAreNotFoundErrors) {
  for (auto load : {+[](const fs::path& p) { qkv::models::SentenceEncoder encoder(p); },
                    +[](const fs::path& p) { qkv::models::BertModel::from_pretrained(p); }}) {
    try {
      load(dir_ / "absent");
      ADD_FAILURE() << "loaded a missing folder";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kIO) << e.what();
      EXPECT_EQ(e.os_error(), ENOENT) << e.what();
      EXPECT_NE(std::string(e.what()).find("absent"), std::string::npos) << e.what();
    }
  }
  write("empty/modules.json.txt", "");
  try {
    qkv::models::SentenceEncoder encoder(dir_ / "empty");
    ADD_FAILURE() << "loaded a folder without config.json";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIO) << e.what();
    EXPECT_EQ(e.os_error(), ENOENT) << e.what();
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
  }
  try {
    qkv::text::WordPieceTokenizer::from_json(dir_ / "absent.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.os_error(), ENOENT) << e.what();
  }
}

TEST_F(HostileFiles, SafetensorsHeader) {
  const std::string tensor = R"("t": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]})";
  for (const std::string& header :
       {"{\"__metadata__\": " + deep_array() + ", " + tensor + "}",
        "{\"__metadata__\": {\"k\": " + deep_object() + "}, " + tensor + "}",
        "{\"t\": {\"dtype\": \"F32\", \"shape\": " + deep_array() + ", \"data_offsets\": [0, 0]}}",
        "{\"t\": " + deep_object() + "}"}) {
    expect_clean_error(
        [&] { qkv::io::SafetensorsFile::from_bytes(safetensors_bytes(header), "h.st"); },
        {"h.st", "64 levels"});
    const fs::path path = dir_ / "deep.safetensors";
    const auto bytes = safetensors_bytes(header);
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    expect_clean_error([&] { qkv::io::SafetensorsFile file(path); }, {path.string(), "64 levels"});
  }
  const std::string huge = R"({"t": {"dtype": "F32", "shape": [1e400], "data_offsets": [0,0]}})";
  expect_clean_error([&] { qkv::io::SafetensorsFile::from_bytes(safetensors_bytes(huge), "n.st"); },
                     {"n.st", "1e400"});
}

TEST_F(HostileFiles, DecoderModelConfig) {
  expect_clean_error([] { qkv::models::decoder_config_from_json(deep_array()); },
                     {"DecoderModel config", "64 levels"});
  expect_clean_error([] { qkv::models::decoder_config_from_json(R"({"rope_base": 1e400})"); },
                     {"DecoderModel config", "1e400"});
  expect_clean_error([] { qkv::models::decoder_config_from_json(R"({"d_model": 1e400})"); },
                     {"1e400"});
  expect_clean_error(
      [] { qkv::models::decoder_config_from_json(R"({"num_layers": 1000000000000})"); },
      {"num_layers", "1000000000000"});
  expect_clean_error([] { qkv::models::decoder_config_from_json(R"({"vocab_size": 3.5})"); },
                     {"vocab_size", "3.5"});
  // In a model file: the config is a string of the metadata.
  const fs::path path = dir_ / "model.safetensors";
  qkv::io::save_safetensors(
      path, {{"w", Tensor::ones({1})}},
      {{qkv::models::kDecoderConfigKey, "{\"norm\": " + deep_object() + "}"}});
  expect_clean_error([&] { qkv::models::load_decoder_model(path); },
                     {"DecoderModel config", "64 levels"});
}

TEST_F(HostileFiles, DecoderModelConfigIsCheckedAgainstTheWeights) {
  qkv::Generator gen(1);
  const qkv::nn::DecoderModelConfig config{
      .vocab_size = 11, .d_model = 8, .num_layers = 2, .num_heads = 2, .max_seq_len = 16};
  const qkv::nn::DecoderModel model(config, &gen);
  const fs::path path = dir_ / "model.safetensors";
  qkv::models::save_decoder_model(model, path);
  const auto rewrite = [&](const std::string& field, const std::string& value) {
    qkv::io::SafetensorsFile file(path);
    auto meta = file.metadata();
    std::string& json = meta[qkv::models::kDecoderConfigKey];
    json = std::regex_replace(json, std::regex("\"" + field + "\":[0-9]+"),
                              "\"" + field + "\":" + value);
    const fs::path out = dir_ / ("edited_" + field + ".safetensors");
    qkv::io::save_safetensors(out, file.load_all(), meta);
    return out;
  };
  const auto start = std::chrono::steady_clock::now();
  expect_clean_error([&] { qkv::models::load_decoder_model(rewrite("num_layers", "1000000")); },
                     {"num_layers = 1000000", "holds 2 layers"});
  expect_clean_error([&] { qkv::models::load_decoder_model(rewrite("vocab_size", "16000000")); },
                     {"tok_embeddings.weight", "[16000000, 8]", "[11, 8]"});
  expect_clean_error([&] { qkv::models::load_decoder_model(rewrite("ffn_hidden", "16000000")); },
                     {"ffn_hidden = 16000000"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_NO_THROW(qkv::models::load_decoder_model(path));
}

TEST_F(HostileFiles, CharVocabulary) {
  expect_clean_error([] { qkv::io::CharVocabulary::from_json(deep_array()); },
                     {"CharVocabulary::from_json", "64 levels"});
  expect_clean_error([] { qkv::io::CharVocabulary::from_json("[\"a\", 1e400]"); },
                     {"CharVocabulary::from_json", "1e400"});
}

// --- Configs against the real weights -----------------------------------------------

TEST_F(HostileFiles, HugeLayerCountsFailFastBesideRealWeights) {
  QKV_SKIP_WITHOUT_MINILM();
  const fs::path minilm = qkv_test::minilm_dir();
  std::ifstream in(minilm / "config.json");
  const std::string config((std::istreambuf_iterator<char>(in)), {});
  const std::regex layers("\"num_hidden_layers\"\\s*:\\s*6");
  ASSERT_TRUE(std::regex_search(config, layers));
  int n = 0;
  for (const char* value : {"1000000", "1e12", "1000000000000", "7", "5"}) {
    const fs::path model = dir_ / ("m" + std::to_string(n++));
    fs::create_directories(model);
    std::ofstream(model / "config.json")
        << std::regex_replace(config, layers, std::string("\"num_hidden_layers\": ") + value);
    fs::copy_file(minilm / "tokenizer.json", model / "tokenizer.json");
    fs::create_symlink(minilm / "model.safetensors", model / "model.safetensors");
    const auto start = std::chrono::steady_clock::now();
    expect_clean_error(
        [&] { qkv::models::BertModel::from_pretrained(model); },
        {"num_hidden_layers", std::string(value) == "1e12" ? "1000000000000" : value});
    expect_clean_error([&] { qkv::models::SentenceEncoder encoder(model); }, {"num_hidden_layers"});
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1)) << value;
  }
  // Wider than the weights: the embedding shapes say so before anything is allocated.
  const fs::path wide = dir_ / "wide";
  fs::create_directories(wide);
  std::ofstream(wide / "config.json") << std::regex_replace(
      config, std::regex("\"hidden_size\"\\s*:\\s*384"), "\"hidden_size\": 3840");
  fs::create_symlink(minilm / "model.safetensors", wide / "model.safetensors");
  expect_clean_error([&] { qkv::models::BertModel::from_pretrained(wide); },
                     {"word_embeddings", "[30522, 384]", "[30522, 3840]"});
}

// --- encode_batch sizes --------------------------------------------------------------

TEST_F(HostileFiles, EncodeBatchRejectsAbsurdPadding) {
  const fs::path vocab = write("vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n");
  auto tok = qkv::text::WordPieceTokenizer::from_vocab(vocab);
  expect_clean_error([&] { tok.set_padding(int64_t{1} << 62); },
                     {"pad_to_length", "4611686018427387904"});
  expect_clean_error([&] { tok.set_padding(0, int64_t{1} << 62); }, {"pad_to_multiple_of"});
  tok.set_padding(qkv::text::WordPieceTokenizer::kMaxPadding, 3);
  const std::vector<std::string> texts(100, "hello");
  expect_clean_error([&] { tok.encode_batch(texts); }, {"100 texts", "16777218 tokens", "limit"});
  tok.set_padding(8);
  const auto batch = tok.encode_batch(texts);
  EXPECT_EQ(batch.length, 8);
  EXPECT_EQ(batch.ids.size(), 800u);
  // From tokenizer.json: {"Fixed": 2^62} is rejected when the file is read.
  const fs::path json =
      write("tokenizer.json",
            R"({"model": {"type": "WordPiece", "vocab": {"[PAD]": 0, "[UNK]": 1, "hello": 2}},
          "pre_tokenizer": {"type": "BertPreTokenizer"},
          "padding": {"strategy": {"Fixed": 4611686018427387904}}})");
  expect_clean_error([&] { qkv::text::WordPieceTokenizer::from_json(json); },
                     {json.string(), "pad_to_length", "4611686018427387904"});
}

}  // namespace
