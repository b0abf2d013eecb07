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
// length; length() is the number of positions every layer has seen.
//
// Sliding-window layers (KVCacheOptions::windows[layer] = W > 0) keep only the
// last W positions, in a ring of W slots: position p sits in slot p mod W, so
// a 32k-token context costs such a layer W positions. A query at position i
// of such a layer attends to positions i − W + 1 … i only, which is why the
// older ones may go. length(layer) still counts every position seen (RoPE
// positions continue); held(layer) is what the slots hold. extend() appends
// and returns what the new queries attend over:
//   - a full layer: keys(layer), values(layer), in position order;
//   - a ring layer, one new position: the W held slots in slot order (one
//     query sees every one of them, so their order does not matter);
//   - a ring layer, L > 1 new positions: copies, in position order, of the
//     last min(held, W − 1) old positions followed by the L new ones (a
//     scratch of the cache's), to be masked by the window by position.
//
// Storage (KVCacheOptions::storage):
//   kFloat  the dtype's values (float32 or float64), as appended.
//   kQ8_0   float32 only: each row of E (and Ev) values is cut into blocks of
//           32 along the head dimension (E and Ev must be multiples of 32),
//           each kept as one float32 scale d = max|x| / 127 and 32 int8
//           q = round(x / d) (llama.cpp's Q8_0, with a float32 scale instead of
//           fp16): 36 bytes per 32 values instead of 128, and |x − d·q| ≤ d/2.
//           append() quantizes the new positions; keys() and values()
//           dequantize the filled part into a float32 scratch the cache shares
//           between its layers (one for keys, one for values), so a view they
//           return is valid until the next keys() (values()) call of any layer.
//           The in-place writers (key_slots, value_slots, key_storage,
//           value_storage) are float-only.
//
// Memory is touched as it fills: the storage is allocated up front but not
// written (its unfilled part holds unspecified values), so the pages of
// positions never appended need not become resident.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "qkv/tensor.h"

namespace qkv::nn {

// How the cache keeps keys and values (see above).
enum class KVCacheStorage : uint8_t { kFloat, kQ8_0 };

// "f32" / "float" -> kFloat, "q8_0" -> kQ8_0; anything else is an error
// naming the accepted names. `what` names the setting in the message.
KVCacheStorage parse_kv_cache_storage(std::string_view name, std::string_view what = "kv_cache");
// "f32" or "q8_0".
const char* kv_cache_storage_name(KVCacheStorage storage);

// Values per Q8_0 block along the head dimension.
inline constexpr int64_t kKVCacheQ8Block = 32;

struct KVCacheOptions {
  int64_t num_layers = 1;
  int64_t batch_size = 1;    // B
  int64_t num_kv_heads = 1;  // Hkv
  int64_t max_len = 0;       // positions each layer can hold
  int64_t head_dim = 0;      // E
  int64_t value_dim = 0;     // Ev; 0 means head_dim
  DType dtype = DType::kFloat32;
  KVCacheStorage storage = KVCacheStorage::kFloat;  // kQ8_0 needs float32
  // Empty, or one per layer: 0 keeps every position, W > 0 only the last W
  // (a ring of min(W, max_len) slots; see above).
  std::vector<int64_t> windows;
};

// The keys and values new queries attend over (KVCache::extend).
struct KVCacheView {
  Tensor keys;    // [B, Hkv, S, E]
  Tensor values;  // [B, Hkv, S, Ev]
};

class KVCache {
 public:
  // Allocates storage for every layer up front (not written: see above).
  explicit KVCache(const KVCacheOptions& options);

  // Copies (kQ8_0: quantizes) L new positions into the free slots after the
  // filled ones (a ring layer: into their slots, the last W of them).
  // Errors, changing nothing, when they do not fit in max_len.
  // k: [B, Hkv, L, E]  v: [B, Hkv, L, Ev]  (any strides)
  void append(int64_t layer, const Tensor& k, const Tensor& v);

  // append(), returning the keys and values the L new queries attend over
  // (see above): with CausalMask::kBottomRight and, in a ring layer, the
  // window of W positions, they give every query exactly its keys. One new
  // position allocates nothing (kFloat).
  // k: [B, Hkv, L, E]  v: [B, Hkv, L, Ev]  ->  [B, Hkv, S, E] and [B, Hkv, S, Ev]
  KVCacheView extend(int64_t layer, const Tensor& k, const Tensor& v);

