// Tensor: creation, views and copies. Printing lives in tensor_print.cc.
#include "qkv/tensor.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "qkv/generator.h"
#include "tensor/buffer_cache.h"
#include "tensor/checked_size.h"
#include "tensor/enum_names.h"
#include "tensor/parallel_threshold.h"

namespace qkv {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat64:
      return 8;
    case DType::kBool:
      return 1;
    case DType::kBFloat16:
      return 2;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  constexpr detail::EnumName<DType> kNames[] = {{DType::kFloat32, "float32"},
                                                {DType::kFloat64, "float64"},
                                                {DType::kBool, "bool"},
                                                {DType::kBFloat16, "bfloat16"}};
  return detail::name_of(kNames, dtype);
}

bool is_floating(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kFloat64; }

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t running = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = running;
    // The last product is not a stride: only its overflow check would throw.
    if (d > 0) running = detail::checked_mul(running, std::max<int64_t>(shape[d], 1), "strides");
  }
  return strides;
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n = detail::checked_mul(n, s, "number of elements");
  return n;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* what) {
  const size_t nd = std::max(a.size(), b.size());
  Shape out(nd);
  for (size_t i = 0; i < nd; ++i) {
    const int64_t sa = i < nd - a.size() ? 1 : a[i - (nd - a.size())];
    const int64_t sb = i < nd - b.size() ? 1 : b[i - (nd - b.size())];
    QKV_CHECK(sa == sb || sa == 1 || sb == 1, what, ": shapes ", shape_str(a), " and ",
              shape_str(b), " cannot be broadcast together (dimension ", i, ": ", sa, " vs ", sb,
              ")");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

namespace {

// Sizes non-negative, and the strides of a contiguous layout (the product of
// the sizes, a size 0 counting as 1) within int64, so that neither the
// element count nor any stride or offset computed from the shape wraps.
void check_shape(const Shape& shape, const char* what) {
  int64_t extent = 1;
  for (int64_t s : shape) {
    QKV_CHECK(s >= 0, what, ": sizes must be non-negative, got shape ", shape_str(shape));
    QKV_CHECK(!__builtin_mul_overflow(extent, std::max<int64_t>(s, 1), &extent), what, ": shape ",
              shape_str(shape), " has more elements than a 64-bit size can count");
  }
}

// Bytes of a tensor of `shape` and `dtype`, checked (the shape passed check_shape).
size_t checked_bytes(const Shape& shape, DType dtype, const char* what) {
  int64_t bytes;
  QKV_CHECK(
      !__builtin_mul_overflow(shape_numel(shape), static_cast<int64_t>(dtype_size(dtype)), &bytes),
      what, ": a ", dtype_name(dtype), " tensor of shape ", shape_str(shape), " needs more ",
      "than 2^63 bytes");
  return static_cast<size_t>(bytes);
}

// Reads element `i` of a buffer of `dtype` as double.
double load(const std::byte* p, DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return *reinterpret_cast<const float*>(p);
    case DType::kFloat64:
      return *reinterpret_cast<const double*>(p);
    case DType::kBool:
      return *reinterpret_cast<const bool*>(p) ? 1.0 : 0.0;
    case DType::kBFloat16:
      return bfloat16_to_float(*reinterpret_cast<const uint16_t*>(p));
  }
  return 0.0;
}

void store(std::byte* p, DType dtype, double value) {
  switch (dtype) {
    case DType::kFloat32:
      *reinterpret_cast<float*>(p) = static_cast<float>(value);
      break;
    case DType::kFloat64:
      *reinterpret_cast<double*>(p) = value;
      break;
    case DType::kBool:
      *reinterpret_cast<bool*>(p) = value != 0.0;
      break;
    case DType::kBFloat16:
      // Through float32, as torch rounds float64 -> bfloat16 (double rounding included).
      *reinterpret_cast<uint16_t*>(p) = float_to_bfloat16(static_cast<float>(value));
      break;
  }
}

// Dense conversions between bfloat16 and float32 (attention's way in and
// out), as tight loops; false for other pairs, which take the general path.
bool convert_contiguous(const Tensor& from, Tensor& to) {
  const int64_t n = to.numel();
  // Over the threads when large: the bfloat16 ops widen their operands and
  // narrow their results (an attention backward: eight tensors).
  const bool parallel = n >= detail::kParallelMinCopyElements;
  if (from.dtype() == DType::kBFloat16 && to.dtype() == DType::kFloat32) {
    const uint16_t* src = static_cast<const uint16_t*>(from.raw_data());
    float* dst = to.data<float>();
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t i = 0; i < n; ++i) dst[i] = bfloat16_to_float(src[i]);
    return true;
  }
  if (from.dtype() == DType::kFloat32 && to.dtype() == DType::kBFloat16) {
    const float* src = from.data<float>();
    uint16_t* dst = static_cast<uint16_t*>(to.raw_data());
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bfloat16(src[i]);
    return true;
  }
  return false;
}

// Strides for viewing (old_shape, old_strides) as new_shape without a copy,
// or an empty vector if the memory layout does not allow it. Follows the
// chunking rule of torch's computeStride: groups of old dims that are
// contiguous among themselves can be split or merged freely.
Strides view_strides(const Shape& old_shape, const Strides& old_strides, const Shape& new_shape) {
  if (shape_numel(old_shape) == 0 || old_shape.empty()) return contiguous_strides(new_shape);
  Strides new_strides(new_shape.size());
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(old_shape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    if (tensor_d == 0 || (old_shape[tensor_d - 1] != 1 &&
                          old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return {};
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return {};
  return new_strides;
}

Shape infer_shape(const Shape& requested, int64_t numel, const Shape& from) {
  Shape shape = requested;
  int64_t known = 1;
  int infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      QKV_CHECK(infer_at < 0, "view/reshape: only one size may be -1, got ", shape_str(requested));
      infer_at = static_cast<int>(i);
    } else {
      QKV_CHECK(shape[i] >= 0, "view/reshape: invalid size in ", shape_str(requested));
      known = detail::checked_mul(known, shape[i], "view/reshape: number of elements");
    }
  }
  if (infer_at >= 0) {
    QKV_CHECK(known != 0 && numel % known == 0, "view/reshape: shape ", shape_str(requested),
              " is invalid for a tensor of shape ", shape_str(from));
    shape[infer_at] = numel / known;
  }
  QKV_CHECK(shape_numel(shape) == numel, "view/reshape: shape ", shape_str(requested),
            " is invalid for a tensor of shape ", shape_str(from), " (", numel, " elements)");
  return shape;
}

}  // namespace

// --- Creation ----------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  check_shape(shape, "Tensor::empty");
  Tensor t;
  const size_t bytes = checked_bytes(shape, dtype, "Tensor::empty");
  // 64-byte aligned, which suits every SIMD width qkv uses.
  const size_t capacity = detail::buffer_capacity(bytes);
  std::byte* buffer;
  try {
    buffer = detail::acquire_buffer(capacity);
  } catch (const std::bad_alloc&) {
    throw Error(ErrorKind::kMemory,
                detail::concat("Tensor::empty: cannot allocate ", bytes, " bytes for a ",
                               dtype_name(dtype), " tensor of shape ", shape_str(shape)));
  }
  t.storage_ = std::shared_ptr<void>(buffer, [capacity](void* p) {
    detail::release_buffer(static_cast<std::byte*>(p), capacity);
  });
  t.base_ = buffer;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

namespace {

// Zeroes `bytes` at `p`, a large buffer on every thread: the first write to a
// fresh buffer is also what maps its pages, and one thread taking all those
// page faults while the others wait was ~10 % of the main thread's time in a
// MiniLM-sized training step at 2 threads (perf).
void zero_bytes(std::byte* p, size_t bytes) {
  constexpr size_t kChunk = size_t{1} << 18;  // 256 KiB
  if (bytes < 4 * kChunk || omp_in_parallel() || omp_get_max_threads() == 1) {
    std::memset(p, 0, bytes);
    return;
  }
  const int64_t chunks = static_cast<int64_t>((bytes + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t begin = static_cast<size_t>(c) * kChunk;
    std::memset(p + begin, 0, std::min(kChunk, bytes - begin));
  }
}

// Tensor::from_vector's: a new tensor of `dtype` (T's) holding `values`.
template <class T>
Tensor copied_from(const Shape& shape, std::span<const T> values, DType dtype) {
  QKV_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
            "Tensor::from_vector: ", values.size(), " values do not fill shape ", shape_str(shape));
  Tensor t = Tensor::empty(shape, dtype);
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

}  // namespace

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  zero_bytes(t.base_, static_cast<size_t>(t.numel()) * dtype_size(dtype));
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.fill(value);
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, std::span<const float> values) {
  return copied_from(shape, values, DType::kFloat32);
}

Tensor Tensor::from_vector(const Shape& shape, std::span<const double> values) {
  return copied_from(shape, values, DType::kFloat64);
}

Tensor Tensor::from_bools(const Shape& shape, const std::vector<bool>& values) {
  QKV_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
            "Tensor::from_bools: ", values.size(), " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, DType::kBool);
  bool* p = t.data<bool>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}

Tensor Tensor::from_blob(void* data, const Shape& shape, const Strides& strides, DType dtype,
                         std::shared_ptr<void> owner) {
  check_shape(shape, "Tensor::from_blob");
  QKV_CHECK(strides.size() == shape.size(), "Tensor::from_blob: ", strides.size(),
            " strides for shape ", shape_str(shape));
  // The farthest element's offset must be a 64-bit number too.
  if (shape_numel(shape) > 0) {
    const char* what = "Tensor::from_blob: offset of the last element";
    int64_t reach = 0;
    for (size_t d = 0; d < shape.size(); ++d)
      reach = detail::checked_add(
          reach, detail::checked_mul(shape[d] - 1, std::abs(strides[d]), what), what);
  }
  Tensor t;
  t.storage_ = owner ? std::move(owner) : std::shared_ptr<void>(data, [](void*) {});
  t.base_ = static_cast<std::byte*>(data);
  t.shape_ = shape;
  t.strides_ = strides;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::randn(const Shape& shape, Generator& gen, DType dtype) {
  QKV_CHECK_TYPE(is_floating(dtype), "Tensor::randn: dtype must be floating, got ",
                 dtype_name(dtype));
  Tensor t = empty(shape, dtype);
  std::byte* p = t.base_;
  for (int64_t i = 0; i < t.numel(); ++i) store(p + i * dtype_size(dtype), dtype, gen.normal());
  return t;
}

Tensor Tensor::rand(const Shape& shape, Generator& gen, double low, double high, DType dtype) {
  QKV_CHECK_TYPE(is_floating(dtype), "Tensor::rand: dtype must be floating, got ",
                 dtype_name(dtype));
  Tensor t = empty(shape, dtype);
  std::byte* p = t.base_;
  for (int64_t i = 0; i < t.numel(); ++i)
    store(p + i * dtype_size(dtype), dtype, low + (high - low) * gen.uniform());
  return t;
}

// --- Properties --------------------------------------------------------------

int64_t Tensor::normalize_dim(int64_t d, int64_t ndim, const char* what) const {
  QKV_CHECK(d >= -ndim && d < ndim, what, ": dimension ", d, " is out of range for a tensor of ",
            ndim, " dimensions (shape ", shape_str(shape_), ")");
  return d < 0 ? d + ndim : d;
}

int64_t Tensor::size(int64_t d) const { return shape_[normalize_dim(d, dim(), "Tensor::size")]; }

int64_t Tensor::stride(int64_t d) const {
  return strides_[normalize_dim(d, dim(), "Tensor::stride")];
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // as torch: no elements, nothing out of place
  int64_t expected = 1;
  for (size_t d = shape_.size(); d-- > 0;) {
    if (shape_[d] == 1) continue;
    if (strides_[d] != expected) return false;
    expected *= shape_[d];
  }
  return true;
}

void* Tensor::raw_data() { return base_ + offset_ * static_cast<int64_t>(dtype_size(dtype_)); }
const void* Tensor::raw_data() const { return const_cast<Tensor*>(this)->raw_data(); }

// --- Views -------------------------------------------------------------------

Tensor Tensor::view(const Shape& shape) const {
  const Shape target = infer_shape(shape, numel(), shape_);
  Strides strides = view_strides(shape_, strides_, target);
  QKV_CHECK(!strides.empty() || target.empty(), "view: shape ", shape_str(target),
            " is not compatible with the strides of a tensor of shape ", shape_str(shape_),
            "; call contiguous() first or use reshape()");
  Tensor t = *this;
  t.shape_ = target;
  t.strides_ = target.empty() ? Strides{} : strides;
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  const Shape target = infer_shape(shape, numel(), shape_);
  if (target.empty() || !view_strides(shape_, strides_, target).empty()) return view(target);
  return contiguous().view(target);
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  dim0 = normalize_dim(dim0, dim(), "transpose");
  dim1 = normalize_dim(dim1, dim(), "transpose");
  Tensor t = *this;
  std::swap(t.shape_[dim0], t.shape_[dim1]);
  std::swap(t.strides_[dim0], t.strides_[dim1]);
  return t;
}

Tensor Tensor::permute(const std::vector<int64_t>& order) const {
  QKV_CHECK(static_cast<int64_t>(order.size()) == dim(), "permute: got ", order.size(),
            " dims for a tensor of shape ", shape_str(shape_));
  std::vector<bool> seen(order.size(), false);
  Tensor t = *this;
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t d = normalize_dim(order[i], dim(), "permute");
    QKV_CHECK(!seen[d], "permute: dimension ", d, " appears twice");
    seen[d] = true;
    t.shape_[i] = shape_[d];
    t.strides_[i] = strides_[d];
  }
  return t;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = normalize_dim(d, dim(), "slice");
  QKV_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = shape_[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.shape_[d] = (end - start + step - 1) / step;
  t.strides_[d] *= step;
  return t;
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = normalize_dim(d, dim(), "select");
  const int64_t n = shape_[d];
  QKV_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dimension ", d,
            " of size ", n);
  if (index < 0) index += n;
  Tensor t = *this;
  t.offset_ += index * strides_[d];
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = normalize_dim(d, dim() + 1, "unsqueeze");
  Tensor t = *this;
  const int64_t stride =
      d < dim() ? strides_[d] * shape_[d] : 1;  // any value works for a size-1 dim
  t.shape_.insert(t.shape_.begin() + d, 1);
  t.strides_.insert(t.strides_.begin() + d, stride);
  return t;
}

Tensor Tensor::squeeze(int64_t d) const {
  d = normalize_dim(d, dim(), "squeeze");
  if (shape_[d] != 1) return *this;
  Tensor t = *this;
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::expand(const Shape& shape) const {
  QKV_CHECK(shape.size() >= shape_.size(), "expand: cannot expand shape ", shape_str(shape_),
            " to fewer dimensions ", shape_str(shape));
  check_shape(shape, "expand");
  const size_t lead = shape.size() - shape_.size();
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_.assign(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) continue;
    const int64_t have = shape_[i - lead];
    QKV_CHECK(have == shape[i] || have == 1, "expand: shape ", shape_str(shape_),
              " cannot be expanded to ", shape_str(shape), " (dimension ", i, ")");
    t.strides_[i] = have == shape[i] ? strides_[i - lead] : 0;
  }
  return t;
}

// --- Copies ------------------------------------------------------------------

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  QKV_CHECK(defined(), "clone: tensor is undefined");
  Tensor t = empty(shape_, dtype_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor t = empty(shape_, dtype);
  t.copy_from(*this);
  return t;
}

namespace {

// dst = src (same shape and dtype) when both keep their last dimension
// contiguous, as head splits and merges ([B, L, H, E] <-> [B, H, L, E]) and
// slices do: one memmove per row instead of an element at a time. Returns
// false for other layouts.
bool copy_rows(const Tensor& src, Tensor& dst) {
  if (dst.dim() == 0 || dst.numel() == 0 || dst.stride(-1) != 1 || src.stride(-1) != 1)
    return false;
  const int64_t row = dst.size(-1);
  const Shape outer(dst.shape().begin(), dst.shape().end() - 1);
  const Strides dst_outer(dst.strides().begin(), dst.strides().end() - 1);
  const Strides src_outer(src.strides().begin(), src.strides().end() - 1);
  const int64_t rows = dst.numel() / row;
  std::vector<int64_t> src_rows(static_cast<size_t>(rows)), dst_rows(static_cast<size_t>(rows));
  for_each_offset(outer, src_outer, [&](int64_t i, int64_t off) { src_rows[i] = off; });
  for_each_offset(outer, dst_outer, [&](int64_t i, int64_t off) { dst_rows[i] = off; });
  const size_t size = dtype_size(dst.dtype());
  const std::byte* from = static_cast<const std::byte*>(src.raw_data());
  std::byte* to = static_cast<std::byte*>(dst.raw_data());
#pragma omp parallel for schedule(static) if (dst.numel() >= detail::kParallelMinCopyElements)
  for (int64_t r = 0; r < rows; ++r)
    std::memmove(to + dst_rows[r] * size, from + src_rows[r] * size, row * size);
  return true;
}

}  // namespace

void Tensor::copy_from(const Tensor& src) {
  QKV_CHECK(defined() && src.defined(), "copy_from: tensor is undefined");
  const Tensor from = src.expand(shape_);
  const size_t from_size = dtype_size(from.dtype_);
  const size_t to_size = dtype_size(dtype_);
  const std::byte* from_base = static_cast<const std::byte*>(from.raw_data());
  std::byte* to_base = static_cast<std::byte*>(raw_data());
  if (from.dtype_ == dtype_ && from.is_contiguous() && is_contiguous() && numel() > 0) {
    std::memmove(to_base, from_base, static_cast<size_t>(numel()) * to_size);
    return;
  }
  if (from.is_contiguous() && is_contiguous() && convert_contiguous(from, *this)) return;
  if (from.dtype_ == dtype_ && copy_rows(from, *this)) return;
  // Gather source offsets first: the two views may walk memory differently.
  std::vector<int64_t> from_offsets(static_cast<size_t>(numel()));
  for_each_offset(from.shape_, from.strides_,
                  [&](int64_t i, int64_t off) { from_offsets[i] = off; });
  for_each_offset(shape_, strides_, [&](int64_t i, int64_t off) {
    store(to_base + off * to_size, dtype_,
          load(from_base + from_offsets[i] * from_size, from.dtype_));
  });
}

void Tensor::fill(double value) {
  // The common case (zeroing gradients) without a call per element.
  if (is_contiguous() && dtype_ == DType::kFloat32) {
    std::fill_n(data<float>(), numel(), static_cast<float>(value));
    return;
  }
  if (is_contiguous() && dtype_ == DType::kFloat64) {
    std::fill_n(data<double>(), numel(), value);
    return;
  }
  std::byte* base = static_cast<std::byte*>(raw_data());
  const size_t size = dtype_size(dtype_);
  for_each_offset(shape_, strides_,
                  [&](int64_t, int64_t off) { store(base + off * size, dtype_, value); });
}

// --- Element access ----------------------------------------------------------

int64_t Tensor::element_offset(std::initializer_list<int64_t> index) const {
  QKV_CHECK(static_cast<int64_t>(index.size()) == dim(), "Tensor::at: ", index.size(),
            " indices for a tensor of shape ", shape_str(shape_));
  int64_t off = 0;
  size_t d = 0;
  for (int64_t i : index) {
    QKV_CHECK(i >= 0 && i < shape_[d], "Tensor::at: index ", i, " out of range for dimension ", d,
              " of size ", shape_[d]);
    off += i * strides_[d++];
  }
  return off;
}

double Tensor::item() const {
  QKV_CHECK(numel() == 1, "item: tensor of shape ", shape_str(shape_),
            " has more than one element");
  return load(static_cast<const std::byte*>(raw_data()), dtype_);
}

double Tensor::at(std::initializer_list<int64_t> index) const {
  const int64_t off = element_offset(index);
  return load(static_cast<const std::byte*>(raw_data()) + off * dtype_size(dtype_), dtype_);
}

void Tensor::set(std::initializer_list<int64_t> index, double value) {
  const int64_t off = element_offset(index);
  store(static_cast<std::byte*>(raw_data()) + off * dtype_size(dtype_), dtype_, value);
}

std::vector<double> Tensor::to_vector() const {
  std::vector<double> out(static_cast<size_t>(numel()));
  const std::byte* base = static_cast<const std::byte*>(raw_data());
  const size_t size = dtype_size(dtype_);
  for_each_offset(shape_, strides_,
                  [&](int64_t i, int64_t off) { out[i] = load(base + off * size, dtype_); });
  return out;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  QKV_CHECK(a.shape() == b.shape(), "max_abs_diff: shapes differ: ", shape_str(a.shape()), " vs ",
            shape_str(b.shape()));
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = std::abs(x[i] - y[i]);
    if (std::isnan(d)) return std::numeric_limits<double>::quiet_NaN();
    worst = std::max(worst, d);
  }
  return worst;
}

}  // namespace qkv
