// text::BpeTokenizer's SentencePiece-style model ("llama") on tiny hand-made
// vocabularies: the merge order (score, then the longer left piece, the longer
// right piece, the lower id, the leftmost), byte fallback and unk, the space
// prefix, decoding (streamed too), refusals; and the Qwen2 / Llama 3 splits.
// Parity with transformers on Gemma 3's vocabulary and on written Qwen2 /
// Llama 3 files is python/tests/test_gguf_tokenizers.py.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/text/bpe_tokenizer.h"

namespace {

using qkv::text::BpeStreamDecoder;
using qkv::text::BpeTokenizer;
using qkv::text::BpeVocabulary;
using Strings = std::vector<std::string>;

constexpr const char* kSpace = "\u2581";

// <unk> <s> </s>, then `tokens` with their scores; with_bytes adds the 256 "<0xNN>".
BpeVocabulary spm(const std::vector<std::pair<std::string, float>>& tokens, bool with_bytes = false,
                  bool prefix = false) {
  BpeVocabulary v;
  v.model = "llama";
  v.pre_tokenizer = "default";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.scores = {0, 0, 0};
  v.token_types = {2, 3, 3};
  for (const auto& [text, score] : tokens) {
    v.tokens.push_back(text);
    v.scores.push_back(score);
    v.token_types.push_back(1);
  }
  if (with_bytes) {
    for (int b = 0; b < 256; ++b) {
      v.tokens.push_back(BpeTokenizer::byte_token(static_cast<uint8_t>(b)));
      v.scores.push_back(0);
      v.token_types.push_back(6);
    }
  }
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  v.add_bos = true;
  v.add_space_prefix = prefix;
  return v;
}

Strings pieces_of(const BpeTokenizer& tok, const std::vector<int32_t>& ids) {
  Strings out;
  for (const int32_t id : ids) out.push_back(tok.token(id));
  return out;
}

Strings encode(const BpeTokenizer& tok, const std::string& text) {
  return pieces_of(tok, tok.encode(text, /*add_special=*/false));
}

// `text` encoded with the tokens a, b, c (score 0), then `merged` in order.
Strings encode_abc(const std::vector<std::pair<std::string, float>>& merged,
                   const std::string& text) {
  std::vector<std::pair<std::string, float>> tokens = {{"a", 0}, {"b", 0}, {"c", 0}};
  tokens.insert(tokens.end(), merged.begin(), merged.end());
  return encode(BpeTokenizer(spm(tokens)), text);
}

TEST(SentencePieceTokenizer, HigherScoreMergesFirst) {
  // "abc": ab and bc compete for b.
  EXPECT_EQ(encode_abc({{"ab", -1}, {"bc", -2}}, "abc"), (Strings{"ab", "c"}));
  EXPECT_EQ(encode_abc({{"ab", -2}, {"bc", -1}}, "abc"), (Strings{"a", "bc"}));
  // Merges go on from merged pieces: ab + c -> abc.
  EXPECT_EQ(encode_abc({{"ab", -1}, {"abc", -3}}, "abcab"), (Strings{"abc", "ab"}));
}

TEST(SentencePieceTokenizer, TiesGoToTheLongerLeftThenRightThenLowerIdThenLeftmost) {
  // After ab (best), abc = ab + c and cd = c + d tie on score: the longer left
  // piece (ab) wins although cd has the lower id.
  const BpeTokenizer by_length(
      spm({{"a", 0}, {"b", 0}, {"c", 0}, {"d", 0}, {"ab", 10}, {"cd", 0}, {"abc", 0}}));
  EXPECT_EQ(encode(by_length, "abcd"), (Strings{"abc", "d"}));
  // bcd = b + cd (left 1, right 2) and ab = a + b (left 1, right 1), cd
  // first: the longer right piece wins.
  const BpeTokenizer by_right(
      spm({{"a", 0}, {"b", 0}, {"c", 0}, {"d", 0}, {"cd", 10}, {"ab", 0}, {"bcd", 0}}));
  EXPECT_EQ(encode(by_right, "abcd"), (Strings{"a", "bcd"}));
  // Same score and lengths: the lower id.
  EXPECT_EQ(encode_abc({{"bc", -1}, {"ab", -1}}, "abc"), (Strings{"a", "bc"}));
  EXPECT_EQ(encode_abc({{"ab", -1}, {"bc", -1}}, "abc"), (Strings{"ab", "c"}));
  // The same pair: leftmost first.
  EXPECT_EQ(encode(BpeTokenizer(spm({{"a", 0}, {"aa", -1}})), "aaa"), (Strings{"aa", "a"}));
}

TEST(SentencePieceTokenizer, SpacesAreMarksAndThePrefixOnlyAtTheStart) {
  const std::string m = kSpace;
  const auto vocab = [&](bool prefix) {
    return spm({{m, 0}, {"a", 0}, {"b", 0}, {m + "a", -1}, {m + m, -2}}, false, prefix);
  };
  const BpeTokenizer plain(vocab(false)), prefixed(vocab(true));
  EXPECT_EQ(encode(plain, "a a"), (Strings{"a", m + "a"}));
  EXPECT_EQ(encode(prefixed, "a a"), (Strings{m + "a", m + "a"}));
  // A text that starts with a space gets no second one (Metaspace "first").
  EXPECT_EQ(encode(prefixed, " a"), (Strings{m + "a"}));
  EXPECT_EQ(encode(prefixed, "  a"), (Strings{m, m + "a"}));
  // Nor does the text after a special token.
  EXPECT_EQ(pieces_of(prefixed, prefixed.encode("a</s>a", false)), (Strings{m + "a", "</s>", "a"}));
  EXPECT_EQ(pieces_of(prefixed, prefixed.encode("a</s>a", false, /*parse_special=*/false)).front(),
            m + "a");
  EXPECT_EQ(prefixed.encode(""), (std::vector<int32_t>{1}));
  EXPECT_EQ(prefixed.pre_tokenize("a b"), (Strings{m + "a" + m + "b"}));
  // Decoding gives the spaces back, less the prefix -- only at the very start
  // (LlamaTokenizer's Strip decoder after Fuse).
  EXPECT_EQ(prefixed.decode(prefixed.encode("a  b a")), "<s> a  b a");
  EXPECT_EQ(prefixed.decode(prefixed.encode("a  b a"), /*skip_special=*/true), "a  b a");
  EXPECT_EQ(plain.decode(plain.encode(" a  b ", false)), " a  b ");
}

TEST(SentencePieceTokenizer, ByteFallbackThenUnk) {
  const BpeTokenizer bytes(spm({{"a", 0}, {"\xC3\xA9", 0}}, /*with_bytes=*/true));
  // é is a token; ü (C3 BC) is not: its two bytes.
  EXPECT_EQ(encode(bytes, "a\xC3\xA9\xC3\xBC"), (Strings{"a", "\xC3\xA9", "<0xC3>", "<0xBC>"}));
  EXPECT_EQ(bytes.decode(bytes.encode("a\xC3\xBC\xE2\x98\x83")), "<s>a\xC3\xBC\xE2\x98\x83");
  // Invalid UTF-8 input is U+FFFD first (here: its bytes).
  EXPECT_EQ(encode(bytes, "\xFF"), (Strings{"<0xEF>", "<0xBF>", "<0xBD>"}));

  // Without byte tokens: unk, one for a run of unknown characters.
  const BpeTokenizer unk(spm({{"a", 0}}));
  EXPECT_EQ(encode(unk,
                   "\xE2\x98\x83\xE2\x98\x83"
                   "a\xE2\x98\x83"),
            (Strings{"<unk>", "a", "<unk>"}));
  BpeVocabulary no_unk = spm({{"a", 0}});
  no_unk.unk.reset();
  EXPECT_EQ(encode(BpeTokenizer(no_unk),
                   "\xE2\x98\x83"
                   "a"),
            (Strings{"a"}));
}

TEST(SentencePieceTokenizer, ByteRunsDecodeWholeOrAsReplacementCharacters) {
  const BpeTokenizer tok(spm({{"a", 0}}, /*with_bytes=*/true));
  const auto byte = [&](int b) { return *tok.id_of(BpeTokenizer::byte_token(b)); };
  const int32_t a = *tok.id_of("a");
  // A valid run is its text; an invalid one one U+FFFD per byte (tokenizers'
  // ByteFallback), not per maximal subpart.
  EXPECT_EQ(tok.decode(std::vector<int32_t>{byte(0xE2), byte(0x98), byte(0x83), a}),
            "\xE2\x98\x83"
            "a");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{byte(0xE2), byte(0x98), a}),
            "\uFFFD\uFFFD"
            "a");
  // A valid character followed by a stray byte spoils the whole run.
  EXPECT_EQ(tok.decode(std::vector<int32_t>{byte(0x41), byte(0xE2), a}),
            "\uFFFD\uFFFD"
            "a");
  EXPECT_TRUE(tok.is_byte_token(byte(0)));
  EXPECT_FALSE(tok.is_byte_token(a));
  EXPECT_EQ(tok.token_to_piece(byte(0x41)), "A");

  // Streamed: a run waits for its end.
  for (const std::vector<int32_t>& ids :
       {std::vector<int32_t>{byte(0xE2), byte(0x98), byte(0x83), a},
        std::vector<int32_t>{a, byte(0xE2), byte(0x98), a, byte(0x41)},
        std::vector<int32_t>{byte(0x41), byte(0xE2), a, a}}) {
    BpeStreamDecoder stream(tok);
    std::string out;
    for (const int32_t id : ids) out += stream.push(id);
    out += stream.finish();
    EXPECT_EQ(out, tok.decode(ids));
  }
}

