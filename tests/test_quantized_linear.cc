// The GGUF block-quantised linear layers (qkv/quantized_linear.h,
// kernels/quant_gemm.h): the reference dequantisation on hand-built blocks and
// on golden values from the gguf Python package (llama.cpp's own reader);
// every kernel table this CPU has against a float64 product of the
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

// Q4_K: nibble e of sub-block s = (7e + s) mod 16.
TEST(QuantBlocks, Q4_KHandBuilt) {
  const int sc[8] = {1, 2, 3, 4, 37, 50, 63, 17}, mn[8] = {0, 5, 9, 63, 20, 33, 48, 1};
  std::vector<uint8_t> b(144);
  put_half(b.data(), 1.0f);
  put_half(b.data() + 2, 0.5f);
  pack_k_scales(sc, mn, b.data() + 4);
  const auto q = [](int sub, int e) { return (7 * e + sub) % 16; };
  for (int pair = 0; pair < 4; ++pair)
    for (int i = 0; i < 32; ++i)
      b[16 + 32 * pair + i] = static_cast<uint8_t>(q(2 * pair, i) | (q(2 * pair + 1, i) << 4));
  const std::vector<float> w = dequantize_ref(QuantFormat::kQ4_K, b, 256);
  for (int sub = 0; sub < 8; ++sub)
    for (int e = 0; e < 32; ++e)
      ASSERT_EQ(w[32 * sub + e], 1.0f * sc[sub] * q(sub, e) - 0.5f * mn[sub]) << sub << " " << e;
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
  const int sc[8] = {1, 2, 3, 4, 37, 50, 63, 17}, mn[8] = {0, 5, 9, 63, 20, 33, 48, 1};
  std::vector<uint8_t> b(176);
  put_half(b.data(), 0.25f);
  put_half(b.data() + 2, 2.0f);
  pack_k_scales(sc, mn, b.data() + 4);
  const auto q = [](int sub, int e) { return (11 * e + 3 * sub) % 32; };
  for (int sub = 0; sub < 8; ++sub)
    for (int e = 0; e < 32; ++e) {
      b[48 + 32 * (sub / 2) + e] |= static_cast<uint8_t>((q(sub, e) & 15) << (4 * (sub % 2)));
      b[16 + e] |= static_cast<uint8_t>((q(sub, e) >> 4) << sub);
    }
  const std::vector<float> w = dequantize_ref(QuantFormat::kQ5_K, b, 256);
  for (int sub = 0; sub < 8; ++sub)
    for (int e = 0; e < 32; ++e)
      ASSERT_EQ(w[32 * sub + e], 0.25f * sc[sub] * q(sub, e) - 2.0f * mn[sub]) << sub << " " << e;
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

// One random block each, dequantised by gguf 0.19's Python reader
// (gguf.quants.dequantize, numpy, llama.cpp's layout): every 7th (3rd) value.
struct Golden {
  QuantFormat format;
  std::vector<uint8_t> bytes;
  std::vector<int> index;
  std::vector<float> value;
};
const std::vector<Golden>& golden() {
  static const std::vector<Golden> g = {
      {qkv::QuantFormat::kQ4_K,
       {0xc0, 0x28, 0x4c, 0xa2, 0xa9, 0x41, 0x06, 0xa0, 0x95, 0x6a, 0x26, 0xaf, 0xbc, 0xcd, 0xaf,
        0xe5, 0x62, 0xf9, 0x0a, 0x94, 0x5f, 0x56, 0x93, 0xc6, 0x42, 0x27, 0x6a, 0xd5, 0xab, 0x2d,
        0xa7, 0x39, 0x45, 0x51, 0x37, 0x0e, 0x99, 0xb2, 0xd7, 0x4c, 0x34, 0x27, 0xfa, 0x48, 0xd7,
        0x32, 0xa1, 0xdf, 0x70, 0xac, 0xa1, 0xe9, 0x26, 0x11, 0x59, 0x01, 0xdd, 0x06, 0xf2, 0x7f,
        0x8f, 0x06, 0x3c, 0xd2, 0x5e, 0x19, 0xa6, 0x21, 0xf9, 0xbd, 0x0c, 0xcc, 0x21, 0x39, 0x7c,
        0x1e, 0xc7, 0x95, 0xca, 0x77, 0x48, 0xdc, 0x03, 0xd1, 0x7a, 0x88, 0x93, 0x4d, 0x85, 0x52,
        0x73, 0x57, 0xa2, 0xe6, 0x46, 0x47, 0xf0, 0x3e, 0x2f, 0xb8, 0x1f, 0x22, 0x3f, 0x41, 0x92,
        0xc5, 0x8e, 0xfd, 0x51, 0x85, 0xf0, 0x71, 0x1e, 0xf7, 0x67, 0x7a, 0x1f, 0x13, 0x2a, 0x81,
        0x8d, 0x88, 0x21, 0x95, 0xa1, 0x00, 0xb2, 0x8d, 0x6b, 0x23, 0x6b, 0x82, 0x48, 0x1b, 0xd9,
        0xfe, 0x63, 0x0d, 0xc3, 0xce, 0x3b, 0xe4, 0xeb, 0xca},
       {0,   7,   14,  21,  28,  35,  42,  49,  56,  63,  70,  77,  84,
        91,  98,  105, 112, 119, 126, 133, 140, 147, 154, 161, 168, 175,
        182, 189, 196, 203, 210, 217, 224, 231, 238, 245, 252},
       {3.301239013671875f,  9.387176513671875f,  10.908660888671875f, 3.301239013671875f,
        10.908660888671875f, 0.85052490234375f,   0.73919677734375f,   0.70208740234375f,
        0.62786865234375f,   0.99896240234375f,   2.47125244140625f,   1.80328369140625f,
        2.47125244140625f,   3.58453369140625f,   12.453033447265625f, 0.578033447265625f,
        6.515533447265625f,  14.828033447265625f, 14.828033447265625f, 13.591339111328125f,
        3.794464111328125f,  13.591339111328125f, 23.388214111328125f, 14.3345947265625f,
        8.9537353515625f,    4.6490478515625f,    3.5728759765625f,    8.9537353515625f,
        8.47259521484375f,   2.90618896484375f,   6.24603271484375f,   7.35931396484375f,
        1.93878173828125f,   11.55010986328125f,  15.66925048828125f,  1.93878173828125f,
        4.68487548828125f}},
      {qkv::QuantFormat::kQ6_K,
       {0xb7, 0x2f, 0x45, 0xb3, 0x52, 0x23, 0x47, 0x9f, 0x6e, 0x79, 0x4d, 0x57, 0x03, 0x7e, 0x2c,
        0xfd, 0xe9, 0xe1, 0x5a, 0x77, 0x89, 0x78, 0x1e, 0x37, 0x21, 0xa5, 0x57, 0xd8, 0xe5, 0xa7,
        0x03, 0x29, 0x6d, 0xcb, 0x81, 0xdb, 0x3f, 0x65, 0xcf, 0x9c, 0x1b, 0xdc, 0x5d, 0x1d, 0x8f,
        0xc8, 0x3f, 0x0b, 0x0b, 0xb4, 0xdb, 0x71, 0xbe, 0x57, 0x22, 0x09, 0x85, 0x1d, 0x3d, 0x24,
        0xf4, 0xc0, 0xcf, 0x83, 0xfe, 0x43, 0x63, 0xf8, 0x2f, 0x47, 0x59, 0x77, 0x89, 0x55, 0xf6,
        0xce, 0xd6, 0x81, 0xcb, 0xea, 0x71, 0x79, 0xce, 0xd2, 0xc8, 0xf8, 0x14, 0xa1, 0x34, 0x72,
        0xff, 0x70, 0xce, 0x36, 0x9d, 0x83, 0x85, 0x45, 0x2a, 0x44, 0xf3, 0x18, 0x33, 0x7f, 0x08,
        0xcd, 0x1e, 0x61, 0x4f, 0x23, 0x5d, 0x3f, 0x83, 0xbc, 0x45, 0xfe, 0xe9, 0xee, 0x04, 0x03,
        0xa7, 0x9b, 0xe1, 0x18, 0x54, 0x44, 0x41, 0x31, 0x7c, 0x93, 0x11, 0xf8, 0x5e, 0x04, 0x29,
        0xb1, 0x9f, 0x7e, 0xc0, 0xe1, 0x56, 0xf6, 0x5a, 0x33, 0x22, 0xe7, 0x91, 0xb8, 0x80, 0xee,
        0x99, 0x5e, 0x3f, 0x0d, 0x30, 0x7d, 0x2f, 0xba, 0xf4, 0x00, 0x69, 0x3a, 0x17, 0x9e, 0x0d,
        0x02, 0x7e, 0xd4, 0xe5, 0x8b, 0xe7, 0xa9, 0xeb, 0xc2, 0x8a, 0x27, 0x1d, 0x43, 0xa7, 0x88,
        0x55, 0x63, 0x81, 0x44, 0xeb, 0x66, 0x03, 0xf7, 0xb2, 0x72, 0x5d, 0xe1, 0x1f, 0xe6, 0xac,
        0x2f, 0x88, 0xa6, 0x81, 0x82, 0x86, 0x97, 0x93, 0xf0, 0xaa, 0xd6, 0xde, 0xd8, 0xf6, 0x19},
       {0,   7,   14,  21,  28,  35,  42,  49,  56,  63,  70,  77,  84,
        91,  98,  105, 112, 119, 126, 133, 140, 147, 154, 161, 168, 175,
        182, 189, 196, 203, 210, 217, 224, 231, 238, 245, 252},
       {-2.255725860595703f,  -0.09022903442382812f, 1.0827484130859375f,   -0.60540771484375f,
        -1.5891952514648438f, -2.6894073486328125f,  4.6453399658203125f,   -1.6415863037109375f,
        2.8727760314941406f,  -3.9671669006347656f,  -1.3970947265625f,     -8.033294677734375f,
        6.28692626953125f,    -7.596702575683594f,   8.871551513671875f,    1.1089439392089844f,
        11.735595703125f,     5.8677978515625f,      -10.268646240234375f,  -2.4856643676757812f,
        -7.8120880126953125f, 9.168434143066406f,    -9.474048614501953f,   -1.5862846374511719f,
        2.538055419921875f,   0.3172569274902344f,   1.303955078125f,       1.303955078125f,
        7.5093841552734375f,  -3.003753662109375f,   -1.466949462890625f,   -0.8557205200195312f,
        0.79168701171875f,    -2.2761001586914062f,  -0.49480438232421875f, 0.23284912109375f,
        -0.582122802734375f}},
      {qkv::QuantFormat::kQ4_1,
       {0x00, 0x2c, 0x00, 0xb7, 0x74, 0xfe, 0xc7, 0x0a, 0x68, 0xb3,
        0xe4, 0xbd, 0xc9, 0x2b, 0x38, 0x79, 0x87, 0x41, 0x6c, 0x17},
       {0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30},
       {-0.1875f, 0.1875f, -0.1875f, 0.25f, 0.0f, 0.0f, 0.3125f, 0.25f, 0.3125f, 0.0f, -0.0625f}},
      {qkv::QuantFormat::kQ4_0,
       {0x67, 0x24, 0x96, 0x3e, 0xc7, 0x66, 0x88, 0x8a, 0xb4, 0xb8, 0x0e, 0xba, 0x7c, 0x5c, 0xfd,
        0x81, 0x12, 0x1b},
       {0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30},
       {-0.034393310546875f, -0.034393310546875f, -0.06878662109375f, 0.034393310546875f,
        0.0859832763671875f, 0.0515899658203125f, 0.06878662109375f, 0.0f, -0.1375732421875f,
        -0.0515899658203125f, -0.1203765869140625f}},
      {qkv::QuantFormat::kQ8_0,
       {0x67, 0x24, 0x10, 0xdf, 0xd5, 0x16, 0x9f, 0xaf, 0x26, 0xcd, 0x7b, 0x5c,
        0x30, 0xc8, 0xab, 0xa4, 0x4d, 0x97, 0x22, 0x99, 0xe8, 0xc7, 0xb4, 0x1b,
        0x9a, 0x1d, 0x2b, 0x0f, 0x18, 0x06, 0x00, 0xa9, 0x74, 0xd6},
       {0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30},
       {0.275146484375f, 0.378326416015625f, 0.653472900390625f, 1.58209228515625f,
        -1.4617156982421875f, -1.8056488037109375f, -0.4127197265625f, 0.4643096923828125f,
        0.7394561767578125f, 0.103179931640625f, 1.99481201171875f}},
      {qkv::QuantFormat::kQ5_0,
       {0xcf, 0x28, 0x3a, 0xfa, 0xdf, 0x31, 0x70, 0x80, 0x2c, 0x94, 0x53,
        0x3b, 0x9b, 0xe2, 0x11, 0x8a, 0xc8, 0xce, 0x9f, 0xc4, 0xd5, 0xa6},
       {0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30},
       {-0.60107421875f, 0.1502685546875f, -0.187835693359375f, 0.37567138671875f,
        0.563507080078125f, 0.22540283203125f, 0.07513427734375f, -0.488372802734375f,
        0.037567138671875f, -0.1502685546875f, -0.112701416015625f}},
      {qkv::QuantFormat::kQ5_1,
       {0x0e, 0x2e, 0x7a, 0xac, 0x39, 0xee, 0x43, 0x66, 0xde, 0xc2, 0x91, 0xca,
        0xc4, 0x86, 0x77, 0xf8, 0xd6, 0xc8, 0xac, 0x26, 0xd8, 0xd6, 0xf3, 0xe5},
       {0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30},
       {2.7681884765625f, 2.3897705078125f, 0.59228515625f, 2.2005615234375f, 0.6868896484375f,
        1.916748046875f, 0.781494140625f, 0.6868896484375f, 1.159912109375f, 0.1192626953125f,
        2.86279296875f}},
      {qkv::QuantFormat::kQ5_K,
       {0x0a, 0x28, 0x51, 0x2d, 0x38, 0x0a, 0xbf, 0xc3, 0x1d, 0x8d, 0x13, 0x7d, 0x3b, 0xd0, 0xc7,
        0xa8, 0xab, 0x21, 0x2b, 0x65, 0x92, 0xbd, 0x44, 0x36, 0x9e, 0xc1, 0xf0, 0xa2, 0xc2, 0xd2,
        0x04, 0x3b, 0xe4, 0x50, 0x4c, 0x47, 0x61, 0x39, 0x68, 0x39, 0x0c, 0x7d, 0xc9, 0xf6, 0x34,
        0xd0, 0x5c, 0x7b, 0x00, 0x6e, 0xa7, 0x2a, 0xcc, 0x54, 0x99, 0x90, 0x26, 0x96, 0x82, 0x58,
        0xce, 0xcb, 0xe0, 0xf9, 0x9f, 0x8b, 0x22, 0x6a, 0xc8, 0x06, 0x40, 0xcb, 0x08, 0xe8, 0xde,
        0x64, 0xde, 0xca, 0x49, 0x1e, 0xa7, 0x9b, 0x5d, 0x2f, 0xfa, 0x56, 0x6f, 0xda, 0xc7, 0xa3,
        0x10, 0xcc, 0x11, 0x2d, 0x03, 0x47, 0x34, 0xfe, 0x57, 0x9d, 0xfe, 0x6b, 0x09, 0x41, 0x3d,
        0x94, 0x1b, 0xa4, 0x0f, 0xae, 0x17, 0x6a, 0xd8, 0xe9, 0xe9, 0xbc, 0x55, 0xa6, 0xd9, 0xc6,
        0xd8, 0xb9, 0x2d, 0x2a, 0x79, 0xb1, 0xf7, 0xcd, 0x19, 0xc3, 0xfc, 0xd7, 0x2e, 0x37, 0xa3,
        0xc5, 0x78, 0xc4, 0xfb, 0x39, 0x12, 0xdf, 0xd5, 0x82, 0x28, 0xcf, 0x01, 0x55, 0xcc, 0x12,
        0x5f, 0x2c, 0xae, 0x7f, 0x31, 0x7a, 0x08, 0x64, 0xf0, 0x61, 0x4c, 0x06, 0x30, 0x4a, 0x43,
        0x43, 0x51, 0x9b, 0x80, 0xc2, 0xa1, 0x69, 0x00, 0x6c, 0x91, 0x5c},
       {0,   7,   14,  21,  28,  35,  42,  49,  56,  63,  70,  77,  84,
        91,  98,  105, 112, 119, 126, 133, 140, 147, 154, 161, 168, 175,
        182, 189, 196, 203, 210, 217, 224, 231, 238, 245, 252},
       {25.86444091796875f, -2.40899658203125f, -2.40899658203125f, 36.46697998046875f,
        22.33026123046875f, -0.44879150390625f, 1.44451904296875f,  1.44451904296875f,
        -1.07989501953125f, 4.28448486328125f,  60.0489501953125f,  24.265380859375f,
        26.25335693359375f, 38.18121337890625f, -3.0792236328125f,  -4.12054443359375f,
        -4.783203125f,      -3.17388916015625f, -3.4578857421875f,  7.38714599609375f,
        2.874755859375f,    2.1805419921875f,   3.5689697265625f,   -3.73809814453125f,
        -3.73809814453125f, -3.73809814453125f, -3.73809814453125f, -3.73809814453125f,
        13.77099609375f,    11.3096923828125f,  18.693603515625f,   21.1549072265625f,
        29.6478271484375f,  1.3743896484375f,   24.3465576171875f,  4.9085693359375f,
        -2.1597900390625f}},
      {qkv::QuantFormat::kIQ4_NL,
       {0xa3, 0x2a, 0x82, 0xec, 0xee, 0xa5, 0x5a, 0x07, 0x73, 0x18, 0x05, 0x91, 0xf0, 0xeb, 0x93,
        0x8e, 0x0d, 0xae},
       {0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30},
       {-4.303497314453125f, -1.814727783203125f, -3.370208740234375f, -5.392333984375f,
        -3.370208740234375f, 4.614593505859375f, 4.614593505859375f, -6.584869384765625f,
        -6.584869384765625f, 4.614593505859375f, -6.584869384765625f}},
  };
  return g;
}

TEST(QuantBlocks, MatchesGgufPython) {
  for (const Golden& g : golden()) {
    const int64_t n = qkv::quant_block_elements(g.format);
    ASSERT_EQ(static_cast<int64_t>(g.bytes.size()), qkv::quant_block_bytes(g.format));
    const std::vector<float> w = dequantize_ref(g.format, g.bytes, n);
    for (size_t i = 0; i < g.index.size(); ++i)
      EXPECT_EQ(w[g.index[i]], g.value[i])
          << qkv::quant_format_name(g.format) << " weight " << g.index[i];
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
    const std::vector<uint8_t> bytes = random_weight(f, n, k, gen);
    const QuantizedWeight w(f, n, k, std::as_bytes(std::span(bytes)));
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
          if (m <= qkv::kernels::quant_gemv_max_rows() && qkv::kernels::rounds_x(*GetParam(), f))
            continue;
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
    const std::vector<uint8_t> bytes = random_weight(f, n, k, gen);
    const QuantizedWeight w(f, n, k, std::as_bytes(std::span(bytes)));
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
    const std::vector<uint8_t> bytes = random_weight(f, n, k, gen);
    const QuantizedWeight w(f, n, k, std::as_bytes(std::span(bytes)));
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

// The few-rows route of an integer table on its rounded_formats: (1) against
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
      if (!qkv::kernels::rounds_x(*GetParam(), f)) continue;
      // blocks of 32: tail only, 4 + 0, 4 + 3, 16 + 2; of 256: one, three
      const bool small = qkv::quant_block_elements(f) == 32;
      for (int64_t k :
           small ? std::vector<int64_t>{32, 96, 128, 224, 576} : std::vector<int64_t>{256, 768}) {
        for (int64_t m = 1; m <= qkv::kernels::quant_gemv_max_rows(); ++m) {
          const int64_t n = 37, ldx = k + 5, ldy = n + 3;
          const std::vector<uint8_t> bytes = random_weight(f, n, k, gen);
          const QuantizedWeight w(f, n, k, std::as_bytes(std::span(bytes)));
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
    const std::vector<uint8_t> bytes = random_weight(f, n, k, gen);
    const QuantizedWeight w(f, n, k, std::as_bytes(std::span(bytes)));
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
    const std::vector<uint8_t> bytes = random_weight(f, n, k, gen);
    const QuantizedWeight w(f, n, k, std::as_bytes(std::span(bytes)));
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

// The q, k, v projections of a decoding step share one fork/join
// (linear_into_each): each output equals its linear_into alone, bit for bit,
// on one thread and on two (the channel groups then split across weights).
TEST_P(QuantKernelTable, EachProductEqualsItsLinearIntoAlone) {
  std::mt19937 gen(12);
  for (QuantFormat f : kFormats) {
    // enough multiply-adds for two threads; not all whole groups of 16 channels
    const int64_t k = 8 * qkv::quant_block_elements(f), m = 8;
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
        EXPECT_EQ(
            std::memcmp(together[i].data<float>(), alone[i].data<float>(), together[i].numel() * 4),
            0)
            << qkv::quant_format_name(f) << " product " << i << ", " << threads << " threads";
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
