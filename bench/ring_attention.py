#!/usr/bin/env python3
"""Ring attention on N local processes against single-process qkv SDPA.

    PYTHONPATH=$PWD/python .venv/bin/python bench/ring_attention.py --ranks 4 --tokens 16384

One sequence (B 1) of --tokens tokens, --heads heads of dim --dim, float32,
causal unless --full; forward + backward unless --forward-only.

Measured after one warm-up run of each, median over --reps repetitions (a
repetition: all ranks start after a barrier; its time is the slowest rank's):
  ring          qkv.distributed.ring_attention, forward and backward; causal:
                zig-zag layout
  ring, contiguous        (causal only) the same on contiguous blocks
                (layout="contiguous": rank r holds tokens [r·L, (r+1)·L))
  compute only  the same per-step attention calls on each rank's own block,
                no transfers (the ring's arithmetic alone); causal: zig-zag
  compute only, contiguous  (causal only) the same for contiguous blocks
  comm only     the same transfers, in the same order, without the attention
  single        torch.ops.qkv SDPA forward + backward on the whole sequence in
                one process (--single-threads threads)
hidden share of the communication = 1 − (ring − compute only) / comm only:
1 when the transfers cost nothing on top of the compute, 0 when they add
their whole time (clipped to [0, 1]); printed from the medians and, steadier
under load, from the minimums. Causal: the zig-zag layout's gain over
contiguous blocks, ring, contiguous / ring (medians and minimums); with one
core per rank the ideal is 2 − 1/N (contiguous: each step waits for the rank
with a whole block, N − ½ blocks in all; zig-zag: N half blocks).

CPU s: the process CPU time of the slowest rank (time.process_time), median.
When the ranks share fewer cores than there are ranks, wall time spreads the
slowest rank's work over the idle ones' time slices; the CPU time of
"compute only" is what that rank's attention takes on a core of its own, the
ring's time with one core per rank and free transfers.

Peak memory: ru_maxrss of each process (resource.getrusage), and the same
after imports and setup, before any attention ran, so that the difference is
what the attention itself needed. Each rank runs one thread.
"""

import argparse
import os
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import qkv.distributed as qd
import qkv.runtime
import qkv.torch  # noqa: F401


def max_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def inputs(tokens, heads, dim, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, heads, tokens, dim, generator=g) for _ in range(4)]  # q k v dO


def comm_only(ring, block, grad_numel, backward):
    """The ring's transfers without its compute: the forward's N − 1 key/value
    shifts, and the backward's N − 1 more plus N accumulator shifts."""
    for _ in range(ring.size - 1):
        _, works = ring.shift(block, qd._KV_TAG)
        qd._wait(works)
    if backward:
        grad = torch.zeros(grad_numel)
        for step in range(ring.size):
            works = []
            if step + 1 < ring.size:
                _, works = ring.shift(block, qd._KV_TAG)
            received, grad_works = ring.shift(grad, qd._GRAD_TAG)
            qd._wait(works + grad_works)


def ring_worker(rank, world_size, port, args, results):
    qd.init_local_group(rank, world_size, port, timeout_s=600)
    causal = not args.full
    full = inputs(args.tokens, args.heads, args.dim)
    # This rank's q, k, v, dO in each layout the run times.
    blocks = {"contiguous": [t.chunk(world_size, -2)[rank].contiguous() for t in full]}
    if causal:
        blocks["zigzag"] = [qd.zigzag_split(t, rank, world_size).contiguous() for t in full]
    del full
    scale = args.dim ** -0.5
    ring, alone = qd._Ring(None), qd._NoComm(rank, world_size)
    k, v = blocks["contiguous"][1:3]
    block = qd._Packer(k, v, None).pack(k, v, None)
    setup_rss = max_rss_mib()

    def ring_pass(layout):
        q, k, v, grad = blocks[layout]
        q.requires_grad_(not args.forward_only)
        out = qd.ring_attention(q, k, v, is_causal=causal, layout=layout)
        if not args.forward_only:
            out.backward(grad)
            q.grad = None

    def compute_pass(layout):
        q, k, v, grad = blocks[layout]
        out, lse = qd._ring_forward(q, k, v, None, causal, layout, scale, alone)
        if not args.forward_only:
            qd._ring_backward(grad, q, k, v, None, out, lse, causal, layout, scale, alone)

    def comm_pass():
        comm_only(ring, block, k.numel() + v.numel(), not args.forward_only)

    # "ring" and "compute only" in the layout causal attention should use.
    main_layout = "zigzag" if causal else "contiguous"
    passes = {"ring": lambda: ring_pass(main_layout),
              "compute only": lambda: compute_pass(main_layout), "comm only": comm_pass}
    if causal:
        passes["ring, contiguous"] = lambda: ring_pass("contiguous")
        passes["compute only, contiguous"] = lambda: compute_pass("contiguous")
    times = {name: [] for name in passes}
    for fn in passes.values():  # warm-up: gloo connects its pairs on first use
        fn()
    cpu = {name: [] for name in passes}
    for rep in range(args.reps):
        for name, fn in passes.items():
            dist.barrier()
            start, cpu_start = time.perf_counter(), time.process_time()
            fn()
            elapsed = torch.tensor([time.perf_counter() - start,
                                    time.process_time() - cpu_start], dtype=torch.float64)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
            times[name].append(elapsed[0].item())
            cpu[name].append(elapsed[1].item())
    results[rank] = {"times": times, "cpu": cpu, "setup_rss": setup_rss,
                     "peak_rss": max_rss_mib()}
    dist.destroy_process_group()


