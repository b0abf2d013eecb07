// models::BertModel: config.json checks, bad model files, and a tiny random
// BERT against an independent float64 implementation written here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "qkv/functional.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/bert.h"
#include "test_util.h"

namespace qkv::models {
namespace {

using qkv_test::expect_error;

namespace fs = std::filesystem;

// --- Helpers ----------------------------------------------------------------------

const char* kTinyConfig = R"({
  "architectures": ["BertModel"], "model_type": "bert",
  "vocab_size": 50, "hidden_size": 12, "num_hidden_layers": 2, "num_attention_heads": 3,
  "intermediate_size": 20, "max_position_embeddings": 16, "type_vocab_size": 2,
  "layer_norm_eps": 1e-12, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
  "position_embedding_type": "absolute", "pad_token_id": 0
})";

BertConfig tiny_config(BertActivation act = BertActivation::kGelu) {
  BertConfig c = BertConfig::from_json(kTinyConfig);
  c.hidden_act = act;
  return c;
}

// A temporary directory, removed at the end of the test.
class BertFiles : public qkv_test::TempDirTest {
 protected:
  // config.json and model.safetensors of `model`, its tensors renamed by `rename`.
  template <class Rename>
  void save(const BertModel& model, Rename rename) const {
    write("config.json", kTinyConfig);
    std::map<std::string, Tensor> state;
    for (const auto& [name, t] : model.state_dict()) {
      const std::string renamed = rename(name);
      if (!renamed.empty()) state[renamed] = t;
    }
    io::save_safetensors(dir_ / "model.safetensors", state);
  }
  void save(const BertModel& model) const {
    save(model, [](const std::string& name) { return name; });
  }
};

// --- The oracle: BERT in float64, plain loops ---------------------------------------

using Matrix = std::vector<double>;  // row-major

Matrix values(const Tensor& t) { return t.contiguous().to_vector(); }

// y[r] = x[r] · Wᵀ + b   (x: [rows, in], W: [out, in])
Matrix dense(const Matrix& x, int64_t in, const Matrix& w, const Matrix& b) {
  const int64_t out = static_cast<int64_t>(b.size()), rows = static_cast<int64_t>(x.size()) / in;
  Matrix y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b[o];
      for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

void layer_norm(Matrix& x, int64_t d, const Matrix& g, const Matrix& b, double eps) {
  for (size_t r = 0; r < x.size() / d; ++r) {
    double* v = &x[r * d];
    double mean = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) mean += v[i] / d;
    for (int64_t i = 0; i < d; ++i) var += (v[i] - mean) * (v[i] - mean) / d;
    for (int64_t i = 0; i < d; ++i) v[i] = (v[i] - mean) / std::sqrt(var + eps) * g[i] + b[i];
  }
}

double act(double x, BertActivation a) {
  switch (a) {
    case BertActivation::kGelu:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case BertActivation::kGeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case BertActivation::kRelu:
      return std::max(x, 0.0);
    case BertActivation::kSilu:
      return x / (1 + std::exp(-x));
  }
  return 0;
}

