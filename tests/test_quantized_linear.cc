// The GGUF block-quantised linear layers (qkv/quantized_linear.h,
// kernels/quant_gemm.h): the reference dequantisation on hand-built blocks
// (python/tests/test_gguf_block_types.py holds it and every table's to the
// gguf Python package, llama.cpp's own reader, bit for bit on random blocks of
// every type); every kernel table this CPU has against a float64 product of the
// dequantised weights, on random blocks of every format, both routes (few
// rows, sgemm), strided x and y; the int8 decoding path against the rounded
// and the unrounded x; NaN and Inf in x; the embedding gather; and
// the errors of malformed weights and arguments.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kernel_tables.h"
#include "kernels/quant_gemm.h"
#include "qkv/error.h"
#include "qkv/linear.h"
#include "qkv/quantized_linear.h"
#include "qkv/runtime.h"
#include "quant_reference.h"

namespace {

using qkv::QuantFormat;
using qkv::QuantizedWeight;
using qkv::Tensor;
using qkv::kernels::QuantKernels;
using namespace qkv_test::quant;

// ---- The reference on hand-built blocks -------------------------------------------

TEST(QuantBlocks, Q8_0HandBuilt) {
  std::vector<uint8_t> b(34);
  put_half(b.data(), 0.5f);
  for (int i = 0; i < 32; ++i) b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(i * 8 - 128));
  const std::vector<float> w = dequantize_ref(QuantFormat::kQ8_0, b, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(w[i], 0.5f * (i * 8 - 128)) << i;
}

TEST(QuantBlocks, Q4_0HandBuilt) {
  std::vector<uint8_t> b(18);
  put_half(b.data(), 2.0f);
  for (int i = 0; i < 16; ++i) b[2 + i] = static_cast<uint8_t>(i | ((15 - i) << 4));
  const std::vector<float> w = dequantize_ref(QuantFormat::kQ4_0, b, 32);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(w[i], 2.0f * (i - 8)) << i;
    EXPECT_EQ(w[i + 16], 2.0f * (15 - i - 8)) << i + 16;
  }
}

TEST(QuantBlocks, Q4_1HandBuilt) {
  std::vector<uint8_t> b(20);
  put_half(b.data(), 0.25f);
  put_half(b.data() + 2, -1.0f);
  for (int i = 0; i < 16; ++i) b[4 + i] = static_cast<uint8_t>(i | (((i + 1) % 16) << 4));
  const std::vector<float> w = dequantize_ref(QuantFormat::kQ4_1, b, 32);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(w[i], 0.25f * i - 1.0f) << i;
    EXPECT_EQ(w[i + 16], 0.25f * ((i + 1) % 16) - 1.0f) << i + 16;
  }
}

// Q4_K's and Q5_K's 12 bytes of 6-bit (scale, min) pairs, packed as ggml
// does: sub-blocks 4..7 keep their top 2 bits in the top bits of bytes 0..7.
void pack_k_scales(const int sc[8], const int mn[8], uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
}

// The (scale, min) pairs of the 8 sub-blocks of the hand-built Q4_K and Q5_K blocks.
constexpr int kSubScales[8] = {1, 2, 3, 4, 37, 50, 63, 17},
              kSubMins[8] = {0, 5, 9, 63, 20, 33, 48, 1};

// A Q4_K or Q5_K block of `bytes` bytes: d, dmin and the sub-blocks' pairs; the rest 0.
std::vector<uint8_t> k_block(size_t bytes, float d, float dmin) {
  std::vector<uint8_t> b(bytes);
  put_half(b.data(), d);
  put_half(b.data() + 2, dmin);
  pack_k_scales(kSubScales, kSubMins, b.data() + 4);
  return b;
}

// Every weight of a dequantised k_block(…, d, dmin) of format f whose quant e of
// sub-block s is q(s, e): d·scale_s·q − dmin·min_s.
template <class Quant>
void expect_k_weights(QuantFormat f, const std::vector<uint8_t>& b, float d, float dmin, Quant q) {
  const std::vector<float> w = dequantize_ref(f, b, 256);
  for (int sub = 0; sub < 8; ++sub)
    for (int e = 0; e < 32; ++e)
      ASSERT_EQ(w[32 * sub + e], d * kSubScales[sub] * q(sub, e) - dmin * kSubMins[sub])
          << qkv::quant_format_name(f) << " " << sub << " " << e;
}

// Q4_K: nibble e of sub-block s = (7e + s) mod 16.
TEST(QuantBlocks, Q4_KHandBuilt) {
  std::vector<uint8_t> b = k_block(144, 1.0f, 0.5f);
  const auto q = [](int sub, int e) { return (7 * e + sub) % 16; };
  for (int pair = 0; pair < 4; ++pair)
    for (int i = 0; i < 32; ++i)
      b[16 + 32 * pair + i] = static_cast<uint8_t>(q(2 * pair, i) | (q(2 * pair + 1, i) << 4));
  expect_k_weights(QuantFormat::kQ4_K, b, 1.0f, 0.5f, q);
}

