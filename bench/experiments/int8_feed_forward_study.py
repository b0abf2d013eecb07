#!/usr/bin/env python3
"""Could all-MiniLM-L6-v2's feed-forward run in int8 within issue 18's
retrieval bound? A study by simulated quantization, not a timing.

    .venv/bin/python bench/experiments/int8_feed_forward_study.py [--variants ffn:rows:channel,...]

qkv's int8 SentenceEncoder keeps the feed-forward (linear1, linear2) in
bfloat16, because in int8 the nearest neighbours moved (docs/benchmarks.md).
This script asks whether another quantization would let them move to int8.
It runs sentence-transformers' float32 model with chosen linear layers
replaced by quantize-then-dequantize in float32 (weights and activations
rounded as an int8 kernel would see them; the products in float32, which
changes the result by far less than the rounding), everything else exact.
For each variant it reports what tests/test_low_precision_models.cc checks for
qkv: the top-1 neighbour among 1,000 fortune lines agreeing with float32's for
the other 499 lines as queries (int8 must reach 98%), and the cosine of the
embeddings to float32's.

A variant is LAYERS:ACTIVATIONS:WEIGHTS:
  LAYERS       ffn (both), ffn1 (linear1), ffn2 (linear2), attn (q, k, v, out)
  ACTIVATIONS  none (float32), rows (asymmetric uint8 per row: qkv's int8),
               groupG (asymmetric per row and per group of G input features),
               outliersK (the K features of largest |x| in the batch kept in
               float32, the rest as rows)
  WEIGHTS      none (float32), channel (symmetric int8 per output channel:
               qkv's), groupG (symmetric per output channel and group of G)
"""

import argparse
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FORTUNE_TOPICS = ["computers", "science", "food", "politics", "love", "education", "literature",
                  "work", "wisdom", "people"]
DEFAULT_VARIANTS = [
    "attn:rows:channel", "ffn1:rows:channel", "ffn2:rows:channel", "ffn:rows:channel",
    "ffn:none:channel", "ffn:rows:none", "ffn:group128:none", "ffn:group32:group32",
    "ffn:outliers8:channel", "ffn:none:group32",
]


def fortune_lines():
    """As the C++ test: lines of ≥ 40 bytes, no '%' separators, each once."""
    lines, seen = [], set()
    for topic in FORTUNE_TOPICS:
        path = os.path.join("/usr/share/games/fortunes", topic)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f.read().split("\n"):
                if len(line.encode()) >= 40 and not line.startswith("%") and line not in seen:
                    seen.add(line)
                    lines.append(line)
    return lines


def split_corpus(lines):
    """Every third line a query, the others the corpus, up to 1,000 corpus lines."""
    corpus, queries = [], []
    for i, line in enumerate(lines):
        if len(corpus) >= 1000:
            break
        (queries if i % 3 == 2 else corpus).append(line)
    return corpus, queries


# x ≈ scale · (u − zero), u in [0, 255], over the last dimension (0 always exact).
def asymmetric_rows(x):
    lo = x.amin(-1, keepdim=True).clamp(max=0)
    hi = x.amax(-1, keepdim=True).clamp(min=0)
    scale = (hi - lo).clamp(min=1e-12) / 255
    zero = (-lo / scale).round()
    return ((x / scale).round() + zero).clamp(0, 255).sub(zero) * scale


