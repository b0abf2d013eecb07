// The float32 row loops of the ops (norms, activations, Adam), which run the
// instruction set of the active kernel table (kernels/row_kernels.h): on
// every ISA this CPU supports, held to the same ops in float64, the norms and
// Adam bit-identical across ISAs, and QKV_ISA=portable reaching them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "kernel_tables.h"
#include "qkv/functional.h"
#include "qkv/generator.h"
#include "qkv/gradients.h"
#include "qkv/optim/adam.h"

using namespace qkv;

namespace {

const kernels::KernelTable& portable_table() { return *kernels::supported_kernel_tables().back(); }

Tensor f64(const Tensor& t) { return t.to(DType::kFloat64); }

// Rows of 389 (not a multiple of any vector width) with a large mean, so
// that the variance is computed against it.
struct NormInputs {
  Tensor x, w, b, dy;
  NormInputs() {
    Generator gen(17);
    std::vector<double> v = Tensor::randn({37, 389}, gen).to_vector();
    for (double& e : v) e = 3.0 * e + 5.0;
    x = Tensor::from_vector({37, 389}, std::span<const double>(v)).to(DType::kFloat32);
    w = Tensor::randn({389}, gen);
    b = Tensor::randn({389}, gen);
    dy = Tensor::randn({37, 389}, gen);
  }
};

struct NormResults {
  std::vector<double> ln, ln_plain, rms, ln_dx, ln_dw, ln_db, rms_dx, rms_dw;
};

// Every norm result on float32 (`dtype`) or float64 inputs.
NormResults norm_results(const NormInputs& in, DType dtype) {
  const Tensor x = in.x.to(dtype), w = in.w.to(dtype), b = in.b.to(dtype), dy = in.dy.to(dtype);
  NormResults r;
  r.ln = layer_norm(x, {389}, w, b, 1e-5).to_vector();
  r.ln_plain = layer_norm(x, {389}, Tensor(), Tensor(), 1e-5).to_vector();
  r.rms = rms_norm(x, {389}, w, 1e-6).to_vector();
  NormGradients g{Tensor::zeros(x.shape(), dtype), Tensor::zeros({389}, dtype),
                  Tensor::zeros({389}, dtype)};
  layer_norm_backward(dy, x, {389}, w, b, 1e-5, g);
  r.ln_dx = g.input.to_vector();
  r.ln_dw = g.weight.to_vector();
  r.ln_db = g.bias.to_vector();
  NormGradients h{Tensor::zeros(x.shape(), dtype), Tensor::zeros({389}, dtype), Tensor()};
  rms_norm_backward(dy, x, {389}, w, 1e-6, h);
  r.rms_dx = h.input.to_vector();
  r.rms_dw = h.weight.to_vector();
  return r;
}

// max |a − b| / (|b| + 1) over the elements.
double scaled_error(const std::vector<double>& x, const std::vector<double>& y) {
  EXPECT_EQ(x.size(), y.size());
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, std::abs(x[i] - y[i]) / (std::abs(y[i]) + 1.0));
  return worst;
}

// Parameters after three AdamW steps (amsgrad, weight decay) on fixed gradients.
std::vector<double> adam_result(DType dtype) {
  Generator gen(3);
  const Tensor start = Tensor::randn({1000 + 13}, gen), grad = Tensor::randn({1000 + 13}, gen);
  std::vector<nn::Parameter> params{{"p", start.to(dtype), grad.to(dtype)}};
  optim::AdamW opt(params, {.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true});
  for (int i = 0; i < 3; ++i) opt.step();
  return params[0].value.to_vector();
}

class IsaRowOps : public qkv_test::ActiveKernelTableTest {};

// (avx512_bf16 and amx add bfloat16 products to avx512 and share its row loops.)
TEST_P(IsaRowOps, TheActiveTableCarriesItsRows) {
  EXPECT_EQ(kernels::active_kernel_table().rows, GetParam()->rows);
  const std::string table = GetParam()->name, rows = kernels::active_row_kernels().name;
  EXPECT_TRUE(table == rows || ((table == "avx512_bf16" || table == "amx") && rows == "avx512"))
      << "table " << table << " runs the rows of " << rows;
}

