// qkv::Dims — the sizes or strides of a tensor, stored inline.
//
// Tensors have few dimensions, and views are made in inner loops (heads,
// decoding steps): keeping the numbers inside the object means creating a
// view never touches the heap. The interface is the part of std::vector
// qkv uses.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "qkv/error.h"

namespace qkv {

class Dims {
 public:
  static constexpr size_t kMaxDims = 12;
  using value_type = int64_t;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;

  Dims() = default;
  Dims(std::initializer_list<int64_t> values) : Dims(values.begin(), values.end()) {}
  explicit Dims(size_t count, int64_t value = 0) { assign(count, value); }
  template <class It>
  Dims(It first, It last) {
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }
  Dims(const std::vector<int64_t>& values) : Dims(values.begin(), values.end()) {}  // NOLINT

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t* data() { return values_; }
  const int64_t* data() const { return values_; }
  iterator begin() { return values_; }
  iterator end() { return values_ + size_; }
  const_iterator begin() const { return values_; }
  const_iterator end() const { return values_ + size_; }
  int64_t& operator[](size_t i) { return values_[i]; }
  int64_t operator[](size_t i) const { return values_[i]; }
  int64_t& front() { return values_[0]; }
  int64_t front() const { return values_[0]; }
  int64_t& back() { return values_[size_ - 1]; }
  int64_t back() const { return values_[size_ - 1]; }

  void push_back(int64_t value) {
    check_room(size_ + 1);
    values_[size_++] = value;
  }
  void pop_back() { --size_; }
  void clear() { size_ = 0; }
  void assign(size_t count, int64_t value) {
    check_room(count);
    std::fill(values_, values_ + count, value);
    size_ = count;
  }
  void resize(size_t count, int64_t value = 0) {
    check_room(count);
    if (count > size_) std::fill(values_ + size_, values_ + count, value);
    size_ = count;
  }
  iterator insert(const_iterator pos, int64_t value) {
    check_room(size_ + 1);
    const size_t at = static_cast<size_t>(pos - values_);
    std::copy_backward(values_ + at, values_ + size_, values_ + size_ + 1);
    values_[at] = value;
    ++size_;
    return values_ + at;
  }
  iterator erase(const_iterator pos) {
    const size_t at = static_cast<size_t>(pos - values_);
    std::copy(values_ + at + 1, values_ + size_, values_ + at);
    --size_;
    return values_ + at;
  }

  operator std::vector<int64_t>() const { return {begin(), end()}; }  // NOLINT

  friend bool operator==(const Dims& a, const Dims& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  static void check_room(size_t count) {
    QKV_CHECK(count <= kMaxDims, "qkv tensors have at most ", kMaxDims, " dimensions, asked for ",
              count);
  }

  int64_t values_[kMaxDims] = {};
  size_t size_ = 0;
};

}  // namespace qkv
