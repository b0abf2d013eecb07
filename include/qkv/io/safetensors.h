// Reading and writing safetensors files, the format of Hugging Face models.
//
//   auto weights = io::load_safetensors("model.safetensors");   // name -> Tensor
//   io::save_safetensors("out.safetensors", {{"w", w}, {"b", b}}, {{"format", "pt"}});
//
//   io::SafetensorsFile file("model.safetensors");   // validates the whole header
//   for (const std::string& name : file.names())
//     std::cout << name << " " << shape_str(file.entry(name).shape) << "\n";
//   Tensor w = file.load("encoder.layer.0.attention.self.query.weight");
//
// Layout: an 8-byte little-endian length N, then N bytes of UTF-8 JSON
//   {"__metadata__": {"k": "v", ...},                       (optional)
//    "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
// then the data section: each tensor's elements, row-major, little-endian, at
// bytes [begin, end) counted from the start of the data section.
//
// The reader trusts nothing: it rejects, with a qkv::Error naming the file and
// the problem, a file shorter than 8 bytes, a header over 100 MB or past the
// end of the file, a header that is not UTF-8 or not JSON, duplicate keys at
// any level, entries that are not {dtype, shape, data_offsets} exactly,
// unknown dtypes, shapes that are not non-negative integers, sizes that
// overflow, offsets that disagree with shape x dtype or point past the data,
// tensors that do not tile the data section exactly (gaps, overlaps, trailing
// bytes) and metadata that is not a string -> string map. Data need not be
// aligned. Format errors are ErrorKind::kValue, file-system errors kIO.
//
// What load() gives for each dtype (qkv tensors are float32, float64 or bool):
//   F32, F64, BOOL                      as they are (BOOL: any non-zero byte is true)
//   F16, BF16, F8_E4M3, F8_E5M2         converted exactly to float32
//   I8, U8, I16, U16, I32, U32          converted exactly to float64 (ids, counts, masks)
//   I64, U64                            to float64 if every value is exactly representable
//                                       (|x| <= 2^53 always is), otherwise an error
//   other known dtypes (F4, F6_*, F8_E8M0, F8_*FNUZ, C64)   ErrorKind::kType error;
//                                       raw() still gives their bytes.
//
// The writer stores float32/float64/bool as F32/F64/BOOL and follows the
// reference implementation byte for byte: tensors ordered by dtype (widest
// first, so every tensor is aligned to its element size) and then by name,
// "__metadata__" first in the header (its keys sorted; the reference leaves
// their order unspecified), the header padded with spaces to a multiple of 8
// bytes (checked against Python safetensors 0.8). The file is replaced
// atomically (io/atomic_file.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "qkv/tensor.h"

namespace qkv::io {

// Longer headers are rejected, as by the reference reader.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

using SafetensorsMetadata = std::map<std::string, std::string>;

// One tensor as the header describes it.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;   // "F32", "BF16", "I64", ...
  Shape shape;         // [] for a 0-d tensor
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;

  uint64_t nbytes() const { return end - begin; }
  int64_t numel() const { return shape_numel(shape); }
};

// Size of one element of a safetensors dtype in bits (4 for F4, 6 for F6_*),
// or 0 if the dtype is unknown.
int safetensors_dtype_bits(const std::string& dtype);
// "F32", "F64" or "BOOL".
const char* safetensors_dtype_name(DType dtype);

// A validated safetensors file held in memory.
class SafetensorsFile {
 public:
  // Reads and validates the whole file.
  explicit SafetensorsFile(const std::filesystem::path& path);
  // Validates `bytes` (a whole file); `source` names it in error messages.
  static SafetensorsFile from_bytes(std::vector<std::byte> bytes,
                                    const std::string& source = "<memory>");

  // Tensor names, sorted.
  std::vector<std::string> names() const;
  size_t size() const { return entries_.size(); }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  // Throws if there is no tensor `name`.
  const SafetensorsEntry& entry(const std::string& name) const;
  const SafetensorsMetadata& metadata() const { return metadata_; }
  // Where the file came from (the path, or the `source` given to from_bytes).
  const std::string& source() const { return source_; }

  // The tensor's bytes as stored (little-endian, unaligned).
  std::span<const std::byte> raw(const std::string& name) const;
  // -> a new contiguous tensor of entry(name).shape; dtypes as in the table above.
  Tensor load(const std::string& name) const;
  // Every tensor, by name.
  std::map<std::string, Tensor> load_all() const;

 private:
  SafetensorsFile() = default;
  void parse();

  std::string source_;
  std::vector<std::byte> bytes_;  // the whole file
  uint64_t data_start_ = 0;       // 8 + header length
  std::map<std::string, SafetensorsEntry> entries_;
  SafetensorsMetadata metadata_;
};

// Every tensor of the file at `path`, by name.
std::map<std::string, Tensor> load_safetensors(const std::filesystem::path& path);

// tensors: name -> any shape, any strides (written row-major), float32/float64/bool.
// The bytes of a safetensors file holding `tensors` and `metadata`. Names must be valid UTF-8 and
// not "__metadata__".
std::vector<std::byte> serialize_safetensors(const std::map<std::string, Tensor>& tensors,
                                             const SafetensorsMetadata& metadata = {});

// tensors: as for serialize_safetensors.
// Writes serialize_safetensors(tensors, metadata) to `path`, atomically,
// streaming the tensors instead of building the whole file in memory.
void save_safetensors(const std::filesystem::path& path,
                      const std::map<std::string, Tensor>& tensors,
                      const SafetensorsMetadata& metadata = {});

}  // namespace qkv::io
