// GGUF: finding tensors and converting the plain types to qkv tensors.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "io/gguf_util.h"
#include "io/stored_values.h"
#include "qkv/io/gguf.h"

namespace qkv::io {

using gguf_detail::quoted;

int64_t GgufTensorInfo::numel() const {
  // With a dimension of 0 the others may multiply past int64 (the reader allows it).
  if (std::find(dims.begin(), dims.end(), 0) != dims.end()) return 0;
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // validated by the reader: no overflow
  return n;
}

Shape GgufTensorInfo::shape() const { return Shape(dims.rbegin(), dims.rend()); }

bool GgufFile::has_tensor(std::string_view name) const {
  return tensor_index_.find(name) != tensor_index_.end();
}

const GgufTensorInfo& GgufFile::tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  QKV_CHECK(it != tensor_index_.end(), "GGUF file '", source_, "' has no tensor ", quoted(name));
  return tensors_[it->second];
}

Tensor GgufFile::load(std::string_view name) const {
  const GgufTensorInfo& info = tensor(name);
  const std::byte* src = info.data.data();
  const int64_t n = info.numel();
  const Shape shape = info.shape();
  // An empty tensor's other dims may be too large for a qkv Tensor's strides.
  auto empty = [&](DType dtype) {
    try {
      return Tensor::empty(shape, dtype);
    } catch (const Error& e) {
      throw Error(e.kind(), detail::concat("GGUF file '", source_, "': tensor ", quoted(name),
                                           " cannot be loaded: ", e.what()));
    }
  };
  auto as = [&](DType dtype, auto stored_tag, auto convert) {
    Tensor t = empty(dtype);
    using Stored = decltype(stored_tag);
    if (dtype == DType::kFloat32) {
      convert_all<Stored>(src, n, t.data<float>(), convert);
    } else {
      convert_all<Stored>(src, n, t.data<double>(), convert);
    }
    return t;
  };
  auto exact = [](auto v) { return static_cast<double>(v); };
  switch (info.type) {
    case GgmlType::kF32: {
      Tensor t = empty(DType::kFloat32);
      if (n > 0) std::memcpy(t.raw_data(), src, info.bytes);  // the data may be unaligned
      return t;
    }
    case GgmlType::kF16:
      return as(DType::kFloat32, uint16_t{}, half_to_float);
    case GgmlType::kBF16:
      return as(DType::kFloat32, uint16_t{}, bfloat16_to_float);
    case GgmlType::kF64: {
      Tensor t = empty(DType::kFloat64);
      if (n > 0) std::memcpy(t.raw_data(), src, info.bytes);
      return t;
    }
    case GgmlType::kI8:
      return as(DType::kFloat64, int8_t{}, exact);
    case GgmlType::kI16:
      return as(DType::kFloat64, int16_t{}, exact);
    case GgmlType::kI32:
      return as(DType::kFloat64, int32_t{}, exact);
    case GgmlType::kI64: {
      Tensor t = empty(DType::kFloat64);
      double* out = t.data<double>();
      for (int64_t i = 0; i < n; ++i) {
        const auto v = read_le<int64_t>(src + i * 8);
        out[i] = static_cast<double>(v);
        // 2^63 itself is out of int64's range: compare before converting back.
        QKV_CHECK(out[i] < 0x1p63 && static_cast<int64_t>(out[i]) == v, "GGUF file '", source_,
                  "': tensor ", quoted(name), " (I64) holds ", v, " at element ", i,
                  ", which float64 cannot represent exactly");
      }
      return t;
    }
    default:
      break;
  }
  throw Error(ErrorKind::kType,
              detail::concat("GGUF file '", source_, "': tensor ", quoted(name), " is ",
                             ggml_type_name(info.type),
                             "; GgufFile::load converts F32, F16, BF16, F64 and I8..I64 only, ",
                             "quantized tensors are read from their blocks "
                             "(tensor(name).data) by the dequantizer"));
}

}  // namespace qkv::io
