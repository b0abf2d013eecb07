// Precision as a model choice (precision.h): modules convert their weights
// once in set_precision, inference stays close to float32, training refuses
// low precision, and all-MiniLM-L6-v2's embeddings and nearest neighbours in
// bfloat16 and int8 agree with float32.
//
// Issue 18's bounds: bfloat16 cosine ≥ 0.9995 on every corpus line and top-1
// neighbour as float32 for ≥ 99.5% of queries; int8 (asymmetric per-token
// activations, weights smoothed against ranges calibrated on random
// vocabulary words, the feed-forward in bfloat16) cosine ≥ 0.995 and top-1
// neighbour for ≥ 98% (it reaches 98.2%).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/functional.h"
#include "qkv/linear.h"
#include "qkv/models/sentence_encoder.h"
#include "qkv/nn/decoder_model.h"
#include "qkv/nn/decoder_session.h"
#include "qkv/nn/linear.h"
#include "qkv/nn/multihead_attention.h"
#include "qkv/nn/transformer.h"
#include "qkv/precision.h"
#include "test_util.h"

namespace {

using qkv::Generator;
using qkv::Precision;
using qkv::Shape;
using qkv::Tensor;
namespace fs = std::filesystem;

constexpr Precision kLowPrecisions[] = {Precision::kBFloat16, Precision::kInt8};

// max |a − b| / max |b|: the error of a low-precision result relative to the
// scale of the float32 one.
double max_abs(const Tensor& t) {
  const Tensor x = t.to(qkv::DType::kFloat64).contiguous();
  double m = 0.0;
  for (int64_t i = 0; i < x.numel(); ++i) m = std::max(m, std::fabs(x.data<double>()[i]));
  return m;
}

double relative_error(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(qkv::DType::kFloat64).contiguous();
  const Tensor y = b.to(qkv::DType::kFloat64).contiguous();
  double err = 0.0, scale = 0.0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    err = std::max(err, std::fabs(x.data<double>()[i] - y.data<double>()[i]));
    scale = std::max(scale, std::fabs(y.data<double>()[i]));
  }
  return err / scale;
}

// Bounds of max |y − y32| / max |y32| for products of random normal operands
// (the kernels' own tests hold them to exact bounds): bfloat16 rounds each
// operand by at most 2^-9 relative, int8 by half a step of max|row| / 127,
// about 4 standard deviations of a normal row, so ~1/64 of a typical value.
// The errors of k terms add like a random walk, as the products themselves,
// so the relative error of a sum stays near that of a term: 4× margin.
double bound(Precision p) { return p == Precision::kBFloat16 ? 4 * std::ldexp(1.0, -8) : 4.0 / 64; }

// A block of several products in precision p: not float32's result (the
// low-precision kernels ran) but within a few products' error of it.
void expect_block_error(const Tensor& y, const Tensor& exact, Precision p) {
  EXPECT_GT(relative_error(y, exact), 0.0);
  EXPECT_LT(relative_error(y, exact), 8 * bound(p));
}

TEST(PrecisionNames, ParseAndName) {
  EXPECT_EQ(qkv::parse_precision("bf16"), Precision::kBFloat16);
  EXPECT_EQ(qkv::parse_precision("bfloat16"), Precision::kBFloat16);
  EXPECT_EQ(qkv::parse_precision("fp32"), Precision::kFloat32);
  EXPECT_EQ(qkv::parse_precision("int8"), Precision::kInt8);
  EXPECT_STREQ(qkv::precision_name(Precision::kBFloat16), "bfloat16");
  qkv_test::expect_error([] { qkv::parse_precision("fp16"); },
                         {"precision must be", "bfloat16", "'fp16'"});
}

