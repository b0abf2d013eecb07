// Reading GGUF files, the format of llama.cpp models (versions 2 and 3).
//
//   io::GgufFile file("models/SmolLM2-135M-Instruct.Q4_1.gguf");   // maps and validates it all
//   int64_t layers = file.integer("llama.block_count");              // 30
//   const std::vector<std::string>& tokens = file.strings("tokenizer.ggml.tokens");
//   for (const io::GgufTensorInfo& t : file.tensors())
//     std::cout << t.name << " " << io::ggml_type_name(t.type) << " " << t.bytes << "\n";
//   Tensor norm = file.load("output_norm.weight");                  // F32/F16/BF16 -> float32
//   std::span<const std::byte> blocks = file.tensor("blk.0.attn_q.weight").data;  // Q4_1 blocks
//
// Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64 metadata count; each
// metadata entry: key (u64 length + UTF-8 bytes), u32 value type, value (a scalar, a string, or
// an array: u32 element type, u64 count, elements); each tensor info: name (a string), u32
// n_dims <= 4, u64 dims[n_dims] (ggml order: dims[0] is the contiguous one), u32 ggml type,
// u64 offset into the data section; zero padding to `general.alignment` (a u32, default 32, a
// power of two); the data section.
//
// The reader trusts nothing. Before anything is allocated or used it rejects, with a
// qkv::Error(kValue) naming the file, the entry (key or tensor name) and what was found and
// expected: a file shorter than its fields, a magic other than "GGUF", versions other than 2
// and 3 (version 1 and big-endian files by name), counts or lengths that could not fit in the
// rest of the file, empty or non-UTF-8 keys and tensor names, duplicate keys and tensor names,
// unknown value types, arrays of arrays, bools other than 0 and 1, a `general.alignment` that is
// not a u32 power of two, more than 4 dims, dims above 2^63 - 1 or whose product overflows,
// unknown ggml types (named by number and tensor), dims[0] not a multiple of the type's block
// size, byte sizes that overflow, offsets not a multiple of the alignment, tensors past the
// end of the file, and tensors whose bytes overlap. Gaps between tensors and bytes after the
// last are allowed (ggml pads each tensor to the alignment). String values are kept as their
// bytes, not checked for UTF-8 (tokenizers decide what their tokens are).
//
// The file is memory-mapped read-only; GgufTensorInfo::data points into the mapping, which
// lives as long as any copy of the GgufFile or any holder of storage(). (A mapped file that
// another process truncates meanwhile faults on access: GGUF files are not written in place.)
// Files that are not regular files (pipes, devices) are rejected with ErrorKind::kIO, like
// files that cannot be opened.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "qkv/tensor.h"

namespace qkv::io {

// The element types of tensors (ggml's `enum ggml_type`; numbers missing here were removed from
// ggml and are rejected). Block sizes as in llama.cpp's ggml-common.h.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

// How a ggml type stores its elements: `block_bytes` bytes hold `block_elements` elements
// (1 for the plain types F32, F16, BF16, F64, I8..I64; 32 or 256 for the quantized ones).
struct GgmlTypeTraits {
  std::string_view name;  // "Q4_1"
  uint32_t block_elements;
  uint32_t block_bytes;
};

// The traits of type number `id`, or nullptr if ggml has no such type (any more).
const GgmlTypeTraits* ggml_type_traits(uint32_t id);
// "Q4_1"; "ggml type N" for a number that is not a type.
std::string_view ggml_type_name(GgmlType type);
// Whether elements are stored in blocks of more than one (Q4_0, Q4_K, IQ2_XXS, ...).
bool ggml_type_is_quantized(GgmlType type);

// The types of metadata values, numbered as in the file.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
// "u32", "string", "array of string", ...: as error messages name them.
std::string_view gguf_value_type_name(GgufValueType type);

// A metadata array: the alternative's index is its element type (GgufValueType). Index 9
// (arrays of arrays) is never held: the reader rejects nested arrays.
using GgufArray =
    std::variant<std::vector<uint8_t>, std::vector<int8_t>, std::vector<uint16_t>,
                 std::vector<int16_t>, std::vector<uint32_t>, std::vector<int32_t>,
                 std::vector<float>, std::vector<bool>, std::vector<std::string>, std::monostate,
                 std::vector<uint64_t>, std::vector<int64_t>, std::vector<double>>;
// A metadata value: the alternative's index is its GgufValueType.
using GgufValue = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, GgufArray, uint64_t, int64_t, double>;

// One tensor as its info describes it, with its bytes.
struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] varies fastest; [] for n_dims = 0 (1 element)
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;              // into the data section, a multiple of the alignment
  uint64_t bytes = 0;               // numel / block_elements * block_bytes
  std::span<const std::byte> data;  // the stored bytes (blocks), inside the mapping

  int64_t numel() const;
  // The torch shape: dims reversed (a [rows, cols] weight has dims {cols, rows}).
  Shape shape() const;
};

