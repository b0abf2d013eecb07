#!/usr/bin/env python3
"""qkv's scaled_dot_product_attention against torch's, in one run, on the same inputs.

    .venv/bin/python bench/attention_vs_torch.py --out bench/results/attention_vs_torch.md \\
        --plot docs/attention_gflops.png

Both are called from Python on the same float32 tensors (qkv reads torch's
memory in place, through numpy views), interleaved: qkv, torch, qkv, torch …
Each repetition times enough calls to last --min-time seconds; a point is the
median over --reps repetitions after a warm-up. Both use the same thread
count (default: every core; torch.set_num_threads for torch).

FLOPs, as the field counts them: forward 4·B·H·L·S·E (half for causal),
backward 2.5× the forward. The backward is timed alone: qkv's grad_fn(dO)
from scaled_dot_product_attention_with_grad against torch.autograd.grad on a
retained graph, each after its own forward outside the timing.

Sections of the report:
  grid      B·L = 4,096 tokens, H·E = 512, L ∈ {128 … 4096}, E ∈ {32, 64, 128},
            causal and not, forward and backward; fp32 and bf16 (qkv takes
            torch.bfloat16 tensors: bfloat16 products, vdpbf16ps on CPUs with
            AVX512_BF16, float32 softmax and sums; the forward also times
            float32 tensors with precision="bfloat16"). The bf16 headline
            includes qkv bf16 against qkv fp32 on the same point, and names
            the kernel that ran for bf16.
  named     MiniLM (B 32, H 12, L 128, E 32, padding mask), BERT-base (B 8, H 12,
            L 512, E 64)
  decode    one query against S cached keys, GQA 9:3, E 64, through the 30 layers
            of a SmolLM-135M-sized model (each call reads another layer's cache,
            as decoding does); GB/s of K and V read
  python    small shapes called from Python (B 1, H 8, E 64, L = S ≤ 256): per-call
            time including each library's Python overhead

The headline is the median over the grid of qkv/torch, forward and backward,
and qkv's % of the FP32 peak that qkv.runtime.measure_fp32_peak_gflops()
measures in the same run (the largest of several measurements between points).
"""

import argparse
import datetime
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as TF

import qkv

QF = qkv.nn.functional

GRID_TOKENS = 4096
GRID_WIDTH = 512  # H·E
GRID_L = [128, 256, 512, 1024, 2048, 4096]
GRID_E = [32, 64, 128]
DECODE_S = [128, 256, 512, 1024, 2048, 4096, 8192]
DECODE_LAYERS = 30
SMALL_L = [16, 32, 64, 128, 256]
PASSES = ["forward", "backward"]  # --passes
FP32_FLOOR = 1.3  # issue 18: every fp32 grid point at least this many times torch
# A kernel with softmax, packing and tile edges besides its FMAs does not run
# above this % of the FP32 peak: a floor that would need more is out of reach.
OUT_OF_REACH_PCT = 95


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# --- Timing -----------------------------------------------------------------


class Interleaved:
    """Times several callables on one point, round-robin, and keeps medians.

    Each callable is warmed up, then given a number of calls per repetition
    so that one repetition lasts about min_time seconds. The repetitions go
    a, b, c, a, b, c, …, so slow drifts of the machine hit all alike.
    """

    def __init__(self, reps, min_time):
        self.reps = reps
        self.min_time = min_time

    @staticmethod
    def _time(fn, n):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - start) / n

    def run(self, fns):
        calls = {}
        for name, fn in fns.items():
            fn()  # warm-up: allocations, first-touch, lazy initialisation
            one = self._time(fn, 1)
            calls[name] = max(1, min(1000, math.ceil(self.min_time / max(one, 1e-7))))
        times = {name: [] for name in fns}
        gc.collect()
        gc.disable()
        try:
            for _ in range(self.reps):
                for name, fn in fns.items():
                    times[name].append(self._time(fn, calls[name]))
        finally:
            gc.enable()
        return {name: statistics.median(t) for name, t in times.items()}


