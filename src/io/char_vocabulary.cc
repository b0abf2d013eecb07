// io::CharVocabulary: byte and character vocabularies, longest-match encoding.
#include "qkv/io/char_vocabulary.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "io/json_document.h"
#include "qkv/error.h"

namespace qkv::io {

namespace {

// Byte length of the UTF-8 character starting at text[i], or 0 if invalid.
size_t utf8_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  const size_t n = c < 0x80           ? 1
                   : (c >> 5) == 0x6  ? 2
                   : (c >> 4) == 0xE  ? 3
                   : (c >> 3) == 0x1E ? 4
                                      : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  return n;
}

bool valid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_length(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// "'a'" for printable ASCII, else the bytes in hex ("0xe2 0x82").
std::string describe(std::string_view s) {
  // (Built by appending: GCC 12 warns falsely about "'" + std::string.)
  if (s.size() == 1 && s[0] >= 0x20 && s[0] < 0x7F) return std::string("'").append(s) += '\'';
  std::string out;
  char buffer[8];
  for (unsigned char c : s) {
    std::snprintf(buffer, sizeof buffer, "%s0x%02x", out.empty() ? "" : " ", c);
    out += buffer;
  }
  return out;
}

}  // namespace

CharVocabulary CharVocabulary::bytes() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  CharVocabulary vocab(std::move(tokens));
  vocab.is_bytes_ = true;
  return vocab;
}

CharVocabulary CharVocabulary::from_text(std::string_view text) {
  std::set<std::string> chars;  // UTF-8 byte order is code point order
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_length(text, i);
    QKV_CHECK(n > 0, "CharVocabulary::from_text: invalid UTF-8 at byte ", i);
    chars.emplace(text.substr(i, n));
    i += n;
  }
  QKV_CHECK(!chars.empty(), "CharVocabulary::from_text: the text is empty");
  return CharVocabulary(std::vector<std::string>(chars.begin(), chars.end()));
}

CharVocabulary::CharVocabulary(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {
  QKV_CHECK(!tokens_.empty(), "CharVocabulary: the token list is empty");
  for (size_t i = 0; i < tokens_.size(); ++i) {
    QKV_CHECK(!tokens_[i].empty(), "CharVocabulary: token ", i, " is the empty string");
    const bool fresh = ids_.emplace(tokens_[i], static_cast<int64_t>(i)).second;
    QKV_CHECK(fresh, "CharVocabulary: token ", i, " (", describe(tokens_[i]),
              ") appears twice; tokens must be distinct");
    longest_ = std::max(longest_, tokens_[i].size());
  }
}

std::vector<int64_t> CharVocabulary::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  for (size_t i = 0; i < text.size();) {
    bool found = false;
    for (size_t n = std::min(longest_, text.size() - i); n > 0 && !found; --n) {
      const auto it = ids_.find(text.substr(i, n));
      if (it == ids_.end()) continue;
      ids.push_back(it->second);
      i += n;
      found = true;
    }
    if (found) continue;
    const size_t n = std::max<size_t>(utf8_length(text, i), 1);
    QKV_CHECK(false, "CharVocabulary::encode: the character ", describe(text.substr(i, n)),
              " at byte ", i, " is not in the vocabulary of ", tokens_.size(), " tokens");
  }
  return ids;
}

std::string CharVocabulary::decode(int64_t id) const {
  QKV_CHECK(id >= 0 && id < size(), "CharVocabulary::decode: id ", id, " is out of range [0, ",
            size(), ")");
  return tokens_[static_cast<size_t>(id)];
}

std::string CharVocabulary::decode(std::span<const int64_t> ids) const {
  std::string text;
  for (int64_t id : ids) text += decode(id);
  return text;
}

std::string CharVocabulary::to_json() const {
  if (is_bytes_) return "\"bytes\"";
  // Non-UTF-8 tokens (single bytes) could not be stored as JSON strings.
  for (const std::string& t : tokens_)
    QKV_CHECK(valid_utf8(t), "CharVocabulary::to_json: token ", describe(t), " is not valid UTF-8");
  return nlohmann::json(tokens_).dump();
}

CharVocabulary CharVocabulary::from_json(const std::string& text) {
  const nlohmann::json j = parse_json(text, "CharVocabulary::from_json");
  if (j.is_string() && j.get<std::string>() == "bytes") return bytes();
  QKV_CHECK(j.is_array(), "CharVocabulary::from_json: expected a list of token strings or ",
            "\"bytes\", got ", json_excerpt(j));
  std::vector<std::string> tokens;
  for (const auto& t : j) {
    QKV_CHECK(t.is_string(), "CharVocabulary::from_json: token ", tokens.size(),
              " is not a string: ", json_excerpt(t));
    tokens.push_back(t.get<std::string>());
  }
  return CharVocabulary(std::move(tokens));
}

}  // namespace qkv::io
