"""Running a test's worker in N local processes over gloo, bounded in time."""

import datetime
import os
import socket
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# A collective that waits longer than this raises in the worker (gloo's own timeout).
COLLECTIVE_TIMEOUT_S = 30


def free_port():
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_gloo(rank, world_size, port):
    """Joins the gloo process group of `world_size` local processes; one
    thread per process (the machine is shared)."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    import qkv.runtime
    qkv.runtime.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))


def run_ranks(worker, world_size, args=(), timeout=90):
    """Runs worker(rank, world_size, port, *args) in `world_size` spawned
    processes; fails the test if one raises or if they are not all done
    within `timeout` seconds (a hang fails instead of blocking CI)."""
    port = free_port()
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
