// nn::KVCache — the keys and values of the positions a decoder has already
// seen (tutorial §8.3), kept so that each new token costs one projection of
// itself instead of a recomputation of the whole sequence.
//
// Storage is allocated once: per layer, K [B, Hkv, max_len, E] and
// V [B, Hkv, max_len, Ev]. Appending writes the new positions into the next
// free slots (nothing already there is copied or moved); keys() and values()
// are views of the filled part, ready for scaled_dot_product_attention. The
// new queries are the last L of the S cached positions, so they attend with
// CausalMask::kBottomRight (query i sees keys j ≤ i + S − L).
//
//   nn::KVCache cache({.num_layers = 6, .num_kv_heads = 2, .max_len = 1024, .head_dim = 64});
//   cache.append(layer, k_new, v_new);                  // [B, Hkv, L, E] each
//   Tensor out = scaled_dot_product_attention(q, cache.keys(layer), cache.values(layer),
//                                             {.causal = CausalMask::kBottomRight}).output;
//
// Layers fill up one after another within a step, so each layer keeps its own
// length; length() is the number of positions every layer holds.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/tensor.h"

namespace qkv::nn {

struct KVCacheOptions {
  int64_t num_layers = 1;
  int64_t batch_size = 1;    // B
  int64_t num_kv_heads = 1;  // Hkv
  int64_t max_len = 0;       // positions each layer can hold
  int64_t head_dim = 0;      // E
  int64_t value_dim = 0;     // Ev; 0 means head_dim
  DType dtype = DType::kFloat32;
};

class KVCache {
 public:
  // Allocates (zero-filled) storage for every layer up front.
  explicit KVCache(const KVCacheOptions& options);

  // Copies L new positions into the free slots after the filled ones.
  // Errors, changing nothing, when they do not fit in max_len.
  // k: [B, Hkv, L, E]  v: [B, Hkv, L, Ev]  (any strides)
  void append(int64_t layer, const Tensor& k, const Tensor& v);

  // The next L free slots, to be written in place (e.g. by a projection)
  // before commit(layer, L) counts them as filled. Views; nothing is copied.
  // -> [B, Hkv, L, E] and [B, Hkv, L, Ev]
  Tensor key_slots(int64_t layer, int64_t L);
  Tensor value_slots(int64_t layer, int64_t L);
  // Marks the next L slots of `layer` as filled.
  void commit(int64_t layer, int64_t L);

  // The filled part. Views; nothing is copied.
  // -> [B, Hkv, length(layer), E] and [B, Hkv, length(layer), Ev]
  Tensor keys(int64_t layer) const;
  Tensor values(int64_t layer) const;

  // Positions held by `layer`.
  int64_t length(int64_t layer) const;
  // Positions held by every layer (the smallest layer length).
  int64_t length() const;
  // Positions that still fit.
  int64_t remaining() const { return options_.max_len - length(); }

  // Forgets every position (the storage stays allocated).
  void reset();
  // Forgets positions after the first `length` in every layer (e.g. to
  // rewind a rejected continuation); length must not exceed length().
  void truncate(int64_t length);

  const KVCacheOptions& options() const { return options_; }
  int64_t num_layers() const { return options_.num_layers; }
  int64_t max_len() const { return options_.max_len; }

  // The whole storage of a layer, filled or not.
  // -> [B, Hkv, max_len, E] and [B, Hkv, max_len, Ev]
  const Tensor& key_storage(int64_t layer) const;
  const Tensor& value_storage(int64_t layer) const;

 private:
  void check_layer(int64_t layer, const char* fn) const;
  void check_room(int64_t layer, int64_t L, const char* fn) const;

  KVCacheOptions options_;
  std::vector<Tensor> keys_;    // per layer [B, Hkv, max_len, E]
  std::vector<Tensor> values_;  // per layer [B, Hkv, max_len, Ev]
  std::vector<int64_t> lengths_;
};

}  // namespace qkv::nn
