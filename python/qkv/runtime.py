"""qkv.runtime: threads, instruction sets, the machine's peak, which kernel ran, memory.

Threads: qkv's kernels and its BLAS share one OpenMP thread pool, so they never
oversubscribe the cores. The count starts as OMP_NUM_THREADS (default: every
core) and set_num_threads changes it; torch keeps its own pool
(torch.set_num_threads), so set both when using both.

Instruction set: every kernel family (float attention and rows, bf16/int8
rows, GGUF blocks) uses the fastest set this CPU runs, chosen once per process;
the environment variable QKV_ISA=amx|avx512_bf16|avx512_vnni|avx512|avx2|portable,
set before the first call, caps them all at that level.

BLAS: the linear layers run OpenBLAS. Importing qkv sets OPENBLAS_CORETYPE for
this CPU (when it is not set already) just while OpenBLAS loads, because
Debian's OpenBLAS 0.3.21 does not recognise recent Xeons and would run its
generic SSE3 kernels, ~5x slower; blas_core_name() tells which ones run.

Memory: a freed qkv buffer of 1 MiB or more (a tensor's, or the array that
shares it) is kept and handed to the next one of nearly the same size, up to
buffer_cache_limit() bytes (default 1 GiB), so a training loop does not give
its activations back to the system and fault them in again every step.
"""

from . import _core

__all__ = [
    "blas_core_name",
    "buffer_cache_bytes",
    "buffer_cache_limit",
    "empty_buffer_cache",
    "kernel_isa",
    "last_sdpa_kernel",
    "linear_kernel_isa",
    "measure_fp32_peak_gflops",
    "num_threads",
    "set_buffer_cache_limit",
    "set_num_threads",
    "supported_isas",
]


def set_num_threads(threads):
    """Use `threads` threads (≥ 1) for qkv's kernels and BLAS calls from this thread on."""
    threads = int(threads)
    if threads < 1:
        raise ValueError(f"set_num_threads(): threads must be at least 1, got {threads}")
    _core.set_num_threads(threads)


def num_threads():
    """The number of threads qkv's kernels use."""
    return _core.num_threads()


def kernel_isa():
    """The instruction set of the fused kernels, e.g. "avx512"."""
    return _core.kernel_isa()


def linear_kernel_isa(precision):
    """The instruction set of the linear layers' kernels in `precision`
    ("bfloat16" or "int8"), e.g. "amx_bf16", "avx512_bf16" or "avx512_vnni"."""
    return _core.linear_kernel_isa(str(precision))


def blas_core_name():
    """The kernel family OpenBLAS runs, e.g. "SkylakeX" (its generic one is "Prescott")."""
    return _core.blas_core_name()


def supported_isas():
    """Every instruction set this CPU can run, fastest first, e.g. ["avx512", "avx2", "portable"]."""
    return list(_core.supported_isas())


def measure_fp32_peak_gflops(seconds=0.2):
    """The machine's FP32 peak in GFLOP/s, measured now.

    Runs chains of fused multiply-adds on every thread for about `seconds`
    with the kernels' instruction set; benchmarks divide by it. The result
    depends on the threads set and on what else runs on the machine.
    """
    seconds = float(seconds)
    if not seconds > 0:
        raise ValueError(f"measure_fp32_peak_gflops(): seconds must be > 0, got {seconds}")
    return _core.measure_fp32_peak_gflops(seconds)


def set_buffer_cache_limit(bytes):
    """Keep at most `bytes` of freed buffers for reuse (0 turns the cache off).

    Buffers over the new limit are freed at once.
    """
    bytes = int(bytes)
    if bytes < 0:
        raise ValueError(f"set_buffer_cache_limit(): bytes must be >= 0, got {bytes}")
    _core.set_buffer_cache_limit(bytes)


def buffer_cache_limit():
    """The most bytes of freed buffers the cache keeps."""
    return _core.buffer_cache_limit()


def buffer_cache_bytes():
    """Bytes of freed buffers the cache holds now."""
    return _core.buffer_cache_bytes()


def empty_buffer_cache():
    """Free every buffer the cache holds (the limit stays)."""
    _core.empty_buffer_cache()


def last_sdpa_kernel():
    """The kernel that ran this thread's last qkv.nn.functional SDPA call.

    "fused-" + ISA (e.g. "fused-avx512") or "reference"; None before the first
    call. Covers scaled_dot_product_attention and its _with_weights and
    _with_grad companions (a grad_fn also has .kernel).
    """
    from .nn import functional

    return getattr(functional._last_call, "kernel", None)
