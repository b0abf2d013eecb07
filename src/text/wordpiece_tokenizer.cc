// WordPieceTokenizer: loading tokenizer.json / vocab.txt, added tokens,
// greedy longest-match-first word pieces, [CLS]/[SEP], truncation, padding.
#include "qkv/text/wordpiece_tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/json_document.h"
#include "qkv/error.h"
#include "text/basic_tokenizer.h"

namespace qkv::text {

namespace {

using io::json_excerpt;
using nlohmann::json;
using qkv::detail::concat;

// The pieces of one tokenizer.json, with messages naming the file and key.
class JsonReader {
 public:
  explicit JsonReader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorKind::kValue, concat("WordPieceTokenizer::from_json: '", file_, "': ", what));
  }
  void check(bool condition, const std::string& what) const {
    if (!condition) fail(what);
  }

  // The member `key` of `object`, or nullptr when absent or null.
  const json* find(const json& object, const char* key) const {
    const auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }
  bool get_bool(const json& object, const char* key, bool fallback, const char* where) const {
    const json* value = find(object, key);
    if (!value) return fallback;
    check(value->is_boolean(),
          concat(where, ".", key, " must be true or false, got ", json_excerpt(*value)));
    return value->get<bool>();
  }
  int64_t get_int(const json& object, const char* key, int64_t fallback, const char* where) const {
    const json* value = find(object, key);
    if (!value) return fallback;
    check(value->is_number_integer() && value->get<int64_t>() >= 0,
          concat(where, ".", key, " must be a non-negative integer, got ", json_excerpt(*value)));
    return value->get<int64_t>();
  }
  std::string get_string(const json& object, const char* key, const std::string& fallback,
                         const char* where) const {
    const json* value = find(object, key);
    if (!value) return fallback;
    check(value->is_string(),
          concat(where, ".", key, " must be a string, got ", json_excerpt(*value)));
    return value->get<std::string>();
  }
  std::string type_of(const json& object, const char* where) const {
    check(object.is_object(), concat(where, " must be an object, got ", json_excerpt(object)));
    return get_string(object, "type", "", where);
  }

 private:
  std::string file_;
};

// The ids of model.vocab as a list of tokens indexed by id.
std::vector<std::string> read_json_vocab(const json& vocab, const JsonReader& r) {
  r.check(vocab.is_object(),
          "model.vocab must be an object {token: id}, got " + std::string(vocab.type_name()));
  r.check(!vocab.empty(), "model.vocab is empty");
  std::vector<std::string> tokens(vocab.size());
  std::vector<bool> seen(vocab.size(), false);
  // The messages are built only on failure: this loop runs 30,000 times.
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const std::string& token = it.key();
    const json& value = it.value();
    if (!value.is_number_integer())
      r.fail(concat("model.vocab['", token, "'] must be an integer id, got ", json_excerpt(value)));
    const int64_t id = value.get<int64_t>();
    if (id < 0 || id >= static_cast<int64_t>(tokens.size()))
      r.fail(concat("model.vocab['", token, "'] = ", id, " is outside [0, ", tokens.size(),
                    "): ids must be 0, 1, ... without gaps"));
    if (seen[id])
      r.fail(
          concat("model.vocab: id ", id, " is given to both '", tokens[id], "' and '", token, "'"));
    seen[id] = true;
    tokens[id] = token;
  }
  // n distinct ids in [0, n) leave no gap.
  return tokens;
}