// Q6_K: weight i of half h: quarter t = i / 32, l = i % 32; its 4 low bits
// in ql[64h + l + 32(t & 1)] (high nibble when t ≥ 2), 2 high bits at bit 2t
// of qh[32h + l]; scale scales[8h + i / 16].
TEST(QuantBlocks, Q6_KHandBuilt) {
  std::vector<uint8_t> b(210);
  put_half(b.data() + 208, 0.125f);
  int8_t scales[16];
  for (int i = 0; i < 16; ++i) scales[i] = static_cast<int8_t>(i * 17 - 128);
  std::memcpy(b.data() + 192, scales, 16);
  const auto q = [](int idx) { return (idx * 37 + 5) % 64; };
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 128; ++i) {
      const int t = i / 32, l = i % 32, v = q(128 * h + i);
      uint8_t& lo = b[64 * h + l + 32 * (t & 1)];
      lo = static_cast<uint8_t>(t < 2 ? (lo & 0xf0) | (v & 15) : (lo & 0x0f) | ((v & 15) << 4));
      b[128 + 32 * h + l] |= static_cast<uint8_t>((v >> 4) << (2 * t));
    }
  const std::vector<float> w = dequantize_ref(QuantFormat::kQ6_K, b, 256);
  for (int i = 0; i < 256; ++i)
    ASSERT_EQ(w[i], static_cast<float>(0.125 * scales[i / 16] * (q(i) - 32))) << i;
}

// Q5_0 and Q5_1: weight i's low 4 bits as Q4_*'s, its bit 4 at bit i of the
// little-endian u32 qh; q = (5i + 3) mod 32.
TEST(QuantBlocks, Q5_0AndQ5_1HandBuilt) {
  const auto q = [](int i) { return (5 * i + 3) % 32; };
  for (bool has_min : {false, true}) {
    std::vector<uint8_t> b(has_min ? 24 : 22);
    put_half(b.data(), -0.5f);
    if (has_min) put_half(b.data() + 2, 3.0f);
    uint8_t* qh = b.data() + (has_min ? 4 : 2);
    uint8_t* qs = qh + 4;
    for (int i = 0; i < 32; ++i) {
      qs[i % 16] |= static_cast<uint8_t>((q(i) & 15) << (i < 16 ? 0 : 4));
      qh[i / 8] |= static_cast<uint8_t>((q(i) >> 4) << (i % 8));
    }
    const QuantFormat f = has_min ? QuantFormat::kQ5_1 : QuantFormat::kQ5_0;
    const std::vector<float> w = dequantize_ref(f, b, 32);
    for (int i = 0; i < 32; ++i) {
      const float want = has_min ? -0.5f * q(i) + 3.0f : -0.5f * (q(i) - 16);
      ASSERT_EQ(w[i], want) << qkv::quant_format_name(f) << " " << i;
      // Q5_0's q = 16 with d < 0 is −0, as ggml's (q − 16) · d
      if (!has_min && q(i) == 16) {
        EXPECT_TRUE(std::signbit(w[i])) << i;
      }
    }
  }
}

// Q5_K: Q4_K's scales and nibbles (after 32 bytes of qh) with bit 4 of weight
// e of sub-block s at bit s of qh[e]; q(s, e) = (11e + 3s) mod 32.
TEST(QuantBlocks, Q5_KHandBuilt) {
  std::vector<uint8_t> b = k_block(176, 0.25f, 2.0f);
  const auto q = [](int sub, int e) { return (11 * e + 3 * sub) % 32; };
  for (int sub = 0; sub < 8; ++sub)
    for (int e = 0; e < 32; ++e) {
      b[48 + 32 * (sub / 2) + e] |= static_cast<uint8_t>((q(sub, e) & 15) << (4 * (sub % 2)));
      b[16 + e] |= static_cast<uint8_t>((q(sub, e) >> 4) << sub);
    }
  expect_k_weights(QuantFormat::kQ5_K, b, 0.25f, 2.0f, q);
}

// IQ4_NL: nibbles as Q4_0's, each indexing ggml's 16 levels.
TEST(QuantBlocks, IQ4_NLHandBuilt) {
  const int levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  std::vector<uint8_t> b(18);
  put_half(b.data(), -0.125f);
  for (int i = 0; i < 16; ++i) b[2 + i] = static_cast<uint8_t>(i | (((3 * i + 1) % 16) << 4));
  const std::vector<float> w = dequantize_ref(QuantFormat::kIQ4_NL, b, 32);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(w[i], -0.125f * levels[i]) << i;
    EXPECT_EQ(w[i + 16], -0.125f * levels[(3 * i + 1) % 16]) << i + 16;
  }
}

