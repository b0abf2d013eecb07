"""`qkv serve` on a Ray cluster: replicas behind Ray Serve's HTTP proxy, with
the same OpenAI endpoints (docs/serving.md, docs/scaling.md).

    python -m qkv.ray_serve --model models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --embed-model models/all-MiniLM-L6-v2 --port 8000
    # then any OpenAI client at http://127.0.0.1:8000/v1

or from Python:

    from ray import serve
    from qkv.ray_serve import qkv_app
    serve.run(qkv_app(model="models/SmolLM2-135M-Instruct.Q4_1.gguf"), route_prefix="/")

Each replica is a Ray actor that starts `qkv serve` on a free loopback port of
its node and forwards every request to it: bodies, headers and statuses pass
unchanged (a server-sent-event stream chunk by chunk), so errors, API keys and
503s with Retry-After are those of `qkv serve`. Each response names its replica
in the header X-Qkv-Replica. Ray routes each request to a replica and restarts
one whose /health stops answering. The model files and the qkv binary must be at
the same paths on every node.

By default the replicas fit the cluster they find: one per `threads_per_replica`
CPUs. Asking for more than the cluster's CPUs hold is an error naming both
numbers (Ray would otherwise wait for them forever).
"""

import argparse
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

START_SECONDS = 120  # loading a model on a busy node


def qkv_binary(path=None):
    """The `qkv` binary: `path`, $QKV_CLI, `qkv` on PATH, else this checkout's build/tools/qkv."""
    candidates = [path, os.environ.get("QKV_CLI"), shutil.which("qkv"),
                  pathlib.Path(__file__).resolve().parents[2] / "build" / "tools" / "qkv"]
    for candidate in candidates:
        if candidate and pathlib.Path(candidate).is_file():
            return str(pathlib.Path(candidate).resolve())
    raise FileNotFoundError(f"qkv_binary(): no qkv binary at {path or 'QKV_CLI, PATH'} or in "
                            f"build/tools/; build it (cmake --build build --target qkv_cli)")


def start_qkv_serve(binary, args, timeout=START_SECONDS):
    """Starts `binary serve ARGS --host 127.0.0.1 --port 0`; -> (process, port) once it
    listens. Its stderr goes on to ours."""
    process = subprocess.Popen([binary, "serve", *args, "--host", "127.0.0.1", "--port", "0"],
                               stderr=subprocess.PIPE, text=True)
    deadline, log = time.monotonic() + timeout, []
    while True:
        line = process.stderr.readline()
        if not line or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("qkv serve did not start:\n" + "".join(log) + line)
        log.append(line)
        sys.stderr.write(line)
        found = re.search(r"listening on http://[\d.]+:(\d+)", line)
        if found:
            break
    threading.Thread(target=lambda: [sys.stderr.write(l) for l in process.stderr],
                     daemon=True).start()
    return process, int(found.group(1))


def serve_arguments(model=None, embed_model=None, threads=1, parallel=4, ctx_size=2048,
                    api_key=None, extra=()):
    """The `qkv serve` arguments of one replica."""
    if not model and not embed_model:
        raise ValueError("qkv_app(): give model (a GGUF file), embed_model (a directory), or both")
    args = ["--threads", str(threads), "--parallel", str(parallel), "--ctx-size", str(ctx_size)]
    for flag, value in (("--model", model), ("--embed-model", embed_model)):
        if value:
            args += [flag, str(pathlib.Path(value).resolve())]
    if api_key:
        args += ["--api-key", api_key]
    return args + [str(a) for a in extra]