// transformers' BertModel: returns the last hidden state [B, L, D].
Matrix reference_bert(const BertModel& model, const std::vector<int64_t>& ids,
                      const std::vector<int64_t>& mask, const std::vector<int64_t>& types,
                      int64_t B) {
  const BertConfig& c = model.config();
  const auto w = model.state_dict();
  auto p = [&](const std::string& name) { return values(w.at(name)); };
  const int64_t L = static_cast<int64_t>(ids.size()) / B, D = c.hidden_size;
  const int64_t H = c.num_attention_heads, E = D / H, I = c.intermediate_size;
  const Matrix word = p("embeddings.word_embeddings.weight");
  const Matrix pos = p("embeddings.position_embeddings.weight");
  const Matrix type = p("embeddings.token_type_embeddings.weight");
  Matrix x(static_cast<size_t>(B * L * D));
  for (int64_t t = 0; t < B * L; ++t)
    for (int64_t d = 0; d < D; ++d)
      x[t * D + d] = word[ids[t] * D + d] + type[types[t] * D + d] + pos[(t % L) * D + d];
  layer_norm(x, D, p("embeddings.LayerNorm.weight"), p("embeddings.LayerNorm.bias"),
             c.layer_norm_eps);
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string pre = "encoder.layer." + std::to_string(layer) + ".";
    auto linear = [&](const Matrix& in, int64_t n, const std::string& name) {
      return dense(in, n, p(pre + name + ".weight"), p(pre + name + ".bias"));
    };
    const Matrix q = linear(x, D, "attention.self.query");
    const Matrix k = linear(x, D, "attention.self.key");
    const Matrix v = linear(x, D, "attention.self.value");
    Matrix context(x.size(), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < L; ++i) {
          // softmax over the real keys j of q_i · k_j / √E
          std::vector<double> s(static_cast<size_t>(L), -INFINITY);
          double top = -INFINITY, sum = 0;
          for (int64_t j = 0; j < L; ++j) {
            if (mask[b * L + j] == 0) continue;
            double dot = 0;
            for (int64_t e = 0; e < E; ++e)
              dot += q[(b * L + i) * D + h * E + e] * k[(b * L + j) * D + h * E + e];
            s[j] = dot / std::sqrt(static_cast<double>(E));
            top = std::max(top, s[j]);
          }
          for (int64_t j = 0; j < L; ++j) sum += s[j] == -INFINITY ? 0 : std::exp(s[j] - top);
          for (int64_t j = 0; j < L; ++j) {
            if (s[j] == -INFINITY) continue;
            const double weight = std::exp(s[j] - top) / sum;
            for (int64_t e = 0; e < E; ++e)
              context[(b * L + i) * D + h * E + e] += weight * v[(b * L + j) * D + h * E + e];
          }
        }
    Matrix a = linear(context, D, "attention.output.dense");
    for (size_t i = 0; i < a.size(); ++i) a[i] += x[i];
    layer_norm(a, D, p(pre + "attention.output.LayerNorm.weight"),
               p(pre + "attention.output.LayerNorm.bias"), c.layer_norm_eps);
    Matrix inner = linear(a, D, "intermediate.dense");
    for (double& value : inner) value = act(value, c.hidden_act);
    Matrix out = linear(inner, I, "output.dense");
    for (size_t i = 0; i < out.size(); ++i) out[i] += a[i];
    layer_norm(out, D, p(pre + "output.LayerNorm.weight"), p(pre + "output.LayerNorm.bias"),
               c.layer_norm_eps);
    x = out;
  }
  return x;
}

// max |ours - reference| / max |reference|
double relative_error(const Tensor& ours, const Matrix& reference) {
  const std::vector<double> o = ours.contiguous().to_vector();
  EXPECT_EQ(o.size(), reference.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < o.size() && i < reference.size(); ++i) {
    diff = std::max(diff, std::fabs(o[i] - reference[i]));
    scale = std::max(scale, std::fabs(reference[i]));
  }
  return diff / scale;
}

// Three sequences of lengths 9, 4 and 1 (+ padding), both token types.
struct Batch {
  int64_t B = 3, L = 9;
  std::vector<int64_t> ids, mask, types;
};
Batch padded_batch(int64_t vocab) {
  Batch batch;
  const int64_t lengths[] = {9, 4, 1};
  for (int64_t b = 0; b < batch.B; ++b)
    for (int64_t i = 0; i < batch.L; ++i) {
      const bool real = i < lengths[b];
      batch.ids.push_back(real ? (7 * b + 5 * i + 3) % vocab : 0);
      batch.mask.push_back(real ? 1 : 0);
      batch.types.push_back(real && i >= lengths[b] / 2 ? 1 : 0);
    }
  return batch;
}

// Weights that make a real test: LayerNorm parameters away from 1 and 0, biases non-zero.
BertModel random_model(BertActivation a, uint64_t seed) {
  Generator gen(seed);
  BertModel model(tiny_config(a), &gen);
  std::map<std::string, Tensor> state = model.state_dict();
  for (auto& [name, t] : state) {
    const bool bias = name.ends_with(".bias"), norm = name.find("LayerNorm") != std::string::npos;
    Tensor r = Tensor::randn(t.shape(), gen);
    if (norm && !bias)
      t.copy_from(Tensor::rand(t.shape(), gen, 0.5, 1.5));
    else if (bias)
      t.copy_from(scale(r, 0.1));
    else
      t.copy_from(scale(r, 0.3));  // larger than 0.02: attention far from uniform
  }
  return model;
}

// --- The model against the oracle ----------------------------------------------------

