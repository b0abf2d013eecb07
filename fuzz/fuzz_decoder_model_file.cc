// models::load_decoder_model on an arbitrary file: the config in the metadata,
// then the parameters. A small model must come out equal to its state_dict.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "qkv/error.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/decoder_model_file.h"
#include "qkv/nn/decoder_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const qkv_fuzz::MemoryFile file(data, size);
  try {
    qkv::io::SafetensorsMetadata metadata;
    const auto model = qkv::models::load_decoder_model(file.path(), &metadata);
    QKV_FUZZ_EXPECT(metadata.count(qkv::models::kDecoderConfigKey) == 1);
    QKV_FUZZ_EXPECT(!model.state_dict().empty());
  } catch (const qkv::Error&) {
  }
  return 0;
}