TEST(QuantBlocks, FormatsOfGgmlTypes) {
  EXPECT_EQ(qkv::quant_format_from_ggml_type(3), QuantFormat::kQ4_1);
  EXPECT_EQ(qkv::quant_format_from_ggml_type(8), QuantFormat::kQ8_0);
  EXPECT_STREQ(qkv::quant_format_name(QuantFormat::kQ6_K), "Q6_K");
  EXPECT_EQ(qkv::quant_format_from_ggml_type(6), QuantFormat::kQ5_0);
  EXPECT_EQ(qkv::quant_format_from_ggml_type(13), QuantFormat::kQ5_K);
  EXPECT_EQ(qkv::quant_format_from_ggml_type(20), QuantFormat::kIQ4_NL);
  EXPECT_STREQ(qkv::quant_format_name(QuantFormat::kIQ4_NL), "IQ4_NL");
  EXPECT_EQ(qkv::quant_block_bytes(QuantFormat::kQ5_1), 24);
  EXPECT_EQ(qkv::quant_block_bytes(QuantFormat::kQ5_K), 176);
  for (uint32_t bad : {0u, 1u, 10u, 11u, 21u, 23u, 30u, 1000u}) {
    try {
      qkv::quant_format_from_ggml_type(bad);
      ADD_FAILURE() << bad;
    } catch (const qkv::Error& e) {
      EXPECT_NE(std::string(e.what()).find("ggml type " + std::to_string(bad)), std::string::npos)
          << e.what();
    }
  }
}

// ---- Random weights -----------------------------------------------------------------

std::string table_name(const ::testing::TestParamInfo<const QuantKernels*>& info) {
  return info.param->name;
}

using QuantKernelTable =
    qkv_test::ActiveFamilyTableTest<QuantKernels, qkv::kernels::override_quant_kernels>;

TEST_P(QuantKernelTable, IsTheActiveTable) {
  EXPECT_EQ(&qkv::kernels::active_quant_kernels(), GetParam());
}

// dequantize() runs the table's decoder: bit-equal to the reference.
TEST_P(QuantKernelTable, DequantizeIsBitEqualToReference) {
  std::mt19937 gen(1);
  for (QuantFormat f : kFormats) {
    const int64_t n = 19, k = 2 * qkv::quant_block_elements(f);
    const auto [bytes, w] = random_quantized(f, n, k, gen);
    const Tensor t = w.dequantize();
    const std::vector<float> ref = dequantize_ref(f, bytes, n * k);
    ASSERT_EQ(std::memcmp(t.data<float>(), ref.data(), ref.size() * 4), 0)
        << qkv::quant_format_name(f);
  }
}

// y = x · Wᵀ + b against float64 on the dequantised weights (check_quant_gemm).
TEST_P(QuantKernelTable, AgainstFloat64OfDequantized) {
  std::mt19937 gen(2);
  for (int threads : {1, 2}) {
    qkv::set_num_threads(threads);
    for (QuantFormat f : kFormats) {
      const int64_t block = qkv::quant_block_elements(f);
      for (int64_t k : {block, 3 * block}) {
        for (int64_t m : {1, 2, 7, 64, 513}) {
          // the integer paths round x: IntegerGemvAgainstRoundedX
          if (qkv::kernels::rounds_x_at(*GetParam(), f, m)) continue;
          const int64_t n = m == 513 ? 37 : 53;  // not multiples of 16
          check_quant_gemm(f, m, n, k, m % 2 == 1, gen, "threads=" + std::to_string(threads));
        }
      }
    }
  }
}

// A NaN in x[i] makes y[i, :] NaN; an Inf makes it non-finite (Inf, or NaN
// where it meets a zero weight); the other rows stay finite. Both routes.
TEST_P(QuantKernelTable, NanAndInfPropagate) {
  std::mt19937 gen(3);
  for (QuantFormat f : kFormats) {
    const int64_t n = 21, k = 2 * qkv::quant_block_elements(f);
    const auto [bytes, w] = random_quantized(f, n, k, gen);
    for (int64_t m : {1, 3, 40}) {
      std::vector<float> x = random_floats(m * k, gen);
      const int64_t bad_nan = m - 1, bad_inf = m > 1 ? 0 : -1;
      x[bad_nan * k + k / 2] = std::numeric_limits<float>::quiet_NaN();
      if (bad_inf >= 0) x[bad_inf * k + 3] = -std::numeric_limits<float>::infinity();
      const Tensor y = qkv::linear(Tensor::from_vector({m, k}, x), w);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const float v = y.data<float>()[i * n + j];
          if (i == bad_nan)
            ASSERT_TRUE(std::isnan(v)) << qkv::quant_format_name(f) << " m=" << m << " " << j;
          else if (i == bad_inf)
            ASSERT_FALSE(std::isfinite(v)) << qkv::quant_format_name(f) << " m=" << m << " " << j;
          else
            ASSERT_TRUE(std::isfinite(v)) << qkv::quant_format_name(f) << " m=" << m << " " << j;
        }
    }
  }
}

