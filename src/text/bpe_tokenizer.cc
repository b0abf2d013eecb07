// BPE tokenizers: vocabulary checks, special-token matching, byte-level
// merges by rank ("gpt2"), decoding. The "llama" model's merges are in
// sentencepiece_encode.cc.
#include "qkv/text/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <limits>
#include <mutex>
#include <queue>

#include "qkv/error.h"
#include "text/basic_tokenizer.h"
#include "text/bpe_pretokenizer.h"
#include "text/bpe_symbols.h"
#include "text/byte_fallback.h"

namespace qkv::text {

// Control and user-defined tokens as a byte trie: at each position of the
// text the longest one starting there is found in O(its length), as
// tokenizers' leftmost-longest matching.
struct BpeTokenizer::Special {
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // byte -> node
    int32_t id = -1;                                    // token ending here
  };
  std::vector<Node> nodes{Node{}};

  void add(std::string_view text, int32_t id) {
    int32_t node = 0;
    for (const char c : text) {
      const auto byte = static_cast<uint8_t>(c);
      auto& children = nodes[node].children;
      const auto it = std::find_if(children.begin(), children.end(),
                                   [&](const auto& child) { return child.first == byte; });
      if (it != children.end()) {
        node = it->second;
      } else {
        const auto next = static_cast<int32_t>(nodes.size());
        nodes[node].children.emplace_back(byte, next);
        nodes.emplace_back();
        node = next;
      }
    }
    nodes[node].id = id;
  }

  // (id, length) of the longest token at the start of `text`; id -1 if none.
  std::pair<int32_t, size_t> match(std::string_view text) const {
    std::pair<int32_t, size_t> best{-1, 0};
    int32_t node = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      const auto byte = static_cast<uint8_t>(text[i]);
      const auto& children = nodes[node].children;
      const auto it = std::find_if(children.begin(), children.end(),
                                   [&](const auto& child) { return child.first == byte; });
      if (it == children.end()) break;
      node = it->second;
      if (nodes[node].id >= 0) best = {nodes[node].id, i + 1};
    }
    return best;
  }
};

// Ids of recently seen pieces. Words repeat (Zipf), so most pieces of a text
// skip the merge loop. Cleared when full rather than evicted one by one.
struct BpeTokenizer::Cache {
  static constexpr size_t kMaxEntries = 1 << 16;
  static constexpr size_t kMaxPieceBytes = 64;
  std::mutex mutex;
  std::unordered_map<std::string, std::vector<int32_t>> entries;
};

namespace {

constexpr int32_t kMaxTokens = std::numeric_limits<int32_t>::max();

std::string describe_id(const char* field, const std::optional<int32_t>& id) {
  return qkv::detail::concat("BpeVocabulary.", field, " = ", *id);
}

// "<0xAB>" -> 0xAB, else -1.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (const char c : text.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') {
      value |= c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value |= c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      value |= c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return value;
}

// A token's bytes: each character mapped back through bytes_to_unicode; a
// token with a character outside the table stands for its own UTF-8 (as
// tokenizers' ByteLevel decoder does).
std::string token_bytes(std::string_view text) {
  std::u32string chars;
  detail::decode_utf8(text, chars);
  std::string bytes;
  bytes.reserve(chars.size());
  for (const char32_t cp : chars) {
    const int byte = detail::char_to_byte(cp);
    if (byte < 0) return std::string(text);
    bytes.push_back(static_cast<char>(byte));
  }
  return bytes;
}

// Appends `bytes` to `out` as valid UTF-8: each maximal ill-formed
// subsequence becomes U+FFFD.
void append_lossy_utf8(std::string_view bytes, std::string& out) {
  std::u32string chars;
  detail::decode_utf8(bytes, chars);
  for (const char32_t cp : chars) detail::append_utf8(cp, out);
}

// A "llama" token's decoded bytes: "<0xNN>" is that byte (tokenizers'
// ByteFallback goes by the text, whatever the type), "▁" a space.
std::string sentencepiece_piece(std::string_view text) {
  if (const int byte = parse_byte_token(text); byte >= 0)
    return std::string(1, static_cast<char>(byte));
  std::string valid;
  append_lossy_utf8(text, valid);
  std::string out;
  out.reserve(valid.size());
  for (size_t i = 0; i < valid.size();) {
    if (valid.compare(i, 3, "\u2581") == 0) {
      out += ' ';
      i += 3;
    } else {
      out += valid[i++];
    }
  }
  return out;
}

bool is_special_type(BpeTokenType type) {
  return type == BpeTokenType::kControl || type == BpeTokenType::kUserDefined;
}

}  // namespace

