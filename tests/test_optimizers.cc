// SGD, Adam, AdamW, clip_grad_norm and the warmup-cosine schedule against
// their textbook formulas evaluated here in float64 (torch.optim's
// documentation states the same formulas; python/tests/test_optim_parity.py
// compares with torch itself).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "qkv/generator.h"
#include "qkv/nn/linear.h"
#include "qkv/nn/parameter.h"
#include "qkv/optim/adam.h"
#include "qkv/optim/clip_grad_norm.h"
#include "qkv/optim/lr_schedule.h"
#include "qkv/optim/sgd.h"
#include "qkv/runtime.h"
#include "tensor_comparison.h"
#include "test_util.h"

namespace qkv {
namespace {

using qkv_test::expect_error;

using Vec = std::vector<double>;

double max_rel(const Vec& a, const Vec& b) {
  double worst = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return worst / scale;
}

// The gradient at step t of a loss whose gradient depends on the parameters:
// g = c_t ∘ p + r_t with c_t, r_t fixed random vectors per step, so that an
// error in one step changes the gradients of all later ones.
Vec gradient_at(int step, const Vec& p) {
  Generator gen(1000 + step);
  Vec g(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const double c = gen.uniform() * 2.0, r = gen.normal();
    g[i] = c * p[i] + r;
  }
  return g;
}

// Two parameters of sizes 6 and [2, 3]; returns their concatenated values after each step.
struct Trajectory {
  std::vector<Vec> history;
};

Vec initial_values(size_t n) {
  Generator gen(7);
  Vec v(n);
  for (double& x : v) x = gen.normal();
  return v;
}

// Drives `make(params)` for `steps` steps with lr from `lr_at`.
template <class Make>
Trajectory run_qkv(DType dtype, int steps, Make make, const std::function<double(int)>& lr_at) {
  const Vec init = initial_values(12);
  std::vector<nn::Parameter> params = {
      {"a", Tensor::from_vector({6}, std::span<const double>(init.data(), 6)).to(dtype),
       Tensor::zeros({6}, dtype)},
      {"b.weight",
       Tensor::from_vector({2, 3}, std::span<const double>(init.data() + 6, 6)).to(dtype),
       Tensor::zeros({2, 3}, dtype)}};
  auto opt = make(params);
  Trajectory run;
  for (int t = 0; t < steps; ++t) {
    Vec p = params[0].value.to_vector();
    const Vec pb = params[1].value.to_vector();
    p.insert(p.end(), pb.begin(), pb.end());
    const Vec g = gradient_at(t, p);
    opt.zero_grad();
    params[0].grad.copy_from(Tensor::from_vector({6}, std::span<const double>(g.data(), 6)));
    params[1].grad.copy_from(Tensor::from_vector({2, 3}, std::span<const double>(g.data() + 6, 6)));
    opt.set_lr(lr_at(t));
    opt.step();
    Vec after = params[0].value.to_vector();
    const Vec after_b = params[1].value.to_vector();
    after.insert(after.end(), after_b.begin(), after_b.end());
    run.history.push_back(after);
  }
  return run;
}

// --- The formulas -------------------------------------------------------------------------

struct SgdFormula {
  double momentum, dampening, weight_decay;
  bool nesterov;
  Vec buf;
  void step(Vec& p, Vec g, double lr) {
    for (size_t i = 0; i < p.size(); ++i) g[i] += weight_decay * p[i];
    if (momentum != 0.0) {
      if (buf.empty())
        buf = g;
      else
        for (size_t i = 0; i < p.size(); ++i) buf[i] = momentum * buf[i] + (1 - dampening) * g[i];
      for (size_t i = 0; i < p.size(); ++i) g[i] = nesterov ? g[i] + momentum * buf[i] : buf[i];
    }
    for (size_t i = 0; i < p.size(); ++i) p[i] -= lr * g[i];
  }
};

// Adam (Kingma & Ba) with torch's eps placement, L2 (Adam) or decoupled (AdamW) decay.
struct AdamFormula {
  double beta1, beta2, eps, weight_decay;
  bool decoupled, amsgrad;
  Vec m, v, vmax;
  int t = 0;
  void step(Vec& p, Vec g, double lr) {
    if (m.empty()) m = v = vmax = Vec(p.size(), 0.0);
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      if (decoupled)
        p[i] -= lr * weight_decay * p[i];
      else
        g[i] += weight_decay * p[i];
      m[i] = beta1 * m[i] + (1 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
      vmax[i] = std::max(vmax[i], v[i]);
      const double m_hat = m[i] / (1 - std::pow(beta1, t));
      const double v_hat = (amsgrad ? vmax[i] : v[i]) / (1 - std::pow(beta2, t));
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
};

template <class Formula>
Trajectory run_formula(int steps, Formula f, const std::function<double(int)>& lr_at) {
  Vec p = initial_values(12);
  Trajectory run;
  for (int t = 0; t < steps; ++t) {
    f.step(p, gradient_at(t, p), lr_at(t));
    run.history.push_back(p);
  }
  return run;
}

// Worst relative error over all steps of `ours` against `expected`, and checks it.
double compare(const Trajectory& ours, const Trajectory& expected, double tolerance,
               const std::string& what) {
  double worst = 0.0;
  for (size_t t = 0; t < expected.history.size(); ++t)
    worst = std::max(worst, max_rel(ours.history[t], expected.history[t]));
  EXPECT_LT(worst, tolerance) << what;
  std::printf("[ optimizer ] %-48s rel err %.2e\n", what.c_str(), worst);
  return worst;
}

const std::function<double(int)> kVaryingLr = [](int t) { return 0.05 * (1.0 + 0.1 * (t % 3)); };

// --- SGD ---------------------------------------------------------------------------------------

TEST(Optimizers, SgdMatchesFormula) {
  struct Config {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  for (const Config c : {Config{0, 0, 0, false}, Config{0.9, 0, 0, false},
                         Config{0.9, 0.3, 0.01, false}, Config{0.9, 0, 0.05, true}}) {
    const std::string name = "SGD momentum=" + std::to_string(c.momentum).substr(0, 3) +
                             " dampening=" + std::to_string(c.dampening).substr(0, 3) +
                             " wd=" + std::to_string(c.weight_decay).substr(0, 4) +
                             (c.nesterov ? " nesterov" : "");
    const Trajectory expected = run_formula(
        20, SgdFormula{c.momentum, c.dampening, c.weight_decay, c.nesterov, {}}, kVaryingLr);
    for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
      const Trajectory ours = run_qkv(
          dtype, 20,
          [&](std::vector<nn::Parameter>& p) {
            return optim::SGD(p, {.lr = 0.05,
                                  .momentum = c.momentum,
                                  .dampening = c.dampening,
                                  .weight_decay = c.weight_decay,
                                  .nesterov = c.nesterov});
          },
          kVaryingLr);
      compare(ours, expected, dtype == DType::kFloat64 ? 1e-13 : 1e-5,
              name + (dtype == DType::kFloat64 ? " f64" : " f32"));
    }
  }
}

TEST(Optimizers, SgdRejectsInvalidOptions) {
  std::vector<nn::Parameter> p = {{"w", Tensor::zeros({2}), Tensor::zeros({2})}};
  expect_error([&] { optim::SGD(p, {.nesterov = true}); }, "nesterov momentum requires");
  expect_error([&] { optim::SGD(p, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}); },
               "zero dampening");
  expect_error([&] { optim::SGD(p, {.lr = -1}); }, "invalid learning rate -1");
}

// --- Adam and AdamW ----------------------------------------------------------------------------

TEST(Optimizers, AdamAndAdamWMatchFormula) {
  struct Config {
    bool decoupled;
    double weight_decay;
    bool amsgrad;
    double eps;
  };
  for (const Config c : {Config{false, 0, false, 1e-8}, Config{false, 0.1, false, 1e-8},
                         Config{true, 0.1, false, 1e-8}, Config{true, 0.01, true, 1e-3},
                         Config{false, 0, true, 1e-8}}) {
    const std::string name = std::string(c.decoupled ? "AdamW" : "Adam") +
                             " wd=" + std::to_string(c.weight_decay).substr(0, 4) +
                             " eps=" + (c.eps == 1e-8 ? "1e-8" : "1e-3") +
                             (c.amsgrad ? " amsgrad" : "");
    const Trajectory expected = run_formula(
        25, AdamFormula{0.9, 0.999, c.eps, c.weight_decay, c.decoupled, c.amsgrad, {}, {}, {}},
        kVaryingLr);
    for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
      const optim::AdamOptions o{
          .lr = 0.05, .eps = c.eps, .weight_decay = c.weight_decay, .amsgrad = c.amsgrad};
      Trajectory ours;
      if (c.decoupled)
        ours = run_qkv(
            dtype, 25, [&](std::vector<nn::Parameter>& p) { return optim::AdamW(p, o); },
            kVaryingLr);
      else
        ours = run_qkv(
            dtype, 25, [&](std::vector<nn::Parameter>& p) { return optim::Adam(p, o); },
            kVaryingLr);
      compare(ours, expected, dtype == DType::kFloat64 ? 1e-12 : 1e-5,
              name + (dtype == DType::kFloat64 ? " f64" : " f32"));
    }
  }
}

// A parameter large enough for the update to be split over the threads
// gives, bit for bit, what one thread gives (and changes with amsgrad on too).
TEST(Optimizers, LargeParametersUpdateTheSameOnAnyThreadCount) {
  const int previous = qkv::num_threads();
  for (bool amsgrad : {false, true}) {
    std::vector<Tensor> results;
    for (int threads : {1, 2}) {
      qkv::set_num_threads(threads);
      Generator g(7);
      std::vector<nn::Parameter> params = {
          {"w", Tensor::randn({300, 300}, g), Tensor::zeros({300, 300})}};
      optim::AdamW opt(params, {.lr = 0.01, .weight_decay = 0.1, .amsgrad = amsgrad});
      Tensor start = params[0].value.clone();
      for (int step = 0; step < 3; ++step) {
        params[0].grad.copy_from(Tensor::randn({300, 300}, g));
        opt.step();
      }
      EXPECT_GT(qkv::testing::relative_error(params[0].value, start), 1e-4);
      results.push_back(params[0].value.clone());
    }
    EXPECT_EQ(results[0].to_vector(), results[1].to_vector()) << "amsgrad " << amsgrad;
  }
  qkv::set_num_threads(previous);
}

TEST(Optimizers, AdamWDefaultWeightDecayIsTorchs) {
  std::vector<nn::Parameter> p = {{"w", Tensor::zeros({2}), Tensor::zeros({2})}};
  EXPECT_EQ(optim::AdamW(p).options().weight_decay, 1e-2);
  EXPECT_EQ(optim::Adam(p).options().weight_decay, 0.0);
}

// --- State dicts -------------------------------------------------------------------------------

// Runs 4 steps, copies parameters and optimizer state into a fresh optimizer,
// then runs 4 more steps on both: they must agree bit for bit.
template <class Make>
void expect_resume_is_exact(Make make, const std::vector<std::string>& expected_names) {
  Generator gen(3);
  auto fresh_params = [&](const std::vector<nn::Parameter>* from) {
    std::vector<nn::Parameter> p = {{"x.weight", Tensor::randn({3, 2}, gen), Tensor::zeros({3, 2})},
                                    {"x.bias", Tensor::randn({3}, gen), Tensor::zeros({3})}};
    if (from)
      for (size_t i = 0; i < p.size(); ++i) p[i].value.copy_from((*from)[i].value);
    return p;
  };
  auto grads = [](std::vector<nn::Parameter>& p, int t) {
    for (auto& q : p) {
      Generator g(50 + t);
      q.grad.copy_from(Tensor::randn(q.grad.shape(), g));
    }
  };
  std::vector<nn::Parameter> a = fresh_params(nullptr);
  auto opt_a = make(a);
  for (int t = 0; t < 4; ++t) {
    grads(a, t);
    opt_a.step();
  }
  const auto state = opt_a.state_dict();
  std::vector<std::string> names;
  for (const auto& [name, t] : state) names.push_back(name);
  EXPECT_EQ(names, expected_names);

  std::vector<nn::Parameter> b = fresh_params(&a);
  auto opt_b = make(b);
  opt_b.load_state_dict(state);
  for (int t = 4; t < 8; ++t) {
    grads(a, t);
    grads(b, t);
    opt_a.step();
    opt_b.step();
  }
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].value.to_vector(), b[i].value.to_vector()) << a[i].name;
}

