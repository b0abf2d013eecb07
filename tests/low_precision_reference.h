// The float64 references of the bfloat16 and int8 linear kernels
// (kernels/low_precision_gemm.h), computed from the same rounded (bf16) or
// quantised (int8) operands: test_low_precision_gemm.cc and
// test_weight_types_by_isa.cc check every table and every ISA level with them.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/low_precision_gemm.h"
#include "qkv/tensor.h"

namespace qkv_test::lowp {

using qkv::Precision;
using qkv::kernels::PackedWeights;

constexpr float kSentinel = -12345.0f;
constexpr double kU = 0x1p-24;  // float32's unit roundoff

// Rows of uniform values in [-1, 1], each row scaled by 2^e for e in [-3, 3]
// (so that rows get different int8 scales).
inline std::vector<float> random_rows(int64_t rows, int64_t cols, int64_t ld, std::mt19937& gen) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> e(-3, 3);
  std::vector<float> v(std::max<int64_t>(rows * ld, 1), kSentinel);
  for (int64_t i = 0; i < rows; ++i) {
    const float scale = std::ldexp(1.0f, e(gen));
    for (int64_t j = 0; j < cols; ++j) v[i * ld + j] = u(gen) * scale;
  }
  return v;
}

// The int8 quantisations the header documents. W, symmetric: scale =
// max|v| / 127, q = round_half_even(v · (127 / max)); zero (and below
// 2^-100) rows: scale 0. x, asymmetric: q = u - zero (what the products see).
struct Quantized {
  std::vector<int32_t> q;
  float scale;
};
inline Quantized quantize_row_asymmetric(const float* v, int64_t k) {
  float lo = 0.0f, hi = 0.0f;
  for (int64_t p = 0; p < k; ++p) lo = std::min(lo, v[p]), hi = std::max(hi, v[p]);
  Quantized out{std::vector<int32_t>(k, 0), 0.0f};
  const float scale = hi / 255.0f - lo / 255.0f;
  if (!(scale >= 0x1p-100f / 255.0f)) return out;
  out.scale = scale;
  const float inv = 1.0f / scale;
  const float zero = std::min(255.0f, std::nearbyint(-lo * inv));
  for (int64_t p = 0; p < k; ++p)
    out.q[p] =
        static_cast<int32_t>(std::clamp(std::nearbyint(v[p] * inv) + zero, 0.0f, 255.0f) - zero);
  return out;
}
inline Quantized quantize_row(const float* v, int64_t k) {
  float max = 0.0f;
  for (int64_t p = 0; p < k; ++p) max = std::max(max, std::fabs(v[p]));
  Quantized out{std::vector<int32_t>(k, 0), 0.0f};
  if (max < 0x1p-100f) return out;
  out.scale = max / 127.0f;
  const float inv = 127.0f / max;
  for (int64_t p = 0; p < k; ++p)
    out.q[p] = static_cast<int32_t>(std::clamp(std::nearbyint(v[p] * inv), -127.0f, 127.0f));
  return out;
}

inline double bf16_value(float f) { return qkv::bfloat16_to_float(qkv::float_to_bfloat16(f)); }

struct Problem {
  int64_t m, n, k, ldx, ldy;
  std::vector<float> x, w, bias;  // bias empty: none
};

inline Problem make_problem(int64_t m, int64_t n, int64_t k, int64_t x_pad, int64_t y_pad,
                            bool bias, std::mt19937& gen) {
  Problem p{m, n, k, k + x_pad, n + y_pad, {}, {}, {}};
  p.x = random_rows(m, k, p.ldx, gen);
  p.w = random_rows(n, k, k, gen);
  if (bias) p.bias = random_rows(1, n, n, gen);
  return p;
}

// For y[i, j]: the float64 value of the product of the rounded or quantised
// operands and the bound on float32's error in computing it.
struct Expected {
  double value, bound;
};

// Per-row and per-channel int8 quantisation, once per problem.
struct Int8Operands {
  std::vector<Quantized> x, w;
};
inline Int8Operands quantize(const Problem& p) {
  Int8Operands q;
  for (int64_t i = 0; i < p.m; ++i) q.x.push_back(quantize_row_asymmetric(&p.x[i * p.ldx], p.k));
  for (int64_t j = 0; j < p.n; ++j) q.w.push_back(quantize_row(&p.w[j * p.k], p.k));
  return q;
}