def single_worker(_, args, results):
    torch.set_num_threads(args.single_threads)
    qkv.runtime.set_num_threads(args.single_threads)
    q, k, v, grad = inputs(args.tokens, args.heads, args.dim)
    causal = "none" if args.full else "top_left"
    setup_rss = max_rss_mib()
    times = []
    for rep in range(args.reps + 1):  # the first is a warm-up
        start = time.perf_counter()
        out, lse, _ = torch.ops.qkv.scaled_dot_product_attention(q, k, v, causal=causal)
        if not args.forward_only:
            torch.ops.qkv.scaled_dot_product_attention_backward(grad, q, k, v, out, lse,
                                                                causal=causal)
        if rep > 0:
            times.append(time.perf_counter() - start)
    results["single"] = {"times": times, "setup_rss": setup_rss, "peak_rss": max_rss_mib()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--single-threads", type=int, default=2)
    parser.add_argument("--full", action="store_true", help="not causal")
    parser.add_argument("--forward-only", action="store_true")
    args = parser.parse_args()
    if args.tokens % (2 * args.ranks):
        sys.exit(f"--tokens must be divisible by 2·ranks = {2 * args.ranks}")

    with mp.Manager() as manager:
        results = manager.dict()
        mp.start_processes(single_worker, args=(args, results), nprocs=1, start_method="spawn")
        mp.start_processes(ring_worker, args=(args.ranks, qd.free_port(), args, results),
                           nprocs=args.ranks, start_method="spawn")
        results = dict(results)

    single = results.pop("single")
    ranks = [results[r] for r in range(args.ranks)]
    med = {name: statistics.median(t) for name, t in ranks[0]["times"].items()}
    med["single"] = statistics.median(single["times"])
    hidden = 1 - (med["ring"] - med["compute only"]) / med["comm only"]
    what = "forward" if args.forward_only else "forward + backward"
    print(f"{what}, {'full' if args.full else 'causal, zig-zag'}, B 1, H {args.heads}, "
          f"E {args.dim}, "
          f"{args.tokens} tokens, float32; ring: {args.ranks} processes × 1 thread; single: 1 "
          f"process × {args.single_threads} threads; median of {args.reps}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    cpu = {name: statistics.median(t) for name, t in ranks[0]["cpu"].items()}
    print("| run | median s | min s | / single | CPU s, slowest rank |")
    print("|---|---:|---:|---:|---:|")
    for name in ["single"] + list(ranks[0]["times"]):
        t = single["times"] if name == "single" else ranks[0]["times"][name]
        cpu_s = "—" if name == "single" else f"{cpu[name]:.3f}"
        print(f"| {name} | {med[name]:.3f} | {min(t):.3f} | {med[name] / med['single']:.2f} | "
              f"{cpu_s} |")
    print(f"\ncommunication hidden behind compute: 1 − ({med['ring']:.3f} − "
          f"{med['compute only']:.3f}) / {med['comm only']:.3f} = "
          f"**{min(1.0, max(0.0, hidden)):.0%}** (unclipped {hidden:.2f})")
    # Under load the minimum is the steadier estimate of each pass.
    low = {name: min(t) for name, t in ranks[0]["times"].items()}
    hidden_min = 1 - (low["ring"] - low["compute only"]) / low["comm only"]
    print(f"from the minimums: 1 − ({low['ring']:.3f} − {low['compute only']:.3f}) / "
          f"{low['comm only']:.3f} = **{min(1.0, max(0.0, hidden_min)):.0%}** "
          f"(unclipped {hidden_min:.2f})\n")
    if not args.full:
        ratio = lambda x, name: x[f"{name}, contiguous"] / x[name]  # noqa: E731
        print(f"zig-zag layout's gain over contiguous blocks ({args.ranks} ranks), contiguous "
              f"/ zig-zag: ring **{ratio(med, 'ring'):.2f}×** (medians), "
              f"{ratio(low, 'ring'):.2f}× (minimums); compute only "
              f"{ratio(med, 'compute only'):.2f}× (medians); slowest rank's CPU time: ring "
              f"{ratio(cpu, 'ring'):.2f}×, compute only **{ratio(cpu, 'compute only'):.2f}×** "
              f"(a core per rank; ideal {2 - 1 / args.ranks:.2f}×)\n")
    print("| process | RSS after setup MiB | peak RSS MiB | peak − setup MiB |")
    print("|---|---:|---:|---:|")
    rows = [("single", single)] + [(f"ring rank {r}", x) for r, x in enumerate(ranks)]
    for name, x in rows:
        print(f"| {name} | {x['setup_rss']:.0f} | {x['peak_rss']:.0f} | "
              f"{x['peak_rss'] - x['setup_rss']:.0f} |")


if __name__ == "__main__":
    main()
