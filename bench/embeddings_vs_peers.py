#!/usr/bin/env python3
"""Sentence embeddings with all-MiniLM-L6-v2: qkv.SentenceEncoder at float32,
bfloat16 and int8 against the CPU inference engines (sentence-transformers on
torch 2.13 in float32 and bfloat16, ONNX Runtime float32 and int8, CTranslate2
int8, OpenVINO f32 and bf16), side by side in one run.

    .venv/bin/pip install -r bench/requirements.txt   # onnxruntime, onnx, ctranslate2, openvino
    .venv/bin/python bench/embeddings_vs_peers.py [--reps 5] [--out FILE]
                     [--shapes 1x16,32x128] [--threads 1,2] [--skip ct2,openvino,...]

Every implementation gets the same texts and does the same work per batch:
tokenization + BERT forward + mean pooling + L2 normalisation (qkv: its own
WordPiece; every peer: the HF `tokenizers` tokenizer). Each text is built from
single-token words so that it is exactly `tokens` tokens long, [CLS] and [SEP]
included, so no padding is computed. Before timing, every implementation's
embeddings are compared with sentence-transformers float32: float32 ones must
reach cosine >= 0.999; bfloat16 and int8 ones are flagged in the table below
0.99 but still timed (only below 0.5, a wiring error rather than rounding,
stops the run): ORT's per-tensor int8 reaches ~0.88 at 8 x 256. The table
shows each one's minimum cosine over all shapes. Timing: implementations and
thread counts (--threads, default {1, 2}) interleaved, median of --reps
repetitions (each >= 50 ms of calls after a warm-up call); each is reported at
its faster thread count. The report: a table of sentences/s (ms per batch,
threads) with one row per implementation and one column per shape, the
throughput ratios (qkv bfloat16 / torch bf16, qkv bfloat16 / OpenVINO bf16,
qkv int8 / the fastest int8-or-better peer, qkv float32 / ORT and
sentence-transformers) per shape, and qkv's best 1 x 16 latency against every
peer.

qkv: `qkv.SentenceEncoder(path, precision=p)` for p in float32, bfloat16, int8.
The report header names the kernels qkv ran (attention's ISA table, the
linear layers' table per precision) and the CPU flags that decide which
low-precision path can run (avx512_bf16, avx512_vnni / avx_vnni, amx).

torch bf16: the sentence-transformers model cast with `.to(torch.bfloat16)`
(weights and activations bfloat16, no autocast); torch's oneDNN kernels use
AVX512_BF16 / AMX where the CPU has them.

ONNX Runtime fp32: a `torch.onnx.export` (opset 18, dynamic batch and sequence
axes) of the HF BertModel with the mean pooling and L2 normalisation inside the
graph, run by the CPU execution provider with ORT_ENABLE_ALL graph
optimisations.

ONNX Runtime int8: `onnxruntime.quantization.quantize_dynamic` of that fp32
graph: the 36 weight MatMuls become MatMulInteger with uint8 activations
quantized per call (one scale per tensor) and int8 (QInt8) or uint8 (QUInt8)
weights; the attention MatMuls, the embeddings and everything else stay
float32. Three graphs are timed: QInt8 and QUInt8 with one weight scale per
tensor (quantize_dynamic's default), and QInt8 with one per output channel
(per_channel=True), slower but the only one near cosine 0.99 for this model
(per-tensor weight scales give 0.88-0.98). QInt8 is the faster weight type on
an AVX512-VNNI CPU (ORT's u8 x s8 kernels; u8 x u8 takes a slower path; the
ratio row "QInt8 / QUInt8" shows it per shape). One int8 ratio takes the
fastest of all int8 peers, accurate or not, another only those at cosine
>= 0.99 at that shape.

CTranslate2 int8: the HF model converted by
`ctranslate2.converters.TransformersConverter` (float32 weights, into a
temporary directory) and loaded by `ctranslate2.Encoder(compute_type=...,
intra_threads=threads)`; `forward_batch` gives last_hidden_state and the mean
pooling and normalisation are done in numpy. Compute types tried: int8,
int8_float32 and bfloat16; those the CPU build does not support are reported,
and two that resolve to the same type (on CPU int8 runs as int8_float32) are
timed once. The header shows CTranslate2's ISA and GEMM backends for this CPU
(on non-Intel CPUs it picks oneDNN rather than MKL for the GEMMs and AVX2 for
its own kernels; --ct2-isa AVX512 overrides the latter).

OpenVINO: the same fp32 ONNX graph read by `openvino.Core.read_model` and
compiled for "CPU" with PERFORMANCE_HINT LATENCY, INFERENCE_NUM_THREADS =
threads and INFERENCE_PRECISION_HINT f32 or bf16. A CPU without native bf16
may silently run f32, so the header prints what
`compiled_model.get_property("INFERENCE_PRECISION_HINT")` says for each;
"OpenVINO best" is the faster of the two.
"""

