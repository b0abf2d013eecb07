// BERT's WordPiece tokenizer: basic tokenization (clean-up, lower-casing,
// accent stripping through Unicode NFD, punctuation and CJK splitting), then
// greedy longest-match-first word pieces with "##" continuations.
//
// It gives the same ids as Hugging Face `tokenizers` (BertNormalizer +
// BertPreTokenizer + WordPiece + TemplateProcessing, with its added tokens)
// for every input; python/tests/test_tokenizer_parity.py checks a corpus and
// every Unicode code point. Input is UTF-8; invalid bytes never throw: each
// maximal ill-formed subsequence becomes U+FFFD (as Python's
// bytes.decode("utf-8", "replace")), which clean_text then drops.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace qkv::text {

// Options read from tokenizer.json (or given by hand with vocab.txt).
struct WordPieceOptions {
  bool lowercase = true;            // normalizer.lowercase
  bool strip_accents = true;        // normalizer.strip_accents (null follows lowercase)
  bool split_chinese_chars = true;  // normalizer.handle_chinese_chars
  bool clean_text = true;           // normalizer.clean_text
  std::string unk_token = "[UNK]";
  std::string cls_token = "[CLS]";  // put before the pieces; "" for none
  std::string sep_token = "[SEP]";  // put after the pieces; "" for none
  std::string pad_token = "[PAD]";  // "" when the vocabulary has none
  // Tokens matched verbatim in the raw text before any normalisation, each
  // becoming its own id ("[CLS]" in the text gives 101, as in tokenizers).
  // from_json takes them from "added_tokens" instead.
  std::vector<std::string> special_tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  std::string continuing_prefix = "##";
  int64_t max_input_chars_per_word = 100;  // longer words (in code points) become [UNK]
  int64_t max_length = 512;                // truncation incl. [CLS] and [SEP]; 0 = no truncation
  bool truncate_left = false;              // truncation.direction == "Left": keep the end
  // encode_batch pads every row to at least this length (padding "Fixed");
  // 0 pads to the longest row ("BatchLongest", or no padding section).
  int64_t pad_to_length = 0;
  int64_t pad_to_multiple_of = 0;  // 0 = none
  bool pad_left = false;           // padding.direction == "Left"
};

// A padded batch, row-major [batch, length]; mask is 1 for real tokens.
struct EncodedBatch {
  int64_t batch = 0;
  int64_t length = 0;
  std::vector<int64_t> ids;
  std::vector<int64_t> attention_mask;
  std::vector<int64_t> lengths;  // real tokens per row incl. [CLS]/[SEP]
};

// Const methods may be called from several threads at once.
class WordPieceTokenizer {
 public:
  // Reads a Hugging Face tokenizer.json whose model is WordPiece. Every option
  // comes from the file (normalizer, model, added_tokens, post_processor,
  // truncation, padding). Throws qkv::Error naming the file and the problem:
  // kIO when it cannot be read, kValue when its content is wrong.
  static WordPieceTokenizer from_json(const std::filesystem::path& tokenizer_json);
  // Reads a vocab.txt (one token per line, id = line number, trailing
  // whitespace trimmed as tokenizers does).
  static WordPieceTokenizer from_vocab(const std::filesystem::path& vocab_txt,
                                       WordPieceOptions options = {});

  // The words BERT's basic tokenizer makes of `text` (normalised, split on
  // whitespace and punctuation), before word pieces and without added tokens.
  std::vector<std::string> basic_tokenize(std::string_view text) const;
  // Word pieces of one text, without [CLS]/[SEP] and without truncation. An
  // added token appears as the text it matched (as in tokenizers'
  // Encoding.tokens), e.g. "hello world" for "Hello World" when normalised.
  std::vector<std::string> tokenize(std::string_view text) const;
  // Ids of one text: [CLS] pieces… [SEP], truncated to options().max_length,
  // never padded (tokenizers' encode would also pad with "Fixed" padding).
  std::vector<int64_t> encode(std::string_view text) const;
  // Ids of many texts padded with [PAD] to the longest one (after truncation),
  // or to options().pad_to_length, rounded up to pad_to_multiple_of; at most
  // kMaxBatchIds ids in all (qkv::Error beyond, before anything is allocated).
  EncodedBatch encode_batch(const std::vector<std::string>& texts) const;
  static constexpr int64_t kMaxBatchIds = int64_t{1} << 28;

  // As tokenizers' enable_truncation / no_truncation (0) and enable_padding;
  // the padding lengths are at most kMaxPadding.
  void set_max_length(int64_t max_length);
  void set_padding(int64_t pad_to_length, int64_t pad_to_multiple_of = 0);
  static constexpr int64_t kMaxPadding = int64_t{1} << 24;

  int64_t token_to_id(std::string_view token) const;  // -1 when absent
  const std::string& id_to_token(int64_t id) const;   // throws for ids out of range
  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  const WordPieceOptions& options() const { return options_; }

  // A token matched in the text before word pieces (tokenizers' AddedToken).
  struct AddedToken {
    std::string content;
    int64_t id = -1;
    bool single_word = false;  // only when not inside a word
    bool lstrip = false;       // swallows the whitespace on its left
    bool rstrip = false;       // swallows the whitespace on its right
    bool normalized = false;   // matched in the normalised text instead of the raw one
    std::u32string pattern;    // what is matched: content, normalised when `normalized`
  };

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  // tokens[0, model_size) is the WordPiece vocabulary; added tokens may extend it.
  WordPieceTokenizer(std::vector<std::string> tokens, int64_t model_size, WordPieceOptions options,
                     std::vector<AddedToken> added);
  // Appends the ids of `text` (no specials, no truncation); `pieces`, when
  // given, receives the token strings too.
  void append_ids(std::string_view text, std::vector<int64_t>& ids,
                  std::vector<std::string>* pieces) const;
  void append_normalized_segment(std::u32string_view normalized, std::vector<int64_t>& ids,
                                 std::vector<std::string>* pieces) const;
  void append_word_pieces(std::string_view word, int64_t chars, std::vector<int64_t>& ids,
                          std::vector<std::string>* pieces) const;

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t, Hash, std::equal_to<>> ids_;
  int64_t model_size_ = 0;
  WordPieceOptions options_;
  std::vector<AddedToken> raw_added_;         // matched in the raw text
  std::vector<AddedToken> normalized_added_;  // matched after normalisation
  int64_t unk_id_ = -1;
  int64_t cls_id_ = -1;
  int64_t sep_id_ = -1;
  int64_t pad_id_ = -1;
  size_t longest_token_ = 0;  // bytes, bounds the longest-match search
};

}  // namespace qkv::text
