#!/usr/bin/env python3
"""qkv against llama.cpp on SmolLM2-135M-Instruct from its Q4_1 GGUF file: prompt
processing and generation tokens/s at one and two threads, and peak resident memory.

    .venv/bin/pip install -r bench/requirements.txt   # llama-cpp-python, built from source
    .venv/bin/python bench/decode_vs_llamacpp.py --reps 3 --threads 1,2 --out /tmp/decode.md

Both read the same file and keep its weights quantized: qkv through
qkv.models.load_gguf (fast mode), llama.cpp through llama-cpp-python (built with
CMAKE_ARGS="-DGGML_NATIVE=ON"). Each measurement runs in a fresh process (so that
its peak RSS, ru_maxrss, is its own: the model, the caches and the Python
interpreter with the binding) and does the same work:

  1. the prompt: --prompt token ids (from tests/data/tokenizer_corpus.txt, encoded
     by qkv's tokenizer of the file; no BOS) fed in one batched pass, timed;
  2. generation: --new greedy tokens, each fed back, timed (qkv: session.decode,
     the loop in C++; llama.cpp: Llama.eval of one token, argmax of its logits).

qkv runs as it is by default (on AVX512_VNNI CPUs decoding rounds x to 16 bits
per block of 32 and sums exact int16 products, relative error ~1.6e-5 of x; elsewhere
x stays float32; prompts never round x) and with QKV_INT8_DECODE=1 (decoding rounds x
to 8 bits per block of 32 and sums int8 products, as llama.cpp always does; "qkv 8-bit
x"), each once per --kv-cache storage (f32, q8_0; llama.cpp keeps its default KV cache,
f16). Processes alternate; the table gives medians over --reps for each thread count,
and how many leading greedy tokens each qkv agrees on with llama.cpp.

Peak RSS is ru_maxrss (VmHWM). --stages also prints, for the first rep of each
engine, VmRSS and VmHWM from /proc/self/status after each stage: Python with the
engine imported, model loaded (qkv: with its tokenizer), cache made (qkv's
session; llama.cpp makes its context while loading), prompt, generation.
"""

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
CORPUS = os.path.join(ROOT, "tests", "data", "tokenizer_corpus.txt")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def memory_kib():
    """(VmRSS, VmHWM) of this process in KiB."""
    fields = {}
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0])
    return fields.get("VmRSS", 0), fields.get("VmHWM", 0)


def timed_stage(stages, name, run):
    """Times run(), then notes the memory after stage `name`. -> (run's result, seconds)"""
    start = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - start
    stages.append((name, memory_kib()))
    return result, seconds


def prompt_ids(model_path, count):
    """`count` ids of real text, encoded by the file's own tokenizer."""
    import qkv

    tokenizer = qkv.models.load_gguf(model_path).tokenizer
    text = open(CORPUS, encoding="utf-8").read()
    ids = tokenizer.encode(text, add_special=False)
    if len(ids) < count:
        raise SystemExit(f"{CORPUS} gives only {len(ids)} tokens, fewer than --prompt {count}")
    return [int(i) for i in ids[:count]]


# ---- Workers: one measurement each, in its own process ----------------------------


def run_qkv(model_path, ids, new, threads, kv_cache, stages):
    import numpy as np  # noqa: F401  (the binding returns numpy arrays)
    import qkv

    qkv.runtime.set_num_threads(threads)
    stages.append(("import", memory_kib()))
    model = qkv.models.load_gguf(model_path, kv_cache=kv_cache)
    stages.append(("load", memory_kib()))
    session = model.model.session(max_len=len(ids) + new + 1)
    stages.append(("cache", memory_kib()))
    _, prompt_s = timed_stage(stages, "prompt", lambda: session.prefill(ids))
    out, gen_s = timed_stage(stages, "generation", lambda: session.decode(new, temperature=0.0))
    return prompt_s, gen_s, [int(t) for t in out]


def run_llamacpp(model_path, ids, new, threads, kv_cache, stages):
    import numpy as np
    from llama_cpp import Llama

    stages.append(("import", memory_kib()))
    llm = Llama(model_path=model_path, n_ctx=len(ids) + new + 16, n_batch=len(ids),
                n_ubatch=len(ids), n_threads=threads, n_threads_batch=threads, verbose=False)
    stages.append(("load", memory_kib()))
    stages.append(("cache", memory_kib()))
    _, prompt_s = timed_stage(stages, "prompt", lambda: llm.eval(ids))
    vocab = llm.n_vocab()

    def last_logits():  # the one row llama.cpp computes without logits_all
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(vocab,))

    def greedy():
        out = []
        for _ in range(new):
            token = int(np.argmax(last_logits()))
            out.append(token)
            llm.eval([token])
        return out

    out, gen_s = timed_stage(stages, "generation", greedy)
    return prompt_s, gen_s, out


def worker(args):
    ids = json.loads(args.ids)
    run = run_llamacpp if args.worker == "llama.cpp" else run_qkv
    stages = []
    prompt_s, gen_s, out = run(args.model, ids, args.new, args.worker_threads,
                               args.worker_kv_cache, stages)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"prompt_s": prompt_s, "gen_s": gen_s, "tokens": out, "peak_kib": peak_kib,
                      "stages": stages}))