TEST(LowPrecisionLinear, CloseToFloat32AndChecked) {
  Generator gen(7);
  const Tensor w = Tensor::randn({48, 96}, gen), b = Tensor::randn({48}, gen);
  const Tensor x = Tensor::randn({3, 5, 96}, gen);
  const Tensor exact = qkv::linear(x, w, b);
  for (Precision p : kLowPrecisions) {
    SCOPED_TRACE(qkv::precision_name(p));
    const qkv::LowPrecisionWeight lw(w, p);
    EXPECT_EQ(lw.in_features(), 96);
    EXPECT_EQ(lw.out_features(), 48);
    const Tensor y = qkv::linear(x, lw, b);
    ASSERT_EQ(y.shape(), exact.shape());
    EXPECT_LT(relative_error(y, exact), bound(p));
    // into a column block of a wider matrix: the rows are 100 apart
    Tensor wide = Tensor::zeros({15, 100});
    Tensor block = wide.slice(1, 2, 50);
    qkv::linear_into(block, x.reshape({15, 96}), lw, b);
    EXPECT_LT(relative_error(block, y.reshape({15, 48})), 1e-6);
    EXPECT_EQ(max_abs(wide.slice(1, 0, 2)), 0.0);
    EXPECT_EQ(max_abs(wide.slice(1, 50, 100)), 0.0);
    qkv_test::expect_error([&] { qkv::linear(Tensor::randn({2, 95}, gen), lw); },
                           {"linear", "in_features = 96", "[2, 95]"});
    qkv_test::expect_error([&] { qkv::linear(x.to(qkv::DType::kFloat64), lw); },
                           {"linear", "float32", "float64"}, qkv::ErrorKind::kType);
  }
  qkv_test::expect_error([&] { qkv::LowPrecisionWeight(w, Precision::kFloat32); },
                         {"LowPrecisionWeight", "bfloat16 or int8"});
  qkv_test::expect_error([&] { qkv::linear(x, qkv::LowPrecisionWeight(), b); }, {"empty"});
}

TEST(ModulePrecision, LinearConvertsOnceAndRefusesTraining) {
  Generator gen(3);
  qkv::nn::Linear lin({.in_features = 64, .out_features = 32}, &gen);
  const Tensor x = Tensor::randn({4, 64}, gen);
  const Tensor exact = lin.forward(x);
  lin.set_precision(Precision::kInt8);
  EXPECT_EQ(lin.precision(), Precision::kInt8);
  const Tensor y = lin.forward(x);
  EXPECT_GT(relative_error(y, exact), 0.0);  // int8 arithmetic really ran
  EXPECT_LT(relative_error(y, exact), bound(Precision::kInt8));
  Tensor out = Tensor::empty({4, 32});
  lin.forward_into(out, x);
  EXPECT_LT(relative_error(out, y), 1e-6);
  qkv::nn::LinearRecord record;
  qkv_test::expect_error([&] { lin.forward(x, &record); },
                         {"Linear::forward with a record", "int8", "set_precision"});
  // Loading new weights converts them again.
  std::map<std::string, Tensor> state = lin.state_dict();
  state["weight"] = Tensor::randn({32, 64}, gen);
  lin.load_state_dict(state);
  lin.set_precision(Precision::kFloat32);
  const Tensor exact2 = lin.forward(x);
  lin.set_precision(Precision::kBFloat16);
  EXPECT_LT(relative_error(lin.forward(x), exact2), bound(Precision::kBFloat16));
  lin.set_precision(Precision::kInt8);
  lin.load_state_dict(state);
  EXPECT_LT(relative_error(lin.forward(x), exact2), bound(Precision::kInt8));
  // float64 modules have no low precision.
  qkv::nn::Linear wide({.in_features = 4, .out_features = 4, .dtype = qkv::DType::kFloat64});
  qkv_test::expect_error([&] { wide.set_precision(Precision::kBFloat16); },
                         {"Linear", "bfloat16", "float32", "float64"}, qkv::ErrorKind::kType);
  EXPECT_EQ(wide.precision(), Precision::kFloat32);  // a failed call changes nothing
}

TEST(Smoothing, FactorsBalanceRangesAndAreChecked) {
  // feature 0: |x| up to 16, |W| up to 1 -> s = 4; feature 1: x never seen -> 1;
  // feature 2: |x| 1, |W| 4 -> 1/2.
  const std::vector<float> a_values = {16.0f, 0.0f, 1.0f};
  const std::vector<float> w_values = {1.0f, 2.0f, -4.0f, -0.5f, 1.0f, 2.0f};
  const Tensor a = Tensor::from_vector({3}, a_values);
  const Tensor w = Tensor::from_vector({2, 3}, w_values);
  const Tensor s = qkv::smoothing_factors(a, w);
  EXPECT_FLOAT_EQ(s.data<float>()[0], 4.0f);
  EXPECT_FLOAT_EQ(s.data<float>()[1], 1.0f);
  EXPECT_FLOAT_EQ(s.data<float>()[2], 0.5f);
  EXPECT_FLOAT_EQ(qkv::smoothing_factors(a, w, 1.0).data<float>()[0], 16.0f);
  qkv_test::expect_error([&] { qkv::smoothing_factors(Tensor::ones({4}), w); },
                         {"smoothing_factors", "in_features = 3", "[4]"});
  qkv_test::expect_error([&] { qkv::smoothing_factors(a, w, 1.5); }, {"alpha", "[0, 1]"});
  qkv_test::expect_error([&] { qkv::LowPrecisionWeight(w, Precision::kBFloat16, s); },
                         {"smoothing is for int8"});
  qkv_test::expect_error([&] { qkv::LowPrecisionWeight(w, Precision::kInt8, Tensor::ones({2})); },
                         {"smoothing", "in_features = 3", "[2]"});
}