TEST(BertModel, MatchesFloat64ReferenceForEveryActivation) {
  for (BertActivation a : {BertActivation::kGelu, BertActivation::kGeluTanh, BertActivation::kRelu,
                           BertActivation::kSilu}) {
    SCOPED_TRACE(bert_activation_name(a));
    const BertModel model = random_model(a, 11);
    const Batch batch = padded_batch(model.config().vocab_size);
    const Tensor out = model.forward(batch.ids, batch.mask, batch.B, batch.types);
    ASSERT_EQ(out.shape(), (Shape{3, 9, 12}));
    EXPECT_LT(relative_error(out, reference_bert(model, batch.ids, batch.mask, batch.types, 3)),
              1e-5);
  }
}

TEST(BertModel, DefaultsAreAllRealTokensOfTypeZero) {
  const BertModel model = random_model(BertActivation::kGelu, 12);
  const std::vector<int64_t> ids = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int64_t> ones(8, 1), zeros(8, 0);
  const Tensor out = model.forward(ids, {}, 2);
  EXPECT_LT(relative_error(out, reference_bert(model, ids, ones, zeros, 2)), 1e-5);
  EXPECT_EQ(max_abs_diff(out, model.forward(ids, ones, 2, zeros)), 0.0);
}

TEST(BertModel, RealTokensDoNotSeeThePadding) {
  // The same sentence alone and padded to 9 in a batch: the same hidden states.
  const BertModel model = random_model(BertActivation::kGelu, 13);
  const Batch batch = padded_batch(model.config().vocab_size);
  const Tensor all = model.forward(batch.ids, batch.mask, batch.B);
  const std::vector<int64_t> alone(batch.ids.begin() + 9, batch.ids.begin() + 13);
  const Tensor single = model.forward(alone, {}, 1);
  const Tensor padded = all.select(0, 1).slice(0, 0, 4);
  EXPECT_LT(max_abs_diff(single.select(0, 0), padded), 1e-5);
}

TEST(BertModel, ForwardRejectsBadInputs) {
  const BertModel model = random_model(BertActivation::kGelu, 14);
  const std::vector<int64_t> ids = {1, 2, 3, 4};
  expect_error([&] { model.forward(ids, {}, 3); }, {"4 ids", "batch_size = 3"});
  expect_error([&] { model.forward({}, {}, 1); }, {"0 ids"});
  expect_error(
      [&] {
        model.forward(std::vector<int64_t>{1, 50}, {}, 1);
      },
      {"id 50", "[0, 1]", "vocabulary [0, 50)"});
  expect_error([&] { model.forward(std::vector<int64_t>{-1}, {}, 1); }, {"id -1"});
  expect_error(
      [&] {
        model.forward(ids, std::vector<int64_t>{1, 1}, 1);
      },
      {"attention_mask", "one value per id (4)", "got 2"});
  expect_error(
      [&] {
        model.forward(ids, {}, 1, std::vector<int64_t>{0, 0, 2, 0});
      },
      {"token type 2", "[0, 2)"});
  expect_error([&] { model.forward(std::vector<int64_t>(17, 1), {}, 1); },
               {"17 tokens", "max_position_embeddings = 16"});
}

TEST(BertModel, StateDictHasTransformersNamesAndLoadsStrictly) {
  const BertModel a = random_model(BertActivation::kGelu, 15);
  BertModel b(tiny_config(), nullptr);
  const auto state = a.state_dict();
  // 5 embedding tensors + 16 per layer.
  EXPECT_EQ(state.size(), 5u + 16u * 2u);
  EXPECT_EQ(state.at("encoder.layer.1.attention.self.value.weight").shape(), (Shape{12, 12}));
  EXPECT_EQ(state.at("encoder.layer.1.intermediate.dense.weight").shape(), (Shape{20, 12}));
  EXPECT_EQ(a.num_parameters(),
            50 * 12 + 16 * 12 + 2 * 12 + 2 * 12 +
                2 * (3 * (144 + 12) + 144 + 12 + 24 + 240 + 20 + 240 + 12 + 24));
  b.load_state_dict(state);
  const std::vector<int64_t> ids = {3, 1, 4, 1, 5};
  EXPECT_EQ(max_abs_diff(a.forward(ids, {}, 1), b.forward(ids, {}, 1)), 0.0);
  auto missing = state;
  missing.erase("encoder.layer.0.attention.self.key.bias");
  expect_error([&] { b.load_state_dict(missing); },
               {"missing", "encoder.layer.0.attention.self.key.bias"});
}

// --- config.json -----------------------------------------------------------------

