// Backward passes of the functional ops (qkv/gradients.h, qkv/softmax.h,
// qkv/loss.h) against float64 central finite differences of their forwards,
// then float32 backward against float64 backward.
//
// Each case defines loss = Σ forward(inputs) ∘ R for a random R, so that
// ∂loss/∂output = R is the grad_output given to the backward. The gradient
// buffers start with random values (the backward must add, not overwrite),
// and every case runs twice: with contiguous and with strided gradient views.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "qkv/attention.h"
#include "qkv/functional.h"
#include "qkv/gradients.h"
#include "qkv/linear.h"
#include "qkv/loss.h"
#include "qkv/runtime.h"
#include "qkv/softmax.h"
#include "tensor_comparison.h"
#include "test_util.h"

namespace qkv {
namespace {

using qkv_test::expect_error;

using Inputs = std::vector<Tensor>;
using Forward = std::function<Tensor(const Inputs&)>;
// grads[i] is where the gradient of inputs[i] goes (undefined: not differentiated).
using Backward =
    std::function<void(const Tensor& grad_output, const Inputs& inputs, const Inputs& grads)>;

struct GradCase {
  std::string name;
  Inputs inputs;                     // float64, contiguous
  std::vector<bool> differentiable;  // per input; default: all
  Forward forward;
  Backward backward;
  double fd_tolerance = 1e-6;
  double f32_tolerance = 2e-5;
};

double dot(const Tensor& a, const std::vector<double>& r) {
  const std::vector<double> x = a.to_vector();
  double s = 0.0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i] * r[i];
  return s;
}

// max |a − b| / max |b| (absolute when b vanishes).
double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  return testing::relative_error(a, b, 1e-12);
}

// A view of shape `shape` whose last dim has stride 2 (a non-contiguous gradient buffer).
Tensor strided(const Shape& shape, DType dtype) {
  if (shape.empty()) return Tensor::zeros(shape, dtype);
  Shape wide = shape;
  wide.back() *= 2;
  return Tensor::zeros(wide, dtype).slice(-1, 0, wide.back(), 2);
}

// Runs the backward with grad buffers pre-filled with `start` values; returns grad − start.
std::vector<std::vector<double>> analytic(const GradCase& c, const Inputs& inputs, const Tensor& r,
                                          bool strided_grads, Generator& gen) {
  Inputs grads(inputs.size()), start(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!c.differentiable[i]) continue;
    const Tensor& x = inputs[i];
    grads[i] = strided_grads ? strided(x.shape(), x.dtype()) : Tensor::zeros(x.shape(), x.dtype());
    start[i] = Tensor::randn(x.shape(), gen, x.dtype());
    grads[i].copy_from(start[i]);
  }
  c.backward(r, inputs, grads);
  std::vector<std::vector<double>> out(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!grads[i].defined()) continue;
    out[i] = grads[i].to_vector();
    const std::vector<double> s = start[i].to_vector();
    for (size_t j = 0; j < s.size(); ++j) out[i][j] -= s[j];
  }
  return out;
}

