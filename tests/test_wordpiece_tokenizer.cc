// WordPieceTokenizer: BERT's rules on a small hand-made vocabulary (expected
// pieces worked out by hand from the rules), invalid UTF-8, truncation and
// padding, one hand-made bad file per rule the loaders enforce, and the
// real all-MiniLM-L6-v2 files when scripts/fetch_model.sh has fetched them.
// Parity with Hugging Face tokenizers is python/tests/test_tokenizer_parity.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/text/wordpiece_tokenizer.h"
#include "test_util.h"

namespace fs = std::filesystem;
using qkv::Error;
using qkv::ErrorKind;
using qkv::text::WordPieceOptions;
using qkv::text::WordPieceTokenizer;
using Strings = std::vector<std::string>;

namespace {

// ids = line numbers - 1.
const Strings kVocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un",       "##aff", "##able",
                        "a",     "b",     "ab",    "##b",   "##c",    "hello",    "world", ",",
                        ".",     "!",     "中",    "文",    "cafe",   "ß",        "i",     "[",
                        "]",     "mask",  "##a",   "é",     "##é",    "\xCC\x87", "c",     "play",
                        "##ing", "##s",   "x",     "y",     "z",      "cls"};

fs::path test_data_dir() {
  if (const char* dir = std::getenv("QKV_TEST_DATA")) return dir;
  return fs::path(qkv_test::source_dir()) / "tests" / "data";  // running the executable by hand
}

