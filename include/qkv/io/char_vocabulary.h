// Byte- and character-level vocabularies for small language models: the
// token ids a nn::DecoderModel reads and writes, and the text they stand for.
//
//   auto vocab = io::CharVocabulary::from_text(corpus);   // one id per distinct character
//   std::vector<int64_t> ids = vocab.encode("Hello");
//   std::string text = vocab.decode(ids);
//
// A model file stores its vocabulary as JSON (a list of the token strings,
// id = index) in the safetensors metadata under kMetadataKey; a file without
// one uses bytes(): id = byte value, 256 tokens.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::io {

class CharVocabulary {
 public:
  static constexpr const char* kMetadataKey = "qkv.vocabulary";

  // 256 tokens: id b is the single byte b. Encodes any text.
  static CharVocabulary bytes();
  // One token per distinct UTF-8 character of `text`, ordered by code point.
  // Errors on invalid UTF-8.
  static CharVocabulary from_text(std::string_view text);
  // Token id i is tokens[i]: non-empty, distinct strings.
  explicit CharVocabulary(std::vector<std::string> tokens);

  // Longest matching token at each position; a character with no token is an
  // Error naming it and its byte offset.
  std::vector<int64_t> encode(std::string_view text) const;
  // The text of one id, or of several concatenated; ids out of range are an Error.
  std::string decode(int64_t id) const;
  std::string decode(std::span<const int64_t> ids) const;

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  bool is_bytes() const { return is_bytes_; }
  const std::vector<std::string>& tokens() const { return tokens_; }

  // A JSON list of the token strings (bytes(): the string "bytes"), and back.
  std::string to_json() const;
  static CharVocabulary from_json(const std::string& json);

 private:
  std::vector<std::string> tokens_;
  std::map<std::string, int64_t, std::less<>> ids_;
  size_t longest_ = 1;  // bytes in the longest token
  bool is_bytes_ = false;
};

}  // namespace qkv::io
