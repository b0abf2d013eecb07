#include "ops/checks.h"

#include <cmath>
#include <cstdint>
#include <vector>

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

namespace {
// True when every element is finite. An IEEE float is NaN or ±inf exactly when
// its exponent bits are all ones; OR-ing that test over a contiguous run
// vectorises, so the check costs about a memory read of the tensor.
template <class Bits>
bool all_finite_bits(const Bits* x, int64_t n, Bits exponent) {
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) bad |= (x[i] & exponent) == exponent;
  return !bad;
}

}  // namespace

bool all_finite(const Tensor& t) {
  const int64_t row = t.dim() == 0 ? 1 : t.size(-1);
  const bool rows_contiguous = t.dim() == 0 || t.stride(-1) == 1 || row == 1;
  if (t.numel() == 0 || !rows_contiguous) {
    bool ok = true;
    const std::vector<double> v = t.to_vector();
    for (double x : v) ok &= std::isfinite(x);
    return ok;
  }
  // Walk the rows (last dim contiguous) of any strided view.
  const Shape outer(t.shape().begin(), t.shape().end() - (t.dim() ? 1 : 0));
  const Strides outer_strides(t.strides().begin(), t.strides().end() - (t.dim() ? 1 : 0));
  bool ok = true;
  for_each_offset(outer, outer_strides, [&](int64_t, int64_t off) {
    if (!ok) return;
    if (t.dtype() == DType::kFloat32) {
      ok = all_finite_bits(reinterpret_cast<const uint32_t*>(t.data<float>() + off), row,
                           uint32_t{0x7f800000u});
    } else {
      ok = all_finite_bits(reinterpret_cast<const uint64_t*>(t.data<double>() + off), row,
                           uint64_t{0x7ff0000000000000ull});
    }
  });
  return ok;
}

void check_finite(const Tensor& t, const char* fn, const char* arg) {
  if (!is_floating(t.dtype()) || all_finite(t)) return;
  scan_floating(
      t, [](double x) { return !std::isfinite(x); }, fn, arg, "NaN or infinite values");
}

void check_mask_values(const Tensor& mask, const char* fn, const char* arg) {
  scan_floating(
      mask, [](double x) { return std::isnan(x) || x == INFINITY; }, fn, arg,
      "NaN or +inf (use -inf or a bool mask to mask a position out)");
}

}  // namespace qkv