TEST(SentencePieceTokenizer, StreamDropsThePrefixSpaceOnce) {
  const std::string m = kSpace;
  const BpeTokenizer tok(spm({{m, 0}, {"a", 0}, {m + "a", -1}}, false, /*prefix=*/true));
  const std::vector<int32_t> ids = tok.encode("a a a");
  BpeStreamDecoder stream(tok, /*skip_special=*/true);
  std::string out;
  for (const int32_t id : ids) out += stream.push(id);
  out += stream.finish();
  EXPECT_EQ(out, "a a a");
  EXPECT_EQ(out, tok.decode(ids, true));
  // finish() starts over: the next text's prefix goes too.
  EXPECT_EQ(stream.push(*tok.id_of(m + "a")), "a");
}

TEST(SentencePieceTokenizer, HostileVocabulariesAreNamed) {
  const auto expect_error = [](BpeVocabulary v, const std::string& fragment) {
    try {
      BpeTokenizer tok(std::move(v));
      ADD_FAILURE() << "no error, expected \"" << fragment << "\"";
    } catch (const qkv::Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
          << "expected \"" << fragment << "\" in \"" << e.what() << "\"";
    }
  };
  BpeVocabulary v = spm({{"a", 0}});
  v.scores.pop_back();
  expect_error(v, "BpeVocabulary.scores has 3 entries, expected one per token (4)");
  v = spm({{"a", 0}});
  v.scores[3] = std::nanf("");
  expect_error(v, "BpeVocabulary.scores[3] = nan is not a finite number");
  v = spm({{"a", 0}});
  v.merges = {"a a"};
  expect_error(v, "the \"llama\" model merges by scores and takes none");
  v = spm({{"a", 0}});
  v.pre_tokenizer = "qwen2";
  expect_error(v, "pre_tokenizer \"qwen2\" is not supported for the \"llama\" model");
  v = spm({{"a", 0}});
  v.model = "bert";
  expect_error(v, "BpeVocabulary.model \"bert\" is not supported");
  v = spm({{"a", 0}});
  v.model = "gpt2";
  v.pre_tokenizer = "gpt2";
  expect_error(v, "BpeVocabulary.scores has 4 entries; the \"gpt2\" model");
}