  // The next L free slots, to be written in place (e.g. by a projection)
  // before commit(layer, L) counts them as filled. Views; nothing is copied.
  // Full layers only.
  // -> [B, Hkv, L, E] and [B, Hkv, L, Ev]
  Tensor key_slots(int64_t layer, int64_t L);
  Tensor value_slots(int64_t layer, int64_t L);
  // Marks the next L slots of `layer` as filled.
  void commit(int64_t layer, int64_t L);

  // The filled slots (a ring layer's in slot order). kFloat: views of the
  // storage, nothing is copied; kQ8_0: dequantized into the shared scratch.
  // -> [B, Hkv, held(layer), E] and [B, Hkv, held(layer), Ev]
  Tensor keys(int64_t layer) const;
  Tensor values(int64_t layer) const;

  // Positions `layer` has seen.
  int64_t length(int64_t layer) const;
  // Positions every layer has seen (the smallest layer length).
  int64_t length() const;
  // Positions `layer` holds: length(layer), or at most its window.
  int64_t held(int64_t layer) const;
  // The layer's window W (0: it keeps every position).
  int64_t window(int64_t layer) const;
  // Slots of storage of the layer: max_len, or min(W, max_len) for a ring.
  int64_t capacity(int64_t layer) const;
  // Positions that still fit.
  int64_t remaining() const { return options_.max_len - length(); }

  // Forgets every position (the storage stays allocated).
  void reset();
  // Forgets positions after the first `length` in every layer (e.g. to
  // rewind a rejected continuation); length must be in
  // [min_truncate_length(), length()], or 0.
  void truncate(int64_t length);
  // The shortest length truncate() can go back to without a ring layer
  // missing a position its next query needs (0 without ring layers or
  // before any ring has wrapped; truncate(0) always works).
  int64_t min_truncate_length() const;

  const KVCacheOptions& options() const { return options_; }
  int64_t num_layers() const { return options_.num_layers; }
  int64_t max_len() const { return options_.max_len; }

  // Bytes of key and value storage over all layers (what the cache costs).
  int64_t storage_bytes() const;

  // The whole storage of a layer, filled or not (kFloat only).
  // -> [B, Hkv, capacity(layer), E] and [B, Hkv, capacity(layer), Ev]
  const Tensor& key_storage(int64_t layer) const;
  const Tensor& value_storage(int64_t layer) const;

 private:
  void check_layer(int64_t layer, const char* fn) const;
  void check_room(int64_t layer, int64_t L, const char* fn) const;
  void check_float(const char* fn) const;
  void check_full(int64_t layer, const char* fn) const;
  // key_slots / value_slots: the next L slots of `storage` (keys_ or values_), checked for `fn`.
  Tensor free_slots(std::vector<Tensor>& storage, int64_t layer, int64_t L, const char* fn);
  Tensor dequantized(int64_t layer, bool values) const;
  // Writes positions first … first + L − 1 (rows 0 … L − 1 of k and v) to their slots.
  void write_slots(int64_t layer, int64_t first, const Tensor& k, const Tensor& v, int64_t row0,
                   int64_t L);
  // Copies (kQ8_0: dequantizes) the held positions first … first + n − 1 of
  // keys or values, in position order, into positions 0 … n − 1 of `out`.
  void read_positions(int64_t layer, bool values, int64_t first, int64_t n, Tensor& out) const;

  // Q8_0 rows of one tensor kind (keys or values) of one layer: per slot,
  // width / 32 scales and width int8, slot-major within each (b, h).
  struct Q8Rows {
    std::unique_ptr<float[]> scales;   // [B, Hkv, capacity, width / 32]
    std::unique_ptr<int8_t[]> quants;  // [B, Hkv, capacity, width]
    // (both default-initialized: untouched until appended to)
  };

  KVCacheOptions options_;
  std::vector<Tensor> keys_;                    // kFloat: per layer [B, Hkv, capacity, E]
  std::vector<Tensor> values_;                  // kFloat: per layer [B, Hkv, capacity, Ev]
  std::vector<Q8Rows> q8_keys_, q8_values_;     // kQ8_0: per layer
  mutable Tensor key_scratch_, value_scratch_;  // kQ8_0: [B, Hkv, capacity, E / Ev]
  std::vector<int64_t> lengths_;
  std::vector<int64_t> capacities_;  // per layer
};

}  // namespace qkv::nn
