// text::BpeTokenizer on small hand-made vocabularies: byte table, merge
// order, pre-tokenizer pieces, special tokens, decoding (streamed too), and
// hostile vocabularies. Parity with Hugging Face on SmolLM2's vocabulary is
// python/tests/test_bpe_parity.py.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/text/bpe_tokenizer.h"

namespace {

using qkv::text::BpeStreamDecoder;
using qkv::text::BpeTokenizer;
using qkv::text::BpeTokenType;
using qkv::text::BpeVocabulary;

// Three control tokens, the 256 byte tokens, then one token per merge.
BpeVocabulary make_vocabulary(const std::vector<std::string>& merges,
                              const std::string& pre_tokenizer = "gpt2") {
  BpeVocabulary v;
  v.tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  v.token_types = {3, 3, 3};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(BpeTokenizer::bytes_to_unicode(std::string(1, static_cast<char>(b))));
    v.token_types.push_back(1);
  }
  for (const std::string& merge : merges) {
    const size_t space = merge.find(' ');
    v.tokens.push_back(merge.substr(0, space) + merge.substr(space + 1));
    v.token_types.push_back(1);
    v.merges.push_back(merge);
  }
  v.pre_tokenizer = pre_tokenizer;
  v.bos = 1;
  v.eos = 2;
  return v;
}

std::vector<std::string> tokens_of(const BpeTokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(tok.token(id));
  return out;
}

using Strings = std::vector<std::string>;

TEST(BpeTokenizer, ByteTableIsGpt2s) {
  // Printable bytes stand for themselves; the 68 others for U+0100 onwards.
  EXPECT_EQ(BpeTokenizer::bytes_to_unicode("a~!"), "a~!");
  EXPECT_EQ(BpeTokenizer::bytes_to_unicode(" "), "\u0120");   // Ġ: 33rd non-printable
  EXPECT_EQ(BpeTokenizer::bytes_to_unicode("\n"), "\u010A");  // Ċ
  EXPECT_EQ(BpeTokenizer::bytes_to_unicode(std::string(1, '\0')), "\u0100");
  EXPECT_EQ(BpeTokenizer::bytes_to_unicode("\x7F"), "\u0121");  // after the 33 below '!'
  EXPECT_EQ(BpeTokenizer::bytes_to_unicode("\xAD"), "\u0143");  // the last of the 68
  EXPECT_EQ(BpeTokenizer::bytes_to_unicode("\xC3\xA9"), "\xC3\x83\xC2\xA9");  // é -> Ã©
  // A bijection: every byte has its own token in make_vocabulary.
  EXPECT_NO_THROW(BpeTokenizer{make_vocabulary({})});
}

TEST(BpeTokenizer, MergesApplyByRank) {
  const BpeTokenizer ab_first(make_vocabulary({"a b", "b c"}));
  EXPECT_EQ(tokens_of(ab_first, ab_first.encode("abc")), (Strings{"ab", "c"}));
  const BpeTokenizer bc_first(make_vocabulary({"b c", "a b"}));
  EXPECT_EQ(tokens_of(bc_first, bc_first.encode("abc")), (Strings{"a", "bc"}));
  // Equal ranks: leftmost first, and a merged symbol merges again.
  const BpeTokenizer aa(make_vocabulary({"a a", "aa aa"}));
  EXPECT_EQ(tokens_of(aa, aa.encode("aaa")), (Strings{"aa", "a"}));
  EXPECT_EQ(tokens_of(aa, aa.encode("aaaaa")), (Strings{"aaaa", "a"}));
  // A later merge of a pair built earlier.
  const BpeTokenizer hello(make_vocabulary({"l l", "h e", "he ll", "hell o", "Ġ w", "o r"}));
  EXPECT_EQ(tokens_of(hello, hello.encode("hello world")),
            (Strings{"hello", "Ġw", "or", "l", "d"}));
}

TEST(BpeTokenizer, MergesStayInsidePieces) {
  // "o Ġ" would join "hello" and " world"; the pre-tokenizer keeps them apart.
  const BpeTokenizer tok(make_vocabulary({"o Ġ", "l o"}));
  EXPECT_EQ(tokens_of(tok, tok.encode("lo w")), (Strings{"lo", "Ġ", "w"}));
}

