#!/usr/bin/env python3
"""Whole Hugging Face models with attn_implementation="qkv" against "sdpa"
(transformers 5.24, torch 2.13): is a model faster when only its attention
changes?

    .venv/bin/python bench/hf_models_vs_sdpa.py [--threads 2] [--reps 3] [--quick]
                                                [--only ROW_PREFIX]

Rows (issue 42's grid):
  MiniLM inference / training step at 32 x 128 and 8 x 512: BertModel from
      models/all-MiniLM-L6-v2 (random weights of its config when absent),
      a quarter of the sequences padded to half length; the step is forward,
      MSE of the mean-pooled output, backward, zero_grad.
  SmolLM2 prefill of 512 and 4,096 tokens, greedy generation of 128 tokens
      after 4,096 and of 32 after 256 (where each step's attention is small
      and the cost of a call shows): LlamaForCausalLM from
      models/SmolLM2-135M-Instruct.Q4_1.gguf (dequantized by transformers;
      random weights of SmolLM2-135M's shape when absent or with --random).
  Gemma 3 prefill at 4,096 tokens: Gemma3ForCausalLM of gemma-3-270m's shape
      (18 layers, sliding window 512 on 5 of every 6 layers), random weights.

One model per row, switched between "qkv" and "sdpa" with
set_attn_implementation; the two alternate, the median of --reps runs each
after a warm-up run; speedup = sdpa time / qkv time. One more run of each
under the torch profiler counts its aten::copy_ calls (issue 42 wants qkv to
add none per layer) and the time inside attention ops (forward and backward);
ceiling = the speedup if qkv's attention took no time at all, sdpa time /
(sdpa time - sdpa's attention time): Amdahl's bound for this row. --quick runs every row at toy sizes (< 1 min) to check
the script, not to measure (1-2 layer models).
"""

import argparse
import pathlib
import statistics
import time

import torch
import transformers

import qkv
import qkv.torch  # noqa: F401  (registers attn_implementation="qkv")

ROOT = pathlib.Path(__file__).resolve().parents[1]
MINILM = ROOT / "models" / "all-MiniLM-L6-v2"
SMOLLM2 = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
IMPLEMENTATIONS = ("sdpa", "qkv")


def minilm(quick):
    if (MINILM / "model.safetensors").exists() and not quick:
        return transformers.BertModel.from_pretrained(MINILM, add_pooling_layer=False,
                                                      hidden_dropout_prob=0.0,
                                                      attention_probs_dropout_prob=0.0)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=384,
                                     num_hidden_layers=1 if quick else 6,
                                     num_attention_heads=12, intermediate_size=1536,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return transformers.BertModel(config, add_pooling_layer=False)


def smollm2(random_weights, quick):
    if SMOLLM2.exists() and not (random_weights or quick):
        return transformers.AutoModelForCausalLM.from_pretrained(
            SMOLLM2.parent, gguf_file=SMOLLM2.name, torch_dtype=torch.float32)
    config = transformers.LlamaConfig(
        vocab_size=1024 if quick else 49152, hidden_size=576, intermediate_size=1536,
        num_hidden_layers=1 if quick else 30,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
        rope_theta=100000.0, tie_word_embeddings=True)
    return transformers.LlamaForCausalLM(config)


def gemma3(quick):
    config = transformers.Gemma3TextConfig(
        vocab_size=1024 if quick else 262144, hidden_size=640, intermediate_size=2048,
        num_hidden_layers=2 if quick else 18, sliding_window=64 if quick else 512,
        num_attention_heads=4, num_key_value_heads=1, head_dim=256,
        query_pre_attn_scalar=256, max_position_embeddings=32768)
    return transformers.Gemma3ForCausalLM(config)