def in_groups(x, group, f):
    """f over groups of `group` features of the last dimension."""
    shape = x.shape
    return f(x.reshape(*shape[:-1], shape[-1] // group, group)).reshape(shape)


def symmetric_rows(w):  # w ≈ scale · q, q in [−127, 127], per row
    scale = w.abs().amax(-1, keepdim=True).clamp(min=1e-12) / 127
    return (w / scale).round().clamp(-127, 127) * scale


def keep_outliers(x, k):
    """The k features largest in |x| over the batch exact, the others as rows."""
    peak = x.reshape(-1, x.shape[-1]).abs().amax(0)
    kept = torch.zeros_like(peak, dtype=torch.bool)
    kept[peak.topk(k).indices] = True
    return torch.where(kept, x, asymmetric_rows(x.masked_fill(kept, 0.0)))


def rounding(name, what, whole, whole_name, outliers=False):
    """The rounding named `name` (none, `whole_name`, groupG or, with
    `outliers`, outliersK) of the activations or weights (`what`)."""
    if name == "none":
        return lambda t: t
    if name == whole_name:
        return whole
    if name.startswith("group"):
        g = int(name[5:])
        return lambda t: in_groups(t, g, whole)
    if outliers and name.startswith("outliers"):
        k = int(name[8:])
        return lambda t: keep_outliers(t, k)
    raise ValueError(f"unknown {what} rounding {name!r}")


def activation_rounding(name):
    return rounding(name, "activation", asymmetric_rows, "rows", outliers=True)


def weight_rounding(name):
    return rounding(name, "weight", symmetric_rows, "channel")


class RoundedLinear(torch.nn.Module):
    """A Linear whose weight and input are rounded as an int8 kernel sees them."""

    def __init__(self, linear, round_x, round_w):
        super().__init__()
        self.round_x = round_x
        self.weight = round_w(linear.weight.data)
        self.bias = linear.bias

    def forward(self, x):
        return torch.nn.functional.linear(self.round_x(x), self.weight, self.bias)


def layers_of(block, which):
    ffn1 = [(block.intermediate, "dense")]
    ffn2 = [(block.output, "dense")]
    attn = [(block.attention.self, n) for n in ("query", "key", "value")]
    attn.append((block.attention.output, "dense"))
    return {"ffn": ffn1 + ffn2, "ffn1": ffn1, "ffn2": ffn2, "attn": attn}[which]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                    help="comma-separated LAYERS:ACTIVATIONS:WEIGHTS (see the top of the file)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    lines = fortune_lines()
    if len(lines) < 1500:
        sys.exit("the fortunes corpus is missing: apt-get install fortunes")
    corpus, queries = split_corpus(lines)

    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(a.model, device="cpu")
    bert = model[0].auto_model

    def embed(texts):
        return model.encode(texts, batch_size=32, convert_to_tensor=True,
                            normalize_embeddings=True).double()

    exact_corpus, exact_queries = embed(corpus), embed(queries)
    exact_nearest = (exact_queries @ exact_corpus.T).argmax(1)
    print(f"all-MiniLM-L6-v2, {len(corpus)} corpus lines, {len(queries)} queries; "
          "top-1 must agree with float32 for ≥ 98% in int8")
    print()
    print("| layers | activations | weights | top-1 as float32 | min cosine | mean cosine |")
    print("|---|---|---|---:|---:|---:|")
    for variant in a.variants.split(","):
        which, x_name, w_name = variant.split(":")
        round_x, round_w = activation_rounding(x_name), weight_rounding(w_name)
        replaced = []
        for block in bert.encoder.layer:
            for owner, attr in layers_of(block, which):
                linear = getattr(owner, attr)
                replaced.append((owner, attr, linear))
                setattr(owner, attr, RoundedLinear(linear, round_x, round_w))
        try:
            low_corpus, low_queries = embed(corpus), embed(queries)
        finally:
            for owner, attr, linear in replaced:
                setattr(owner, attr, linear)
        same = int(((low_queries @ low_corpus.T).argmax(1) == exact_nearest).sum())
        cos = torch.cat([(low_corpus * exact_corpus).sum(1), (low_queries * exact_queries).sum(1)])
        print(f"| {which} | {x_name} | {w_name} | {same}/{len(queries)} "
              f"({100 * same / len(queries):.1f}%) | {cos.min():.6f} | {cos.mean():.7f} |",
              flush=True)


if __name__ == "__main__":
    main()
