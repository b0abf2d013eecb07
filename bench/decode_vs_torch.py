#!/usr/bin/env python3
"""Decoding tokens/s at batch 1: qkv's DecoderSession against the same model in torch eager.

    .venv/bin/python bench/decode_vs_torch.py --out bench/results/decode_vs_torch.md

The model: 6 layers, d_model 384, 6 heads (head dim 64), SwiGLU FFN of 1,024,
RMSNorm, RoPE (half-split), byte vocabulary (256), tied output head — a
qkv.DecoderModel with random weights. The torch model is written below with
the same parameter names and loads qkv's state_dict unchanged; the script
checks that both compute the same logits before timing.

Each repetition: reset the caches, feed a prompt of --prompt tokens in one pass
(not timed), then time --new greedy decoding steps, each feeding the previous
token back, so the context grows to prompt + new (1,024 by default). qkv runs
the whole loop in C++ (session.decode); torch runs the usual eager loop with
its own preallocated KV cache (slice assignment, F.scaled_dot_product_attention
over the filled part) under torch.inference_mode. Repetitions alternate qkv,
torch, qkv, torch …; the result is the median over --reps repetitions after a
warm-up, for each thread count in --threads (torch.set_num_threads and
qkv.runtime.set_num_threads); the headline compares each library at its best
thread count.
"""

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import qkv


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# --- The same model in torch ----------------------------------------------------------


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.q_proj = torch.nn.Linear(d, d, bias=False)
        self.k_proj = torch.nn.Linear(d, d, bias=False)
        self.v_proj = torch.nn.Linear(d, d, bias=False)
        self.o_proj = torch.nn.Linear(d, d, bias=False)


class FeedForward(torch.nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.w1 = torch.nn.Linear(d, hidden, bias=False)
        self.w2 = torch.nn.Linear(hidden, d, bias=False)
        self.w3 = torch.nn.Linear(d, hidden, bias=False)


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention_norm = torch.nn.RMSNorm(c.d_model, eps=c.norm_eps)
        self.attention = Attention(c.d_model, c.num_heads)
        self.ffn_norm = torch.nn.RMSNorm(c.d_model, eps=c.norm_eps)
        self.feed_forward = FeedForward(c.d_model, c.ffn_hidden)


class TorchDecoder(torch.nn.Module):
    """LLaMA-style decoder with qkv.DecoderModel's parameter names, and a KV cache."""

    def __init__(self, c, max_len):
        super().__init__()
        self.c = c
        self.tok_embeddings = torch.nn.Embedding(c.vocab_size, c.d_model)
        self.layers = torch.nn.ModuleList(Block(c) for _ in range(c.num_layers))
        self.norm = torch.nn.RMSNorm(c.d_model, eps=c.norm_eps)
        E = c.d_model // c.num_heads
        inv = c.rope_base ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)
        angles = torch.arange(max_len, dtype=torch.float64)[:, None] * inv[None]
        self.cos = torch.cat([angles.cos(), angles.cos()], -1).float()
        self.sin = torch.cat([angles.sin(), angles.sin()], -1).float()
        shape = (1, c.num_heads, max_len, E)
        self.k_cache = [torch.zeros(shape) for _ in range(c.num_layers)]
        self.v_cache = [torch.zeros(shape) for _ in range(c.num_layers)]

    def forward(self, ids, pos):
        """ids: [1, T] at positions pos … pos+T-1 (pos = 0 for T > 1) -> logits [1, T, vocab]."""
        B, T = ids.shape
        H, E = self.c.num_heads, self.c.d_model // self.c.num_heads
        cos, sin = self.cos[pos:pos + T], self.sin[pos:pos + T]
        x = self.tok_embeddings(ids)
        for layer, kc, vc in zip(self.layers, self.k_cache, self.v_cache):
            a, f = layer.attention, layer.feed_forward
            h = layer.attention_norm(x)
            q = a.q_proj(h).view(B, T, H, E).transpose(1, 2)
            k = a.k_proj(h).view(B, T, H, E).transpose(1, 2)
            v = a.v_proj(h).view(B, T, H, E).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            kc[:, :, pos:pos + T] = k
            vc[:, :, pos:pos + T] = v
            o = F.scaled_dot_product_attention(q, kc[:, :, :pos + T], vc[:, :, :pos + T],
                                               is_causal=T > 1)
            x = x + a.o_proj(o.transpose(1, 2).reshape(B, T, -1))
            h = layer.ffn_norm(x)
            x = x + f.w2(F.silu(f.w1(h)) * f.w3(h))
        return F.linear(self.norm(x), self.tok_embeddings.weight)


# --- The two decoding loops ---------------------------------------------------------


def qkv_run(session, prompt, new):
    session.reset()
    session.prefill(prompt)
    start = time.perf_counter()
    ids = session.decode(new, temperature=0.0)
    return time.perf_counter() - start, ids