// Inputs whose feature 5 runs 60× larger than the others (as LayerNorm
// outputs of trained transformers do).
Tensor with_outlier_feature(const Shape& shape, Generator& gen) {
  Tensor x = Tensor::randn(shape, gen);
  const int64_t in = shape.back();
  for (int64_t i = 0; i < x.numel() / in; ++i) x.data<float>()[i * in + 5] *= 60.0f;
  return x;
}

TEST(ModulePrecision, RecordedRangesSmoothInt8Linear) {
  Generator gen(5);
  qkv::nn::Linear lin({.in_features = 64, .out_features = 48}, &gen);
  const Tensor x = with_outlier_feature({20, 64}, gen);
  const Tensor exact = lin.forward(x);
  lin.set_precision(Precision::kInt8);
  const double plain = relative_error(lin.forward(x), exact);
  lin.set_precision(Precision::kFloat32);
  lin.record_input_ranges();
  EXPECT_TRUE(lin.is_recording_input_ranges());
  lin.forward(x.slice(0, 0, 10));
  Tensor out = Tensor::empty({10, 48});
  lin.forward_into(out, x.slice(0, 10, 20).contiguous());  // both entry points note
  lin.record_input_ranges(false);
  lin.forward(qkv::scale(x, 1000.0));  // not recording: changes no note
  lin.set_precision(Precision::kInt8);
  const Tensor smoothed = lin.forward(x);
  EXPECT_LT(relative_error(smoothed, exact), plain / 3) << "without smoothing: " << plain;
  // The notes survive a round trip through float32, and load_state_dict.
  lin.set_precision(Precision::kFloat32);
  lin.set_precision(Precision::kInt8);
  EXPECT_EQ(relative_error(lin.forward(x), smoothed), 0.0);
  // Turning recording on again forgets them: with no forward pass, no smoothing.
  lin.set_precision(Precision::kFloat32);
  lin.record_input_ranges();
  lin.record_input_ranges(false);
  lin.set_precision(Precision::kInt8);
  EXPECT_NEAR(relative_error(lin.forward(x), exact), plain, 1e-12);
}

// A post-norm encoder layer of width 64 (4 heads, FFN 128), in eval mode.
qkv::nn::TransformerEncoderLayer small_encoder_layer(Generator& gen) {
  qkv::nn::TransformerEncoderLayer layer(
      {.d_model = 64, .nhead = 4, .dim_feedforward = 128, .dropout = 0.0, .batch_first = true},
      &gen);
  layer.eval();
  return layer;
}

// The ranges recorded through a layer reach its attention's projections (the
// feed-forward computes in bfloat16 under int8: feed_forward.h). That
// smoothing lowers the error is RecordedRangesSmoothInt8Linear's test; on a
// whole random layer the change is within the int8 noise either way.
TEST(ModulePrecision, RecordedRangesSmoothInt8EncoderLayer) {
  Generator gen(8);
  qkv::nn::TransformerEncoderLayer layer = small_encoder_layer(gen);
  const Tensor x = with_outlier_feature({2, 9, 64}, gen);  // the attention's input
  const Tensor exact = layer.forward(x);
  layer.set_precision(Precision::kInt8);
  const Tensor plain = layer.forward(x);
  layer.set_precision(Precision::kFloat32);
  layer.record_input_ranges();
  layer.forward(x);
  layer.record_input_ranges(false);
  layer.set_precision(Precision::kInt8);
  const Tensor smoothed = layer.forward(x);
  EXPECT_GT(relative_error(smoothed, plain), 1e-4) << "the recorded ranges were not used";
  EXPECT_LT(relative_error(smoothed, exact), 5e-2);
  EXPECT_LT(relative_error(plain, exact), 5e-2);
  // The fused path (no mask) and the general one (a mask) use the same weights.
  Tensor pad = Tensor::zeros({2, 9}, qkv::DType::kBool);
  EXPECT_LT(relative_error(layer.forward(x, {.src_key_padding_mask = pad}), layer.forward(x)),
            1e-5);
}