TEST(Optimizers, StateDictResumesExactly) {
  expect_resume_is_exact(
      [](std::vector<nn::Parameter>& p) { return optim::SGD(p, {.lr = 0.1, .momentum = 0.9}); },
      {"x.bias.momentum_buffer", "x.weight.momentum_buffer"});
  expect_resume_is_exact(
      [](std::vector<nn::Parameter>& p) {
        return optim::AdamW(p, {.lr = 0.01, .weight_decay = 0.1});
      },
      {"x.bias.exp_avg", "x.bias.exp_avg_sq", "x.bias.step", "x.weight.exp_avg",
       "x.weight.exp_avg_sq", "x.weight.step"});
  expect_resume_is_exact(
      [](std::vector<nn::Parameter>& p) { return optim::Adam(p, {.lr = 0.01, .amsgrad = true}); },
      {"x.bias.exp_avg", "x.bias.exp_avg_sq", "x.bias.max_exp_avg_sq", "x.bias.step",
       "x.weight.exp_avg", "x.weight.exp_avg_sq", "x.weight.max_exp_avg_sq", "x.weight.step"});
}

TEST(Optimizers, LoadStateDictIsStrict) {
  std::vector<nn::Parameter> p = {{"w", Tensor::zeros({2}), Tensor::zeros({2})}};
  optim::Adam adam(p);
  adam.step();
  auto state = adam.state_dict();
  EXPECT_EQ(state.at("w.step").item(), 1.0);
  EXPECT_EQ(adam.step_count(), 1);

  auto extra = state;
  extra["v.exp_avg"] = Tensor::zeros({2});
  expect_error([&] { adam.load_state_dict(extra); },
               "unexpected key(s) in state_dict: \"v.exp_avg\"");
  auto partial = state;
  partial.erase("w.exp_avg_sq");
  expect_error([&] { adam.load_state_dict(partial); }, "got only some of them");
  auto wrong = state;
  wrong["w.exp_avg"] = Tensor::zeros({3});
  expect_error([&] { adam.load_state_dict(wrong); },
               "size mismatch for \"w.exp_avg\": expected shape [2], got [3]");
  auto bad_step = state;
  bad_step["w.step"] = Tensor::full({}, 0.5, DType::kFloat64);
  expect_error([&] { adam.load_state_dict(bad_step); }, "must be a whole number >= 1");
  EXPECT_EQ(adam.step_count(), 1) << "a failed load must change nothing";
  adam.load_state_dict({});  // no state: as before the first step
  EXPECT_EQ(adam.step_count(), 0);
}

