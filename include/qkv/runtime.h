// Threads and instruction sets: what qkv runs on, and how to change it.
//
// Threads: qkv's kernels and its BLAS (OpenBLAS, OpenMP flavour) share one
// OpenMP thread pool, so they never oversubscribe the cores. The count is
// OMP_NUM_THREADS at start-up (default: all cores) or set_num_threads().
//
// Instruction set: chosen once per process from CPUID (avx512, then avx2,
// then portable); the environment variable QKV_ISA=avx512|avx2|portable
// overrides it.
#pragma once

#include <string>
#include <vector>

namespace qkv {

void set_num_threads(int threads);
int num_threads();

// The instruction set the fused kernels use, e.g. "avx512".
std::string kernel_isa();
// Every instruction set this CPU can run, fastest first.
std::vector<std::string> supported_isas();

// The machine's FP32 peak in GFLOP/s, measured now: FMA chains on every
// thread for about `seconds`. Benchmarks divide by it.
double measure_fp32_peak_gflops(double seconds = 0.2);

}  // namespace qkv
