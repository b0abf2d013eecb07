// Linear layers on GGUF block-quantised weights kept in their file layout
// (quant_blocks.h): y[m, n] = x[m, k] · W[n, k]ᵀ + bias[n] with float32 x, y
// and bias, where W is row-major blocks (row j: k / block blocks, row_bytes
// apart) read in place, e.g. from a file's mmap.
//
// Two routes, both the float32 product with the dequantised weights (no
// rounding of x: the same numbers as a float32 linear on W.dequantize(),
// summed in another order), except where noted:
//   few rows (m ≤ quant_gemv_max_rows(), decoding): each block is decoded to
//     float32 in registers once and multiply-added into up to 4 rows at a
//     time; W streams in once (memory-bound), threads split the channels.
//     Exception: on a table with int8_gemv (avx512_vnni), Q4_1 and Q8_0
//     weights meet x rounded to 8 bits per block of 32, as llama.cpp's
//     decoding does (quantize_x_q8_reference: |x − x̂| ≤ dx / 2 with dx =
//     max|x| / 127 per block), in exact int32 dot products, then scaled.
//     The prompt route below never rounds x.
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
  const char* name;  // "avx512_vnni", "avx512", "avx2", "portable"
  // y[0:m, c0:c1] (row stride ldy) = x[0:m] (row stride ldx) · W[c0:c1]ᵀ + bias
  // (bias may be null), the few-rows route, on the calling thread.
  void (*gemv_block)(const float* x, int64_t ldx, int64_t m, const QuantMatrix& w,
                     const float* bias, float* y, int64_t ldy, int64_t c0, int64_t c1);
  // out[(j − j0) · ldo + p] = W[j, p] for rows j in [j0, j1), bit-equal to
  // dequantize_row_reference.
  void (*dequantize_rows)(const QuantMatrix& w, int64_t j0, int64_t j1, float* out, int64_t ldo);
  // gemv_block rounds x to 8 bits per block of 32 for Q4_1 and Q8_0
  // (quantize_x_q8_reference) and sums int8 products.
  bool int8_gemv = false;
};

// The rounding of x of the int8 few-rows kernels, in scalar code: per block b
// of 32 (k a multiple of 32), amax = max|x|, dx[b] = amax / 127 and q =
// round-to-even(x · (127 / amax)) (float32 operations), so x ≈ dx[b] · q with
// q in [−127, 127]. A block with amax < 2^-120 gets dx = 0, q = 0 (127 / amax
// could overflow); a block holding NaN or Inf gets a NaN or Inf dx (its q are
// then unspecified; here 0), which makes the products it meets non-finite.
void quantize_x_q8_reference(const float* x, int64_t k, int8_t* q, float* dx);

// The tables this CPU runs, fastest first (tests, benchmarks).
std::vector<const QuantKernels*> supported_quant_kernels();
// The fastest of them that keeps x as it is — unless the environment has
// QKV_INT8_DECODE=1, which lets an int8_gemv table (8-bit x, as llama.cpp;
// about 2-3x faster decoding, with greedy choices that part from the float
// path's now and then) be chosen — or override_quant_kernels chose another.
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