TEST(Optimizers, ZeroGradAndParameterChecks) {
  nn::Linear lin({.in_features = 3, .out_features = 2});
  std::vector<nn::Parameter> p = nn::make_parameters(lin.state_dict(), "lin");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].name, "lin.bias");
  EXPECT_EQ(p[1].name, "lin.weight");
  EXPECT_TRUE(p[1].value.shares_storage_with(lin.weight())) << "parameters are the module's own";
  p[1].grad.fill(1.0);
  optim::SGD opt(p, {.lr = 0.5});
  const std::vector<double> before = lin.weight().to_vector();
  opt.step();
  const std::vector<double> after = lin.weight().to_vector();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_FLOAT_EQ(after[i], before[i] - 0.5);
  opt.zero_grad();
  EXPECT_EQ(p[1].grad.to_vector(), std::vector<double>(6, 0.0));

  std::vector<nn::Parameter> twice = {p[0], p[0]};
  expect_error([&] { optim::SGD(twice, {}); }, "parameter name \"lin.bias\" appears twice");
  std::vector<nn::Parameter> mismatched = {{"w", Tensor::zeros({2}), Tensor::zeros({3})}};
  expect_error([&] { optim::Adam(mismatched, {}); }, "grad of \"w\" has shape [3]");
}

// --- clip_grad_norm ----------------------------------------------------------------------------