// The embedding gather returns rows of dequantize().
TEST_P(QuantKernelTable, EmbeddingRowsAreDequantizedRows) {
  std::mt19937 gen(4);
  for (QuantFormat f : kFormats) {
    const int64_t n = 40, k = qkv::quant_block_elements(f);
    const auto [bytes, w] = random_quantized(f, n, k, gen);
    const std::vector<int64_t> ids = {39, 0, 7, 7, 21, 2};
    const Tensor e = qkv::embedding(ids, {2, 3}, w);
    ASSERT_EQ(e.shape(), (qkv::Shape{2, 3, k}));
    const std::vector<float> ref = dequantize_ref(f, bytes, n * k);
    for (size_t i = 0; i < ids.size(); ++i)
      ASSERT_EQ(std::memcmp(e.data<float>() + i * k, ref.data() + ids[i] * k, k * 4), 0) << i;
    Tensor out = Tensor::empty({6, k});
    qkv::embedding_into(out, ids, w);
    ASSERT_EQ(std::memcmp(out.data<float>(), e.data<float>(), 6 * k * 4), 0);
  }
}

// ---- The 16- and 8-bit decoding paths (tables with x_bits < 32) -----------------------

// |d·q| + |m| of weight p of row j for the formats with a min (Q4_1, Q5_1,
// Q4_K, Q5_K; |w| for the others), from its block's bytes: the magnitudes the
// integer kernels sum before cancellation.
double term_magnitude(QuantFormat f, const std::vector<uint8_t>& bytes,
                      const std::vector<float>& wf, int64_t k, int64_t j, int64_t p) {
  using qkv::kernels::half_to_float, qkv::kernels::load_u16;
  const int64_t elems = qkv::quant_block_elements(f);
  const uint8_t* b = bytes.data() + (j * k + p) / elems * qkv::quant_block_bytes(f);
  const int e = static_cast<int>(p % 32);
  const double d = half_to_float(load_u16(b)), m = half_to_float(load_u16(b + 2));
  const auto nibble = [&](const uint8_t* qs, bool high) {
    return high ? qs[e % 16] >> 4 : qs[e % 16] & 15;
  };
  if (f == QuantFormat::kQ4_1) return std::fabs(d * nibble(b + 4, e >= 16)) + std::fabs(m);
  if (f == QuantFormat::kQ5_1) {
    uint32_t qh;
    std::memcpy(&qh, b + 4, 4);
    const int q = nibble(b + 8, e >= 16) | static_cast<int>((qh >> e) & 1) << 4;
    return std::fabs(d * q) + std::fabs(m);
  }
  if (f == QuantFormat::kQ4_K || f == QuantFormat::kQ5_K) {
    const int s = static_cast<int>(p % 256 / 32);
    const bool five = f == QuantFormat::kQ5_K;
    const uint8_t byte = b[(five ? 48 : 16) + 32 * (s / 2) + e];
    int q = s % 2 == 0 ? byte & 15 : byte >> 4;
    if (five) q |= ((b[16 + e] >> s) & 1) << 4;
    int sc, mn;
    qkv::kernels::q4k_scale_min(b + 4, s, &sc, &mn);
    return std::fabs(d * sc * q) + std::fabs(m * mn);
  }
  return std::fabs(wf[j * k + p]);
}

// x̂ = dx·q of one row by the reference rounding of `bits` (16 or 8), and the
// bound on |x − x̂| per element: dx·(1/2 + 4·qmax·u) (q = round(x·(qmax /
// amax)) with x·(qmax / amax) and dx rounded in float32: a few qmax·u of a
// step more than half a step), or |x| itself in a block rounded to zero
// (dx = 0: max |x| below the reference's threshold).
void round_x_reference(int bits, const float* x, int64_t k, std::vector<double>& xh,
                       std::vector<double>& err) {
  const int64_t nb = k / 32;
  std::vector<float> dx(nb);
  std::vector<double> q(k);
  if (bits == 16) {
    std::vector<int16_t> q16(k);
    qkv::kernels::quantize_x_q16_reference(x, k, q16.data(), dx.data());
    std::copy(q16.begin(), q16.end(), q.begin());
  } else {
    std::vector<int8_t> q8(k);
    qkv::kernels::quantize_x_q8_reference(x, k, q8.data(), dx.data());
    std::copy(q8.begin(), q8.end(), q.begin());
  }
  xh.resize(k);
  err.resize(k);
  for (int64_t p = 0; p < k; ++p) {
    xh[p] = static_cast<double>(dx[p / 32]) * q[p];
    const double qmax = bits == 16 ? 32767 : 127;
    err[p] = dx[p / 32] > 0 ? dx[p / 32] * (0.5 + 4 * qmax * kU) : std::fabs(x[p]);
  }
}