// The single-sequence template of the post-processor: the token before the
// text and the token after it ("" for none).
std::pair<std::string, std::string> read_post_processor(const json* post,
                                                        const std::vector<std::string>& vocab,
                                                        const JsonReader& r) {
  // The id the file gives a special token must be the token's own id.
  const auto check_id = [&](const std::string& token, const json& id) {
    r.check(id.is_number_integer() && id.get<int64_t>() >= 0 &&
                id.get<int64_t>() < static_cast<int64_t>(vocab.size()) &&
                vocab[id.get<int64_t>()] == token,
            concat("post_processor: special token '", token, "' is given id ", json_excerpt(id),
                   ", which is not its id in the vocabulary"));
  };
  if (!post) return {"", ""};
  const std::string type = r.type_of(*post, "post_processor");
  if (type == "BertProcessing") {
    const auto token = [&](const char* key) {
      const json* pair = r.find(*post, key);
      r.check(pair && pair->is_array() && pair->size() == 2 && (*pair)[0].is_string(),
              concat("post_processor.", key, " must be [token, id]"));
      check_id((*pair)[0].get<std::string>(), (*pair)[1]);
      return (*pair)[0].get<std::string>();
    };
    return {token("cls"), token("sep")};
  }
  r.check(
      type == "TemplateProcessing",
      "post_processor.type '" + type + "' is not supported (TemplateProcessing or BertProcessing)");
  const json* single = r.find(*post, "single");
  r.check(single && single->is_array(), "post_processor.single must be a list");
  const json* specials = r.find(*post, "special_tokens");
  std::vector<std::string> before, after;
  bool sequence_seen = false;
  // Each piece's type id becomes the token type the model sees; qkv encodes
  // none (BertModel then takes 0 for every token), so only 0 is read exactly.
  const auto check_type_id = [&](const json& inner) {
    const json* type_id = inner.is_object() ? r.find(inner, "type_id") : nullptr;
    r.check(!type_id || *type_id == 0,
            "post_processor.single: type_id " + (type_id ? json_excerpt(*type_id) : "") + " in " +
                json_excerpt(inner) +
                "; qkv gives every token of a single text type 0, as the template must");
  };
  for (const json& piece : *single) {
    if (piece.is_object() && piece.contains("Sequence")) {
      check_type_id(piece["Sequence"]);
      r.check(!sequence_seen, "post_processor.single has the sequence twice");
      sequence_seen = true;
      continue;
    }
    r.check(piece.is_object() && piece.contains("SpecialToken") &&
                piece["SpecialToken"].is_object() && piece["SpecialToken"].contains("id") &&
                piece["SpecialToken"]["id"].is_string(),
            "post_processor.single: expected {\"SpecialToken\": {\"id\": ...}} or "
            "{\"Sequence\": ...}, got " +
                json_excerpt(piece));
    check_type_id(piece["SpecialToken"]);
    const std::string name = piece["SpecialToken"]["id"].get<std::string>();
    // The special token's entry lists the tokens it stands for.
    r.check(specials && specials->is_object() && specials->contains(name),
            "post_processor.special_tokens has no entry '" + name + "'");
    const json& entry = (*specials)[name];
    r.check(entry.contains("tokens") && entry["tokens"].is_array() && entry["tokens"].size() == 1 &&
                entry["tokens"][0].is_string(),
            "post_processor.special_tokens['" + name +
                "'] must stand for exactly one token (\"tokens\": [token])");
    if (entry.contains("ids") && entry["ids"].is_array() && entry["ids"].size() == 1)
      check_id(entry["tokens"][0].get<std::string>(), entry["ids"][0]);
    (sequence_seen ? after : before).push_back(entry["tokens"][0].get<std::string>());
  }
  r.check(sequence_seen, "post_processor.single has no {\"Sequence\": ...}");
  r.check(before.size() <= 1 && after.size() <= 1,
          "post_processor.single: only one special token before and one after the sequence "
          "are supported, got " +
              json_excerpt(*single));
  return {before.empty() ? "" : before[0], after.empty() ? "" : after[0]};
}

detail::NormalizerOptions normalizer_options(const WordPieceOptions& options) {
  detail::NormalizerOptions normalizer;
  normalizer.clean_text = options.clean_text;
  normalizer.split_chinese_chars = options.split_chinese_chars;
  normalizer.strip_accents = options.strip_accents;
  normalizer.lowercase = options.lowercase;
  return normalizer;
}

}  // namespace