TEST(Optimizers, ClipGradNorm) {
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    Generator gen(11);
    const Tensor a0 = Tensor::randn({4, 3}, gen, dtype), b0 = Tensor::randn({5}, gen, dtype);
    double sum_sq = 0.0, max_abs = 0.0, sum_abs = 0.0;
    for (const Tensor& t : {a0, b0})
      for (double x : t.to_vector()) {
        sum_sq += x * x;
        max_abs = std::max(max_abs, std::abs(x));
        sum_abs += std::abs(x);
      }
    const double l2 = std::sqrt(sum_sq);
    const double tol = dtype == DType::kFloat64 ? 1e-14 : 1e-6;
    struct Case {
      double norm_type, expected_total, max_norm;
    };
    for (const Case c : {Case{2.0, l2, 1.0}, Case{2.0, l2, 100.0}, Case{INFINITY, max_abs, 0.5},
                         Case{1.0, sum_abs, 2.0}}) {
      Tensor a = a0.clone(), b = b0.clone();
      const std::vector<Tensor> grads = {a, b};
      const double total = optim::clip_grad_norm(grads, c.max_norm, c.norm_type);
      EXPECT_NEAR(total, c.expected_total, tol * c.expected_total);
      // torch's factor: min(max_norm / (total + 1e-6), 1).
      const double factor = std::min(1.0, c.max_norm / (c.expected_total + 1e-6));
      for (const auto& [clipped, original] : {std::pair{a, a0}, std::pair{b, b0}}) {
        const std::vector<double> x = clipped.to_vector(), x0 = original.to_vector();
        for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], x0[i] * factor, tol * 4) << i;
      }
    }
  }
}