def padded_batch(batch, tokens, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(vocab // 2, vocab, (batch, tokens), generator=g)
    mask = torch.ones_like(ids)
    mask[: max(1, batch // 4), tokens // 2:] = 0  # a quarter padded to half length
    return ids, mask


def minilm_rows(model, shapes):
    rows = []
    for batch, tokens in shapes:
        ids, mask = padded_batch(batch, tokens, model.config.vocab_size)

        def infer(ids=ids, mask=mask):
            with torch.no_grad():
                model(input_ids=ids, attention_mask=mask)

        def train(ids=ids, mask=mask):
            out = model(input_ids=ids, attention_mask=mask).last_hidden_state
            pooled = (out * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
            pooled.square().mean().backward()
            model.zero_grad(set_to_none=True)

        rows.append((f"MiniLM inference {batch} x {tokens}", model, infer, "eval"))
        rows.append((f"MiniLM training step {batch} x {tokens}", model, train, "train"))
    return rows


def causal_lm_rows(name, model, prefills, generations):
    rows = []
    high = min(model.config.vocab_size, 30000)  # token ids drawn from [high / 2, high)
    for tokens in prefills:
        ids = torch.randint(high // 2, high, (1, tokens), generator=torch.Generator().manual_seed(1))

        def prefill(ids=ids):
            with torch.no_grad():
                model(input_ids=ids, use_cache=False, logits_to_keep=1)

        rows.append((f"{name} prefill {tokens}", model, prefill, "eval"))
    for prompt, new in generations:
        ids = torch.randint(high // 2, high, (1, prompt), generator=torch.Generator().manual_seed(2))

        def generate(ids=ids, new=new):
            with torch.no_grad():
                model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                               min_new_tokens=new, do_sample=False, pad_token_id=0)

        rows.append((f"{name} greedy {new} after {prompt}", model, generate, "eval"))
    return rows


def use(model, implementation, mode):
    model.set_attn_implementation(implementation)
    model.train(mode == "train")


def _is_attention(event):
    return "scaled_dot_product" in event.name


def profile_row(model, fn, implementation, mode):
    """(aten::copy_ calls, milliseconds inside attention ops) in one run under
    the torch profiler: the outermost events whose name holds
    "scaled_dot_product", forward and backward, kernels and their checks."""
    use(model, implementation, mode)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    events = prof.events()
    n_copies = sum(1 for e in events if e.name == "aten::copy_")
    attention_us = 0.0
    for e in events:
        if not _is_attention(e):
            continue
        parent = e.cpu_parent
        while parent is not None and not _is_attention(parent):
            parent = parent.cpu_parent
        if parent is None:
            attention_us += e.cpu_time_total
    return n_copies, attention_us / 1e3


def time_row(model, fn, mode, reps):
    """Median seconds per implementation, the two alternating."""
    times = {name: [] for name in IMPLEMENTATIONS}
    for name in IMPLEMENTATIONS:  # warm-up
        use(model, name, mode)
        fn()
    for _ in range(reps):
        for name in IMPLEMENTATIONS:
            use(model, name, mode)
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="toy sizes, 1-2 layers, random weights, one rep: checks the script")
    parser.add_argument("--random", action="store_true", help="random SmolLM2 weights")
    parser.add_argument("--only", default="", help="run the rows whose name starts with this")
    a = parser.parse_args()
    torch.set_num_threads(a.threads)
    qkv.runtime.set_num_threads(a.threads)
    torch.manual_seed(0)

    if a.quick:
        reps, bert_shapes, prefills, generations, gemma_prefill = 1, [(4, 32)], [64], [(64, 4)], 128
    else:
        reps, bert_shapes = a.reps, [(32, 128), (8, 512)]
        prefills, generations, gemma_prefill = [512, 4096], [(4096, 128), (256, 32)], 4096

    builders = [
        ("MiniLM", lambda: minilm_rows(minilm(a.quick), bert_shapes)),
        ("SmolLM2", lambda: causal_lm_rows("SmolLM2", smollm2(a.random, a.quick), prefills,
                                           generations)),
        ("Gemma 3", lambda: causal_lm_rows("Gemma 3", gemma3(a.quick), [gemma_prefill], [])),
    ]
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{a.threads} threads, median of {reps}{' (--quick: toy sizes)' if a.quick else ''}")
    print(f"{'row':<36} {'sdpa ms':>10} {'qkv ms':>10} {'speedup':>8} {'copy_ sdpa/qkv':>15} "
          f"{'attention ms sdpa/qkv':>22} {'ceiling':>8}")
    for family, build in builders:
        if a.only and not (family.startswith(a.only) or a.only.startswith(family)):
            continue
        for name, model, fn, mode in build():
            if a.only and not name.startswith(a.only):
                continue
            profiled = {impl: profile_row(model, fn, impl, mode) for impl in IMPLEMENTATIONS}
            t = time_row(model, fn, mode, reps)
            (copies_sdpa, attention_sdpa), (copies_qkv, attention_qkv) = (
                profiled["sdpa"], profiled["qkv"])
            # The speedup if qkv's attention took no time at all: the rest of
            # the model (sdpa's time less its attention) bounds any gain.
            ceiling = t["sdpa"] / max(t["sdpa"] - attention_sdpa / 1e3, 1e-9)
            print(f"{name:<36} {t['sdpa'] * 1e3:>10.1f} {t['qkv'] * 1e3:>10.1f} "
                  f"{t['sdpa'] / t['qkv']:>7.2f}x {copies_sdpa:>7}/{copies_qkv:<7} "
                  f"{attention_sdpa:>11.1f}/{attention_qkv:<10.1f} {ceiling:>7.2f}x", flush=True)


if __name__ == "__main__":
    main()
