// io::SafetensorsFile::from_bytes on arbitrary bytes: a valid file's every
// tensor is read (raw bytes and converted), and agrees with its header entry.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz_util.h"
#include "qkv/error.h"
#include "qkv/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* first = reinterpret_cast<const std::byte*>(data);
  std::vector<std::byte> bytes(first, first + size);
  try {
    const auto file = qkv::io::SafetensorsFile::from_bytes(std::move(bytes), "fuzz");
    const auto names = file.names();
    QKV_FUZZ_EXPECT(names.size() == file.size());
    for (const auto& name : names) {
      const auto& entry = file.entry(name);
      QKV_FUZZ_EXPECT(entry.begin <= entry.end);
      QKV_FUZZ_EXPECT(file.raw(name).size() == entry.nbytes());
      try {
        const qkv::Tensor t = file.load(name);
        QKV_FUZZ_EXPECT(t.numel() == entry.numel());
      } catch (const qkv::Error&) {
        // Unsupported dtypes (F4, C64, ...) and I64 values too large for float64.
      }
    }
  } catch (const qkv::Error&) {
  }
  return 0;
}
