// qkv::Tensor — an N-dimensional array with shape and strides.
//
// A Tensor is a view: a shared buffer, an element offset, a shape and strides
// (in elements). view/reshape/transpose/permute/slice/expand make new views of
// the same buffer without copying, exactly as in PyTorch; contiguous() and
// clone() copy. float32 is the working dtype, float64 serves the reference
// kernels and gradient checks, bool holds masks.
//
//   Tensor x = Tensor::randn({2, 4, 8}, gen);   // [B, L, D]
//   Tensor heads = x.view({2, 4, 2, 4}).transpose(1, 2);   // [B, H, L, E]
//   std::cout << heads.select(0, 0).select(0, 0);          // rounded matrix
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "qkv/dims.h"
#include "qkv/error.h"

namespace qkv {

class Generator;

// Sizes and strides (in elements), kept inline: views never allocate.
using Shape = Dims;
using Strides = Dims;

// kBFloat16 is a storage dtype: attention takes it (widened to float32 inside,
// accumulating in float32, rounded back on output), conversions with to() and
// copy_from() handle it; the other ops compute in float32 or float64 only.
enum class DType : uint8_t { kFloat32, kFloat64, kBool, kBFloat16 };

// Bytes per element.
size_t dtype_size(DType dtype);
// "float32", "float64", "bool", "bfloat16".
const char* dtype_name(DType dtype);
// float32 or float64: the dtypes qkv computes in (not bfloat16, see above).
bool is_floating(DType dtype);

// bfloat16 is the upper half of a float32: widening is exact, narrowing
// rounds to nearest even (NaN stays NaN), as torch does.
inline float bfloat16_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}
inline uint16_t float_to_bfloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x0040u;
  // A select rather than a branch, so conversion loops vectorise.
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// "[2, 4, 8]".
std::string shape_str(const Shape& shape);
// Row-major strides of a contiguous tensor of `shape`.
Strides contiguous_strides(const Shape& shape);
// Product of the sizes.
int64_t shape_numel(const Shape& shape);
// The broadcast of two shapes (NumPy/PyTorch rules), or an Error naming `what`.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* what);

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kFloat32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kFloat64;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::kBool;
}

class Tensor {
 public:
  // An undefined tensor: the "none" of optional tensor arguments.
  Tensor() = default;

  // --- Creation ------------------------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype = DType::kFloat32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::kFloat32);
  static Tensor ones(const Shape& shape, DType dtype = DType::kFloat32);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::kFloat32);
  // Copies `values` (row-major) into a new tensor of `shape`.
  static Tensor from_vector(const Shape& shape, std::span<const float> values);
  static Tensor from_vector(const Shape& shape, std::span<const double> values);
  static Tensor from_bools(const Shape& shape, const std::vector<bool>& values);
  // Wraps memory owned elsewhere without copying; `owner` keeps it alive.
  static Tensor from_blob(void* data, const Shape& shape, const Strides& strides, DType dtype,
                          std::shared_ptr<void> owner);
  // Standard normal samples, drawn in row-major order from `gen`.
  static Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::kFloat32);
  // Uniform samples in [low, high).
  static Tensor rand(const Shape& shape, Generator& gen, double low = 0.0, double high = 1.0,
                     DType dtype = DType::kFloat32);

  // --- Properties ----------------------------------------------------------
  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  // Size of dimension `d`; negative `d` counts from the end.
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return shape_numel(shape_); }
  bool is_contiguous() const;
  // True when both views share one buffer.
  bool shares_storage_with(const Tensor& other) const { return storage_ == other.storage_; }

  // Typed pointer to the first element (element [0, 0, ...]); checks the dtype.
  template <class T>
  T* data();
  template <class T>
  const T* data() const;
  void* raw_data();
  const void* raw_data() const;

  // --- Views (no copy) -----------------------------------------------------
  // New shape over the same elements; one size may be -1. Needs compatible strides.
  Tensor view(const Shape& shape) const;
  // view() when the strides allow it, else a contiguous copy (as torch.reshape).
  Tensor reshape(const Shape& shape) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor permute(const std::vector<int64_t>& order) const;
  // Elements start, start+step, ... < end along `dim` (negative indices count from the end).
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  // Removes `dim` by fixing it to `index`.
  Tensor select(int64_t dim, int64_t index) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  // Broadcasts size-1 dims (and new leading dims) to `shape` with stride 0.
  Tensor expand(const Shape& shape) const;

  // --- Copies --------------------------------------------------------------
  // This tensor if already contiguous, else a contiguous copy.
  Tensor contiguous() const;
  // Always a fresh contiguous copy.
  Tensor clone() const;
  // Converts the dtype (bool <-> float gives 0/1); a copy unless the dtype is already `dtype`.
  Tensor to(DType dtype) const;
  // Copies `src` (broadcast to this shape) into this view, converting the dtype.
  void copy_from(const Tensor& src);
  // Sets every element of this view to `value`.
  void fill(double value);

  // --- Element access (for tests, printing and small examples) -------------
  double item() const;
  double at(std::initializer_list<int64_t> index) const;
  void set(std::initializer_list<int64_t> index, double value);
  // All elements in row-major order, converted to double.
  std::vector<double> to_vector() const;

  // Shape and values, rounded to `precision` decimals, as torch prints them.
  std::string to_string(int precision = 4) const;

 private:
  int64_t normalize_dim(int64_t d, int64_t ndim, const char* what) const;
  int64_t element_offset(std::initializer_list<int64_t> index) const;

  std::shared_ptr<void> storage_;  // keeps the buffer alive
  std::byte* base_ = nullptr;      // start of the buffer
  int64_t offset_ = 0;             // in elements
  Shape shape_;
  Strides strides_;
  DType dtype_ = DType::kFloat32;
};

std::ostream& operator<<(std::ostream& out, const Tensor& t);

// Calls fn(linear_index, element_offset) for every element in row-major order.
// `offset` is in elements from the tensor's first element.
template <class Fn>
void for_each_offset(const Shape& shape, const Strides& strides, Fn&& fn) {
  const int64_t n = shape_numel(shape);
  if (n == 0) return;
  const size_t nd = shape.size();
  Dims index(nd, 0);
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    fn(i, offset);
    for (size_t d = nd; d-- > 0;) {
      if (++index[d] < shape[d]) {
        offset += strides[d];
        break;
      }
      offset -= strides[d] * (shape[d] - 1);
      index[d] = 0;
    }
  }
}

// Max |a - b| over all elements (shapes must match); for tests.
double max_abs_diff(const Tensor& a, const Tensor& b);

template <class T>
T* Tensor::data() {
  QKV_CHECK_TYPE(dtype_ == dtype_of<T>(), "Tensor::data: tensor has dtype ", dtype_name(dtype_),
                 ", asked for ", dtype_name(dtype_of<T>()));
  return reinterpret_cast<T*>(base_) + offset_;
}
template <class T>
const T* Tensor::data() const {
  return const_cast<Tensor*>(this)->data<T>();
}

}  // namespace qkv