BpeTokenizer::BpeTokenizer(BpeVocabulary vocabulary)
    : vocabulary_(std::move(vocabulary)), cache_(std::make_shared<Cache>()) {
  const auto& tokens = vocabulary_.tokens;
  auto& types = vocabulary_.token_types;
  QKV_CHECK(!tokens.empty(), "BpeVocabulary.tokens is empty");
  QKV_CHECK(tokens.size() < static_cast<size_t>(kMaxTokens), "BpeVocabulary.tokens has ",
            tokens.size(), " tokens, more than int32 ids can number");
  if (types.empty()) types.assign(tokens.size(), static_cast<int32_t>(BpeTokenType::kNormal));
  QKV_CHECK(types.size() == tokens.size(), "BpeVocabulary.token_types has ", types.size(),
            " entries, expected one per token (", tokens.size(), ")");

  const std::string& model = vocabulary_.model;
  QKV_CHECK(model == "gpt2" || model == "llama", "BpeVocabulary.model \"", model,
            "\" is not supported; expected \"gpt2\" (byte-level BPE) or \"llama\" "
            "(SentencePiece-style BPE)");
  sentencepiece_ = model == "llama";
  if (!sentencepiece_) {
    const std::string& pre = vocabulary_.pre_tokenizer;
    const auto split = detail::bpe_split_named(pre);
    QKV_CHECK(split.has_value(), "BpeVocabulary.pre_tokenizer \"", pre,
              "\" is not supported; expected \"gpt2\", \"smollm\", \"qwen2\" or \"llama-bpe\"");
    pre_tokenizer_ = static_cast<int>(*split);
    QKV_CHECK(vocabulary_.scores.empty(), "BpeVocabulary.scores has ", vocabulary_.scores.size(),
              " entries; the \"gpt2\" model merges by its merges and takes none");
  }

  for (const auto* field : {"bos", "eos", "unk", "pad"}) {
    const std::string_view name(field);
    const auto& id = name == "bos"   ? vocabulary_.bos
                     : name == "eos" ? vocabulary_.eos
                     : name == "unk" ? vocabulary_.unk
                                     : vocabulary_.pad;
    QKV_CHECK(!id || (*id >= 0 && *id < size()), describe_id(field, id),
              " is not a token id; expected 0 <= id < ", size());
  }

  auto special = std::make_shared<Special>();
  ids_ = TokenIndex(tokens.size());
  piece_ends_.reserve(tokens.size());
  for (int32_t id = 0; id < size(); ++id) {
    const std::string& text = tokens[id];
    const int32_t type = types[id];
    QKV_CHECK(type >= 0 && type <= 6, "BpeVocabulary.token_types[", id, "] = ", type,
              " is not a GGUF token type; expected 0 to 6");
    const int32_t duplicate = ids_.insert(id, tokens);
    QKV_CHECK(duplicate < 0, "BpeVocabulary.tokens[", id, "] = \"", text,
              "\" is a duplicate of tokens[", duplicate, "]");
    const auto kind = static_cast<BpeTokenType>(type);
    if (is_special_type(kind)) {
      QKV_CHECK(!text.empty(), "BpeVocabulary.tokens[", id, "] is empty; a ",
                kind == BpeTokenType::kControl ? "control" : "user-defined",
                " token needs text to be matched");
      special->add(text, id);
      add_piece(sentencepiece_ ? sentencepiece_piece(text) : text);
    } else if (sentencepiece_) {
      add_piece(sentencepiece_piece(text));
    } else if (const int byte = parse_byte_token(text); kind == BpeTokenType::kByte && byte >= 0) {
      add_piece(std::string(1, static_cast<char>(byte)));
    } else {
      add_piece(token_bytes(text));
    }
  }
  piece_bytes_.shrink_to_fit();
  if (special->nodes.size() > 1) special_ = std::move(special);
  if (sentencepiece_) {
    init_sentencepiece();
    return;
  }

  std::string one;
  for (int b = 0; b < 256; ++b) {
    one.clear();
    detail::append_utf8(detail::byte_to_char(static_cast<uint8_t>(b)), one);
    byte_ids_[b] = find_token(one).value_or(-1);
  }

  const auto& merges = vocabulary_.merges;
  QKV_CHECK(merges.size() < static_cast<size_t>(kMaxTokens), "BpeVocabulary.merges has ",
            merges.size(), " entries, too many");
  merges_.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string_view merge = merges[rank];
    const size_t space = merge.find(' ');
    QKV_CHECK(space != std::string_view::npos && space > 0 && space + 1 < merge.size() &&
                  merge.find(' ', space + 1) == std::string_view::npos,
              "BpeVocabulary.merges[", rank, "] = \"", merge,
              "\" is not two tokens separated by one space");
    const std::string_view left = merge.substr(0, space), right = merge.substr(space + 1);
    joined.assign(left).append(right);
    const auto a = find_token(left), b = find_token(right), ab = find_token(joined);
    QKV_CHECK(a && b && ab, "BpeVocabulary.merges[", rank, "] = \"", merge, "\": \"",
              !a   ? left
              : !b ? right
                   : std::string_view(joined),
              "\" is not a token");
    const uint64_t key = static_cast<uint64_t>(*a) << 32 | static_cast<uint32_t>(*b);
    const uint64_t value = static_cast<uint64_t>(rank) << 32 | static_cast<uint32_t>(*ab);
    const auto [existing, inserted] = merges_.emplace(key, value);
    QKV_CHECK(inserted, "BpeVocabulary.merges[", rank, "] = \"", merge,
              "\" is a duplicate of merges[", existing->second >> 32, "]");
  }
  // merges_ holds them now, by id; their text would be a second copy.
  vocabulary_.merges = {};
}