// The integer routes of a table (few rows: its rounded_formats; prompts: its
// prompt route's formats): (1) against
// float64 on the dequantised weights and x̂ = dx·q (the reference rounding of
// the table's x_bits, which the kernel must reproduce): the int32 sums are
// exact, so only the float32 scaling and summation of the nb = k / 32 block
// terms (each |d·dx·Σq_w·q_x| + |m·dx·Σq_x| ≤ its part of A) and the
// dequantised weight's own rounding remain, ≤ (nb + 24)·u·A; (2) against the
// unrounded product, adding Σ_p |w_p|·|x_p − x̂_p| (≤ dx/2 per element), the
// bound of quant_gemm.h.
TEST_P(QuantKernelTable, IntegerGemvAgainstRoundedX) {
  const int bits = GetParam()->x_bits;
  if (bits == 32) GTEST_SKIP() << GetParam()->name << " keeps x in float32";
  std::mt19937 gen(9);
  for (int threads : {1, 2}) {
    qkv::set_num_threads(threads);
    for (QuantFormat f : kFormats) {
      // every few-rows count; prompts ending in a whole and a partial tile of rows
      std::vector<int64_t> counts;
      for (int64_t m = 1; m <= qkv::kernels::quant_gemv_max_rows(); ++m)
        if (qkv::kernels::rounds_x_at(*GetParam(), f, m)) counts.push_back(m);
      for (int64_t m : {24, 71})
        if (qkv::kernels::rounds_x_at(*GetParam(), f, m)) counts.push_back(m);
      if (counts.empty()) continue;
      // blocks of 32: tail only, 4 + 0, 4 + 3, 16 + 2; of 256: one, three
      const bool small = qkv::quant_block_elements(f) == 32;
      for (int64_t k :
           small ? std::vector<int64_t>{32, 96, 128, 224, 576} : std::vector<int64_t>{256, 768}) {
        for (int64_t m : counts) {
          const int64_t n = 37, ldx = k + 5, ldy = n + 3;
          const auto [bytes, w] = random_quantized(f, n, k, gen);
          const std::vector<float> wf = dequantize_ref(f, bytes, n * k);
          std::vector<float> x = random_floats(m * ldx, gen);
          for (size_t p = 0; p < x.size(); p += 7) x[p] *= 50.0f;  // uneven block maxima
          if (k >= 96)  // a block of row 0 below the 16-bit rounding's threshold (2^-100)
            for (int64_t p = 64; p < 96; ++p) x[p] *= 1e-33f;
          const std::vector<float> bias = random_floats(n, gen);
          const bool with_bias = m % 2 == 1;
          std::vector<float> y(m * ldy, kSentinel);
          qkv::kernels::quant_gemm(x.data(), ldx, m, w.matrix(), with_bias ? bias.data() : nullptr,
                                   y.data(), ldy);
          const int64_t nb = k / 32;
          int failures = 0;
          for (int64_t i = 0; i < m && failures < 5; ++i) {
            std::vector<double> xh, err;
            round_x_reference(bits, x.data() + i * ldx, k, xh, err);
            for (int64_t j = 0; j < n; ++j) {
              const double b0 = with_bias ? bias[j] : 0.0;
              double rounded = b0, exact = b0, mag = std::fabs(b0), abs_exact = std::fabs(b0),
                     rounding = 0;
              for (int64_t p = 0; p < k; ++p) {
                const double wv = wf[j * k + p], xv = x[i * ldx + p];
                ASSERT_LE(std::fabs(xv - xh[p]), err[p]) << p;
                rounded += wv * xh[p];
                exact += wv * xv;
                mag += term_magnitude(f, bytes, wf, k, j, p) * std::fabs(xh[p]);
                abs_exact += std::fabs(wv * xv);
                rounding += std::fabs(wv) * err[p];
              }
              const double tight = (nb + 24) * kU * mag * 1.01 + 1e-30;
              const double loose = tight + rounding + (k + 1) * kU * abs_exact * 1.01;
              const double got = y[i * ldy + j];
              if (!(std::fabs(got - rounded) <= tight) && failures++ < 5)
                ADD_FAILURE() << qkv::quant_format_name(f) << " m=" << m << " k=" << k
                              << " threads=" << threads << ": y[" << i << ", " << j << "] = " << got
                              << ", expected " << rounded << " ± " << tight << " (rounded x)";
              if (!(std::fabs(got - exact) <= loose) && failures++ < 5)
                ADD_FAILURE() << qkv::quant_format_name(f) << " m=" << m << " k=" << k << ": y["
                              << i << ", " << j << "] = " << got << ", expected " << exact << " ± "
                              << loose << " (unrounded x)";
            }
            for (int64_t j = n; j < ldy; ++j)
              if (y[i * ldy + j] != kSentinel && failures++ < 5)
                ADD_FAILURE() << "wrote the padding y[" << i << ", " << j << "]";
          }
        }
      }
    }
  }
}

