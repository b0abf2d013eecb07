"""OpenBLAS's kernel choice for this CPU, made while qkv._core loads it.

OpenBLAS reads OPENBLAS_CORETYPE once, when the shared library is loaded.
Debian 12's OpenBLAS 0.3.21 does not recognise recent Xeons and falls back to
its SSE3 "Prescott" kernels (~5x slower on the linear layers), so while
qkv._core is imported the variable names the kernels that suit this CPU,
unless the user set it. It is removed again afterwards, so that child
processes see the environment they were given.
"""

import contextlib
import os


def _cpu_flags():
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def coretype_for_cpu():
    """"SkylakeX" (AVX-512), "Haswell" (AVX2 + FMA) or None (leave OpenBLAS's choice)."""
    flags = _cpu_flags()
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return None


@contextlib.contextmanager
def fast_kernels_while_loading():
    coretype = None if "OPENBLAS_CORETYPE" in os.environ else coretype_for_cpu()
    if coretype is not None:
        os.environ["OPENBLAS_CORETYPE"] = coretype
    try:
        yield
    finally:
        if coretype is not None:
            os.environ.pop("OPENBLAS_CORETYPE", None)
