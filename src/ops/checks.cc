#include "ops/checks.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "tensor/parallel_threshold.h"

namespace qkv {

void check_defined(const Tensor& t, const char* fn, const char* arg) {
  QKV_CHECK(t.defined(), fn, ": ", arg, " is undefined (an empty Tensor())");
}

void check_floating(const Tensor& t, const char* fn, const char* arg) {
  check_defined(t, fn, arg);
  QKV_CHECK_TYPE(is_floating(t.dtype()), fn, ": ", arg, " must be float32 or float64, got ",
                 dtype_name(t.dtype()));
}

void check_same_floating(const Tensor& a, const Tensor& b, const char* fn, const char* a_arg,
                         const char* b_arg) {
  check_floating(a, fn, a_arg);
  check_floating(b, fn, b_arg);
  QKV_CHECK_TYPE(a.dtype() == b.dtype(), fn, ": ", a_arg, " is ", dtype_name(a.dtype()), " but ",
                 b_arg, " is ", dtype_name(b.dtype()));
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
// its exponent bits are all ones. The test is OR-ed over chunks of branch-free
// code that the compiler vectorises, so the check costs about a memory read of
// the tensor and still stops soon after a bad value.
template <class Bits>
bool run_is_finite(const Bits* x, int64_t n, Bits exponent) {
  Bits bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= static_cast<Bits>((x[i] & exponent) == exponent);
  return bad == 0;
}

// The runs x + starts[r] .. + run, r < runs: a contiguous tensor is one run cut
// into chunks, a strided view one run per row. Large tensors are split over
// the threads (each thread stops at its first bad run); the region is entered
// only then, since even an inactive one costs a call into the OpenMP runtime
// per row of a strided view.
template <class Bits, class Start>
bool runs_are_finite(const Bits* x, int64_t runs, Start&& start, int64_t run, int64_t last_run,
                     Bits exponent) {
  auto run_ok = [&](int64_t r) {
    return run_is_finite(x + start(r), r + 1 == runs ? last_run : run, exponent);
  };
  if (runs * run < detail::kParallelMinCopyElements || omp_in_parallel()) {
    for (int64_t r = 0; r < runs; ++r)
      if (!run_ok(r)) return false;
    return true;
  }
  bool finite = true;
#pragma omp parallel for schedule(static) reduction(&& : finite)
  for (int64_t r = 0; r < runs; ++r) {
    if (finite) finite = run_ok(r);
  }
  return finite;
}

template <class T, class Bits>
bool all_finite_as(const Tensor& t, Bits exponent) {
  const Bits* x = reinterpret_cast<const Bits*>(t.data<T>());
  if (t.is_contiguous()) {
    constexpr int64_t kChunk = 2048;
    const int64_t n = t.numel(), chunks = (n + kChunk - 1) / kChunk;
    return runs_are_finite(
        x, chunks, [](int64_t c) { return c * kChunk; }, kChunk, n - (chunks - 1) * kChunk,
        exponent);
  }
  // Walk the rows (last dim contiguous) of any strided view.
  const int64_t row = t.size(-1);
  const Shape outer(t.shape().begin(), t.shape().end() - 1);
  const Strides outer_strides(t.strides().begin(), t.strides().end() - 1);
  std::vector<int64_t> starts(static_cast<size_t>(t.numel() / row));
  for_each_offset(outer, outer_strides, [&](int64_t i, int64_t off) { starts[i] = off; });
  return runs_are_finite(
      x, static_cast<int64_t>(starts.size()), [&](int64_t r) { return starts[r]; }, row, row,
      exponent);
}

}  // namespace

bool all_finite(const Tensor& view) {
  // A broadcast dim (stride 0: expand(), the gradient of sum()) repeats the
  // same elements; checking one index of it checks them all.
  Tensor t = view;
  for (int64_t d = t.dim() - 1; d >= 0; --d)
    if (t.stride(d) == 0 && t.size(d) > 1) t = t.select(d, 0);
  const int64_t row = t.dim() == 0 ? 1 : t.size(-1);
  const bool rows_contiguous = t.dim() == 0 || t.stride(-1) == 1 || row == 1;
  if (t.numel() == 0 || !rows_contiguous) {
    bool ok = true;
    const std::vector<double> v = t.to_vector();
    for (double x : v) ok &= std::isfinite(x);
    return ok;
  }
  if (t.dtype() == DType::kFloat32) return all_finite_as<float>(t, uint32_t{0x7f800000u});
  return all_finite_as<double>(t, uint64_t{0x7ff0000000000000ull});
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

int64_t check_converted_linear(const Tensor& x, int64_t in, int64_t out, const Tensor& bias,
                               const char* fn, const char* weight) {
  check_defined(x, fn, "input");
  QKV_CHECK_TYPE(x.dtype() == DType::kFloat32, fn, ": input must be float32 (the weight is ",
                 weight, "), got ", dtype_name(x.dtype()));
  QKV_CHECK(x.dim() >= 1 && x.size(-1) == in, fn, ": input must be [..., in_features = ", in,
            "], got ", shape_str(x.shape()));
  if (bias.defined()) {
    QKV_CHECK_TYPE(bias.dtype() == DType::kFloat32, fn, ": bias must be float32, got ",
                   dtype_name(bias.dtype()));
    QKV_CHECK(bias.dim() == 1 && bias.size(0) == out, fn, ": bias must be [out_features = ", out,
              "], got ", shape_str(bias.shape()));
  }
  return in == 0 ? x.numel() : x.numel() / in;
}

namespace {

// The distance between consecutive rows of `out` when its last dim is
// contiguous and its rows are evenly spaced (a column block of a bigger
// matrix, such as q in a packed [.., 3·D] projection), else 0.
int64_t row_stride(const Tensor& out) {
  if (out.stride(-1) != 1) return 0;
  if (out.dim() == 1) return out.size(0);
  const int64_t ld = out.stride(-2);
  for (int64_t d = 0; d + 2 < out.dim(); ++d)
    if (out.size(d) > 1 && out.stride(d) != out.stride(d + 1) * out.size(d + 1)) return 0;
  return ld;
}

}  // namespace

bool elements_distinct(const Tensor& t) {
  // Dims of size > 1 from the smallest stride up: each must step past all
  // the elements the dims inside it reach.
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;  // the largest offset the inner dims reach
  for (const auto& [stride, size] : dims) {
    if (stride <= reach) return false;
    reach += stride * (size - 1);
  }
  return true;
}

namespace {
// [first, last] bytes of t's elements (t non-empty, strides >= 0).
std::pair<const std::byte*, const std::byte*> byte_span(const Tensor& t) {
  const auto* first = static_cast<const std::byte*>(t.raw_data());
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return {first, first + (last + 1) * static_cast<int64_t>(dtype_size(t.dtype())) - 1};
}
}  // namespace

bool spans_overlap(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const auto [a0, a1] = byte_span(a);
  const auto [b0, b1] = byte_span(b);
  return a0 <= b1 && b0 <= a1;
}

int64_t check_linear_out(const Tensor& out, const Tensor& x, const Tensor& bias, int64_t rows,
                         int64_t n, const char* fn) {
  check_defined(out, fn, "out");
  QKV_CHECK_TYPE(out.dtype() == DType::kFloat32, fn, ": out must be float32, got ",
                 dtype_name(out.dtype()));
  QKV_CHECK(out.dim() == x.dim() && out.size(-1) == n && out.numel() == rows * n, fn,
            ": out must have the input's shape with the last dim out_features = ", n, ", got out ",
            shape_str(out.shape()), " for input ", shape_str(x.shape()));
  const int64_t ldy = row_stride(out);
  QKV_CHECK(x.is_contiguous() && ldy >= n && (!bias.defined() || bias.is_contiguous()), fn,
            ": input and bias must be contiguous, and out's rows evenly spaced with a contiguous "
            "last dim (it copies nothing)");
  // out's span: from its first element to the end of its last row.
  const std::byte* xb = static_cast<const std::byte*>(x.raw_data());
  const std::byte* ob = static_cast<const std::byte*>(out.raw_data());
  const int64_t out_span = rows == 0 ? 0 : ((rows - 1) * ldy + n) * 4;
  QKV_CHECK(ob + out_span <= xb || xb + x.numel() * 4 <= ob, fn,
            ": out must not overlap the input");
  return ldy;
}

}  // namespace qkv
