#!/usr/bin/env python3
"""Generation speed with a CPU-bound process beside it: default threads against --threads 1.

    PYTHONPATH=$PWD/python .venv/bin/python bench/busy_neighbour.py --rounds 5 \\
        [--qkv build/tools/qkv] [--before /path/to/older/qkv]

Runs `qkv generate FILE.gguf --greedy --stats` (SmolLM2 by default) alternately with default
threads (what a new user gets) and with --threads 1, each round once on a quiet machine and
once while a busy loop (one process spinning on one core, as another user's job would) runs
beside it. With --before, an older qkv binary runs the same commands in the same rounds.
Prints the median prompt and generation tokens/s of each case and the ratio default /
one thread: the default must not lose to one thread when a core is busy. Standard library only.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

STATS = re.compile(r"prompt: (\d+) tokens in [\d.]+ s \(([\d.]+) tokens/s\); "
                   r"generation: (\d+) tokens in [\d.]+ s \(([\d.]+) tokens/s\)")
PROMPT = ("Attention lets every token look at every other token and decide what matters. " * 8)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def generate(qkv, model, threads, tokens):
    cmd = [qkv, "generate", model, "--prompt", PROMPT, "--max-new-tokens", str(tokens),
           "--greedy", "--stats"]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)  # default threads: what the library picks by itself
    proc = subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    m = STATS.search(proc.stderr)
    if not m:
        raise SystemExit(f"no --stats line in the output of {' '.join(cmd)}:\n{proc.stderr}")
    return float(m.group(2)), float(m.group(4))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--qkv", default="build/tools/qkv")
    p.add_argument("--before", help="an older qkv binary to run beside --qkv")
    p.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=64, help="tokens generated per run")
    a = p.parse_args()

    binaries = {"after": a.qkv}
    if a.before:
        binaries["before"] = a.before
    cases = [(name, busy, threads) for busy in (False, True) for name in binaries
             for threads in (None, 1)]
    results = {c: [] for c in cases}
    start = time.time()
    for r in range(a.rounds):
        for busy in (False, True):
            spinner = None
            if busy:
                spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
                time.sleep(0.5)
            try:
                order = [c for c in cases if c[1] == busy]
                if r % 2:
                    order.reverse()
                for case in order:
                    name, _, threads = case
                    prompt, gen = generate(binaries[name], a.model, threads, a.tokens)
                    results[case].append((prompt, gen))
                    log(f"round {r + 1}/{a.rounds} {name} {'busy' if busy else 'quiet'} "
                        f"threads {threads or 'default'}: prompt {prompt:.1f}, "
                        f"generation {gen:.1f} tokens/s (load {os.getloadavg()[0]:.1f})")
            finally:
                if spinner:
                    spinner.kill()
                    spinner.wait()
    log(f"{time.time() - start:.0f} s")

    print(f"rounds {a.rounds}, {a.tokens} generated tokens per run, {os.cpu_count()} cores")
    print("| binary | neighbour | threads | prompt tokens/s | generation tokens/s "
          "| generation, default / 1 thread (paired, median (range)) |")
    print("|---|---|---|---:|---:|---:|")
    for case in cases:
        name, busy, threads = case
        prompt = statistics.median(x[0] for x in results[case])
        gen = statistics.median(x[1] for x in results[case])
        ratio = ""
        if threads is None:
            one = results[(name, busy, 1)]
            ratios = [d[1] / o[1] for d, o in zip(results[case], one)]
            ratio = (f"{statistics.median(ratios):.2f} "
                     f"({min(ratios):.2f}–{max(ratios):.2f})")
        print(f"| {name} | {'busy loop' if busy else 'none'} | {threads or 'default'} | "
              f"{prompt:.1f} | {gen:.1f} | {ratio} |")


if __name__ == "__main__":
    main()