// The 16-bit rounding keeps decoding within a few 1e-5 of float x: on
// SmolLM2-like rows (k = 576) the relative error of y is far below the
// 8-bit rounding's, and below 1e-4 of Σ|w·x|.
TEST_P(QuantKernelTable, Int16GemvIsCloseToFloatX) {
  if (GetParam()->x_bits != 16) GTEST_SKIP() << GetParam()->name << " does not round x to 16 bits";
  std::mt19937 gen(10);
  for (QuantFormat f : kFormats) {
    if (!qkv::kernels::rounds_x(*GetParam(), f)) continue;
    const int64_t n = 64, k = qkv::quant_block_elements(f) == 32 ? 576 : 768;
    const auto [bytes, w] = random_quantized(f, n, k, gen);
    const std::vector<float> wf = dequantize_ref(f, bytes, n * k);
    const std::vector<float> x = random_floats(k, gen);
    std::vector<float> y(n);
    qkv::kernels::quant_gemm(x.data(), k, 1, w.matrix(), nullptr, y.data(), n);
    double worst = 0;
    for (int64_t j = 0; j < n; ++j) {
      double exact = 0, abs_sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        exact += static_cast<double>(wf[j * k + p]) * x[p];
        abs_sum += std::fabs(static_cast<double>(wf[j * k + p]) * x[p]);
      }
      worst = std::max(worst, std::fabs(y[j] - exact) / abs_sum);
    }
    EXPECT_LT(worst, 1e-4) << qkv::quant_format_name(f);
  }
}

// Batched decoding rests on this: each row of a few-rows call gets, bit for
// bit, the y it gets alone, whatever the number of rows beside it.
TEST_P(QuantKernelTable, EachRowEqualsTheRowAlone) {
  std::mt19937 gen(11);
  qkv::set_num_threads(1);
  for (QuantFormat f : kFormats) {
    const int64_t n = 21, k = 3 * qkv::quant_block_elements(f), m = 11;
    const auto [bytes, w] = random_quantized(f, n, k, gen);
    const std::vector<float> x = random_floats(m * k, gen);
    std::vector<float> together(m * n), alone(n);
    qkv::kernels::quant_gemm(x.data(), k, m, w.matrix(), nullptr, together.data(), n);
    for (int64_t i = 0; i < m; ++i) {
      qkv::kernels::quant_gemm(x.data() + i * k, k, 1, w.matrix(), nullptr, alone.data(), n);
      EXPECT_EQ(std::memcmp(alone.data(), together.data() + i * n, n * 4), 0)
          << qkv::quant_format_name(f) << " row " << i;
    }
  }
}

// The q, k, v projections of a decoding step (and of a prompt, on a prompt
// route) share one fork/join (linear_into_each): each output equals its
// linear_into alone, bit for bit, on one thread and on two (the channel
// groups then split across weights).
TEST_P(QuantKernelTable, EachProductEqualsItsLinearIntoAlone) {
  std::mt19937 gen(12);
  for (QuantFormat f : kFormats)
    for (int64_t m : {8, 40}) {
      // enough multiply-adds for two threads; not all whole groups of 16 channels
      const int64_t k = 8 * qkv::quant_block_elements(f);
      const int64_t widths[] = {40, 16, 9};
      std::vector<std::vector<uint8_t>> bytes;
      std::vector<QuantizedWeight> w;
      std::vector<Tensor> bias, together, alone;
      for (int64_t n : widths) {
        bytes.push_back(random_weight(f, n, k, gen));
        w.emplace_back(f, n, k, std::as_bytes(std::span(bytes.back())));
        bias.push_back(w.size() == 2 ? Tensor() : Tensor::from_vector({n}, random_floats(n, gen)));
        together.push_back(Tensor::zeros({m, n}));
        alone.push_back(Tensor::zeros({m, n}));
      }
      const Tensor x = Tensor::from_vector({m, k}, random_floats(m * k, gen));
      for (int threads : {1, 2}) {
        qkv::set_num_threads(threads);
        std::vector<qkv::QuantizedLinearInto> products;
        for (size_t i = 0; i < w.size(); ++i) {
          together[i] = Tensor::full(together[i].shape(), std::nanf(""));  // no stale result
          products.push_back({&together[i], &w[i], &bias[i]});
          qkv::linear_into(alone[i], x, w[i], bias[i]);
        }
        qkv::linear_into_each(x, products);
        for (size_t i = 0; i < w.size(); ++i)
          EXPECT_EQ(std::memcmp(together[i].data<float>(), alone[i].data<float>(),
                                together[i].numel() * 4),
                    0)
              << qkv::quant_format_name(f) << " m=" << m << " product " << i << ", " << threads
              << " threads";
      }
    }
  qkv::set_num_threads(1);
}

