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

#include "kernels/fused_attention.h"

namespace qkv::detail {

// y[n] = W[n, k] · x[k]  (y += … when accumulate); W row-major, contiguous.
using GemvTask = kernels::GemvTask;

// Runs the products one after another, the rows of each split across the
// OpenMP threads when it is large enough to pay for them. Allocates nothing.
void gemv(std::span<const GemvTask> tasks);

}  // namespace qkv::detail