TEST(BpeTokenizer, Gpt2Pieces) {
  const BpeTokenizer tok(make_vocabulary({}));
  EXPECT_EQ(tok.pre_tokenize("Hello world"), (Strings{"Hello", " world"}));
  EXPECT_EQ(tok.pre_tokenize("it's we're I'M"),
            (Strings{"it", "'s", " we", "'re", " I", "'", "M"}));
  EXPECT_EQ(tok.pre_tokenize("x  y"), (Strings{"x", " ", " y"}));
  EXPECT_EQ(tok.pre_tokenize("x\n\ny "), (Strings{"x", "\n", "\n", "y", " "}));
  EXPECT_EQ(tok.pre_tokenize("a\tb"), (Strings{"a", "\t", "b"}));
  EXPECT_EQ(tok.pre_tokenize("abc123 456!? ..."), (Strings{"abc", "123", " 456", "!?", " ..."}));
  EXPECT_EQ(tok.pre_tokenize("héllo 世界 Ωμέγα"), (Strings{"héllo", " 世界", " Ωμέγα"}));
  EXPECT_EQ(tok.pre_tokenize("x  1"), (Strings{"x", " ", " 1"}));
  EXPECT_EQ(tok.pre_tokenize(""), Strings{});
  EXPECT_EQ(tok.pre_tokenize("   "), (Strings{"   "}));
}

TEST(BpeTokenizer, SmollmSplitsDigits) {
  const BpeTokenizer tok(make_vocabulary({}, "smollm"));
  EXPECT_EQ(tok.pre_tokenize("abc123 456"), (Strings{"abc", "1", "2", "3", " ", "4", "5", "6"}));
  EXPECT_EQ(tok.pre_tokenize("x  1"), (Strings{"x", "  ", "1"}));
  EXPECT_EQ(tok.pre_tokenize("½²"), (Strings{"½", "²"}));  // No is \p{N} too
}

TEST(BpeTokenizer, SpecialTokensAreMatchedWhole) {
  const BpeTokenizer tok(make_vocabulary({"u s", "e r", "us er"}));
  const auto ids = tok.encode("<|im_start|>user\nhi<|im_end|>");
  EXPECT_EQ(tokens_of(tok, ids), (Strings{"<|im_start|>", "user", "Ċ", "h", "i", "<|im_end|>"}));
  // Not parsed: plain text, byte by byte.
  const auto plain = tok.encode("<|im_end|>", true, false);
  EXPECT_EQ(plain.size(), 10u);
  EXPECT_EQ(tok.decode(plain), "<|im_end|>");
  // A prefix of a special token is text; the longest match wins.
  BpeVocabulary v = make_vocabulary({});
  v.tokens.push_back("<|im_start|>x");
  v.token_types.push_back(4);
  const BpeTokenizer longer(std::move(v));
  EXPECT_EQ(tokens_of(longer, longer.encode("<|im_start|>x<|im_start|>y<|im_")),
            (Strings{"<|im_start|>x", "<|im_start|>", "y", "<", "|", "i", "m", "_"}));
  EXPECT_EQ(longer.decode(longer.encode("a<|im_start|>xb")), "a<|im_start|>xb");
}

TEST(BpeTokenizer, BosEosFollowTheVocabulary) {
  BpeVocabulary v = make_vocabulary({});
  v.add_bos = true;
  v.add_eos = true;
  const BpeTokenizer tok(std::move(v));
  EXPECT_EQ(tok.encode("a"), (std::vector<int32_t>{1, *tok.id_of("a"), 2}));
  EXPECT_EQ(tok.encode("a", false), (std::vector<int32_t>{*tok.id_of("a")}));
  EXPECT_EQ(tok.encode(""), (std::vector<int32_t>{1, 2}));
  const BpeTokenizer plain(make_vocabulary({}));
  EXPECT_TRUE(plain.encode("").empty());
  EXPECT_EQ(plain.bos(), 1);
  EXPECT_EQ(plain.eos(), 2);
  EXPECT_FALSE(plain.unk().has_value());
}