// int8 leaves FeedForward's linear maps in bfloat16 (feed_forward.h says
// why); every other precision reaches them unchanged.
TEST(ModulePrecision, Int8FeedForwardRunsInBFloat16) {
  Generator gen(2);
  qkv::nn::FeedForward ff({.d_model = 32, .dim_feedforward = 64}, &gen);
  ff.set_precision(Precision::kInt8);
  EXPECT_EQ(ff.precision(), Precision::kInt8);
  EXPECT_EQ(ff.linear1().precision(), Precision::kBFloat16);
  EXPECT_EQ(ff.linear2().precision(), Precision::kBFloat16);
  ff.load_state_dict(ff.state_dict());  // converts again, the same way
  EXPECT_EQ(ff.linear1().precision(), Precision::kBFloat16);
  EXPECT_EQ(ff.linear2().precision(), Precision::kBFloat16);
  const Tensor x = Tensor::randn({3, 32}, gen);
  qkv::nn::FeedForward bf16 = ff.clone();
  bf16.set_precision(Precision::kBFloat16);
  EXPECT_EQ(relative_error(ff.forward(x), bf16.forward(x)), 0.0);
  for (Precision p : {Precision::kBFloat16, Precision::kFloat32}) {
    ff.set_precision(p);
    EXPECT_EQ(ff.linear1().precision(), p);
    EXPECT_EQ(ff.linear2().precision(), p);
  }
}

TEST(ModulePrecision, EncoderLayerBothPathsCloseToFloat32) {
  Generator gen(11);
  qkv::nn::TransformerEncoderLayer layer = small_encoder_layer(gen);
  const Tensor x = Tensor::randn({2, 9, 64}, gen);
  const Tensor exact = layer.forward(x);
  for (Precision p : kLowPrecisions) {
    SCOPED_TRACE(qkv::precision_name(p));
    layer.set_precision(p);
    // Post-norm output has unit scale: errors of a few products per element.
    const Tensor y = layer.forward(x);
    expect_block_error(y, exact, p);
    // with a key padding mask: the general MultiheadAttention path
    Tensor pad = Tensor::zeros({2, 9}, qkv::DType::kBool);
    const Tensor masked = layer.forward(x, {.src_key_padding_mask = pad});
    EXPECT_LT(relative_error(masked, y), 1e-5);
  }
}

TEST(ModulePrecision, DecoderModelFullAndCachedStepsAgree) {
  Generator gen(5);
  qkv::nn::DecoderModel model(
      {.vocab_size = 64, .d_model = 64, .num_layers = 2, .num_heads = 4, .num_kv_heads = 2}, &gen);
  model.eval();
  const std::vector<int64_t> ids = {3, 14, 15, 9, 26, 5, 35};
  const Tensor exact = model.forward(ids);  // [1, 7, 64]
  for (Precision p : kLowPrecisions) {
    SCOPED_TRACE(qkv::precision_name(p));
    model.set_precision(p);
    const Tensor full = model.forward(ids);
    expect_block_error(full, exact, p);
    // A decoding session's steps run the same linear layers; their one-query
    // attention multiplies in float32 (decoding is memory-bound), the full
    // pass in bfloat16: they differ by bfloat16 rounding of q, k, v and P.
    qkv::nn::DecoderSession session(model);
    for (size_t t = 0; t < ids.size(); ++t) {
      const Tensor& logits = session.step({&ids[t], 1});  // [1, vocab]
      EXPECT_LT(relative_error(logits, full.select(1, t)), bound(Precision::kBFloat16))
          << "step " << t;
    }
  }
  model.set_precision(Precision::kFloat32);
  EXPECT_EQ(relative_error(model.forward(ids), exact), 0.0);
}

// all-MiniLM-L6-v2 on real text ------------------------------------------------