TEST(Optimizers, ClipGradNormNonFinite) {
  Tensor g = Tensor::from_vector({2}, std::vector<float>{1.0f, INFINITY});
  expect_error([&] { optim::clip_grad_norm(std::vector<Tensor>{g}, 1.0, 2.0, true); },
               "non-finite");
  const double total = optim::clip_grad_norm(std::vector<Tensor>{g}, 1.0);
  EXPECT_TRUE(std::isinf(total));
  // torch: factor 1/(inf + 1e-6) = 0, so finite entries become 0 and inf · 0 = NaN.
  EXPECT_EQ(g.at({0}), 0.0);
  EXPECT_TRUE(std::isnan(g.at({1})));
  expect_error([&] { optim::clip_grad_norm(std::vector<Tensor>{g}, 1.0, 0.0); }, "norm_type");
}

// --- Learning-rate schedule --------------------------------------------------------------------

TEST(Optimizers, WarmupCosineSchedule) {
  const optim::WarmupCosineSchedule s(
      {.base_lr = 1e-3, .warmup_steps = 10, .total_steps = 110, .min_lr = 1e-4});
  EXPECT_DOUBLE_EQ(s.lr(0), 0.0);
  EXPECT_DOUBLE_EQ(s.lr(5), 0.5e-3);              // halfway through warmup
  EXPECT_DOUBLE_EQ(s.lr(10), 1e-3);               // warmup end: the peak
  EXPECT_DOUBLE_EQ(s.lr(60), (1e-3 + 1e-4) / 2);  // halfway through the decay
  EXPECT_DOUBLE_EQ(s.lr(110), 1e-4);              // end
  EXPECT_DOUBLE_EQ(s.lr(500), 1e-4);              // stays at min_lr
  // A quarter into the decay: min + (base − min) · ½ (1 + cos(π/4)).
  EXPECT_DOUBLE_EQ(s.lr(35), 1e-4 + 0.9e-3 * 0.5 * (1 + std::cos(M_PI / 4)));
  for (int64_t t = 10; t < 110; ++t) EXPECT_GE(s.lr(t), s.lr(t + 1)) << "decays monotonically";

  const optim::WarmupCosineSchedule no_warmup(
      {.base_lr = 2.0, .warmup_steps = 0, .total_steps = 4});
  EXPECT_DOUBLE_EQ(no_warmup.lr(0), 2.0);
  EXPECT_DOUBLE_EQ(no_warmup.lr(2), 1.0);
  EXPECT_NEAR(no_warmup.lr(4), 0.0, 1e-16);
  expect_error([] { optim::WarmupCosineSchedule({.warmup_steps = 5, .total_steps = 3}); },
               "warmup_steps <= total_steps");
  expect_error([] { optim::WarmupCosineSchedule({.base_lr = 1, .min_lr = 2}); }, "min_lr");
}

}  // namespace
}  // namespace qkv