TEST(BertConfig, ParsesTransformersConfig) {
  const BertConfig c = BertConfig::from_json(kTinyConfig);
  EXPECT_EQ(c.vocab_size, 50);
  EXPECT_EQ(c.hidden_size, 12);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 3);
  EXPECT_EQ(c.head_dim(), 4);
  EXPECT_EQ(c.intermediate_size, 20);
  EXPECT_EQ(c.max_position_embeddings, 16);
  EXPECT_EQ(c.type_vocab_size, 2);
  EXPECT_EQ(c.layer_norm_eps, 1e-12);
  EXPECT_EQ(c.hidden_act, BertActivation::kGelu);
  // Optional fields take transformers' defaults.
  const BertConfig d = BertConfig::from_json(
      R"({"vocab_size": 5, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
          "intermediate_size": 16})");
  EXPECT_EQ(d.max_position_embeddings, 512);
  EXPECT_EQ(d.type_vocab_size, 2);
  EXPECT_EQ(d.layer_norm_eps, 1e-12);
  EXPECT_EQ(d.hidden_act, BertActivation::kGelu);
  for (const char* name : {"gelu_new", "gelu_pytorch_tanh", "gelu_fast"})
    EXPECT_EQ(bert_activation_from_string(name), BertActivation::kGeluTanh);
  EXPECT_EQ(bert_activation_from_string("swish"), BertActivation::kSilu);
}

TEST(BertConfig, RejectsBadFieldsNamingThem) {
  // Each case replaces one field of the tiny config.
  auto with = [](const std::string& field, const std::string& value) {
    std::string text = kTinyConfig;
    const size_t at = text.find("\"" + field + "\"");
    if (at == std::string::npos) return text.insert(1, "\"" + field + "\": " + value + ", ");
    const size_t begin = text.find(':', at) + 1;
    const size_t end = text.find_first_of(",}", begin);
    return text.replace(begin, end - begin, " " + value);
  };
  auto rejects = [&](const std::string& field, const std::string& value,
                     std::vector<std::string> parts) {
    SCOPED_TRACE(field + " = " + value);
    parts.push_back("config.json");
    expect_error([&] { BertConfig::from_json(with(field, value)); }, parts);
  };
  rejects("hidden_size", "-12", {"\"hidden_size\"", "positive integer", "-12"});
  rejects("hidden_size", "12.5", {"\"hidden_size\"", "12.5"});
  rejects("hidden_size", "\"384\"", {"\"hidden_size\"", "\"384\""});
  rejects("num_hidden_layers", "0", {"\"num_hidden_layers\"", "0"});
  rejects("num_attention_heads", "5", {"divisible", "\"num_attention_heads\" (5)"});
  rejects("intermediate_size", "null", {"\"intermediate_size\"", "null"});
  rejects("vocab_size", "0", {"\"vocab_size\""});
  rejects("max_position_embeddings", "-1", {"\"max_position_embeddings\""});
  rejects("type_vocab_size", "true", {"\"type_vocab_size\""});
  rejects("layer_norm_eps", "-1e-5", {"\"layer_norm_eps\"", "[0, 1)"});
  rejects("layer_norm_eps", "\"tiny\"", {"\"layer_norm_eps\""});
  rejects("hidden_act", "\"tanh\"", {"\"hidden_act\"", "\"tanh\"", "\"gelu_new\""});
  rejects("hidden_act", "3", {"\"hidden_act\"", "string"});
  rejects("position_embedding_type", "\"relative_key\"", {"relative_key", "absolute"});
  rejects("model_type", "\"roberta\"", {"\"roberta\"", "\"bert\""});
  rejects("is_decoder", "true", {"is_decoder", "encoder"});
  rejects("is_decoder", "1", {"is_decoder", "true or false"});

  expect_error([] { BertConfig::from_json(R"({"hidden_size": 8})"); },
               {"config.json", "required field \"vocab_size\""});
  expect_error([] { BertConfig::from_json("{\"vocab_size\": 5,", "x/config.json"); },
               {"x/config.json", "not valid JSON"});
  expect_error([] { BertConfig::from_json("[1, 2]"); }, {"config.json", "JSON object", "array"});
}

// --- Model files -------------------------------------------------------------------