import argparse
import atexit
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

import qkv
from timing import per_call

SHAPES = [(1, 16), (1, 128), (32, 32), (32, 128), (8, 256)]
THREADS = (1, 2)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QKV_PRECISIONS = ("float32", "bfloat16", "int8")
FP32_MIN_COSINE = 0.999  # asserted for float32 implementations
LOW_MIN_COSINE = 0.99    # bfloat16 / int8 below this are flagged in the table
LOW_FLOOR_COSINE = 0.5   # and asserted above this (a wiring error, not rounding)
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_tile",
             "amx_bf16", "amx_int8")
SKIPPABLE = ("torch-bf16", "ort-int8", "ct2", "openvino")


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


def cpu_info():
    model, flags = platform.processor() or "?", set()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("model name") and model in ("?", "x86_64", ""):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return model, flags


def qkv_runtime_report():
    """Which kernels qkv runs: attention's ISA table, the linear layers' per precision, BLAS."""
    rt = qkv.runtime
    parts = [f"kernel_isa() = {rt.kernel_isa()}", f"blas_core_name() = {rt.blas_core_name()}"]
    for p in QKV_PRECISIONS[1:]:
        parts.append(f"linear_kernel_isa({p!r}) = {rt.linear_kernel_isa(p)}")
    return ", ".join(parts)


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


def quantize_onnx(fp32_path, weight_type, per_channel):
    """quantize_dynamic of the fp32 graph, cached beside it."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    out = fp32_path.replace(".onnx", f"-dynamic-{weight_type.lower()}"
                            + ("-per-channel" if per_channel else "") + ".onnx")
    if not os.path.exists(out):
        quantize_dynamic(fp32_path, out, weight_type=getattr(QuantType, weight_type),
                         per_channel=per_channel)
    return out


def hf_inputs(tokenizer, texts):
    t = tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="np")
    return {k: np.ascontiguousarray(t[k], dtype=np.int64)
            for k in ("input_ids", "attention_mask", "token_type_ids")}


def mean_pool_normalize(h, mask):
    m = mask[..., None].astype(h.dtype)
    pooled = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


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
        return self.session.run(None, hf_inputs(self.tokenizer, texts))[0]


class Ct2Encoder:
    def __init__(self, model_dir, tokenizer, threads, compute_type):
        import ctranslate2
        self.ct2 = ctranslate2
        self.encoder = ctranslate2.Encoder(model_dir, "cpu", compute_type=compute_type,
                                           inter_threads=1, intra_threads=threads)
        self.tokenizer = tokenizer

    @property
    def compute_type(self):
        return self.encoder.compute_type

    def encode(self, texts):
        f = hf_inputs(self.tokenizer, texts)
        mask = f["attention_mask"]
        ids = self.ct2.StorageView.from_array(f["input_ids"].astype(np.int32))
        lengths = self.ct2.StorageView.from_array(mask.sum(1).astype(np.int32))
        out = self.encoder.forward_batch(ids, lengths,
                                         token_type_ids=f["token_type_ids"].tolist())
        return mean_pool_normalize(np.array(out.last_hidden_state), mask)


def ct2_server(conn, model_dir, tokenizer_dir, threads, compute_type):
    """The loop of Ct2Process's child: builds the encoders, then answers
    ("encode" | "time", threads, texts, batch) until it receives None."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    encs = {t: Ct2Encoder(model_dir, tok, t, compute_type) for t in threads}
    conn.send(encs[threads[0]].compute_type)
    while (msg := conn.recv()) is not None:
        op, t, texts, batch = msg
        enc = encs[t]
        conn.send(enc.encode(texts) if op == "encode" else per_call(lambda: enc.encode(texts)))


