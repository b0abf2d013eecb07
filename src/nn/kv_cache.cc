// nn::KVCache: preallocated per-layer key/value storage written slot by slot,
// as float values or as Q8_0 blocks.
#include "qkv/nn/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "nn/module_util.h"

namespace qkv::nn {

KVCacheStorage parse_kv_cache_storage(std::string_view name, std::string_view what) {
  if (name == "f32" || name == "float" || name == "float32") return KVCacheStorage::kFloat;
  if (name == "q8_0" || name == "Q8_0") return KVCacheStorage::kQ8_0;
  throw Error(ErrorKind::kValue, qkv::detail::concat(what, ": unknown KV cache type \"", name,
                                                     "\"; expected \"f32\" or \"q8_0\""));
}

const char* kv_cache_storage_name(KVCacheStorage storage) {
  return storage == KVCacheStorage::kQ8_0 ? "q8_0" : "f32";
}

namespace {

KVCacheOptions resolved(KVCacheOptions o) {
  const char* m = "KVCache";
  detail::check_floating_dtype(m, o.dtype);
  if (o.value_dim == 0) o.value_dim = o.head_dim;
  if (o.storage == KVCacheStorage::kQ8_0) {
    QKV_CHECK_TYPE(o.dtype == DType::kFloat32, m, ": q8_0 storage needs dtype float32, got ",
                   dtype_name(o.dtype));
    QKV_CHECK(o.head_dim % kKVCacheQ8Block == 0 && o.value_dim % kKVCacheQ8Block == 0, m,
              ": q8_0 storage quantizes blocks of ", kKVCacheQ8Block,
              " along the head dimension, so head_dim and value_dim must be multiples of ",
              kKVCacheQ8Block, ", got head_dim=", o.head_dim, ", value_dim=", o.value_dim);
  }
  QKV_CHECK(o.num_layers > 0 && o.batch_size > 0 && o.num_kv_heads > 0 && o.max_len > 0 &&
                o.head_dim > 0 && o.value_dim > 0,
            m, ": num_layers, batch_size, num_kv_heads, max_len and head_dim must be > 0, got ",
            "num_layers=", o.num_layers, ", batch_size=", o.batch_size,
            ", num_kv_heads=", o.num_kv_heads, ", max_len=", o.max_len, ", head_dim=", o.head_dim,
            ", value_dim=", o.value_dim);
  QKV_CHECK(o.windows.empty() || static_cast<int64_t>(o.windows.size()) == o.num_layers, m,
            ": windows must be empty or hold one value per layer (", o.num_layers, "), got ",
            o.windows.size());
  for (size_t i = 0; i < o.windows.size(); ++i)
    QKV_CHECK(o.windows[i] >= 0, m, ": windows[", i,
              "] must be >= 0 (0 = keep every position), got ", o.windows[i]);
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

// Q8_0 of one row of `width` float32 values (stride `stride`) at `x`: per
// block of 32, d = max|x| / 127 and q = round(x / d) (all 0 when d = 0).
// Dividing by the stored d itself keeps |x − d·q| ≤ d/2 (|x / d| ≤ 127 up to
// a rounding, so the clamp moves q by less than 1/2).
void quantize_row(const float* x, int64_t stride, int64_t width, float* scales, int8_t* q) {
  for (int64_t b = 0; b < width / kKVCacheQ8Block; ++b) {
    const float* xb = x + b * kKVCacheQ8Block * stride;
    int8_t* qb = q + b * kKVCacheQ8Block;
    float amax = 0.0f;
    for (int64_t i = 0; i < kKVCacheQ8Block; ++i) amax = std::max(amax, std::fabs(xb[i * stride]));
    const float d = amax / 127.0f;
    scales[b] = d;
    for (int64_t i = 0; i < kKVCacheQ8Block; ++i) {
      const float r = d > 0.0f ? std::nearbyint(xb[i * stride] / d) : 0.0f;
      qb[i] = static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
    }
  }
}

// out[i] = d_b · q[i] for one row of `width` values.
void dequantize_row(const float* scales, const int8_t* q, int64_t width, float* out) {
  for (int64_t b = 0; b < width / kKVCacheQ8Block; ++b) {
    const float d = scales[b];
    const int8_t* qb = q + b * kKVCacheQ8Block;
    float* ob = out + b * kKVCacheQ8Block;
    for (int64_t i = 0; i < kKVCacheQ8Block; ++i) ob[i] = d * static_cast<float>(qb[i]);
  }
}

}  // namespace

KVCache::KVCache(const KVCacheOptions& options) : options_(resolved(options)) {
  const KVCacheOptions& o = options_;
  for (int64_t i = 0; i < o.num_layers; ++i) {
    const int64_t w = o.windows.empty() ? 0 : o.windows[static_cast<size_t>(i)];
    capacities_.push_back(w > 0 ? std::min(w, o.max_len) : o.max_len);
  }
  auto q8_rows = [&](int64_t width, int64_t capacity) {
    const int64_t rows = o.batch_size * o.num_kv_heads * capacity;
    // Default-initialized (new T[n], not new T[n]()): no page is written here.
    return Q8Rows{.scales = std::unique_ptr<float[]>(new float[rows * (width / kKVCacheQ8Block)]),
                  .quants = std::unique_ptr<int8_t[]>(new int8_t[rows * width])};
  };
  for (int64_t i = 0; i < o.num_layers; ++i) {
    const int64_t cap = capacities_[static_cast<size_t>(i)];
    if (o.storage == KVCacheStorage::kQ8_0) {
      q8_keys_.push_back(q8_rows(o.head_dim, cap));
      q8_values_.push_back(q8_rows(o.value_dim, cap));
    } else {
      keys_.push_back(Tensor::empty({o.batch_size, o.num_kv_heads, cap, o.head_dim}, o.dtype));
      values_.push_back(Tensor::empty({o.batch_size, o.num_kv_heads, cap, o.value_dim}, o.dtype));
    }
  }
  lengths_.assign(static_cast<size_t>(o.num_layers), 0);
}

int64_t KVCache::storage_bytes() const {
  const KVCacheOptions& o = options_;
  int64_t slots = 0;
  for (int64_t cap : capacities_) slots += cap;
  const int64_t rows = slots * o.batch_size * o.num_kv_heads;
  const int64_t width = o.head_dim + o.value_dim;
  if (o.storage == KVCacheStorage::kQ8_0)
    return rows * (width + width / kKVCacheQ8Block * static_cast<int64_t>(sizeof(float)));
  return rows * width * static_cast<int64_t>(dtype_size(o.dtype));
}

void KVCache::check_float(const char* fn) const {
  QKV_CHECK(options_.storage == KVCacheStorage::kFloat, "KVCache::", fn,
            ": the cache stores q8_0 blocks, which cannot be read or written in place; use "
            "append(), keys() and values()");
}

Tensor KVCache::dequantized(int64_t layer, bool values) const {
  const KVCacheOptions& o = options_;
  const int64_t width = values ? o.value_dim : o.head_dim;
  const int64_t len = held(layer), cap = capacities_[layer];
  Tensor& scratch = values ? value_scratch_ : key_scratch_;
  if (!scratch.defined() || scratch.size(2) < len) {
    // Grows geometrically (up to max_len), so decoding step by step reallocates rarely.
    const int64_t old = scratch.defined() ? scratch.size(2) : 0;
    const int64_t capacity = std::min(o.max_len, std::max({len, 2 * old, int64_t{16}}));
    scratch = Tensor::empty({o.batch_size, o.num_kv_heads, capacity, width}, DType::kFloat32);
  }
  const Q8Rows& rows = values ? q8_values_[layer] : q8_keys_[layer];
  const int64_t nb = width / kKVCacheQ8Block;
  float* out = scratch.data<float>();
  for (int64_t bh = 0; bh < o.batch_size * o.num_kv_heads; ++bh)
    for (int64_t l = 0; l < len; ++l) {
      const int64_t row = bh * cap + l;
      dequantize_row(rows.scales.get() + row * nb, rows.quants.get() + row * width, width,
                     out + (bh * scratch.size(2) + l) * width);
    }
  return scratch.slice(2, 0, len);
}

void KVCache::check_full(int64_t layer, const char* fn) const {
  QKV_CHECK(window(layer) == 0, "KVCache::", fn, ": layer ", layer,
            " is a sliding-window ring, whose slots are not in position order; use append() "
            "or extend()");
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
  const int64_t len = lengths_[layer], cap = capacities_[layer];
  // A ring keeps the last `cap` of the new positions; each run of slots
  // without a wrap is written at once.
  const int64_t skip = std::max<int64_t>(0, L - cap);
  for (int64_t row = skip; row < L;) {
    const int64_t slot = (len + row) % cap;
    const int64_t n = std::min(L - row, cap - slot);
    write_slots(layer, slot, k, v, row, n);
    row += n;
  }
  lengths_[layer] = len + L;
}

void KVCache::write_slots(int64_t layer, int64_t slot, const Tensor& k, const Tensor& v,
                          int64_t row0, int64_t n) {
  const KVCacheOptions& o = options_;
  const int64_t cap = capacities_[layer];
  if (o.storage == KVCacheStorage::kQ8_0) {
    for (const auto& [t, rows, width] : {std::tuple{&k, &q8_keys_[layer], o.head_dim},
                                         std::tuple{&v, &q8_values_[layer], o.value_dim}}) {
      const float* src = t->data<float>();
      const int64_t nb = width / kKVCacheQ8Block;
      for (int64_t b = 0; b < o.batch_size; ++b)
        for (int64_t h = 0; h < o.num_kv_heads; ++h)
          for (int64_t l = 0; l < n; ++l) {
            const int64_t row = (b * o.num_kv_heads + h) * cap + slot + l;
            quantize_row(src + b * t->stride(0) + h * t->stride(1) + (row0 + l) * t->stride(2),
                         t->stride(3), width, rows->scales.get() + row * nb,
                         rows->quants.get() + row * width);
          }
    }
    return;
  }
  // Views of the slots, written through.
  Tensor k_slots = keys_[layer].slice(2, slot, slot + n);
  Tensor v_slots = values_[layer].slice(2, slot, slot + n);
  copy_rows(k_slots, k.slice(2, row0, row0 + n));
  copy_rows(v_slots, v.slice(2, row0, row0 + n));
}

void KVCache::read_positions(int64_t layer, bool values, int64_t first, int64_t n,
                             Tensor& out) const {
  const KVCacheOptions& o = options_;
  const int64_t cap = capacities_[layer];
  const int64_t width = values ? o.value_dim : o.head_dim;
  for (int64_t i = 0; i < n;) {
    const int64_t slot = (first + i) % cap;
    const int64_t run = std::min(n - i, cap - slot);  // slots without a wrap
    if (o.storage == KVCacheStorage::kQ8_0) {
      const Q8Rows& rows = values ? q8_values_[layer] : q8_keys_[layer];
      const int64_t nb = width / kKVCacheQ8Block;
      for (int64_t b = 0; b < o.batch_size; ++b)
        for (int64_t h = 0; h < o.num_kv_heads; ++h)
          for (int64_t l = 0; l < run; ++l) {
            const int64_t row = (b * o.num_kv_heads + h) * cap + slot + l;
            float* dst =
                out.data<float>() + b * out.stride(0) + h * out.stride(1) + (i + l) * out.stride(2);
            dequantize_row(rows.scales.get() + row * nb, rows.quants.get() + row * width, width,
                           dst);
          }
    } else {
      const Tensor& storage = values ? values_[layer] : keys_[layer];
      Tensor dst = out.slice(2, i, i + run);
      copy_rows(dst, storage.slice(2, slot, slot + run));
    }
    i += run;
  }
}

KVCacheView KVCache::extend(int64_t layer, const Tensor& k, const Tensor& v) {
  check_layer(layer, "extend");
  const KVCacheOptions& o = options_;
  const int64_t window = this->window(layer);
  const int64_t L = k.dim() == 4 ? k.size(2) : 0;
  if (window == 0 || L <= 1) {
    append(layer, k, v);
    return {keys(layer), values(layer)};
  }
  // Several new queries: the last W − 1 old positions each may need, in
  // position order, then the new ones (copied before the ring overwrites them).
  const int64_t len = lengths_[layer];
  const int64_t old = std::min({held(layer), window - 1, len});
  const DType dtype = o.storage == KVCacheStorage::kQ8_0 ? DType::kFloat32 : o.dtype;
  Tensor keys = Tensor::empty({o.batch_size, o.num_kv_heads, old + L, o.head_dim}, dtype);
  Tensor vals = Tensor::empty({o.batch_size, o.num_kv_heads, old + L, o.value_dim}, dtype);
  read_positions(layer, false, len - old, old, keys);
  read_positions(layer, true, len - old, old, vals);
  append(layer, k, v);  // checks k and v
  Tensor new_keys = keys.slice(2, old, old + L);
  Tensor new_values = vals.slice(2, old, old + L);
  copy_rows(new_keys, k);
  copy_rows(new_values, v);
  return {keys, vals};
}

Tensor KVCache::free_slots(std::vector<Tensor>& storage, int64_t layer, int64_t L, const char* fn) {
  check_layer(layer, fn);
  check_full(layer, fn);
  check_float(fn);
  check_room(layer, L, fn);
  return storage[layer].slice(2, lengths_[layer], lengths_[layer] + L);
}

Tensor KVCache::key_slots(int64_t layer, int64_t L) {
  return free_slots(keys_, layer, L, "key_slots");
}

Tensor KVCache::value_slots(int64_t layer, int64_t L) {
  return free_slots(values_, layer, L, "value_slots");
}

void KVCache::commit(int64_t layer, int64_t L) {
  check_layer(layer, "commit");
  check_full(layer, "commit");
  check_room(layer, L, "commit");
  lengths_[layer] += L;
}

Tensor KVCache::keys(int64_t layer) const {
  check_layer(layer, "keys");
  if (options_.storage == KVCacheStorage::kQ8_0) return dequantized(layer, /*values=*/false);
  return keys_[layer].slice(2, 0, held(layer));
}

Tensor KVCache::values(int64_t layer) const {
  check_layer(layer, "values");
  if (options_.storage == KVCacheStorage::kQ8_0) return dequantized(layer, /*values=*/true);
  return values_[layer].slice(2, 0, held(layer));
}

int64_t KVCache::length(int64_t layer) const {
  check_layer(layer, "length");
  return lengths_[layer];
}

int64_t KVCache::length() const { return *std::min_element(lengths_.begin(), lengths_.end()); }

int64_t KVCache::held(int64_t layer) const {
  check_layer(layer, "held");
  return std::min(lengths_[layer], capacities_[layer]);
}

int64_t KVCache::window(int64_t layer) const {
  check_layer(layer, "window");
  return options_.windows.empty() ? 0 : options_.windows[layer];
}

int64_t KVCache::capacity(int64_t layer) const {
  check_layer(layer, "capacity");
  return capacities_[layer];
}

void KVCache::reset() { std::fill(lengths_.begin(), lengths_.end(), 0); }

int64_t KVCache::min_truncate_length() const {
  int64_t shortest = 0;
  for (int64_t i = 0; i < options_.num_layers; ++i) {
    const int64_t len = lengths_[i], cap = capacities_[i], w = window(i);
    // After truncate(n) the next query (position n) needs positions n − W + 1 … n − 1,
    // and the ring holds len − cap … len − 1.
    if (w > 0 && len > cap) shortest = std::max(shortest, len - cap + w - 1);
  }
  return shortest;
}

void KVCache::truncate(int64_t length) {
  QKV_CHECK(length >= 0 && length <= this->length(), "KVCache::truncate: length must be in [0, ",
            this->length(), "] (the positions every layer holds), got ", length);
  QKV_CHECK(length == 0 || length >= min_truncate_length(), "KVCache::truncate: length ", length,
            " is before min_truncate_length() = ", min_truncate_length(),
            ": a sliding-window layer's ring has already overwritten positions the next query "
            "would need; truncate to 0 and feed the sequence again");
  std::fill(lengths_.begin(), lengths_.end(), length);
}

const Tensor& KVCache::key_storage(int64_t layer) const {
  check_layer(layer, "key_storage");
  check_float("key_storage");
  return keys_[layer];
}

const Tensor& KVCache::value_storage(int64_t layer) const {
  check_layer(layer, "value_storage");
  check_float("value_storage");
  return values_[layer];
}

}  // namespace qkv::nn