// The norms compute in float64 and round once: within a float32 rounding of
// the float64 op, and the same bits on every ISA (the backward recomputes
// the forward's statistics; nothing is contracted).
TEST_P(IsaRowOps, NormsHeldToFloat64AndBitIdenticalAcrossIsas) {
  const NormInputs in;
  const NormResults got = norm_results(in, DType::kFloat32);
  const NormResults want = norm_results(in, DType::kFloat64);
  EXPECT_LE(scaled_error(got.ln, want.ln), 2e-7);
  EXPECT_LE(scaled_error(got.ln_plain, want.ln_plain), 2e-7);
  EXPECT_LE(scaled_error(got.rms, want.rms), 2e-7);
  EXPECT_LE(scaled_error(got.ln_dx, want.ln_dx), 2e-7);
  EXPECT_LE(scaled_error(got.ln_dw, want.ln_dw), 2e-7);
  EXPECT_LE(scaled_error(got.ln_db, want.ln_db), 2e-7);
  EXPECT_LE(scaled_error(got.rms_dx, want.rms_dx), 2e-7);
  EXPECT_LE(scaled_error(got.rms_dw, want.rms_dw), 2e-7);

  kernels::override_kernel_table(&portable_table());
  const NormResults portable = norm_results(in, DType::kFloat32);
  kernels::override_kernel_table(GetParam());
  EXPECT_EQ(got.ln, portable.ln);
  EXPECT_EQ(got.ln_plain, portable.ln_plain);
  EXPECT_EQ(got.rms, portable.rms);
  EXPECT_EQ(got.ln_dx, portable.ln_dx);
  EXPECT_EQ(got.ln_dw, portable.ln_dw);
  EXPECT_EQ(got.ln_db, portable.ln_db);
  EXPECT_EQ(got.rms_dx, portable.rms_dx);
  EXPECT_EQ(got.rms_dw, portable.rms_dw);
}

// add_layer_norm (float32 statistics, for bfloat16 and int8 models) against
// float64 layer_norm of the float32-rounded sum, with and without the
// residual and the affine parameters, in place; and its argument checks.
TEST_P(IsaRowOps, AddLayerNormHeldToFloat64) {
  const NormInputs in;
  Generator gen(23);
  const Tensor r = Tensor::randn(in.x.shape(), gen);
  const Tensor sum = add(in.x, r);  // rounded to float32, as the op's first step
  auto check = [&](const Tensor& residual, const Tensor& w, const Tensor& b, const Tensor& s) {
    Tensor out = in.x.clone();
    add_layer_norm_into(out, out, residual, {389}, w, b, 1e-5);
    const Tensor want =
        layer_norm(f64(s), {389}, w.defined() ? f64(w) : w, b.defined() ? f64(b) : b, 1e-5);
    const double err = scaled_error(out.to_vector(), want.to_vector());
    EXPECT_LE(err, 1e-6);
    EXPECT_GT(err, 0.0) << "float32 statistics cannot match float64 to the last bit everywhere";
  };
  check(r, in.w, in.b, sum);
  check(Tensor(), in.w, in.b, in.x);
  check(r, Tensor(), Tensor(), sum);

  Tensor out = Tensor::empty(in.x.shape());
  EXPECT_THROW(add_layer_norm_into(out, in.x, r.slice(0, 0, 5), {389}), Error);
  EXPECT_THROW(add_layer_norm_into(out, in.x, r, {388}), Error);
  Tensor out64 = Tensor::empty(in.x.shape(), DType::kFloat64);
  EXPECT_THROW(add_layer_norm_into(out64, f64(in.x), Tensor(), {389}), Error);
}

// Activations and their derivatives with the kernels' exp and erf, against
// the same ops in float64 (the C library), on [-12, 12] with a ragged tail.
TEST_P(IsaRowOps, ActivationsHeldToFloat64) {
  const int64_t n = 24 * 256 + 7;
  std::vector<double> xs(n);
  for (int64_t i = 0; i < n; ++i) xs[i] = -12.0 + 24.0 * static_cast<double>(i) / (n - 1);
  const Tensor x = Tensor::from_vector({n}, std::span<const double>(xs)).to(DType::kFloat32);
  const Tensor x64 = f64(x);
  Generator gen(9);
  const Tensor go = Tensor::randn({n}, gen);

  // max |got − want| / ((|x| + 1) · scale[i]) over the elements (as tests/test_gelu.cc).
  auto error = [&](const Tensor& got, const Tensor& want, const std::vector<double>& scale) {
    const std::vector<double> a = got.to_vector(), b = want.to_vector();
    double worst = 0.0;
    for (int64_t i = 0; i < n; ++i)
      worst = std::max(worst, std::abs(a[i] - b[i]) / ((std::abs(xs[i]) + 1.0) * scale[i]));
    return worst;
  };
  const std::vector<double> ones(n, 1.0);
  EXPECT_LE(error(gelu(x), gelu(x64), ones), 2e-7);
  EXPECT_LE(error(gelu(x, GeluApproximation::kTanh), gelu(x64, GeluApproximation::kTanh), ones),
            2e-7);
  EXPECT_LE(error(silu(x), silu(x64), ones), 2e-7);

  auto backward = [&](auto op, const Tensor& at) {
    Tensor gi = Tensor::ones({n}, at.dtype());
    op(go.to(at.dtype()), at, gi);
    return gi;
  };
  auto gelu_b = [](const Tensor& g, const Tensor& v, Tensor& gi) {
    gelu_backward(g, v, GeluApproximation::kNone, gi);
  };
  auto gelu_tanh_b = [](const Tensor& g, const Tensor& v, Tensor& gi) {
    gelu_backward(g, v, GeluApproximation::kTanh, gi);
  };
  auto silu_b = [](const Tensor& g, const Tensor& v, Tensor& gi) { silu_backward(g, v, gi); };
  auto relu_b = [](const Tensor& g, const Tensor& v, Tensor& gi) { relu_backward(g, v, gi); };
  // The derivatives within 1e-6 (|x| + 1), times |go| (+ 1 for the rounding of gi).
  std::vector<double> go_scale = go.to_vector();
  for (double& g : go_scale) g = std::abs(g) + 1.0;
  EXPECT_LE(error(backward(gelu_b, x), backward(gelu_b, x64), go_scale), 1e-6);
  EXPECT_LE(error(backward(gelu_tanh_b, x), backward(gelu_tanh_b, x64), go_scale), 1e-6);
  EXPECT_LE(error(backward(silu_b, x), backward(silu_b, x64), go_scale), 1e-6);
  EXPECT_EQ(backward(relu_b, x).to_vector(),
            f64(backward(relu_b, x64)).to(DType::kFloat32).to_vector());
}