class Ct2Process:
    """CTranslate2 in a process of its own. In-process, its OpenMP calls bind
    to the libgomp that torch put in the global symbol scope, the one qkv and
    torch use: its extra team takes that runtime past one thread per core, so
    libgomp stops spinning between parallel regions for every engine in the
    process (qkv int8 at 1 x 16 went from 1.4 to 4.0 ms, torch's and CT2's
    own regions slow down the same way). Timed in the child, the pipe
    excluded."""

    def __init__(self, model_dir, tokenizer_dir, threads, compute_type):
        import multiprocessing
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=ct2_server, daemon=True,
                                args=(child, model_dir, tokenizer_dir, threads, compute_type))
        self.proc.start()
        self.compute_type = self.conn.recv()
        atexit.register(self.close)

    def ask(self, op, threads, texts, batch):
        self.conn.send((op, threads, texts, batch))
        return self.conn.recv()

    def close(self):
        if self.proc.is_alive():
            self.conn.send(None)
            self.proc.join(10)

    def at(self, threads):
        """f(texts, batch) -> embeddings at `threads`; f.per_call(texts, batch)
        -> seconds per call, timed in the child."""
        f = lambda texts, b: self.ask("encode", threads, texts, b)  # noqa: E731
        f.per_call = lambda texts, b: self.ask("time", threads, texts, b)
        return f


class OvEncoder:
    def __init__(self, core, model, tokenizer, threads, precision):
        self.compiled = core.compile_model(model, "CPU", {
            "INFERENCE_PRECISION_HINT": precision,
            "INFERENCE_NUM_THREADS": threads,
            "PERFORMANCE_HINT": "LATENCY",
        })
        self.request = self.compiled.create_infer_request()
        self.output = self.compiled.output(0)
        self.tokenizer = tokenizer

    def property(self, name):
        v = self.compiled.get_property(name)
        return v.to_string() if hasattr(v, "to_string") else str(v)

    def encode(self, texts):
        r = self.request.infer(hf_inputs(self.tokenizer, texts))
        return np.array(r[self.output])  # a copy: the request's buffer is reused


