// Text classification on fortune files (tools/tasks/fortunes_*.h): the reader on
// hand-made files, the split, words and batches checked against their
// definitions, and both classifiers must learn a small synthetic corpus
// whose classes are decided by words.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "parameter_gradients.h"
#include "qkv/error.h"
#include "qkv/generator.h"
#include "qkv/runtime.h"
#include "tasks/fortunes_classifier.h"
#include "tasks/fortunes_data.h"
#include "tasks/fortunes_training.h"

namespace {

namespace fs = std::filesystem;
using qkv::Generator;
using qkv::Tensor;
using namespace qkv::train;

using Strings = std::vector<std::string>;

class FortuneFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "qkv_fortunes_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void write(const std::string& name, const std::string& bytes) {
    std::ofstream out(dir_ / name, std::ios::binary);
    out << bytes;
  }
  fs::path dir_;
};

// --- Reading ----------------------------------------------------------------------

TEST(ParseFortunes, SeparatorsTrimmingAndEmptyEntries) {
  // A leading separator, an empty entry, blank lines, a "%" inside a line, CRLF
  // separators, and a last entry without "%" or final newline.
  const std::string text =
      "%\n  First one\n  -- Someone\n%\n%\n\n   \n%\n100% sure\n%\r\nfourth\r\n%\r\n\nlast "
      "words";
  const FortuneFile file = parse_fortunes(text);
  EXPECT_EQ(file.entries,
            (Strings{"First one\n  -- Someone", "100% sure", "fourth", "last words"}));
  EXPECT_EQ(file.latin1_bytes, 0);
  EXPECT_EQ(parse_fortunes("only\n%\n").entries, Strings{"only"});
  EXPECT_EQ(parse_fortunes("a\n%%\nb").entries, Strings{"a\n%%\nb"}) << "'%%' is not a separator";
  EXPECT_EQ(parse_fortunes(" % \nx").entries, Strings{"% \nx"})
      << "' % ' is not a separator either";
  EXPECT_TRUE(parse_fortunes("").entries.empty());
  EXPECT_TRUE(parse_fortunes("%\n%\n \n%").entries.empty());
}

TEST(ParseFortunes, InvalidUtf8IsReadAsLatin1) {
  // "café" in Latin-1 (0xE9), a valid UTF-8 "é", a lone continuation byte, a
  // truncated 3-byte sequence at the end, an overlong "/" (0xC0 0xAF).
  const std::string text = "caf\xE9 ol\xC3\xA9 \x80 \xC0\xAF z\xE2\x82";
  const FortuneFile file = parse_fortunes(text);
  ASSERT_EQ(file.entries.size(), 1u);
  EXPECT_EQ(file.entries[0], "caf\xC3\xA9 ol\xC3\xA9 \xC2\x80 \xC3\x80\xC2\xAF z\xC3\xA2\xC2\x82");
  EXPECT_EQ(file.latin1_bytes, 6);
}

TEST_F(FortuneFiles, ReadErrorsNameThePath) {
  const fs::path missing = dir_ / "nothing-here";
  try {
    read_fortune_file(missing);
    FAIL() << "no error for a missing file";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing.string()), std::string::npos) << e.what();
  }
  write("empty", "%\n\n%\n");
  try {
    read_fortune_file(dir_ / "empty");
    FAIL() << "no error for a file without entries";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "empty").string()), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("no entry"), std::string::npos) << e.what();
  }
  fs::create_directory(dir_ / "adir");
  EXPECT_THROW(read_fortune_file(dir_ / "adir"), qkv::Error);
}

