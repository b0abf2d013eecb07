#!/usr/bin/env python3
"""A/B of blocks_ab.cc (beside this script): one program linked to two builds of libqkv, alternated.

    python3 bench/experiments/blocks_ab.py --before /work/wt-before --after /work/wt-ab --rounds 5

Each tree must have its library built (cmake --build <tree>/build --target qkv). The script
compiles blocks_ab.cc (of the tree it lives in) against each tree's include/ and links
<tree>/build/libqkv.so, then runs the two binaries alternately, each run one process with
OMP_NUM_THREADS=--threads, from the current directory (which must hold
models/all-MiniLM-L6-v2). A round runs, for each measurement in turn, one process of each
binary measuring only it (`--only`), before first in the first round, after first in the next
and so on, so the two runs of a pair are seconds apart and see about the same machine load.
Arguments after `--` go to the binaries (e.g. --reps-train 3). Standard library only.

Per measurement it prints the median over rounds of each run's median, before and after, their
ratio after / before, the median and range of the per-round (paired) ratios, and the fastest
run of each side.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "blocks_ab.cc")
MEASUREMENTS = [
    ("embed_ms", "sentence embeddings, MiniLM-L6 forward of 32 × 128 tokens"),
    ("embed_bf16_ms", "the same in bf16"),
    ("embed_int8_ms", "the same in int8 (uncalibrated)"),
    ("gguf_prompt_ms", "SmolLM2-135M Q4_1 GGUF, a 512-token prompt"),
    ("gguf_gen_ms", "SmolLM2-135M Q4_1 GGUF, 128 greedy tokens"),
    ("decode_ms", "decoding, 512 greedy steps after a 16-token prompt"),
    ("train_ms", "training step, 6 encoder layers on 32 × 128 × 384, AdamW"),
]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def build(tree, out):
    lib = os.path.join(tree, "build")
    cmd = ["g++", "-O3", "-std=c++20", "-fopenmp", SOURCE, "-I" + os.path.join(tree, "include"),
           os.path.join(lib, "libqkv.so"), "-Wl,-rpath," + lib, "-o", out]
    log(" ".join(cmd))
    subprocess.run(cmd, check=True)


def run(binary, args, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    proc = subprocess.run([binary] + args, env=env, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", required=True, help="tree of the before commit (built)")
    p.add_argument("--after", required=True, help="tree of the after commit (built)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", default="2", help="thread counts, e.g. 1,2")
    p.add_argument("--bin-dir", default="/tmp", help="where the two binaries go")
    p.add_argument("--no-build", action="store_true", help="reuse the binaries in --bin-dir")
    p.add_argument("--json", help="also write every run's output here")
    p.add_argument("--only", default="embed,decode,train",
                   help="measurements to run (e.g. embed,embed_bf16,embed_int8,gguf_prompt,gguf_gen)")
    p.add_argument("bench_args", nargs="*", help="after --: arguments for blocks_ab")
    a = p.parse_args()

    binaries = {"before": os.path.join(a.bin_dir, "blocks_ab_before"),
                "after": os.path.join(a.bin_dir, "blocks_ab_after")}
    if not a.no_build:
        build(a.before, binaries["before"])
        build(a.after, binaries["after"])

    keys = [k for k, _ in MEASUREMENTS if k[:-3] in a.only.split(",")]
    results = {}
    start = time.time()
    for threads in [int(t) for t in a.threads.split(",")]:
        runs = {"before": [], "after": []}
        for r in range(a.rounds):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            row = {"before": {}, "after": {}}
            for key in keys:
                for side in order:
                    out = run(binaries[side], a.bench_args + ["--only", key[:-3]], threads)
                    row[side].update(out)
                    log(f"round {r + 1}/{a.rounds} {key} {side}: {out[key]:.1f}  "
                        f"(threads {out['threads']}, load {os.getloadavg()[0]:.1f})")
            for side in order:
                runs[side].append(row[side])
        results[threads] = runs
        log(f"{time.time() - start:.0f} s")

        print(f"\nrounds {a.rounds}, OMP_NUM_THREADS={threads}, "
              f"load average at the end {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        print("| measurement | before ms | after ms | after / before | paired ratios: median "
              "(range) | fastest run before / after ms |")
        print("|---|---:|---:|---:|---:|---:|")
        for key, name in MEASUREMENTS:
            if key not in keys:
                continue
            before = [o[key] for o in runs["before"]]
            after = [o[key] for o in runs["after"]]
            ratios = [y / x for x, y in zip(before, after)]
            mb, ma = statistics.median(before), statistics.median(after)
            print(f"| {name} | {mb:.1f} | {ma:.1f} | {ma / mb:.3f} | "
                  f"{statistics.median(ratios):.3f} ({min(ratios):.3f}–{max(ratios):.3f}) | "
                  f"{min(before):.1f} / {min(after):.1f} |", flush=True)
    runs = results
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
