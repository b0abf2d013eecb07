// io::GgufFile::from_bytes on arbitrary bytes: every metadata value of a valid file is read
// through each typed getter, every tensor is checked against the promises of the header
// (aligned, inside the file, no overlaps, size = numel x block) and loaded; a block-quantized
// one the kernels take (Q4_0 .. IQ4_NL) is also dequantized by them, bit-equal to load().
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "fuzz_util.h"
#include "qkv/error.h"
#include "qkv/io/gguf.h"
#include "qkv/quantized_linear.h"

namespace {

// The active kernel table's dequantization of t (rows of dims[0]) equals `loaded`, the
// reference's, bit for bit. Other types, and blocks with a NaN or infinite fp16 scale (which
// QuantizedWeight refuses), are left alone.
void expect_kernels_match(const qkv::io::GgufTensorInfo& t, const qkv::Tensor& loaded) {
  if (t.numel() == 0 || t.dims.empty()) return;
  qkv::Tensor dequantized;
  try {
    const qkv::QuantFormat format = qkv::quant_format_from_ggml_type(static_cast<uint32_t>(t.type));
    const qkv::QuantizedWeight w(format, t.numel() / t.dims[0], t.dims[0], t.data.data(),
                                 static_cast<int64_t>(t.data.size()), nullptr);
    dequantized = w.dequantize();
  } catch (const qkv::Error&) {
    return;
  }
  QKV_FUZZ_EXPECT(dequantized.numel() == loaded.numel());
  QKV_FUZZ_EXPECT(std::memcmp(dequantized.raw_data(), loaded.raw_data(),
                              static_cast<size_t>(loaded.numel()) * sizeof(float)) == 0);
}

// A getter may refuse a value of another type or range (qkv::Error); nothing else.
template <class F>
void try_get(F&& get) {
  try {
    get();
  } catch (const qkv::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* first = reinterpret_cast<const std::byte*>(data);
  std::vector<std::byte> bytes(first, first + size);
  try {
    const auto file = qkv::io::GgufFile::from_bytes(std::move(bytes), "fuzz");
    QKV_FUZZ_EXPECT(file.version() == 2 || file.version() == 3);
    QKV_FUZZ_EXPECT(file.alignment() > 0 && (file.alignment() & (file.alignment() - 1)) == 0);
    QKV_FUZZ_EXPECT(file.data_offset() <= size);
    for (const std::string& key : file.keys()) {
      QKV_FUZZ_EXPECT(file.has(key));
      QKV_FUZZ_EXPECT(static_cast<size_t>(file.type(key)) == file.value(key).index());
      try_get([&] { file.string(key); });
      try_get([&] { file.uint(key); });
      try_get([&] { file.integer(key); });
      try_get([&] { file.number(key); });
      try_get([&] { file.boolean(key); });
      try_get([&] { file.strings(key); });
      try_get([&] { file.integers(key); });
      try_get([&] { file.numbers(key); });
    }
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (const auto& t : file.tensors()) {
      QKV_FUZZ_EXPECT(&file.tensor(t.name) == &t);
      const auto* traits = qkv::io::ggml_type_traits(static_cast<uint32_t>(t.type));
      QKV_FUZZ_EXPECT(traits != nullptr);
      QKV_FUZZ_EXPECT(t.dims.size() <= 4);
      QKV_FUZZ_EXPECT(t.numel() % traits->block_elements == 0);
      QKV_FUZZ_EXPECT(t.bytes == static_cast<uint64_t>(t.numel()) / traits->block_elements *
                                     traits->block_bytes);
      QKV_FUZZ_EXPECT(t.offset % file.alignment() == 0);
      QKV_FUZZ_EXPECT(t.data.size() == t.bytes);
      QKV_FUZZ_EXPECT(file.data_offset() + t.offset + t.bytes <= size);
      if (t.bytes > 0) spans.emplace_back(t.offset, t.offset + t.bytes);
      try {
        const qkv::Tensor loaded = file.load(t.name);
        QKV_FUZZ_EXPECT(loaded.numel() == t.numel());
        QKV_FUZZ_EXPECT(loaded.shape() == t.shape());
        expect_kernels_match(t, loaded);
      } catch (const qkv::Error&) {
        // Quantized types without a dequantizer, and I64 values float64 cannot hold.
      }
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      QKV_FUZZ_EXPECT(spans[i - 1].second <= spans[i].first);
  } catch (const qkv::Error&) {
  }
  return 0;
}