std::vector<std::string> read_lines(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

double row_cosine(const Tensor& a, const Tensor& b, int64_t i) {
  const int64_t D = a.size(1);
  const float* x = a.data<float>() + i * D;
  const float* y = b.data<float>() + i * D;
  double xy = 0, xx = 0, yy = 0;
  for (int64_t d = 0; d < D; ++d) {
    xy += double(x[d]) * y[d];
    xx += double(x[d]) * x[d];
    yy += double(y[d]) * y[d];
  }
  return xy / std::sqrt(xx * yy);
}

TEST(LowPrecisionSentenceEncoder, EmbeddingsCloseToFloat32) {
  QKV_SKIP_WITHOUT_MINILM();
  const std::vector<std::string> texts = read_lines(qkv_test::tokenizer_corpus_path());
  ASSERT_GT(texts.size(), 1000u);
  const qkv::models::SentenceEncoder exact(qkv_test::minilm_dir());
  const Tensor reference = exact.encode(texts);
  for (Precision p : kLowPrecisions) {
    SCOPED_TRACE(qkv::precision_name(p));
    const qkv::models::SentenceEncoder encoder(qkv_test::minilm_dir(), p);
    EXPECT_EQ(encoder.precision(), p);
    const Tensor e = encoder.encode(texts);
    double worst = 1.0, mean = 0.0;
    for (int64_t i = 0; i < e.size(0); ++i) {
      const double c = row_cosine(e, reference, i);
      worst = std::min(worst, c);
      mean += c / e.size(0);
    }
    std::printf("%s: cosine to float32 over %zu texts: min %.6f, mean %.6f\n",
                qkv::precision_name(p), texts.size(), worst, mean);
    EXPECT_GE(worst, p == Precision::kBFloat16 ? 0.9995 : 0.995);
    EXPECT_GE(mean, p == Precision::kBFloat16 ? 0.99995 : 0.9995);
    EXPECT_LT(worst, 1.0);  // the low-precision kernels ran
  }
}

// Lines of fortune files, each once, at least 40 characters long.
std::vector<std::string> fortune_lines() {
  std::vector<std::string> lines;
  std::set<std::string> seen;
  for (const char* topic : {"computers", "science", "food", "politics", "love", "education",
                            "literature", "work", "wisdom", "people"}) {
    const fs::path file = fs::path("/usr/share/games/fortunes") / topic;
    if (!fs::exists(file)) continue;
    for (std::string& line : read_lines(file))
      if (line.size() >= 40 && line[0] != '%' && seen.insert(line).second)
        lines.push_back(std::move(line));
  }
  return lines;
}

// Index of the corpus row nearest (largest dot product: rows are normalised) to query row q.
int64_t nearest(const Tensor& queries, int64_t q, const Tensor& corpus) {
  const int64_t D = corpus.size(1);
  int64_t best = 0;
  double best_dot = -2.0;
  for (int64_t c = 0; c < corpus.size(0); ++c) {
    double dot = 0;
    for (int64_t d = 0; d < D; ++d)
      dot += double(queries.data<float>()[q * D + d]) * corpus.data<float>()[c * D + d];
    if (dot > best_dot) best_dot = dot, best = c;
  }
  return best;
}

TEST(LowPrecisionSentenceEncoder, NearestNeighboursAsFloat32) {
  QKV_SKIP_WITHOUT_MINILM();
  const std::vector<std::string> lines = fortune_lines();
  if (lines.size() < 1500) GTEST_SKIP() << "the fortunes package is not installed";
  // Every third line is a query, the others the corpus (1,000 lines).
  std::vector<std::string> corpus, queries;
  for (size_t i = 0; i < lines.size() && corpus.size() < 1000; ++i)
    (i % 3 == 2 ? queries : corpus).push_back(lines[i]);
  const qkv::models::SentenceEncoder exact(qkv_test::minilm_dir());
  const Tensor exact_corpus = exact.encode(corpus), exact_queries = exact.encode(queries);
  for (Precision p : kLowPrecisions) {
    SCOPED_TRACE(qkv::precision_name(p));
    const qkv::models::SentenceEncoder encoder(qkv_test::minilm_dir(), p);
    const Tensor low_corpus = encoder.encode(corpus), low_queries = encoder.encode(queries);
    int64_t same = 0;
    for (int64_t q = 0; q < low_queries.size(0); ++q)
      same += nearest(low_queries, q, low_corpus) == nearest(exact_queries, q, exact_corpus);
    const double agreement = double(same) / low_queries.size(0);
    std::printf("%s: top-1 among %zu lines as float32 for %lld of %zu queries (%.2f%%)\n",
                qkv::precision_name(p), corpus.size(), static_cast<long long>(same), queries.size(),
                100 * agreement);
    EXPECT_GE(agreement, p == Precision::kBFloat16 ? 0.995 : 0.98);
  }
}

}  // namespace