def torch_run(model, prompt, new):
    with torch.inference_mode():
        logits = model(torch.tensor([prompt]), 0)
        pos = len(prompt)
        start = time.perf_counter()
        ids = []
        token = logits[:, -1].argmax(-1, keepdim=True)  # [1, 1]
        for i in range(new):
            ids.append(token)
            if i + 1 < new:
                token = model(token, pos)[:, -1].argmax(-1, keepdim=True)
                pos += 1
        seconds = time.perf_counter() - start
    return seconds, [int(t) for t in torch.cat(ids, 1)[0]]


def check_parity(qmodel, tmodel, vocab, rng):
    ids = rng.integers(0, vocab, size=64).tolist()
    ours = qmodel(ids)
    with torch.inference_mode():
        theirs = tmodel(torch.tensor([ids]), 0).numpy()
    return float(np.max(np.abs(ours - theirs))), float(np.max(np.abs(theirs)))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--prompt", type=int, default=512, help="prompt tokens (not timed)")
    p.add_argument("--new", type=int, default=512, help="decoding steps timed")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", default="1,2", help="thread counts to try, comma-separated")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="also write the markdown report here")
    args = p.parse_args()

    context = args.prompt + args.new
    config = qkv.DecoderModelConfig(d_model=args.d_model, num_layers=args.layers,
                                    num_heads=args.heads, max_seq_len=context)
    qmodel = qkv.DecoderModel(config, generator=qkv.Generator(args.seed))
    c = qmodel.config
    torch.manual_seed(args.seed)
    tmodel = TorchDecoder(c, context).eval()
    tmodel.load_state_dict({k: torch.from_numpy(v) for k, v in qmodel.state_dict().items()})
    rng = np.random.default_rng(args.seed)
    max_diff, scale = check_parity(qmodel, tmodel, c.vocab_size, rng)
    log(f"parity: max |logit difference| {max_diff:.2e} (largest logit {scale:.1f})")
    if max_diff > 1e-4 * max(1.0, scale):
        sys.exit(f"the two models disagree (max difference {max_diff}); not timing them")

    prompt = rng.integers(0, c.vocab_size, size=args.prompt).tolist()
    session = qmodel.session(max_len=context)
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        qkv.runtime.set_num_threads(threads)
        qkv_run(session, prompt, 32)  # warm-up
        torch_run(tmodel, prompt, 32)
        qs, ts = [], []
        agree = None
        for rep in range(args.reps):
            q_seconds, q_ids = qkv_run(session, prompt, args.new)
            t_seconds, t_ids = torch_run(tmodel, prompt, args.new)
            qs.append(args.new / q_seconds)
            ts.append(args.new / t_seconds)
            if agree is None:  # greedy tokens equal up to the first near-tie
                agree = next((i for i, (a, b) in enumerate(zip(q_ids, t_ids)) if a != b),
                             len(q_ids))
            log(f"threads {threads} rep {rep}: qkv {qs[-1]:.1f} tok/s, torch {ts[-1]:.1f} tok/s")
        rows.append((threads, statistics.median(qs), statistics.median(ts), min(qs), max(qs),
                     min(ts), max(ts), agree))

    best_q = max(rows, key=lambda r: r[1])
    best_t = max(rows, key=lambda r: r[2])
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    lines = [
        f"Decoding at batch 1, {datetime.date.today()}: {c.num_layers} layers, d_model "
        f"{c.d_model}, {c.num_heads} heads, SwiGLU {c.ffn_hidden}, vocab {c.vocab_size}, "
        f"prompt {args.prompt} + {args.new} greedy steps (context {context}); "
        f"median of {args.reps} interleaved repetitions.",
        "",
        f"torch {torch.__version__}, qkv {qkv.__version__} (kernels {qkv.runtime.kernel_isa()}), "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load average at the end {load[0]:.2f}; parity: max |Δlogit| {max_diff:.1e}.",
        "",
        "| threads | qkv tok/s | torch tok/s | qkv / torch | qkv range | torch range | "
        "same greedy tokens |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for threads, q, t, qmin, qmax, tmin, tmax, agree in rows:
        lines.append(f"| {threads} | {q:.1f} | {t:.1f} | {q / t:.2f}× | {qmin:.0f}–{qmax:.0f} | "
                     f"{tmin:.0f}–{tmax:.0f} | {agree} of {args.new} |")
    lines += [
        "",
        f"Best of each: qkv {best_q[1]:.1f} tok/s ({best_q[0]} thread(s)), torch {best_t[2]:.1f} "
        f"tok/s ({best_t[0]} thread(s)): **{best_q[1] / best_t[2]:.2f}×**.",
    ]
    report = "\n".join(lines)
    print(report)
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            f.write(report + "\n")


if __name__ == "__main__":
    main()
