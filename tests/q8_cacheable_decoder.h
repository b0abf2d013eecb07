// The small decoder that the many-sequence decoding tests (DecoderBatch,
// serve::SequenceSlots) run with both KV cache storages: its heads suit the
// q8_0 cache, which needs a head dim that is a multiple of 32.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "qkv/generator.h"
#include "qkv/nn/decoder_model.h"

namespace qkv_test {

// d_model 64 over 2 heads (head dim 32), one KV head, 2 layers.
inline qkv::nn::DecoderModelConfig q8_cacheable_decoder(int64_t vocab_size,
                                                        qkv::DType dtype = qkv::DType::kFloat32) {
  return {.vocab_size = vocab_size,
          .d_model = 64,
          .num_layers = 2,
          .num_heads = 2,
          .num_kv_heads = 1,
          .max_seq_len = 64,
          .dtype = dtype};
}

// check(model) for a model of `config` with weights from `seed`, once with
// each KV cache storage: f32, then q8_0.
template <class Check>
void for_each_kv_cache_storage(const qkv::nn::DecoderModelConfig& config, uint64_t seed,
                               Check check) {
  using qkv::nn::KVCacheStorage;
  for (KVCacheStorage storage : {KVCacheStorage::kFloat, KVCacheStorage::kQ8_0}) {
    SCOPED_TRACE(storage == KVCacheStorage::kFloat ? "f32 cache" : "q8_0 cache");
    qkv::Generator gen(seed);
    qkv::nn::DecoderModel model(config, &gen);
    model.set_kv_cache_storage(storage);
    check(model);
  }
}

}  // namespace qkv_test
