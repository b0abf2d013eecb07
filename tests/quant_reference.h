// GGUF block-quantised weights for the tests: random blocks of every format
// and the float64 check of kernels::quant_gemm on them
// (test_quantized_linear.cc, test_weight_types_by_isa.cc).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kernels/quant_gemm.h"
#include "qkv/quantized_linear.h"

namespace qkv_test::quant {

using qkv::QuantFormat;
using qkv::QuantizedWeight;

constexpr double kU = 0x1p-24;  // float32's unit roundoff
constexpr float kSentinel = -12345.0f;
constexpr QuantFormat kFormats[] = {QuantFormat::kQ8_0, QuantFormat::kQ4_0, QuantFormat::kQ4_1,
                                    QuantFormat::kQ5_0, QuantFormat::kQ5_1, QuantFormat::kQ4_K,
                                    QuantFormat::kQ5_K, QuantFormat::kQ6_K, QuantFormat::kIQ4_NL};

inline uint16_t half_bits(float f) {  // exact for the values used here
  const uint32_t b = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (b >> 16) & 0x8000u;
  const int exp = static_cast<int>((b >> 23) & 0xff) - 127 + 15;
  EXPECT_TRUE(exp > 0 && exp < 31 && (b & 0x1fffu) == 0) << f << " is not a normal fp16";
  return static_cast<uint16_t>(sign | (exp << 10) | ((b >> 13) & 0x3ffu));
}
inline void put_half(uint8_t* p, float f) {
  const uint16_t h = half_bits(f);
  p[0] = static_cast<uint8_t>(h & 0xff);
  p[1] = static_cast<uint8_t>(h >> 8);
}

inline std::vector<float> dequantize_ref(QuantFormat f, const std::vector<uint8_t>& bytes,
                                         int64_t n) {
  std::vector<float> out(n);
  qkv::dequantize_row(f, bytes.data(), out.data(), n);
  return out;
}

// A block's fp16 scales: byte offset, and whether it may be negative (d of
// the symmetric formats, Q4_1's and Q5_1's min; K-quants' d and dmin are not).
struct ScaleField {
  int offset;
  bool is_signed;
};
inline std::vector<ScaleField> scale_fields(QuantFormat format) {
  switch (format) {
    case QuantFormat::kQ8_0:
    case QuantFormat::kQ4_0:
    case QuantFormat::kQ5_0:
    case QuantFormat::kIQ4_NL:
      return {{0, true}};
    case QuantFormat::kQ4_1:
    case QuantFormat::kQ5_1:
      return {{0, false}, {2, true}};
    case QuantFormat::kQ4_K:
    case QuantFormat::kQ5_K:
      return {{0, false}, {2, false}};
    case QuantFormat::kQ6_K:
      return {{208, true}};
  }
  return {};
}

// n rows of k weights in `format`: random bytes, then fp16 scales set to
// random normal halves of magnitude 2^-9 .. 2^-4 (mins of either sign).
inline std::vector<uint8_t> random_weight(QuantFormat format, int64_t n, int64_t k,
                                          std::mt19937& gen) {
  const int64_t blocks = n * k / qkv::quant_block_elements(format);
  const int64_t bb = qkv::quant_block_bytes(format);
  std::vector<uint8_t> bytes(blocks * bb);
  std::uniform_int_distribution<int> byte(0, 255), exp(-9, -5), mant(0, 1023), sign(0, 1);
  for (uint8_t& v : bytes) v = static_cast<uint8_t>(byte(gen));
  const std::vector<ScaleField> fields = scale_fields(format);
  for (int64_t i = 0; i < blocks; ++i)
    for (const ScaleField& field : fields) {
      const float f = std::ldexp(1.0f + mant(gen) / 1024.0f, exp(gen));
      put_half(bytes.data() + i * bb + field.offset, field.is_signed && sign(gen) ? -f : f);
    }
  return bytes;
}

// random_weight's bytes and the QuantizedWeight of a copy of them.
struct RandomQuantized {
  std::vector<uint8_t> bytes;
  QuantizedWeight weight;
};
inline RandomQuantized random_quantized(QuantFormat format, int64_t n, int64_t k,
                                        std::mt19937& gen) {
  std::vector<uint8_t> bytes = random_weight(format, n, k, gen);
  QuantizedWeight weight(format, n, k, std::as_bytes(std::span(bytes)));
  return {std::move(bytes), std::move(weight)};
}

inline std::vector<float> random_floats(int64_t count, std::mt19937& gen) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (float& f : v) f = u(gen);
  return v;
}