WordPieceTokenizer WordPieceTokenizer::from_json(const std::filesystem::path& tokenizer_json) {
  const std::string text = io::read_text_file(tokenizer_json, "WordPieceTokenizer::from_json");
  const JsonReader r(tokenizer_json.string());
  const json root =
      io::parse_json(text, "WordPieceTokenizer::from_json: '" + tokenizer_json.string() + "'");
  r.check(root.is_object(), "the top level must be an object");
  WordPieceOptions options;

  // The model: vocabulary and word-piece settings.
  const json* model = r.find(root, "model");
  r.check(model != nullptr, "no \"model\"");
  const std::string model_type = r.type_of(*model, "model");
  r.check(model_type == "WordPiece" || model_type.empty(),
          "model.type is '" + model_type + "', expected 'WordPiece'");
  const json* vocab = r.find(*model, "vocab");
  r.check(vocab != nullptr, "model.vocab is missing");
  std::vector<std::string> tokens = read_json_vocab(*vocab, r);
  const auto model_size = static_cast<int64_t>(tokens.size());
  options.unk_token = r.get_string(*model, "unk_token", options.unk_token, "model");
  options.continuing_prefix =
      r.get_string(*model, "continuing_subword_prefix", options.continuing_prefix, "model");
  options.max_input_chars_per_word =
      r.get_int(*model, "max_input_chars_per_word", options.max_input_chars_per_word, "model");

  // The normaliser; none means the text goes to the pre-tokeniser as it is.
  if (const json* normalizer = r.find(root, "normalizer")) {
    const std::string type = r.type_of(*normalizer, "normalizer");
    r.check(type == "BertNormalizer",
            "normalizer.type '" + type + "' is not supported (BertNormalizer or null)");
    options.clean_text = r.get_bool(*normalizer, "clean_text", true, "normalizer");
    options.split_chinese_chars =
        r.get_bool(*normalizer, "handle_chinese_chars", true, "normalizer");
    options.lowercase = r.get_bool(*normalizer, "lowercase", true, "normalizer");
    // strip_accents: null follows lowercase, as in BERT.
    options.strip_accents =
        r.get_bool(*normalizer, "strip_accents", options.lowercase, "normalizer");
  } else {
    options.clean_text = options.split_chinese_chars = false;
    options.lowercase = options.strip_accents = false;
  }

  const json* pre = r.find(root, "pre_tokenizer");
  r.check(pre != nullptr, "pre_tokenizer is null; expected BertPreTokenizer");
  const std::string pre_type = r.type_of(*pre, "pre_tokenizer");
  r.check(pre_type == "BertPreTokenizer",
          "pre_tokenizer.type '" + pre_type + "' is not supported (BertPreTokenizer)");

  // Added tokens: those in the model vocabulary keep their id; new ones
  // extend it, in id order, without gaps.
  std::vector<AddedToken> added;
  options.special_tokens.clear();
  if (const json* list = r.find(root, "added_tokens")) {
    r.check(list->is_array(), "added_tokens must be a list");
    for (const json& entry : *list) {
      r.check(entry.is_object() && entry.contains("content") && entry["content"].is_string() &&
                  entry.contains("id") && entry["id"].is_number_integer() &&
                  entry["id"].get<int64_t>() >= 0,
              "added_tokens: each entry needs a string \"content\" and an integer \"id\" >= 0, "
              "got " +
                  json_excerpt(entry));
      AddedToken token;
      token.content = entry["content"].get<std::string>();
      r.check(!token.content.empty(), "added_tokens: empty content");
      token.id = entry["id"].get<int64_t>();
      token.single_word = r.get_bool(entry, "single_word", false, "added_tokens[]");
      token.lstrip = r.get_bool(entry, "lstrip", false, "added_tokens[]");
      token.rstrip = r.get_bool(entry, "rstrip", false, "added_tokens[]");
      token.normalized = r.get_bool(entry, "normalized", true, "added_tokens[]");
      added.push_back(std::move(token));
    }
    std::stable_sort(added.begin(), added.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
    for (const AddedToken& token : added) {
      const auto n = static_cast<int64_t>(tokens.size());
      if (token.id < n) {
        r.check(tokens[token.id] == token.content,
                concat("added token '", token.content, "' has id ", token.id, ", which is '",
                       tokens[token.id], "' in the vocabulary"));
      } else {
        r.check(token.id == n, concat("added token '", token.content, "' has id ", token.id,
                                      "; the next free id is ", n, " (no gaps allowed)"));
        tokens.push_back(token.content);
      }
      options.special_tokens.push_back(token.content);
    }
  }

  // After the added tokens: [CLS] and [SEP] may be among them.
  std::tie(options.cls_token, options.sep_token) =
      read_post_processor(r.find(root, "post_processor"), tokens, r);

  // Truncation and padding as tokenizers applies them by default.
  options.max_length = 0;
  if (const json* truncation = r.find(root, "truncation")) {
    r.check(truncation->is_object(), "truncation must be an object or null");
    const json* max_length = r.find(*truncation, "max_length");
    r.check(max_length != nullptr, "truncation.max_length is missing");
    options.max_length = r.get_int(*truncation, "max_length", 0, "truncation");
    const std::string direction = r.get_string(*truncation, "direction", "Right", "truncation");
    r.check(direction == "Right" || direction == "Left",
            "truncation.direction must be 'Right' or 'Left', got '" + direction + "'");
    options.truncate_left = direction == "Left";
    // One text: LongestFirst and OnlyFirst cut it alike; OnlySecond has no
    // second text to cut, and tokenizers fails on it.
    const std::string strategy =
        r.get_string(*truncation, "strategy", "LongestFirst", "truncation");
    r.check(strategy == "LongestFirst" || strategy == "OnlyFirst",
            "truncation.strategy must be 'LongestFirst' or 'OnlyFirst', got '" + strategy + "'");
  }
  options.pad_token = "";
  if (const json* padding = r.find(root, "padding")) {
    r.check(padding->is_object(), "padding must be an object or null");
    const json* strategy = r.find(*padding, "strategy");
    if (strategy && strategy->is_object()) {
      options.pad_to_length = r.get_int(*strategy, "Fixed", 0, "padding.strategy");
      r.check(options.pad_to_length > 0,
              "padding.strategy must be \"BatchLongest\" or "
              "{\"Fixed\": n} with n > 0, got " +
                  json_excerpt(*strategy));
    } else {
      r.check(!strategy || *strategy == "BatchLongest",
              "padding.strategy must be \"BatchLongest\" or {\"Fixed\": n}, got " +
                  (strategy ? json_excerpt(*strategy) : std::string("null")));
    }
    const std::string direction = r.get_string(*padding, "direction", "Right", "padding");
    r.check(direction == "Right" || direction == "Left",
            "padding.direction must be 'Right' or 'Left', got '" + direction + "'");
    options.pad_left = direction == "Left";
    options.pad_to_multiple_of = r.get_int(*padding, "pad_to_multiple_of", 0, "padding");
    options.pad_token = r.get_string(*padding, "pad_token", "[PAD]", "padding");
    const auto it = std::find(tokens.begin(), tokens.end(), options.pad_token);
    r.check(it != tokens.end(),
            "padding.pad_token '" + options.pad_token + "' is not in the vocabulary");
    const int64_t pad_id = r.get_int(*padding, "pad_id", it - tokens.begin(), "padding");
    r.check(pad_id == it - tokens.begin(),
            concat("padding.pad_id is ", pad_id, " but '", options.pad_token, "' has id ",
                   it - tokens.begin()));
  } else if (std::find(tokens.begin(), tokens.end(), "[PAD]") != tokens.end()) {
    options.pad_token = "[PAD]";
  }

  try {
    return WordPieceTokenizer(std::move(tokens), model_size, std::move(options), std::move(added));
  } catch (const Error& e) {
    r.fail(e.what());
  }
}

WordPieceTokenizer WordPieceTokenizer::from_vocab(const std::filesystem::path& vocab_txt,
                                                  WordPieceOptions options) {
  const std::string text = io::read_text_file(vocab_txt, "WordPieceTokenizer::from_vocab");
  const std::string where = "WordPieceTokenizer::from_vocab: '" + vocab_txt.string() + "': ";
  std::vector<std::string> tokens;
  std::unordered_map<std::string_view, size_t> line_of;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + begin, end - begin);
    // tokenizers trims trailing whitespace (and so "\r" of CRLF files).
    while (!line.empty() && std::strchr(" \t\r\v\f", line.back()) != nullptr) line.remove_suffix(1);
    const size_t number = tokens.size() + 1;
    QKV_CHECK(!line.empty(), where, "line ", number, " is empty; every line must hold a token");
    const auto [it, fresh] = line_of.emplace(line, number);
    QKV_CHECK(fresh, where, "line ", number, ": token '", line, "' already on line ", it->second);
    tokens.emplace_back(line);
    begin = end + 1;
  }
  QKV_CHECK(!tokens.empty(), where, "the file holds no tokens");
  std::vector<AddedToken> added;
  for (const std::string& content : options.special_tokens) {
    QKV_CHECK(!content.empty(), where, "a special token is the empty string");
    const auto it = line_of.find(content);
    QKV_CHECK(it != line_of.end(), where, "special token '", content, "' is not in the vocabulary");
    AddedToken token;
    token.content = content;
    token.id = static_cast<int64_t>(it->second) - 1;
    added.push_back(std::move(token));
  }
  const auto model_size = static_cast<int64_t>(tokens.size());
  try {
    return WordPieceTokenizer(std::move(tokens), model_size, std::move(options), std::move(added));
  } catch (const Error& e) {
    throw Error(e.kind(), where + e.what());
  }
}

