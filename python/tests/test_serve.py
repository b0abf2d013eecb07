"""`qkv serve` (issue 40) through OpenAI's own Python client: greedy replies
equal `qkv chat` / `qkv generate --greedy`, embeddings equal `qkv embed`,
16 concurrent streams each equal their text alone, and every fault of the
issue's item 4 gets its status and message.

Each test starts the built `qkv` binary on a free loopback port (--port 0;
the server prints the port it got)."""

import base64
import concurrent.futures
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

from model_files import MINILM, SMOLLM2_GGUF, needs_minilm, needs_smollm2

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx2")  # what openai uses (httpx's successor)

pytestmark = [needs_smollm2, needs_minilm]

API_KEY = "test-key"
CHAT_MODEL = "SmolLM2-135M-Instruct.Q4_1"
EMBED_MODEL = "all-MiniLM-L6-v2"
CONTEXT = 512
START_SECONDS = 60
RUN_SECONDS = 120


def cli_path():
    # As helpers.cli_path, which imports qkv's extension module: this test needs only the CLI.
    if os.environ.get("QKV_CLI"):
        return pathlib.Path(os.environ["QKV_CLI"])
    return (pathlib.Path(__file__).resolve().parents[2] / os.environ.get("QKV_BUILD_DIR", "build")
            / "tools" / "qkv")


def require_cli():
    if not cli_path().is_file():
        pytest.skip(f"the qkv CLI is missing at {cli_path()}: build it (cmake --build build "
                    f"--target qkv_cli) or set QKV_CLI")


class Server:
    """A `qkv serve` process; its stderr is kept in `log`."""

    def __init__(self, *args, embed=True):
        require_cli()
        command = [str(cli_path()), "serve", "--model", str(SMOLLM2_GGUF), "--port", "0",
                   "--threads", "1", "--ctx-size", str(CONTEXT), *map(str, args)]
        if embed:
            command += ["--embed-model", str(MINILM)]
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        self.log = []
        deadline = time.monotonic() + START_SECONDS
        while True:
            line = self.process.stderr.readline()
            if not line or time.monotonic() > deadline:
                self.process.kill()
                pytest.fail("qkv serve did not start:\n" + "".join(self.log) + line)
            self.log.append(line)
            found = re.search(r"listening on http://([\d.]+):(\d+)", line)
            if found:
                self.host, self.port = found.group(1), int(found.group(2))
                break
        # Keep reading stderr so that the server never blocks on a full pipe.
        self.reader = threading.Thread(target=lambda: self.log.extend(self.process.stderr),
                                       daemon=True)
        self.reader.start()
        self.url = f"http://{self.host}:{self.port}"

    def client(self, api_key=API_KEY, **kwargs):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0,
                             timeout=RUN_SECONDS, **kwargs)

    def post(self, path, body, headers=None, **kwargs):
        headers = {"Authorization": f"Bearer {API_KEY}", **(headers or {})}
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return httpx.post(self.url + path, content=data, headers=headers, timeout=RUN_SECONDS,
                          **kwargs)

    def metric(self, name):
        text = httpx.get(self.url + "/metrics", timeout=10).text
        found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
        assert found, f"/metrics has no {name}:\n{text}"
        return float(found.group(1))

    def wait_for_metric(self, name, predicate, seconds=10):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = self.metric(name)
            if predicate(value):
                return value
            time.sleep(0.02)
        pytest.fail(f"{name} stayed at {self.metric(name)} for {seconds} s")

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


@pytest.fixture(scope="module")
def server():
    s = Server("--parallel", "16", "--api-key", API_KEY, "--max-body-bytes", 65536)
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.fixture
def small_server():
    """One slot, one place in the queue, a 1 s timeout: the limits."""
    s = Server("--parallel", "1", "--max-queue", "1", "--timeout", "1", embed=False)
    yield s
    s.stop()


def run_cli(*args, stdin=None):
    result = subprocess.run([str(cli_path()), *map(str, args)], input=stdin,
                            capture_output=True, text=True, timeout=RUN_SECONDS)
    assert result.returncode == 0, result.stderr
    return result.stdout