// Checks one case; prints and returns the worst finite-difference relative error.
double check_case(GradCase c, uint64_t seed = 1) {
  if (c.differentiable.empty()) c.differentiable.assign(c.inputs.size(), true);
  Generator gen(seed);
  Inputs inputs;
  for (const Tensor& x : c.inputs) inputs.push_back(x.clone());
  const Tensor out = c.forward(inputs);
  const Tensor r = Tensor::randn(out.shape(), gen, DType::kFloat64);
  const std::vector<double> rv = r.to_vector();

  // Central differences; h balances truncation (h²) and rounding (1e-16 / h).
  const double h = 1e-5;
  std::vector<std::vector<double>> numeric(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!c.differentiable[i]) continue;
    double* p = inputs[i].data<double>();
    for (int64_t j = 0; j < inputs[i].numel(); ++j) {
      const double old = p[j];
      p[j] = old + h;
      const double up = dot(c.forward(inputs), rv);
      p[j] = old - h;
      const double down = dot(c.forward(inputs), rv);
      p[j] = old;
      numeric[i].push_back((up - down) / (2 * h));
    }
  }

  double worst_fd = 0.0, worst_f32 = 0.0;
  for (bool strided_grads : {false, true}) {
    const auto grads = analytic(c, inputs, r, strided_grads, gen);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!c.differentiable[i]) continue;
      const double err = relative_error(grads[i], numeric[i]);
      EXPECT_LT(err, c.fd_tolerance)
          << c.name << ": input " << i << (strided_grads ? " (strided grads)" : "");
      worst_fd = std::max(worst_fd, err);
    }
    // The same backward in float32, against float64.
    Inputs in32;
    for (const Tensor& x : inputs)
      in32.push_back(is_floating(x.dtype()) ? x.to(DType::kFloat32) : x);
    const auto grads32 = analytic(c, in32, r.to(DType::kFloat32), strided_grads, gen);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!c.differentiable[i]) continue;
      const double err = relative_error(grads32[i], grads[i]);
      EXPECT_LT(err, c.f32_tolerance) << c.name << ": float32 input " << i;
      worst_f32 = std::max(worst_f32, err);
    }
  }
  std::printf("[ gradient ] %-40s fd rel err %.2e   float32 vs float64 %.2e\n", c.name.c_str(),
              worst_fd, worst_f32);
  return worst_fd;
}

Tensor randn(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return Tensor::randn(shape, gen, DType::kFloat64);
}

// Random values kept at least `gap` away from 0 (for relu's kink).
Tensor randn_away_from_zero(const Shape& shape, uint64_t seed, double gap = 0.05) {
  std::vector<double> v = randn(shape, seed).to_vector();
  for (double& x : v) x = x >= 0 ? x + gap : x - gap;
  return Tensor::from_vector(shape, std::span<const double>(v));
}

// --- Linear maps -------------------------------------------------------------------

TEST(OpGradients, Linear) {
  const std::vector<std::pair<Shape, int64_t>> shapes = {
      {{3, 4}, 5}, {{2, 3, 5}, 2}, {{1, 7}, 3}, {{6}, 4}};
  uint64_t seed = 10;
  for (const auto& [x_shape, out] : shapes) {
    for (bool with_bias : {true, false}) {
      const int64_t in = x_shape.back();
      GradCase c;
      c.name = "linear x" + shape_str(x_shape) + (with_bias ? " +bias" : "");
      c.inputs = {randn(x_shape, ++seed), randn({out, in}, ++seed)};
      if (with_bias) c.inputs.push_back(randn({out}, ++seed));
      c.forward = [](const Inputs& t) {
        return linear(t[0], t[1], t.size() > 2 ? t[2] : Tensor());
      };
      c.backward = [](const Tensor& g, const Inputs& t, const Inputs& d) {
        linear_backward(g, t[0], t[1], t.size() > 2 ? t[2] : Tensor(),
                        {.input = d[0], .weight = d[1], .bias = t.size() > 2 ? d[2] : Tensor()});
      };
      check_case(c);
    }
  }
}

// A bias gradient large enough to be split over the threads (by columns)
// is, bit for bit, what one thread sums, and the float64 sum of dy's rows.
TEST(OpGradients, LinearBiasGradientIsTheSameOnAnyThreadCount) {
  const int previous = qkv::num_threads();
  const Tensor x = randn({600, 8}, 31).to(DType::kFloat32);
  const Tensor w = randn({200, 8}, 32).to(DType::kFloat32);
  const Tensor b = randn({200}, 33).to(DType::kFloat32);
  const Tensor dy = randn({600, 200}, 34).to(DType::kFloat32);
  std::vector<std::vector<double>> sums;
  for (int threads : {1, 2}) {
    qkv::set_num_threads(threads);
    Tensor db = Tensor::zeros({200});
    linear_backward(dy, x, w, b, {.bias = db});
    sums.push_back(db.to_vector());
  }
  qkv::set_num_threads(previous);
  EXPECT_EQ(sums[0], sums[1]);
  const std::vector<double> g = dy.to_vector();
  for (int64_t j = 0; j < 200; ++j) {
    double want = 0.0;
    for (int64_t r = 0; r < 600; ++r) want += g[r * 200 + j];
    EXPECT_NEAR(sums[0][j], want, 1e-5 * (1 + std::abs(want))) << "column " << j;
  }
}