TEST_F(FortuneFiles, LoadLabelsByTopicAndListsTopicsOnError) {
  write("cats", "meow\n%\npurr\n%\n");
  write("dogs", "woof\n%\nbark\n%\ngrowl");
  write("dogs.dat", "binary index");
  fs::create_symlink(dir_ / "dogs", dir_ / "dogs.u8");
  EXPECT_EQ(list_fortune_topics(dir_), (Strings{"cats", "dogs"}));
  const FortunesCorpus corpus = load_fortunes(dir_, {"dogs", "cats"});
  EXPECT_EQ(corpus.topics, (Strings{"dogs", "cats"}));
  EXPECT_EQ(corpus.texts, (Strings{"woof", "bark", "growl", "meow", "purr"}));
  EXPECT_EQ(corpus.labels, (std::vector<int64_t>{0, 0, 0, 1, 1}));
  try {
    load_fortunes(dir_, {"cats", "birds"});
    FAIL() << "no error for an unknown topic";
  } catch (const qkv::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("unknown topic 'birds'"), std::string::npos) << message;
    EXPECT_NE(message.find((dir_ / "birds").string()), std::string::npos) << message;
    EXPECT_NE(message.find("cats, dogs"), std::string::npos) << message;
  }
  EXPECT_THROW(load_fortunes(dir_, {"cats"}), qkv::Error);
  EXPECT_THROW(load_fortunes(dir_, {"cats", "cats"}), qkv::Error);
  EXPECT_THROW(load_fortunes(dir_, {"cats", "../cats"}), qkv::Error);
}

// --- Split ------------------------------------------------------------------------

TEST(StratifiedSplit, DisjointCompleteStratifiedAndSeeded) {
  // Classes of 100, 37, 10, 2 and 1 examples, interleaved.
  std::vector<int64_t> labels;
  const std::vector<int64_t> sizes = {100, 37, 10, 2, 1};
  for (int64_t round = 0; round < 100; ++round)
    for (int64_t c = 0; c < 5; ++c)
      if (round < sizes[c]) labels.push_back(c);
  const DataSplit split = stratified_split(labels, 5, 0.2, 7);
  std::set<int64_t> all(split.train.begin(), split.train.end());
  for (int64_t i : split.held_out) EXPECT_TRUE(all.insert(i).second) << i << " is in both";
  EXPECT_EQ(all.size(), labels.size());
  EXPECT_TRUE(std::is_sorted(split.train.begin(), split.train.end()));
  EXPECT_TRUE(std::is_sorted(split.held_out.begin(), split.held_out.end()));
  std::vector<int64_t> held(5, 0);
  for (int64_t i : split.held_out) ++held[labels[i]];
  // round(0.2 n), at least one, never all.
  EXPECT_EQ(held, (std::vector<int64_t>{20, 7, 2, 1, 0}));

  EXPECT_EQ(stratified_split(labels, 5, 0.2, 7).held_out, split.held_out);
  EXPECT_NE(stratified_split(labels, 5, 0.2, 8).held_out, split.held_out);
  EXPECT_THROW(stratified_split(labels, 4, 0.2, 7), qkv::Error);
  EXPECT_THROW(stratified_split(labels, 5, 1.0, 7), qkv::Error);
}

TEST(StratifiedSplit, EveryMemberIsHeldOutAboutEquallyOften) {
  // Over many seeds each example of a class of 10 is held out ~20% of the time.
  const std::vector<int64_t> labels(10, 0);
  std::vector<int> counts(10, 0);
  for (uint64_t seed = 0; seed < 2000; ++seed)
    for (int64_t i : stratified_split(labels, 1, 0.2, seed).held_out) ++counts[i];
  for (int c : counts) EXPECT_NEAR(c / 2000.0, 0.2, 0.04);  // sigma 0.009
}

// --- Words ------------------------------------------------------------------------

TEST(TokenizeWords, LowerCasedWordsAndPunctuation) {
  EXPECT_EQ(tokenize_words("Don't PANIC -- it's 42!"),
            (Strings{"don't", "panic", "-", "-", "it's", "42", "!"}));
  EXPECT_EQ(tokenize_words("'Tis rock 'n' roll, ok'"),
            (Strings{"'", "tis", "rock", "'", "n", "'", "roll", ",", "ok", "'"}));
  // U+2019 joins like "'"; non-ASCII letters are lower-cased; "_\b" underlining is dropped.
  EXPECT_EQ(tokenize_words("It\xE2\x80\x99s \xC3\x89T\xC3\x89 _\b_\bno\tend\n"),
            (Strings{"it's", "\xC3\xA9t\xC3\xA9", "_", "_", "no", "end"}));
  // A combining accent stays in its word; Latin-1 bytes are read as letters.
  EXPECT_EQ(tokenize_words("Cafe\xCC\x81 caf\xE9"), (Strings{"cafe\xCC\x81", "caf\xC3\xA9"}));
  EXPECT_TRUE(tokenize_words(" \n\t").empty());
}

