"""qkv.ray_embed: 10,000 lines embedded through Ray Data on a local cluster
equal `qkv embed`'s output (cosine >= 1 - 1e-6, same order).

The oracle is the CLI (build/tools/qkv, or $QKV_CLI) on the same file. One
local Ray cluster (2 CPUs) serves every test of this module; it is shut down
at the module's end, and the processes it started are checked gone. Starting
Ray and each pipeline run are bounded in time (SIGALRM): a hang fails with a
message instead of stalling CI.
"""

import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

from helpers import cli_path

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "all-MiniLM-L6-v2"
FORTUNES = pathlib.Path("/usr/share/games/fortunes")
TOKENIZER_CORPUS = ROOT / "tests" / "data" / "tokenizer_corpus.txt"

N_LINES = 10_000
MIN_COSINE = 1 - 1e-6
MAX_CHARS = 200  # short lines: CI's time is scarce
CLI_BATCH, RAY_BATCH = 64, 64  # texts per forward pass, both sides
RAY_START_SECONDS = 120
RUN_SECONDS = 300


def require_cli_and_model():
    if not cli_path().is_file():
        pytest.skip(f"the qkv CLI is missing at {cli_path()}: build it (cmake --build build "
                    f"--target qkv_cli) or set QKV_CLI")
    if not MODEL.is_dir():
        pytest.skip(f"{MODEL} is missing; scripts/fetch_model.sh (or scripts/setup.sh) fetches it")


def run_cli(args, what):
    try:
        subprocess.run([str(cli_path()), *map(str, args)], check=True, capture_output=True,
                       text=True, timeout=RUN_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what}: qkv embed did not finish in {RUN_SECONDS} s")
    except subprocess.CalledProcessError as e:
        pytest.fail(f"{what}: qkv embed exited with {e.returncode}:\n{e.stderr}")


class Timeout(Exception):
    pass