// Byte-level vocabulary of the 256 bytes only: pre_tokenize shows the split.
BpeTokenizer byte_level(const std::string& pre) {
  BpeVocabulary v;
  for (int b = 0; b < 256; ++b)
    v.tokens.push_back(BpeTokenizer::bytes_to_unicode(std::string(1, static_cast<char>(b))));
  v.pre_tokenizer = pre;
  return BpeTokenizer(std::move(v));
}

TEST(SentencePieceTokenizer, Qwen2AndLlama3Splits) {
  const BpeTokenizer qwen2 = byte_level("qwen2"), llama3 = byte_level("llama-bpe"),
                     gpt2 = byte_level("gpt2");
  const std::string text = "Hello world's IT'S 12345\n\n  x\t(y) !!\n\nz  ";
  EXPECT_EQ(qwen2.pre_tokenize(text),
            (Strings{"Hello", " world", "'s", " IT", "'S", " ",  "1", "2",       "3", "4",
                     "5",     "\n\n",   " ",  " x",  "\t", "(y", ")", " !!\n\n", "z", "  "}));
  EXPECT_EQ(llama3.pre_tokenize(text),
            (Strings{"Hello", " world", "'s", " IT", "'S", " ", "123", "45", "\n\n", " ", " x",
                     "\t", "(y", ")", " !!\n\n", "z", "  "}));
  // GPT-2's contractions are lower case only, its letters take no tab.
  EXPECT_EQ(gpt2.pre_tokenize("IT'S\tx"), (Strings{"IT", "'", "S", "\t", "x"}));
  EXPECT_EQ(qwen2.pre_tokenize("IT'S\tx"), (Strings{"IT", "'S", "\tx"}));
  // Spaces then a line break: up to the last break; a long-s contraction.
  EXPECT_EQ(qwen2.pre_tokenize("a \n \n  b'\u017F"),
            (Strings{"a", " \n \n", " ", " b", "'\u017F"}));
}

}  // namespace