void BpeTokenizer::add_piece(std::string_view bytes) {
  piece_bytes_ += bytes;
  QKV_CHECK(piece_bytes_.size() <= UINT32_MAX, "BpeVocabulary.tokens: over 4 GiB of token text");
  piece_ends_.push_back(static_cast<uint32_t>(piece_bytes_.size()));
}

std::optional<int32_t> BpeTokenizer::find_token(std::string_view text) const {
  return ids_.find(text, vocabulary_.tokens);
}

const std::string& BpeTokenizer::token(int32_t id) const {
  QKV_CHECK(id >= 0 && id < size(), "token id ", id, " is out of range [0, ", size(), ")");
  return vocabulary_.tokens[id];
}

std::string_view BpeTokenizer::token_to_piece(int32_t id) const {
  QKV_CHECK(id >= 0 && id < size(), "token id ", id, " is out of range [0, ", size(), ")");
  const uint32_t begin = id > 0 ? piece_ends_[id - 1] : 0;
  return std::string_view(piece_bytes_).substr(begin, piece_ends_[id] - begin);
}

bool BpeTokenizer::is_byte_token(int32_t id) const {
  QKV_CHECK(id >= 0 && id < size(), "token id ", id, " is out of range [0, ", size(), ")");
  return sentencepiece_ && parse_byte_token(vocabulary_.tokens[id]) >= 0;
}

BpeTokenType BpeTokenizer::token_type(int32_t id) const {
  QKV_CHECK(id >= 0 && id < size(), "token id ", id, " is out of range [0, ", size(), ")");
  return static_cast<BpeTokenType>(vocabulary_.token_types[id]);
}

std::optional<int32_t> BpeTokenizer::id_of(std::string_view token) const {
  return find_token(token);
}

std::string BpeTokenizer::byte_token(uint8_t byte) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  return std::string("<0x") + kHex[byte >> 4] + kHex[byte & 15] + ">";
}

std::string BpeTokenizer::bytes_to_unicode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes)
    detail::append_utf8(detail::byte_to_char(static_cast<uint8_t>(c)), out);
  return out;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view utf8, bool add_special,
                                          bool parse_special) const {
  std::vector<int32_t> ids;
  if (add_special && vocabulary_.add_bos && vocabulary_.bos) ids.push_back(*vocabulary_.bos);
  if (parse_special && special_) {
    size_t start = 0;  // of the text not yet encoded
    for (size_t i = 0; i < utf8.size();) {
      const auto [id, length] = special_->match(utf8.substr(i));
      if (id < 0) {
        ++i;
        continue;
      }
      encode_text(utf8.substr(start, i - start), start == 0, ids);
      ids.push_back(id);
      i += length;
      start = i;
    }
    encode_text(utf8.substr(start), start == 0, ids);
  } else {
    encode_text(utf8, true, ids);
  }
  if (add_special && vocabulary_.add_eos && vocabulary_.eos) ids.push_back(*vocabulary_.eos);
  return ids;
}

std::vector<std::string> BpeTokenizer::pre_tokenize(std::string_view utf8) const {
  if (sentencepiece_) {
    if (utf8.empty()) return {};
    return {sentencepiece_normalize(utf8, true)};
  }
  std::u32string chars;
  detail::decode_utf8(utf8, chars);
  std::vector<std::pair<size_t, size_t>> ranges;
  detail::bpe_pre_tokenize(chars, static_cast<detail::BpeSplit>(pre_tokenizer_), ranges);
  std::vector<std::string> pieces(ranges.size());
  for (size_t p = 0; p < ranges.size(); ++p)
    for (size_t i = ranges[p].first; i < ranges[p].second; ++i)
      detail::append_utf8(chars[i], pieces[p]);
  return pieces;
}

