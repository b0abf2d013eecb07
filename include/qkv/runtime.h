// Threads and instruction sets: what qkv runs on, and how to change it.
//
// Threads: qkv's kernels and its BLAS (OpenBLAS, OpenMP flavour) share one
// OpenMP thread pool, so they never oversubscribe the cores. The count is
// OMP_NUM_THREADS at start-up or set_num_threads(); when neither chose it,
// it is all cores, less those that other runnable tasks of the machine want
// (read at most every 100 ms; at least one): OpenMP's barriers wait for a
// thread that shares its core with a busy neighbour.
//
// Instruction set: every kernel family (attention and row ops, the bfloat16
// and int8 linear layers, the GGUF quantised ones) runs the fastest kernels
// this CPU has, probed once per process. The environment variable
// QKV_ISA=amx|avx512_bf16|avx512_vnni|avx512|avx2|portable caps them all: each
// family runs its fastest kernels at or below that level (QKV_ISA=avx2: AVX2
// kernels everywhere). A name qkv does not know, or one this CPU lacks, is an
// error (qkv::Error) at the first kernel call.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "qkv/precision.h"

namespace qkv {

void set_num_threads(int threads);
int num_threads();

// The calling thread's idle OpenMP workers exit; its next parallel op starts
// them again. A thread that leaves the computing to others (a server's main
// thread once the model is loaded), or that goes to sleep for a while, calls
// this: libgomp counts every live worker of every thread, and once they
// outnumber the cores it spins only ~100 iterations at each barrier before
// sleeping in the kernel, which made each decoding step of `qkv serve` about
// twice as long as `qkv generate`'s. (That is GCC's libgomp, which qkv's
// builds use; LLVM's libomp puts the workers to sleep instead of ending them.)
void release_idle_threads();

// The instruction set the fused attention kernels use, e.g. "avx512".
std::string kernel_isa();
// Every level QKV_ISA may name on this CPU, highest first (the last is "portable").
std::vector<std::string> supported_isas();
// The kernels of the linear layers in `precision` (kBFloat16 or kInt8), e.g.
// "amx_bf16", "avx512_bf16" or "avx512_vnni"; float32 linear layers run OpenBLAS.
std::string linear_kernel_isa(Precision precision);

// BLAS (the linear layers' matrix products) is OpenBLAS. Debian 12's OpenBLAS
// 0.3.21 does not recognise recent Xeons and falls back to its SSE3
// "Prescott" kernels, about 5x slower than its AVX-512 ones (docs/benchmarks.md,
// "Linear layers"). OpenBLAS reads OPENBLAS_CORETYPE once, when it loads, so
// the qkv CLI and the Python module set it (when unset) before that; a C++
// program of your own can export OPENBLAS_CORETYPE=<openblas_coretype_for_cpu()>.

// The kernel family OpenBLAS chose, e.g. "SkylakeX" or "Prescott".
std::string blas_core_name();
// The OPENBLAS_CORETYPE that suits this CPU: "SkylakeX" (AVX-512), "Haswell"
// (AVX2 + FMA), or "" (leave OpenBLAS's own choice).
std::string openblas_coretype_for_cpu();
// Whether OpenBLAS runs generic kernels although this CPU has better ones.
bool blas_kernels_misdetected();

// The machine's FP32 peak in GFLOP/s, measured now: FMA chains on every
// thread for about `seconds`. Benchmarks divide by it.
double measure_fp32_peak_gflops(double seconds = 0.2);

// Memory: a freed tensor buffer of 1 MiB or more is kept and handed to the
// next tensor of (nearly) the same size, so a training loop does not return
// its activations to the system and fault them in again every step (that was
// ~10 % of a MiniLM-sized training step). At most buffer_cache_limit() bytes
// are kept (default 1 GiB); beyond that buffers are freed as usual.

// Keep at most `bytes` of freed buffers (0 turns the cache off); frees what
// is over the new limit at once.
void set_buffer_cache_limit(size_t bytes);
size_t buffer_cache_limit();
// Bytes held by the cache now (freed buffers waiting for reuse).
size_t buffer_cache_bytes();
// Frees every cached buffer; the limit stays.
void empty_buffer_cache();

// Interrupting long calls: attention (scaled_dot_product_attention and its
// backward, fused and reference) asks `check` between blocks of work, on the
// calling thread and at most every 50 ms. Once it answers true, the call
// stops and throws qkv::Error with ErrorKind::kInterrupted; the next call
// starts afresh. The Python module installs a check that runs Python's signal
// handlers, so Ctrl-C raises KeyboardInterrupt; a C++ program can install one
// that reads a flag its own SIGINT handler sets. nullptr (the default): never.
using InterruptCheck = bool (*)();
void set_interrupt_check(InterruptCheck check);

}  // namespace qkv
