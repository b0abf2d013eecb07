// TokenIndex: token text -> id over a vocabulary kept elsewhere.
//
// A hash map from std::string keeps a second copy of every token's text in a
// node of its own (~70 bytes a token beside the vocabulary); this index keeps
// only ids, in an open-addressing table of int32 slots (at most half full),
// and compares a looked-up text with the vocabulary's. The vocabulary is
// passed to each call, so a copy of its owner can carry the index along.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::text {

class TokenIndex {
 public:
  TokenIndex() = default;
  // Room for `tokens` ids without growing.
  explicit TokenIndex(size_t tokens);

  // Adds id, whose text is vocabulary[id]. Returns the id that already has
  // that text (and adds nothing), or -1.
  int32_t insert(int32_t id, std::span<const std::string> vocabulary);
  // The id of `text`, looked up among the ids inserted from `vocabulary`.
  std::optional<int32_t> find(std::string_view text, std::span<const std::string> vocabulary) const;

 private:
  // The slot holding `text`'s id, or the empty slot where it would go.
  size_t slot_of(std::string_view text, std::span<const std::string> vocabulary) const;
  void grow(std::span<const std::string> vocabulary);

  std::vector<int32_t> slots_;  // -1 where empty; size a power of two
  size_t count_ = 0;
};

}  // namespace qkv::text
