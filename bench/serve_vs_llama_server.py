#!/usr/bin/env python3
"""`qkv serve` against llama.cpp's `llama-server` (issue 40): the same GGUF file, the same
--parallel and threads, streamed chat completions from 1, 4 and 16 concurrent clients, then a
burst of 64 clients at once.

    .venv/bin/python bench/serve_vs_llama_server.py --llama-server /path/to/llama-server \\
        --out /tmp/serve.md
    .venv/bin/python bench/serve_vs_llama_server.py --build-llama-server
    .venv/bin/python bench/serve_vs_llama_server.py     # qkv alone

--build-llama-server runs bench/build_llama_cpp.sh (llama.cpp from the llama-cpp-python
sdist of bench/requirements.txt's version, GGML_NATIVE=ON, Release, into
~/.cache/qkv-peers; about 15 minutes of both cores the first time) and compares with its
llama-server.

Each client sends --requests requests one after the other: a chat prompt of about
--prompt-tokens tokens (distinct text per request, from tests/data/tokenizer_corpus.txt, so
neither server can reuse another's prompt) and max_tokens --max-tokens at temperature 0,
streamed, with llama-server's `ignore_eos` (both servers take it) so that every reply is
--max-tokens long on both (--stop-at-eos lets replies end at the end of turn instead). Per
run: aggregate generated tokens/s (all completion tokens / wall time), time to first token
(send → first content chunk) p50/p99, and the gaps between content chunks (inter-token)
p50/p99. The burst sends --burst requests at once (max_tokens 16) and counts
answers: 200, 503 (refused, with Retry-After) or anything else (lost), then checks /health.
"""

import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time

import httpx2 as httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
CORPUS = os.path.join(ROOT, "tests", "data", "tokenizer_corpus.txt")
START_SECONDS = 300


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url, process, seconds=START_SECONDS):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url}/health did not answer 200 in {seconds} s")


class ServerProcess:
    """A server started on a free loopback port; stopped with SIGTERM."""

    def __init__(self, name, command, port):
        self.name, self.port = name, port
        self.url = f"http://127.0.0.1:{port}"
        log(f"{name}: {' '.join(command)}")
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        wait_healthy(self.url, self.process)

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_qkv(args):
    port = free_port()
    qkv = args.qkv or os.path.join(ROOT, "build", "tools", "qkv")
    return ServerProcess("qkv serve", [
        qkv, "serve", "--model", args.model, "--port", str(port), "--parallel",
        str(args.parallel), "--threads", str(args.threads), "--ctx-size", str(args.ctx_size),
        "--max-queue", str(args.max_queue)], port)


def start_llama_server(args):
    port = free_port()
    # llama-server's --ctx-size is shared by its slots.
    return ServerProcess("llama-server", [
        args.llama_server, "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
        "-np", str(args.parallel), "-t", str(args.threads), "-c",
        str(args.ctx_size * args.parallel), "--no-webui"], port)


def build_llama_server():
    """bench/build_llama_cpp.sh's llama-server (built once into a cache, native flags)."""
    script = os.path.join(ROOT, "bench", "build_llama_cpp.sh")
    out = subprocess.run([script], check=True, stdout=subprocess.PIPE, text=True).stdout
    return os.path.join(out.strip().splitlines()[-1], "llama-server")


def prompts(count, words):
    """`count` distinct user messages of about `words` words (~1.75 SmolLM2 tokens each on
    the corpus; each reply's usage gives the true count, which the table reports)."""
    text = open(CORPUS, encoding="utf-8").read().split()
    out = []
    for i in range(count):
        start = (i * 97) % max(1, len(text) - words)
        out.append("Summarise this text: " + " ".join(text[start:start + words]))
    return out


def stream_chat(url, model, content, max_tokens, ignore_eos=False):
    """One streamed chat completion. -> dict(status, ttft, gaps, tokens)."""
    body = {"model": model, "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    if ignore_eos:
        body["ignore_eos"] = True
    start = time.perf_counter()
    result = {"status": None, "ttft": None, "gaps": [], "tokens": 0, "prompt_tokens": None}
    last = None
    try:
        with httpx.stream("POST", url + "/v1/chat/completions", json=body,
                          timeout=START_SECONDS) as response:
            result["status"] = response.status_code
            if response.status_code != 200:
                response.read()
                return result
            chunks = 0
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[len("data: "):])
                if event.get("usage"):
                    result["tokens"] = event["usage"]["completion_tokens"]
                    result["prompt_tokens"] = event["usage"].get("prompt_tokens")
                for choice in event.get("choices", []):
                    if (choice.get("delta") or {}).get("content"):
                        now = time.perf_counter()
                        if last is None:
                            result["ttft"] = now - start
                        else:
                            result["gaps"].append(now - last)
                        last = now
                        chunks += 1
            result["tokens"] = result["tokens"] or chunks
    except httpx.TransportError as e:
        result["status"] = f"error: {type(e).__name__}"
    return result


def percentile(values, p):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def model_id(server):
    return httpx.get(server.url + "/v1/models", timeout=30).json()["data"][0]["id"]


