#!/usr/bin/env python3
"""One training step of a MiniLM-shaped Transformer encoder: qkv against torch 2.13 eager.

    .venv/bin/python bench/train_step_vs_torch.py [--threads 2] [--reps 5] [--out report.md]

The model (issue 5): 6 post-norm encoder layers, d_model 384, 12 heads, FFN 1536, GELU,
batch-first, dropout 0 (so both libraries compute the same numbers), on a batch of 32 × 128
token vectors. A step is forward, backward from a fixed output gradient (the gradient of
loss = Σ out ⊙ G), AdamW (lr 1e-4, weight decay 0.01) and zero_grad:

    torch: out = enc(x); (out * G).sum().backward(); opt.step(); opt.zero_grad()
    qkv:   out, grad_fn = enc.forward_with_grad(x); grad_fn(G); opt.step(); enc.zero_grad()

Both start from the same state_dict; before timing, the outputs and the parameter gradients
of one forward and backward are compared. qkv and torch alternate, the median of --reps steps each is reported
after a warm-up step.

The floor: in the same rounds, the step's linear-layer matrix products alone (forward, input and
weight gradients of the 24 linear layers, run by torch.mm/addmm, i.e. torch's own BLAS) and its
attention alone (forward and backward of the 6 layers, qkv's fused kernels, the faster of the
two) are timed too. No step that does this arithmetic can beat torch by more than torch's step
divided by their sum, whatever it does about everything else.
"""

import argparse
import datetime
import os
import platform
import statistics
import time

import numpy as np
import torch

import qkv

D, HEADS, FFN, LAYERS, BATCH, TOKENS = 384, 12, 1536, 6, 32, 128


def torch_model(seed):
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(D, HEADS, FFN, dropout=0.0, activation="gelu",
                                             batch_first=True)
    return torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)


def qkv_model(state):
    layer = qkv.nn.TransformerEncoderLayer(D, HEADS, FFN, dropout=0.0, activation="gelu",
                                           batch_first=True)
    enc = qkv.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
    enc.load_state_dict(state)
    return enc


class TorchStep:
    def __init__(self, model, x, g):
        self.model, self.x, self.g = model, x, g
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)

    def __call__(self):
        out = self.model(self.x)
        (out * self.g).sum().backward()
        self.opt.step()
        self.opt.zero_grad()
        return out


class QkvStep:
    def __init__(self, model, x, g):
        self.model, self.x, self.g = model, x, g
        self.opt = qkv.optim.AdamW(model, lr=1e-4, weight_decay=0.01)

    def __call__(self):
        out, grad_fn = self.model.forward_with_grad(self.x)
        grad_fn(self.g)
        self.opt.step()
        self.model.zero_grad()
        return out


def parity(seed):
    """Forward and backward of each from the same start: max relative differences of the
    output and of the parameter gradients (each relative to its tensor's largest entry).
    (AdamW itself is tested against torch.optim in python/tests/test_optim_parity.py.)"""
    tm = torch_model(seed)
    qm = qkv_model({k: v.detach().numpy().copy() for k, v in tm.state_dict().items()})
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(BATCH, TOKENS, D, generator=gen)
    g = torch.randn(BATCH, TOKENS, D, generator=gen) / (BATCH * TOKENS)
    out_t = tm(x)
    (out_t * g).sum().backward()
    out_q, grad_fn = qm.forward_with_grad(x.numpy())
    grad_fn(g.numpy())
    out_err = np.abs(out_q - out_t.detach().numpy()).max() / out_t.abs().max().item()
    grads_q = qm.named_grads()
    grad_err = 0.0
    for name, p in tm.named_parameters():
        want = p.grad.numpy()
        grad_err = max(grad_err, np.abs(grads_q[name] - want).max() / np.abs(want).max())
    return out_err, grad_err


class LinearMatmuls:
    """The matrix products of the step's linear layers, in torch, on buffers of their shapes.

    Per layer: in_proj (D -> 3D), out_proj (D -> D), FFN (D -> FFN -> D); for each one y = x Wᵀ,
    dx += dy W and dW += dyᵀ x, except the first layer's in_proj input gradient, which torch
    skips because the input needs none.
    """

    def __init__(self):
        tokens = BATCH * TOKENS
        self.linears = []
        for n_in, n_out in ((D, 3 * D), (D, D), (D, FFN), (FFN, D)):
            self.linears.append(dict(x=torch.randn(tokens, n_in), w=torch.randn(n_out, n_in),
                                     y=torch.empty(tokens, n_out), dy=torch.randn(tokens, n_out),
                                     dx=torch.zeros(tokens, n_in), dw=torch.zeros(n_out, n_in)))

    def __call__(self):
        for layer in range(LAYERS):
            for i, b in enumerate(self.linears):
                torch.mm(b["x"], b["w"].t(), out=b["y"])
                if layer > 0 or i > 0:
                    b["dx"].addmm_(b["dy"], b["w"])
                b["dw"].addmm_(b["dy"].t(), b["x"])


