"""Data-parallel training of a small causal Transformer whose attention is qkv's,
with torch's DistributedDataParallel over gloo (CPU processes).

    PYTHONPATH=$PWD/python .venv/bin/python examples/python/ddp_train.py --world-size 2

Each of N processes holds a replica of the model and 1/N of every batch;
backward all-reduces (averages) the gradients, so every replica takes the same
optimizer step as one process training on the whole batch would. The script
trains both ways, the N processes and then one, and prints how far apart
their parameters end up. On N machines: the same code with MASTER_ADDR set to
the first machine and torchrun (or your scheduler) starting one process per
machine; see docs/scaling.md.
"""

import argparse
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

import qkv.distributed as qd
import qkv.torch


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention on qkv's fused kernels (qkv.torch)."""

    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):  # [B, T, D] -> [B, T, D]
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        out = qkv.torch.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, H, T, E]
        return self.proj(out.transpose(1, 2).reshape(B, T, D))


class TinyLM(nn.Module):
    """A one-block pre-norm Transformer language model over a small vocabulary."""

    def __init__(self, vocab=32, d_model=32, heads=4, max_len=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(0.02 * torch.randn(max_len, d_model))
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.attn = CausalSelfAttention(d_model, heads)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens):  # [B, T] int64 -> logits [B, T, vocab]
        x = self.embed(tokens) + self.pos[:tokens.shape[1]]
        x = x + self.attn(self.norm1(x))
        x = x + self.mlp(self.norm2(x))
        return self.head(self.norm3(x))


def batches(steps, batch, seq, vocab=32, seed=0):
    """`steps` batches [batch, seq + 1] of sequences that count up modulo
    `vocab` with a random start and stride: the next token is predictable from
    the two before it."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        start = torch.randint(0, vocab, (batch, 1), generator=g)
        stride = torch.randint(1, 4, (batch, 1), generator=g)
        out.append((start + stride * torch.arange(seq + 1)) % vocab)
    return out


def build(dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    return TinyLM().to(dtype)


def train(model, data, lr=0.05, shard=None):
    """SGD with momentum on next-token cross-entropy (mean over this process's
    tokens); `shard` = (rank, world_size) takes that share of each batch.
    -> the losses."""
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    for tokens in data:
        if shard is not None:
            tokens = tokens.chunk(shard[1])[shard[0]]
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def ddp_worker(rank, world_size, port, steps, batch, seq, dtypes, out_path):
    """One process of the data-parallel run, once per dtype of `dtypes`: saves
    {dtype name: {"losses", "parameters"}} (this rank's losses, the final
    parameters) to out_path.rank<rank>."""
    qd.init_local_group(rank, world_size, port, timeout_s=60)
    results = {}
    for dtype in dtypes:
        model = nn.parallel.DistributedDataParallel(build(dtype))
        losses = train(model, batches(steps, batch, seq), shard=(rank, world_size))
        state = {name: p.detach().clone() for name, p in model.module.named_parameters()}
        results[str(dtype)] = {"losses": losses, "parameters": state}
    torch.save(results, f"{out_path}.rank{rank}")
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8, help="the whole batch, all ranks")
    parser.add_argument("--seq", type=int, default=24)
    args = parser.parse_args()
    if args.batch % args.world_size:
        sys.exit(f"--batch {args.batch} must be divisible by --world-size {args.world_size}")
    with tempfile.TemporaryDirectory() as tmp:
        out_path = os.path.join(tmp, "ddp")
        mp.start_processes(ddp_worker, nprocs=args.world_size, start_method="spawn",
                           args=(args.world_size, qd.free_port(), args.steps, args.batch, args.seq,
                                 [torch.float32], out_path))
        ddp = torch.load(f"{out_path}.rank0")[str(torch.float32)]
    single = build()
    losses = train(single, batches(args.steps, args.batch, args.seq))
    print(f"{args.world_size} processes, {args.steps} steps: loss {ddp['losses'][0]:.4f} -> "
          f"{ddp['losses'][-1]:.4f} (rank 0's share of the batch)")
    print(f"one process, whole batch:      loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    diff = max((p.detach() - ddp["parameters"][name]).abs().max().item() /
               (p.detach().abs().max().item() + 1e-6)
               for name, p in single.named_parameters())
    print(f"largest relative parameter difference: {diff:.2e}")


if __name__ == "__main__":
    main()
