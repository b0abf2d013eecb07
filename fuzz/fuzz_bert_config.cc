// models::BertConfig::from_json on an arbitrary config.json; a config that
// parses is valid.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "qkv/error.h"
#include "qkv/models/bert.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto config = qkv::models::BertConfig::from_json(text, "fuzz");
    config.validate("fuzz");  // must not throw: from_json validated it
    QKV_FUZZ_EXPECT(config.hidden_size % config.num_attention_heads == 0);
  } catch (const qkv::Error&) {
  }
  return 0;
}