// linear_input_gradient returns what linear_backward adds to grads.input, in
// float32 and float64, for strided grad_output and for empty sizes.
TEST(OpGradients, LinearInputGradientEqualsTheAccumulatedOne) {
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    const Tensor x = randn({2, 5, 3}, 51).to(dtype);
    const Tensor w = randn({4, 3}, 52).to(dtype);
    const Tensor dy = randn({5, 2, 4}, 53).to(dtype).transpose(0, 1);  // strided [2, 5, 4]
    Tensor dx = Tensor::zeros(x.shape(), dtype);
    linear_backward(dy, x, w, Tensor(), {.input = dx});
    const Tensor got = linear_input_gradient(dy, w);
    EXPECT_EQ(got.shape(), x.shape());
    EXPECT_EQ(got.dtype(), dtype);
    EXPECT_EQ(got.to_vector(), dx.to_vector()) << dtype_name(dtype);
  }
  // No rows, no outputs (zeros, not uninitialised memory), no inputs.
  const DType f64 = DType::kFloat64;
  EXPECT_EQ(linear_input_gradient(Tensor::zeros({0, 4}, f64), randn({4, 3}, 1)).shape(),
            (Shape{0, 3}));
  const Tensor none = linear_input_gradient(Tensor::zeros({2, 0}, f64), Tensor::zeros({0, 3}, f64));
  EXPECT_EQ(none.to_vector(), std::vector<double>(6, 0.0));
  EXPECT_EQ(linear_input_gradient(randn({2, 4}, 1), Tensor::zeros({4, 0}, f64)).shape(),
            (Shape{2, 0}));
  expect_error(
      [] {
        linear_input_gradient(randn({2, 5}, 1), randn({4, 3}, 2));
      },
      "grad_output must be [..., 4] for weight [4, 3], got [2, 5]");
  expect_error(
      [] {
        linear_input_gradient(randn({2, 4}, 1).to(DType::kFloat32), randn({4, 3}, 2));
      },
      "grad_output dtype float32 differs from weight dtype float64", ErrorKind::kType);
}

TEST(OpGradients, LinearTransposedInput) {
  GradCase c;
  c.name = "linear (transposed x view)";
  c.inputs = {randn({4, 3}, 1), randn({2, 4}, 2)};
  c.forward = [](const Inputs& t) { return linear(t[0].transpose(0, 1), t[1]); };
  c.backward = [](const Tensor& g, const Inputs& t, const Inputs& d) {
    linear_backward(g, t[0].transpose(0, 1), t[1], Tensor(),
                    {.input = d[0].transpose(0, 1), .weight = d[1]});
  };
  check_case(c);
}

TEST(OpGradients, Matmul) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3, 4}, {2, 4, 5}}, {{3, 1}, {1, 2}}, {{2, 2, 3, 4}, {2, 2, 4, 2}}, {{5, 3}, {3, 5}}};
  uint64_t seed = 40;
  for (const auto& [a, b] : shapes) {
    GradCase c;
    c.name = "matmul " + shape_str(a) + " x " + shape_str(b);
    c.inputs = {randn(a, ++seed), randn(b, ++seed)};
    c.forward = [](const Inputs& t) { return matmul(t[0], t[1]); };
    c.backward = [](const Tensor& g, const Inputs& t, const Inputs& d) {
      matmul_backward(g, t[0], t[1], {.a = d[0], .b = d[1]});
    };
    check_case(c);
  }
}

TEST(OpGradients, UnwantedGradientsAreSkipped) {
  const Tensor x = randn({3, 4}, 1), w = randn({2, 4}, 2), b = randn({2}, 3);
  Tensor gw = Tensor::zeros({2, 4}, DType::kFloat64);
  linear_backward(Tensor::ones({3, 2}, DType::kFloat64), x, w, b, {.weight = gw});
  // dW = onesᵀ x: every row of dW is the column sum of x.
  for (int64_t j = 0; j < 4; ++j) {
    double col = 0;
    for (int64_t i = 0; i < 3; ++i) col += x.at({i, j});
    EXPECT_NEAR(gw.at({0, j}), col, 1e-12);
    EXPECT_NEAR(gw.at({1, j}), col, 1e-12);
  }
}