def qkv_chat_reply(user, max_tokens, system=None):
    """`qkv chat --greedy`'s reply to one user line."""
    args = ["chat", SMOLLM2_GGUF, "--greedy", "--max-new-tokens", max_tokens, "--threads", 1]
    if system:
        args += ["--system", system]
    out = run_cli(*args, stdin=user + "\n")
    assert out.startswith("> ") and out.endswith("\n> \n"), repr(out)
    return out[2:-len("\n> \n")]


def chat(client, content, max_tokens, **kwargs):
    return client.chat.completions.create(
        model=CHAT_MODEL, messages=[{"role": "user", "content": content}],
        max_tokens=max_tokens, temperature=0, **kwargs)


def streamed_text(stream):
    pieces, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    return "".join(pieces), finish, usage


def test_chat_at_temperature_0_equals_qkv_chat(server):
    question, max_tokens = "What is the capital of France?", 12
    expected = qkv_chat_reply(question, max_tokens)
    client = server.client()
    reply = chat(client, question, max_tokens)
    assert reply.choices[0].message.content == expected
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert 1 <= reply.usage.completion_tokens <= max_tokens
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens

    text, finish, usage = streamed_text(chat(client, question, max_tokens, stream=True,
                                             stream_options={"include_usage": True}))
    assert text == expected
    assert finish == reply.choices[0].finish_reason
    assert usage.completion_tokens == reply.usage.completion_tokens
    assert usage.prompt_tokens == reply.usage.prompt_tokens


def test_ignore_eos_generates_past_the_end_of_turn(server):
    # llama-server's extension, used by benchmarks that want every reply max_tokens long.
    question, max_tokens = "What is the capital of France?", 32
    client = server.client()
    short = chat(client, question, max_tokens)
    assert short.choices[0].finish_reason == "stop"  # the model ends its turn on its own
    assert short.usage.completion_tokens < max_tokens
    full = chat(client, question, max_tokens, extra_body={"ignore_eos": True})
    assert full.choices[0].finish_reason == "length"
    assert full.usage.completion_tokens == max_tokens
    assert full.choices[0].message.content.startswith(short.choices[0].message.content)


def test_completion_at_temperature_0_equals_qkv_generate(server):
    prompt, max_tokens = "The three primary colors are", 10
    out = run_cli("generate", SMOLLM2_GGUF, "--prompt", prompt, "--greedy", "--max-new-tokens",
                  max_tokens, "--threads", 1)
    assert out.startswith(prompt) and out.endswith("\n")
    expected = out[len(prompt):-1]
    reply = server.client().completions.create(model=CHAT_MODEL, prompt=prompt,
                                               max_tokens=max_tokens, temperature=0)
    assert reply.choices[0].text == expected
    assert reply.usage.completion_tokens <= max_tokens


