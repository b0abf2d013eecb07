// models::decoder_config_from_json on arbitrary text; a config that parses survives
// decoder_config_to_json -> decoder_config_from_json unchanged.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "qkv/error.h"
#include "qkv/models/decoder_model_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto c = qkv::models::decoder_config_from_json(text);
    const std::string json = qkv::models::decoder_config_to_json(c);
    const auto d = qkv::models::decoder_config_from_json(json);  // must not throw
    QKV_FUZZ_EXPECT(qkv::models::decoder_config_to_json(d) == json);
  } catch (const qkv::Error&) {
  }
  return 0;
}
