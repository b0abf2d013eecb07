// cross_entropy over class-index targets (torch.nn.functional.cross_entropy
// with ignore_index, label_smoothing and reduction) and its backward. Each
// row's log-sum-exp is computed in float64 from the row maximum.
#include "qkv/loss.h"

#include <cmath>
#include <limits>

#include "ops/backward_util.h"
#include "ops/checks.h"

namespace qkv {

namespace {

// Checks the arguments; returns the number of rows whose target is not ignored.
int64_t check_cross_entropy(const Tensor& logits, std::span<const int64_t> targets,
                            const CrossEntropyOptions& options, const char* fn) {
  check_dim(logits, 2, fn, "input", "[N, C] (flatten the leading dims: logits.reshape({-1, C}))");
  check_floating(logits, fn, "input");
  const int64_t n = logits.size(0), c = logits.size(1);
  QKV_CHECK(c > 0, fn, ": input must have at least one class, got ", shape_str(logits.shape()));
  QKV_CHECK(static_cast<int64_t>(targets.size()) == n, fn, ": expected ", n,
            " targets (one per row of input ", shape_str(logits.shape()), "), got ",
            targets.size());
  QKV_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0, fn,
            ": label_smoothing must be in [0, 1], got ", options.label_smoothing);
  int64_t counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (targets[i] == options.ignore_index) continue;
    QKV_CHECK(targets[i] >= 0 && targets[i] < c, fn, ": target ", targets[i], " of row ", i,
              " is out of bounds [0, ", c, ") (ignore_index is ", options.ignore_index, ")");
    ++counted;
  }
  return counted;
}

// log Σ_j exp(x_j) of one row.
double log_sum_exp(const double* x, int64_t c) {
  double row_max = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < c; ++j) row_max = std::max(row_max, x[j]);
  if (!std::isfinite(row_max)) return row_max;  // all −inf, or a +inf / NaN to propagate
  double sum = 0.0;
  for (int64_t j = 0; j < c; ++j) sum += std::exp(x[j] - row_max);
  return row_max + std::log(sum);
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, std::span<const int64_t> targets,
                     const CrossEntropyOptions& options) {
  const char* fn = "cross_entropy";
  const int64_t counted = check_cross_entropy(logits, targets, options, fn);
  const int64_t n = logits.size(0), c = logits.size(1);
  const double eps = options.label_smoothing;
  const std::vector<double> x = logits.to_vector();
  std::vector<double> losses(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    if (targets[i] == options.ignore_index) continue;
    const double* row = x.data() + i * c;
    const double lse = log_sum_exp(row, c);
    // −log softmax(x)[t] = lse − x_t
    double loss = (1.0 - eps) * (lse - row[targets[i]]);
    if (eps > 0.0) {
      // Σ_c −log softmax(x)[c] = C·lse − Σ_c x_c (skipped at ε = 0, as torch: it may be inf)
      double sum = 0.0;
      for (int64_t j = 0; j < c; ++j) sum += row[j];
      loss += eps / static_cast<double>(c) * (static_cast<double>(c) * lse - sum);
    }
    losses[i] = loss;
  }
  if (options.reduction == Reduction::kNone)
    return Tensor::from_vector({n}, std::span<const double>(losses)).to(logits.dtype());
  double total = 0.0;
  for (double l : losses) total += l;
  // kMean over no row is 0/0 = NaN, as torch.
  if (options.reduction == Reduction::kMean) total /= static_cast<double>(counted);
  return Tensor::full({}, total, logits.dtype());
}

void cross_entropy_backward(const Tensor& grad_output, const Tensor& logits,
                            std::span<const int64_t> targets, const CrossEntropyOptions& options,
                            Tensor grad_logits) {
  const char* fn = "cross_entropy_backward";
  const int64_t counted = check_cross_entropy(logits, targets, options, fn);
  const int64_t n = logits.size(0), c = logits.size(1);
  const bool per_row = options.reduction == Reduction::kNone;
  check_grad_output(grad_output, per_row ? Shape{n} : Shape{}, logits, fn);
  check_defined(grad_logits, fn, "grad_logits");
  check_grad(grad_logits, logits, fn, "grad_logits");
  const double eps = options.label_smoothing;
  const std::vector<double> x = logits.to_vector(), g = grad_output.to_vector();
  std::vector<double> dx(x.size(), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    if (targets[i] == options.ignore_index) continue;
    // Forward: total /= counted (kMean); losses[i] = (1 − ε)(lse − x_t) + ε/C (C·lse − Σ x)
    double gi = per_row ? g[i] : g[0];
    if (options.reduction == Reduction::kMean) gi /= static_cast<double>(counted);
    const double* row = x.data() + i * c;
    double* d = dx.data() + i * c;
    const double lse = log_sum_exp(row, c);
    // ∂lse/∂x_j = softmax_j; the one-hot and uniform targets subtract (1 − ε) and ε/C.
    for (int64_t j = 0; j < c; ++j) d[j] = gi * (std::exp(row[j] - lse) - eps / c);
    d[targets[i]] -= gi * (1.0 - eps);
  }
  add_to_grad(grad_logits, dx);
}

}  // namespace qkv