class Attention:
    """The step's attention alone, forward and backward of every layer, with qkv's fused
    kernels (faster than torch's here): B × H × L × E = 32 × 12 × 128 × 32, no mask."""

    def __init__(self, seed):
        rng = np.random.default_rng(seed)
        shape = (BATCH, HEADS, TOKENS, D // HEADS)
        self.q, self.k, self.v, self.go = (rng.standard_normal(shape).astype(np.float32)
                                           for _ in range(4))

    def __call__(self):
        for _ in range(LAYERS):
            _, grad_fn = qkv.nn.functional.scaled_dot_product_attention_with_grad(
                self.q, self.k, self.v)
            grad_fn(self.go)


def measure(threads, reps, seed):
    torch.set_num_threads(threads)
    qkv.runtime.set_num_threads(threads)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, TOKENS, D, generator=gen)
    g = torch.randn(BATCH, TOKENS, D, generator=gen) / (BATCH * TOKENS)
    tm = torch_model(seed)
    qm = qkv_model({k: v.detach().numpy().copy() for k, v in tm.state_dict().items()})
    steps = {"torch": TorchStep(tm, x, g), "qkv": QkvStep(qm, x.numpy(), g.numpy()),
             "matmuls": LinearMatmuls(), "attention": Attention(seed)}
    for step in steps.values():  # warm-up: allocations, optimizer state
        step()
    times = {name: [] for name in steps}
    for _ in range(reps):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return times


def flops_per_step():
    """Forward matmul FLOPs × 3 (backward is twice the forward)."""
    tokens = BATCH * TOKENS
    linear = 2 * tokens * (4 * D * D + 2 * D * FFN)
    attention = 2 * 2 * BATCH * TOKENS * TOKENS * D
    return 3 * LAYERS * (linear + attention)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default=str(os.cpu_count()),
                    help="thread counts to try, comma-separated")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="also write the markdown report here")
    args = ap.parse_args()

    out_err, grad_err = parity(args.seed)
    print(f"parity: output {out_err:.1e}, parameter gradients {grad_err:.1e} (relative)")
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        times = measure(threads, args.reps, args.seed)
        q, t = statistics.median(times["qkv"]), statistics.median(times["torch"])
        m = statistics.median(times["matmuls"])
        a = statistics.median(times["attention"])
        rows.append((threads, q, t, m, a, times))
        print(f"threads {threads}: qkv {q * 1e3:.0f} ms, torch {t * 1e3:.0f} ms per step "
              f"-> {t / q:.2f}x; linear matmuls {m * 1e3:.0f} ms + attention {a * 1e3:.0f} ms "
              f"alone (bound {t / (m + a):.2f}x)")

    gflop = flops_per_step() / 1e9
    lines = [
        f"Training step, {datetime.date.today()}: {LAYERS} post-norm encoder layers, d_model {D}, "
        f"{HEADS} heads, FFN {FFN} (GELU), batch {BATCH} × {TOKENS} tokens, dropout 0, AdamW; "
        f"median of {args.reps} interleaved steps after a warm-up step (~{gflop:.0f} GFLOP per "
        f"step).",
        "",
        f"torch {torch.__version__}, qkv {qkv.__version__} (BLAS kernels "
        f"{qkv.runtime.blas_core_name()}), {platform.machine()}, {os.cpu_count()} cores, load "
        f"average at the end {os.getloadavg()[0]:.1f}; parity: output {out_err:.1e}, parameter "
        f"gradients {grad_err:.1e} (relative).",
        "",
        "| threads | qkv ms/step | torch ms/step | qkv / torch | qkv GFLOP/s | qkv range | "
        "torch range | linear matmuls alone, ms | attention alone, ms | "
        "bound: torch step / (matmuls + attention) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for threads, q, t, m, a, times in rows:
        lines.append(
            f"| {threads} | {q * 1e3:.0f} | {t * 1e3:.0f} | {t / q:.2f}× | {gflop / q:.0f} | "
            f"{min(times['qkv']) * 1e3:.0f}–{max(times['qkv']) * 1e3:.0f} | "
            f"{min(times['torch']) * 1e3:.0f}–{max(times['torch']) * 1e3:.0f} | "
            f"{m * 1e3:.0f} | {a * 1e3:.0f} | {t / (m + a):.2f}× |")
    report = "\n".join(lines) + "\n"
    print()
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)


if __name__ == "__main__":
    main()
