"""Timing shared by the benchmark scripts (imported from the scripts' folder)."""

import time


def per_call(fn, min_time=0.05):
    """Seconds per call of fn(): one warm-up call, then calls for at least
    min_time seconds."""
    fn()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_time:
        fn()
        n += 1
    return (time.perf_counter() - start) / n
