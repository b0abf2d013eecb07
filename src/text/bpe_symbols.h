// The symbols of a piece of text being merged, in a linked list over a
// vector: merging two neighbours is O(1) and indices stay put, so the merge
// queues of both BPE models (bpe_tokenizer.cc, sentencepiece_encode.cc) can
// name symbols by index.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace qkv::text::detail {

class BpeSymbols {
 public:
  void reserve(size_t n) {
    symbols_.reserve(n);
    removed_.reserve(n);
  }
  void push(int32_t id) {
    const auto index = static_cast<int32_t>(symbols_.size());
    symbols_.push_back({id, index - 1, -1});
    removed_.push_back(false);
    if (index > 0) symbols_[index - 1].next = index;
  }
  int32_t size() const { return static_cast<int32_t>(symbols_.size()); }
  int32_t id(int32_t i) const { return symbols_[i].id; }
  int32_t prev(int32_t i) const { return symbols_[i].prev; }  // -1 at the start
  int32_t next(int32_t i) const { return symbols_[i].next; }  // -1 at the end
  // Whether `right` still follows `left`, neither merged away since.
  bool adjacent(int32_t left, int32_t right) const {
    return !removed_[left] && !removed_[right] && symbols_[left].next == right;
  }
  // `left` becomes `merged`; `right` goes.
  void merge(int32_t left, int32_t right, int32_t merged) {
    symbols_[left].id = merged;
    removed_[right] = true;
    symbols_[left].next = symbols_[right].next;
    if (symbols_[left].next >= 0) symbols_[symbols_[left].next].prev = left;
  }
  void append_ids(std::vector<int32_t>& ids) const {
    for (int32_t i = symbols_.empty() ? -1 : 0; i >= 0; i = symbols_[i].next)
      ids.push_back(symbols_[i].id);
  }

 private:
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> symbols_;
  std::vector<bool> removed_;
};

}  // namespace qkv::text::detail