@contextlib.contextmanager
def deadline(seconds, what):
    """Raises Timeout in the main thread when the block runs longer than `seconds`."""

    def expire(signum, frame):
        raise Timeout(f"{what} did not finish in {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def cosines(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


# --- line splitting, without Ray ------------------------------------------------


def test_split_lines_reads_as_qkv_embed_does():
    from qkv.ray_embed import split_lines

    data = b"one\r\ntwo\n\n \t\x0b\x0c\r\nthree\x0bstill\rthree\xe2\x80\xa8three\n\r\nlast"
    lines, texts = split_lines(data, "f.txt")
    assert lines.tolist() == [0, 1, 4, 6]
    assert texts == ["one", "two", "three\x0bstill\rthree\u2028three", "last"]
    assert split_lines(b"", "f.txt")[1] == [] and split_lines(b"\n\n", "f.txt")[1] == []


def test_split_lines_names_the_line_that_is_not_utf8():
    from qkv.ray_embed import split_lines

    with pytest.raises(ValueError, match=r"bad\.txt: line 3 is not UTF-8: byte 4 .*\\xff"):
        split_lines(b"ok\n\nabc\xffdef\n", "bad.txt")
    assert split_lines(b"abc\xffdef", "bad.txt", errors="replace")[1] == ["abc\ufffddef"]


# --- argument checks, before any Ray work ---------------------------------------


@pytest.mark.parametrize("kwargs,error,match", [
    ({"concurrency": 0}, ValueError, "concurrency must be a positive integer, got 0"),
    ({"batch_size": 2.5}, ValueError, "batch_size must be a positive integer, got 2.5"),
    ({"threads_per_actor": True}, ValueError, "threads_per_actor must be a positive integer"),
    ({"pooling": "sum"}, ValueError, r"pooling must be one of \['mean', 'cls', 'max'\]"),
    ({"normalize": "yes"}, TypeError, "normalize must be True, False or None"),
    ({"errors": "ignore"}, ValueError, "errors must be \"strict\" or \"replace\""),
])
def test_bad_arguments_are_named(tmp_path, kwargs, error, match):
    from qkv.ray_embed import embed_corpus

    (tmp_path / "in.txt").write_text("a line\n")
    with pytest.raises(error, match=match):
        embed_corpus([tmp_path / "in.txt"], tmp_path / "out", MODEL, **kwargs)


def test_missing_input_and_nonempty_output_are_refused(tmp_path):
    from qkv.ray_embed import embed_corpus

    with pytest.raises(FileNotFoundError, match="input path '.*nowhere.txt' does not exist"):
        embed_corpus([tmp_path / "nowhere.txt"], tmp_path / "out", MODEL)
    (tmp_path / "in.txt").write_text("a line\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old.parquet").write_bytes(b"")
    with pytest.raises(FileExistsError, match="output_dir '.*out' is not empty; pass overwrite"):
        embed_corpus([tmp_path / "in.txt"], tmp_path / "out", MODEL)
    with pytest.raises(ValueError, match="input_paths is empty"):
        embed_corpus([], tmp_path / "out2", MODEL)


def test_an_output_that_cannot_be_created_fails_before_ray_runs(tmp_path, monkeypatch):
    from qkv import ray_embed

    # Ray is never imported: the output is checked first (docs/ray.md).
    monkeypatch.setitem(sys.modules, "ray", None)
    (tmp_path / "in.txt").write_text("a line\n")
    (tmp_path / "a-file").write_text("not a directory")
    with pytest.raises(NotADirectoryError, match="cannot create output_dir '.*a-file/out'"):
        ray_embed.embed_corpus([tmp_path / "in.txt"], tmp_path / "a-file" / "out", MODEL)
    assert ray_embed.main([str(tmp_path / "in.txt"), "-o", str(tmp_path / "a-file" / "o"),
                           "--model", str(MODEL)]) == 2


# --- pooling and normalisation options, without Ray -----------------------------


# CLS without normalisation runs through the actors below (the command-line test).
@pytest.mark.parametrize("pooling,normalize", [("max", None), ("mean", False), (None, True)])
def test_embed_texts_options_equal_qkv_embed(tmp_path, pooling, normalize):
    require_cli_and_model()
    import qkv
    from qkv.ray_embed import embed_texts

    texts = corpus_texts()[:100]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    args = ["embed", "-f", tmp_path / "in.txt", "--model", MODEL, "-o", tmp_path / "cli.npy"]
    args += ["--pooling", pooling] if pooling else []
    args += {None: [], True: ["--normalize"], False: ["--no-normalize"]}[normalize]
    run_cli(args, f"pooling={pooling} normalize={normalize}")
    theirs = np.load(tmp_path / "cli.npy")
    ours = embed_texts(qkv.SentenceEncoder(MODEL), texts, 16, pooling, normalize)
    assert ours.shape == theirs.shape
    assert cosines(ours, theirs).min() >= MIN_COSINE
    # Not only the direction: the norm shows whether normalisation happened.
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), np.linalg.norm(theirs, axis=1),
                               rtol=1e-5)


# --- the corpus -----------------------------------------------------------------


def corpus_texts():
    """N_LINES short non-blank lines: first those of tests/data/tokenizer_corpus.txt
    (accents, scripts, emoji, control characters inside lines), then lines of
    Debian's fortunes (real English)."""
    texts = []
    for line in TOKENIZER_CORPUS.read_bytes().decode("utf-8").split("\n"):
        # Kept as the text itself: not blank, not ending in "\r" (the reader drops it).
        if line.strip(" \t\v\f\r") and not line.endswith("\r") and len(line) <= MAX_CHARS:
            texts.append(line)
    if not FORTUNES.is_dir():
        pytest.skip(f"{FORTUNES} is missing: apt-get install fortunes (scripts/setup.sh does)")
    for path in sorted(FORTUNES.iterdir()):
        if path.suffix or not path.is_file():
            continue  # fortune's .dat indexes and .u8 links
        try:
            lines = path.read_bytes().decode("utf-8").split("\n")
        except UnicodeDecodeError:
            continue
        for line in lines:
            if (line.strip(" \t\v\f\r") and line != "%" and not line.endswith("\r")
                    and len(line) <= MAX_CHARS):
                texts.append(line)
                if len(texts) == N_LINES:
                    return texts
    pytest.skip(f"only {len(texts)} lines in {FORTUNES}; the test needs {N_LINES}")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """(file, [(line index, text)]): the texts, with blank and whitespace-only
    lines every 997 lines and CRLF endings every 13 lines, which the reader skips
    and drops as `qkv embed -f` does."""
    texts = corpus_texts()
    path = tmp_path_factory.mktemp("ray_corpus") / "corpus.txt"
    expected, chunks, index = [], [], 0
    for i, text in enumerate(texts):
        if i % 997 == 0:
            chunks += [b"\n", b" \t\x0b\x0c\r\n", b"\r\n"]
            index += 3
        chunks.append(text.encode("utf-8") + (b"\r\n" if i % 13 == 0 else b"\n"))
        expected.append((index, text))
        index += 1
    path.write_bytes(b"".join(chunks))
    return path, expected