TEST(WordVocabulary, CountsOrderAndUnknowns) {
  const std::vector<Strings> docs = {
      {"b", "a", "c", "a"}, {"a", "b", "d", "[UNK]"}, {"e", "c", "b", "a"}};
  const WordVocabulary vocab = WordVocabulary::build(docs, 2);
  // a: 4, b: 3, c: 2; d and e once; "[UNK]" never a word of its own.
  ASSERT_EQ(vocab.size(), 5);
  EXPECT_EQ(vocab.word(0), "[PAD]");
  EXPECT_EQ(vocab.word(1), "[UNK]");
  EXPECT_EQ(vocab.word(2), "a");
  EXPECT_EQ(vocab.word(3), "b");
  EXPECT_EQ(vocab.word(4), "c");
  EXPECT_EQ(vocab.encode(Strings{"c", "zzz", "a", "[PAD]", "d"}),
            (std::vector<int64_t>{4, 1, 2, 1, 1}));
  EXPECT_EQ(WordVocabulary::build(docs, 1).size(), 7);
  EXPECT_EQ(WordVocabulary::build(docs, 1, 4).size(), 4);
  EXPECT_THROW(vocab.word(5), qkv::Error);
  EXPECT_THROW(WordVocabulary::build(docs, 0), qkv::Error);
}

TEST(TextBatch, PaddingTruncationAndMask) {
  const std::vector<std::vector<int64_t>> seqs = {{5, 6, 7}, {8}, {}, {2, 3, 4, 5, 6, 7}};
  const std::vector<int64_t> labels = {0, 1, 2, 0};
  const TextBatch batch = make_text_batch(seqs, labels, std::vector<int64_t>{3, 1, 2, 0}, 4);
  ASSERT_EQ(batch.batch, 4);
  ASSERT_EQ(batch.length, 4);
  EXPECT_EQ(batch.tokens, (std::vector<int64_t>{2, 3, 4, 5,  // truncated to 4
                                                8, 0, 0, 0,  // padded
                                                1, 0, 0, 0,  // empty: one [UNK]
                                                5, 6, 7, 0}));
  EXPECT_EQ(batch.lengths, (std::vector<int64_t>{4, 1, 1, 3}));
  EXPECT_EQ(batch.labels, (std::vector<int64_t>{0, 1, 2, 0}));
  const Tensor mask = batch.key_padding_mask();
  ASSERT_EQ(mask.shape(), qkv::Shape({4, 4}));
  ASSERT_EQ(mask.dtype(), qkv::DType::kBool);
  for (int64_t b = 0; b < 4; ++b)
    for (int64_t t = 0; t < 4; ++t)
      EXPECT_EQ(mask.at({b, t}) != 0, batch.tokens[b * 4 + t] == WordVocabulary::kPad)
          << b << ", " << t;
  // The longest row decides L.
  EXPECT_EQ(make_text_batch(seqs, labels, std::vector<int64_t>{1, 2}, 4).length, 1);
  EXPECT_THROW(make_text_batch(seqs, labels, std::vector<int64_t>{4}, 4), qkv::Error);
}

TEST_F(FortuneFiles, PrepareBuildsTheVocabularyOnTrainingTextOnly) {
  // Ten entries per topic; each entry also holds a word of its own ("uN"),
  // seen twice within it, so any held-out entry's word is a vocabulary word
  // only if held-out text leaked into the vocabulary.
  std::string a, b;
  for (int i = 0; i < 10; ++i) {
    a += "alpha u" + std::to_string(i) + " u" + std::to_string(i) + "\n%\n";
    b += "beta v" + std::to_string(i) + " v" + std::to_string(i) + "\n%\n";
  }
  write("a", a);
  write("b", b);
  const FortunesCorpus corpus = load_fortunes(dir_, {"a", "b"});
  const FortunesData data = prepare_fortunes(corpus, {.held_out_fraction = 0.3, .seed = 3});
  ASSERT_EQ(data.train.tokens.size(), 14u);
  ASSERT_EQ(data.held_out.tokens.size(), 6u);
  EXPECT_EQ(data.vocab.size(), 2 + 2 + 14);  // specials, alpha and beta, one word per entry
  for (size_t i = 0; i < data.held_out.tokens.size(); ++i) {
    const std::vector<int64_t>& ids = data.held_out.tokens[i];
    ASSERT_EQ(ids.size(), 3u);
    EXPECT_EQ(data.vocab.word(ids[0]), data.held_out.labels[i] == 0 ? "alpha" : "beta");
    EXPECT_EQ(ids[1], WordVocabulary::kUnk);
    EXPECT_EQ(corpus.labels[data.held_out.corpus_index[i]], data.held_out.labels[i]);
  }
  for (size_t i = 0; i < data.train.tokens.size(); ++i)
    EXPECT_NE(data.train.tokens[i][1], WordVocabulary::kUnk);
}