def replicas_for(cluster_cpus, threads_per_replica, replicas=None):
    """How many replicas: `replicas`, or as many as the cluster's CPUs hold (at least one).
    ValueError when `replicas` × `threads_per_replica` exceeds the CPUs."""
    for name, value in (("threads_per_replica", threads_per_replica), ("replicas", replicas)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"qkv_app(): {name} must be an integer >= 1, got {value!r}")
    if replicas is None:
        return max(1, int(cluster_cpus // threads_per_replica))
    if replicas * threads_per_replica > cluster_cpus:
        raise ValueError(f"qkv_app(): replicas={replicas} of threads_per_replica="
                         f"{threads_per_replica} CPUs need {replicas * threads_per_replica} "
                         f"CPUs; the Ray cluster has {cluster_cpus:g}")
    return replicas


def qkv_app(model=None, embed_model=None, *, replicas=None, threads_per_replica=1, parallel=4,
            ctx_size=2048, api_key=None, extra_args=(), binary=None):
    """A Ray Serve application of `replicas` `qkv serve` processes (see the module's doc).
    Joins the Ray cluster of ray.init() if called before, else starts a local one."""
    import ray
    from ray import serve

    if not ray.is_initialized():
        ray.init()
    count = replicas_for(ray.cluster_resources().get("CPU", 0), threads_per_replica, replicas)
    args = serve_arguments(model, embed_model, threads_per_replica, parallel, ctx_size, api_key,
                           extra_args)
    binary = qkv_binary(binary)
    return _deployment(serve).options(
        num_replicas=count, ray_actor_options={"num_cpus": threads_per_replica},
        # Every slot busy and a full queue: qkv answers 503 itself.
        max_ongoing_requests=max(64, 4 * parallel),
    ).bind(binary, args)


def _deployment(serve):
    import aiohttp
    from starlette.responses import Response, StreamingResponse

    # Headers that belong to one hop, not to the request or response itself; the
    # encodings too (aiohttp decompresses what it reads, Ray's proxy compresses anew).
    hop_by_hop = {"connection", "keep-alive", "transfer-encoding", "content-length", "host",
                  "upgrade", "te", "trailer", "accept-encoding", "content-encoding"}

    @serve.deployment(name="qkv", health_check_period_s=10, health_check_timeout_s=30)
    class QkvReplica:
        def __init__(self, binary, args):
            self.process, port = start_qkv_serve(binary, args)
            self.url = f"http://127.0.0.1:{port}"
            self.name = f"{socket.gethostname()}:{os.getpid()}"
            self.session = None

        async def _session(self):
            if self.session is None:
                self.session = aiohttp.ClientSession(
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=30))
            return self.session

        async def __call__(self, request):
            session = await self._session()
            headers = {k: v for k, v in request.headers.items() if k.lower() not in hop_by_hop}
            upstream = await session.request(request.method, self.url + request.url.path,
                                             params=request.query_params, headers=headers,
                                             data=await request.body())
            reply_headers = {k: v for k, v in upstream.headers.items()
                             if k.lower() not in hop_by_hop}
            reply_headers["X-Qkv-Replica"] = self.name
            if upstream.content_type == "text/event-stream":
                async def chunks():
                    try:
                        async for chunk in upstream.content.iter_any():
                            yield chunk
                    finally:  # the client went away: so does the upstream request
                        upstream.close()
                return StreamingResponse(chunks(), status_code=upstream.status,
                                         headers=reply_headers)
            body = await upstream.read()
            upstream.release()
            return Response(body, status_code=upstream.status, headers=reply_headers)

        async def check_health(self):
            if self.process.poll() is not None:
                raise RuntimeError(f"qkv serve exited with {self.process.returncode}")
            session = await self._session()
            async with session.get(self.url + "/health") as reply:
                if reply.status != 200:
                    raise RuntimeError(f"qkv serve's /health answered {reply.status}")

        def __del__(self):
            if getattr(self, "process", None) and self.process.poll() is None:
                self.process.terminate()  # finishes its requests, then exits
                try:
                    self.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.process.kill()

    return QkvReplica


def _parser():
    p = argparse.ArgumentParser(
        prog="python -m qkv.ray_serve",
        description="Run `qkv serve` replicas on a Ray cluster behind Ray Serve's HTTP proxy, "
        "with the same OpenAI endpoints (/v1/chat/completions, /v1/completions, "
        "/v1/embeddings, /v1/models, /health, /metrics of one replica).",
        epilog="Example:\n  python -m qkv.ray_serve --model models/SmolLM2-135M-Instruct.Q4_1.gguf"
        " --port 8000\nSee docs/serving.md and docs/scaling.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", metavar="FILE", help="GGUF language model")
    p.add_argument("--embed-model", metavar="DIR", help="sentence-transformers model directory")
    p.add_argument("--replicas", type=int, metavar="N",
                   help="replicas (default: as many as the cluster's CPUs hold)")
    p.add_argument("--threads-per-replica", type=int, default=1, metavar="N",
                   help="CPUs (qkv threads) per replica (default: %(default)s)")
    p.add_argument("--parallel", type=int, default=4, metavar="N",
                   help="decoding slots per replica (default: %(default)s)")
    p.add_argument("--ctx-size", type=int, default=2048, metavar="N",
                   help="positions per slot (default: %(default)s)")
    p.add_argument("--api-key", default=os.environ.get("QKV_API_KEY"), metavar="KEY",
                   help="require 'Authorization: Bearer KEY' (default: $QKV_API_KEY)")
    p.add_argument("--host", default="127.0.0.1", help="Ray's HTTP proxy address (default: "
                   "%(default)s)")
    p.add_argument("--port", type=int, default=8000, help="its port (default: %(default)s)")
    p.add_argument("--address", help="a Ray cluster to join (default: a local one)")
    p.add_argument("--qkv", metavar="PATH", help="the qkv binary (default: QKV_CLI, PATH, build/)")
    return p


def main(argv=None):
    args = _parser().parse_args(argv)
    import ray
    from ray import serve

    ray.init(address=args.address)
    serve.start(http_options={"host": args.host, "port": args.port})
    app = qkv_app(args.model, args.embed_model, replicas=args.replicas,
                  threads_per_replica=args.threads_per_replica, parallel=args.parallel,
                  ctx_size=args.ctx_size, api_key=args.api_key, binary=args.qkv)
    serve.run(app, name="qkv", route_prefix="/")
    print(f"qkv on Ray Serve: http://{args.host}:{args.port}/v1 (Ctrl-C stops)", file=sys.stderr)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        serve.shutdown()


if __name__ == "__main__":
    main()
