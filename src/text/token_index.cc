#include "qkv/text/token_index.h"

#include <algorithm>
#include <bit>
#include <functional>

namespace qkv::text {

namespace {

size_t hash_of(std::string_view text) { return std::hash<std::string_view>{}(text); }

// Slots for `tokens` ids at most half full (a power of two, at least 16).
size_t slots_for(size_t tokens) { return std::bit_ceil(std::max<size_t>(16, 2 * tokens)); }

}  // namespace

TokenIndex::TokenIndex(size_t tokens) : slots_(slots_for(tokens), -1) {}

size_t TokenIndex::slot_of(std::string_view text, std::span<const std::string> vocabulary) const {
  const size_t mask = slots_.size() - 1;
  size_t i = hash_of(text) & mask;
  while (slots_[i] >= 0 && vocabulary[slots_[i]] != text) i = (i + 1) & mask;
  return i;
}

int32_t TokenIndex::insert(int32_t id, std::span<const std::string> vocabulary) {
  if (2 * (count_ + 1) > slots_.size()) grow(vocabulary);
  const size_t i = slot_of(vocabulary[id], vocabulary);
  if (slots_[i] >= 0) return slots_[i];
  slots_[i] = id;
  ++count_;
  return -1;
}

std::optional<int32_t> TokenIndex::find(std::string_view text,
                                        std::span<const std::string> vocabulary) const {
  if (slots_.empty()) return std::nullopt;
  const int32_t id = slots_[slot_of(text, vocabulary)];
  return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
}

void TokenIndex::grow(std::span<const std::string> vocabulary) {
  std::vector<int32_t> old(slots_for(count_ + 1), -1);
  old.swap(slots_);
  count_ = 0;
  for (const int32_t id : old)
    if (id >= 0) insert(id, vocabulary);
}

}  // namespace qkv::text
