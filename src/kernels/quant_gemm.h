// Linear layers on GGUF block-quantised weights kept in their file layout
// (quant_blocks.h): y[m, n] = x[m, k] · W[n, k]ᵀ + bias[n] with float32 x, y
// and bias, where W is row-major blocks (row j: k / block blocks, row_bytes
// apart) read in place, e.g. from a file's mmap.
//
// Two routes, both the float32 product with the dequantised weights (no
// rounding of x: the same numbers as a float32 linear on W.dequantize(),
// summed in another order):
//   few rows (m ≤ quant_gemv_max_rows(), decoding): each block is decoded to
//     float32 in registers once and multiply-added into up to 4 rows at a
//     time; W streams in once (memory-bound), threads split the channels.
//   more rows (prompts): panels of channels dequantised to float32 once per
//     call (threaded), multiplied by the BLAS's sgemm (compute-bound; the
//     decode costs O(n·k), the product O(m·n·k)).
// NaN and Inf in x propagate (a NaN in x[i] makes y[i, :] NaN).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/quant_blocks.h"

namespace qkv::kernels {

// W[n, k] in one block format, not owned.
struct QuantMatrix {
  BlockFormat format;
  int64_t n, k;
  const uint8_t* data;  // n rows of row_bytes
  int64_t row_bytes;    // k / block · block bytes
};

// One instruction set's kernels.
struct QuantKernels {
  const char* name;  // "avx512", "avx2", "portable"
  // y[0:m, c0:c1] (row stride ldy) = x[0:m] (row stride ldx) · W[c0:c1]ᵀ + bias
  // (bias may be null), the few-rows route, on the calling thread.
  void (*gemv_block)(const float* x, int64_t ldx, int64_t m, const QuantMatrix& w,
                     const float* bias, float* y, int64_t ldy, int64_t c0, int64_t c1);
  // out[(j − j0) · ldo + p] = W[j, p] for rows j in [j0, j1), bit-equal to
  // dequantize_row_reference.
  void (*dequantize_rows)(const QuantMatrix& w, int64_t j0, int64_t j1, float* out, int64_t ldo);
};

// The tables this CPU runs, fastest first (tests, benchmarks).
std::vector<const QuantKernels*> supported_quant_kernels();
// The fastest of them, unless override_quant_kernels chose another.
const QuantKernels& active_quant_kernels();
// Tests and benchmarks: use `table` from now on (nullptr: back to the fastest).
void override_quant_kernels(const QuantKernels* table);

// Up to this many rows of x take the few-rows route.
int64_t quant_gemv_max_rows();

// y = x · Wᵀ + bias by the route for m, threaded (OpenMP, and the BLAS's own).
// x: row stride ldx ≥ k; y: row stride ldy ≥ n; bias: [n] or null.
void quant_gemm(const float* x, int64_t ldx, int64_t m, const QuantMatrix& w, const float* bias,
                float* y, int64_t ldy);

// out[i, :] = W[ids[i], :] (rows of ldo floats), ids checked by the caller.
void quant_gather_rows(const QuantMatrix& w, const int64_t* ids, int64_t count, float* out,
                       int64_t ldo);

}  // namespace qkv::kernels
