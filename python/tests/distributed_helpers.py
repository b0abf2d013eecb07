"""Running a test's worker in N local processes over gloo, bounded in time."""

import time

import pytest
import torch.multiprocessing as mp

import qkv.distributed as qd

# A collective that waits longer than this raises in the worker (gloo's own timeout).
COLLECTIVE_TIMEOUT_S = 30


def init_gloo(rank, world_size, port):
    """Joins the gloo process group of `world_size` local processes; one
    thread per process (the machine is shared)."""
    qd.init_local_group(rank, world_size, port, timeout_s=COLLECTIVE_TIMEOUT_S)


def run_ranks(worker, world_size, args=(), timeout=90):
    """Runs worker(rank, world_size, port, *args) in `world_size` spawned
    processes; fails the test if one raises or if they are not all done
    within `timeout` seconds (a hang fails instead of blocking CI)."""
    port = qd.free_port()
    context = mp.start_processes(worker, args=(world_size, port, *args), nprocs=world_size,
                                 join=False, start_method="spawn")
    deadline = time.monotonic() + timeout
    try:
        while not context.join(timeout=max(0.1, min(1.0, deadline - time.monotonic()))):
            if time.monotonic() > deadline:
                pytest.fail(f"{world_size} processes did not finish within {timeout} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
                process.join()
