// BERT's WordPiece tokenizer: basic tokenization (clean-up, lower-casing,
// accent stripping through Unicode NFD, punctuation and CJK splitting), then
// greedy longest-match-first word pieces with "##" continuations.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace qkv::text {

// Options read from tokenizer.json (or given by hand with vocab.txt).
struct WordPieceOptions {
  bool lowercase = true;             // normalizer.lowercase
  bool strip_accents = true;         // normalizer.strip_accents (null follows lowercase)
  bool split_chinese_chars = true;   // normalizer.handle_chinese_chars
  bool clean_text = true;            // normalizer.clean_text
  std::string unk_token = "[UNK]";
  std::string cls_token = "[CLS]";
  std::string sep_token = "[SEP]";
  std::string pad_token = "[PAD]";
  std::string continuing_prefix = "##";
  int64_t max_input_chars_per_word = 100;  // longer words become [UNK]
  int64_t max_length = 512;                // truncation incl. [CLS] and [SEP]
};

// A padded batch, row-major [batch, length]; mask is 1 for real tokens.
struct EncodedBatch {
  int64_t batch = 0;
  int64_t length = 0;
  std::vector<int64_t> ids;
  std::vector<int64_t> attention_mask;
  std::vector<int64_t> lengths;  // real tokens per row incl. [CLS]/[SEP]
};

class WordPieceTokenizer {
 public:
  // Reads a Hugging Face tokenizer.json whose model is WordPiece.
  // Throws qkv::Error naming the file and the problem.
  static WordPieceTokenizer from_json(const std::filesystem::path& tokenizer_json);
  // Reads a vocab.txt (one token per line, id = line number).
  static WordPieceTokenizer from_vocab(const std::filesystem::path& vocab_txt,
                                       WordPieceOptions options = {});

  // Word pieces of one text, without [CLS]/[SEP] and without truncation.
  std::vector<std::string> tokenize(std::string_view text) const;
  // Ids of one text: [CLS] pieces… [SEP], truncated to options().max_length.
  std::vector<int64_t> encode(std::string_view text) const;
  // Ids of many texts padded with [PAD] to the longest one (after truncation).
  EncodedBatch encode_batch(const std::vector<std::string>& texts) const;

  int64_t token_to_id(std::string_view token) const;  // -1 when absent
  const std::string& id_to_token(int64_t id) const;
  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  const WordPieceOptions& options() const { return options_; }

 private:
  WordPieceTokenizer(std::vector<std::string> tokens, WordPieceOptions options);

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t> ids_;
  WordPieceOptions options_;
};

}  // namespace qkv::text
