// Fused (FlashAttention-2 style) attention kernels for float32: tiles of
// queries against tiles of keys with an online softmax, never an L×S matrix;
// the forward also with bfloat16 products (SdpaProblem::bf16_products). One
// KernelTable per instruction set; the fastest this CPU has at or below the
// QKV_ISA cap (kernels/cpu_features.h) runs: amx, avx512_bf16, avx512, avx2,
// portable (avx512_bf16: the avx512 table whose forward multiplies bfloat16
// with vdpbf16ps; amx: the same with that forward's products on AMX tiles;
// the others emulate it).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/reference/sdpa_reference.h"
#include "kernels/row_kernels.h"

namespace qkv::kernels {

// Rows of queries and keys per tile.
struct FlashTiling {
  int64_t block_q = 0;
  int64_t block_k = 0;
};

// y[m, n] = x[m, k] · W[n, k]ᵀ  (y += … when accumulate); all row-major and
// contiguous. m = 1 is a matrix-vector product y[n] = W x.
struct GemvTask {
  const float* w = nullptr;
  const float* x = nullptr;
  float* y = nullptr;
  int64_t n = 0;
  int64_t k = 0;
  bool accumulate = false;
  int64_t m = 1;
};

// The softmax state of one chunk of the keys of a few-query tile (decoding:
// KeyChunkKernels), in the driver's buffer: the unnormalised outputs
// out [kRows, Ev], then the running max m and sum l [kRows].
struct KeyChunkState {
  static constexpr int64_t kRows = 4;  // the few-query path's most queries
  float* out;
  float* m;
  float* l;
  // Floats of one state, a multiple of 16 (states stay 64-byte aligned).
  static int64_t floats(const SdpaProblem& p) { return (kRows * p.Ev + 15) / 16 * 16 + 16; }
  KeyChunkState(const SdpaProblem& p, float* base)
      : out(base), m(base + (kRows * p.Ev + 15) / 16 * 16), l(m + kRows) {}
};

// Few-query problems split along their keys, so that one sequence's few KV
// heads keep every thread busy while decoding over a long cache
// (simd/few_query_forward.h).
struct KeyChunkKernels {
  // Chunks per query tile of `problem`: 1 = not split (the one-pass kernel).
  int64_t (*chunks)(const SdpaProblem& problem);
  // Floats of per-thread scratch `forward` needs.
  int64_t (*scratch_floats)(const SdpaProblem& problem, const FlashTiling& tiling);
  // Chunk `chunk` of `chunks` of rows [q_begin, q_begin + rows) of problem b
  // into `state` (KeyChunkState::floats).
  void (*forward)(const SdpaProblem& problem, const FlashTiling& tiling, int64_t b, int64_t q_begin,
                  int64_t rows, int64_t chunk, int64_t chunks, float* scratch, float* state);
  // Merges the chunks' states (state_floats apart, overwriting the first)
  // and writes the rows' outputs and log-sum-exp, as forward_tile would.
  void (*finish)(const SdpaProblem& problem, int64_t b, int64_t q_begin, int64_t rows,
                 int64_t chunks, float* states, int64_t state_floats);
};

struct KernelTable {
  const char* name;
  // GFLOP/s of independent FMAs on this thread for about `seconds`: the
  // machine's FP32 peak per core as this ISA sees it (benchmarks report
  // kernel speed as a fraction of it).
  double (*fma_peak_gflops)(double seconds);
  // out[i] = exp(x[i]) by the kernels' own vector exp (what the softmax
  // uses), for tests to hold it to std::exp.
  void (*exp_into)(const float* x, int64_t n, float* out);
  // out[i] = log(x[i]) for positive normal x, by the vector log that turns
  // each row's softmax sum into its log-sum-exp; for tests, as exp_into.
  void (*log_into)(const float* x, int64_t n, float* out);
  int mr;           // micro-kernel rows
  int nr;           // micro-kernel columns
  int query_panel;  // queries per panel of the forward's score tile (query tiles are cut
                    // at multiples of it; a last tile of 1 or 2 vectors pads less)
  // Floats of per-thread scratch the two calls below need.
  int64_t (*forward_scratch_floats)(const SdpaProblem& problem, const FlashTiling& tiling);
  // Computes output rows [q_begin, q_begin + rows) of problem `b` (and their
  // log-sum-exp into problem.lse when set): the tiled flash kernel, or the
  // few-query (decoding) kernel for tiles of at most four queries.
  void (*forward_tile)(const SdpaProblem& problem, const FlashTiling& tiling, int64_t b,
                       int64_t q_begin, int64_t rows, float* scratch);
  // Writes the weights of those rows into problem.weights, from problem.lse.
  void (*weights_tile)(const SdpaProblem& problem, const FlashTiling& tiling, int64_t b,
                       int64_t q_begin, int64_t rows, float* scratch);
  // Columns [begin, end) of y = x·Wᵀ for 1 ≤ task.m ≤ gemv_max_rows rows of
  // x, W streamed once and read in place (linear layers over few rows).
  void (*gemv_rows)(const GemvTask& task, int64_t begin, int64_t end);
  int64_t gemv_max_rows;
  int64_t (*backward_scratch_floats)(const SdpaProblem& problem, const FlashTiling& tiling);
  // Backward over keys [j0, j0 + cols) for `count` problems sharing one K/V
  // matrix: adds into their dK/dV rows and into dQ at grad_q_base + offsets.
  // row_dot: D = rowsum(dO ∘ O) per (problem, query).
  void (*flash_backward_tile)(const SdpaBackwardProblem& problem, const FlashTiling& tiling,
                              const int64_t* problems, int64_t count, int64_t j0, int64_t cols,
                              const double* row_dot, float* grad_q_base, float* scratch);
  // The float32 row loops of the ops (norms, activations, Adam) for this ISA.
  const RowKernels* rows;
  // flash_backward_tile for bf16_products problems without dropout or a
  // float mask's gradient: the five products multiply bfloat16 values
  // (vdpbf16ps on avx512_bf16, emulated elsewhere); float32 operands.
  int64_t (*backward_bf16_scratch_floats)(const SdpaProblem& problem, const FlashTiling& tiling);
  void (*flash_backward_bf16_tile)(const SdpaBackwardProblem& problem, const FlashTiling& tiling,
                                   const int64_t* problems, int64_t count, int64_t j0, int64_t cols,
                                   const double* row_dot, float* grad_q_base, float* scratch);
  // Queries per forward tile for `problem`, or null for the default (96).
  // The amx forward packs K and V once per tile, so it asks for tiles of up
  // to 512 queries.
  int64_t (*forward_query_block)(const SdpaProblem& problem) = nullptr;
  // Keys per tile of the bfloat16-product backward for `problem`, or null
  // for the default (96). The amx backward packs the queries once per key
  // tile: longer key tiles pack them fewer times.
  int64_t (*bf16_backward_key_block)(const SdpaProblem& problem) = nullptr;
  // Whether flash_backward_bf16_tile also reads bfloat16 operands (q, k, v
  // and dO of a bfloat16 problem; the gradients stay float32), so that
  // bfloat16 tensors need no float32 copies.
  bool bf16_backward_reads_bfloat16 = false;
  // Few-query problems split along the keys, or null (never split).
  const KeyChunkKernels* key_chunks = nullptr;
};

// The tables this CPU can run, fastest first (for tests and benchmarks).
std::vector<const KernelTable*> supported_kernel_tables();
// The table used: the fastest supported at or below isa_ceiling(), unless
// override_kernel_table chose one.
const KernelTable& active_kernel_table();
// Tests and benchmarks: use `table` from now on (nullptr: back to the default).
void override_kernel_table(const KernelTable* table);

// The whole forward pass of a float32 problem, threaded over (problem, query tile).
void sdpa_forward_fused(const SdpaProblem& problem, const KernelTable& table);

// The whole backward pass, threaded over (K/V matrix, key tile): every
// thread owns the dK/dV rows of its tiles; dQ goes to per-thread buffers when
// several threads work on one problem, so both cores stay busy even when
// batch × heads is 1.
void sdpa_backward_fused(const SdpaBackwardProblem& problem, const KernelTable& table);

// Whether sdpa_backward_fused runs a problem with bfloat16 products in the
// bfloat16-product backward (flash_backward_bf16_tile) of `table`:
// bf16_products, float32 operands (or bfloat16 ones where the table reads
// them), no dropout, no grad_scores, not a problem whose forward kept
// float32 products (at most four queries), and the route enabled (by default;
// QKV_BF16_BACKWARD=0 in the environment, or the override, turns it off).
// A problem with bfloat16 operands must run there.
bool runs_bf16_backward(const SdpaBackwardProblem& problem, const KernelTable& table);
// Tests and benchmarks: 1 on, 0 off, −1 back to the default.
void override_bf16_backward(int enabled);

}  // namespace qkv::kernels