class Peak:
    """The machine's FP32 peak, measured now and then through the run."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.samples = []

    def sample(self):
        self.samples.append(qkv.runtime.measure_fp32_peak_gflops(self.seconds))
        return self.samples[-1]

    @property
    def value(self):
        return max(self.samples)


# --- The two libraries on one point -----------------------------------------


def attention_flops(B, H, L, S, E, causal):
    flops = 4.0 * B * H * L * S * E
    return flops / 2 if causal else flops


def make_inputs(B, H, Hkv, L, S, E, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, L, E, generator=g, dtype=torch.float32).to(dtype)
    k = torch.randn(B, Hkv, S, E, generator=g, dtype=torch.float32).to(dtype)
    v = torch.randn(B, Hkv, S, E, generator=g, dtype=torch.float32).to(dtype)
    dout = torch.randn(B, H, L, E, generator=g, dtype=torch.float32).to(dtype)
    return q, k, v, dout


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-30))


class Point:
    """Forward and backward callables of qkv and torch for one shape."""

    def __init__(self, B, H, L, S, E, causal=False, Hkv=None, mask=None, seed=0):
        self.Hkv = Hkv or H
        self.kwargs = dict(is_causal=causal, enable_gqa=self.Hkv != H)
        self.q, self.k, self.v, self.dout = make_inputs(B, H, self.Hkv, L, S, E, seed)
        self.mask = mask
        # qkv reads the same memory through numpy views.
        self.np = [x.numpy() for x in (self.q, self.k, self.v, self.dout)]
        self.np_mask = None if mask is None else mask.numpy()

    def bf16_inputs(self):
        """q, k, v, dout and the mask as torch.bfloat16 (a bool mask stays bool)."""
        mask = self.mask
        if mask is not None and mask.dtype != torch.bool:
            mask = mask.bfloat16()
        return [x.bfloat16() for x in (self.q, self.k, self.v, self.dout)] + [mask]

    # forward
    def qkv_forward(self, dtype=torch.float32, precision="float32"):
        q, k, v, _ = self.np
        mask = self.np_mask
        if dtype == torch.bfloat16:
            q, k, v, _, mask = self.bf16_inputs()
        return lambda: QF.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                       precision=precision, **self.kwargs)

    def torch_forward(self, dtype=torch.float32):
        q, k, v = (x.to(dtype) for x in (self.q, self.k, self.v))

        def run():
            with torch.no_grad():
                return TF.scaled_dot_product_attention(q, k, v, attn_mask=self.mask,
                                                       **self.kwargs)

        return run

    # backward (after a forward outside the timing)
    def qkv_backward(self, dtype=torch.float32):
        q, k, v, dout = self.np
        mask = self.np_mask
        if dtype == torch.bfloat16:
            q, k, v, dout, mask = self.bf16_inputs()
        _, grad_fn = QF.scaled_dot_product_attention_with_grad(q, k, v, attn_mask=mask,
                                                               **self.kwargs)
        return lambda: grad_fn(dout)

    def torch_backward(self, dtype=torch.float32):
        q, k, v = (x.to(dtype).requires_grad_() for x in (self.q, self.k, self.v))
        dout = self.dout.to(dtype)
        out = TF.scaled_dot_product_attention(q, k, v, attn_mask=self.mask, **self.kwargs)
        return lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

    def check(self):
        """qkv agrees with torch here (a benchmark of wrong results is worthless)."""
        ours = self.qkv_forward()()
        theirs = self.torch_forward()().numpy()
        err = rel_err(ours, theirs)
        if "backward" in PASSES:
            grads = self.qkv_backward()()
            ref = self.torch_backward()()
            err = max([err] + [rel_err(a, b.numpy()) for a, b in zip(grads, ref)])
        if err > 1e-4:
            log(f"  WARNING: qkv and torch differ here: relative error {err:.2g}")
        return err


# --- Sections ----------------------------------------------------------------


def grid_shapes(quick):
    Ls = [128, 512, 2048] if quick else GRID_L
    Es = [64] if quick else GRID_E
    for E in Es:
        for causal in (False, True):
            for L in Ls:
                yield dict(B=GRID_TOKENS // L, H=GRID_WIDTH // E, L=L, S=L, E=E, causal=causal)


def bench_point(timer, shape, bf16, label, peak, mask=None, seed=0):
    """Forward and backward rows (dicts) of one shape."""
    B, H, L, S, E, causal = (shape[x] for x in ("B", "H", "L", "S", "E", "causal"))
    p = Point(B, H, L, S, E, causal, mask=mask, seed=seed)
    err = p.check()
    flops = attention_flops(B, H, L, S, E, causal)
    rows = []
    for pass_name, mult in (("forward", 1.0), ("backward", 2.5)):
        if pass_name not in PASSES:
            continue
        make = {"forward": (p.qkv_forward, p.torch_forward),
                "backward": (p.qkv_backward, p.torch_backward)}[pass_name]
        fns = {"qkv": make[0](), "torch": make[1]()}
        bf16_kernel = None
        if bf16:
            fns["qkv_bf16"] = make[0](torch.bfloat16)
            fns["torch_bf16"] = make[1](torch.bfloat16)
            if pass_name == "forward":
                # float32 tensors with bfloat16 products (what a model in
                # bf16 precision calls)
                fns["qkv_f32_bf16p"] = make[0](precision="bfloat16")
                fns["qkv_bf16"]()
                bf16_kernel = qkv.runtime.last_sdpa_kernel()
        t = timer.run(fns)
        del fns
        row = dict(shape, label=label, pass_=pass_name, err=err,
                   **{f"{n}_s": s for n, s in t.items()},
                   **{f"{n}_gflops": mult * flops / s / 1e9 for n, s in t.items()})
        row["ratio"] = t["torch"] / t["qkv"]
        if bf16:
            row["qkv_bf16_kernel"] = bf16_kernel
            row["bf16_vs_fp32"] = t["qkv"] / t["qkv_bf16"]
        row["qkv_peak_pct"] = 100 * row["qkv_gflops"] / peak.value
        row["torch_peak_pct"] = 100 * row["torch_gflops"] / peak.value
        rows.append(row)
        bf = (f"; bf16 qkv {row['qkv_bf16_gflops']:.0f}, torch {row['torch_bf16_gflops']:.0f}"
              f" (qkv bf16/fp32 {row['bf16_vs_fp32']:.2f}x"
              + (f", fp32 in precision=bf16 {row['qkv_f32_bf16p_gflops']:.0f}"
                 f", kernel {bf16_kernel}" if bf16_kernel else "") + ")"
              if bf16 else "")
        log(f"  {pass_name:8s} qkv {row['qkv_gflops']:7.1f} GFLOP/s ({row['qkv_peak_pct']:.0f}% "
            f"of peak), torch {row['torch_gflops']:7.1f}{bf} -> qkv/torch {row['ratio']:.2f}")
    return rows


def run_grid(timer, args, peak):
    shapes = list(grid_shapes(args.quick))
    rows = []
    for i, shape in enumerate(shapes):
        log(f"[grid {i + 1}/{len(shapes)}] B={shape['B']} H={shape['H']} L={shape['L']} "
            f"E={shape['E']} causal={shape['causal']}")
        rows += bench_point(timer, shape, args.bf16, "grid", peak, seed=i)
        peak.sample()
    return rows


def padding_mask(B, S, seed):
    """bool [B, 1, 1, S], True = a real token; lengths uniform in [S/4, S]."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(S // 4, S + 1, (B,), generator=g)
    return (torch.arange(S)[None, :] < lengths[:, None]).reshape(B, 1, 1, S)