WordPieceTokenizer::WordPieceTokenizer(std::vector<std::string> tokens, int64_t model_size,
                                       WordPieceOptions options, std::vector<AddedToken> added)
    : tokens_(std::move(tokens)), model_size_(model_size), options_(std::move(options)) {
  ids_.reserve(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    ids_.emplace(tokens_[i], static_cast<int64_t>(i));
    if (static_cast<int64_t>(i) < model_size_)
      longest_token_ = std::max(longest_token_, tokens_[i].size());
  }
  const auto resolve = [&](const std::string& token, const char* what) -> int64_t {
    if (token.empty()) return -1;
    const int64_t id = token_to_id(token);
    QKV_CHECK(id >= 0, what, " '", token, "' is not in the vocabulary");
    return id;
  };
  unk_id_ = resolve(options_.unk_token, "the unknown token");
  QKV_CHECK(unk_id_ >= 0 && unk_id_ < model_size_, "the unknown token '", options_.unk_token,
            "' is not in the model vocabulary");
  cls_id_ = resolve(options_.cls_token, "the [CLS] token");
  sep_id_ = resolve(options_.sep_token, "the [SEP] token");
  pad_id_ = resolve(options_.pad_token, "the padding token");
  set_max_length(options_.max_length);
  set_padding(options_.pad_to_length, options_.pad_to_multiple_of);

  // Longest contents first, so that the first match at a position is the
  // longest one (tokenizers' leftmost-longest matching).
  std::stable_sort(added.begin(), added.end(), [](const AddedToken& a, const AddedToken& b) {
    return a.content.size() > b.content.size();
  });
  const detail::NormalizerOptions normalizer = normalizer_options(options_);
  for (AddedToken& token : added) {
    std::u32string decoded;
    detail::decode_utf8(token.content, decoded);
    if (token.normalized) {
      detail::normalize(decoded, normalizer, token.pattern);
      if (token.pattern.empty()) continue;  // never matches anything
      normalized_added_.push_back(std::move(token));
    } else {
      token.pattern = std::move(decoded);
      raw_added_.push_back(std::move(token));
    }
  }
}

