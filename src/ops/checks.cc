#include "ops/checks.h"

#include <cmath>

namespace qkv {

void check_defined(const Tensor& t, const char* fn, const char* arg) {
  QKV_CHECK(t.defined(), fn, ": ", arg, " is undefined (an empty Tensor())");
}

void check_floating(const Tensor& t, const char* fn, const char* arg) {
  check_defined(t, fn, arg);
  QKV_CHECK_TYPE(is_floating(t.dtype()), fn, ": ", arg, " must be float32 or float64, got ",
                 dtype_name(t.dtype()));
}

void check_dim(const Tensor& t, int64_t ndim, const char* fn, const char* arg, const char* layout) {
  check_defined(t, fn, arg);
  QKV_CHECK(t.dim() == ndim, fn, ": ", arg, " must be ", ndim, "-D ", layout, ", got shape ",
            shape_str(t.shape()));
}

namespace {
template <class T, class Bad>
void scan(const Tensor& t, Bad&& bad, const char* fn, const char* arg, const char* what) {
  const T* base = t.data<T>();
  int64_t found = -1;
  for_each_offset(t.shape(), t.strides(), [&](int64_t i, int64_t off) {
    if (found < 0 && bad(static_cast<double>(base[off]))) found = i;
  });
  QKV_CHECK(found < 0, fn, ": ", arg, " of shape ", shape_str(t.shape()), " contains ", what,
            " (first at flat index ", found, ")");
}

template <class Bad>
void scan_floating(const Tensor& t, Bad&& bad, const char* fn, const char* arg, const char* what) {
  if (t.dtype() == DType::kFloat64) {
    scan<double>(t, bad, fn, arg, what);
  } else if (t.dtype() == DType::kFloat32) {
    scan<float>(t, bad, fn, arg, what);
  }
}
}  // namespace

void check_finite(const Tensor& t, const char* fn, const char* arg) {
  scan_floating(
      t, [](double x) { return !std::isfinite(x); }, fn, arg, "NaN or infinite values");
}

void check_mask_values(const Tensor& mask, const char* fn, const char* arg) {
  scan_floating(
      mask, [](double x) { return std::isnan(x) || x == INFINITY; }, fn, arg,
      "NaN or +inf (use -inf or a bool mask to mask a position out)");
}

}  // namespace qkv
