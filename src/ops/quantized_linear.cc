// QuantizedWeight (validation of the block bytes, ownership) and linear(),
// linear_into() and embedding() on it: the shape and dtype checks, then
// kernels::quant_gemm / quant_gather_rows.
#include "qkv/quantized_linear.h"

#include <array>
#include <cstddef>
#include <cstring>
#include <limits>

#include "kernels/quant_gemm.h"
#include "ops/checks.h"
#include "qkv/error.h"

namespace qkv {

QuantFormat quant_format_from_ggml_type(uint32_t ggml_type) {
  if (kernels::is_block_format(ggml_type)) return static_cast<QuantFormat>(ggml_type);
  throw Error(ErrorKind::kValue, detail::concat("quantized weight: ggml type ", ggml_type,
                                                " is not a supported block format (",
                                                kernels::supported_block_formats(), ")"));
}

const char* quant_format_name(QuantFormat format) { return kernels::block_format_name(format); }
int64_t quant_block_elements(QuantFormat format) { return kernels::block_layout(format).elems; }
int64_t quant_block_bytes(QuantFormat format) { return kernels::block_layout(format).bytes; }

void dequantize_row(QuantFormat format, const void* blocks, float* out, int64_t n) {
  kernels::dequantize_row_reference(format, static_cast<const uint8_t*>(blocks), out, n);
}

struct QuantizedWeight::State {
  kernels::QuantMatrix matrix;
  std::shared_ptr<const void> owner;  // keeps matrix.data alive
};

namespace {

// The checks of both constructors; returns the matrix over `data`.
kernels::QuantMatrix checked_matrix(QuantFormat format, int64_t out, int64_t in, const void* data,
                                    int64_t size_bytes) {
  const char* fn = "QuantizedWeight";
  quant_format_from_ggml_type(static_cast<uint32_t>(format));  // a known format
  const char* name = quant_format_name(format);
  const int64_t block = quant_block_elements(format), block_bytes = quant_block_bytes(format);
  QKV_CHECK(out > 0 && in > 0, fn, ": a ", name,
            " weight needs out_features and in_features > 0, got [", out, ", ", in, "]");
  QKV_CHECK(in % block == 0, fn, ": in_features (ne[0]) of a ", name,
            " weight must be a multiple of its block of ", block, ", got ", in);
  const int64_t row_bytes = in / block * block_bytes;
  QKV_CHECK(out <= std::numeric_limits<int64_t>::max() / row_bytes, fn, ": [", out, ", ", in, "] ",
            name, " weight is too large");
  QKV_CHECK(size_bytes == out * row_bytes, fn, ": a [", out, ", ", in, "] ", name, " weight is ",
            out, " rows x ", in / block, " blocks x ", block_bytes, " bytes = ", out * row_bytes,
            " bytes, got ", size_bytes);
  QKV_CHECK(data != nullptr, fn, ": data is null");
  const auto* bytes = static_cast<const uint8_t*>(data);
  const int64_t bad = kernels::first_nonfinite_block(format, bytes, size_bytes / block_bytes);
  QKV_CHECK(bad < 0, fn, ": ", name, " block ", bad, " (row ", bad / (in / block), ", column ",
            bad % (in / block) * block, ") has a NaN or infinite fp16 scale");
  return {format, out, in, bytes, row_bytes};
}

}  // namespace

QuantizedWeight::QuantizedWeight(QuantFormat format, int64_t out_features, int64_t in_features,
                                 std::span<const std::byte> bytes) {
  // Validate the caller's bytes first, then copy them (64-byte aligned).
  checked_matrix(format, out_features, in_features, bytes.data(),
                 static_cast<int64_t>(bytes.size()));
  std::shared_ptr<std::byte[]> copy(
      new (std::align_val_t(64)) std::byte[bytes.size()],
      [](std::byte* p) { ::operator delete[](p, std::align_val_t(64)); });
  std::memcpy(copy.get(), bytes.data(), bytes.size());
  auto state = std::make_shared<State>();
  state->matrix = checked_matrix(format, out_features, in_features, copy.get(),
                                 static_cast<int64_t>(bytes.size()));
  state->owner = std::move(copy);
  state_ = std::move(state);
}

QuantizedWeight::QuantizedWeight(QuantFormat format, int64_t out_features, int64_t in_features,
                                 const void* data, int64_t size_bytes,
                                 std::shared_ptr<const void> owner) {
  auto state = std::make_shared<State>();
  state->matrix = checked_matrix(format, out_features, in_features, data, size_bytes);
  state->owner = std::move(owner);
  state_ = std::move(state);
}

QuantFormat QuantizedWeight::format() const {
  QKV_CHECK(state_ != nullptr, "QuantizedWeight: empty");
  return state_->matrix.format;
}
int64_t QuantizedWeight::in_features() const { return state_ ? state_->matrix.k : 0; }
int64_t QuantizedWeight::out_features() const { return state_ ? state_->matrix.n : 0; }
int64_t QuantizedWeight::bytes() const {
  return state_ ? state_->matrix.n * state_->matrix.row_bytes : 0;
}
const kernels::QuantMatrix& QuantizedWeight::matrix() const {
  QKV_CHECK(state_ != nullptr, "QuantizedWeight: empty");
  return state_->matrix;
}

Tensor QuantizedWeight::dequantize() const {
  const kernels::QuantMatrix& w = matrix();
  Tensor out = Tensor::empty({w.n, w.k}, DType::kFloat32);
  const kernels::QuantKernels& table = kernels::active_quant_kernels();
  float* dst = out.data<float>();
#pragma omp parallel for schedule(static) if (w.n * w.k >= (1 << 18))
  for (int64_t j = 0; j < w.n; j += 16)
    table.dequantize_rows(w, j, std::min(w.n, j + 16), dst + j * w.k, w.k);
  return out;
}

namespace {

// The checks shared by linear and linear_into; returns the rows of x.
int64_t check_quantized_linear(const Tensor& x, const QuantizedWeight& weight, const Tensor& bias,
                               const char* fn) {
  QKV_CHECK(!weight.empty(), fn, ": the QuantizedWeight is empty");
  return check_converted_linear(x, weight.in_features(), weight.out_features(), bias, fn,
                                quant_format_name(weight.format()));
}

void run(Tensor& out, int64_t ldy, const Tensor& x, const QuantizedWeight& weight,
         const Tensor& bias, int64_t rows) {
  kernels::quant_gemm(x.data<float>(), weight.in_features(), rows, weight.matrix(),
                      bias.defined() ? bias.data<float>() : nullptr, out.data<float>(), ldy);
}

}  // namespace

Tensor linear(const Tensor& x, const QuantizedWeight& weight, const Tensor& bias) {
  const int64_t rows = check_quantized_linear(x, weight, bias, "linear");
  Shape out_shape = x.shape();
  out_shape.back() = weight.out_features();
  Tensor out = Tensor::empty(out_shape, DType::kFloat32);
  run(out, weight.out_features(), x.contiguous(), weight, bias.defined() ? bias.contiguous() : bias,
      rows);
  return out;
}

void linear_into(Tensor& out, const Tensor& x, const QuantizedWeight& weight, const Tensor& bias) {
  const char* fn = "linear_into";
  const int64_t rows = check_quantized_linear(x, weight, bias, fn);
  const int64_t ldy = check_linear_out(out, x, bias, rows, weight.out_features(), fn);
  run(out, ldy, x, weight, bias, rows);
}

void linear_into_each(const Tensor& x, std::span<const QuantizedLinearInto> products) {
  const char* fn = "linear_into_each";
  QKV_CHECK(products.size() <= kMaxLinearIntoEach, fn, ": at most ", kMaxLinearIntoEach,
            " products, got ", products.size());
  std::array<kernels::QuantProduct, kMaxLinearIntoEach> each;
  int64_t rows = 0;
  for (size_t i = 0; i < products.size(); ++i) {
    const QuantizedLinearInto& p = products[i];
    QKV_CHECK(p.out != nullptr && p.weight != nullptr, fn, ": product ", i,
              " has no out or no weight");
    const Tensor none;
    const Tensor& bias = p.bias != nullptr ? *p.bias : none;
    rows = check_quantized_linear(x, *p.weight, bias, fn);
    const int64_t ldy = check_linear_out(*p.out, x, bias, rows, p.weight->out_features(), fn);
    each[i] = {&p.weight->matrix(), bias.defined() ? bias.data<float>() : nullptr,
               p.out->data<float>(), ldy};
  }
  if (!products.empty())
    kernels::quant_gemm_each(x.data<float>(), products[0].weight->in_features(), rows,
                             std::span(each.data(), products.size()));
}

namespace {

void check_ids(std::span<const int64_t> ids, const QuantizedWeight& weight, const char* fn) {
  QKV_CHECK(!weight.empty(), fn, ": the QuantizedWeight is empty");
  const int64_t n = weight.out_features();
  for (size_t i = 0; i < ids.size(); ++i)
    QKV_CHECK(ids[i] >= 0 && ids[i] < n, fn, ": id ", ids[i], " at flat index ", i,
              " is out of range [0, ", n, ") of the ", quant_format_name(weight.format()),
              " table [", n, ", ", weight.in_features(), "]");
}

}  // namespace

Tensor embedding(const std::vector<int64_t>& ids, const Shape& shape,
                 const QuantizedWeight& weight) {
  const char* fn = "embedding";
  for (int64_t s : shape) QKV_CHECK(s >= 0, fn, ": ids shape ", shape_str(shape), " is invalid");
  QKV_CHECK(shape_numel(shape) == static_cast<int64_t>(ids.size()), fn, ": ", ids.size(),
            " ids do not form the shape ", shape_str(shape));
  check_ids(ids, weight, fn);
  Shape out_shape = shape;
  out_shape.push_back(weight.in_features());
  Tensor out = Tensor::empty(out_shape, DType::kFloat32);
  kernels::quant_gather_rows(weight.matrix(), ids.data(), static_cast<int64_t>(ids.size()),
                             out.data<float>(), weight.in_features());
  return out;
}

void embedding_into(Tensor& out, std::span<const int64_t> ids, const QuantizedWeight& weight) {
  const char* fn = "embedding_into";
  check_ids(ids, weight, fn);
  check_defined(out, fn, "out");
  const int64_t d = weight.in_features(), n = static_cast<int64_t>(ids.size());
  QKV_CHECK_TYPE(out.dtype() == DType::kFloat32, fn, ": out must be float32, got ",
                 dtype_name(out.dtype()));
  QKV_CHECK(out.dim() >= 1 && out.size(-1) == d && out.numel() == n * d && out.is_contiguous(), fn,
            ": out must be contiguous [..., ", d, "] with ", n, " rows (one per id), got ",
            shape_str(out.shape()));
  kernels::quant_gather_rows(weight.matrix(), ids.data(), n, out.data<float>(), d);
}

}  // namespace qkv