// Saturation and specials on the vector path: limits, not polynomials past
// their range, and NaN kept.
TEST_P(IsaRowOps, ActivationsAtTheExtremes) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  const std::vector<double> xs = {100.0, -100.0, 1e30, -1e30, inf, nan, 0.0, -87.0, 87.0};
  const Tensor x = Tensor::from_vector({9}, std::span<const double>(xs)).to(DType::kFloat32);
  const std::vector<double> g = gelu(x).to_vector(), s = silu(x).to_vector(),
                            t = gelu(x, GeluApproximation::kTanh).to_vector();
  for (const auto* y : {&g, &s, &t}) {
    EXPECT_EQ((*y)[0], 100.0);
    EXPECT_EQ((*y)[1], 0.0);
    EXPECT_EQ((*y)[2], static_cast<double>(1e30f));
    EXPECT_EQ((*y)[3], 0.0);
    EXPECT_EQ((*y)[4], inf);
    EXPECT_TRUE(std::isnan((*y)[5]));
    EXPECT_EQ((*y)[6], 0.0);
    EXPECT_EQ((*y)[8], static_cast<double>(87.0f));
  }
  Tensor gi = Tensor::zeros({9});
  gelu_backward(Tensor::ones({9}), x, GeluApproximation::kNone, gi);
  const std::vector<double> d = gi.to_vector();
  EXPECT_EQ(d[0], 1.0);
  EXPECT_EQ(d[1], 0.0);
  EXPECT_TRUE(std::isnan(d[5]));
}

// Adam's float32 update: within float32 rounding of the float64 update, and
// the same bits on every ISA (torch's roundings, no contraction).
TEST_P(IsaRowOps, AdamHeldToFloat64AndBitIdenticalAcrossIsas) {
  const std::vector<double> got = adam_result(DType::kFloat32);
  EXPECT_LE(scaled_error(got, adam_result(DType::kFloat64)), 1e-6);
  kernels::override_kernel_table(&portable_table());
  const std::vector<double> portable = adam_result(DType::kFloat32);
  kernels::override_kernel_table(GetParam());
  EXPECT_EQ(got, portable);
}

QKV_INSTANTIATE_FOR_EVERY_KERNEL_TABLE(IsaRowOps);

// QKV_ISA=portable picks the portable rows for the ops: this binary is run
// again with it set, and the child checks the table and that gelu gives the
// bits of the portable loop.
TEST(IsaRowOpsEnvironment, QkvIsaPortableSelectsThePortableRows) {
  if (std::getenv("QKV_ROW_OPS_CHILD") != nullptr) {
    EXPECT_STREQ(kernels::active_kernel_table().name, "portable");
    EXPECT_STREQ(kernels::active_row_kernels().name, "portable");
    std::vector<float> xs(101), want(101);
    for (int i = 0; i < 101; ++i) xs[i] = -5.0f + 0.1f * static_cast<float>(i);
    portable_table().rows->gelu(xs.data(), want.data(), 101);
    const std::vector<double> x64(xs.begin(), xs.end());
    const Tensor x = Tensor::from_vector({101}, std::span<const double>(x64)).to(DType::kFloat32);
    const std::vector<double> got = gelu(x).to_vector();
    for (int i = 0; i < 101; ++i) EXPECT_EQ(got[i], static_cast<double>(want[i])) << xs[i];
    return;
  }
  const std::string command =
      "QKV_ISA=portable QKV_ROW_OPS_CHILD=1 '" +
      std::filesystem::read_symlink("/proc/self/exe").string() +
      "' --gtest_filter=IsaRowOpsEnvironment.QkvIsaPortableSelectsThePortableRows >/dev/null";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
}

}  // namespace