// --- Normalisation --------------------------------------------------------------------

TEST(OpGradients, LayerNorm) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 6}, {6}}, {{2, 3, 4}, {3, 4}}, {{5, 1}, {1}}, {{2, 2, 3}, {3}}};
  uint64_t seed = 70;
  for (const auto& [x_shape, norm_shape] : shapes) {
    for (int affine = 0; affine < 3; ++affine) {  // none, weight, weight + bias
      GradCase c;
      c.name = "layer_norm " + shape_str(x_shape) + " over " + shape_str(norm_shape) +
               (affine == 0   ? ""
                : affine == 1 ? " +w"
                              : " +w+b");
      c.inputs = {randn(x_shape, ++seed)};
      if (affine >= 1) c.inputs.push_back(randn(norm_shape, ++seed));
      if (affine >= 2) c.inputs.push_back(randn(norm_shape, ++seed));
      const Shape ns = norm_shape;
      c.forward = [ns](const Inputs& t) {
        return layer_norm(t[0], ns, t.size() > 1 ? t[1] : Tensor(), t.size() > 2 ? t[2] : Tensor());
      };
      c.backward = [ns](const Tensor& g, const Inputs& t, const Inputs& d) {
        layer_norm_backward(g, t[0], ns, t.size() > 1 ? t[1] : Tensor(),
                            t.size() > 2 ? t[2] : Tensor(), 1e-5,
                            {.input = d[0],
                             .weight = t.size() > 1 ? d[1] : Tensor(),
                             .bias = t.size() > 2 ? d[2] : Tensor()});
      };
      check_case(c);
    }
  }
}

TEST(OpGradients, RmsNorm) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 6}, {6}}, {{2, 3, 4}, {3, 4}}, {{4, 1}, {1}}};
  uint64_t seed = 90;
  for (const auto& [x_shape, norm_shape] : shapes) {
    for (bool with_weight : {false, true}) {
      for (std::optional<double> eps : {std::optional<double>(), std::optional<double>(1e-3)}) {
        GradCase c;
        c.name = "rms_norm " + shape_str(x_shape) + (with_weight ? " +w" : "") +
                 (eps ? " eps=1e-3" : " eps=finfo");
        c.inputs = {randn(x_shape, ++seed)};
        if (with_weight) c.inputs.push_back(randn(norm_shape, ++seed));
        const Shape ns = norm_shape;
        c.forward = [ns, eps](const Inputs& t) {
          return rms_norm(t[0], ns, t.size() > 1 ? t[1] : Tensor(), eps);
        };
        c.backward = [ns, eps](const Tensor& g, const Inputs& t, const Inputs& d) {
          rms_norm_backward(g, t[0], ns, t.size() > 1 ? t[1] : Tensor(), eps,
                            {.input = d[0], .weight = t.size() > 1 ? d[1] : Tensor()});
        };
        check_case(c);
      }
    }
  }
}

// --- Activations and softmax ---------------------------------------------------------------

TEST(OpGradients, Activations) {
  struct Act {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
    std::function<void(const Tensor&, const Tensor&, Tensor)> b;
  };
  const std::vector<Act> acts = {
      {"relu", [](const Tensor& x) { return relu(x); },
       [](const Tensor& g, const Tensor& x, Tensor d) { relu_backward(g, x, d); }},
      {"gelu (erf)", [](const Tensor& x) { return gelu(x); },
       [](const Tensor& g, const Tensor& x, Tensor d) {
         gelu_backward(g, x, GeluApproximation::kNone, d);
       }},
      {"gelu (tanh)", [](const Tensor& x) { return gelu(x, GeluApproximation::kTanh); },
       [](const Tensor& g, const Tensor& x, Tensor d) {
         gelu_backward(g, x, GeluApproximation::kTanh, d);
       }},
      {"silu", [](const Tensor& x) { return silu(x); },
       [](const Tensor& g, const Tensor& x, Tensor d) { silu_backward(g, x, d); }},
      {"activate(gelu)", [](const Tensor& x) { return activate(x, Activation::kGelu); },
       [](const Tensor& g, const Tensor& x, Tensor d) {
         activate_backward(g, x, Activation::kGelu, d);
       }},
      {"activate(relu)", [](const Tensor& x) { return activate(x, Activation::kRelu); },
       [](const Tensor& g, const Tensor& x, Tensor d) {
         activate_backward(g, x, Activation::kRelu, d);
       }},
  };
  uint64_t seed = 120;
  for (const Act& a : acts) {
    for (const Shape& shape : {Shape{7}, Shape{2, 3, 4}}) {
      GradCase c;
      c.name = std::string(a.name) + " " + shape_str(shape);
      Tensor x = scale(randn_away_from_zero(shape, ++seed), 2.0);  // reaches the tails too
      c.inputs = {x};
      c.forward = [f = a.f](const Inputs& t) { return f(t[0]); };
      c.backward = [b = a.b](const Tensor& g, const Inputs& t, const Inputs& d) {
        b(g, t[0], d[0]);
      };
      check_case(c);
    }
  }
}