@pytest.fixture(scope="module")
def cli_embeddings(corpus, tmp_path_factory):
    """`qkv embed -f corpus` as .npy, [N_LINES, 384], and its seconds."""
    require_cli_and_model()
    out = tmp_path_factory.mktemp("ray_cli") / "cli.npy"
    start = time.perf_counter()
    run_cli(["embed", "-f", corpus[0], "--model", MODEL, "--batch-size", CLI_BATCH,
             "--threads", "2", "-o", out], "the corpus")
    return np.load(out), time.perf_counter() - start


# --- the Ray cluster -------------------------------------------------------------


def descendants():
    import psutil

    return {p.pid: p for p in psutil.Process().children(recursive=True)}


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster with 2 CPUs for this module; afterwards, every
    process it started has exited (those left are killed and the test fails)."""
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -r requirements.txt")
    pytest.importorskip("ray.data", reason="Ray Data is not installed: pip install \"ray[data]\"")
    import psutil

    # No usage statistics sent anywhere, and every socket on the loopback.
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    before = descendants()
    temp = tempfile.mkdtemp(prefix="qkv-ray-")  # short: Ray's socket paths must fit 107 bytes
    start = time.perf_counter()
    try:
        with deadline(RAY_START_SECONDS, "ray.init() (a local cluster)"):
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                     object_store_memory=256 << 20, _temp_dir=temp,
                     _node_ip_address="127.0.0.1")
    except Exception as e:  # Timeout included
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
        pytest.fail(f"could not start a local Ray cluster: {type(e).__name__}: {e}")
    ray.data.DataContext.get_current().enable_progress_bars = False
    print(f"\nRay started in {time.perf_counter() - start:.1f} s")
    started = {pid: p for pid, p in descendants().items() if pid not in before}
    try:
        yield ray
    finally:
        ray.shutdown()
        _, alive = psutil.wait_procs(list(started.values()), timeout=30)
        for p in alive:  # only processes this fixture started
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        shutil.rmtree(temp, ignore_errors=True)
        assert not alive, f"Ray left processes running after ray.shutdown(): " \
                          f"{[p.pid for p in alive]} (killed)"


def read_output(out_dir):
    """The Parquet files in name order (Ray numbers them by write task), concatenated."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(pathlib.Path(out_dir).glob("*.parquet"))
    assert files, f"no Parquet files in {out_dir}"
    return pa.concat_tables([pq.read_table(f) for f in files])


def test_ray_embeddings_equal_qkv_embed(ray_cluster, corpus, cli_embeddings, tmp_path):
    from qkv.ray_embed import embed_corpus

    path, expected = corpus
    theirs, cli_seconds = cli_embeddings
    assert theirs.shape == (N_LINES, 384)
    start = time.perf_counter()
    with deadline(RUN_SECONDS, "embed_corpus (10,000 lines)"):
        rows = embed_corpus([path], tmp_path / "out", MODEL, batch_size=RAY_BATCH,
                            concurrency=2, threads_per_actor=1, show_progress=False)
    ray_seconds = time.perf_counter() - start
    print(f"\n{N_LINES} lines: qkv embed {cli_seconds:.1f} s (2 threads), "
          f"Ray {ray_seconds:.1f} s (2 actors x 1 thread)")
    assert rows == N_LINES
    table = read_output(tmp_path / "out")
    assert table.column_names == ["path", "line", "text", "embedding"]
    assert set(table.column("path").to_pylist()) == {str(path)}
    assert table.column("line").to_pylist() == [i for i, _ in expected], "rows out of order"
    assert table.column("text").to_pylist() == [t for _, t in expected]
    ours = np.asarray(table.column("embedding").combine_chunks().flatten()).reshape(N_LINES, -1)
    c = cosines(ours, theirs)
    worst = int(np.argmin(c))
    assert c[worst] >= MIN_COSINE, f"line {expected[worst][0]} ({expected[worst][1]!r}): " \
                                   f"cosine {c[worst]:.9f}"