class WordPieceTest : public qkv_test::TempDirTest {
 protected:
  fs::path write_vocab(const Strings& tokens, const std::string& name = "vocab.txt") {
    std::string text;
    for (const auto& t : tokens) text += t + "\n";
    return write(name, text);
  }
  WordPieceTokenizer tokenizer(WordPieceOptions options = {}) {
    return WordPieceTokenizer::from_vocab(write_vocab(kVocab), std::move(options));
  }
  // A minimal valid tokenizer.json over kVocab, as tokenizers writes it.
  nlohmann::json json_file() const {
    nlohmann::json vocab = nlohmann::json::object();
    for (size_t i = 0; i < kVocab.size(); ++i) vocab[kVocab[i]] = i;
    nlohmann::json added = nlohmann::json::array();
    for (int id : {0, 1, 2, 3, 4})
      added.push_back({{"id", id},
                       {"content", kVocab[id]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
    return {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", added},
            {"normalizer",
             {{"type", "BertNormalizer"},
              {"clean_text", true},
              {"handle_chinese_chars", true},
              {"strip_accents", nullptr},
              {"lowercase", true}}},
            {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
            {"post_processor",
             {{"type", "TemplateProcessing"},
              {"single",
               {{{"SpecialToken", {{"id", "[CLS]"}, {"type_id", 0}}}},
                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                {{"SpecialToken", {{"id", "[SEP]"}, {"type_id", 0}}}}}},
              {"special_tokens",
               {{"[CLS]", {{"id", "[CLS]"}, {"ids", {2}}, {"tokens", {"[CLS]"}}}},
                {"[SEP]", {{"id", "[SEP]"}, {"ids", {3}}, {"tokens", {"[SEP]"}}}}}}}},
            {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
            {"model",
             {{"type", "WordPiece"},
              {"unk_token", "[UNK]"},
              {"continuing_subword_prefix", "##"},
              {"max_input_chars_per_word", 100},
              {"vocab", vocab}}}};
  }

  // Asserts that loading `path` fails with `kind` and a message naming the
  // file and containing `needle`.
  template <class Load>
  void expect_rejected(Load&& load, const fs::path& path, ErrorKind kind,
                       const std::string& needle) {
    qkv_test::expect_error([&] { load(path); }, {path.string(), needle}, kind);
  }
  void expect_json_rejected(const std::string& content, const std::string& needle) {
    SCOPED_TRACE(needle);
    expect_rejected([](const fs::path& p) { WordPieceTokenizer::from_json(p); },
                    write("tokenizer.json", content), ErrorKind::kValue, needle);
  }
  void expect_vocab_rejected(const std::string& content, const std::string& needle) {
    SCOPED_TRACE(needle);
    expect_rejected([](const fs::path& p) { WordPieceTokenizer::from_vocab(p); },
                    write("vocab.txt", content), ErrorKind::kValue, needle);
  }
};

TEST_F(WordPieceTest, GreedyLongestMatchFirst) {
  const auto tok = tokenizer();
  EXPECT_EQ(tok.tokenize("unaffable"), (Strings{"un", "##aff", "##able"}));
  EXPECT_EQ(tok.tokenize("abc"), (Strings{"ab", "##c"}));  // "ab" before "a"
  EXPECT_EQ(tok.tokenize("abbc"), (Strings{"ab", "##b", "##c"}));
  EXPECT_EQ(tok.tokenize("abx b"), (Strings{"[UNK]", "b"}));  // one failing piece: whole word
  EXPECT_EQ(tok.tokenize("playing plays"), (Strings{"play", "##ing", "play", "##s"}));
  EXPECT_EQ(tok.encode("unaffable"), (std::vector<int64_t>{2, 5, 6, 7, 3}));
  EXPECT_EQ(tok.encode(""), (std::vector<int64_t>{2, 3}));
}

TEST_F(WordPieceTest, SplitsOnWhitespaceAndEveryPunctuation) {
  const auto tok = tokenizer();
  EXPECT_EQ(tok.tokenize("Hello, World!"), (Strings{"hello", ",", "world", "!"}));
  EXPECT_EQ(tok.tokenize("hello,,world"), (Strings{"hello", ",", ",", "world"}));
  // Tab, no-break space, ideographic space, line separator are whitespace.
  EXPECT_EQ(tok.tokenize("a\tb\xC2\xA0"
                         "c\xE3\x80\x80x\xE2\x80\xA8y"),
            (Strings{"a", "b", "c", "x", "y"}));
  // Non-ASCII punctuation (U+3002, U+00BF) and ASCII symbols (33-47, 58-64, 91-96, 123-126).
  EXPECT_EQ(tok.basic_tokenize("x\xE3\x80\x82y\xC2\xBFz$a^b|c"),
            (Strings{"x", "\xE3\x80\x82", "y", "\xC2\xBF", "z", "$", "a", "^", "b", "|", "c"}));
  // U+00A7 SECTION SIGN is Po; U+00A9 COPYRIGHT is So (not punctuation).
  EXPECT_EQ(tok.basic_tokenize("a\xC2\xA7"
                               "b\xC2\xA9"
                               "c"),
            (Strings{"a", "\xC2\xA7",
                     "b\xC2\xA9"
                     "c"}));
}

TEST_F(WordPieceTest, NormalizesCaseAccentsCjkAndControls) {
  const auto tok = tokenizer();
  EXPECT_EQ(tok.tokenize("CAFÉ Café cafe\xCC\x81"), (Strings{"cafe", "cafe", "cafe"}));
  EXPECT_EQ(tok.tokenize("中文a中b"), (Strings{"中", "文", "a", "中", "b"}));
  // 'İ' = I + U+0307 under NFD; the mark goes, then lower case.
  EXPECT_EQ(tok.tokenize("\xC4\xB0"), (Strings{"i"}));
  // ß has no single-letter lower/upper change and no decomposition.
  EXPECT_EQ(tok.tokenize("ß"), (Strings{"ß"}));
  // Zero-width space (Cf), BEL (Cc), NUL and U+FFFD vanish; private use (Co) too.
  EXPECT_EQ(tok.tokenize(std::string("a\xE2\x80\x8B"
                                     "b\x07"
                                     "c\0",
                                     8) +
                         "\xEF\xBF\xBD"
                         "\xEE\x80\x80"),
            (Strings{"ab", "##c"}));
  // Without stripping accents, lower-casing 'İ' gives i + U+0307 (full mapping).
  WordPieceOptions keep;
  keep.strip_accents = false;
  EXPECT_EQ(tokenizer(keep).basic_tokenize("\xC4\xB0"), (Strings{"i\xCC\x87"}));
  EXPECT_EQ(tokenizer(keep).tokenize("Éé"), (Strings{"é", "##é"}));
  // Each normalisation step can be switched off.
  WordPieceOptions raw;
  raw.lowercase = raw.strip_accents = raw.split_chinese_chars = raw.clean_text = false;
  EXPECT_EQ(tokenizer(raw).basic_tokenize("Ab\xE2\x80\x8B"
                                          "É中文"),
            (Strings{"Ab\xE2\x80\x8B"
                     "É中文"}));
}

TEST_F(WordPieceTest, MaxInputCharsCountsCodePoints) {
  WordPieceOptions options;
  options.strip_accents = false;
  const auto tok = tokenizer(options);
  std::string e100, a100;
  for (int i = 0; i < 100; ++i) e100 += "é", a100 += "a";
  EXPECT_EQ(tok.tokenize(e100).size(), 100u);  // 200 bytes, 100 characters
  EXPECT_EQ(tok.tokenize(a100).size(), 100u);
  EXPECT_EQ(tok.tokenize(e100 + "é"), (Strings{"[UNK]"}));
  EXPECT_EQ(tok.tokenize(a100 + "a b"), (Strings{"[UNK]", "b"}));
}

TEST_F(WordPieceTest, SpecialTokensInTheTextStayWhole) {
  const auto tok = tokenizer();
  EXPECT_EQ(tok.tokenize("hello[MASK]world [CLS]"), (Strings{"hello", "[MASK]", "world", "[CLS]"}));
  // Matched before normalisation: lower case is ordinary text.
  EXPECT_EQ(tok.tokenize("[mask] [cls"), (Strings{"[", "mask", "]", "[", "cls"}));
  EXPECT_EQ(tok.encode("[MASK]"), (std::vector<int64_t>{2, 4, 3}));
}

TEST_F(WordPieceTest, InvalidUtf8BecomesReplacementCharacters) {
  const auto tok = tokenizer();
  // U+FFFD is removed by clean_text, so a bad byte joins its neighbours.
  EXPECT_EQ(tok.tokenize("ab\xFF"
                         "c"),
            tok.tokenize("abc"));
  EXPECT_EQ(tok.tokenize("cafe\xC3"), (Strings{"cafe"}));  // truncated sequence at the end
  // Without clean_text each maximal ill-formed subsequence is one U+FFFD.
  WordPieceOptions raw;
  raw.clean_text = false;
  const auto keep = tokenizer(raw);
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(keep.basic_tokenize("\xE2\x82"), (Strings{r}));                      // truncated 3-byte
  EXPECT_EQ(keep.basic_tokenize("\xED\xA0\x80"), (Strings{r + r + r}));          // a surrogate
  EXPECT_EQ(keep.basic_tokenize("\xC0\xAF"), (Strings{r + r}));                  // overlong
  EXPECT_EQ(keep.basic_tokenize("\xF4\x90\x80\x80"), (Strings{r + r + r + r}));  // > U+10FFFF
  EXPECT_EQ(keep.basic_tokenize("\xF0\x9F\x98"), (Strings{r}));
  EXPECT_EQ(keep.basic_tokenize("a\x80"
                                "b"),
            (Strings{"a" + r + "b"}));
  EXPECT_EQ(keep.tokenize("ab\xFF"), (Strings{"[UNK]"}));
  // Random bytes never throw and always give [CLS] … [SEP].
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes(rng() % 64, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 256);
    for (const auto* t : {&tok, &keep}) {
      const auto ids = t->encode(bytes);
      ASSERT_GE(ids.size(), 2u);
      EXPECT_EQ(ids.front(), 2);
      EXPECT_EQ(ids.back(), 3);
    }
  }
}

TEST_F(WordPieceTest, TruncatesIncludingSpecialTokens) {
  auto tok = tokenizer();
  const std::string text = "a b x y z c";
  EXPECT_EQ(tok.encode(text).size(), 8u);  // no truncation at 512
  tok.set_max_length(5);
  EXPECT_EQ(tok.encode(text), (std::vector<int64_t>{2, 8, 9, 34, 3}));
  EXPECT_EQ(tok.encode("a"), (std::vector<int64_t>{2, 8, 3}));
  tok.set_max_length(2);
  EXPECT_EQ(tok.encode(text), (std::vector<int64_t>{2, 3}));
  EXPECT_THROW(tok.set_max_length(1), Error);
  WordPieceOptions left;
  left.truncate_left = true;
  left.max_length = 5;
  EXPECT_EQ(tokenizer(left).encode(text), (std::vector<int64_t>{2, 35, 36, 30, 3}));
}

TEST_F(WordPieceTest, PadsBatches) {
  auto tok = tokenizer();
  const auto batch = tok.encode_batch({"hello", "hello world !", ""});
  EXPECT_EQ(batch.batch, 3);
  EXPECT_EQ(batch.length, 5);
  EXPECT_EQ(batch.lengths, (std::vector<int64_t>{3, 5, 2}));
  EXPECT_EQ(batch.ids, (std::vector<int64_t>{2, 13, 3, 0, 0, 2, 13, 14, 17, 3, 2, 3, 0, 0, 0}));
  EXPECT_EQ(batch.attention_mask,
            (std::vector<int64_t>{1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0}));
  tok.set_padding(8);
  EXPECT_EQ(tok.encode_batch({"hello"}).length, 8);
  tok.set_padding(0, 4);
  EXPECT_EQ(tok.encode_batch({"hello world !"}).length, 8);  // 5 rounded up
  WordPieceOptions left;
  left.pad_left = true;
  const auto l = tokenizer(left).encode_batch({"hello", "a b"});
  EXPECT_EQ(l.ids, (std::vector<int64_t>{0, 2, 13, 3, 2, 8, 9, 3}));
  EXPECT_EQ(l.attention_mask, (std::vector<int64_t>{0, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(tok.encode_batch({}).batch, 0);
}

TEST_F(WordPieceTest, FromJsonReadsEveryOption) {
  auto j = json_file();
  j["normalizer"]["lowercase"] = false;
  j["model"]["continuing_subword_prefix"] = "@@";
  j["model"]["max_input_chars_per_word"] = 3;
  j["truncation"] = {
      {"max_length", 4}, {"strategy", "LongestFirst"}, {"stride", 0}, {"direction", "Left"}};
  j["padding"] = {{"strategy", {{"Fixed", 6}}},
                  {"direction", "Right"},
                  {"pad_to_multiple_of", nullptr},
                  {"pad_id", 0},
                  {"pad_type_id", 0},
                  {"pad_token", "[PAD]"}};
  auto vocab = kVocab;
  vocab.push_back("@@c");
  j["model"]["vocab"]["@@c"] = kVocab.size();
  // An added token beyond the model vocabulary gets the next id.
  j["added_tokens"].push_back(
      {{"id", kVocab.size() + 1}, {"content", "<new>"}, {"normalized", false}});
  const auto tok = WordPieceTokenizer::from_json(write("tokenizer.json", j.dump()));
  const auto& o = tok.options();
  EXPECT_FALSE(o.lowercase);
  EXPECT_FALSE(o.strip_accents);  // null follows lowercase
  EXPECT_TRUE(o.clean_text && o.split_chinese_chars);
  EXPECT_EQ(o.continuing_prefix, "@@");
  EXPECT_EQ(o.max_input_chars_per_word, 3);
  EXPECT_EQ(o.max_length, 4);
  EXPECT_TRUE(o.truncate_left);
  EXPECT_EQ(o.pad_to_length, 6);
  EXPECT_EQ(tok.vocab_size(), static_cast<int64_t>(kVocab.size()) + 2);
  EXPECT_EQ(tok.tokenize("abc Hello abcc <new>"),
            (Strings{"ab", "@@c", "[UNK]", "[UNK]", "<new>"}));
  EXPECT_EQ(tok.encode("a b c"), (std::vector<int64_t>{2, 9, 30, 3}));
  EXPECT_EQ(tok.encode_batch({"a"}).length, 6);
  EXPECT_EQ(tok.token_to_id("<new>"), static_cast<int64_t>(kVocab.size()) + 1);
  EXPECT_EQ(tok.id_to_token(13), "hello");
  EXPECT_EQ(tok.token_to_id("absent"), -1);
  EXPECT_THROW(tok.id_to_token(tok.vocab_size()), Error);
}

TEST_F(WordPieceTest, RejectsBadTokenizerJson) {
  const auto missing = dir_ / "absent.json";
  expect_rejected([](const fs::path& p) { WordPieceTokenizer::from_json(p); }, missing,
                  ErrorKind::kIO, "cannot read");
  expect_rejected([](const fs::path& p) { WordPieceTokenizer::from_json(p); }, dir_, ErrorKind::kIO,
                  "cannot read");

  const std::string good = json_file().dump();
  ASSERT_NO_THROW(WordPieceTokenizer::from_json(write("tokenizer.json", good)));
  expect_json_rejected("", "not valid JSON");
  expect_json_rejected("this is not json", "not valid JSON");
  expect_json_rejected(good.substr(0, good.size() / 2), "not valid JSON");  // truncated
  expect_json_rejected("[1, 2]", "top level must be an object");

  const auto edited = [&](auto&& edit) {
    auto j = json_file();
    edit(j);
    return j.dump();
  };
  expect_json_rejected(edited([](auto& j) { j.erase("model"); }), "no \"model\"");
  expect_json_rejected(edited([](auto& j) { j["model"]["type"] = "BPE"; }),
                       "model.type is 'BPE', expected 'WordPiece'");
  expect_json_rejected(edited([](auto& j) { j["model"].erase("vocab"); }),
                       "model.vocab is missing");
  expect_json_rejected(edited([](auto& j) { j["model"]["vocab"] = {"a", "b"}; }),
                       "model.vocab must be an object");
  expect_json_rejected(edited([](auto& j) { j["model"]["vocab"] = nlohmann::json::object(); }),
                       "model.vocab is empty");
  expect_json_rejected(edited([](auto& j) { j["model"]["vocab"]["hello"] = "13"; }),
                       "model.vocab['hello'] must be an integer id");
  expect_json_rejected(edited([](auto& j) { j["model"]["vocab"]["hello"] = 13.5; }),
                       "model.vocab['hello'] must be an integer id");
  expect_json_rejected(edited([](auto& j) { j["model"]["vocab"]["hello"] = 14; }),
                       "id 14 is given to both");
  expect_json_rejected(edited([](auto& j) { j["model"]["vocab"]["hello"] = 1000; }),
                       "model.vocab['hello'] = 1000 is outside [0, 38)");
  expect_json_rejected(edited([](auto& j) { j["model"]["vocab"]["hello"] = -1; }),
                       "is outside [0, 38)");
  expect_json_rejected(edited([](auto& j) { j["model"]["unk_token"] = "<unk>"; }),
                       "the unknown token '<unk>' is not in the vocabulary");
  expect_json_rejected(edited([](auto& j) { j["model"]["max_input_chars_per_word"] = "many"; }),
                       "model.max_input_chars_per_word must be a non-negative integer");
  expect_json_rejected(edited([](auto& j) { j["normalizer"]["type"] = "NFKC"; }),
                       "normalizer.type 'NFKC' is not supported");
  expect_json_rejected(edited([](auto& j) { j["normalizer"]["lowercase"] = 1; }),
                       "normalizer.lowercase must be true or false");
  expect_json_rejected(edited([](auto& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }),
                       "pre_tokenizer.type 'Whitespace' is not supported");
  expect_json_rejected(edited([](auto& j) { j["post_processor"]["type"] = "ByteLevel"; }),
                       "post_processor.type 'ByteLevel' is not supported");
  expect_json_rejected(
      edited([](auto& j) { j["post_processor"]["special_tokens"].erase("[SEP]"); }),
      "post_processor.special_tokens has no entry '[SEP]'");
  expect_json_rejected(
      edited([](auto& j) { j["post_processor"]["special_tokens"]["[SEP]"]["ids"] = {5}; }),
      "special token '[SEP]' is given id 5, which is not its id");
  expect_json_rejected(edited([](auto& j) { j["added_tokens"][4]["id"] = 7; }),
                       "added token '[MASK]' has id 7, which is '##able'");
  expect_json_rejected(
      edited([](auto& j) { j["added_tokens"].push_back({{"id", 40}, {"content", "<x>"}}); }),
      "added token '<x>' has id 40; the next free id is 38");
  expect_json_rejected(edited([](auto& j) { j["truncation"] = {{"max_length", "long"}}; }),
                       "truncation.max_length must be a non-negative integer");
  expect_json_rejected(edited([](auto& j) { j["truncation"] = {{"max_length", 1}}; }),
                       "max_length 1 must be 0 (no truncation) or at least 2");
  expect_json_rejected(
      edited([](auto& j) { j["padding"] = {{"strategy", "Longest"}, {"pad_token", "[PAD]"}}; }),
      "padding.strategy must be");
  expect_json_rejected(edited([](auto& j) {
                         j["padding"] = {{"strategy", "BatchLongest"}, {"pad_token", "<pad>"}};
                       }),
                       "padding.pad_token '<pad>' is not in the vocabulary");
}

TEST_F(WordPieceTest, RejectsBadVocabTxt) {
  expect_rejected([](const fs::path& p) { WordPieceTokenizer::from_vocab(p); }, dir_ / "absent.txt",
                  ErrorKind::kIO, "cannot read");
  expect_vocab_rejected("", "holds no tokens");
  expect_vocab_rejected("[PAD]\n[UNK]\n\n[CLS]\n", "line 3 is empty");
  expect_vocab_rejected("[PAD]\n[UNK]\nab\nab\n", "line 4: token 'ab' already on line 3");
  expect_vocab_rejected("[PAD]\n[CLS]\n[SEP]\n[MASK]\n", "special token '[UNK]' is not in");
  WordPieceOptions options;
  options.special_tokens = {};
  options.unk_token = "<unk>";
  expect_rejected([&](const fs::path& p) { WordPieceTokenizer::from_vocab(p, options); },
                  write_vocab(kVocab), ErrorKind::kValue,
                  "the unknown token '<unk>' is not in the vocabulary");
  // CRLF line ends and trailing spaces are trimmed, as tokenizers does.
  const auto tok = WordPieceTokenizer::from_vocab(
      write("crlf.txt", "[PAD]\r\n[UNK] \r\n[CLS]\r\n[SEP]\r\n[MASK]\r\nhello\r\n"));
  EXPECT_EQ(tok.tokenize("hello"), (Strings{"hello"}));
  EXPECT_EQ(tok.vocab_size(), 6);
}

// The real model files: the two loaders agree on every corpus line, nothing
// throws, and the options come from tokenizer.json.
TEST(WordPieceModel, AllMiniLML6V2) {
  const fs::path dir = qkv_test::minilm_dir();
  if (!fs::exists(dir / "tokenizer.json"))
    GTEST_SKIP() << dir << " is missing: run scripts/fetch_model.sh to fetch all-MiniLM-L6-v2";
  const auto from_json = WordPieceTokenizer::from_json(dir / "tokenizer.json");
  WordPieceOptions options;
  options.max_length = from_json.options().max_length;
  const auto from_vocab = WordPieceTokenizer::from_vocab(dir / "vocab.txt", options);
  EXPECT_EQ(from_json.vocab_size(), 30522);
  EXPECT_EQ(from_json.options().max_length, 128);  // the file's "truncation"
  EXPECT_EQ(from_json.options().pad_to_length, 128);
  EXPECT_EQ(from_json.token_to_id("[CLS]"), 101);

  std::ifstream in(test_data_dir() / "tokenizer_corpus.txt", std::ios::binary);
  ASSERT_TRUE(in) << "tests/data/tokenizer_corpus.txt is missing";
  std::string line;
  int lines = 0;
  std::vector<std::string> all;
  while (std::getline(in, line)) {  // splits on '\n' only
    ASSERT_EQ(from_json.encode(line), from_vocab.encode(line)) << "line " << lines + 1;
    all.push_back(line);
    ++lines;
  }
  EXPECT_GE(lines, 1000);
  const auto batch = from_json.encode_batch(all);
  EXPECT_EQ(batch.length, 128);
  for (int64_t i = 0; i < batch.batch; ++i) EXPECT_LE(batch.lengths[i], 128);
}

}  // namespace
