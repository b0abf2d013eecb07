#include "tasks/fortunes_data.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "qkv/error.h"
#include "qkv/generator.h"

namespace qkv::train {

namespace {

// The code point at text[pos] and its length in bytes. A byte that does not
// start a valid UTF-8 sequence (bad lead or continuation byte, overlong form,
// surrogate, beyond U+10FFFF, cut short) is one Latin-1 character.
struct Decoded {
  char32_t cp;
  size_t length;
  bool latin1;
};

Decoded decode_at(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) return {lead, 1, false};
  size_t length = 0;
  char32_t cp = 0, min = 0;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, cp = lead & 0x1F, min = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, cp = lead & 0x0F, min = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, cp = lead & 0x07, min = 0x10000;
  } else {
    return {lead, 1, true};
  }
  if (pos + length > text.size()) return {lead, 1, true};
  for (size_t i = 1; i < length; ++i) {
    const unsigned char c = byte(pos + i);
    if ((c & 0xC0) != 0x80) return {lead, 1, true};
    cp = (cp << 6) | (c & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {lead, 1, true};
  return {cp, length, false};
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// `text` as valid UTF-8, invalid bytes read as Latin-1; counts them in *latin1.
std::string to_valid_utf8(std::string_view text, int64_t* latin1) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Decoded d = decode_at(text, pos);
    if (d.latin1) {
      append_utf8(out, d.cp);
      ++*latin1;
    } else {
      out.append(text.substr(pos, d.length));
    }
    pos += d.length;
  }
  return out;
}

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ascii_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ascii_space(s.back())) s.remove_suffix(1);
  return s;
}

enum class CharClass { kWord, kMark, kApostrophe, kSpace, kIgnored, kOther };

CharClass classify(char32_t cp) {
  if (cp == U'\'' || cp == U'\u2019') return CharClass::kApostrophe;
  if (cp < 0x80 && is_ascii_space(static_cast<char>(cp))) return CharClass::kSpace;
  // By the general category's major class: its first letter ("Lu", "Nd", "Zs", ...).
  const char* category = utf8proc_category_string(static_cast<utf8proc_int32_t>(cp));
  switch (category[0]) {
    case 'L':  // letters
    case 'N':  // digits and other numbers
      return CharClass::kWord;
    case 'M':
      return CharClass::kMark;
    case 'Z':
      return CharClass::kSpace;
    // Control, format and unassigned (Cc, Cf, Cn): some fortunes underline with
    // "_\b". Private use (Co) and surrogates (Cs) are symbols like any other.
    case 'C':
      return category[1] == 'o' || category[1] == 's' ? CharClass::kOther : CharClass::kIgnored;
    default:
      return CharClass::kOther;
  }
}

}  // namespace

// --- Reading ----------------------------------------------------------------------

FortuneFile parse_fortunes(std::string_view raw) {
  FortuneFile file;
  const std::string text = to_valid_utf8(raw, &file.latin1_bytes);
  std::string_view rest = text;
  size_t entry_start = 0;  // offset in text of the current entry
  const auto close_entry = [&](size_t end) {
    const std::string_view entry =
        trim(std::string_view(text).substr(entry_start, end - entry_start));
    if (!entry.empty()) file.entries.emplace_back(entry);
  };
  size_t line_start = 0;
  while (line_start < text.size()) {
    size_t line_end = text.find('\n', line_start);
    const size_t next = line_end == std::string::npos ? text.size() : line_end + 1;
    if (line_end == std::string::npos) line_end = text.size();
    const std::string_view line = rest.substr(line_start, line_end - line_start);
    if (line == "%" || line == "%\r") {
      close_entry(line_start);
      entry_start = next;
    }
    line_start = next;
  }
  close_entry(text.size());
  return file;
}

FortuneFile read_fortune_file(const std::filesystem::path& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  QKV_CHECK(std::filesystem::exists(status), "fortune file '", path.string(), "' does not exist");
  QKV_CHECK(std::filesystem::is_regular_file(status), "fortune file '", path.string(),
            "' is not a regular file");
  std::ifstream in(path, std::ios::binary);
  QKV_CHECK(in.good(), "fortune file '", path.string(), "' cannot be opened for reading");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  QKV_CHECK(!in.bad(), "fortune file '", path.string(), "': read error");
  FortuneFile file = parse_fortunes(buffer.str());
  QKV_CHECK(!file.entries.empty(), "fortune file '", path.string(),
            "' holds no entry (expected texts separated by lines of \"%\")");
  return file;
}

std::vector<std::string> list_fortune_topics(const std::filesystem::path& dir) {
  std::vector<std::string> topics;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find('.') == std::string::npos && entry.is_regular_file(ec)) topics.push_back(name);
  }
  std::sort(topics.begin(), topics.end());
  return topics;
}