// bf16: Σ bf16(x)·bf16(w) in float64. A product of two bfloat16 is exact in
// float32, so float32's only errors are the k additions (and the bias):
// |error| ≤ (k + 1) · 2^-24 · (Σ|products| + |bias|) (recursive summation,
// any order), plus 2^-100 for vdpbf16ps flushing denormals.
inline Expected expected_bf16(const Problem& p, int64_t i, int64_t j) {
  double sum = 0.0, abs_sum = 0.0;
  for (int64_t t = 0; t < p.k; ++t) {
    const double prod = bf16_value(p.x[i * p.ldx + t]) * bf16_value(p.w[j * p.k + t]);
    sum += prod;
    abs_sum += std::fabs(prod);
  }
  const double b = p.bias.empty() ? 0.0 : p.bias[j];
  return {sum + b, (p.k + 1) * kU * (abs_sum + std::fabs(b)) * 1.001 + 0x1p-100};
}

// int8: the int32 sum is exact; float32 then rounds the sum, scale_x·scale_w,
// their product and the bias addition: 4 roundings of at most 2^-24 each.
inline Expected expected_int8(const Problem& p, const Int8Operands& q, int64_t i, int64_t j) {
  int64_t acc = 0;
  for (int64_t t = 0; t < p.k; ++t) acc += q.x[i].q[t] * q.w[j].q[t];
  const double scaled = static_cast<double>(acc) * q.x[i].scale * q.w[j].scale;
  const double b = p.bias.empty() ? 0.0 : p.bias[j];
  return {scaled + b, 4 * kU * (std::fabs(scaled) + std::fabs(b)) + 1e-30};
}

// The loose check of int8 against the float32 operands: with x = sx·qx + ex,
// |ex| ≤ sx/2 (sx at the clamped ends) and w = sw·qw + ew, |ew| ≤ sw/2,
// |x·w − sx·qx·sw·qw| ≤ |x|·sw/2 + sx·(|w| + sw/2) for each k.
inline Expected expected_int8_vs_float(const Problem& p, const Int8Operands& q, int64_t i,
                                       int64_t j) {
  double sum = 0.0, bound = 0.0;
  const double sx = q.x[i].scale, sw = q.w[j].scale;
  for (int64_t t = 0; t < p.k; ++t) {
    const double x = p.x[i * p.ldx + t], w = p.w[j * p.k + t];
    sum += x * w;
    bound += std::fabs(x) * sw / 2 + sx * (std::fabs(w) + sw / 2);
  }
  const double b = p.bias.empty() ? 0.0 : p.bias[j];
  return {sum + b, bound * 1.001 + 8 * kU * (std::fabs(sum) + std::fabs(b)) + 1e-30};
}

inline std::string describe(const Problem& p) {
  return "m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
         " ldx=" + std::to_string(p.ldx) + " ldy=" + std::to_string(p.ldy) +
         (p.bias.empty() ? "" : " +bias");
}

// y through low_precision_gemm with the active table; padding stays kSentinel.
inline std::vector<float> run(const Problem& p, const PackedWeights& w) {
  std::vector<float> y(std::max<int64_t>(p.m * p.ldy, 1), kSentinel);
  qkv::kernels::low_precision_gemm(p.x.data(), p.ldx, p.m, w,
                                   p.bias.empty() ? nullptr : p.bias.data(), y.data(), p.ldy);
  return y;
}

// Every y[i, j] within its bound; the padding of y untouched.
inline void check(const Problem& p, const PackedWeights& w, const std::vector<float>& y) {
  const Int8Operands q = w.precision() == Precision::kInt8 ? quantize(p) : Int8Operands{};
  int failures = 0;
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n && failures < 5; ++j) {
      const Expected e =
          w.precision() == Precision::kInt8 ? expected_int8(p, q, i, j) : expected_bf16(p, i, j);
      const double got = y[i * p.ldy + j];
      if (!(std::fabs(got - e.value) <= e.bound)) {
        ++failures;
        ADD_FAILURE() << describe(p) << ": y[" << i << ", " << j << "] = " << got << ", expected "
                      << e.value << " ± " << e.bound;
      }
      if (w.precision() == Precision::kInt8) {
        const Expected loose = expected_int8_vs_float(p, q, i, j);
        if (!(std::fabs(got - loose.value) <= loose.bound)) {
          ++failures;
          ADD_FAILURE() << describe(p) << ": y[" << i << ", " << j << "] = " << got
                        << ", float32 product " << loose.value << " ± " << loose.bound;
        }
      }
    }
    for (int64_t j = p.n; j < p.ldy && i * p.ldy + j < static_cast<int64_t>(y.size()); ++j)
      if (y[i * p.ldy + j] != kSentinel && failures++ < 5)
        ADD_FAILURE() << describe(p) << ": wrote the padding y[" << i << ", " << j << "]";
  }
}

}  // namespace qkv_test::lowp