TEST(OpGradients, ReluIsZeroAtZero) {
  const Tensor x = Tensor::from_vector({3}, std::vector<double>{-1.0, 0.0, 2.0});
  Tensor d = Tensor::zeros({3}, DType::kFloat64);
  relu_backward(Tensor::ones({3}, DType::kFloat64), x, d);
  EXPECT_EQ(d.to_vector(), (std::vector<double>{0.0, 0.0, 1.0}));  // torch's convention
}

TEST(OpGradients, Softmax) {
  uint64_t seed = 150;
  for (const Shape& shape : {Shape{4, 7}, Shape{2, 3, 5}, Shape{1}}) {
    for (bool log : {false, true}) {
      GradCase c;
      c.name = std::string(log ? "log_softmax " : "softmax ") + shape_str(shape);
      c.inputs = {randn(shape, ++seed)};
      c.forward = [log](const Inputs& t) { return log ? log_softmax(t[0]) : softmax(t[0]); };
      c.backward = [log](const Tensor& g, const Inputs& t, const Inputs& d) {
        if (log)
          log_softmax_backward(g, t[0], d[0]);
        else
          softmax_backward(g, t[0], d[0]);
      };
      check_case(c);
    }
  }
}

TEST(OpGradients, SoftmaxWithMaskedEntries) {
  // −inf entries (masked keys) have weight 0 and gradient 0; a fully masked row gives 0.
  Tensor x = randn({3, 5}, 7);
  const double inf = std::numeric_limits<double>::infinity();
  x.set({0, 1}, -inf);
  x.set({1, 0}, -inf);
  x.set({1, 4}, -inf);
  for (int64_t j = 0; j < 5; ++j) x.set({2, j}, -inf);
  GradCase c;
  c.name = "softmax with -inf entries";
  c.inputs = {x};
  c.forward = [](const Inputs& t) { return softmax(t[0]); };
  c.backward = [](const Tensor& g, const Inputs& t, const Inputs& d) {
    softmax_backward(g, t[0], d[0]);
  };
  check_case(c);
}

TEST(OpGradients, SoftmaxForwardAgainstFormula) {
  const Tensor x = randn({3, 4}, 3);
  const Tensor y = softmax(x), ly = log_softmax(x);
  for (int64_t i = 0; i < 3; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < 4; ++j) sum += std::exp(x.at({i, j}));
    for (int64_t j = 0; j < 4; ++j) {
      EXPECT_NEAR(y.at({i, j}), std::exp(x.at({i, j})) / sum, 1e-15);
      EXPECT_NEAR(ly.at({i, j}), x.at({i, j}) - std::log(sum), 1e-14);
    }
  }
}

// --- Elementwise arithmetic ---------------------------------------------------------------