def run_named(timer, args, peak):
    rows = []
    log("[named] MiniLM: B=32 H=12 L=128 E=32, padding mask")
    shape = dict(B=32, H=12, L=128, S=128, E=32, causal=False)
    rows += bench_point(timer, shape, args.bf16, "MiniLM (padding mask)", peak,
                        mask=padding_mask(32, 128, 1), seed=101)
    log("[named] BERT-base: B=8 H=12 L=512 E=64")
    shape = dict(B=8, H=12, L=512, S=512, E=64, causal=False)
    rows += bench_point(timer, shape, args.bf16, "BERT-base", peak, seed=102)
    peak.sample()
    return rows


def run_decode(timer, args, peak):
    """One new query per head against S cached keys, GQA 9:3, E 64, 30 layers."""
    rows = []
    H, Hkv, E = 9, 3, 64
    for S in ([128, 1024, 8192] if args.quick else DECODE_S):
        layers = [Point(1, H, 1, S, E, Hkv=Hkv, seed=1000 * S + i) for i in range(DECODE_LAYERS)]
        err = layers[0].check()
        qkv_calls = [p.qkv_forward() for p in layers]
        torch_calls = [p.torch_forward() for p in layers]

        def cycle(calls):
            state = [0]

            def run():
                calls[state[0]]()
                state[0] = (state[0] + 1) % len(calls)

            return run

        t = timer.run({"qkv": cycle(qkv_calls), "torch": cycle(torch_calls)})
        kv_bytes = 2 * Hkv * S * E * 4
        row = dict(S=S, H=H, Hkv=Hkv, E=E, err=err, qkv_s=t["qkv"], torch_s=t["torch"],
                   qkv_gbs=kv_bytes / t["qkv"] / 1e9, torch_gbs=kv_bytes / t["torch"] / 1e9,
                   ratio=t["torch"] / t["qkv"])
        rows.append(row)
        log(f"[decode] S={S}: qkv {row['qkv_s'] * 1e6:.1f} µs ({row['qkv_gbs']:.1f} GB/s), "
            f"torch {row['torch_s'] * 1e6:.1f} µs ({row['torch_gbs']:.1f} GB/s) -> "
            f"{row['ratio']:.2f}")
        del layers, qkv_calls, torch_calls
    peak.sample()
    return rows


