// Linear layers over one or a few rows: matrix-vector products (decoding
// steps) and products with a handful of rows (short sentences). Internal.
//
// These read every weight once and do 2·m flops per weight, so their speed is
// the bandwidth at which W streams in, not the FMA rate: the kernels read W in
// place with wide loads and split its rows across threads when the matrix is
// large. Written here rather than taken from the BLAS because OpenBLAS
// 0.3.21 does not recognise newer Xeons and falls back to its SSE3
// ("Prescott") kernels on them (measured: 2.5x slower decoding), and because
// its gemm packs all of W on every call, which for a few rows costs more than
// the products (bench/linear_vs_torch.py, docs/benchmarks.md "Linear layers").
#pragma once

#include <cstdint>
#include <span>

#include "kernels/fused_attention.h"

namespace qkv::detail {

// y[m, n] = x[m, k] · W[n, k]ᵀ  (y += … when accumulate); all contiguous.
using GemvTask = kernels::GemvTask;

// The most rows (task.m) gemv() takes; more go to the BLAS.
int64_t gemv_max_rows();

// Runs the products one after another, the rows of W of each split across
// the OpenMP threads when it is large enough to pay for them. Allocates
// nothing.
void gemv(std::span<const GemvTask> tasks);

}  // namespace qkv::detail