// --- Models -----------------------------------------------------------------------

// A synthetic corpus where words decide the class: every text has 4..11
// filler words shared by all classes and one or two keywords of its class.
// Ids: 0 [PAD], 1 [UNK], 2..21 fillers, 22.. keywords (3 per class).
EncodedExamples keyword_corpus(int64_t count, int64_t classes, uint64_t seed) {
  Generator gen(seed);
  const auto draw = [&](int64_t n) { return static_cast<int64_t>(gen.next_u64() % n); };
  EncodedExamples out;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t label = draw(classes);
    std::vector<int64_t> ids;
    const int64_t fillers = 4 + draw(8);
    for (int64_t f = 0; f < fillers; ++f) ids.push_back(2 + draw(20));
    for (int64_t k = 0, n = 1 + draw(2); k < n; ++k)
      ids.insert(ids.begin() + draw(static_cast<int64_t>(ids.size()) + 1),
                 22 + 3 * label + draw(3));
    out.tokens.push_back(ids);
    out.labels.push_back(label);
    out.corpus_index.push_back(i);
  }
  return out;
}

// The encoders these tests build: 2 heads and an FFN twice as wide as the model.
EncoderClassifierOptions small_encoder(int64_t vocab_size, int64_t num_classes, int64_t max_length,
                                       int64_t d_model, uint64_t seed) {
  return {.vocab_size = vocab_size,
          .num_classes = num_classes,
          .max_length = max_length,
          .d_model = d_model,
          .nhead = 2,
          .dim_feedforward = 2 * d_model,
          .seed = seed};
}

// ... without dropout and with N(0, 1) embeddings, for the tests that need
// the encoder to learn or to compute the same thing twice.
EncoderClassifierOptions small_deterministic_encoder(int64_t vocab_size, int64_t num_classes,
                                                     int64_t max_length, int64_t d_model,
                                                     uint64_t seed) {
  EncoderClassifierOptions o = small_encoder(vocab_size, num_classes, max_length, d_model, seed);
  o.dropout = 0.0;
  o.embedding_std = 1.0;
  return o;
}

// Accuracy computed here from the logits, not by train::evaluate.
template <class Model>
double fraction_right(Model& model, const EncodedExamples& examples, int64_t max_length) {
  model.eval();
  int64_t right = 0;
  for (size_t i = 0; i < examples.tokens.size(); ++i) {
    const std::vector<int64_t> one = {static_cast<int64_t>(i)};
    const Tensor logits =
        model.forward(make_text_batch(examples.tokens, examples.labels, one, max_length));
    int64_t best = 0;
    for (int64_t c = 1; c < logits.size(1); ++c)
      if (logits.at({0, c}) > logits.at({0, best})) best = c;
    right += best == examples.labels[i];
  }
  return static_cast<double>(right) / static_cast<double>(examples.tokens.size());
}