// The reference roundings: dx = max|x| / 127 (8 bits) or / 32767 (16 bits)
// per block of 32, q = round(x / dx), ties to even; an all-zero (or tiny)
// block gives dx = 0.
TEST(QuantizeX, ReferenceRounding) {
  std::vector<float> x(64, 0.0f);
  for (int i = 0; i < 32; ++i) x[i] = (i - 16) * 0.25f;  // max |x| = 4 → dx = 4 / 127
  std::vector<int8_t> q(64);
  float dx[2];
  qkv::kernels::quantize_x_q8_reference(x.data(), 64, q.data(), dx);
  EXPECT_EQ(dx[0], 4.0f / 127.0f);
  EXPECT_EQ(dx[1], 0.0f);
  EXPECT_EQ(q[0], -127);
  EXPECT_EQ(q[16], 0);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(q[i], static_cast<int>(std::nearbyint((i - 16) * 0.25f * (127.0f / 4.0f)))) << i;
    EXPECT_EQ(q[32 + i], 0) << i;
  }
  for (int i = 32; i < 64; ++i) x[i] = 0x1p-102f * (i % 3);  // below the 16-bit threshold
  std::vector<int16_t> q16(64);
  qkv::kernels::quantize_x_q16_reference(x.data(), 64, q16.data(), dx);
  EXPECT_EQ(dx[0], 4.0f / 32767.0f);
  EXPECT_EQ(dx[1], 0.0f);
  EXPECT_EQ(q16[0], -32767);
  EXPECT_EQ(q16[31], 30719);  // 3.75 · 32767 / 4 = 30719.06
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(q16[i], static_cast<int>(std::nearbyint((i - 16) * 0.25f * (32767.0f / 4.0f)))) << i;
    EXPECT_EQ(q16[32 + i], 0) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryIsa, QuantKernelTable,
                         ::testing::ValuesIn(qkv::kernels::supported_quant_kernels()), table_name);

// ---- The public API -------------------------------------------------------------------

// linear / linear_into against linear() on the dequantised weight (both
// float32; same bound as above, doubled for the two computations).
TEST(QuantizedLinear, MatchesFloatLinearOnDequantized) {
  std::mt19937 gen(5);
  const int64_t n = 48, k = 64;
  const std::vector<uint8_t> bytes = random_weight(QuantFormat::kQ4_1, n, k, gen);
  const QuantizedWeight w(QuantFormat::kQ4_1, n, k, std::as_bytes(std::span(bytes)));
  const Tensor x = Tensor::from_vector({2, 5, k}, random_floats(10 * k, gen));
  const Tensor b = Tensor::from_vector({n}, random_floats(n, gen));
  const Tensor y = qkv::linear(x, w, b);
  const Tensor ref = qkv::linear(x, w.dequantize(), b);
  ASSERT_EQ(y.shape(), (qkv::Shape{2, 5, n}));
  for (int64_t i = 0; i < y.numel(); ++i)
    EXPECT_NEAR(y.data<float>()[i], ref.data<float>()[i], 2 * (k + 1) * kU * 64) << i;
  // into a column block of a wider output
  Tensor wide = Tensor::zeros({10, 2 * n});
  Tensor block = wide.slice(1, n, 2 * n);
  qkv::linear_into(block, x.reshape({10, k}), w, b);
  for (int64_t i = 0; i < 10; ++i)
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_EQ(wide.at({i, n + j}), y.data<float>()[i * n + j]);
      EXPECT_EQ(wide.at({i, j}), 0.0);
    }
}

// The in-place constructor reads the caller's memory, kept alive by `owner`.
TEST(QuantizedLinear, ReferencesExternalMemory) {
  std::mt19937 gen(6);
  const int64_t n = 16, k = 256;
  auto bytes = std::make_shared<std::vector<uint8_t>>(random_weight(QuantFormat::kQ6_K, n, k, gen));
  const uint8_t* data = bytes->data();
  const std::vector<float> ref = dequantize_ref(QuantFormat::kQ6_K, *bytes, n * k);
  QuantizedWeight w(QuantFormat::kQ6_K, n, k, data, static_cast<int64_t>(bytes->size()), bytes);
  bytes.reset();  // w keeps it
  EXPECT_EQ(w.matrix().data, data);
  EXPECT_EQ(w.bytes(), n * 210);
  const Tensor t = w.dequantize();
  EXPECT_EQ(std::memcmp(t.data<float>(), ref.data(), ref.size() * 4), 0);
}

// Runs f, which must throw qkv::Error whose message holds every one of `parts`.
template <class F>
void expect_error(F f, std::vector<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning " << parts[0];
  } catch (const qkv::Error& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
  }
}

