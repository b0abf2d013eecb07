"""qkv against llama.cpp's own llama-bench (and ik_llama.cpp's) on the same GGUF files.

Issue 39's benchmark: for each model, prompt processing (-p, default 512 tokens) and
generation (-n, default 128 tokens) at each thread count, by `qkv bench -w decode` and by
each llama-bench binary, all in one run; peak resident memory of each engine's process; and
the machine's own limit for generation: every weight is read once per token, so
tokens/s <= stream bandwidth / bytes read per token. The bandwidth is measured in the same
run (each thread takes the max of its own 512 MiB array).

    bench/build_llama_cpp.sh        # once: llama.cpp 0.3.36's llama-bench into a cache
    .venv/bin/python bench/gguf_vs_llama_bench.py \\
        --models models/SmolLM2-135M-Instruct.Q4_1.gguf,models/gemma-3-270m-q4_k_m.gguf \\
        --llama-bench ~/.cache/qkv-peers/llama.cpp-0.3.36/bin/llama-bench \\
        --ik-llama-bench ~/.cache/qkv-peers/ik_llama.cpp-8337e4c/bin/llama-bench \\
        --threads 1,2 --reps 3 --rounds 3

Prints a markdown table (tokens/s, ratios, % of the bandwidth bound, peak RSS). Each
engine keeps its default KV cache (qkv float32, llama.cpp f16) unless --qkv-kv-cache q8_0
gives qkv 8-bit blocks (a quarter of float32's memory).

The machine is shared: its speed moves between states that last minutes (the same kernel
reads 140 or 205 GFLOP/s from one run to the next). With --rounds N every engine runs N
times, taking turns (the order rotates each round), so that each meets the slow and fast
states alike; a rate is the median of its rounds, a peak RSS the largest.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import threading
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


def vm_hwm_kib(pid):
    """The process's peak resident set (VmHWM) so far, in KiB; None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def run_with_peak_rss(cmd):
    """Runs cmd; returns (stdout, peak RSS in MiB).

    The peak is VmHWM of /proc/PID/status, read every 10 ms until the process ends: it
    starts afresh at exec, where wait4's ru_maxrss also counts the forked copy of this
    Python process (hundreds of MiB after the bandwidth test) before the exec."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    chunks = {"out": [], "err": []}
    peak = [0]

    def drain(stream, key):
        for line in stream:
            chunks[key].append(line)

    def watch():
        while proc.poll() is None:
            kib = vm_hwm_kib(proc.pid)
            if kib is not None:
                peak[0] = max(peak[0], kib)
            time.sleep(0.01)

    threads = [threading.Thread(target=drain, args=(proc.stdout, "out")),
               threading.Thread(target=drain, args=(proc.stderr, "err")),
               threading.Thread(target=watch)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out, err = "".join(chunks["out"]), "".join(chunks["err"])
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n"
                         f"{out[-2000:]}\n{err[-2000:]}")
    return out, peak[0] / 1024.0


def qkv_rates(qkv, model, prompt, gen, threads, reps, kv_cache):
    """{(test, threads): tokens/s (median)} from `qkv bench -w decode -o jsonl`."""
    out, rss = run_with_peak_rss([qkv, "bench", "-m", model, "-w", "decode", "-p", str(prompt),
                                  "-n", str(gen), "-t", ",".join(map(str, threads)),
                                  "-r", str(reps), "--kv-cache", kv_cache, "-o", "jsonl"])
    rates = {}
    for line in out.splitlines():
        row = json.loads(line)
        test = "pp" if row["workload"].startswith("decode/pp") else "tg"
        rates[(test, row["threads"])] = row["median"]
    return rates, rss


def llama_bench_rates(binary, model, prompt, gen, threads, reps):
    """{(test, threads): tokens/s (mean, as llama-bench reports)} from `llama-bench -o json`."""
    out, rss = run_with_peak_rss([binary, "-m", model, "-p", str(prompt), "-n", str(gen),
                                  "-t", ",".join(map(str, threads)), "-r", str(reps), "-o", "json"])
    rates = {}
    for row in json.loads(out[out.index("["):]):
        test = "pp" if row.get("n_prompt", 0) > 0 and row.get("n_gen", 0) == 0 else "tg"
        rates[(test, row["n_threads"])] = row["avg_ts"]
    return rates, rss


def bytes_read_per_token(model):
    """Bytes of the weights one generated token reads: every tensor but the input embedding,
    which is read whole only when it doubles as the output layer (no output.weight)."""
    from gguf import GGUFReader
    tensors = {t.name: int(t.n_bytes) for t in GGUFReader(model).tensors}
    total = sum(n for name, n in tensors.items() if name != "token_embd.weight")
    if "output.weight" not in tensors:
        total += tensors.get("token_embd.weight", 0)
    return total


def read_bandwidth(threads, mib=512, rounds=5):
    """Bytes/s that `threads` threads read (each the max of its own 512 MiB of float32), best
    of `rounds`. numpy's max is vectorised and reads faster than one core computes np.sum's
    pairwise sum (7 vs 15 GB/s on one thread of the Xeon of 2026-12-07), so it measures the
    memory, not the adder."""
    n = mib * (1 << 20) // 4
    arrays = [np.ones(n, dtype=np.float32) for _ in range(threads)]
    best = 0.0
    for _ in range(rounds):
        workers = [threading.Thread(target=np.max, args=(a,)) for a in arrays]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = max(best, 4 * n * threads / (time.perf_counter() - start))
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="models/SmolLM2-135M-Instruct.Q4_1.gguf",
                    help="GGUF files, comma-separated")
    ap.add_argument("--qkv", default=str(ROOT / "build" / "tools" / "qkv"))
    ap.add_argument("--llama-bench", required=True, help="llama.cpp's llama-bench binary")
    ap.add_argument("--ik-llama-bench", help="ik_llama.cpp's llama-bench binary")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("-p", "--prompt", type=int, default=512)
    ap.add_argument("-n", "--gen", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3,
                    help="times each engine runs, in turns (rates: median over rounds)")
    ap.add_argument("--qkv-kv-cache", default="f32", choices=["f32", "q8_0"],
                    help="qkv's KV cache (llama-bench keeps its default, f16)")
    args = ap.parse_args()
    if args.rounds < 1:
        raise SystemExit(f"--rounds must be at least 1, got {args.rounds}")
    threads = [int(t) for t in args.threads.split(",")]
    for path in [args.qkv, args.llama_bench] + ([args.ik_llama_bench] if args.ik_llama_bench else []):
        if not os.access(path, os.X_OK):
            raise SystemExit(f"{path} is not an executable; build it first (bench/build_llama_cpp.sh)")
    bandwidth = {t: read_bandwidth(t) for t in threads}
    print(f"read bandwidth: "
          + ", ".join(f"{t} thread{'s' if t > 1 else ''} {bandwidth[t] / 1e9:.1f} GB/s"
                      for t in threads))
    engines = [("qkv", None), ("llama.cpp", args.llama_bench)]
    if args.ik_llama_bench:
        engines.append(("ik_llama.cpp", args.ik_llama_bench))
    print()
    print("| model | test | threads | " + " | ".join(f"{e} tok/s" for e, _ in engines) +
          " | qkv / llama.cpp | " + ("qkv / ik_llama.cpp | " if args.ik_llama_bench else "") +
          "% of bandwidth bound (tg): " + ", ".join(e for e, _ in engines) + " |")
    print("|---|---|---:|" + "---:|" * (len(engines) + 1 + bool(args.ik_llama_bench)) + "---|")
    for model in args.models.split(","):
        per_token = bytes_read_per_token(model)
        rounds = {name: [] for name, _ in engines}  # per engine: (rates, rss) of each round
        for r in range(args.rounds):
            for name, binary in engines[r % len(engines):] + engines[:r % len(engines)]:
                if name == "qkv":
                    rounds[name].append(qkv_rates(args.qkv, model, args.prompt, args.gen,
                                                  threads, args.reps, args.qkv_kv_cache))
                else:
                    rounds[name].append(llama_bench_rates(binary, model, args.prompt, args.gen,
                                                          threads, args.reps))
        results = {name: {key: float(np.median([rates.get(key, np.nan) for rates, _ in runs]))
                          for key in runs[0][0]} for name, runs in rounds.items()}
        rss = {name: max(peak for _, peak in runs) for name, runs in rounds.items()}
        for test, tokens in (("pp", args.prompt), ("tg", args.gen)):
            for t in threads:
                rates = [results[e].get((test, t), float("nan")) for e, _ in engines]
                cells = [f"{r:.1f}" for r in rates]
                ratios = [f"**{rates[0] / rates[1]:.2f}**"]
                if args.ik_llama_bench:
                    ratios.append(f"**{rates[0] / rates[2]:.2f}**")
                bound = ""
                if test == "tg":
                    limit = bandwidth[t] / per_token
                    bound = ", ".join(f"{100 * r / limit:.0f}%" for r in rates)
                print(f"| {pathlib.Path(model).name} | {test}{tokens} | {t} | " + " | ".join(cells) +
                      " | " + " | ".join(ratios) + f" | {bound} |")
        print(f"\n{pathlib.Path(model).name}: {per_token / 1e6:.1f} MB of weights read per generated "
              "token; peak RSS " + ", ".join(f"{e} {rss[e]:.0f} MiB" for e, _ in engines))
        print()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