TEST(OpGradients, AddAndMulWithBroadcasting) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3, 4}, {3, 1}}, {{4}, {2, 4}}, {{3, 2}, {3, 2}}, {{1, 5}, {3, 1}}};
  uint64_t seed = 180;
  for (const auto& [a, b] : shapes) {
    for (bool is_mul : {false, true}) {
      GradCase c;
      c.name = std::string(is_mul ? "mul " : "add ") + shape_str(a) + " and " + shape_str(b);
      c.inputs = {randn(a, ++seed), randn(b, ++seed)};
      c.forward = [is_mul](const Inputs& t) { return is_mul ? mul(t[0], t[1]) : add(t[0], t[1]); };
      c.backward = [is_mul](const Tensor& g, const Inputs& t, const Inputs& d) {
        if (is_mul)
          mul_backward(g, t[0], t[1], {.a = d[0], .b = d[1]});
        else
          add_backward(g, t[0], t[1], {.a = d[0], .b = d[1]});
      };
      check_case(c);
    }
  }
}

TEST(OpGradients, Scale) {
  GradCase c;
  c.name = "scale [3, 4] by 0.37";
  c.inputs = {randn({3, 4}, 5)};
  c.forward = [](const Inputs& t) { return scale(t[0], 0.37); };
  c.backward = [](const Tensor& g, const Inputs& t, const Inputs& d) {
    scale_backward(g, t[0], 0.37, d[0]);
  };
  check_case(c);
}

// --- Embedding and dropout ------------------------------------------------------------------

TEST(OpGradients, Embedding) {
  const std::vector<int64_t> ids = {3, 0, 3, 5, 1, 3};  // repeats accumulate
  GradCase c;
  c.name = "embedding [2, 3] ids into [6, 4]";
  c.inputs = {randn({6, 4}, 9)};
  c.forward = [&](const Inputs& t) { return embedding(ids, {2, 3}, t[0]); };
  c.backward = [&](const Tensor& g, const Inputs& t, const Inputs& d) {
    embedding_backward(g, ids, {2, 3}, t[0], d[0]);
  };
  check_case(c);
}

TEST(OpGradients, EmbeddingSkipsPaddingIdx) {
  const std::vector<int64_t> ids = {3, 0, 3, 5, 1, 3};
  const Tensor w = randn({6, 4}, 9);
  Generator gen(3);
  const Tensor g = Tensor::randn({6, 4}, gen, DType::kFloat64);
  for (int64_t padding : {3, -3}) {  // -3 is row 3 of 6, as torch
    Tensor with = Tensor::zeros({6, 4}, DType::kFloat64);
    Tensor without = Tensor::zeros({6, 4}, DType::kFloat64);
    embedding_backward(g, ids, {6}, w, with, padding);
    embedding_backward(g, ids, {6}, w, without);
    for (int64_t r = 0; r < 6; ++r)
      for (int64_t j = 0; j < 4; ++j)
        EXPECT_EQ(with.at({r, j}), r == 3 ? 0.0 : without.at({r, j})) << r << ", " << j;
  }
  // Row 3 of `without`: the sum of the three gradient rows that looked it up.
  Tensor without = Tensor::zeros({6, 4}, DType::kFloat64);
  embedding_backward(g, ids, {6}, w, without);
  for (int64_t j = 0; j < 4; ++j)
    EXPECT_NEAR(without.at({3, j}), g.at({0, j}) + g.at({2, j}) + g.at({5, j}), 1e-15);
}

TEST(OpGradients, Dropout) {
  for (double p : {0.0, 0.3, 1.0}) {
    GradCase c;
    c.name = "dropout p=" + std::to_string(p).substr(0, 3);
    c.inputs = {randn({4, 5}, 11)};
    // The same seed in forward and backward: the same elements dropped.
    c.forward = [p](const Inputs& t) {
      Generator gen(123);
      return dropout_forward(t[0], p, true, &gen).output;
    };
    c.backward = [p](const Tensor& g, const Inputs& t, const Inputs& d) {
      Generator gen(123);
      const DropoutResult r = dropout_forward(t[0], p, true, &gen);
      dropout_backward(g, r.keep_mask, p, d[0]);
    };
    check_case(c);
  }
}