TEST(QuantizedLinear, MalformedWeightsAreClearErrors) {
  std::mt19937 gen(7);
  std::vector<uint8_t> bytes = random_weight(QuantFormat::kQ4_1, 4, 64, gen);
  const auto make = [&](QuantFormat f, int64_t n, int64_t k, size_t size) {
    return [&, f, n, k, size] {
      QuantizedWeight(f, n, k, std::as_bytes(std::span(bytes.data(), size)));
    };
  };
  expect_error(make(QuantFormat::kQ4_1, 4, 64, bytes.size() - 1),
               {"Q4_1", "[4, 64]", std::to_string(4 * 2 * 20) + " bytes", "got 159"});
  expect_error(make(QuantFormat::kQ4_1, 4, 48, bytes.size()),
               {"multiple of its block of 32", "48"});
  expect_error(make(QuantFormat::kQ4_K, 1, 64, bytes.size()), {"Q4_K", "256", "64"});
  expect_error(make(QuantFormat::kQ4_1, 0, 64, 0), {"out_features and in_features > 0"});
  expect_error(make(static_cast<QuantFormat>(11), 4, 64, bytes.size()), {"ggml type 11"});
  expect_error([&] { QuantizedWeight(QuantFormat::kQ4_1, 4, 64, nullptr, 160, nullptr); },
               {"null"});
  // a NaN scale in block 5 (row 2, column 32), an Inf min in block 0
  std::vector<uint8_t> nan = bytes;
  nan[5 * 20 + 1] = 0x7e;
  expect_error([&] { QuantizedWeight(QuantFormat::kQ4_1, 4, 64, std::as_bytes(std::span(nan))); },
               {"block 5", "row 2", "column 32", "NaN or infinite"});
  std::vector<uint8_t> inf = bytes;
  inf[2] = 0x00, inf[3] = 0x7c;
  expect_error([&] { QuantizedWeight(QuantFormat::kQ4_1, 4, 64, std::as_bytes(std::span(inf))); },
               {"block 0"});
}

// Every fp16 scale of every format is checked: a NaN or an Inf in any of
// them, in block 3, is refused naming that block.
TEST(QuantizedLinear, NonFiniteScalesOfEveryFormatAreRefused) {
  std::mt19937 gen(9);
  for (QuantFormat f : kFormats) {
    const int64_t k = qkv::quant_block_elements(f), bb = qkv::quant_block_bytes(f);
    const std::vector<uint8_t> bytes = random_weight(f, 5, k, gen);
    EXPECT_NO_THROW(QuantizedWeight(f, 5, k, std::as_bytes(std::span(bytes))));
    for (const ScaleField& field : scale_fields(f))
      for (uint16_t bad : {0x7e00, 0xfc00}) {
        std::vector<uint8_t> broken = bytes;
        broken[3 * bb + field.offset] = static_cast<uint8_t>(bad & 0xff);
        broken[3 * bb + field.offset + 1] = static_cast<uint8_t>(bad >> 8);
        SCOPED_TRACE(std::string(qkv::quant_format_name(f)) + " offset " +
                     std::to_string(field.offset));
        expect_error([&] { QuantizedWeight(f, 5, k, std::as_bytes(std::span(broken))); },
                     {qkv::quant_format_name(f), "block 3", "NaN or infinite"});
      }
  }
}

TEST(QuantizedLinear, BadArgumentsAreClearErrors) {
  std::mt19937 gen(8);
  const std::vector<uint8_t> bytes = random_weight(QuantFormat::kQ8_0, 4, 64, gen);
  const QuantizedWeight w(QuantFormat::kQ8_0, 4, 64, std::as_bytes(std::span(bytes)));
  expect_error([&] { qkv::linear(Tensor::zeros({2, 63}), w); }, {"in_features = 64", "[2, 63]"});
  expect_error([&] { qkv::linear(Tensor::zeros({2, 64}, qkv::DType::kFloat64), w); }, {"float32"});
  expect_error([&] { qkv::linear(Tensor::zeros({2, 64}), w, Tensor::zeros({5})); },
               {"bias", "out_features = 4"});
  expect_error([&] { qkv::linear(Tensor::zeros({2, 64}), QuantizedWeight()); }, {"empty"});
  Tensor out = Tensor::zeros({2, 5});
  expect_error([&] { qkv::linear_into(out, Tensor::zeros({2, 64}), w); }, {"out_features = 4"});
  Tensor fits = Tensor::zeros({2, 4});
  expect_error([&] { qkv::linear_into_each(Tensor::zeros({2, 64}), {{{&fits, &w}, {&out, &w}}}); },
               {"linear_into_each", "out_features = 4"});
  const std::vector<uint8_t> other_bytes = random_weight(QuantFormat::kQ8_0, 4, 32, gen);
  const QuantizedWeight other(QuantFormat::kQ8_0, 4, 32, std::as_bytes(std::span(other_bytes)));
  expect_error(
      [&] { qkv::linear_into_each(Tensor::zeros({2, 64}), {{{&fits, &w}, {&fits, &other}}}); },
      {"linear_into_each", "in_features = 32", "[2, 64]"});
  const std::vector<qkv::QuantizedLinearInto> nine(9, {&fits, &w});
  expect_error([&] { qkv::linear_into_each(Tensor::zeros({2, 64}), nine); }, {"at most 8", "9"});
  expect_error([&] { qkv::embedding({0, 4}, {2}, w); }, {"id 4", "[0, 4)", "Q8_0"});
  expect_error([&] { qkv::embedding({-1}, {1}, w); }, {"id -1"});
}

}  // namespace
