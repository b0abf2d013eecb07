#!/usr/bin/env python3
"""Sentence embeddings with all-MiniLM-L6-v2: qkv.SentenceEncoder against
sentence-transformers (torch 2.13) and ONNX Runtime on a torch.onnx.export of
the same weights, side by side in one run.

    .venv/bin/pip install -r bench/requirements.txt      # onnxruntime, onnx, onnxscript
    .venv/bin/python bench/embeddings_vs_peers.py [--reps 5] [--out FILE]

Every implementation gets the same texts and does the same work per batch:
tokenization + BERT forward + mean pooling + L2 normalisation (qkv: its own
WordPiece; sentence-transformers and ORT: the HF `tokenizers` tokenizer; for
ORT the pooling and normalisation are inside the exported graph). Each text is
built from single-token words so that it is exactly `tokens` tokens long,
[CLS] and [SEP] included, so no padding is computed. The embeddings of all
three are compared (cosine >= 0.99999) before timing. Timing: implementations
and thread counts {1, 2} interleaved, median of --reps repetitions (each >= 50
ms of calls after a warm-up); each peer is reported at its faster thread count.
torch also runs bfloat16 (autocast-free: the model cast to bf16); qkv and ORT
have no bfloat16 path for this model (n/a).
"""

import argparse
import os
import statistics
import sys
import tempfile

import numpy as np
import torch

import qkv
from timing import per_call

SHAPES = [(1, 16), (1, 128), (32, 32), (32, 128), (8, 256)]
THREADS = (1, 2)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def single_token_words(tokenizer, vocab_file, count=400):
    """Lower-case words that the tokenizer keeps as one token."""
    words = []
    with open(vocab_file, encoding="utf-8") as f:
        for line in f:
            w = line.strip()
            if w.isascii() and w.isalpha() and w.islower() and 3 <= len(w) <= 8:
                if len(tokenizer.encode(w, add_special_tokens=False)) == 1:
                    words.append(w)
            if len(words) >= count:
                break
    return words


def make_texts(words, batch, tokens, seed):
    """`batch` texts of exactly `tokens` tokens ([CLS] + tokens-2 words + [SEP])."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(words, tokens - 2)) for _ in range(batch)]


class PooledBert(torch.nn.Module):
    """HF BertModel + mean pooling over real tokens + L2 normalisation, what
    sentence-transformers computes for all-MiniLM-L6-v2, as one graph for ONNX."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        h = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                      token_type_ids=token_type_ids).last_hidden_state
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2.0, dim=1)


def export_onnx(st_model, path):
    bert = st_model[0].auto_model.float().eval()
    wrapper = PooledBert(bert).eval()
    ids = torch.ones(2, 8, dtype=torch.int64)
    args = (ids, torch.ones_like(ids), torch.zeros_like(ids))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        torch.onnx.export(wrapper, args, path, input_names=names, output_names=["embedding"],
                          dynamic_axes=axes | {"embedding": {0: "batch"}}, opset_version=18,
                          dynamo=False)
    except Exception as e:  # the legacy exporter may be gone: the dynamo one
        print(f"legacy ONNX export failed ({e}); using dynamo=True", file=sys.stderr)
        batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence")
        shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq},
                  "token_type_ids": {0: batch, 1: seq}}
        torch.onnx.export(wrapper, args, path, input_names=names, output_names=["embedding"],
                          dynamic_shapes=shapes, opset_version=18, dynamo=True)