def test_ray_names_the_line_that_is_not_utf8(ray_cluster, tmp_path):
    require_cli_and_model()
    from qkv.ray_embed import embed_corpus

    (tmp_path / "bad.txt").write_bytes(b"fine\nalso fine\nnot \xc3\x28 fine\n")
    with deadline(RUN_SECONDS, "embed_corpus (a bad file)"):
        with pytest.raises(ValueError, match=r"bad\.txt: line 3 is not UTF-8"):
            embed_corpus([tmp_path / "bad.txt"], tmp_path / "out", MODEL, show_progress=False)


def test_a_pool_larger_than_the_cluster_is_refused(ray_cluster, tmp_path):
    require_cli_and_model()
    from qkv.ray_embed import embed_corpus

    (tmp_path / "in.txt").write_text("a line\n")
    with pytest.raises(ValueError, match="need 4 CPUs; the Ray cluster has 2"):
        embed_corpus([tmp_path / "in.txt"], tmp_path / "out", MODEL, concurrency=2,
                     threads_per_actor=2)


def test_the_command_line_with_other_pooling_equals_qkv_embed(ray_cluster, tmp_path):
    """python -m qkv.ray_embed's options reach the actors: CLS pooling without
    normalisation, small calls spread over 2 actors, rows still in order."""
    require_cli_and_model()
    from qkv.ray_embed import main

    texts = corpus_texts()[:200]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    run_cli(["embed", "-f", tmp_path / "in.txt", "--model", MODEL, "--pooling", "cls",
             "--no-normalize", "-o", tmp_path / "cli.npy"], "pooling cls, no normalisation")
    with deadline(RUN_SECONDS, "python -m qkv.ray_embed (200 lines)"):
        code = main([str(tmp_path / "in.txt"), "-o", str(tmp_path / "out"), "--model", str(MODEL),
                     "--pooling", "cls", "--no-normalize", "--batch-size", "16",
                     "--concurrency", "2", "--lines-per-call", "50", "--quiet"])
    assert code == 0
    table = read_output(tmp_path / "out")
    assert table.column("line").to_pylist() == list(range(200))
    ours = np.asarray(table.column("embedding").combine_chunks().flatten()).reshape(200, -1)
    theirs = np.load(tmp_path / "cli.npy")
    assert cosines(ours, theirs).min() >= MIN_COSINE
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), np.linalg.norm(theirs, axis=1),
                               rtol=1e-5)


def test_a_corpus_of_blank_lines_gives_no_rows(ray_cluster, tmp_path):
    require_cli_and_model()
    from qkv.ray_embed import embed_corpus

    (tmp_path / "blank.txt").write_bytes(b"\n \t\n\r\n")
    with deadline(RUN_SECONDS, "embed_corpus (blank lines)"):
        assert embed_corpus([tmp_path / "blank.txt"], tmp_path / "out", MODEL,
                            show_progress=False) == 0
    # No rows, but a Parquet file with the documented columns for readers of the folder.
    import pyarrow.dataset

    table = pyarrow.dataset.dataset(tmp_path / "out", format="parquet").to_table()
    assert table.num_rows == 0
    assert table.column_names == ["path", "line", "text", "embedding"]
    embedding = table.schema.field("embedding").type
    assert (embedding.list_size, str(embedding.value_type)) == (384, "float"), embedding


def test_help_says_what_to_do():
    result = subprocess.run([sys.executable, "-m", "qkv.ray_embed", "--help"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for part in ("INPUT", "--output", "--concurrency", "--model", "--address", "Parquet"):
        assert part in result.stdout
