// Central finite differences in float64 for the backward tests: each case
// defines loss = Σ forward(inputs) ∘ R for a fixed random R (weighted_sum), so
// ∂loss/∂output = R is what backward() gets, and every element of every
// target (input or parameter) is perturbed by ±1e-6 in place.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "qkv/tensor.h"

namespace qkv::fd {

// One tensor to differentiate: its value (perturbed in place) and the analytic gradient.
struct Target {
  std::string name;
  Tensor value;  // float64, contiguous
  Tensor grad;   // like value
};

// Worst error per module kind, printed when the test binary ends.
inline std::map<std::string, double>& worst_errors() {
  static std::map<std::string, double> worst;
  return worst;
}

class ReportWorst : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const auto& [module, err] : worst_errors())
      std::printf("[fd] %-36s worst relative error %.2e\n", module.c_str(), err);
  }
};
inline const auto* const kReportWorst = ::testing::AddGlobalTestEnvironment(new ReportWorst);

// Σ out ∘ weights, in float64.
inline double weighted_sum(const Tensor& out, const Tensor& weights) {
  const std::vector<double> x = out.to_vector(), w = weights.to_vector();
  double s = 0.0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i] * w[i];
  return s;
}

// (loss(x + h) − loss(x − h)) / 2h, x changed in place and restored.
template <class T, class Loss>
double central_difference(T& x, double h, Loss&& loss) {
  const T saved = x;
  x = static_cast<T>(saved + h);
  const double up = loss();
  x = static_cast<T>(saved - h);
  const double down = loss();
  x = saved;
  return (up - down) / (2 * h);
}

// max|fd − analytic| / max(max|fd|, 1) over every element of every target;
// `worst_name` (optional) gets the target where it is largest.
inline double fd_error(const std::vector<Target>& targets, const std::function<double()>& loss,
                       std::string* worst_name = nullptr) {
  constexpr double kStep = 1e-6;
  double worst = 0.0;
  for (const Target& t : targets) {
    EXPECT_TRUE(t.value.defined() && t.grad.defined()) << t.name;
    EXPECT_EQ(t.value.shape(), t.grad.shape()) << t.name;
    EXPECT_TRUE(t.value.is_contiguous() && t.value.dtype() == DType::kFloat64) << t.name;
    Tensor value = t.value;
    double* p = value.data<double>();
    const std::vector<double> analytic = t.grad.to_vector();
    double max_diff = 0.0, max_ref = 0.0;
    for (int64_t i = 0; i < value.numel(); ++i) {
      const double fd = central_difference(p[i], kStep, loss);
      max_diff = std::max(max_diff, std::abs(fd - analytic[static_cast<size_t>(i)]));
      max_ref = std::max(max_ref, std::abs(fd));
    }
    const double err = max_diff / std::max(max_ref, 1.0);
    if (err > worst && worst_name != nullptr) *worst_name = t.name;
    worst = std::max(worst, err);
  }
  return worst;
}

// Fails the test when fd_error exceeds `tolerance`; records the worst per module.
inline void check_fd(const std::string& module, const std::vector<Target>& targets,
                     const std::function<double()>& loss, double tolerance = 1e-6) {
  std::string name;
  const double err = fd_error(targets, loss, &name);
  EXPECT_LE(err, tolerance) << module << ": worst gradient " << name;
  double& worst = worst_errors()[module];
  worst = std::max(worst, err);
}

}  // namespace qkv::fd
