// Fused (FlashAttention-2 style) attention kernels for float32: tiles of
// queries against tiles of keys with an online softmax, never an L×S matrix.
// One KernelTable per instruction set; the table is chosen once per process
// from CPUID, or by the environment variable QKV_ISA=avx512|avx2|portable.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/reference/sdpa_reference.h"

namespace qkv::kernels {

// Rows of queries and keys per tile.
struct FlashTiling {
  int64_t block_q = 0;
  int64_t block_k = 0;
};

// Per-thread work memory of one forward tile, sized by flash_scratch_floats.
struct FlashScratch {
  float* q_packed = nullptr;  // [round_up(block_q, mr), E]
  float* k_packed = nullptr;  // [E, round_up(block_k, nr)]
  float* v_packed = nullptr;  // [block_k, round_up(Ev, nr)]
  float* p_packed = nullptr;  // [round_up(block_q, mr), block_k]
  float* scores = nullptr;    // [block_q, block_k]
  float* out_acc = nullptr;   // [block_q, Ev]
  float* row_max = nullptr;   // [block_q]
  float* row_sum = nullptr;   // [block_q]
};

struct KernelTable {
  const char* name;
  int mr;  // micro-kernel rows
  int nr;  // micro-kernel columns
  // Computes output rows [q_begin, q_begin + rows) of problem `b` (and their
  // log-sum-exp into problem.lse when set).
  void (*flash_forward_tile)(const SdpaProblem& problem, const FlashTiling& tiling, int64_t b,
                             int64_t q_begin, int64_t rows, const FlashScratch& scratch);
  // Writes the weights of those rows into problem.weights, from problem.lse.
  void (*flash_weights_tile)(const SdpaProblem& problem, const FlashTiling& tiling, int64_t b,
                             int64_t q_begin, int64_t rows, const FlashScratch& scratch);
};

// The tables this CPU can run, fastest first (for tests and benchmarks).
std::vector<const KernelTable*> supported_kernel_tables();
// The table used by default: the fastest supported, unless QKV_ISA names another.
const KernelTable& active_kernel_table();
// Tests and benchmarks: use `table` from now on (nullptr: back to the default).
void override_kernel_table(const KernelTable* table);

// Floats of scratch one thread needs for `problem` with `tiling`.
int64_t flash_scratch_floats(const SdpaProblem& problem, const FlashTiling& tiling,
                             const KernelTable& table);

// The whole forward pass of a float32 problem, threaded over (problem, query tile).
void sdpa_forward_fused(const SdpaProblem& problem, const KernelTable& table);

}  // namespace qkv::kernels
