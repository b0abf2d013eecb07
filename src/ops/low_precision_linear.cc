// linear() through a LowPrecisionWeight: the shape and dtype checks, then
// kernels::low_precision_gemm on the rows of x.
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/low_precision_gemm.h"
#include "kernels/row_kernels.h"
#include "ops/checks.h"
#include "qkv/error.h"
#include "qkv/functional.h"
#include "qkv/linear.h"

namespace qkv {

LowPrecisionWeight::LowPrecisionWeight(const Tensor& weight, Precision precision,
                                       const Tensor& smoothing) {
  const char* fn = "LowPrecisionWeight";
  check_dim(weight, 2, fn, "weight", "[out_features, in_features]");
  QKV_CHECK_TYPE(weight.dtype() == DType::kFloat32, fn, ": weight must be float32, got ",
                 dtype_name(weight.dtype()));
  QKV_CHECK(precision != Precision::kFloat32, fn,
            ": precision must be bfloat16 or int8 (a float32 weight is used as it is)");
  const Tensor w = weight.contiguous();
  Tensor s;
  if (smoothing.defined()) {
    QKV_CHECK(precision == Precision::kInt8, fn, ": smoothing is for int8 weights, got precision ",
              precision_name(precision));
    QKV_CHECK_TYPE(smoothing.dtype() == DType::kFloat32, fn, ": smoothing must be float32, got ",
                   dtype_name(smoothing.dtype()));
    QKV_CHECK(smoothing.dim() == 1 && smoothing.size(0) == w.size(1), fn,
              ": smoothing must be [in_features = ", w.size(1), "], got ",
              shape_str(smoothing.shape()));
    s = smoothing.contiguous();
  }
  packed_ = std::make_shared<const kernels::PackedWeights>(
      w.data<float>(), w.size(0), w.size(1), precision, s.defined() ? s.data<float>() : nullptr);
}

Tensor smoothing_factors(const Tensor& input_absmax, const Tensor& weight, double alpha) {
  const char* fn = "smoothing_factors";
  check_dim(weight, 2, fn, "weight", "[out_features, in_features]");
  check_defined(input_absmax, fn, "input_absmax");
  const int64_t out = weight.size(0), in = weight.size(1);
  QKV_CHECK(input_absmax.dim() == 1 && input_absmax.size(0) == in, fn,
            ": input_absmax must be [in_features = ", in, "], got ",
            shape_str(input_absmax.shape()));
  QKV_CHECK(alpha >= 0.0 && alpha <= 1.0, fn, ": alpha must be in [0, 1], got ", alpha);
  const Tensor a = input_absmax.to(DType::kFloat64).contiguous();
  const Tensor w = weight.to(DType::kFloat64).contiguous();
  Tensor s = Tensor::empty({in}, DType::kFloat32);
  for (int64_t p = 0; p < in; ++p) {
    double w_max = 0.0;
    for (int64_t j = 0; j < out; ++j)
      w_max = std::max(w_max, std::fabs(w.data<double>()[j * in + p]));
    const double a_max = std::fabs(a.data<double>()[p]);
    double f = 1.0;
    if (a_max > 0.0 && w_max > 0.0 && std::isfinite(a_max) && std::isfinite(w_max))
      f = std::clamp(std::pow(a_max, alpha) / std::pow(w_max, 1.0 - alpha), 0x1p-30, 0x1p30);
    s.data<float>()[p] = static_cast<float>(f);
  }
  return s;
}

Precision LowPrecisionWeight::precision() const {
  return packed_ ? packed_->precision() : Precision::kFloat32;
}
int64_t LowPrecisionWeight::in_features() const { return packed_ ? packed_->k() : 0; }
int64_t LowPrecisionWeight::out_features() const { return packed_ ? packed_->n() : 0; }
int64_t LowPrecisionWeight::bytes() const { return packed_ ? packed_->bytes() : 0; }

namespace {

// The checks shared by linear and linear_into; returns the rows of x.
int64_t check_low_precision_linear(const Tensor& x, const LowPrecisionWeight& weight,
                                   const Tensor& bias, const char* fn) {
  QKV_CHECK(!weight.empty(), fn, ": the LowPrecisionWeight is empty");
  return check_converted_linear(x, weight.in_features(), weight.out_features(), bias, fn,
                                precision_name(weight.precision()));
}

void run(Tensor& out, int64_t ldy, const Tensor& x, const LowPrecisionWeight& weight,
         const Tensor& bias, int64_t rows, kernels::RowMap then = nullptr) {
  const float* b = bias.defined() ? bias.data<float>() : nullptr;
  kernels::low_precision_gemm(x.data<float>(), weight.in_features(), rows, weight.packed(), b,
                              out.data<float>(), ldy, then);
}

// The float32 row kernel of `activation`, or null (ReLU has none).
kernels::RowMap row_map(Activation activation) {
  const kernels::RowKernels& rows = kernels::active_row_kernels();
  switch (activation) {
    case Activation::kGelu:
      return rows.gelu;
    case Activation::kGeluTanh:
      return rows.gelu_tanh;
    case Activation::kSilu:
      return rows.silu;
    case Activation::kRelu:
      break;
  }
  return nullptr;
}

}  // namespace

Tensor linear(const Tensor& x, const LowPrecisionWeight& weight, const Tensor& bias) {
  const int64_t rows = check_low_precision_linear(x, weight, bias, "linear");
  std::vector<int64_t> out_shape = x.shape();
  out_shape.back() = weight.out_features();
  Tensor out = Tensor::empty(out_shape, DType::kFloat32);
  run(out, weight.out_features(), x.contiguous(), weight, bias.defined() ? bias.contiguous() : bias,
      rows);
  return out;
}

void linear_into(Tensor& out, const Tensor& x, const LowPrecisionWeight& weight,
                 const Tensor& bias) {
  const char* fn = "linear_into";
  const int64_t rows = check_low_precision_linear(x, weight, bias, fn);
  const int64_t ldy = check_linear_out(out, x, bias, rows, weight.out_features(), fn);
  run(out, ldy, x, weight, bias, rows);
}

void linear_into(Tensor& out, const Tensor& x, const LowPrecisionWeight& weight, const Tensor& bias,
                 Activation activation) {
  const char* fn = "linear_into";
  const int64_t rows = check_low_precision_linear(x, weight, bias, fn);
  const int64_t ldy = check_linear_out(out, x, bias, rows, weight.out_features(), fn);
  const kernels::RowMap then = row_map(activation);
  run(out, ldy, x, weight, bias, rows, then);
  if (then == nullptr) activate_into(out, out, activation);
}

}  // namespace qkv
