// Linear layers on GGUF block-quantised weights kept in their file layout
// (quant_blocks.h): y[m, n] = x[m, k] · W[n, k]ᵀ + bias[n] with float32 x, y
// and bias, where W is row-major blocks (row j: k / block blocks, row_bytes
// apart) read in place, e.g. from a file's mmap.
//
// Two routes, both the float32 product with the dequantised weights (no
// rounding of x: the same numbers as a float32 linear on W.dequantize(),
// summed in another order), except where noted:
//   few rows (m ≤ quant_gemv_max_rows() = 16: decoding, batched decoding,
//     short prompts): each block is decoded to float32 in registers once and
//     multiply-added into up to 8 rows at a time (each row's sum in the same
//     order whatever the number of rows); W streams in once per 8 rows,
//     threads split the channels.
//     Exception: on a table with x_bits < 32, the weights of its
//     rounded_formats (avx512_vnni: Q4_1 and Q8_0; avx512_vnni16 and
//     avx2_int16: every format)
//     meet x rounded per block of 32 in exact int32 dot products, then scaled:
//     x_bits = 16 (avx512_vnni16 and avx2_int16, the default where the CPU
//       has AVX512_VNNI or AVX2):
//       quantize_x_q16_reference, |x − x̂| ≤ 0.51·dx with dx = max|x| / 32767
//       (half a step, plus 4·32767·u of one for the float32 rounding of
//       x·(32767 / max|x|): 1.6e-5 of the block's largest |x|, ~128× below
//       bf16's rounding 2^-9), so |y − Σ w·x| ≤ Σ_b 0.51·dx_b·Σ_{p in b} |w_p|
//       plus the float32 summation error of the nb = k / 32 block terms (tested as
//       (nb + 24)·u·Σ(|d·q| + |m|)·|x̂|; u = 2^-24): greedy decoding
//       agrees with float x;
//     x_bits = 8 (avx512_vnni, opt-in with QKV_INT8_DECODE=1): as llama.cpp's
//       decoding (quantize_x_q8_reference: dx = max|x| / 127), 2-5% moves
//       in the logits.
//   more rows (prompts): panels of channels dequantised to float32 once per
//     call (threaded), multiplied by the BLAS's sgemm (compute-bound; the
//     decode costs O(n·k), the product O(m·n·k)), x not rounded.
//     Exception: a table with a prompt route (avx512_vnni16: every format)
//     rounds x to 16 bits as its few-rows route does and sums integer
//     products there too (quant_prompt_avx512_vnni16.cc), within the same
//     bounds.
// NaN and Inf in x propagate (a NaN in x[i] makes y[i, :] NaN).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
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

// One product of quant_gemm_each: y = x · Wᵀ + bias (y: row stride ldy ≥ n).
struct QuantProduct {
  const QuantMatrix* w;
  const float* bias;  // [n] or null
  float* y;
  int64_t ldy;
};

// A table's prompt route on integer dot products (quant_prompt_*.cc): each
// product's y = x · Wᵀ + bias for any number of rows, threaded (OpenMP), x
// rounded once per block as the table's few-rows route rounds it; for
// weights of the same k in the formats of `formats` (rounded_formats' bits).
struct QuantPromptKernel {
  void (*gemm)(const float* x, int64_t ldx, int64_t m, std::span<const QuantProduct> products);
  uint32_t formats;
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
  // 32: gemv_block keeps x as it is; 16 / 8: for the formats of
  // rounded_formats it rounds x per block of 32 (quantize_x_q16_reference /
  // quantize_x_q8_reference) and sums integer products.
  int x_bits = 32;
  // Bit f (a BlockFormat's value) set: gemv_block rounds x for format f
  // (rounds_x); none where x_bits = 32.
  uint32_t rounded_formats = 0;
  // Null: prompts dequantise panels of W for sgemm.
  const QuantPromptKernel* prompt = nullptr;
};

constexpr uint32_t rounded_formats(std::initializer_list<BlockFormat> formats) {
  uint32_t bits = 0;
  for (BlockFormat f : formats) bits |= uint32_t{1} << static_cast<uint32_t>(f);
  return bits;
}

