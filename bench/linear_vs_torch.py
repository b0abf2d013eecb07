#!/usr/bin/env python3
"""Linear layers (y = x Wᵀ + b): qkv (OpenBLAS, or qkv's own GEMV for one row)
against torch 2.13 (oneDNN/MKL), on the shapes of the models the issues run.

    .venv/bin/python bench/linear_vs_torch.py [--threads 2] [--reps 7]

Interleaved qkv/torch, median of --reps repetitions (each ≥ 50 ms of calls)
after a warm-up. Also times OpenBLAS's generic kernels ("Prescott", what
Debian's 0.3.21 picks on this CPU by itself) in a child process, to show why
qkv sets OPENBLAS_CORETYPE (qkv.runtime).
"""

import argparse
import os
import statistics
import subprocess
import sys

import numpy as np
import torch

import qkv
from timing import per_call

# (tokens, in, out): MiniLM-shaped encoder at batch 32 × 128 tokens (QKV/out
# projections, FFN up and down), and one decoding step of the decode benchmark.
SHAPES = [
    (4096, 384, 384, "MiniLM attention projection"),
    (4096, 384, 1536, "MiniLM FFN up"),
    (4096, 1536, 384, "MiniLM FFN down"),
    (128, 384, 384, "1 × 128 tokens projection"),
    (1, 384, 1024, "decode step, FFN up"),
]


def measure(reps, threads):
    torch.set_num_threads(threads)
    qkv.runtime.set_num_threads(threads)
    rows = []
    for m, k, n, label in SHAPES:
        g = torch.Generator().manual_seed(m + k + n)
        x = torch.randn(m, k, generator=g)
        w = torch.randn(n, k, generator=g)
        b = torch.randn(n, generator=g)
        xn, wn, bn = x.numpy(), w.numpy(), b.numpy()
        ours = qkv.nn.functional.linear(xn, wn, bn)
        theirs = torch.nn.functional.linear(x, w, b).numpy()
        err = np.abs(ours - theirs).max() / np.abs(theirs).max()
        tq, tt = [], []
        for _ in range(reps):
            tq.append(per_call(lambda: qkv.nn.functional.linear(xn, wn, bn)))
            with torch.no_grad():
                tt.append(per_call(lambda: torch.nn.functional.linear(x, w, b)))
        q, t = statistics.median(tq), statistics.median(tt)
        flops = 2.0 * m * k * n
        rows.append(dict(label=label, m=m, k=k, n=n, qkv=flops / q / 1e9, torch=flops / t / 1e9,
                         ratio=t / q, err=err))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    rows = measure(args.reps, args.threads)
    if args.json_child:
        print(repr(rows))
        return
    env = dict(os.environ, OPENBLAS_CORETYPE="Prescott")
    out = subprocess.run([sys.executable, __file__, "--json-child", "--threads",
                          str(args.threads), "--reps", str(max(3, args.reps // 2))],
                         env=env, capture_output=True, text=True, check=True).stdout
    generic = {r["label"]: r for r in eval(out)}  # our own child's repr of a list of dicts
    print(f"threads {args.threads}; OpenBLAS kernels: {qkv.runtime.blas_core_name()}; "
          f"load average {os.getloadavg()[0]:.1f}; median of {args.reps}\n")
    print("| shape | tokens × in → out | qkv GFLOP/s | torch GFLOP/s | qkv/torch "
          "| qkv with OpenBLAS Prescott kernels | max rel. diff |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        p = generic[r["label"]]
        print(f"| {r['label']} | {r['m']} × {r['k']} → {r['n']} | {r['qkv']:.1f} | "
              f"{r['torch']:.1f} | **{r['ratio']:.2f}** | {p['qkv']:.1f} | {r['err']:.1e} |")


if __name__ == "__main__":
    main()