def ct2_backend_report(model_dir):
    """CTranslate2's own log of the CPU, ISA and GEMM backends it picked."""
    code = ("import logging, ctranslate2; ctranslate2.set_log_level(logging.INFO); "
            f"ctranslate2.Encoder({model_dir!r}, 'cpu', compute_type='int8', intra_threads=1)")
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120)
    except Exception as e:  # noqa: BLE001 - informational only
        return f"(log not available: {e})"
    keep = []
    for line in r.stderr.splitlines():
        msg = line.split("[info]", 1)[-1].strip()
        if any(w in msg for w in ("CPU:", "ISA", "MKL", "backend")):
            keep.append(msg.lstrip("- ").strip())
    return "; ".join(keep) or "(no log)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--onnx", default=os.path.join(tempfile.gettempdir(), "qkv-bench",
                                                   "all-MiniLM-L6-v2-pooled.onnx"),
                    help="exported here unless it exists (its int8 versions beside it)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-bf16", action="store_true", help="skip torch bfloat16")
    ap.add_argument("--skip", default="", help="comma-separated peers to leave out: "
                    + ", ".join(SKIPPABLE))
    ap.add_argument("--threads", default=",".join(map(str, THREADS)),
                    help="comma-separated thread counts, each implementation at its fastest")
    ap.add_argument("--ct2-isa", help="CT2_FORCE_CPU_ISA for CTranslate2 (e.g. AVX512; "
                    "default: its own choice, AVX2 on non-Intel CPUs)")
    ap.add_argument("--out", help="also write the markdown here")
    ap.add_argument("--shapes", help="comma-separated BATCHxTOKENS subset, e.g. 1x16,32x128")
    a = ap.parse_args()
    if a.ct2_isa:
        os.environ["CT2_FORCE_CPU_ISA"] = a.ct2_isa  # read when CTranslate2 loads
    skip = {s for s in a.skip.split(",") if s}
    if a.no_bf16:
        skip.add("torch-bf16")
    assert skip <= set(SKIPPABLE), f"--skip: unknown {skip - set(SKIPPABLE)}"
    threads = tuple(int(t) for t in a.threads.split(","))
    shapes = SHAPES
    if a.shapes:
        shapes = [tuple(int(n) for n in s.split("x")) for s in a.shapes.split(",")]

    cpu_model, flags = cpu_info()
    notes = []         # header lines about what ran
    unavailable = {}   # implementation -> why it did not run
    impls = {}         # name -> (kind, {threads: encode(texts, batch)}); kind: fp32 / low
    versions = [f"torch {torch.__version__}"]

    # qkv at each precision.
    qkv_encoders = {p: qkv.SentenceEncoder(a.model, precision=p) for p in QKV_PRECISIONS}
    for p, enc in qkv_encoders.items():
        impls[f"qkv {p}"] = ("fp32" if p == "float32" else "low",
                             {t: (lambda e: lambda texts, b: e.encode(texts, batch_size=b))(enc)
                              for t in threads})
    ours = qkv_encoders["float32"]
    notes.append("qkv: " + qkv_runtime_report() + ".")

    # sentence-transformers, float32 (the reference) and bfloat16.
    from sentence_transformers import SentenceTransformer
    import sentence_transformers
    versions.append(f"sentence-transformers {sentence_transformers.__version__}")
    st = SentenceTransformer(a.model, device="cpu")
    st.eval()
    tok = st.tokenizer
    if not os.path.exists(a.onnx):
        export_onnx(st, a.onnx)
    impls["sentence-transformers fp32"] = ("fp32", {t: (
        lambda texts, b: st.encode(texts, batch_size=b, convert_to_numpy=True)) for t in threads})
    if "torch-bf16" not in skip:
        st_bf16 = SentenceTransformer(a.model, device="cpu").to(torch.bfloat16)
        impls["torch bf16"] = ("low", {t: (lambda texts, b: st_bf16.encode(
            texts, batch_size=b, convert_to_numpy=True)) for t in threads})

    # ONNX Runtime, float32 and int8.
    import onnxruntime
    versions.append(f"onnxruntime {onnxruntime.__version__}")

    def ort_fns(path):
        return {t: (lambda o: lambda texts, b: o.encode(texts))(OrtEncoder(path, tok, t))
                for t in threads}
    impls["ORT fp32"] = ("fp32", ort_fns(a.onnx))
    if "ort-int8" not in skip:
        for wt, per_channel in (("QInt8", False), ("QUInt8", False), ("QInt8", True)):
            name = f"ORT int8 ({wt}{', per-channel' if per_channel else ''})"
            try:
                impls[name] = ("low", ort_fns(quantize_onnx(a.onnx, wt, per_channel)))
            except Exception as e:  # noqa: BLE001
                unavailable[name] = f"could not run ({type(e).__name__}: {e})"

    # CTranslate2.
    if "ct2" not in skip:
        try:
            import ctranslate2
            versions.append(f"ctranslate2 {ctranslate2.__version__}")
            ct2_tmp = tempfile.mkdtemp(prefix="qkv-bench-ct2-")
            atexit.register(shutil.rmtree, ct2_tmp, ignore_errors=True)
            ct2_dir = os.path.join(ct2_tmp, "model")
            ctranslate2.converters.TransformersConverter(a.model).convert(ct2_dir, force=True)
            supported = ctranslate2.get_supported_compute_types("cpu")
            seen, tried = {}, []
            for ct in ("int8", "int8_float32", "bfloat16"):
                if ct not in supported:
                    tried.append(f"{ct} not supported on this CPU build")
                    continue
                server = Ct2Process(ct2_dir, a.model, threads, ct)
                resolved = server.compute_type
                if resolved in seen:
                    tried.append(f"{ct} runs as {resolved} (timed once, as {seen[resolved]})")
                    server.close()
                    continue
                name = f"CT2 {ct}" + (f" (runs {resolved})" if resolved != ct else "")
                seen[resolved] = name
                tried.append(f"{ct} runs as {resolved}")
                impls[name] = ("fp32" if resolved == "float32" else "low",
                               {t: server.at(t) for t in threads})
            notes.append("CTranslate2 (in a process of its own) compute types: " + "; ".join(tried) + ". Its log: "
                         + ct2_backend_report(ct2_dir) + ".")
        except Exception as e:  # noqa: BLE001
            unavailable["CT2 int8"] = f"could not run ({type(e).__name__}: {e})"

    # OpenVINO.
    ov_actual = {}
    if "openvino" not in skip:
        try:
            import openvino as ov
            versions.append(f"openvino {ov.__version__.split('-')[0]}")
            core = ov.Core()
            ov_model = core.read_model(a.onnx)
            caps = core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
            for hint in ("f32", "bf16"):
                encs = {t: OvEncoder(core, ov_model, tok, t, hint) for t in threads}
                e0 = encs[threads[0]]
                ov_actual[hint] = e0.property("INFERENCE_PRECISION_HINT")
                impls[f"OpenVINO {hint} hint"] = (
                    "fp32" if hint == "f32" else "low",
                    {t: (lambda e: lambda texts, b: e.encode(texts))(encs[t]) for t in threads})
            notes.append("OpenVINO CPU: OPTIMIZATION_CAPABILITIES " + ", ".join(caps)
                         + "; INFERENCE_PRECISION_HINT after compile: "
                         + ", ".join(f"{h} -> {v}" for h, v in ov_actual.items()) + ".")
        except Exception as e:  # noqa: BLE001
            unavailable["OpenVINO"] = f"could not run ({type(e).__name__}: {e})"

    def set_threads(t):
        torch.set_num_threads(t)
        qkv.runtime.set_num_threads(t)

    print("\n".join(notes), flush=True)
    for name, why in unavailable.items():
        print(f"{name}: {why}", flush=True)

    words = single_token_words(tok, os.path.join(a.model, "vocab.txt"))
    rows = []
    for batch, tokens in shapes:
        texts = make_texts(words, batch, tokens, seed=batch * 1000 + tokens)
        lengths = {len(tok(t)["input_ids"]) for t in texts} | {len(ours.token_ids(t))
                                                               for t in texts}
        assert lengths == {tokens}, f"token counts {lengths}, wanted {tokens}"
        def bind(f):
            call = lambda: f(texts, batch)  # noqa: E731
            if hasattr(f, "per_call"):  # timed in its own process
                call.per_call = lambda: f.per_call(texts, batch)
            return call

        fns = {(name, t): bind(f) for name, (_, by_t) in impls.items() for t, f in by_t.items()}
        # Same embeddings first.
        t_check = max(threads)
        set_threads(t_check)
        ref = np.asarray(fns[("sentence-transformers fp32", t_check)](), dtype=np.float64)
        cos = {}
        for name, (kind, _) in impls.items():
            e = np.asarray(fns[(name, t_check)](), dtype=np.float64)
            c = (e * ref).sum(1) / np.linalg.norm(e, axis=1) / np.linalg.norm(ref, axis=1)
            cos[name] = c.min()
            need = FP32_MIN_COSINE if kind == "fp32" else LOW_FLOOR_COSINE
            assert c.min() >= need, f"{name} at {batch}x{tokens}: cosine {c.min()} < {need}"
            if c.min() < LOW_MIN_COSINE:
                print(f"{name} at {batch}x{tokens}: cosine {c.min():.5f} < {LOW_MIN_COSINE}",
                      flush=True)
        times = {k: [] for k in fns}
        for _ in range(a.reps):
            for (name, t), fn in fns.items():
                set_threads(t)
                times[(name, t)].append(fn.per_call() if hasattr(fn, "per_call") else per_call(fn))
                time.sleep(0.02)  # let the last engine's spinning thread pool go idle
        med = {k: statistics.median(v) for k, v in times.items()}
        best = {}
        for name in impls:
            t = min(threads, key=lambda th: med[(name, th)])
            best[name] = (med[(name, t)], t)
        rows.append((batch, tokens, best, cos))
        print(f"{batch}x{tokens}: " + ", ".join(
            f"{n} {1e3 * s:.2f} ms ({t}t)" for n, (s, t) in best.items()), flush=True)

    text = report(a, rows, impls, unavailable, notes, versions, cpu_model, flags, threads,
                  ov_actual)
    print()
    print(text)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")