def run_small(timer, args, peak):
    rows = []
    for causal in (False, True):
        for L in ([16, 128] if args.quick else SMALL_L):
            log(f"[python] B=1 H=8 L=S={L} E=64 causal={causal}")
            shape = dict(B=1, H=8, L=L, S=L, E=64, causal=causal)
            for row in bench_point(timer, shape, False, "python", peak, seed=L + causal):
                rows.append(row)
    peak.sample()
    return rows


# --- Report ------------------------------------------------------------------


def machine_facts():
    facts = {"python": platform.python_version(), "torch": torch.__version__,
             "numpy": np.__version__, "qkv": qkv.__version__,
             "qkv_isa": qkv.runtime.kernel_isa(), "isas": qkv.runtime.supported_isas(),
             "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in lscpu.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("Model name", "CPU(s)", "Thread(s) per core", "L2 cache",
                               "L3 cache"):
                facts[key.strip()] = value.strip()
        flags = next((ln.split(":", 1)[1].split() for ln in lscpu.splitlines()
                      if ln.startswith("Flags")), [])
        facts["simd_flags"] = " ".join(f for f in flags if f.startswith(("avx", "amx", "fma")))
    except (OSError, subprocess.CalledProcessError):
        facts["Model name"] = platform.processor()
    try:
        facts["load_average"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        pass
    return facts


def fmt(x, digits=0):
    return "n/a" if x is None else f"{x:.{digits}f}"


def median_of(rows, key, pred=lambda r: True):
    values = [r[key] for r in rows if pred(r)]
    return statistics.median(values) if values else None


def headline(res):
    grid, small = res["grid"], res["python"]
    is_fwd = lambda r: r["pass_"] == "forward"
    is_bwd = lambda r: r["pass_"] == "backward"
    big = lambda r: is_fwd(r) and r["E"] >= 64 and r["L"] >= 512 and not r["causal"]
    h = {
        "forward_ratio": median_of(grid, "ratio", is_fwd),
        "backward_ratio": median_of(grid, "ratio", is_bwd),
        "peak_pct_E64_L512": median_of(grid, "qkv_peak_pct", big),
        "peak_pct_E64_L512_min": min((r["qkv_peak_pct"] for r in grid if big(r)), default=None),
        "grid_small_ratio": median_of(grid, "ratio", lambda r: r["L"] <= 256),
        "python_forward_ratio": median_of(small, "ratio", is_fwd),
        "python_backward_ratio": median_of(small, "ratio", is_bwd),
        "decode_ratio": median_of(res["decode"], "ratio"),
        # Issue 18's floor: every fp32 point at >= 1.3x torch. For a point below
        # it, 1.3x torch's rate as a % of the FP32 peak is what qkv would need.
        "below_floor": sum(r["ratio"] < FP32_FLOOR for r in grid),
        "below_floor_out_of_reach": sum(
            r["ratio"] < FP32_FLOOR and FP32_FLOOR * r["torch_peak_pct"] >= OUT_OF_REACH_PCT
            for r in grid),
    }
    if any("torch_bf16_gflops" in r for r in grid):
        for r in grid:
            r["bf16_ratio"] = r["torch_bf16_s"] / r["qkv_bf16_s"]
            r["bf16_vs_fp32"] = r["qkv_s"] / r["qkv_bf16_s"]
            if "qkv_f32_bf16p_s" in r:
                r["f32_bf16p_vs_fp32"] = r["qkv_s"] / r["qkv_f32_bf16p_s"]
        h["bf16_forward_ratio"] = median_of(grid, "bf16_ratio", is_fwd)
        h["bf16_backward_ratio"] = median_of(grid, "bf16_ratio", is_bwd)
        h["bf16_vs_fp32_forward"] = median_of(grid, "bf16_vs_fp32", is_fwd)
        h["f32_bf16p_vs_fp32_forward"] = median_of(
            grid, "f32_bf16p_vs_fp32", lambda r: is_fwd(r) and "f32_bf16p_vs_fp32" in r)
        h["bf16_kernels"] = sorted({r["qkv_bf16_kernel"] for r in grid
                                    if r.get("qkv_bf16_kernel")})
    return h


def markdown(res, command):
    peak = res["peak"]
    h = res["headline"]
    m = res["machine"]
    out = []
    add = out.append
    add(f"Command: `{command}`  ")
    add(f"Date: {res['date']}; threads: {res['threads']} for qkv and for torch; "
        f"repetitions: median of {res['reps']} (each ≥ {res['min_time'] * 1e3:.0f} ms) "
        f"after a warm-up, interleaved qkv/torch.  ")
    add(f"Machine: {m.get('Model name', '?')}, {m.get('CPU(s)', '?')} CPUs "
        f"({m.get('Thread(s) per core', '?')} thread per core), L2 {m.get('L2 cache', '?')}, "
        f"L3 {m.get('L3 cache', '?')}; SIMD flags: {m.get('simd_flags', '?')}.  ")
    add(f"qkv {m['qkv']} kernel `{res['kernel']}` (ISAs: {', '.join(m['isas'])}); torch "
        f"{m['torch']} (CPU capability {m['torch_cpu_capability']}); Python {m['python']}.  ")
    add(f"Load average before / after: {res['load_before']} / {res['load_after']}.  ")
    add(f"FP32 peak measured in this run: **{peak['max']:.0f} GFLOP/s** (max of "
        f"{len(peak['samples'])} measurements between points; median {peak['median']:.0f}, "
        f"min {peak['min']:.0f}). % of peak uses the max.")
    add("")
    add("#### Headline")
    add("")
    add("| measure | value |")
    add("| --- | --- |")
    add(f"| forward fp32, median over the grid of qkv/torch | **{fmt(h['forward_ratio'], 2)}×** |")
    add(f"| backward fp32, median over the grid of qkv/torch | **{fmt(h['backward_ratio'], 2)}×** |")
    add(f"| forward % of FP32 peak, E ≥ 64, L ≥ 512, non-causal (median; min) | "
        f"**{fmt(h['peak_pct_E64_L512'])}%**; {fmt(h['peak_pct_E64_L512_min'])}% |")
    add(f"| grid points with L ≤ 256, median qkv/torch (fwd and bwd) | "
        f"{fmt(h['grid_small_ratio'], 2)}× |")
    add(f"| small shapes called from Python (L ≤ 256), median qkv/torch forward; backward | "
        f"**{fmt(h['python_forward_ratio'], 2)}×**; {fmt(h['python_backward_ratio'], 2)}× |")
    add(f"| decode (GQA 9:3), median qkv/torch | {fmt(h['decode_ratio'], 2)}× |")
    add(f"| fp32 grid points below {FP32_FLOOR}× torch; of them, where {FP32_FLOOR}× torch "
        f"would need ≥ {OUT_OF_REACH_PCT}% of the FP32 peak | {h['below_floor']}; "
        f"{h['below_floor_out_of_reach']} |")
    if "bf16_forward_ratio" in h:
        add(f"| bf16, median over the grid of qkv/torch, forward; backward | "
            f"**{fmt(h['bf16_forward_ratio'], 2)}×**; {fmt(h['bf16_backward_ratio'], 2)}× |")
        add(f"| qkv bf16 forward vs qkv fp32 forward, median over the grid (kernel "
            f"{', '.join(h.get('bf16_kernels') or ['?'])}) | "
            f"**{fmt(h.get('bf16_vs_fp32_forward'), 2)}×** |")
        add(f"| qkv fp32 tensors with precision=bfloat16 vs fp32, forward median | "
            f"{fmt(h.get('f32_bf16p_vs_fp32_forward'), 2)}× |")
    add("")

    def point_table(rows, first_cols):
        bf16 = any("torch_bf16_gflops" in r for r in rows)
        head = first_cols + ["pass", "qkv GFLOP/s", "torch GFLOP/s", "qkv/torch", "qkv % peak",
                             "torch % peak"]
        if bf16:
            head += ["qkv bf16 GFLOP/s", "torch bf16 GFLOP/s", "qkv bf16/fp32",
                     "qkv fp32 prec=bf16 GFLOP/s"]
        add("| " + " | ".join(head) + " |")
        add("|" + " --- |" * len(head))
        for r in rows:
            cells = [r["label"] if c == "shape" else str(r[c]) for c in first_cols]
            cells += [r["pass_"][:3], fmt(r["qkv_gflops"], 1), fmt(r["torch_gflops"], 1),
                      f"**{r['ratio']:.2f}**", fmt(r["qkv_peak_pct"]), fmt(r["torch_peak_pct"])]
            if bf16:
                cells += [fmt(r.get("qkv_bf16_gflops"), 1), fmt(r.get("torch_bf16_gflops"), 1),
                          fmt(r.get("bf16_vs_fp32"), 2), fmt(r.get("qkv_f32_bf16p_gflops"), 1)]
            add("| " + " | ".join(cells) + " |")
        add("")

    add("#### Grid: B·L = 4,096 tokens, H·E = 512, fp32")
    add("")
    point_table(res["grid"], ["L", "E", "B", "H", "causal"])
    add("#### Named points")
    add("")
    point_table(res["named"], ["shape", "B", "H", "L", "E"])
    add("FLOPs of MiniLM count every key, padded or not (the same count for both).")
    add("")
    add(f"#### Decode: 1 query against S cached keys, GQA 9:3 (H 9, Hkv 3), E 64, "
        f"{DECODE_LAYERS} layers")
    add("")
    add("Each call reads the next layer's K/V cache (as one decoding step through the model "
        "does), so large caches come from memory, not from a warm L2. GB/s counts the K and V "
        "bytes of the call (2 · Hkv · S · E · 4).")
    add("")
    add("| S | qkv µs | torch µs | qkv GB/s | torch GB/s | qkv/torch |")
    add("| --- | --- | --- | --- | --- | --- |")
    for r in res["decode"]:
        add(f"| {r['S']} | {r['qkv_s'] * 1e6:.1f} | {r['torch_s'] * 1e6:.1f} | "
            f"{r['qkv_gbs']:.1f} | {r['torch_gbs']:.1f} | **{r['ratio']:.2f}** |")
    add("")
    add("#### Small shapes called from Python: B 1, H 8, E 64, L = S")
    add("")
    add("Time per call from Python, each library's own call overhead included "
        "(qkv: numpy in, numpy out; torch: tensors, no_grad forward, autograd.grad backward).")
    add("")
    add("| L | causal | pass | qkv µs | torch µs | qkv/torch |")
    add("| --- | --- | --- | --- | --- | --- |")
    for r in res["python"]:
        add(f"| {r['L']} | {r['causal']} | {r['pass_'][:3]} | {r['qkv_s'] * 1e6:.1f} | "
            f"{r['torch_s'] * 1e6:.1f} | **{r['ratio']:.2f}** |")
    add("")
    worst = sorted(res["grid"], key=lambda r: r["ratio"])[:6]
    add("#### Weakest grid points (lowest qkv/torch)")
    add("")
    for r in worst:
        add(f"- L {r['L']}, E {r['E']}, {'causal' if r['causal'] else 'non-causal'}, "
            f"{r['pass_']}: {r['ratio']:.2f}× ({r['qkv_gflops']:.0f} vs "
            f"{r['torch_gflops']:.0f} GFLOP/s, {r['qkv_peak_pct']:.0f}% of peak; "
            f"{FP32_FLOOR}× torch would need {FP32_FLOOR * r['torch_peak_pct']:.0f}%)")
    add("")
    return "\n".join(out)


def plot(res, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = res["grid"]
    Es = sorted({r["E"] for r in grid})
    fig, axes = plt.subplots(2, len(Es), figsize=(max(4.2 * len(Es), 6.5), 8), sharex=True,
                             squeeze=False)
    for col, E in enumerate(Es):
        for row_i, pass_name in enumerate(("forward", "backward")):
            ax = axes[row_i][col]
            for causal, style in ((False, "-"), (True, "--")):
                pts = sorted((r for r in grid if r["E"] == E and r["pass_"] == pass_name
                              and r["causal"] == causal), key=lambda r: r["L"])
                if not pts:
                    continue
                Ls = [r["L"] for r in pts]
                tag = " causal" if causal else ""
                ax.plot(Ls, [r["qkv_gflops"] for r in pts], style, marker="o", color="C0",
                        label=f"qkv fp32{tag}")
                ax.plot(Ls, [r["torch_gflops"] for r in pts], style, marker="s", color="C1",
                        label=f"torch fp32{tag}")
                if "qkv_bf16_gflops" in pts[0]:
                    ax.plot(Ls, [r["qkv_bf16_gflops"] for r in pts], style, marker="v",
                            color="C0", alpha=0.6, label=f"qkv bf16{tag}")
                if "torch_bf16_gflops" in pts[0]:
                    ax.plot(Ls, [r["torch_bf16_gflops"] for r in pts], style, marker="^",
                            color="C2", alpha=0.6, label=f"torch bf16{tag}")
            ax.axhline(res["peak"]["max"], color="gray", lw=0.8, ls=":")
            ax.set_xscale("log", base=2)
            ticks = sorted({r["L"] for r in grid})
            ax.set_xticks(ticks, [str(L) for L in ticks])
            ax.minorticks_off()
            ax.set_ylim(bottom=0)
            ax.set_title(f"{pass_name}, E = {E}, H = {GRID_WIDTH // E}")
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel("GFLOP/s")
            if row_i == 1:
                ax.set_xlabel("L (B = 4096 / L)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8)
    fig.suptitle(f"qkv vs torch {torch.__version__} SDPA, B·L = 4096, H·E = 512\n"
                 f"{res['machine'].get('Model name', '')}, {res['threads']} threads; "
                 f"dotted: FP32 peak {res['peak']['max']:.0f} GFLOP/s", fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a small subset (smoke test)")
    ap.add_argument("--reps", type=int, default=7, help="repetitions per point (≥ 5; median)")
    ap.add_argument("--min-time", type=float, default=0.05,
                    help="seconds each repetition lasts at least (calls are repeated)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="threads for both libraries (default: every core)")
    ap.add_argument("--no-bf16", dest="bf16", action="store_false",
                    help="skip the bf16 points")
    ap.add_argument("--sections", default="grid,named,decode,python",
                    help="comma-separated subset of grid,named,decode,python")
    ap.add_argument("--passes", default="forward,backward",
                    help="comma-separated subset of forward,backward (grid, named, python)")
    ap.add_argument("--out", default="attention_vs_torch.md", help="markdown report to write")
    ap.add_argument("--json", default=None, help="also write the raw results here")
    ap.add_argument("--plot", default=None, help="write the GFLOP/s-against-L plot (PNG) here")
    ap.add_argument("--from-json", default=None,
                    help="measure nothing: rewrite the report and plot from a --json file")
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            res = json.load(f)
        res["headline"] = headline(res)
        write_outputs(res, res.get("command", "?"), args)
        return
    if args.reps < 5 and not args.quick:
        ap.error("--reps must be at least 5 (use --quick for a smoke test)")
    if args.quick:
        args.min_time = min(args.min_time, 0.02)
        args.reps = min(args.reps, 5)

    PASSES[:] = args.passes.split(",")
    torch.set_num_threads(args.threads)
    qkv.runtime.set_num_threads(args.threads)
    command = "python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    log(f"qkv {qkv.__version__} ({qkv.runtime.kernel_isa()}) vs torch {torch.__version__}, "
        f"{args.threads} threads, load {load_before}")
    peak = Peak(0.3)
    log(f"FP32 peak: {peak.sample():.0f} GFLOP/s")

    timer = Interleaved(args.reps, args.min_time)
    sections = args.sections.split(",")
    res = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
           "threads": args.threads, "reps": args.reps, "min_time": args.min_time,
           "machine": machine_facts(), "load_before": load_before}
    runners = {"grid": run_grid, "named": run_named, "decode": run_decode, "python": run_small}
    for name in ("grid", "named", "decode", "python"):
        res[name] = runners[name](timer, args, peak) if name in sections else []
    # The kernel qkv ran for float32 (the forward of the last point).
    QF.scaled_dot_product_attention(*(np.ones((1, 1, 2, 2), np.float32),) * 3)
    res["kernel"] = qkv.runtime.last_sdpa_kernel()
    peak.sample()
    res["peak"] = {"samples": peak.samples, "max": peak.value,
                   "median": statistics.median(peak.samples), "min": min(peak.samples)}
    res["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    # % of peak against the final (largest) measurement.
    for r in res["grid"] + res["named"] + res["python"]:
        r["qkv_peak_pct"] = 100 * r["qkv_gflops"] / peak.value
        r["torch_peak_pct"] = 100 * r["torch_gflops"] / peak.value
    res["headline"] = headline(res)
    res["command"] = command
    write_outputs(res, command, args)


def write_outputs(res, command, args):
    report = markdown(res, command)
    print(report)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(report + "\n")
    log(f"wrote {args.out}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
        log(f"wrote {args.json}")
    if args.plot and res["grid"]:
        plot(res, args.plot)
        log(f"wrote {args.plot}")
    h = res["headline"]
    log(f"headline: forward {fmt(h['forward_ratio'], 2)}x, backward {fmt(h['backward_ratio'], 2)}x"
        f" torch; {fmt(h['peak_pct_E64_L512'])}% of peak (E>=64, L>=512, non-causal); "
        f"Python small shapes {fmt(h['python_forward_ratio'], 2)}x")


if __name__ == "__main__":
    main()
