#!/usr/bin/env python3
"""One training step of Hugging Face's BertModel at MiniLM shape with
attn_implementation="qkv" against "sdpa" (transformers 5.24, torch 2.13).

    .venv/bin/python bench/hf_bert_train_step.py [--threads 2] [--reps 7] [--model DIR]

The model: all-MiniLM-L6-v2's config (6 layers, d_model 384, 12 heads, FFN 1536)
from --model (models/all-MiniLM-L6-v2; random weights from that config when
absent), dropout 0, on a batch of 32 sequences × 128 tokens, a quarter of
them padded to half length (so the mask is there, as in real batches). A step
is forward, loss = mean squared error of the mean-pooled embedding against
fixed targets, backward, AdamW (lr 1e-4) and zero_grad; everything but the
attention is the same torch code in both. The two alternate, the median of
--reps steps each after a warm-up step; before timing, the losses of one step
are compared.
"""

import argparse
import pathlib
import statistics
import time

import torch
import transformers

import qkv.torch  # noqa: F401  (registers attn_implementation="qkv")

BATCH, TOKENS = 32, 128
ROOT = pathlib.Path(__file__).resolve().parents[1]


def build(name, model_dir):
    torch.manual_seed(0)
    kwargs = dict(attn_implementation=name, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0)
    if (model_dir / "model.safetensors").exists():
        return transformers.BertModel.from_pretrained(model_dir, add_pooling_layer=False,
                                                      **kwargs)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                                     num_attention_heads=12, intermediate_size=1536, **kwargs)
    return transformers.BertModel(config, add_pooling_layer=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--model", type=pathlib.Path, default=ROOT / "models" / "all-MiniLM-L6-v2")
    a = parser.parse_args()
    torch.set_num_threads(a.threads)
    qkv.runtime.set_num_threads(a.threads)

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1000, 30000, (BATCH, TOKENS), generator=gen)
    mask = torch.ones(BATCH, TOKENS, dtype=torch.int64)
    mask[::4, TOKENS // 2:] = 0
    targets = torch.randn(BATCH, 384, generator=gen)
    weights = mask[..., None].float()

    runs = {}
    for name in ("qkv", "sdpa"):
        model = build(name, a.model).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step(model=model, opt=opt):
            hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
            pooled = (hidden * weights).sum(1) / weights.sum(1)
            loss = torch.nn.functional.mse_loss(pooled, targets)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss.item()

        runs[name] = (step, [])
    first = {name: step() for name, (step, _) in runs.items()}  # warm-up, same start
    print(f"first-step loss: qkv {first['qkv']:.6f}, sdpa {first['sdpa']:.6f}")
    for _ in range(a.reps):
        for name, (step, times) in runs.items():
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
    med = {name: statistics.median(times) for name, (_, times) in runs.items()}
    print(f"HF BertModel training step, {BATCH} x {TOKENS}, {a.threads} threads, "
          f"median of {a.reps}:")
    for name in ("qkv", "sdpa"):
        print(f"  {name:5s} {med[name] * 1e3:8.1f} ms   (min {min(runs[name][1]) * 1e3:.1f})")
    print(f"  sdpa / qkv = {med['sdpa'] / med['qkv']:.2f}x")


if __name__ == "__main__":
    main()