FortunesCorpus load_fortunes(const std::filesystem::path& dir,
                             const std::vector<std::string>& topics) {
  QKV_CHECK(topics.size() >= 2, "fortunes: at least two topics are needed to classify, got ",
            topics.size());
  std::set<std::string> seen;
  for (const std::string& topic : topics) {
    QKV_CHECK(
        !topic.empty() && topic.find('/') == std::string::npos && topic != "." && topic != "..",
        "fortunes: topic '", topic, "' is not a file name");
    QKV_CHECK(seen.insert(topic).second, "fortunes: topic '", topic, "' is given twice");
  }
  FortunesCorpus corpus;
  corpus.topics = topics;
  for (size_t label = 0; label < topics.size(); ++label) {
    const std::filesystem::path path = dir / topics[label];
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      std::string available;
      for (const std::string& t : list_fortune_topics(dir))
        available += (available.empty() ? "" : ", ") + t;
      QKV_CHECK(false, "fortunes: unknown topic '", topics[label], "': no file '", path.string(),
                "'; topics in '", dir.string(), "': ", available.empty() ? "(none)" : available);
    }
    FortuneFile file = read_fortune_file(path);
    corpus.latin1_bytes += file.latin1_bytes;
    for (std::string& text : file.entries) {
      corpus.texts.push_back(std::move(text));
      corpus.labels.push_back(static_cast<int64_t>(label));
    }
  }
  return corpus;
}

// --- Split ------------------------------------------------------------------------

DataSplit stratified_split(std::span<const int64_t> labels, int64_t num_classes,
                           double held_out_fraction, uint64_t seed) {
  QKV_CHECK(num_classes >= 1, "stratified_split: num_classes must be >= 1, got ", num_classes);
  QKV_CHECK(held_out_fraction > 0 && held_out_fraction < 1,
            "stratified_split: held_out_fraction must be in (0, 1), got ", held_out_fraction);
  std::vector<std::vector<int64_t>> by_class(num_classes);
  for (size_t i = 0; i < labels.size(); ++i) {
    QKV_CHECK(labels[i] >= 0 && labels[i] < num_classes, "stratified_split: label ", i, " is ",
              labels[i], ", expected in [0, ", num_classes, ")");
    by_class[labels[i]].push_back(static_cast<int64_t>(i));
  }
  Generator gen(seed);
  DataSplit split;
  for (std::vector<int64_t>& members : by_class) {
    const int64_t n = static_cast<int64_t>(members.size());
    // Fisher-Yates, drawn per class in class order: one class's size does not
    // change which members of another are held out.
    for (int64_t i = n - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(i + 1));
      std::swap(members[i], members[j]);
    }
    int64_t held = std::llround(held_out_fraction * static_cast<double>(n));
    held = n < 2 ? 0 : std::clamp<int64_t>(held, 1, n - 1);
    split.held_out.insert(split.held_out.end(), members.begin(), members.begin() + held);
    split.train.insert(split.train.end(), members.begin() + held, members.end());
  }
  std::sort(split.train.begin(), split.train.end());
  std::sort(split.held_out.begin(), split.held_out.end());
  return split;
}

// --- Words ------------------------------------------------------------------------

std::vector<std::string> tokenize_words(std::string_view text) {
  std::vector<std::string> tokens;
  std::string word;  // the word being built
  bool pending_apostrophe = false;
  const auto end_word = [&] {
    if (!word.empty()) tokens.push_back(std::move(word));
    word.clear();
    if (pending_apostrophe) tokens.emplace_back("'");
    pending_apostrophe = false;
  };
  for (size_t pos = 0; pos < text.size();) {
    const Decoded d = decode_at(text, pos);
    pos += d.length;
    switch (classify(d.cp)) {
      case CharClass::kWord:
        if (pending_apostrophe) word += '\'';  // both spellings become the ASCII one
        pending_apostrophe = false;
        append_utf8(word, static_cast<char32_t>(utf8proc_tolower(static_cast<int32_t>(d.cp))));
        break;
      case CharClass::kMark:
        if (!word.empty() && !pending_apostrophe) append_utf8(word, d.cp);
        break;
      case CharClass::kApostrophe:
        if (!word.empty() && !pending_apostrophe) {
          pending_apostrophe = true;  // joins if a word character follows
        } else {
          end_word();
          tokens.emplace_back("'");
        }
        break;
      case CharClass::kSpace:
        end_word();
        break;
      case CharClass::kIgnored:
        break;
      case CharClass::kOther: {
        end_word();
        std::string symbol;
        append_utf8(symbol, d.cp);
        tokens.push_back(std::move(symbol));
        break;
      }
    }
  }
  end_word();
  return tokens;
}