TEST(FortunesModels, BothLearnClassesDecidedByWords) {
  qkv::set_num_threads(1);
  const EncodedExamples train = keyword_corpus(300, 3, 1);
  const EncodedExamples test = keyword_corpus(150, 3, 2);
  const ClassifierTrainOptions options{.epochs = 15,
                                       .batch_size = 16,
                                       .lr = 1e-2,
                                       .warmup_steps = 10,
                                       .word_dropout = 0.0,
                                       .seed = 3};

  BagOfWordsClassifier bow({.vocab_size = 31, .num_classes = 3, .seed = 4});
  bow.fit_idf(train.tokens);
  EXPECT_LT(fraction_right(bow, test, 1000), 0.6) << "untrained";
  train_classifier(bow, train, nullptr,
                   {.epochs = 30,
                    .batch_size = 16,
                    .lr = 0.1,
                    .warmup_steps = 0,
                    .word_dropout = 0.0,
                    .seed = 3});
  EXPECT_GE(fraction_right(bow, test, 1000), 0.95);
  // Its largest weights are the class's keywords.
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t id : bow.top_words(c, 3)) {
      EXPECT_GE(id, 22 + 3 * c) << "class " << c;
      EXPECT_LT(id, 25 + 3 * c) << "class " << c;
    }

  EncoderClassifierOptions encoder_options = small_encoder(31, 3, 16, 16, 4);
  encoder_options.pooling = Pooling::kAttention;
  EncoderClassifier encoder(encoder_options);
  EXPECT_LT(fraction_right(encoder, test, 16), 0.6) << "untrained";
  int64_t reports = 0, evaluations = 0;
  const ClassifierTrainResult r =
      train_classifier(encoder, train, &test, options, [&](const ClassifierProgress& p) {
        ++reports;
        EXPECT_EQ(p.step, reports);
        EXPECT_TRUE(std::isfinite(p.loss));
        if (p.held_out) ++evaluations;
      });
  EXPECT_EQ(r.steps, 15 * 19);  // ceil(300 / 16) steps per epoch
  EXPECT_EQ(reports, r.steps);
  EXPECT_EQ(evaluations, 15);
  EXPECT_LT(r.final_loss, 0.2);
  const double right = fraction_right(encoder, test, 16);
  EXPECT_GE(right, 0.95);
  ASSERT_TRUE(r.held_out_accuracy.has_value());
  EXPECT_NEAR(*r.held_out_accuracy, right, 1e-12);

  // The evaluation's counts against the predictions made here.
  const ClassifierEvaluation e = evaluate(encoder, test, 3);
  int64_t total = 0, diagonal = 0;
  for (int64_t t = 0; t < 3; ++t) {
    int64_t row = 0;
    for (int64_t p = 0; p < 3; ++p) row += e.confusion[t][p];
    EXPECT_EQ(row, e.class_examples[t]);
    EXPECT_NEAR(e.class_accuracy[t], static_cast<double>(e.confusion[t][t]) / row, 1e-12);
    total += row;
    diagonal += e.confusion[t][t];
  }
  EXPECT_EQ(total, 150);
  EXPECT_NEAR(e.accuracy, static_cast<double>(diagonal) / 150, 1e-12);
  EXPECT_NEAR(e.accuracy, right, 1e-12);
}

// Classes decided by word order alone: both texts of a pair hold the same
// words, "X ... Y" is class 0, "Y ... X" class 1. A bag of words cannot tell
// them apart; the encoder, with positions and attention, can.
TEST(FortunesModels, OnlyTheEncoderSeesWordOrder) {
  qkv::set_num_threads(1);
  const auto corpus = [](int64_t count, uint64_t seed) {
    Generator gen(seed);
    EncodedExamples out;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t label = static_cast<int64_t>(gen.next_u64() % 2);
      std::vector<int64_t> ids;
      for (int64_t f = 0; f < 6; ++f) ids.push_back(4 + static_cast<int64_t>(gen.next_u64() % 8));
      const int64_t a = static_cast<int64_t>(gen.next_u64() % 7);
      const int64_t b = a + 1 + static_cast<int64_t>(gen.next_u64() % (7 - a));
      ids.insert(ids.begin() + a, label == 0 ? 2 : 3);
      ids.insert(ids.begin() + b, label == 0 ? 3 : 2);
      out.tokens.push_back(ids);
      out.labels.push_back(label);
      out.corpus_index.push_back(i);
    }
    return out;
  };
  const EncodedExamples train = corpus(400, 5), test = corpus(200, 6);
  BagOfWordsClassifier bow({.vocab_size = 12, .num_classes = 2});
  bow.fit_idf(train.tokens);
  train_classifier(bow, train, nullptr, {.epochs = 20, .lr = 0.05, .word_dropout = 0.0});
  EXPECT_LT(fraction_right(bow, test, 100), 0.65);  // chance, 200 texts: sigma 0.035

  EncoderClassifier encoder(small_deterministic_encoder(12, 2, 8, 16, 7));
  train_classifier(encoder, train, nullptr,
                   {.epochs = 40, .batch_size = 16, .lr = 5e-3, .word_dropout = 0.0, .seed = 8});
  EXPECT_GE(fraction_right(encoder, test, 8), 0.9);
}