class OrtEncoder:
    def __init__(self, path, tokenizer, threads):
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        self.tokenizer = tokenizer

    def encode(self, texts):
        t = self.tokenizer(texts, padding=True, truncation=True, max_length=256,
                           return_tensors="np")
        feed = {k: t[k].astype(np.int64) for k in ("input_ids", "attention_mask",
                                                    "token_type_ids")}
        return self.session.run(None, feed)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--onnx", default=os.path.join(tempfile.gettempdir(), "qkv-bench",
                                                   "all-MiniLM-L6-v2-pooled.onnx"),
                    help="exported here unless it exists")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-bf16", action="store_true", help="skip torch bfloat16")
    ap.add_argument("--out", help="also write the markdown here")
    ap.add_argument("--shapes", help="comma-separated BATCHxTOKENS subset, e.g. 1x16,32x128")
    a = ap.parse_args()

    from sentence_transformers import SentenceTransformer
    st = SentenceTransformer(a.model, device="cpu")
    st.eval()
    tok = st.tokenizer
    if not os.path.exists(a.onnx):
        export_onnx(st, a.onnx)
    st_bf16 = None if a.no_bf16 else SentenceTransformer(a.model, device="cpu").to(torch.bfloat16)
    ours = qkv.SentenceEncoder(a.model)
    orts = {t: OrtEncoder(a.onnx, tok, t) for t in THREADS}
    import onnxruntime

    def set_threads(t):
        torch.set_num_threads(t)
        qkv.runtime.set_num_threads(t)

    impls = {
        "qkv": lambda texts, b: ours.encode(texts, batch_size=b),
        "sentence-transformers": lambda texts, b: st.encode(texts, batch_size=b,
                                                            convert_to_numpy=True),
        "onnxruntime": None,  # per thread count, below
    }
    if st_bf16 is not None:
        impls["torch bf16"] = lambda texts, b: st_bf16.encode(texts, batch_size=b,
                                                              convert_to_numpy=True)

    words = single_token_words(tok, os.path.join(a.model, "vocab.txt"))
    rows = []
    shapes = SHAPES
    if a.shapes:
        shapes = [tuple(int(n) for n in s.split("x")) for s in a.shapes.split(",")]
    for batch, tokens in shapes:
        texts = make_texts(words, batch, tokens, seed=batch * 1000 + tokens)
        lengths = {len(tok(t)["input_ids"]) for t in texts} | {len(ours.token_ids(t))
                                                               for t in texts}
        assert lengths == {tokens}, f"token counts {lengths}, wanted {tokens}"
        fns = {}
        for name, fn in impls.items():
            for t in THREADS:
                if name == "onnxruntime":
                    fns[(name, t)] = (lambda o: lambda: o.encode(texts))(orts[t])
                else:
                    fns[(name, t)] = (lambda f: lambda: f(texts, batch))(fn)
        # Same embeddings first.
        set_threads(2)
        ref = np.asarray(fns[("sentence-transformers", 2)](), dtype=np.float64)
        cos = {}
        for name in impls:
            e = np.asarray(fns[(name, 2)](), dtype=np.float64)
            c = (e * ref).sum(1) / np.linalg.norm(e, axis=1) / np.linalg.norm(ref, axis=1)
            cos[name] = c.min()
            if name != "torch bf16":
                assert c.min() >= 0.99999, f"{name} at {batch}x{tokens}: cosine {c.min()}"
        times = {k: [] for k in fns}
        for _ in range(a.reps):
            for (name, t), fn in fns.items():
                set_threads(t)
                times[(name, t)].append(per_call(fn))
        med = {k: statistics.median(v) for k, v in times.items()}
        best = {}
        for name in impls:
            t = min(THREADS, key=lambda th: med[(name, th)])
            best[name] = (med[(name, t)], t)
        rows.append((batch, tokens, best, cos))
        print(f"{batch}x{tokens}: " + ", ".join(
            f"{n} {1e3 * s:.2f} ms ({t}t)" for n, (s, t) in best.items()), flush=True)

    load = os.getloadavg()
    names = list(impls)
    lines = [
        f"all-MiniLM-L6-v2, texts of exactly `tokens` tokens, tokenization + forward + mean "
        f"pooling + normalisation for every implementation; median of {a.reps} interleaved reps; "
        f"each at its faster of {{1, 2}} threads (in brackets). torch {torch.__version__}, "
        f"onnxruntime {onnxruntime.__version__}; load average {load[0]:.2f} {load[1]:.2f} "
        f"{load[2]:.2f} at the end.",
        "",
        "| batch × tokens | " + " | ".join(f"{n} sent/s (ms/batch)" for n in names)
        + " | qkv bf16 | min cosine vs s-t (qkv / ORT" + (" / bf16" if "torch bf16" in names else "")
        + ") |",
        "|---|" + "---:|" * (len(names) + 2),
    ]
    for batch, tokens, best, cos in rows:
        cells = [f"{batch / s:,.0f} ({1e3 * s:.2f}, {t}t)" for s, t in (best[n] for n in names)]
        cs = [f"{cos['qkv']:.7f}", f"{cos['onnxruntime']:.7f}"]
        if "torch bf16" in cos:
            cs.append(f"{cos['torch bf16']:.5f}")
        lines.append(f"| {batch} × {tokens} | " + " | ".join(cells) + " | n/a | "
                     + " / ".join(cs) + " |")
    by = {(b, t): best for b, t, best, _ in rows}
    if (32, 128) in by:
        q, o, s = (by[(32, 128)][n][0] for n in ("qkv", "onnxruntime", "sentence-transformers"))
        lines += ["", f"Throughput at 32 × 128: qkv / ORT = {o / q:.2f}, "
                  f"qkv / sentence-transformers = {s / q:.2f}."]
    if (1, 16) in by:
        q1, o1 = (by[(1, 16)][n][0] for n in ("qkv", "onnxruntime"))
        lines += ["", f"Latency at 1 × 16: qkv {1e3 * q1:.2f} ms, ORT {1e3 * o1:.2f} ms "
                  f"(qkv / ORT = {q1 / o1:.2f})."]
    text = "\n".join(lines)
    print()
    print(text)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