TEST_F(BertFiles, LoadsWhatWasSavedWithOrWithoutPrefix) {
  const BertModel model = random_model(BertActivation::kGelu, 21);
  const std::vector<int64_t> ids = {2, 7, 1, 8, 2, 8};
  const Tensor expected = model.forward(ids, {}, 2);

  save(model);
  EXPECT_EQ(max_abs_diff(BertModel::from_pretrained(dir_).forward(ids, {}, 2), expected), 0.0);

  // BertForMaskedLM-style files: "bert." prefix, plus tensors of other modules.
  save(model, [](const std::string& name) { return "bert." + name; });
  {
    auto state = io::load_safetensors(dir_ / "model.safetensors");
    state["cls.predictions.bias"] = Tensor::zeros({50});
    state["bert.pooler.dense.weight"] = Tensor::zeros({12, 12});
    io::save_safetensors(dir_ / "model.safetensors", state);
  }
  EXPECT_EQ(max_abs_diff(BertModel::from_pretrained(dir_).forward(ids, {}, 2), expected), 0.0);
}

TEST_F(BertFiles, MissingFilesAreNamed) {
  const BertModel model = random_model(BertActivation::kGelu, 22);
  save(model);
  fs::remove(dir_ / "model.safetensors");
  expect_error([&] { BertModel::from_pretrained(dir_); }, {"model.safetensors", "does not exist"},
               ErrorKind::kIO);
  fs::remove(dir_ / "config.json");
  expect_error([&] { BertModel::from_pretrained(dir_); }, {"config.json", "no such file"},
               ErrorKind::kIO);
  expect_error([&] { BertModel::from_pretrained(dir_ / "nope"); }, {"nope", "not a directory"},
               ErrorKind::kIO);
}

TEST_F(BertFiles, TruncatedOrMalformedSafetensorsIsRejected) {
  const BertModel model = random_model(BertActivation::kGelu, 23);
  save(model);
  const fs::path file = dir_ / "model.safetensors";
  const auto size = fs::file_size(file);
  fs::resize_file(file, size - 100);
  expect_error([&] { BertModel::from_pretrained(dir_); }, {"model.safetensors"});
  write("model.safetensors", "not a safetensors file at all");
  expect_error([&] { BertModel::from_pretrained(dir_); }, {"model.safetensors"});
  write("model.safetensors", "");
  expect_error([&] { BertModel::from_pretrained(dir_); }, {"model.safetensors"});
}

TEST_F(BertFiles, MissingOrMisShapedTensorIsNamed) {
  const BertModel model = random_model(BertActivation::kGelu, 24);
  save(model, [](const std::string& name) {
    return name == "encoder.layer.1.output.dense.weight" ? std::string() : name;
  });
  expect_error([&] { BertModel::from_pretrained(dir_); },
               {"model.safetensors", "missing tensor \"encoder.layer.1.output.dense.weight\""});

  save(model);
  auto state = io::load_safetensors(dir_ / "model.safetensors");
  state["encoder.layer.0.intermediate.dense.weight"] = Tensor::zeros({21, 12});
  io::save_safetensors(dir_ / "model.safetensors", state);
  expect_error([&] { BertModel::from_pretrained(dir_); },
               {"model.safetensors", "\"encoder.layer.0.intermediate.dense.weight\"", "[21, 12]",
                "needs [20, 12]"});

  // Weights of the wrong kind (integers).
  state["encoder.layer.0.intermediate.dense.weight"] = Tensor::zeros({20, 12}, DType::kBool);
  io::save_safetensors(dir_ / "model.safetensors", state);
  expect_error([&] { BertModel::from_pretrained(dir_); },
               {"\"encoder.layer.0.intermediate.dense.weight\"", "dtype BOOL"}, ErrorKind::kType);

  // A config that does not fit the weights: the shapes say which field.
  save(model);
  write("config.json",
        std::string(kTinyConfig).replace(std::string(kTinyConfig).find("50"), 2, "51"));
  expect_error([&] { BertModel::from_pretrained(dir_); },
               {"\"embeddings.word_embeddings.weight\"", "vocab_size 51", "needs [51, 12]"});
}

TEST_F(BertFiles, BadConfigJsonIsNamed) {
  const BertModel model = random_model(BertActivation::kGelu, 25);
  save(model);
  write("config.json", "{\"hidden_size\": 12,");
  expect_error([&] { BertModel::from_pretrained(dir_); },
               {(dir_ / "config.json").string(), "not valid JSON"});
  write("config.json", R"({"vocab_size": 50, "hidden_size": 12, "num_hidden_layers": 2,
                           "num_attention_heads": 3, "intermediate_size": 20,
                           "hidden_act": "gelu_bogus"})");
  expect_error([&] { BertModel::from_pretrained(dir_); },
               {(dir_ / "config.json").string(), "gelu_bogus"});
}

}  // namespace
}  // namespace qkv::models