// The encoder's backward against central differences of its loss (float32
// forwards, large steps: 2e-2 relative), with both poolings and padding.
void check_encoder_gradients(Pooling pooling) {
  EncoderClassifierOptions options = small_deterministic_encoder(9, 3, 6, 8, 5);
  options.pooling = pooling;
  EncoderClassifier model(options);
  const std::vector<std::vector<int64_t>> seqs = {{2, 3, 4, 5, 6}, {7, 8}, {3, 3, 1}};
  const std::vector<int64_t> labels = {0, 2, 1};
  const TextBatch batch = make_text_batch(seqs, labels, std::vector<int64_t>{0, 1, 2}, 6);
  const auto [logits, checked] =
      qkv::testing::expect_classifier_gradients_match_finite_differences<EncoderClassifierRecord>(
          model, batch);
  EXPECT_GT(checked, 20);
  // Padding changes nothing: row 1 alone gives the logits it has in the batch.
  const Tensor alone = model.forward(make_text_batch(seqs, labels, std::vector<int64_t>{1}, 6));
  for (int64_t c = 0; c < 3; ++c) EXPECT_NEAR(alone.at({0, c}), logits.at({1, c}), 1e-5);
}

TEST(FortunesModels, EncoderGradientsMatchFiniteDifferencesMeanPooling) {
  check_encoder_gradients(Pooling::kMean);
}

TEST(FortunesModels, EncoderGradientsMatchFiniteDifferencesAttentionPooling) {
  check_encoder_gradients(Pooling::kAttention);
}

