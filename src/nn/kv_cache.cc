// nn::KVCache: preallocated per-layer key/value storage written slot by slot.
#include "qkv/nn/kv_cache.h"

#include <algorithm>

namespace qkv::nn {

namespace {

KVCacheOptions resolved(KVCacheOptions o) {
  const char* m = "KVCache";
  QKV_CHECK_TYPE(is_floating(o.dtype), m, ": dtype must be float32 or float64, got ",
                 dtype_name(o.dtype));
  if (o.value_dim == 0) o.value_dim = o.head_dim;
  QKV_CHECK(o.num_layers > 0 && o.batch_size > 0 && o.num_kv_heads > 0 && o.max_len > 0 &&
                o.head_dim > 0 && o.value_dim > 0,
            m, ": num_layers, batch_size, num_kv_heads, max_len and head_dim must be > 0, got ",
            "num_layers=", o.num_layers, ", batch_size=", o.batch_size,
            ", num_kv_heads=", o.num_kv_heads, ", max_len=", o.max_len, ", head_dim=", o.head_dim,
            ", value_dim=", o.value_dim);
  return o;
}

// dst[b, h, l, :] = src[b, h, l, :] for 4-D views of one dtype and shape;
// rows with unit column stride are copied whole. Allocates nothing (unlike
// Tensor::copy_from on strided views), so a decoding step can append.
template <class T>
void copy_rows(Tensor& dst, const Tensor& src) {
  T* d = dst.data<T>();
  const T* s = src.data<T>();
  const int64_t cols = src.size(3);
  for (int64_t b = 0; b < src.size(0); ++b)
    for (int64_t h = 0; h < src.size(1); ++h)
      for (int64_t l = 0; l < src.size(2); ++l) {
        T* drow = d + b * dst.stride(0) + h * dst.stride(1) + l * dst.stride(2);
        const T* srow = s + b * src.stride(0) + h * src.stride(1) + l * src.stride(2);
        if (src.stride(3) == 1 && dst.stride(3) == 1) {
          std::copy(srow, srow + cols, drow);
        } else {
          for (int64_t c = 0; c < cols; ++c) drow[c * dst.stride(3)] = srow[c * src.stride(3)];
        }
      }
}

void copy_rows(Tensor& dst, const Tensor& src) {
  if (src.dtype() == DType::kFloat64)
    copy_rows<double>(dst, src);
  else
    copy_rows<float>(dst, src);
}

}  // namespace

KVCache::KVCache(const KVCacheOptions& options) : options_(resolved(options)) {
  const KVCacheOptions& o = options_;
  for (int64_t i = 0; i < o.num_layers; ++i) {
    keys_.push_back(Tensor::zeros({o.batch_size, o.num_kv_heads, o.max_len, o.head_dim}, o.dtype));
    values_.push_back(
        Tensor::zeros({o.batch_size, o.num_kv_heads, o.max_len, o.value_dim}, o.dtype));
  }
  lengths_.assign(static_cast<size_t>(o.num_layers), 0);
}

void KVCache::check_layer(int64_t layer, const char* fn) const {
  QKV_CHECK(layer >= 0 && layer < options_.num_layers, "KVCache::", fn, ": layer must be in [0, ",
            options_.num_layers, "), got ", layer);
}

void KVCache::check_room(int64_t layer, int64_t L, const char* fn) const {
  QKV_CHECK(L >= 0, "KVCache::", fn, ": the number of new positions must be >= 0, got ", L);
  const int64_t len = lengths_[layer];
  QKV_CHECK(len + L <= options_.max_len, "KVCache::", fn, ": the cache is full: layer ", layer,
            " holds ", len, " of max_len = ", options_.max_len, " positions and ", L,
            " more do not fit; make a larger cache, or reset() or truncate() this one");
}

void KVCache::append(int64_t layer, const Tensor& k, const Tensor& v) {
  check_layer(layer, "append");
  const KVCacheOptions& o = options_;
  for (const Tensor* t : {&k, &v}) {
    QKV_CHECK(t->defined(), "KVCache::append: k and v must be defined");
    QKV_CHECK_TYPE(t->dtype() == o.dtype, "KVCache::append: k and v must have the cache's dtype ",
                   dtype_name(o.dtype), ", got ", dtype_name(t->dtype()));
  }
  const int64_t L = k.dim() == 4 ? k.size(2) : -1;
  QKV_CHECK(k.dim() == 4 && k.size(0) == o.batch_size && k.size(1) == o.num_kv_heads &&
                k.size(3) == o.head_dim,
            "KVCache::append: k must be [B=", o.batch_size, ", Hkv=", o.num_kv_heads,
            ", L, E=", o.head_dim, "], got ", shape_str(k.shape()));
  QKV_CHECK(v.dim() == 4 && v.size(0) == o.batch_size && v.size(1) == o.num_kv_heads &&
                v.size(2) == L && v.size(3) == o.value_dim,
            "KVCache::append: v must be [B=", o.batch_size, ", Hkv=", o.num_kv_heads, ", L=", L,
            ", Ev=", o.value_dim, "], got ", shape_str(v.shape()));
  check_room(layer, L, "append");
  const int64_t len = lengths_[layer];
  // Views of the free slots, written through.
  Tensor k_slots = keys_[layer].slice(2, len, len + L);
  Tensor v_slots = values_[layer].slice(2, len, len + L);
  copy_rows(k_slots, k);
  copy_rows(v_slots, v);
  lengths_[layer] = len + L;
}

Tensor KVCache::key_slots(int64_t layer, int64_t L) {
  check_layer(layer, "key_slots");
  check_room(layer, L, "key_slots");
  return keys_[layer].slice(2, lengths_[layer], lengths_[layer] + L);
}

Tensor KVCache::value_slots(int64_t layer, int64_t L) {
  check_layer(layer, "value_slots");
  check_room(layer, L, "value_slots");
  return values_[layer].slice(2, lengths_[layer], lengths_[layer] + L);
}

void KVCache::commit(int64_t layer, int64_t L) {
  check_layer(layer, "commit");
  check_room(layer, L, "commit");
  lengths_[layer] += L;
}

Tensor KVCache::keys(int64_t layer) const {
  check_layer(layer, "keys");
  return keys_[layer].slice(2, 0, lengths_[layer]);
}

Tensor KVCache::values(int64_t layer) const {
  check_layer(layer, "values");
  return values_[layer].slice(2, 0, lengths_[layer]);
}

int64_t KVCache::length(int64_t layer) const {
  check_layer(layer, "length");
  return lengths_[layer];
}

int64_t KVCache::length() const { return *std::min_element(lengths_.begin(), lengths_.end()); }

void KVCache::reset() { std::fill(lengths_.begin(), lengths_.end(), 0); }

void KVCache::truncate(int64_t length) {
  QKV_CHECK(length >= 0 && length <= this->length(), "KVCache::truncate: length must be in [0, ",
            this->length(), "] (the positions every layer holds), got ", length);
  std::fill(lengths_.begin(), lengths_.end(), length);
}

const Tensor& KVCache::key_storage(int64_t layer) const {
  check_layer(layer, "key_storage");
  return keys_[layer];
}

const Tensor& KVCache::value_storage(int64_t layer) const {
  check_layer(layer, "value_storage");
  return values_[layer];
}

}  // namespace qkv::nn
