// A tiny GGUF writer for tests and fuzz seeds (tests/test_gguf.cc, fuzz/make_seeds.cc): it
// writes what it is told, bad files included — counts, offsets, alignment and every field can
// be set by hand. Layout as in include/qkv/io/gguf.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace qkv_test {

// The little-endian bytes of `value`.
template <class T>
std::string le(T value) {
  std::string out(sizeof(T), '\0');
  std::memcpy(out.data(), &value, sizeof(T));
  return out;
}

// A GGUF string: u64 length, bytes.
inline std::string gguf_str(const std::string& s) { return le<uint64_t>(s.size()) + s; }

// GGUF value type numbers.
enum GgufTypeId : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

class GgufWriter {
 public:
  struct TensorEntry {
    std::string name;
    std::vector<uint64_t> dims;  // ggml order
    uint32_t type;
    std::string data;                // its bytes
    std::optional<uint64_t> offset;  // default: the next aligned offset after the previous
  };

  uint32_t version = 3;
  std::optional<uint64_t> tensor_count;  // default: tensors.size()
  std::optional<uint64_t> kv_count;      // default: the entries added
  uint64_t alignment = 32;               // used for padding only: add general.alignment too
  std::vector<TensorEntry> tensors;

  // An entry whose value bytes are given as they are stored.
  GgufWriter& kv(const std::string& key, uint32_t type, const std::string& value_bytes) {
    kvs_ += gguf_str(key) + le<uint32_t>(type) + value_bytes;
    ++n_kv_;
    return *this;
  }
  GgufWriter& u32(const std::string& key, uint32_t v) { return kv(key, kU32, le(v)); }
  GgufWriter& i32(const std::string& key, int32_t v) { return kv(key, kI32, le(v)); }
  GgufWriter& u64(const std::string& key, uint64_t v) { return kv(key, kU64, le(v)); }
  GgufWriter& i64(const std::string& key, int64_t v) { return kv(key, kI64, le(v)); }
  GgufWriter& f32(const std::string& key, float v) { return kv(key, kF32, le(v)); }
  GgufWriter& f64(const std::string& key, double v) { return kv(key, kF64, le(v)); }
  GgufWriter& boolean(const std::string& key, bool v) { return kv(key, kBool, le<uint8_t>(v)); }
  GgufWriter& str(const std::string& key, const std::string& v) {
    return kv(key, kString, gguf_str(v));
  }
  // An array of `count` elements of `type` whose bytes are `elements`.
  GgufWriter& array(const std::string& key, uint32_t type, uint64_t count,
                    const std::string& elements) {
    return kv(key, kArray, le<uint32_t>(type) + le<uint64_t>(count) + elements);
  }
  GgufWriter& strings(const std::string& key, const std::vector<std::string>& values) {
    std::string bytes;
    for (const std::string& v : values) bytes += gguf_str(v);
    return array(key, kString, values.size(), bytes);
  }
  template <class T>
  GgufWriter& numbers(const std::string& key, uint32_t type, const std::vector<T>& values) {
    std::string bytes;
    for (T v : values) bytes += le(v);
    return array(key, type, values.size(), bytes);
  }

  GgufWriter& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                     std::string data, std::optional<uint64_t> offset = {}) {
    tensors.push_back({name, std::move(dims), type, std::move(data), offset});
    return *this;
  }

  // The whole file.
  std::string build() const {
    std::string out = "GGUF" + le(version) + le<uint64_t>(tensor_count.value_or(tensors.size())) +
                      le<uint64_t>(kv_count.value_or(n_kv_)) + kvs_;
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const TensorEntry& t : tensors) {
      const uint64_t offset = t.offset.value_or(next);
      offsets.push_back(offset);
      next = round_up(offset + t.data.size());
      out += gguf_str(t.name) + le<uint32_t>(static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) out += le(d);
      out += le(t.type) + le(offset);
    }
    if (tensors.empty()) return out;
    out.resize(round_up(out.size()), '\0');
    std::string data;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const std::string& bytes = tensors[i].data;
      if (offsets[i] + bytes.size() > (uint64_t{1} << 26)) continue;  // a hostile offset
      if (data.size() < offsets[i] + bytes.size()) data.resize(offsets[i] + bytes.size(), '\0');
      data.replace(offsets[i], bytes.size(), bytes);
    }
    return out + data;
  }

  std::vector<std::byte> bytes() const {
    const std::string s = build();
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    return {p, p + s.size()};
  }

 private:
  uint64_t round_up(uint64_t n) const { return (n + alignment - 1) / alignment * alignment; }

  std::string kvs_;
  uint64_t n_kv_ = 0;
};

}  // namespace qkv_test
