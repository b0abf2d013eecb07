// Gradients of a trained model's parameters against central differences of
// its loss, shared by the task tests (recall, fortunes).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "finite_differences.h"
#include "qkv/loss.h"
#include "qkv/nn/parameter.h"
#include "qkv/tensor.h"

namespace qkv::testing {

// Checks the gradients already accumulated in `parameters` against
// (loss(v + h) − loss(v − h)) / 2h at a few entries of each (the first, the
// middle, the last and the largest gradient): float32 forwards and h = 1e-2,
// so within 2e-2 relative (2e-3 absolute). Returns how many were checked.
template <class Loss>
int expect_gradients_match_finite_differences(std::vector<nn::Parameter> parameters, Loss loss) {
  int checked = 0;
  for (nn::Parameter& p : parameters) {
    float* v = p.value.data<float>();
    const float* g = p.grad.data<float>();
    const int64_t n = p.value.numel();
    std::vector<int64_t> picks = {0, n / 2, n - 1};
    picks.push_back(
        std::max_element(g, g + n, [](float a, float b) { return std::abs(a) < std::abs(b); }) - g);
    for (int64_t i : picks) {
      const double numeric = fd::central_difference(v[i], 1e-2, loss);
      EXPECT_NEAR(g[i], numeric, 2e-2 * std::max(1.0, std::abs(numeric)) + 2e-3)
          << p.name << "[" << i << "]";
      ++checked;
    }
  }
  return checked;
}

// What expect_classifier_gradients_match_finite_differences saw.
struct ClassifierGradientCheck {
  Tensor logits;    // of the batch, from the forward that recorded for backward
  int checked = 0;  // entries compared
};

// The cross-entropy loss of a classifier (`model.forward(batch[, &record])`
// gives logits [N, C], `model.backward(grad, record)` accumulates the
// parameters' gradients) on `batch`: backward once from zeroed gradients,
// then every parameter checked as above.
template <class Record, class Model, class Batch>
ClassifierGradientCheck expect_classifier_gradients_match_finite_differences(Model& model,
                                                                             const Batch& batch) {
  auto loss = [&] { return cross_entropy(model.forward(batch), batch.labels).item(); };
  model.zero_grad();
  Record record;
  ClassifierGradientCheck out;
  out.logits = model.forward(batch, &record);
  Tensor grad = Tensor::zeros(out.logits.shape());
  cross_entropy_backward(Tensor::ones({}), out.logits, batch.labels, {}, grad);
  model.backward(grad, record);
  out.checked = expect_gradients_match_finite_differences(model.parameters(), loss);
  return out;
}

}  // namespace qkv::testing
