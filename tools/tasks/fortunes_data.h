// Text classification data from Debian's `fortunes` package: one file per
// topic under /usr/share/games/fortunes ("computers", "politics", ...), each a
// list of short texts separated by lines that hold only "%". The topic is the
// label. This file reads the files, splits them into training and held-out
// examples, turns texts into word ids and pads them into batches.
//
//   train::FortunesCorpus corpus = train::load_fortunes(train::kFortunesDir,
//                                                       {"computers", "food", "love"});
//   train::FortunesData data = train::prepare_fortunes(corpus, {.seed = 0});
//   train::TextBatch batch = train::make_text_batch(data.train.tokens, data.train.labels,
//                                                   {0, 1, 2}, 128);
//   Tensor padding = batch.key_padding_mask();   // [B, L] bool, true = padding
//
// Encoding policy: the files are read as UTF-8; a byte that is not part of a
// valid UTF-8 sequence is taken as Latin-1 (the encoding of the older fortune
// files) and recoded, so no text is lost or rejected, and the count of such
// bytes is reported (FortuneFile::latin1_bytes).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "qkv/tensor.h"

namespace qkv::train {

// Where Debian's `fortunes` package puts its files.
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

// --- Reading ----------------------------------------------------------------------

struct FortuneFile {
  std::vector<std::string> entries;  // valid UTF-8, surrounding whitespace trimmed, none empty
  int64_t latin1_bytes = 0;          // bytes that were not valid UTF-8, read as Latin-1
};

// Entries are separated by lines that are exactly "%" (a "\r" before the
// newline is allowed). Each entry loses its leading and trailing whitespace;
// entries left empty (e.g. "%\n%") are dropped; text after the last "%", with
// or without a final newline, is an entry too.
FortuneFile parse_fortunes(std::string_view text);

// Reads and parses one file. Errors (naming the path): missing, not a
// regular file, unreadable, or holding no entry.
FortuneFile read_fortune_file(const std::filesystem::path& path);

// The topic files in `dir`: regular files whose name has no '.' (which skips
// the package's "<topic>.dat" indexes and "<topic>.u8" links), sorted.
std::vector<std::string> list_fortune_topics(const std::filesystem::path& dir);

// Every entry of the topics, labelled by the topic's position in `topics`.
struct FortunesCorpus {
  std::vector<std::string> topics;  // class names; label i is topics[i]
  std::vector<std::string> texts;
  std::vector<int64_t> labels;  // like texts
  int64_t latin1_bytes = 0;     // summed over the files
};

// Reads <dir>/<topic> for each topic. Errors: fewer than two topics, a
// repeated topic, a name that is not a plain file name, and a missing topic
// (the message lists the topics `dir` has).
FortunesCorpus load_fortunes(const std::filesystem::path& dir,
                             const std::vector<std::string>& topics);

// --- Split ------------------------------------------------------------------------

// Indices into the examples, each list ascending.
struct DataSplit {
  std::vector<int64_t> train;
  std::vector<int64_t> held_out;
};

// Stratified: within each class the examples are shuffled by a generator
// seeded with `seed`, and round(held_out_fraction · n) of them are held out,
// but at least one and never all (a class of one example trains only). The
// same labels and seed give the same split.
DataSplit stratified_split(std::span<const int64_t> labels, int64_t num_classes,
                           double held_out_fraction, uint64_t seed);

// --- Words ------------------------------------------------------------------------

// Lower-cased words and punctuation. A word is a run of letters and digits
// (Unicode categories L*, N*, and marks M* after one of them), joined across
// an apostrophe (' or U+2019) that has word characters on both sides ("don't");
// every other character that is not whitespace is a token of its own ("--"
// gives "-", "-"). Invalid UTF-8 bytes are taken as Latin-1, as when reading.
std::vector<std::string> tokenize_words(std::string_view text);

// Word ids: [PAD] = 0, [UNK] = 1, then the words.
class WordVocabulary {
 public:
  static constexpr int64_t kPad = 0;
  static constexpr int64_t kUnk = 1;

  // [PAD], [UNK], then each word seen at least min_count times in `documents`,
  // most frequent first (ties in byte order), keeping at most max_size ids in
  // all (0: no limit). min_count >= 1, max_size 0 or >= 2.
  static WordVocabulary build(std::span<const std::vector<std::string>> documents,
                              int64_t min_count = 2, int64_t max_size = 0);

  int64_t size() const { return static_cast<int64_t>(words_.size()); }
  // The id of a word; kUnk when it is not in the vocabulary.
  int64_t id(std::string_view word) const;
  // The word of an id ("[PAD]", "[UNK]" for the two special ids); an Error when out of range.
  const std::string& word(int64_t id) const;
  std::vector<int64_t> encode(std::span<const std::string> words) const;

 private:
  std::vector<std::string> words_;
  std::unordered_map<std::string, int64_t> ids_;
};

// --- Prepared data ----------------------------------------------------------------

struct FortunesDataOptions {
  double held_out_fraction = 0.2;
  int64_t min_count = 2;  // a word needs this many uses in the training split
  int64_t max_vocab = 0;  // 0: no limit
  uint64_t seed = 0;      // the split
};

// Word ids of a set of examples.
struct EncodedExamples {
  std::vector<std::vector<int64_t>> tokens;  // one id list per example, whole (not truncated)
  std::vector<int64_t> labels;
  std::vector<int64_t> corpus_index;  // where each example is in the corpus
};

struct FortunesData {
  std::vector<std::string> topics;
  WordVocabulary vocab;  // built from the training split only
  EncodedExamples train;
  EncodedExamples held_out;
};

// Splits the corpus (stratified_split), builds the vocabulary on the
// training split and encodes both splits with it.
FortunesData prepare_fortunes(const FortunesCorpus& corpus, const FortunesDataOptions& options);

// --- Batches ----------------------------------------------------------------------

// B sequences padded to the longest, row-major.
struct TextBatch {
  int64_t batch = 0;
  int64_t length = 0;
  std::vector<int64_t> tokens;   // [B, L]: ids, then WordVocabulary::kPad
  std::vector<int64_t> lengths;  // [B]: real tokens per row, 1 .. L
  std::vector<int64_t> labels;   // [B]

  // [B, L] bool, true at padding: the polarity of TransformerEncoderForward's
  // src_key_padding_mask.
  Tensor key_padding_mask() const;
};

// Rows sequences[i] (truncated to max_length ids) and labels[i] for i in
// `indices`, in that order; L = the longest row. An empty sequence becomes a
// single [UNK], so that no row is all padding.
TextBatch make_text_batch(std::span<const std::vector<int64_t>> sequences,
                          std::span<const int64_t> labels, std::span<const int64_t> indices,
                          int64_t max_length);

}  // namespace qkv::train