void WordPieceTokenizer::set_max_length(int64_t max_length) {
  const int64_t specials = (cls_id_ >= 0) + (sep_id_ >= 0);
  QKV_CHECK(max_length == 0 || max_length >= specials, "WordPieceTokenizer: max_length ",
            max_length, " must be 0 (no truncation) or at least ", specials,
            " (room for the special tokens)");
  options_.max_length = max_length;
}

void WordPieceTokenizer::set_padding(int64_t pad_to_length, int64_t pad_to_multiple_of) {
  QKV_CHECK(pad_to_length >= 0 && pad_to_multiple_of >= 0 && pad_to_length <= kMaxPadding &&
                pad_to_multiple_of <= kMaxPadding,
            "WordPieceTokenizer: pad_to_length (", pad_to_length, ") and pad_to_multiple_of (",
            pad_to_multiple_of, ") must be in [0, ", kMaxPadding, "]");
  options_.pad_to_length = pad_to_length;
  options_.pad_to_multiple_of = pad_to_multiple_of;
}

int64_t WordPieceTokenizer::token_to_id(std::string_view token) const {
  const auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

const std::string& WordPieceTokenizer::id_to_token(int64_t id) const {
  QKV_CHECK(id >= 0 && id < vocab_size(), "WordPieceTokenizer::id_to_token: id ", id,
            " is out of range [0, ", vocab_size(), ")");
  return tokens_[static_cast<size_t>(id)];
}

namespace {

// Buffers reused by every call on a thread, so that tokenizing allocates only
// for its result.
struct Scratch {
  std::u32string decoded;
  std::u32string normalized;
  std::string word;
  std::string key;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

struct Match {
  size_t begin, end;  // code points, after lstrip/rstrip
  const WordPieceTokenizer::AddedToken* token;
};

// tokenizers' AddedVocabulary::find_matches: leftmost-longest matches of
// `tokens` (sorted longest first) in `text`, then single_word, lstrip, rstrip.
template <class OnMatch>
void for_each_match(std::u32string_view text,
                    const std::vector<WordPieceTokenizer::AddedToken>& tokens, OnMatch&& on_match) {
  if (tokens.empty()) return;
  size_t taken = 0;  // end of the previous match
  size_t i = 0;
  while (i < text.size()) {
    const WordPieceTokenizer::AddedToken* found = nullptr;
    for (const auto& token : tokens) {
      if (token.pattern[0] == text[i] && text.substr(i, token.pattern.size()) == token.pattern) {
        found = &token;
        break;
      }
    }
    if (!found) {
      ++i;
      continue;
    }
    size_t begin = i, end = i + found->pattern.size();
    i = end;
    if (found->single_word) {
      const bool alone_left = begin == 0 || !detail::is_word_char(text[begin - 1]);
      const bool alone_right = end == text.size() || !detail::is_word_char(text[end]);
      if (!alone_left || !alone_right) continue;
    }
    if (found->lstrip)
      while (begin > taken && detail::is_whitespace(text[begin - 1])) --begin;
    if (found->rstrip)
      while (end < text.size() && detail::is_whitespace(text[end])) ++end;
    begin = std::max(begin, taken);
    on_match(Match{begin, end, found});
    taken = end;
    i = std::max(i, end);
  }
}

// The text a match covers, whitespace taken by lstrip/rstrip included: the
// token string tokenizers reports for an added token.
std::string to_utf8(std::u32string_view text, const Match& m) {
  std::string out;
  for (char32_t cp : text.substr(m.begin, m.end - m.begin)) detail::append_utf8(cp, out);
  return out;
}

}  // namespace

void WordPieceTokenizer::append_ids(std::string_view text, std::vector<int64_t>& ids,
                                    std::vector<std::string>* pieces) const {
  Scratch& s = scratch();
  s.decoded.clear();
  detail::decode_utf8(text, s.decoded);
  const detail::NormalizerOptions normalizer = normalizer_options(options_);
  // Normalises decoded[begin, end) and tokenizes it; the normalised text is
  // kept in a local string because of the nested normalised-token matching.
  const auto segment = [&](size_t begin, size_t end) {
    if (begin >= end) return;
    s.normalized.clear();
    detail::normalize(std::u32string_view(s.decoded).substr(begin, end - begin), normalizer,
                      s.normalized);
    if (normalized_added_.empty()) {
      append_normalized_segment(s.normalized, ids, pieces);
      return;
    }
    const std::u32string normalized = s.normalized;
    size_t done = 0;
    for_each_match(normalized, normalized_added_, [&](const Match& m) {
      append_normalized_segment(std::u32string_view(normalized).substr(done, m.begin - done), ids,
                                pieces);
      ids.push_back(m.token->id);
      if (pieces) pieces->push_back(to_utf8(std::u32string_view(normalized), m));
      done = m.end;
    });
    append_normalized_segment(std::u32string_view(normalized).substr(done), ids, pieces);
  };
  size_t done = 0;
  // `segment` reuses s.normalized but never s.decoded, so the view stays valid.
  std::vector<Match> matches;
  for_each_match(s.decoded, raw_added_, [&](const Match& m) { matches.push_back(m); });
  for (const Match& m : matches) {
    segment(done, m.begin);
    ids.push_back(m.token->id);
    if (pieces) pieces->push_back(to_utf8(s.decoded, m));
    done = m.end;
  }
  segment(done, s.decoded.size());
}

void WordPieceTokenizer::append_normalized_segment(std::u32string_view normalized,
                                                   std::vector<int64_t>& ids,
                                                   std::vector<std::string>* pieces) const {
  Scratch& s = scratch();
  detail::pre_tokenize(normalized, s.word, [&](std::string_view word, int64_t chars) {
    append_word_pieces(word, chars, ids, pieces);
  });
}

void WordPieceTokenizer::append_word_pieces(std::string_view word, int64_t chars,
                                            std::vector<int64_t>& ids,
                                            std::vector<std::string>* pieces) const {
  const size_t first = ids.size();
  const auto unknown = [&] {
    ids.resize(first);
    if (pieces) pieces->resize(first);
    ids.push_back(unk_id_);
    if (pieces) pieces->push_back(options_.unk_token);
  };
  if (chars > options_.max_input_chars_per_word) return unknown();
  // key = prefix-sized room + word; the piece starting at byte `start` > 0 is
  // looked up as key[start, start + p + length) after writing the prefix
  // over key[start, start + p), i.e. over bytes of the word already consumed.
  const std::string& prefix = options_.continuing_prefix;
  const size_t p = prefix.size();
  std::string& key = scratch().key;
  key.assign(p, '\0');
  key.append(word);
  const auto boundary = [&](size_t k) {
    return k >= word.size() || (static_cast<unsigned char>(word[k]) & 0xC0) != 0x80;
  };
  size_t start = 0;
  while (start < word.size()) {
    if (start > 0) std::memcpy(key.data() + start, prefix.data(), p);
    size_t end = std::min(word.size(), start + longest_token_);
    while (!boundary(end)) --end;
    int64_t id = -1;
    while (end > start) {
      const std::string_view candidate =
          start == 0 ? word.substr(0, end) : std::string_view(key).substr(start, p + end - start);
      const auto it = ids_.find(candidate);
      if (it != ids_.end() && it->second < model_size_) {
        id = it->second;
        break;
      }
      do --end;
      while (!boundary(end));
    }
    if (id < 0) return unknown();
    ids.push_back(id);
    if (pieces) pieces->push_back(tokens_[static_cast<size_t>(id)]);
    start = end;
  }
}

std::vector<std::string> WordPieceTokenizer::basic_tokenize(std::string_view text) const {
  std::u32string decoded, normalized;
  detail::decode_utf8(text, decoded);
  detail::normalize(decoded, normalizer_options(options_), normalized);
  std::vector<std::string> words;
  std::string scratch_word;
  detail::pre_tokenize(normalized, scratch_word,
                       [&](std::string_view word, int64_t) { words.emplace_back(word); });
  return words;
}

std::vector<std::string> WordPieceTokenizer::tokenize(std::string_view text) const {
  std::vector<int64_t> ids;
  std::vector<std::string> pieces;
  append_ids(text, ids, &pieces);
  return pieces;
}

std::vector<int64_t> WordPieceTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  if (cls_id_ >= 0) ids.push_back(cls_id_);
  append_ids(text, ids, nullptr);
  const size_t specials = (cls_id_ >= 0) + (sep_id_ >= 0);
  if (options_.max_length > 0 && ids.size() + (sep_id_ >= 0) > size_t(options_.max_length)) {
    const size_t keep = static_cast<size_t>(options_.max_length) - specials;
    const size_t offset = cls_id_ >= 0 ? 1 : 0;
    if (options_.truncate_left) {
      ids.erase(ids.begin() + offset, ids.end() - keep);
    } else {
      ids.resize(offset + keep);
    }
  }
  if (sep_id_ >= 0) ids.push_back(sep_id_);
  return ids;
}

EncodedBatch WordPieceTokenizer::encode_batch(const std::vector<std::string>& texts) const {
  std::vector<std::vector<int64_t>> rows(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) rows[i] = encode(texts[i]);
  EncodedBatch batch;
  batch.batch = static_cast<int64_t>(texts.size());
  int64_t length = options_.pad_to_length;
  for (const auto& row : rows) {
    batch.lengths.push_back(static_cast<int64_t>(row.size()));
    length = std::max(length, static_cast<int64_t>(row.size()));
  }
  const int64_t multiple = options_.pad_to_multiple_of;
  if (multiple > 0 && length % multiple != 0) length += multiple - length % multiple;
  batch.length = length;
  // (The rounding cannot overflow: pad_to_multiple_of <= kMaxPadding.)
  int64_t total = 0;
  QKV_CHECK(!__builtin_mul_overflow(batch.batch, length, &total) && total <= kMaxBatchIds,
            "WordPieceTokenizer::encode_batch: ", batch.batch, " texts padded to ", length,
            " tokens (pad_to_length ", options_.pad_to_length, ", pad_to_multiple_of ", multiple,
            ") would be more than the limit of ", kMaxBatchIds,
            " ids; encode fewer texts at a time or pad less");
  const auto n = static_cast<size_t>(batch.batch * length);
  batch.ids.assign(n, pad_id_);
  batch.attention_mask.assign(n, 0);
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    QKV_CHECK(pad_id_ >= 0 || static_cast<int64_t>(row.size()) == length,
              "WordPieceTokenizer::encode_batch: text ", i,
              " needs padding but the tokenizer "
              "has no padding token");
    const size_t offset = i * length + (options_.pad_left ? length - row.size() : 0);
    std::copy(row.begin(), row.end(), batch.ids.begin() + offset);
    std::fill_n(batch.attention_mask.begin() + offset, row.size(), 1);
  }
  return batch;
}

}  // namespace qkv::text
