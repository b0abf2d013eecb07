// Matrix-vector products for one-row linear layers (decoding steps). Internal.
//
// A decoding step reads every weight once and does two flops per weight, so
// its speed is the memory bandwidth: the kernels stream W with wide loads,
// four rows per pass sharing each load of x, and split rows across threads
// when the matrix is large. Written here rather than taken from the BLAS
// because OpenBLAS 0.3.21 does not recognise newer Xeons and falls back to
// its SSE3 ("Prescott") kernels on them (measured: 2.5x slower decoding).
#pragma once

#include <cstdint>
#include <span>

namespace qkv::detail {

// y[n] = W[n, k] · x[k]  (y += … when accumulate); W row-major, contiguous.
struct GemvTask {
  const float* w = nullptr;
  const float* x = nullptr;
  float* y = nullptr;
  int64_t n = 0;
  int64_t k = 0;
  bool accumulate = false;
};

// Runs the products one after another, the rows of each split across the
// OpenMP threads when it is large enough to pay for them. Allocates nothing.
void gemv(std::span<const GemvTask> tasks);

// Which instruction set gemv uses: "avx512", "avx2" or "portable"
// (qkv::kernel_isa(), so QKV_ISA overrides it too).
const char* gemv_isa();

}  // namespace qkv::detail