TEST(OpGradients, DropoutForwardDrawsAsDropout) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    Generator g0(5);
    const Tensor x = Tensor::randn({7, 9}, g0, dtype);
    Generator a(42), b(42);
    const Tensor expected = dropout(x, 0.4, true, &a);
    const DropoutResult r = dropout_forward(x, 0.4, true, &b);
    EXPECT_EQ(r.output.to_vector(), expected.to_vector());
    EXPECT_EQ(a.next_u64(), b.next_u64()) << "both must draw the same number of values";
    const std::vector<double> kept = r.keep_mask.to_vector(), y = expected.to_vector(),
                              xv = x.to_vector();
    for (size_t i = 0; i < kept.size(); ++i) EXPECT_EQ(kept[i] != 0.0, y[i] != 0.0 || xv[i] == 0.0);
  }
  // Eval mode: no mask, and the backward passes the gradient through.
  const Tensor x = randn({3}, 1);
  const DropoutResult r = dropout_forward(x, 0.5, false);
  EXPECT_FALSE(r.keep_mask.defined());
  Tensor d = Tensor::zeros({3}, DType::kFloat64);
  dropout_backward(x, r.keep_mask, 0.5, d);
  EXPECT_EQ(d.to_vector(), x.to_vector());
}

// --- Cross-entropy ----------------------------------------------------------------------------

TEST(OpGradients, CrossEntropy) {
  const std::vector<int64_t> targets = {2, -100, 0, 6, 3};
  uint64_t seed = 200;
  for (double smoothing : {0.0, 0.1, 1.0}) {
    for (Reduction reduction : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
      const CrossEntropyOptions o{.label_smoothing = smoothing, .reduction = reduction};
      GradCase c;
      c.name = "cross_entropy [5, 7] smoothing=" + std::to_string(smoothing).substr(0, 3) +
               (reduction == Reduction::kMean  ? " mean"
                : reduction == Reduction::kSum ? " sum"
                                               : " none");
      c.inputs = {scale(randn({5, 7}, ++seed), 3.0)};
      c.forward = [&targets, o](const Inputs& t) { return cross_entropy(t[0], targets, o); };
      c.backward = [&targets, o](const Tensor& g, const Inputs& t, const Inputs& d) {
        cross_entropy_backward(g, t[0], targets, o, d[0]);
      };
      check_case(c);
    }
  }
}

TEST(OpGradients, CrossEntropyForwardAgainstFormula) {
  const Tensor x = randn({3, 4}, 21);
  const std::vector<int64_t> targets = {1, 3, 7};  // 7: a custom ignore_index
  const CrossEntropyOptions o{.ignore_index = 7, .label_smoothing = 0.2};
  double expected = 0.0;
  for (int64_t i = 0; i < 2; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < 4; ++j) sum += std::exp(x.at({i, j}));
    double row = 0.0;
    for (int64_t j = 0; j < 4; ++j) {
      const double q = (j == targets[i] ? 0.8 : 0.0) + 0.2 / 4;  // smoothed target
      row -= q * std::log(std::exp(x.at({i, j})) / sum);
    }
    expected += row / 2;  // mean over the 2 rows not ignored
  }
  EXPECT_NEAR(cross_entropy(x, targets, o).item(), expected, 1e-14);
  const Tensor none = cross_entropy(x, targets, {.ignore_index = 7, .reduction = Reduction::kNone});
  EXPECT_EQ(none.shape(), Shape{3});
  EXPECT_EQ(none.at({2}), 0.0);
  // Every row ignored: the mean is 0/0 (NaN, as torch) and the gradient is 0.
  const std::vector<int64_t> none_counted = {-100, -100, -100};
  EXPECT_TRUE(std::isnan(cross_entropy(x, none_counted).item()));
  Tensor d = Tensor::zeros({3, 4}, DType::kFloat64);
  cross_entropy_backward(Tensor::ones({}, DType::kFloat64), x, none_counted, {}, d);
  EXPECT_EQ(d.to_vector(), std::vector<double>(12, 0.0));
}

TEST(OpGradients, CrossEntropyErrors) {
  const Tensor x = randn({2, 3}, 1);
  expect_error([&] { cross_entropy(x, std::vector<int64_t>{0, 3}); }, "target 3 of row 1");
  expect_error([&] { cross_entropy(x, std::vector<int64_t>{0}); }, "expected 2 targets");
  expect_error(
      [&] {
        cross_entropy(randn({2, 3, 4}, 1), std::vector<int64_t>{0, 1});
      },
      "input must be 2-D");
  expect_error(
      [&] {
        cross_entropy(x, std::vector<int64_t>{0, 1}, {.label_smoothing = 1.5});
      },
      "label_smoothing");
}

