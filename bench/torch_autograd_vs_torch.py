#!/usr/bin/env python3
"""SDPA forward + backward through torch autograd: qkv's torch op against torch's SDPA.

    PYTHONPATH=$PWD/python .venv/bin/python bench/torch_autograd_vs_torch.py [--grid] [--reps 5]

Both are called the same way, on the same float32 (or --dtype bfloat16)
tensors that require grad: out = sdpa(q, k, v, ...); out.backward(dO), with
qkv.torch.scaled_dot_product_attention (torch.ops.qkv, qkv's fused forward
and backward) against torch.nn.functional.scaled_dot_product_attention.
Calls alternate qkv, torch, qkv, torch …; each repetition times enough calls
to last --min-time seconds; a point is the median of --reps repetitions.

Points: the shapes of bench/attention_vs_torch.py's grid (B·L = 4,096 tokens,
H·E = 512), a few by default (L ∈ {128, 512, 2048}, E ∈ {32, 64, 128}, causal and
not) or the whole grid with --grid, and MiniLM's shape (B 32, H 12, L 128,
E 32, with a padding mask). Both use the same number of threads. A third
column, "qkv direct", runs qkv.nn.functional.scaled_dot_product_attention_with_grad
and its grad_fn on the same tensors without torch autograd: the op's overhead.
"""

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as TF

import qkv
import qkv.torch

GRID_TOKENS = 4096
GRID_WIDTH = 512
GRID_L = [128, 256, 512, 1024, 2048, 4096]
GRID_E = [32, 64, 128]
QUICK = [(128, 32), (512, 64), (2048, 128)]


def points(grid):
    shapes = [(L, E) for L in GRID_L for E in GRID_E] if grid else QUICK
    for L, E in shapes:
        for causal in (False, True):
            yield {"name": f"B{GRID_TOKENS // L} H{GRID_WIDTH // E} L{L} E{E}"
                           + (" causal" if causal else ""),
                   "B": GRID_TOKENS // L, "H": GRID_WIDTH // E, "L": L, "E": E,
                   "causal": causal, "mask": False}
    yield {"name": "MiniLM B32 H12 L128 E32 padding", "B": 32, "H": 12, "L": 128, "E": 32,
           "causal": False, "mask": True}


def qkv_direct(q, k, v, **kwargs):
    """qkv without torch autograd: scaled_dot_product_attention_with_grad and
    its grad_fn on the same tensors (what the op costs on top of this)."""
    out, grad_fn = qkv.nn.functional.scaled_dot_product_attention_with_grad(
        q.detach(), k.detach(), v.detach(), **kwargs)

    class Direct:
        def backward(self, grad_out):
            grad_fn(grad_out)

    return Direct()


def make_step(fn, p, dtype):
    g = torch.Generator().manual_seed(0)
    shape = (p["B"], p["H"], p["L"], p["E"])
    q, k, v = (torch.randn(shape, generator=g).to(dtype).requires_grad_() for _ in range(3))
    grad_out = torch.randn(shape, generator=g).to(dtype)
    kwargs = {"is_causal": p["causal"]}
    if p["mask"]:
        # Padding: the last quarter of the keys of every other sequence masked.
        mask = torch.ones(p["B"], 1, 1, p["L"], dtype=torch.bool)
        mask[::2, ..., 3 * p["L"] // 4:] = False
        kwargs["attn_mask"] = mask

    def step():
        for t in (q, k, v):
            t.grad = None
        fn(q, k, v, **kwargs).backward(grad_out)

    return step


def time_interleaved(steps, reps, min_time):
    """Median seconds per call of each step, calls alternating between them."""
    for step in steps:
        step()
    counts = []
    for step in steps:
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < min_time:
            step()
            n += 1
        counts.append(max(n, 1))
    samples = [[] for _ in steps]
    for _ in range(reps):
        for i, step in enumerate(steps):
            start = time.perf_counter()
            for _ in range(counts[i]):
                step()
            samples[i].append((time.perf_counter() - start) / counts[i])
    return [statistics.median(s) for s in samples]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--grid", action="store_true", help="the whole 18-shape grid")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.2)
    parser.add_argument("--threads", type=int, default=None, help="default: every core")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
        qkv.runtime.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    threads = torch.get_num_threads()
    print(f"SDPA forward+backward through torch autograd, {args.dtype}, {threads} threads, "
          f"median of {args.reps}; torch {torch.__version__}, qkv {qkv.__version__}, load "
          f"average {' '.join(f'{x:.2f}' for x in __import__('os').getloadavg())}\n")
    print("| point | qkv op ms | torch ms | torch / qkv op | qkv direct ms | op / direct |")
    print("|---|---:|---:|---:|---:|---:|")
    ratios = []
    for p in points(args.grid):
        steps = [make_step(qkv.torch.scaled_dot_product_attention, p, dtype),
                 make_step(TF.scaled_dot_product_attention, p, dtype),
                 make_step(qkv_direct, p, dtype)]
        ours, theirs, direct = time_interleaved(steps, args.reps, args.min_time)
        ratios.append(theirs / ours)
        print(f"| {p['name']} | {ours * 1e3:.2f} | {theirs * 1e3:.2f} | **{theirs / ours:.2f}** | "
              f"{direct * 1e3:.2f} | {ours / direct:.2f} |", flush=True)
    print(f"\nMedian torch / qkv over {len(ratios)} points: **{statistics.median(ratios):.2f}** "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f})")


if __name__ == "__main__":
    sys.exit(main())