// y = x · Wᵀ + b through kernels::quant_gemm (the active table) with padded
// x and y rows, against float64 on the dequantised weights. Both routes
// compute each y[i, j] as float32 sums of the k products w·x (each w exact:
// the reference's float), so |error| ≤ (k + 1)·u·(Σ|w·x| + |b|) by the usual
// bound on recursive summation (any order, FMA or not: k roundings of the
// sum, one of each product, one of the bias; ×1.01 for the γ terms).
// Where the active table rounds x (x_bits < 32: kernels::rounds_x_at, on
// either route), each block b of 32 adds its rounding,
// |x − x̂| ≤ 0.51·dx_b with dx_b = max|x_b| / (2^(x_bits−1) − 1), times Σ_b |w|
// (kernels/quant_gemm.h).
inline void check_quant_gemm(QuantFormat f, int64_t m, int64_t n, int64_t k, bool with_bias,
                             std::mt19937& gen, const std::string& context) {
  const int64_t ldx = k + 5, ldy = n + 3;
  const auto [bytes, w] = random_quantized(f, n, k, gen);
  const std::vector<float> wf = dequantize_ref(f, bytes, n * k);
  std::vector<float> x = random_floats(m * ldx, gen);
  const std::vector<float> bias = random_floats(n, gen);
  std::vector<float> y(m * ldy, kSentinel);
  qkv::kernels::quant_gemm(x.data(), ldx, m, w.matrix(), with_bias ? bias.data() : nullptr,
                           y.data(), ldy);
  const auto& table = qkv::kernels::active_quant_kernels();
  const int x_bits = qkv::kernels::rounds_x_at(table, f, m) ? table.x_bits : 32;
  int failures = 0;
  for (int64_t i = 0; i < m && failures < 5; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = with_bias ? bias[j] : 0.0, abs_sum = with_bias ? std::fabs(bias[j]) : 0;
      double x_rounding = 0.0;
      for (int64_t b = 0; b < k; b += 32) {
        double x_max = 0.0, w_sum = 0.0;
        for (int64_t p = b; p < b + 32; ++p) {
          const double prod = static_cast<double>(wf[j * k + p]) * x[i * ldx + p];
          sum += prod;
          abs_sum += std::fabs(prod);
          x_max = std::max(x_max, std::fabs(static_cast<double>(x[i * ldx + p])));
          w_sum += std::fabs(wf[j * k + p]);
        }
        if (x_bits < 32) x_rounding += 0.51 * x_max / ((1 << (x_bits - 1)) - 1) * w_sum;
      }
      const double bound = (k + 1) * kU * abs_sum * 1.01 + x_rounding + 1e-30;
      const double got = y[i * ldy + j];
      if (!(std::fabs(got - sum) <= bound) && failures++ < 5)
        ADD_FAILURE() << qkv::quant_format_name(f) << " m=" << m << " n=" << n << " k=" << k << " "
                      << context << ": y[" << i << ", " << j << "] = " << got << ", expected "
                      << sum << " ± " << bound;
    }
    for (int64_t j = n; j < ldy; ++j)
      if (y[i * ldy + j] != kSentinel && failures++ < 5)
        ADD_FAILURE() << "wrote the padding y[" << i << ", " << j << "]";
  }
}

}  // namespace qkv_test::quant
