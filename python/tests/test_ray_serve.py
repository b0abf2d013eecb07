"""qkv.ray_serve (issue 40, item 5): two `qkv serve` replicas on a local Ray
cluster of 2 CPUs, behind Ray Serve's HTTP proxy, answer OpenAI's endpoints as
`qkv serve` does, both of them serving."""

import concurrent.futures
import socket
import subprocess

import pytest

from model_files import MINILM, SMOLLM2_GGUF, needs_minilm, needs_smollm2
from test_serve import cli_path

pytestmark = [needs_smollm2, needs_minilm]

CHAT_MODEL = "SmolLM2-135M-Instruct.Q4_1"


def test_replicas_fit_the_cluster_unless_asked_otherwise():
    from qkv.ray_serve import replicas_for, serve_arguments
    assert replicas_for(2, 1) == 2
    assert replicas_for(8, 3) == 2
    assert replicas_for(1, 2) == 1  # one replica, even where it needs more CPUs than there are
    with pytest.raises(ValueError, match="replicas=4 of threads_per_replica=1 CPUs need 4 "
                                         "CPUs; the Ray cluster has 2"):
        replicas_for(2, 1, 4)
    with pytest.raises(ValueError, match="threads_per_replica must be an integer >= 1"):
        replicas_for(2, 0)
    with pytest.raises(ValueError, match="give model"):
        serve_arguments()


@pytest.fixture(scope="module")
def ray_app():
    pytest.importorskip("ray.serve")
    openai = pytest.importorskip("openai")
    if not cli_path().is_file():
        pytest.skip(f"the qkv CLI is missing at {cli_path()}")
    import ray
    from ray import serve

    from qkv.ray_serve import qkv_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(qkv_app(SMOLLM2_GGUF, MINILM, threads_per_replica=1, parallel=4, ctx_size=256,
                          binary=cli_path()), name="qkv", route_prefix="/")
        yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused",
                            max_retries=0, timeout=120)
    finally:
        serve.shutdown()
        ray.shutdown()


def test_two_replicas_answer_as_qkv_serve(ray_app):
    question, max_tokens = "What is the capital of France?", 8
    out = subprocess.run([str(cli_path()), "chat", str(SMOLLM2_GGUF), "--greedy",
                          "--max-new-tokens", str(max_tokens), "--threads", "1"],
                         input=question + "\n", capture_output=True, text=True, timeout=120)
    expected = out.stdout[2:-len("\n> \n")]

    def ask(_):
        raw = ray_app.chat.completions.with_raw_response.create(
            model=CHAT_MODEL, messages=[{"role": "user", "content": question}],
            max_tokens=max_tokens, temperature=0, stream=True)
        text = "".join(chunk.choices[0].delta.content or ""
                       for chunk in raw.parse() if chunk.choices)
        return text, raw.headers["x-qkv-replica"]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, range(8)))
    assert {text for text, _ in answers} == {expected}
    assert len({replica for _, replica in answers}) == 2, answers

    vectors = ray_app.embeddings.create(model="all-MiniLM-L6-v2", input=["a cat", "a dog"])
    assert [len(v.embedding) for v in vectors.data] == [384, 384]
    models = {m.id for m in ray_app.models.list()}
    assert models == {CHAT_MODEL, "all-MiniLM-L6-v2"}


def test_errors_pass_through_the_proxy(ray_app):
    import openai
    with pytest.raises(openai.BadRequestError) as raised:
        ray_app.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    assert raised.value.status_code == 400
    assert raised.value.body["param"] == "model"