// --- Attention score functions ----------------------------------------------------------------

TEST(OpGradients, ScoreFunctions) {
  uint64_t seed = 300;
  const std::vector<std::pair<Shape, Shape>> shapes = {{{2, 3, 4}, {2, 5, 4}}, {{1, 4}, {3, 4}}};
  for (const auto& [qs, ks] : shapes) {
    for (bool scaled : {false, true}) {
      GradCase c;
      c.name = std::string(scaled ? "scaled_dot scores " : "dot scores ") + shape_str(qs);
      c.inputs = {randn(qs, ++seed), randn(ks, ++seed)};
      c.forward = [scaled](const Inputs& t) {
        return (scaled ? ScoreFunction::scaled_dot() : ScoreFunction::dot()).scores(t[0], t[1]);
      };
      c.backward = [scaled](const Tensor& g, const Inputs& t, const Inputs& d) {
        dot_scores_backward(g, t[0], t[1], scaled, {.q = d[0], .k = d[1]});
      };
      check_case(c);
    }
  }
  {
    GradCase c;
    c.name = "additive scores [2, 3, 4] x [2, 5, 3], A=6";
    c.inputs = {randn({2, 3, 4}, ++seed), randn({2, 5, 3}, ++seed), randn({6, 4}, ++seed),
                randn({6, 3}, ++seed), randn({6}, ++seed)};
    c.forward = [](const Inputs& t) {
      return ScoreFunction::additive(t[2], t[3], t[4]).scores(t[0], t[1]);
    };
    c.backward = [](const Tensor& g, const Inputs& t, const Inputs& d) {
      additive_scores_backward(g, t[0], t[1], t[2], t[3], t[4],
                               {.q = d[0], .k = d[1], .w_q = d[2], .w_k = d[3], .v = d[4]});
    };
    // The float32 forward projects in float32; the backward works in float64 throughout.
    c.f32_tolerance = 5e-5;
    check_case(c);
  }
  {
    GradCase c;
    c.name = "bilinear scores [2, 3, 4] x [2, 5, 3]";
    c.inputs = {randn({2, 3, 4}, ++seed), randn({2, 5, 3}, ++seed), randn({4, 3}, ++seed)};
    c.forward = [](const Inputs& t) { return ScoreFunction::bilinear(t[2]).scores(t[0], t[1]); };
    c.backward = [](const Tensor& g, const Inputs& t, const Inputs& d) {
      bilinear_scores_backward(g, t[0], t[1], t[2], {.q = d[0], .k = d[1], .w = d[2]});
    };
    check_case(c);
  }
}

// --- Argument checks ---------------------------------------------------------------------------

TEST(OpGradients, ErrorsNameTheArgument) {
  const Tensor x = randn({3, 4}, 1), w = randn({2, 4}, 2);
  Tensor wrong = Tensor::zeros({4, 2}, DType::kFloat64);
  expect_error(
      [&] {
        linear_backward(Tensor::ones({3, 2}, DType::kFloat64), x, w, {}, {.weight = wrong});
      },
      "grads.weight must have its input's shape [2, 4], got [4, 2]");
  expect_error(
      [&] {
        linear_backward(Tensor::ones({3, 3}, DType::kFloat64), x, w, {}, {});
      },
      "grad_output must have the output's shape [3, 2], got [3, 3]");
  Tensor f32 = Tensor::zeros({3, 4});
  expect_error(
      [&] {
        relu_backward(Tensor::ones({3, 4}, DType::kFloat64), x, f32);
      },
      "grad_input must have dtype float64", ErrorKind::kType);
  expect_error(
      [&] {
        relu_backward(Tensor::ones({3, 4}, DType::kFloat64), x, Tensor());
      },
      "grad_input is undefined");
  Tensor gb = Tensor::zeros({2}, DType::kFloat64);
  expect_error(
      [&] {
        linear_backward(Tensor::ones({3, 2}, DType::kFloat64), x, w, {}, {.bias = gb});
      },
      "the forward had no bias");
}

}  // namespace
}  // namespace qkv
