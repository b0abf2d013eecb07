// Linear layers in low precision: y[m, n] = x[m, k] · W[n, k]ᵀ + bias[n], with
// float32 x, y and bias, and W converted once (at model load) into the packed
// layout that the micro-kernels read:
//
//   kBFloat16  W and x rounded to bfloat16 (round to nearest even); products
//              summed in float32 (vdpbf16ps where the CPU has AVX512_BF16).
//   kInt8      W: int8 with one symmetric scale per output channel
//              (scale = max|W[j, :]| / 127); x: int8 with one scale per row,
//              computed per call (dynamic); int32 sums (vpdpbusd where the
//              CPU has AVX512_VNNI), then y = sum · scale_x[i] · scale_w[j] + bias.
//
// The packed layout does not depend on the instruction set: weights packed
// once run on every LowPrecisionKernels table this CPU supports (tests switch
// tables at run time, as with KernelTable).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "qkv/precision.h"

namespace qkv::kernels {

// W[n, k] of one linear layer in bfloat16 or int8, packed.
class PackedWeights {
 public:
  PackedWeights() = default;
  // w: row-major [n, k] float32. precision: kBFloat16 or kInt8.
  PackedWeights(const float* w, int64_t n, int64_t k, Precision precision);

  Precision precision() const { return precision_; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  bool empty() const { return n_ == 0 && k_ == 0; }
  // Bytes held (for reports of model size).
  int64_t bytes() const;

  // The layout (read by the kernels in low_precision_gemm.cc and kernels/simd).
  Precision precision_ = Precision::kFloat32;
  int64_t n_ = 0, k_ = 0;
  std::vector<uint16_t> bf16;     // kBFloat16: the packed bfloat16 weights
  std::vector<int8_t> int8;       // kInt8: the packed int8 weights
  std::vector<float> scales;      // kInt8: scale per output channel [n]
  std::vector<int32_t> col_sums;  // kInt8: Σ_k W8[j, k] per output channel [n] (u8 offset)
};

// One instruction set's low-precision kernels.
struct LowPrecisionKernels {
  const char* name;  // e.g. "avx512_bf16", "avx512_vnni", "avx512", "avx2", "portable"
  Precision precision;
  // Rows [row_begin, row_end) and columns [col_begin, col_end) of y (row
  // stride ldy), from x (row stride ldx); bias may be null.
  void (*gemm_block)(const float* x, int64_t ldx, const PackedWeights& w, const float* bias,
                     float* y, int64_t ldy, int64_t row_begin, int64_t row_end, int64_t col_begin,
                     int64_t col_end);
};

// The tables of `precision` this CPU can run, fastest first (tests, benchmarks).
std::vector<const LowPrecisionKernels*> supported_low_precision_kernels(Precision precision);
// The fastest of them, unless override_low_precision_kernels chose another.
const LowPrecisionKernels& active_low_precision_kernels(Precision precision);
// Tests and benchmarks: use `table` for its precision from now on (nullptr:
// back to the default for every precision).
void override_low_precision_kernels(const LowPrecisionKernels* table);

// y[m, n] = x[m, k] · Wᵀ + bias, threaded (OpenMP) over blocks of y.
// x: row stride ldx ≥ k; y: row stride ldy ≥ n; bias: [n] or null.
void low_precision_gemm(const float* x, int64_t ldx, int64_t m, const PackedWeights& w,
                        const float* bias, float* y, int64_t ldy);

}  // namespace qkv::kernels
