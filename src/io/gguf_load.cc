// GGUF: finding tensors and converting them to qkv tensors (the block-quantized types through
// qkv::dequantize_row).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "io/gguf_util.h"
#include "io/stored_values.h"
#include "qkv/io/gguf.h"
#include "qkv/quantized_linear.h"

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
    case GgmlType::kF32:  // the stored bytes as they are
    case GgmlType::kF64: {
      Tensor t = empty(info.type == GgmlType::kF32 ? DType::kFloat32 : DType::kFloat64);
      if (n > 0) std::memcpy(t.raw_data(), src, info.bytes);  // the data may be unaligned
      return t;
    }
    case GgmlType::kF16:
      return as(DType::kFloat32, uint16_t{}, half_to_float);
    case GgmlType::kBF16:
      return as(DType::kFloat32, uint16_t{}, bfloat16_to_float);
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
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
    case GgmlType::kIQ4_NL: {
      // The reader checked that dims[0] is a multiple of the block and the byte size, so the
      // blocks cover every element; rows of dims[0] elements are dequantized in one go.
      const QuantFormat format = quant_format_from_ggml_type(static_cast<uint32_t>(info.type));
      Tensor t = empty(DType::kFloat32);
      if (n == 0) return t;
      const int64_t row = info.dims.empty() ? 1 : info.dims[0];
      const int64_t row_bytes = row / quant_block_elements(format) * quant_block_bytes(format);
      float* out = t.data<float>();
      for (int64_t r = 0; r < n / row; ++r)
        dequantize_row(format, src + r * row_bytes, out + r * row, row);
      return t;
    }
    default:
      break;
  }
  throw Error(ErrorKind::kType,
              detail::concat("GGUF file '", source_, "': tensor ", quoted(name), " is ",
                             ggml_type_name(info.type),
                             "; GgufFile::load converts F32, F16, BF16, F64, I8..I64, Q4_0, "
                             "Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K and IQ4_NL only"));
}

}  // namespace qkv::io