class GgufFile {
 public:
  // Maps `path` read-only and validates the whole header (ErrorKind::kIO if it cannot be
  // opened or mapped).
  explicit GgufFile(const std::filesystem::path& path);
  // Validates `bytes` (a whole file), kept in memory; `source` names it in error messages.
  static GgufFile from_bytes(std::vector<std::byte> bytes, std::string source = "<memory>");

  uint32_t version() const { return version_; }
  // Where the file came from (the path, or the `source` given to from_bytes).
  const std::string& source() const { return source_; }
  // general.alignment, or 32.
  uint64_t alignment() const { return alignment_; }
  // Where the data section starts, in bytes from the start of the file.
  uint64_t data_offset() const { return data_offset_; }
  // The owner of every byte of the file (and of every GgufTensorInfo::data): holding it keeps
  // those spans valid after the GgufFile is gone.
  std::shared_ptr<const void> storage() const { return storage_; }

  // --- Metadata ---------------------------------------------------------------------------
  // The typed getters throw qkv::Error naming the file, the key, the type found and the type
  // wanted (kType), or the missing key (kValue). Each find_* returns nullopt when the key is
  // absent, and throws as its getter when the key holds another type.

  // Keys in file order.
  const std::vector<std::string>& keys() const { return keys_; }
  bool has(std::string_view key) const { return metadata_.find(key) != metadata_.end(); }
  const GgufValue& value(std::string_view key) const;
  GgufValueType type(std::string_view key) const;

  const std::string& string(std::string_view key) const;
  // Any integer type (u8 .. i64) whose value is >= 0.
  uint64_t uint(std::string_view key) const;
  // Any integer type whose value fits in int64 (a u64 above 2^63 - 1 does not).
  int64_t integer(std::string_view key) const;
  // f32 or f64.
  double number(std::string_view key) const;
  bool boolean(std::string_view key) const;
  // An array of strings.
  const std::vector<std::string>& strings(std::string_view key) const;
  // An array of any integer type, each element fitting in int64.
  std::vector<int64_t> integers(std::string_view key) const;
  // An array of f32 or f64.
  std::vector<double> numbers(std::string_view key) const;

  std::optional<std::string> find_string(std::string_view key) const;
  std::optional<uint64_t> find_uint(std::string_view key) const;
  std::optional<int64_t> find_integer(std::string_view key) const;
  std::optional<double> find_number(std::string_view key) const;
  std::optional<bool> find_boolean(std::string_view key) const;

  // --- Tensors ----------------------------------------------------------------------------
  // In file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  bool has_tensor(std::string_view name) const;
  // Throws (kValue) naming the tensor and the file if there is none.
  const GgufTensorInfo& tensor(std::string_view name) const;
  // -> a new contiguous tensor of shape tensor(name).shape():
  //   F32, F16, BF16      float32 (F16 and BF16 converted exactly)
  //   F64, I8, I16, I32   float64 (exactly)
  //   I64                 float64 if every value is exactly representable, else an error
  //   Q4_0, Q4_1, Q5_0,   float32, dequantized by qkv::dequantize_row (each weight its exact
  //   Q5_1, Q8_0, Q4_K,   value rounded once to float32); the blocks stay in tensor(name).data
  //   Q5_K, Q6_K, IQ4_NL  for the quantized kernels (qkv::QuantizedWeight)
  //   other quantized     ErrorKind::kType naming the type
  Tensor load(std::string_view name) const;

 private:
  GgufFile() = default;
  void parse();

  std::string source_;
  std::shared_ptr<const void> storage_;  // owns the bytes below (a mapping or a vector)
  std::span<const std::byte> bytes_;     // the whole file
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::string> keys_;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace qkv::io
