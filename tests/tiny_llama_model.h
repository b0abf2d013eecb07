// The tiny llama of tiny_llama_gguf.h read in memory, as a GGUF file and as a
// loaded model, for the tests that decode with it (GGUF models, batched
// decoding, the q8_0 KV cache, serve's sequence slots).
#pragma once

#include "qkv/io/gguf.h"
#include "qkv/models/gguf_model.h"
#include "tiny_llama_gguf.h"

namespace qkv_test {

// tiny_llama(spec) as a GGUF file named "tiny.gguf" (the name errors give).
inline qkv::io::GgufFile tiny_llama_file(const TinySpec& spec = {}) {
  return qkv::io::GgufFile::from_bytes(tiny_llama(spec), "tiny.gguf");
}

// tiny_llama(spec) loaded by models::load_gguf_model with `options`.
inline qkv::models::GgufModel load_tiny_llama(const TinySpec& spec = {},
                                              const qkv::models::GgufModelOptions& options = {}) {
  return qkv::models::load_gguf_model(tiny_llama_file(spec), options);
}

}  // namespace qkv_test
