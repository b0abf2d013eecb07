// softmax and log_softmax over the last dim, and their backward passes.
// Rows are computed in float64 (the reference kernel's softmax_row_in_place)
// and rounded once.
#include "qkv/softmax.h"

#include <cmath>
#include <limits>

#include "kernels/reference/softmax_reference.h"
#include "ops/backward_util.h"
#include "ops/checks.h"
#include "qkv/gradients.h"

namespace qkv {

namespace {

// x as float64 rows of its last dim, softmax applied in place; returns the row length.
int64_t softmax_rows(const Tensor& x, std::vector<double>& values, const char* fn) {
  check_floating(x, fn, "input");
  QKV_CHECK(x.dim() >= 1, fn, ": input must have at least 1 dimension [..., C], got a scalar");
  values = x.to_vector();
  const int64_t c = x.size(-1);
  if (c == 0) return 0;
  for (size_t r = 0; r < values.size() / c; ++r)
    kernels::softmax_row_in_place(values.data() + r * c, c);
  return c;
}

Tensor from_doubles(const std::vector<double>& values, const Tensor& like) {
  return Tensor::from_vector(like.shape(), std::span<const double>(values)).to(like.dtype());
}

// The backward of softmax or log_softmax: checks the arguments, then
// row_grad(g, y, c) turns each row of the output gradient g into the input
// gradient in place, y being that row's softmax of x; adds the result to
// grad_input.
template <class RowGrad>
void backward_over_rows(const Tensor& grad_output, const Tensor& x, Tensor& grad_input,
                        const char* fn, RowGrad row_grad) {
  std::vector<double> y;
  const int64_t c = softmax_rows(x, y, fn);
  check_grad_output(grad_output, x.shape(), x, fn);
  check_defined(grad_input, fn, "grad_input");
  check_grad(grad_input, x, fn, "grad_input");
  std::vector<double> g = grad_output.to_vector();
  for (size_t r = 0; c > 0 && r < g.size() / c; ++r)
    row_grad(g.data() + r * c, y.data() + r * c, c);
  add_to_grad(grad_input, g);
}

}  // namespace

Tensor softmax(const Tensor& x) {
  std::vector<double> y;
  softmax_rows(x, y, "softmax");
  return from_doubles(y, x);
}

Tensor log_softmax(const Tensor& x) {
  const char* fn = "log_softmax";
  check_floating(x, fn, "input");
  QKV_CHECK(x.dim() >= 1, fn, ": input must have at least 1 dimension [..., C], got a scalar");
  std::vector<double> y = x.to_vector();
  const int64_t c = x.size(-1);
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  for (size_t r = 0; c > 0 && r < y.size() / c; ++r) {
    double* row = y.data() + r * c;
    double row_max = kNegInf;
    for (int64_t j = 0; j < c; ++j) row_max = std::max(row_max, row[j]);
    if (row_max == kNegInf) continue;  // all −inf: log 0 everywhere
    double sum = 0.0;
    for (int64_t j = 0; j < c; ++j) sum += std::exp(row[j] - row_max);
    const double lse = row_max + std::log(sum);
    for (int64_t j = 0; j < c; ++j) row[j] -= lse;
  }
  return from_doubles(y, x);
}

void softmax_backward(const Tensor& grad_output, const Tensor& x, Tensor grad_input) {
  // Forward: x_j <- exp(x_j − max) / Σ exp(x − max)
  // ∂y_j/∂x_i = y_j (δ_ij − y_i)  ->  dx_i = y_i (g_i − Σ_j g_j y_j)
  backward_over_rows(grad_output, x, grad_input, "softmax_backward",
                     [](double* g, const double* y, int64_t c) {
                       double dot = 0.0;
                       for (int64_t j = 0; j < c; ++j) dot += g[j] * y[j];
                       for (int64_t j = 0; j < c; ++j) g[j] = y[j] * (g[j] - dot);
                     });
}

void log_softmax_backward(const Tensor& grad_output, const Tensor& x, Tensor grad_input) {
  // Forward: row[j] -= lse, lse = log Σ exp(x)  ->  dx_i = g_i − softmax_i · Σ_j g_j
  backward_over_rows(grad_output, x, grad_input, "log_softmax_backward",
                     [](double* g, const double* y, int64_t c) {
                       double sum = 0.0;
                       for (int64_t j = 0; j < c; ++j) sum += g[j];
                       for (int64_t j = 0; j < c; ++j) g[j] -= y[j] * sum;
                     });
}

}  // namespace qkv