def run_clients(server, clients, requests_per_client, texts, max_tokens, ignore_eos):
    model = model_id(server)
    jobs = [[texts[(c * requests_per_client + r) % len(texts)] for r in range(requests_per_client)]
            for c in range(clients)]

    def client(messages):
        return [stream_chat(server.url, model, m, max_tokens, ignore_eos) for m in messages]

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        results = [r for rs in pool.map(client, jobs) for r in rs]
    wall = time.perf_counter() - start
    ok = [r for r in results if r["status"] == 200]
    ttft = [r["ttft"] for r in ok if r["ttft"] is not None]
    gaps = [g for r in ok for g in r["gaps"]]
    tokens = sum(r["tokens"] for r in ok)
    return {"clients": clients, "requests": len(results), "ok": len(ok), "tokens": tokens,
            "wall": wall, "tokens_per_s": tokens / wall, "ttft_p50": percentile(ttft, 50),
            "ttft_p99": percentile(ttft, 99), "itl_p50": percentile(gaps, 50),
            "itl_p99": percentile(gaps, 99),
            "prompt_tokens": [r["prompt_tokens"] for r in ok if r["prompt_tokens"]],
            "statuses": sorted({str(r["status"]) for r in results if r["status"] != 200})}


def burst(server, count, texts):
    model = model_id(server)
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        results = list(pool.map(lambda i: stream_chat(server.url, model, texts[i % len(texts)], 16),
                                range(count)))
    statuses = [r["status"] for r in results]
    try:
        healthy = httpx.get(server.url + "/health", timeout=30).status_code == 200
    except httpx.TransportError:
        healthy = False
    return {"sent": count, "200": statuses.count(200), "503": statuses.count(503),
            "lost": sum(s not in (200, 503) for s in statuses), "healthy": healthy}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--qkv", help="the qkv binary (default: build/tools/qkv)")
    ap.add_argument("--llama-server", help="a llama-server binary to compare against")
    ap.add_argument("--build-llama-server", action="store_true",
                    help="build llama-server (bench/build_llama_cpp.sh, cached) and compare")
    ap.add_argument("--parallel", type=int, default=16, help="slots of both servers")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx-size", type=int, default=1024,
                    help="positions per slot (room for every prompt and reply: a request "
                         "refused by one server and not the other would skew the rates)")
    ap.add_argument("--max-queue", type=int, default=64, help="qkv serve's --max-queue")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--requests", type=int, default=2, help="requests per client")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--stop-at-eos", action="store_true",
                    help="let replies end at the end of turn (default: ignore_eos, every reply "
                         "--max-tokens long on both servers)")
    ap.add_argument("--burst", type=int, default=64, help="clients at once at the end (0: none)")
    ap.add_argument("--out", help="also write the markdown here")
    args = ap.parse_args()
    if args.build_llama_server:
        args.llama_server = build_llama_server()
    if args.llama_server and not shutil.which(args.llama_server) and \
            not os.path.isfile(args.llama_server):
        ap.error(f"--llama-server {args.llama_server}: no such file")

    levels = [int(c) for c in args.concurrency.split(",")]
    texts = prompts(max(levels) * args.requests + args.burst, int(args.prompt_tokens / 1.75))
    engines = [("qkv serve", start_qkv)]
    if args.llama_server:
        engines.append(("llama-server", start_llama_server))
    rows, bursts = [], {}
    for name, start in engines:
        server = start(args)
        try:
            stream_chat(server.url, model_id(server), texts[0], 4)  # warm-up
            for clients in levels:
                log(f"{name}: {clients} clients")
                rows.append((name, run_clients(server, clients, args.requests, texts,
                                               args.max_tokens, not args.stop_at_eos)))
            if args.burst:
                log(f"{name}: {args.burst} clients at once")
                bursts[name] = burst(server, args.burst, texts)
        finally:
            server.stop()

    lines = [f"serve_vs_llama_server.py, {datetime.datetime.now():%Y-%m-%d %H:%M}, "
             f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
             f"{os.path.basename(args.model)}, --parallel {args.parallel}, {args.threads} threads, "
             f"~{args.prompt_tokens}-token prompts, {args.max_tokens} new tokens, "
             f"{args.requests} requests per client, streamed"
             f"{'' if args.stop_at_eos else ', ignore_eos'}", "",
             "| server | clients | requests ok | prompt tokens mean (max) | generated tokens | "
             "tokens/s | TTFT p50 (s) | TTFT p99 (s) | inter-token p50 (ms) | "
             "inter-token p99 (ms) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in rows:
        pt = r["prompt_tokens"]
        prompt = f"{statistics.mean(pt):.0f} ({max(pt)})" if pt else "-"
        failed = f" (other: {', '.join(r['statuses'])})" if r["statuses"] else ""
        lines.append(f"| {name} | {r['clients']} | {r['ok']}/{r['requests']}{failed} | {prompt} | "
                     f"{r['tokens']} | "
                     f"{r['tokens_per_s']:.1f} | {r['ttft_p50']:.2f} | {r['ttft_p99']:.2f} | "
                     f"{1e3 * r['itl_p50']:.1f} | {1e3 * r['itl_p99']:.1f} |")
    if len(engines) == 2:
        lines += ["", "| clients | qkv / llama-server tokens/s | TTFT p99 qkv / llama-server |",
                  "|---:|---:|---:|"]
        by = {(n, r["clients"]): r for n, r in rows}
        for clients in levels:
            q, l = by[("qkv serve", clients)], by[("llama-server", clients)]
            lines.append(f"| {clients} | {q['tokens_per_s'] / l['tokens_per_s']:.2f}× | "
                         f"{q['ttft_p99'] / l['ttft_p99']:.2f} |")
    if bursts:
        lines += ["", f"| server | sent at once | 200 | 503 | lost | healthy after |",
                  "|---|---:|---:|---:|---:|---|"]
        for name, b in bursts.items():
            lines.append(f"| {name} | {b['sent']} | {b['200']} | {b['503']} | {b['lost']} | "
                         f"{'yes' if b['healthy'] else 'NO'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    lost = sum(b["lost"] for b in bursts.values())
    return 1 if lost or not all(b["healthy"] for b in bursts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