// `at_start`: the text begins where the encoded text does (no special token before it).
void BpeTokenizer::encode_text(std::string_view utf8, bool at_start,
                               std::vector<int32_t>& ids) const {
  if (utf8.empty()) return;
  if (sentencepiece_) {
    encode_sentencepiece(sentencepiece_normalize(utf8, at_start), ids);
    return;
  }
  std::u32string chars;
  detail::decode_utf8(utf8, chars);
  std::vector<std::pair<size_t, size_t>> pieces;
  detail::bpe_pre_tokenize(chars, static_cast<detail::BpeSplit>(pre_tokenizer_), pieces);
  std::string bytes;
  for (const auto& [begin, end] : pieces) {
    bytes.clear();
    for (size_t i = begin; i < end; ++i) detail::append_utf8(chars[i], bytes);
    encode_piece(bytes, ids);
  }
}

// Merges within one piece, lowest rank first and leftmost first among equal
// ranks (tokenizers' BPE::merge_word): a heap of candidate pairs over a
// linked list of symbols, O(n log n) however long the piece.
void BpeTokenizer::encode_piece(std::string_view bytes, std::vector<int32_t>& ids) const {
  const bool cacheable = bytes.size() <= Cache::kMaxPieceBytes;
  if (cacheable) {
    std::lock_guard lock(cache_->mutex);
    const auto it = cache_->entries.find(std::string(bytes));
    if (it != cache_->entries.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }

  detail::BpeSymbols symbols;
  symbols.reserve(bytes.size());
  for (const char c : bytes) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id >= 0) symbols.push(id);  // a byte without a token is dropped, see the header
  }

  struct Candidate {
    uint32_t rank;
    int32_t left;   // symbol index
    int32_t right;  // symbol index expected to follow `left`
    int32_t merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto pair_key = [&](int32_t left, int32_t right) {
    return static_cast<uint64_t>(symbols.id(left)) << 32 | static_cast<uint32_t>(symbols.id(right));
  };
  const auto consider = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols.next(left);
    if (right < 0) return;
    const auto it = merges_.find(pair_key(left, right));
    if (it == merges_.end()) return;
    queue.push({static_cast<uint32_t>(it->second >> 32), left, right,
                static_cast<int32_t>(it->second & 0xFFFFFFFFu)});
  };
  for (int32_t i = 0; i + 1 < symbols.size(); ++i) consider(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    // Stale when either side has been merged away or changed since.
    if (!symbols.adjacent(c.left, c.right)) continue;
    const auto it = merges_.find(pair_key(c.left, c.right));
    if (it == merges_.end() || static_cast<int32_t>(it->second & 0xFFFFFFFFu) != c.merged) continue;
    symbols.merge(c.left, c.right, c.merged);
    consider(symbols.prev(c.left));
    consider(c.left);
  }

  const size_t first = ids.size();
  symbols.append_ids(ids);
  if (cacheable) {
    std::lock_guard lock(cache_->mutex);
    if (cache_->entries.size() >= Cache::kMaxEntries) cache_->entries.clear();
    cache_->entries.emplace(std::string(bytes),
                            std::vector<int32_t>(ids.begin() + first, ids.end()));
  }
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  if (sentencepiece_) {
    std::string text, run;  // run: bytes of consecutive byte tokens
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t id = ids[i];
      QKV_CHECK(id >= 0 && id < size(), "decode: ids[", i, "] = ", id, " is out of range [0, ",
                size(), ")");
      if (skip_special &&
          vocabulary_.token_types[id] == static_cast<int32_t>(BpeTokenType::kControl))
        continue;
      if (is_byte_token(id)) {
        run += token_to_piece(id);
        continue;
      }
      detail::append_byte_run(run, text);
      run.clear();
      text += token_to_piece(id);
    }
    detail::append_byte_run(run, text);
    // LlamaTokenizer's Strip decoder: the space the prefix put there.
    if (vocabulary_.add_space_prefix && !text.empty() && text[0] == ' ') text.erase(0, 1);
    return text;
  }
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    QKV_CHECK(id >= 0 && id < size(), "decode: ids[", i, "] = ", id, " is out of range [0, ",
              size(), ")");
    if (skip_special && vocabulary_.token_types[id] == static_cast<int32_t>(BpeTokenType::kControl))
      continue;
    bytes += token_to_piece(id);
  }
  std::string text;
  text.reserve(bytes.size());
  append_lossy_utf8(bytes, text);
  return text;
}

}  // namespace qkv::text