WordVocabulary WordVocabulary::build(std::span<const std::vector<std::string>> documents,
                                     int64_t min_count, int64_t max_size) {
  QKV_CHECK(min_count >= 1, "WordVocabulary::build: min_count must be >= 1, got ", min_count);
  QKV_CHECK(max_size == 0 || max_size >= 2,
            "WordVocabulary::build: max_size must be 0 (no limit) or >= 2, got ", max_size);
  std::map<std::string, int64_t> counts;
  for (const std::vector<std::string>& doc : documents)
    for (const std::string& w : doc) ++counts[w];
  std::vector<std::pair<std::string, int64_t>> kept;
  for (auto& [w, n] : counts)
    if (n >= min_count && w != "[PAD]" && w != "[UNK]") kept.emplace_back(w, n);
  // Stable on the map's byte order: ties stay alphabetical.
  std::stable_sort(kept.begin(), kept.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (max_size > 0 && static_cast<int64_t>(kept.size()) > max_size - 2) kept.resize(max_size - 2);
  WordVocabulary vocab;
  vocab.words_ = {"[PAD]", "[UNK]"};
  for (auto& [w, n] : kept) vocab.words_.push_back(w);
  for (size_t i = 0; i < vocab.words_.size(); ++i)
    vocab.ids_.emplace(vocab.words_[i], static_cast<int64_t>(i));
  return vocab;
}

int64_t WordVocabulary::id(std::string_view word) const {
  const auto it = ids_.find(std::string(word));
  return it == ids_.end() || it->second == kPad ? kUnk : it->second;
}

const std::string& WordVocabulary::word(int64_t id) const {
  QKV_CHECK(id >= 0 && id < size(), "WordVocabulary::word: id must be in [0, ", size(), "), got ",
            id);
  return words_[id];
}

std::vector<int64_t> WordVocabulary::encode(std::span<const std::string> words) const {
  std::vector<int64_t> ids;
  ids.reserve(words.size());
  for (const std::string& w : words) ids.push_back(id(w));
  return ids;
}

// --- Prepared data ----------------------------------------------------------------

FortunesData prepare_fortunes(const FortunesCorpus& corpus, const FortunesDataOptions& options) {
  QKV_CHECK(corpus.texts.size() == corpus.labels.size(), "prepare_fortunes: ", corpus.texts.size(),
            " texts but ", corpus.labels.size(), " labels");
  const DataSplit split =
      stratified_split(corpus.labels, static_cast<int64_t>(corpus.topics.size()),
                       options.held_out_fraction, options.seed);
  std::vector<std::vector<std::string>> words(corpus.texts.size());
  for (size_t i = 0; i < corpus.texts.size(); ++i) words[i] = tokenize_words(corpus.texts[i]);
  std::vector<std::vector<std::string>> train_words;
  for (int64_t i : split.train) train_words.push_back(words[i]);

  FortunesData data;
  data.topics = corpus.topics;
  data.vocab = WordVocabulary::build(train_words, options.min_count, options.max_vocab);
  const auto encode = [&](const std::vector<int64_t>& indices, EncodedExamples& out) {
    for (int64_t i : indices) {
      out.tokens.push_back(data.vocab.encode(words[i]));
      out.labels.push_back(corpus.labels[i]);
      out.corpus_index.push_back(i);
    }
  };
  encode(split.train, data.train);
  encode(split.held_out, data.held_out);
  return data;
}

// --- Batches ----------------------------------------------------------------------

Tensor TextBatch::key_padding_mask() const {
  std::vector<bool> padding(batch * length);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = lengths[b]; t < length; ++t) padding[b * length + t] = true;
  return Tensor::from_bools({batch, length}, padding);
}

TextBatch make_text_batch(std::span<const std::vector<int64_t>> sequences,
                          std::span<const int64_t> labels, std::span<const int64_t> indices,
                          int64_t max_length) {
  QKV_CHECK(max_length >= 1, "make_text_batch: max_length must be >= 1, got ", max_length);
  QKV_CHECK(labels.size() == sequences.size(), "make_text_batch: ", sequences.size(),
            " sequences but ", labels.size(), " labels");
  QKV_CHECK(!indices.empty(), "make_text_batch: no indices");
  TextBatch out;
  out.batch = static_cast<int64_t>(indices.size());
  for (int64_t i : indices) {
    QKV_CHECK(i >= 0 && i < static_cast<int64_t>(sequences.size()),
              "make_text_batch: index must be in [0, ", sequences.size(), "), got ", i);
    const int64_t n = static_cast<int64_t>(sequences[i].size());
    out.lengths.push_back(std::clamp<int64_t>(n, 1, max_length));
    out.labels.push_back(labels[i]);
  }
  out.length = *std::max_element(out.lengths.begin(), out.lengths.end());
  out.tokens.assign(out.batch * out.length, WordVocabulary::kPad);
  for (int64_t b = 0; b < out.batch; ++b) {
    const std::vector<int64_t>& seq = sequences[indices[b]];
    int64_t* row = out.tokens.data() + b * out.length;
    if (seq.empty()) row[0] = WordVocabulary::kUnk;
    std::copy_n(seq.begin(), std::min<int64_t>(seq.size(), max_length), row);
  }
  return out;
}

}  // namespace qkv::train