constexpr uint32_t kEveryFormat =
    rounded_formats({BlockFormat::kQ4_0, BlockFormat::kQ4_1, BlockFormat::kQ5_0, BlockFormat::kQ5_1,
                     BlockFormat::kQ8_0, BlockFormat::kIQ4_NL, BlockFormat::kQ4_K,
                     BlockFormat::kQ5_K, BlockFormat::kQ6_K});

// Whether table t's few-rows product rounds x for weights of format f.
inline bool rounds_x(const QuantKernels& t, BlockFormat f) {
  return (t.rounded_formats >> static_cast<uint32_t>(f)) & 1u;
}

// Whether table t has a prompt route (integer, rounding x) for format f.
inline bool has_prompt_route(const QuantKernels& t, BlockFormat f) {
  return t.prompt != nullptr && ((t.prompt->formats >> static_cast<uint32_t>(f)) & 1u);
}

// The rounding of x of the int8 few-rows kernels, in scalar code: per block b
// of 32 (k a multiple of 32), amax = max|x|, dx[b] = amax / 127 and q =
// round-to-even(x · (127 / amax)) (float32 operations), so x ≈ dx[b] · q with
// q in [−127, 127]. A block with amax < 2^-120 gets dx = 0, q = 0 (127 / amax
// could overflow); a block holding NaN or Inf gets a NaN or Inf dx (its q are
// then unspecified; here 0), which makes the products it meets non-finite.
void quantize_x_q8_reference(const float* x, int64_t k, int8_t* q, float* dx);

// The rounding of x of the int16 few-rows kernels, as quantize_x_q8_reference
// with 32767 for 127: dx[b] = amax / 32767, q = round-to-even(x · (32767 /
// amax)) in [−32767, 32767]; a block with amax < 2^-100 (32767 / amax could
// overflow) gets dx = 0, q = 0 (|x − x̂| ≤ amax there), a block holding NaN or
// Inf a non-finite dx.
void quantize_x_q16_reference(const float* x, int64_t k, int16_t* q, float* dx);

// The tables this CPU runs, fastest first (tests, benchmarks).
std::vector<const QuantKernels*> supported_quant_kernels();
// The fastest of them at or below isa_ceiling() (kernels/cpu_features.h)
// that does not round x to 8 bits (avx512_vnni16 where the CPU has
// AVX512_VNNI and the cap allows it, avx512 (float x) at the avx512 level,
// avx2_int16 at the avx2 level, portable below) — unless the environment has
// QKV_INT8_DECODE=1, which lets an x_bits = 8 table (as llama.cpp; faster
// still, with greedy choices that part from the float path's now and then)
// be chosen — or override_quant_kernels chose another.
const QuantKernels& active_quant_kernels();
// Tests and benchmarks: use `table` from now on (nullptr: back to the fastest).
void override_quant_kernels(const QuantKernels* table);

// Up to this many rows of x take the few-rows route.
int64_t quant_gemv_max_rows();

// Whether quant_gemm on table t rounds x (to t.x_bits) for m rows of format f:
// the few-rows route's rounds_x, or a prompt route.
bool rounds_x_at(const QuantKernels& t, BlockFormat f, int64_t m);

// y = x · Wᵀ + bias by the route for m, threaded (OpenMP, and the BLAS's own).
// x: row stride ldx ≥ k; y: row stride ldy ≥ n; bias: [n] or null.
void quant_gemm(const float* x, int64_t ldx, int64_t m, const QuantMatrix& w, const float* bias,
                float* y, int64_t ldy);

// quant_gemm for several weights of the same k meeting the same x: on the
// few-rows route the threads share the channel groups of all of them in one
// fork/join (a decoding step's q, k and v projections; its gate and up), so
// small products no longer each pay a fork/join and a barrier; on a prompt
// route, x is rounded once for all of them and their panels shared the same
// way. Each y equals what quant_gemm gives for it alone.
void quant_gemm_each(const float* x, int64_t ldx, int64_t m,
                     std::span<const QuantProduct> products);

// out[i, :] = W[ids[i], :] (rows of ldo floats), ids checked by the caller.
void quant_gather_rows(const QuantMatrix& w, const int64_t* ids, int64_t count, float* out,
                       int64_t ldo);

}  // namespace qkv::kernels