TEST(FortunesModels, PoolingWeightsAreDistributionsOverRealWords) {
  EncoderClassifier model({.vocab_size = 9,
                           .num_classes = 2,
                           .max_length = 6,
                           .d_model = 8,
                           .nhead = 2,
                           .pooling = Pooling::kAttention});
  const std::vector<std::vector<int64_t>> seqs = {{2, 3, 4, 5}, {7}};
  const std::vector<int64_t> labels = {0, 1};
  const auto weights =
      model.pooling_weights(make_text_batch(seqs, labels, std::vector<int64_t>{0, 1}, 6));
  ASSERT_EQ(weights.size(), 2u);
  EXPECT_EQ(weights[0].size(), 4u);
  EXPECT_EQ(weights[1].size(), 1u);
  for (const auto& row : weights) {
    double sum = 0;
    for (float w : row) {
      EXPECT_GT(w, 0.0f);
      sum += w;
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
  EXPECT_THROW(
      model.forward(make_text_batch(std::vector<std::vector<int64_t>>{{2, 3, 4, 5, 6, 7, 8}},
                                    std::vector<int64_t>{0}, std::vector<int64_t>{0}, 7)),
      qkv::Error)
      << "longer than max_length";
}

// tf-idf rows against the definition, computed here in float64.
TEST(FortunesModels, BagOfWordsFeaturesFollowTheDefinition) {
  BagOfWordsClassifier bow({.vocab_size = 6, .num_classes = 2});
  const std::vector<std::vector<int64_t>> docs = {{2, 2, 3}, {3, 4}, {1, 5, 5, 5}};
  bow.fit_idf(docs);
  const std::vector<int64_t> labels = {0, 1, 0};
  const TextBatch batch = make_text_batch(docs, labels, std::vector<int64_t>{0, 1, 2}, 100);
  const Tensor f = bow.features(batch);
  ASSERT_EQ(f.shape(), qkv::Shape({3, 6}));
  const std::vector<double> df = {0, 1, 1, 2, 1, 1};
  for (int64_t r = 0; r < 3; ++r) {
    std::vector<double> want(6, 0.0);
    std::map<int64_t, int> counts;
    for (int64_t id : docs[r]) ++counts[id];
    double norm = 0;
    for (auto [id, n] : counts) {
      want[id] = (1 + std::log(n)) * (1 + std::log(4.0 / (1 + df[id])));
      norm += want[id] * want[id];
    }
    for (int64_t v = 0; v < 6; ++v)
      EXPECT_NEAR(f.at({r, v}), want[v] / std::sqrt(norm), 1e-6) << r << ", " << v;
  }
}

TEST(FortunesTraining, SameSeedSameModel) {
  qkv::set_num_threads(1);
  const EncodedExamples train = keyword_corpus(60, 2, 9);
  const auto run = [&](uint64_t seed) {
    EncoderClassifier m(small_encoder(31, 2, 16, 8, 1));
    return train_classifier(m, train, nullptr, {.epochs = 2, .batch_size = 8, .seed = seed})
        .final_loss;
  };
  EXPECT_EQ(run(1), run(1));
  EXPECT_NE(run(1), run(2));
  EncoderClassifier m({.vocab_size = 31, .num_classes = 2});
  EXPECT_THROW(train_classifier(m, train, nullptr, {.epochs = 0}), qkv::Error);
  EXPECT_THROW(train_classifier(m, train, nullptr, {.word_dropout = 1.0}), qkv::Error);
  EXPECT_THROW(EncoderClassifier({.vocab_size = 31, .num_classes = 1}), qkv::Error);
}

TEST(FortunesTraining, LinearProbeLearnsSeparableVectors) {
  // Class c's vectors scatter around a corner of the cube, with noise.
  Generator gen(4);
  const auto make = [&](int64_t n) {
    EmbeddedExamples out;
    std::vector<float> values;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = static_cast<int64_t>(gen.next_u64() % 3);
      for (int64_t j = 0; j < 6; ++j)
        values.push_back(static_cast<float>((j % 3 == c ? 1.0 : 0.0) + 0.3 * gen.normal()));
      out.labels.push_back(c);
    }
    out.vectors = Tensor::from_vector({n, 6}, values);
    return out;
  };
  const EmbeddedExamples train = make(200), test = make(100);
  LinearProbe probe({.in_features = 6, .num_classes = 3, .seed = 1});
  EXPECT_LT(evaluate(probe, test, 3).accuracy, 0.7) << "untrained";
  const ClassifierTrainResult r = train_classifier(
      probe, train, &test, {.epochs = 20, .batch_size = 16, .lr = 0.05, .seed = 2});
  EXPECT_EQ(r.steps, 20 * 13);
  const ClassifierEvaluation e = evaluate(probe, test, 3);
  EXPECT_GE(e.accuracy, 0.95);
  ASSERT_TRUE(r.held_out_accuracy.has_value());
  EXPECT_EQ(*r.held_out_accuracy, e.accuracy);
  EXPECT_THROW(
      train_classifier(probe, {.vectors = Tensor::zeros({3, 5}), .labels = {0, 1, 2}}, nullptr, {}),
      qkv::Error);
}

TEST(FortunesTraining, ScorePredictionsCountsRowsAsTrueClasses) {
  const std::vector<int64_t> labels = {0, 0, 0, 1, 1, 2};
  const std::vector<int64_t> predicted = {0, 1, 0, 1, 2, 0};
  const ClassifierEvaluation e = score_predictions(predicted, labels, 4);
  EXPECT_EQ(e.confusion, (std::vector<std::vector<int64_t>>{
                             {2, 1, 0, 0}, {0, 1, 1, 0}, {1, 0, 0, 0}, {0, 0, 0, 0}}));
  EXPECT_EQ(e.class_examples, (std::vector<int64_t>{3, 2, 1, 0}));
  EXPECT_NEAR(e.class_accuracy[0], 2.0 / 3, 1e-12);
  EXPECT_NEAR(e.class_accuracy[1], 0.5, 1e-12);
  EXPECT_EQ(e.class_accuracy[2], 0.0);
  EXPECT_EQ(e.class_accuracy[3], 0.0);
  EXPECT_NEAR(e.accuracy, 0.5, 1e-12);
  EXPECT_THROW(score_predictions(predicted, labels, 2), qkv::Error);
}

}  // namespace