def report(a, rows, impls, unavailable, notes, versions, cpu_model, flags, threads, ov_actual):
    load = os.getloadavg()
    shape_names = [f"{b} × {t}" for b, t, _, _ in rows]
    by = {(b, t): best for b, t, best, _ in rows}
    cos_by = {(b, t): cos for b, t, _, cos in rows}
    flag_text = ", ".join(f"{f} {'yes' if f in flags else 'no'}" for f in CPU_FLAGS)
    lines = [
        f"all-MiniLM-L6-v2, texts of exactly `tokens` tokens, tokenization + forward + mean "
        f"pooling + normalisation for every implementation; median of {a.reps} interleaved reps; "
        f"each at its faster of {{{', '.join(map(str, threads))}}} threads (in brackets). "
        f"{', '.join(versions)}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
        f"at the end.",
        "",
        f"CPU: {cpu_model}, {os.cpu_count()} logical cores; {flag_text}.",
        "",
    ]
    for n in notes:
        lines += [n, ""]
    lines += [
        "| implementation | " + " | ".join(f"{s} sent/s (ms/batch)" for s in shape_names)
        + " | min cosine vs s-t fp32 |",
        "|---|" + "---:|" * (len(rows) + 1),
    ]
    order = [f"qkv {p}" for p in QKV_PRECISIONS] + [n for n in impls if not n.startswith("qkv ")]
    order += [n for n in unavailable if n not in order]
    for name in order:
        if name in impls:
            cells = []
            for batch, _, best, _ in rows:
                s, t = best[name]
                cells.append(f"{num(batch / s)} ({1e3 * s:.2f}, {t}t)")
            mc = min(cos[name] for _, _, _, cos in rows)
            flag = f" (< {LOW_MIN_COSINE})" if mc < LOW_MIN_COSINE else ""
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {mc:.7f}{flag} |")
        elif name in unavailable:
            cells = [unavailable[name]] + ["n/a"] * (len(rows) - 1)
            lines.append(f"| {name} | " + " | ".join(cells) + " | – |")

    def tput(shape, name):  # seconds per batch, or None
        return by[shape][name][0] if name in by[shape] else None

    def ratio(shape, ours, peers, accurate_only=False):
        """qkv sent/s over the best of `peers` (names), and which peer that was."""
        if accurate_only:
            peers = [p for p in peers if cos_by[shape].get(p, 0) >= LOW_MIN_COSINE]
        q = tput(shape, ours)
        ps = [(tput(shape, p), p) for p in peers if tput(shape, p) is not None]
        if q is None or not ps:
            return "n/a"
        s, p = min(ps)
        return f"**{num(s / q, 2)}**" + (f" ({p})" if len(peers) > 1 else "")

    ort_int8 = [n for n in impls if n.startswith("ORT int8")]
    ct2_int8 = [n for n in impls if n.startswith("CT2 int8")]
    ov_all = [n for n in impls if n.startswith("OpenVINO")]
    ov_bf16 = "OpenVINO bf16 hint"
    bf16_note = ""
    if ov_actual.get("bf16") and "bf16" not in ov_actual["bf16"]:
        bf16_note = f" (OpenVINO reports {ov_actual['bf16']}: it ran without bf16)"
    ratio_rows = [
        ("qkv bfloat16 / torch bf16", "qkv bfloat16", ["torch bf16"]),
        ("qkv bfloat16 / OpenVINO bf16 hint" + bf16_note, "qkv bfloat16", [ov_bf16]),
        ("qkv int8 / max(ORT int8, CT2 int8, OpenVINO best)", "qkv int8",
         ort_int8 + ct2_int8 + ov_all),
        ("qkv float32 / ORT fp32", "qkv float32", ["ORT fp32"]),
        ("qkv float32 / sentence-transformers fp32", "qkv float32",
         ["sentence-transformers fp32"]),
        ("ORT int8: QInt8 / QUInt8 weights", "ORT int8 (QInt8)", ["ORT int8 (QUInt8)"]),
    ]
    lines += [
        "",
        "Throughput ratios (sentences/s of the first over the second; > 1: the first is faster):",
        "",
        "| ratio | " + " | ".join(shape_names) + " |",
        "|---|" + "---:|" * len(rows),
    ]
    ratio_rows.insert(3, (f"qkv int8 / max(the same, those at cosine ≥ {LOW_MIN_COSINE} at that shape)",
                          "qkv int8", ort_int8 + ct2_int8 + ov_all, True))
    for label, ours, peers, *accurate_only in ratio_rows:
        lines.append(f"| {label} | " + " | ".join(
            ratio((b, t), ours, peers, *accurate_only) for b, t, _, _ in rows) + " |")

    if (1, 16) in by:
        b = by[(1, 16)]
        qs = [(b[f"qkv {p}"][0], f"qkv {p}") for p in QKV_PRECISIONS if f"qkv {p}" in b]
        q, qn = min(qs)
        peers = [n for n in order if n in b and not n.startswith("qkv ")]
        lines += ["", f"Latency at 1 × 16, qkv's fastest precision ({qn}, {1e3 * q:.2f} ms) "
                  "against every peer (qkv ms / peer ms; < 1: qkv is faster):", "",
                  "| peer | peer ms | qkv / peer |", "|---|---:|---:|"]
        for n in peers:
            lines.append(f"| {n} | {1e3 * b[n][0]:.2f} | **{num(q / b[n][0], 2)}** |")
    if unavailable:
        lines += ["", "Not run: " + "; ".join(f"{n}: {w}" for n, w in unavailable.items())
                  + "."]
    return "\n".join(lines)


def num(x, digits=0):
    """x with `digits` decimals, or with two significant digits when that shows 0."""
    text = f"{x:,.{digits}f}"
    return text if x == 0 or text.strip("0.,") else f"{x:.2g}"


if __name__ == "__main__":
    main()