def test_a_shared_system_prompt_reuses_the_cache(server):
    system = ("You are a terse assistant for a museum of natural history. Answer in one short "
              "sentence, and never use lists.")
    question, max_tokens = "Where do penguins live?", 8
    expected = qkv_chat_reply(question, max_tokens, system=system)
    client = server.client()
    before = server.metric("qkv_prompt_tokens_reused_total")
    for first in ("What do owls eat?", question):
        reply = client.chat.completions.create(
            model=CHAT_MODEL, max_tokens=max_tokens, temperature=0,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": first}])
    assert reply.choices[0].message.content == expected
    # The system prompt is ~30 tokens; the second request found them cached.
    assert server.metric("qkv_prompt_tokens_reused_total") - before >= 25


def cli_embeddings(texts):
    out = json.loads(run_cli("embed", "--model", MINILM, *texts))
    return np.array([row["embedding"] for row in out["data"]], dtype=np.float64), out


def cosines(a, b):
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_the_live_attention_explorer(server):
    """/explore serves qkv explore's page with a text box posting to
    /explore/attention, whose maps equal qkv.explore's (the embedding model's)."""
    qkv = pytest.importorskip("qkv")
    auth = {"Authorization": f"Bearer {API_KEY}"}
    page = httpx.get(server.url + "/explore", headers=auth, timeout=RUN_SECONDS)
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    assert '"/explore/attention"' in page.text and 'id="live-text"' in page.text
    reply = server.post("/explore/attention", {"text": "Dogs bark.", "text_b": "Cats sleep."})
    assert reply.status_code == 200, reply.text
    maps = reply.json()
    want = qkv.explore(str(MINILM), "Dogs bark.", text_b="Cats sleep.")
    assert maps["tokens"] == want.tokens
    np.testing.assert_array_equal(np.asarray(maps["weights"], dtype=np.float32), want.weights)
    for body, field in (({"txt": "a"}, "text"), ({"text": 1}, "text"), ({"text": "a", "text_b": 2}, "text_b")):
        refused = server.post("/explore/attention", body)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == field, refused.text
    too_long = server.post("/explore/attention", {"text": "word " * 400})
    assert too_long.status_code == 400 and "max_weights" in too_long.json()["error"]["message"]
    assert httpx.get(server.url + "/explore", timeout=10).status_code == 401  # the key applies


def test_embeddings_equal_qkv_embed(server):
    texts = ["A cat sits on the mat.", "Das ist ein Test.", "Paris is the capital of France, " * 8]
    expected, cli = cli_embeddings(texts)
    client = server.client()
    as_floats = client.embeddings.create(model=EMBED_MODEL, input=texts, encoding_format="float")
    got = np.array([row.embedding for row in as_floats.data], dtype=np.float64)
    assert got.shape == expected.shape
    assert cosines(got, expected).min() >= 0.99999
    assert as_floats.usage.prompt_tokens == cli["usage"]["prompt_tokens"]

    # base64: little-endian float32 bytes, the same vectors.
    raw = server.post("/v1/embeddings", {"model": EMBED_MODEL, "input": texts,
                                         "encoding_format": "base64"}).json()
    decoded = np.array([np.frombuffer(base64.b64decode(row["embedding"]), dtype="<f4")
                        for row in raw["data"]], dtype=np.float64)
    np.testing.assert_array_equal(decoded, got.astype(np.float32))

    one = client.embeddings.create(model=EMBED_MODEL, input=texts[0], dimensions=384)
    assert cosines(np.array([one.data[0].embedding]), expected[:1])[0] >= 0.99999


def test_concurrent_embedding_requests_equal_qkv_embed(server):
    texts = [f"Sentence number {i} is about {topic}." for i, topic in
             enumerate(["cats", "the sea", "trains", "tea", "rain", "chess", "bread", "stars"])]
    expected, _ = cli_embeddings(texts)
    client = server.client()
    with concurrent.futures.ThreadPoolExecutor(len(texts)) as pool:
        replies = list(pool.map(lambda t: client.embeddings.create(
            model=EMBED_MODEL, input=t, encoding_format="float"), texts))
    got = np.array([r.data[0].embedding for r in replies], dtype=np.float64)
    assert cosines(got, expected).min() >= 0.99999


def test_16_concurrent_streams_equal_their_text_alone(server):
    client = server.client()
    questions = [f"Name an animal whose name starts with the letter {c}." for c in "ABCDEFGHIJKLMNOP"]

    def ask(question):  # a short system prompt: less to prefill than the template's own
        return streamed_text(client.chat.completions.create(
            model=CHAT_MODEL, max_tokens=8, temperature=0, stream=True,
            messages=[{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": question}]))

    alone = [ask(q) for q in questions]
    steps_before = server.metric("qkv_batch_rows_count")
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        together = list(pool.map(ask, questions))
    assert together == alone
    # The 16 x 8 tokens took far fewer than 16 x 8 steps: sequences shared steps.
    assert server.metric("qkv_batch_rows_count") - steps_before < 16 * 7 / 2


def error_of(response, status):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def test_a_missing_or_wrong_api_key_is_401(server):
    with pytest.raises(openai.AuthenticationError) as raised:
        chat(server.client(api_key="wrong"), "Hi", 2)
    assert raised.value.status_code == 401
    no_header = httpx.post(server.url + "/v1/chat/completions", content="{}", timeout=10)
    assert "Authorization: Bearer" in error_of(no_header, 401)["message"]
    for auth in ("Bearer x", "Basic dGVzdC1rZXk="):
        assert "wrong" in error_of(server.post("/v1/models", {}, {"Authorization": auth}),
                                   401)["message"]
    assert httpx.get(server.url + "/health", timeout=10).json() == {"status": "ok"}


def test_a_body_over_the_limit_is_413(server):
    body = {"model": EMBED_MODEL, "input": ["word " * 20000]}
    error = error_of(server.post("/v1/embeddings", body), 413)
    assert "65536" in error["message"]


@pytest.mark.parametrize("body, param, words", [
    ("{not json", None, "not valid JSON"),
    ("[1, 2]", None, "JSON object"),
    ({"model": CHAT_MODEL, "messages": "hi"}, "messages", "expected an array"),
    ({"model": CHAT_MODEL, "messages": [{"role": "user", "content": "hi"}],
      "temperature": "hot"}, "temperature", "expected a number"),
    ({"model": CHAT_MODEL, "messages": [{"role": "user", "content": "hi"}],
      "top_p": 0}, "top_p", "not in (0, 1]"),
    ({"model": CHAT_MODEL, "messages": [{"role": "user", "content": "hi"}],
      "max_tokens": 0}, "max_tokens", "not in [1,"),
    ({"model": CHAT_MODEL, "messages": [{"role": "user", "content": "hi"}],
      "n": 2}, "n", "implements only 1"),
    ({"model": CHAT_MODEL, "messages": [{"role": "user", "content": "hi"}],
      "logit_bias": {"1": 5}}, "logit_bias", "implements only {}"),
    ({"model": CHAT_MODEL, "messages": [{"role": "user", "content": "hi"}],
      "mirostat": 2}, "mirostat", "unknown field"),
    ({"model": CHAT_MODEL, "messages": [{"role": "user", "content": "hi"}],
      "ignore_eos": "yes"}, "ignore_eos", "expected a boolean"),
    ({"model": CHAT_MODEL, "messages": [{"role": "tool", "content": "hi"}]},
     "messages[0].role", "got \"tool\""),
    ({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, "model",
     "unknown model 'gpt-4o'"),
])
def test_a_bad_chat_request_is_400_naming_the_field(server, body, param, words):
    error = error_of(server.post("/v1/chat/completions", body), 400)
    assert error["param"] == param
    assert words in error["message"]


def test_bad_embedding_requests_are_400_naming_the_field(server):
    for body, param in [({"model": EMBED_MODEL, "input": [1, 2]}, "input[0]"),
                        ({"model": EMBED_MODEL, "input": "x", "dimensions": 64}, "dimensions"),
                        ({"model": CHAT_MODEL, "input": "x"}, "model"),
                        ({"model": EMBED_MODEL, "input": "x", "encoding_format": "hex"},
                         "encoding_format")]:
        assert error_of(server.post("/v1/embeddings", body), 400)["param"] == param


def test_prompt_plus_max_tokens_over_the_context_is_400_with_both_numbers(server):
    prompt = "one two three four five six seven eight"  # 8 tokens
    error = error_of(server.post("/v1/completions", {"model": CHAT_MODEL, "prompt": prompt,
                                                     "max_tokens": CONTEXT - 4}), 400)
    assert error["param"] == "max_tokens" and error["code"] == "context_length_exceeded"
    numbers = set(map(int, re.findall(r"\d+", error["message"])))
    assert {8, CONTEXT - 4, CONTEXT} <= numbers, error["message"]


COUNTING = "1, 2, 3, 4, 5, 6, 7, 8,"  # greedy decoding counts on: no early end of turn


def open_stream(server, max_tokens, prompt=COUNTING):
    """A streamed completion, read up to its first chunk; -> (response, line iterator)."""
    client = httpx.Client(timeout=RUN_SECONDS)
    request = client.build_request(
        "POST", server.url + "/v1/completions",
        json={"model": CHAT_MODEL, "prompt": prompt, "max_tokens": max_tokens,
              "temperature": 0, "stream": True})
    response = client.send(request, stream=True)
    assert response.status_code == 200
    lines = response.iter_lines()
    assert next(line for line in lines if line).startswith("data: ")
    return client, response, lines


def test_a_full_queue_is_503_with_retry_after(small_server):
    client, response, _ = open_stream(small_server, 300)  # holds the one slot
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        queued = pool.submit(small_server.post, "/v1/completions",
                             {"model": CHAT_MODEL, "prompt": "Hi", "max_tokens": 2})
        small_server.wait_for_metric("qkv_queue_length", lambda n: n == 1)
        refused = small_server.post("/v1/completions",
                                    {"model": CHAT_MODEL, "prompt": "Hi", "max_tokens": 2})
        error = error_of(refused, 503)
        assert refused.headers["Retry-After"] == "1"
        assert error["code"] == "queue_full"
        response.close()  # frees the slot: the queued request runs
        assert queued.result(timeout=RUN_SECONDS).status_code == 200
    client.close()
    assert httpx.get(small_server.url + "/health", timeout=10).status_code == 200


def test_a_client_that_disconnects_frees_its_slot(small_server):
    client, response, lines = open_stream(small_server, 400)
    next(lines)
    generated = small_server.metric("qkv_generated_tokens_total")
    response.close()
    client.close()
    small_server.wait_for_metric("qkv_busy_slots", lambda n: n == 0, seconds=5)
    # Freed within a step or two of the close, not after its 400 tokens.
    assert small_server.metric("qkv_generated_tokens_total") - generated < 10
    reply = small_server.post("/v1/completions", {"model": CHAT_MODEL, "prompt": "Hi",
                                                  "max_tokens": 2})
    assert reply.status_code == 200


def test_a_slow_client_times_out(small_server):
    with socket.create_connection((small_server.host, small_server.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        start = time.monotonic()
        while sock.recv(4096):  # a 408 at most, then the close
            pass
        assert time.monotonic() - start < 5  # --timeout 1
    assert httpx.get(small_server.url + "/health", timeout=10).status_code == 200


def test_sigterm_finishes_running_requests_then_exits(small_server):
    client, response, lines = open_stream(small_server, 24)
    small_server.process.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    try:
        late = httpx.get(small_server.url + "/v1/models", timeout=10)
        assert late.status_code == 503 and "shutting down" in late.json()["error"]["message"]
    except httpx.TransportError:
        pass  # or it no longer accepts connections at all
    rest = [line for line in lines if line]
    assert rest[-1] == "data: [DONE]"
    assert json.loads(rest[-2][len("data: "):])["choices"][0]["finish_reason"] in ("length", "stop")
    client.close()
    assert small_server.process.wait(timeout=30) == 0
    assert "stopped" in "".join(small_server.log)


def test_it_listens_on_loopback_only(server):
    psutil = pytest.importorskip("psutil")
    listening = [c for c in psutil.Process(server.process.pid).net_connections("tcp")
                 if c.status == psutil.CONN_LISTEN]
    assert [c.laddr.ip for c in listening] == ["127.0.0.1"]


def test_the_readme_snippet_runs(server, capsys):
    """README.md's ```py block under "An OpenAI-compatible server", against this server."""
    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("### An OpenAI-compatible server"):]
    start = section.index("```py\n") + len("```py\n")
    code = section[start:section.index("```\n", start)]
    assert "127.0.0.1:8080" in code
    # The README's server has no API key; this one has.
    code = code.replace("127.0.0.1:8080", f"127.0.0.1:{server.port}").replace(
        'api_key="unused"', f'api_key="{API_KEY}"')
    exec(compile(code, "README.md", "exec"), {"__name__": "__readme__"})
    out = capsys.readouterr().out
    assert "Paris" in out and out.rstrip().endswith("384")


def test_a_port_in_use_is_an_error_not_a_shared_port(server):
    result = subprocess.run([str(cli_path()), "serve", "--model", str(SMOLLM2_GGUF), "--port",
                             str(server.port), "--threads", "1", "--ctx-size", "64"],
                            capture_output=True, text=True, timeout=RUN_SECONDS)
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{server.port}" in result.stderr
    assert "in use" in result.stderr