TEST(BpeTokenizer, DecodeRoundTrips) {
  const BpeTokenizer tok(make_vocabulary({"Ġ w", "ä ¸"}));
  const std::vector<std::string> texts = {"",
                                          "hello world",
                                          "  two\n\nlines\t",
                                          "caf\xC3\xA9 \xE4\xB8\x96\xE7\x95\x8C",
                                          "\xF0\x9F\x98\x80 emoji",
                                          "<|im_start|>a<|im_end|>",
                                          std::string("nul\0byte", 8)};
  for (const std::string& text : texts) {
    EXPECT_EQ(tok.decode(tok.encode(text)), text) << text;
  }
  // Invalid UTF-8 becomes U+FFFD, one per maximal ill-formed subsequence.
  EXPECT_EQ(tok.decode(tok.encode("a\xFF\xE4\xB8"
                                  "b")),
            "a\uFFFD\uFFFDb");
  EXPECT_EQ(tok.encode("\xC0"), tok.encode("\uFFFD"));
  // Control tokens left out on request; ids out of range name their position.
  const std::vector<int32_t> ids = {1, *tok.id_of("a"), 2};
  EXPECT_EQ(tok.decode(ids, true), "a");
  EXPECT_EQ(tok.decode(ids), "<|im_start|>a<|im_end|>");
  const std::vector<int32_t> bad = {5, tok.size()};
  try {
    (void)tok.decode(bad);
    FAIL() << "no error";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("ids[1]"), std::string::npos) << e.what();
  }
  const std::vector<int32_t> negative = {-1};
  EXPECT_THROW((void)tok.decode(negative), qkv::Error);
  EXPECT_THROW((void)tok.token_to_piece(-1), qkv::Error);
}

TEST(BpeTokenizer, StreamDecoderHoldsBackSplitCharacters) {
  const BpeTokenizer tok(make_vocabulary({}));
  // "世" is three byte tokens: nothing comes out until the third.
  const std::string text =
      "a\xE4\xB8\x96\xF0\x9F\x98\x80"
      "b";
  const auto ids = tok.encode(text);
  ASSERT_EQ(ids.size(), 9u);
  BpeStreamDecoder stream(tok);
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(stream.push(id));
  EXPECT_EQ(out, (Strings{"a", "", "", "\xE4\xB8\x96", "", "", "", "\xF0\x9F\x98\x80", "b"}));
  EXPECT_EQ(stream.finish(), "");
  // An unfinished character at the end becomes U+FFFD; invalid bytes at once.
  EXPECT_EQ(stream.push(*tok.id_of(BpeTokenizer::bytes_to_unicode("\xE4"))), "");
  EXPECT_EQ(stream.push(*tok.id_of(BpeTokenizer::bytes_to_unicode("\xB8"))), "");
  EXPECT_EQ(stream.finish(), "\uFFFD");
  EXPECT_EQ(stream.push(*tok.id_of(BpeTokenizer::bytes_to_unicode("\xFF"))), "\uFFFD");
  EXPECT_EQ(stream.push(*tok.id_of(BpeTokenizer::bytes_to_unicode("\xE4"))), "");
  EXPECT_EQ(stream.push(*tok.id_of("a")), "\uFFFDa");
  EXPECT_THROW((void)stream.push(tok.size()), qkv::Error);
}

TEST(BpeTokenizer, StreamEqualsDecodeOnAnySequence) {
  const BpeTokenizer tok(make_vocabulary({"ä ¸", "Ġ ä"}));
  uint32_t state = 12345;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids;
    for (int k = 0; k < 12; ++k) {
      state = state * 1664525u + 1013904223u;
      ids.push_back(static_cast<int32_t>((state >> 8) % static_cast<uint32_t>(tok.size())));
    }
    BpeStreamDecoder stream(tok, trial % 2 == 1);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.finish();
    EXPECT_EQ(streamed, tok.decode(ids, trial % 2 == 1));
  }
}

TEST(BpeTokenizer, ByteTypeTokensDecodeToTheirByte) {
  BpeVocabulary v = make_vocabulary({});
  v.tokens.push_back("<0x41>");
  v.token_types.push_back(6);
  const BpeTokenizer tok(std::move(v));
  const std::vector<int32_t> ids = {tok.size() - 1};
  EXPECT_EQ(tok.decode(ids), "A");
  EXPECT_EQ(tok.token_type(tok.size() - 1), BpeTokenType::kByte);
}

TEST(BpeTokenizer, LongPiecesStayFast) {
  // One 200,000-letter piece: the heap keeps it O(n log n).
  const BpeTokenizer tok(make_vocabulary({"a b", "ab ab", "abab abab"}));
  std::string text;
  for (int i = 0; i < 100000; ++i) text += "ab";
  const auto ids = tok.encode(text);
  EXPECT_EQ(ids.size(), 25000u);
  EXPECT_EQ(tok.decode(ids), text);
}

// The message of the qkv::Error the vocabulary gives, or "" if none.
std::string error_of(BpeVocabulary v) {
  try {
    BpeTokenizer tok(std::move(v));
  } catch (const qkv::Error& e) {
    EXPECT_EQ(e.kind(), qkv::ErrorKind::kValue);
    return e.what();
  }
  return "";
}

