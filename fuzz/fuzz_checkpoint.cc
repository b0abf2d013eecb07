// io::load_checkpoint on an arbitrary file.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "qkv/error.h"
#include "qkv/io/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const qkv_fuzz::MemoryFile file(data, size);
  try {
    const qkv::io::Checkpoint c = qkv::io::load_checkpoint(file.path());
    QKV_FUZZ_EXPECT(c.step >= 0);
    for (const auto& [key, value] : c.metadata) QKV_FUZZ_EXPECT(key.rfind("qkv.", 0) != 0);
  } catch (const qkv::Error&) {
  }
  return 0;
}