def engine_name(worker, kv_cache):
    if worker == "llama.cpp":
        return "llama.cpp (f16 KV)"
    return f"{worker}, {kv_cache} KV"


def measure(engine, args, ids, threads):
    worker, kv_cache = engine
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", worker, "--worker-threads",
           str(threads), "--worker-kv-cache", kv_cache, "--model", args.model, "--new",
           str(args.new), "--ids", json.dumps(ids)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env.pop("QKV_INT8_DECODE", None)
    if worker == "qkv 8-bit x":
        env["QKV_INT8_DECODE"] = "1"
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{engine_name(*engine)} at {threads} thread(s) failed:\n"
                         f"{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def leading_agreement(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens (default 512)")
    ap.add_argument("--new", type=int, default=128, help="generated tokens (default 128)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--kv-cache", default="f32,q8_0",
                    help="qkv KV cache storages to measure, comma-separated (f32, q8_0)")
    ap.add_argument("--stages", action="store_true",
                    help="also print RSS after each stage (first rep of each engine)")
    ap.add_argument("--out", help="also write the markdown here")
    ap.add_argument("--worker", choices=["qkv", "qkv 8-bit x", "llama.cpp"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--worker-threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--worker-kv-cache", default="f32", help=argparse.SUPPRESS)
    ap.add_argument("--ids", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if not os.path.exists(args.model):
        raise SystemExit(f"{args.model} is missing: run scripts/fetch_model.sh")
    try:
        import llama_cpp
    except ImportError:
        raise SystemExit("llama-cpp-python is missing: CMAKE_ARGS=\"-DGGML_NATIVE=ON\" "
                         ".venv/bin/pip install -r bench/requirements.txt")
    import qkv

    ids = prompt_ids(args.model, args.prompt)
    threads = [int(t) for t in args.threads.split(",")]
    kv_caches = args.kv_cache.split(",")
    for kv in kv_caches:
        if kv not in ("f32", "q8_0"):
            raise SystemExit(f"--kv-cache: unknown storage \"{kv}\"; expected f32 or q8_0")
    engines = [(w, kv) for w in ("qkv", "qkv 8-bit x") for kv in kv_caches]
    engines.append(("llama.cpp", "f16"))
    llama = ("llama.cpp", "f16")
    results = {(e, t): [] for e in engines for t in threads}
    for rep in range(args.reps):
        for t in threads:
            for e in engines:
                r = measure(e, args, ids, t)
                results[(e, t)].append(r)
                log(f"rep {rep + 1}/{args.reps} {engine_name(*e):20s} {t}t: prompt {args.prompt / r['prompt_s']:7.1f} "
                    f"tok/s, generation {args.new / r['gen_s']:6.1f} tok/s, "
                    f"peak {r['peak_kib'] / 1024:6.1f} MiB")

    def med(e, t, f):
        return statistics.median(f(r) for r in results[(e, t)])

    lines = []
    lines.append(f"SmolLM2-135M-Instruct Q4_1 (`{os.path.basename(args.model)}`), prompt of "
                 f"{args.prompt} tokens in one pass, then {args.new} greedy tokens; median of "
                 f"{args.reps} fresh processes per cell. qkv {qkv.__version__ if hasattr(qkv, '__version__') else ''}"
                 f" (kernel_isa {qkv.runtime.kernel_isa()}), llama-cpp-python "
                 f"{llama_cpp.__version__}; {platform.processor() or platform.machine()}, "
                 f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end, "
                 f"{datetime.datetime.now():%Y-%m-%d %H:%M}.")
    lines.append("")
    lines.append("| threads | engine | prompt tok/s | / llama.cpp | generation tok/s | / llama.cpp | "
                 "peak MiB | same leading greedy tokens as llama.cpp |")
    lines.append("|---:|---|---:|---:|---:|---:|---:|---:|")
    for t in threads:
        lp = med(llama, t, lambda r: args.prompt / r["prompt_s"])
        lg = med(llama, t, lambda r: args.new / r["gen_s"])
        for e in engines:
            p = med(e, t, lambda r: args.prompt / r["prompt_s"])
            g = med(e, t, lambda r: args.new / r["gen_s"])
            mib = med(e, t, lambda r: r["peak_kib"] / 1024)
            same = leading_agreement(results[(e, t)][0]["tokens"],
                                     results[(llama, t)][0]["tokens"])
            lines.append(f"| {t} | {engine_name(*e)} | {p:.1f} | **{p / lp:.2f}** | {g:.1f} | **{g / lg:.2f}** | "
                         f"{mib:.0f} | {same} of {args.new} |")
    if args.stages:
        names = ["import", "load", "cache", "prompt", "generation"]
        lines.append("")
        lines.append(f"Resident memory after each stage, MiB (VmRSS / VmHWM; first rep, "
                     f"{threads[0]} thread(s)):")
        lines.append("")
        lines.append("| engine | " + " | ".join(names) + " |")
        lines.append("|---|" + "---:|" * len(names))
        for e in engines:
            stages = dict(results[(e, threads[0])][0]["stages"])
            cells = [f"{stages[n][0] / 1024:.1f} / {stages[n][1] / 1024:.1f}" for n in names]
            lines.append(f"| {engine_name(*e)} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        tmp = args.out + ".partial"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