void expect_error(BpeVocabulary v, const std::string& fragment) {
  const std::string message = error_of(std::move(v));
  EXPECT_NE(message.find(fragment), std::string::npos)
      << "expected \"" << fragment << "\" in \"" << message << "\"";
}

TEST(BpeTokenizer, HostileVocabulariesAreNamed) {
  BpeVocabulary v;
  expect_error(v, "BpeVocabulary.tokens is empty");

  v = make_vocabulary({});
  v.pre_tokenizer = "deepseek-llm";
  expect_error(v, "pre_tokenizer \"deepseek-llm\" is not supported");

  v = make_vocabulary({});
  v.token_types.pop_back();
  expect_error(v, "token_types has 258 entries, expected one per token (259)");

  v = make_vocabulary({});
  v.token_types[7] = 9;
  expect_error(v, "token_types[7] = 9");

  v = make_vocabulary({});
  v.tokens.push_back("a");
  v.token_types.push_back(1);
  expect_error(v, "tokens[259] = \"a\" is a duplicate of tokens[100]");

  v = make_vocabulary({});
  v.tokens[0] = "";
  expect_error(v, "tokens[0] is empty");

  for (const auto& [merge, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"ab", "merges[0] = \"ab\" is not two tokens"},
           {"a b c", "merges[0] = \"a b c\" is not two tokens"},
           {" a", "merges[0] = \" a\" is not two tokens"},
           {"a ", "merges[0] = \"a \" is not two tokens"},
           {"a b", "merges[0] = \"a b\": \"ab\" is not a token"},
           {"xy z", "merges[0] = \"xy z\": \"xy\" is not a token"}}) {
    v = make_vocabulary({});
    v.merges = {merge};
    expect_error(v, fragment);
  }
  v = make_vocabulary({"a b"});
  v.merges.push_back("a b");
  expect_error(v, "merges[1] = \"a b\" is a duplicate of merges[0]");

  v = make_vocabulary({});
  v.eos = 259;
  expect_error(v, "BpeVocabulary.eos = 259 is not a token id");
  v = make_vocabulary({});
  v.unk = -1;
  expect_error(v, "BpeVocabulary.unk = -1 is not a token id");
}

TEST(BpeTokenizer, BytesWithoutTokensAreDropped) {
  // As tokenizers and llama.cpp: neither unk nor an error.
  BpeVocabulary v = make_vocabulary({"x y"});
  v.tokens[3 + 'z'] = "<zz>";
  v.unk = 0;
  const BpeTokenizer tok(std::move(v));
  EXPECT_EQ(tokens_of(tok, tok.encode("xyzy z")), (Strings{"xy", "y", "Ġ"}));
}

TEST(BpeTokenizer, CopiesAndThreadsAgree) {
  const BpeTokenizer tok(make_vocabulary({"h e", "l l", "he ll"}));
  const BpeTokenizer copy = tok;
  EXPECT_EQ(copy.encode("hello hello"), tok.encode("hello hello"));
  EXPECT_EQ(tok.encode("hello hello"), tok.encode("hello hello"));  // from the cache
}

// TokenIndex, the tokenizers' text -> id table: it grows from empty, finds
// every token and nothing else, and reports the first id of a duplicate.
TEST(TokenIndex, FindsEveryTokenAndReportsDuplicates) {
  std::vector<std::string> vocabulary{""};
  for (int i = 0; i < 5000; ++i) vocabulary.push_back("t" + std::to_string(i * 7919 % 100003));
  qkv::text::TokenIndex index;  // no room reserved: grows as ids come
  for (int32_t id = 0; id < static_cast<int32_t>(vocabulary.size()); ++id)
    ASSERT_EQ(index.insert(id, vocabulary), -1) << vocabulary[id];
  for (int32_t id = 0; id < static_cast<int32_t>(vocabulary.size()); ++id)
    ASSERT_EQ(index.find(vocabulary[id], vocabulary), id) << vocabulary[id];
  EXPECT_EQ(index.find("t", vocabulary), std::nullopt);
  EXPECT_EQ(index.find("t1x", vocabulary), std::nullopt);

  vocabulary.push_back(vocabulary[42]);
  EXPECT_EQ(index.insert(static_cast<int32_t>(vocabulary.size()) - 1, vocabulary), 42);
  EXPECT_EQ(index.find(vocabulary[42], vocabulary), 42);
  EXPECT_EQ(qkv::text::TokenIndex().find("", vocabulary), std::nullopt);
}

}  // namespace
