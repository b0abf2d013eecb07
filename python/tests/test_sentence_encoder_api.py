"""qkv.SentenceEncoder.encode speaks sentence-transformers 6.2 (the oracle), on
models/all-MiniLM-L6-v2 (scripts/fetch_model.sh): every encode() argument,
similarity(), max_seq_length, model ids in the Hugging Face cache, a missing
model, Ctrl-C during a long encode and the GIL released while it computes.

Embeddings agree when max|qkv - ST| <= 1e-5 (they are unit vectors or, for
token embeddings, of order 1: relative to the largest |ST| entry).
"""

import io
import json
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest
import torch

import qkv
from model_files import MINILM, needs_minilm

st = pytest.importorskip("sentence_transformers")

TOLERANCE = 1e-5

pytestmark = needs_minilm

TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "Un café à Paris, s'il vous plaît — déjà vu!",
    "東京は日本の首都です。",
    "",
    "def f(x): return x ** 2  # squares",
    " ".join(["attention"] * 300),  # longer than max_seq_length
]


def err(ours, theirs):
    ours, theirs = (np.asarray(x.numpy() if isinstance(x, torch.Tensor) else x, np.float64)
                    for x in (ours, theirs))
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    return float(np.abs(ours - theirs).max() / max(np.abs(theirs).max(), 1e-6))


@pytest.fixture(scope="module")
def models():
    reference = st.SentenceTransformer(str(MINILM), device="cpu")
    return qkv.SentenceEncoder(MINILM), reference


def test_default_numpy_matrix_and_single_text(models):
    ours, ref = models
    got, want = ours.encode(TEXTS), ref.encode(TEXTS)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.shape == (8, 384)
    assert err(got, want) <= TOLERANCE
    one = ours.encode("A man is eating food.")
    assert one.shape == (384,) and err(one, ref.encode("A man is eating food.")) <= TOLERANCE


@pytest.mark.parametrize("batch_size", [1, 3, 32])
def test_batch_size(models, batch_size):
    ours, ref = models
    assert err(ours.encode(TEXTS, batch_size=batch_size),
               ref.encode(TEXTS, batch_size=batch_size)) <= TOLERANCE
    with pytest.raises(ValueError, match="batch_size"):
        ours.encode(TEXTS, batch_size=0)


def test_normalize_embeddings_and_truncate_dim(models):
    ours, ref = models
    for kwargs in ({"normalize_embeddings": True}, {"truncate_dim": 64},
                   {"truncate_dim": 64, "normalize_embeddings": True}):
        got, want = ours.encode(TEXTS, **kwargs), ref.encode(TEXTS, **kwargs)
        assert err(got, want) <= TOLERANCE, kwargs
    norms = np.linalg.norm(ours.encode(TEXTS, truncate_dim=64, normalize_embeddings=True), axis=1)
    np.testing.assert_allclose(norms, 1.0, rtol=1e-5)


def test_convert_to_tensor_and_numpy(models):
    ours, ref = models
    got, want = (m.encode(TEXTS, convert_to_tensor=True) for m in models)
    assert isinstance(got, torch.Tensor) and got.shape == want.shape == (8, 384)
    assert got.dtype == want.dtype and err(got, want) <= TOLERANCE
    got, want = (m.encode(TEXTS, convert_to_numpy=False) for m in models)
    assert isinstance(got, list) and len(got) == len(want) == 8
    assert all(isinstance(g, torch.Tensor) and g.shape == (384,) for g in got)
    assert err(torch.stack(got), torch.stack(want)) <= TOLERANCE
    got = ours.encode("one", convert_to_tensor=True)
    assert isinstance(got, torch.Tensor) and got.shape == (384,)


def test_token_embeddings(models):
    ours, ref = models
    want = ref.encode(TEXTS, output_value="token_embeddings")
    for kwargs, kind in (({}, np.ndarray), ({"convert_to_tensor": True}, torch.Tensor),
                         ({"convert_to_numpy": False}, torch.Tensor)):
        got = ours.encode(TEXTS, output_value="token_embeddings", batch_size=3, **kwargs)
        assert isinstance(got, list) and len(got) == len(TEXTS)
        for i, (g, w) in enumerate(zip(got, want)):
            assert isinstance(g, kind)
            assert tuple(g.shape) == tuple(w.shape), f"text {i}"
            assert err(g, w) <= TOLERANCE, f"text {i}"
    assert want[-1].shape[0] == ours.max_seq_length  # truncated, as ST
    assert len(ours.encode(TEXTS[0], output_value="token_embeddings")) == len(
        ours.token_ids(TEXTS[0]))
    with pytest.raises(ValueError, match="output_value"):
        ours.encode(TEXTS, output_value="pooled")


def test_prompt_and_prompt_name(models):
    ours, ref = models
    got = ours.encode(TEXTS[:3], prompt="query: ")
    assert err(got, ref.encode(TEXTS[:3], prompt="query: ")) <= TOLERANCE
    assert err(got, ours.encode(TEXTS[:3])) > 1e-3  # the prompt changes the embeddings
    named = qkv.SentenceEncoder(MINILM, prompts={"query": "query: "})
    assert err(named.encode(TEXTS[:3], prompt_name="query"), got) <= TOLERANCE
    default = qkv.SentenceEncoder(MINILM, prompts={"query": "query: "},
                                  default_prompt_name="query")
    assert err(default.encode(TEXTS[:3]), got) <= TOLERANCE
    with pytest.raises(ValueError, match="prompt name 'passage'"):
        named.encode(TEXTS, prompt_name="passage")
    # sentence-transformers warns and drops prompt_name; here it is an error.
    with pytest.raises(ValueError, match="prompt or prompt_name, not both"):
        named.encode(TEXTS, prompt="query: ", prompt_name="query")


def test_include_prompt_false_is_refused_with_a_prompt(models, tmp_path):
    # sentence-transformers then pools over the text's tokens alone; qkv cannot.
    _, ref = models
    for entry in MINILM.iterdir():
        if entry.name != "1_Pooling":
            (tmp_path / entry.name).symlink_to(entry)
    (tmp_path / "1_Pooling").mkdir()
    config = json.loads((MINILM / "1_Pooling" / "config.json").read_text())
    (tmp_path / "1_Pooling" / "config.json").write_text(
        json.dumps({**config, "include_prompt": False}))
    excluded = st.SentenceTransformer(str(tmp_path), device="cpu")
    assert err(excluded.encode(TEXTS[:3], prompt="query: "),
               ref.encode(TEXTS[:3], prompt="query: ")) > 1e-3
    ours = qkv.SentenceEncoder(tmp_path)
    with pytest.raises(ValueError, match="include_prompt"):
        ours.encode(TEXTS[:3], prompt="query: ")
    with pytest.raises(ValueError, match="include_prompt"):
        qkv.SentenceEncoder(tmp_path, prompts={"q": "query: "}, default_prompt_name="q").encode("x")
    # Without a prompt, or for token embeddings, there is nothing to leave out.
    assert err(ours.encode(TEXTS[:3]), ref.encode(TEXTS[:3])) <= TOLERANCE
    assert len(ours.encode(TEXTS[:2], prompt="query: ", output_value="token_embeddings")) == 2


def test_truncate_dim_must_be_a_positive_int(models):
    ours, _ = models
    for bad in (0, -5, 2.5, True, "64"):
        with pytest.raises(ValueError, match="truncate_dim must be None or a positive int"):
            ours.encode(TEXTS[:2], truncate_dim=bad)
        with pytest.raises(ValueError, match="truncate_dim must be None or a positive int"):
            qkv.SentenceEncoder(MINILM, truncate_dim=bad)
    assert ours.encode(TEXTS[:2], truncate_dim=np.int64(1000)).shape == (2, 384)  # as ST: all
    with pytest.raises(ValueError, match="raw token vectors"):
        ours.encode(TEXTS[:2], output_value="token_embeddings", normalize_embeddings=True)
    with pytest.raises(ValueError, match="raw token vectors"):
        ours.encode(TEXTS[:2], output_value="token_embeddings", truncate_dim=64)


def test_similarity(models):
    ours, ref = models
    a, b = ours.encode(TEXTS[:3]), ours.encode(TEXTS[3:])
    want = ref.similarity(a, b)
    got = ours.similarity(a, b)
    assert isinstance(got, np.ndarray) and got.shape == (3, 5) and err(got, want) <= 1e-6
    got_t = ours.similarity(torch.from_numpy(a), torch.from_numpy(b))
    assert isinstance(got_t, torch.Tensor) and err(got_t, want) <= 1e-6
    assert ours.similarity(a[0], b[0]).shape == (1, 1)
    # Unnormalised inputs: cosine, not dot.
    assert err(ours.similarity(3 * a, b), want) <= 1e-6
    for name in ("dot", "euclidean", "manhattan"):
        ours.similarity_fn_name = ref.similarity_fn_name = name
        try:
            assert err(ours.similarity(2 * a, b), ref.similarity(2 * a, b)) <= 1e-5, name
        finally:
            ours.similarity_fn_name = ref.similarity_fn_name = "cosine"
    with pytest.raises(ValueError, match="similarity_fn_name"):
        ours.similarity_fn_name = "jaccard"


def test_max_seq_length_setter(models):
    ours, ref = models
    assert ours.max_seq_length == ref.max_seq_length == 256
    ours.max_seq_length = ref.max_seq_length = 16
    try:
        assert len(ours.token_ids(TEXTS[-1])) == 16
        assert err(ours.encode(TEXTS), ref.encode(TEXTS)) <= TOLERANCE
    finally:
        ours.max_seq_length = ref.max_seq_length = 256
    assert err(ours.encode(TEXTS), ref.encode(TEXTS)) <= TOLERANCE
    for bad in (1, 513, -5):
        with pytest.raises(ValueError, match="max_seq_length"):
            ours.max_seq_length = bad
    with pytest.raises(TypeError):
        ours.max_seq_length = "64"
    assert ours.max_seq_length == 256


def test_show_progress_bar(models, capsys):
    ours, _ = models
    quiet = ours.encode(TEXTS, batch_size=2)
    assert capsys.readouterr().err == ""
    shown = ours.encode(TEXTS, batch_size=2, show_progress_bar=True)
    bar = capsys.readouterr().err
    assert "8/8" in bar and np.array_equal(shown, quiet)


def test_progress_bar_without_tqdm(models, monkeypatch):
    ours, _ = models
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm -> ImportError
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    ours.encode(TEXTS, batch_size=3, show_progress_bar=True)
    assert "8/8" in stderr.getvalue() and "3/8" in stderr.getvalue()


def test_device_and_precision_arguments(models):
    ours, _ = models
    assert ours.encode("x", device="cpu").shape == (384,)
    with pytest.raises(ValueError, match="CPU only"):
        ours.encode("x", device="cuda")
    with pytest.raises(ValueError, match="precision"):
        ours.encode("x", precision="int8")
    with pytest.raises(TypeError, match=r"texts\[1\] must be a str"):
        ours.encode(["a", 3])


# --- model given as a Hugging Face id ---------------------------------------------------


def fake_hub(root, repo_id, commit="0123456789abcdef0123456789abcdef01234567"):
    """A huggingface_hub cache under root holding MINILM as repo_id (symlinks)."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for entry in MINILM.iterdir():
        (snapshot / entry.name).symlink_to(entry)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def test_model_from_hf_cache(tmp_path, monkeypatch, models):
    _, ref = models
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    snapshot = fake_hub(tmp_path / "hub", "sentence-transformers/all-MiniLM-L6-v2")
    want = ref.encode(TEXTS[:2])
    for name in ("sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2"):
        encoder = qkv.SentenceEncoder(name)
        assert encoder.model_dir == snapshot
        assert err(encoder.encode(TEXTS[:2]), want) <= TOLERANCE
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    with pytest.raises(FileNotFoundError, match="elsewhere"):
        qkv.SentenceEncoder("all-MiniLM-L6-v2")


def test_missing_model_says_how_to_fetch(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    for name in (str(tmp_path / "no-such-model"), "org/no-such-model"):
        with pytest.raises(FileNotFoundError, match="scripts/fetch_model.sh") as info:
            qkv.SentenceEncoder(name)
        assert "no-such-model" in str(info.value)
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        qkv.SentenceEncoder(tmp_path / "file")


# --- Ctrl-C and the GIL --------------------------------------------------------------


def many_texts(n=20000):
    rng = np.random.default_rng(0)
    words = "the cat sat on a mat while dogs ran past quickly under grey skies".split()
    return [" ".join(rng.choice(words, size=rng.integers(8, 40))) for _ in range(n)]


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM")
def test_ctrl_c_interrupts_a_long_encode(models):
    ours, _ = models
    texts = many_texts()
    # SIGINT from a timer thread after 1 s, as Ctrl-C would arrive.
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            ours.encode(texts, batch_size=32)
    finally:
        timer.cancel()
    elapsed = time.monotonic() - start
    print(f"\nencode of {len(texts)} texts: KeyboardInterrupt after {elapsed:.2f} s")
    assert elapsed < 2.0, f"control came back {elapsed - 1:.2f} s after Ctrl-C (limit 1 s)"

    # A SIGALRM handler's own exception ends the call too, and the encoder still works.
    class Alarm(Exception):
        pass

    def on_alarm(signum, frame):
        raise Alarm()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        start = time.monotonic()
        with pytest.raises(Alarm):
            ours.encode(texts, batch_size=32, show_progress_bar=False)
        assert time.monotonic() - start < 2.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert ours.encode(TEXTS[:2]).shape == (2, 384)


def test_gil_released_during_encode(models):
    ours, _ = models
    texts = many_texts(96)
    ticks = []
    running = threading.Event()

    def count():
        while not running.is_set():
            pass
        while running.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.002)

    counter = threading.Thread(target=count)
    counter.start()
    running.set()
    start = time.monotonic()
    try:
        ours.encode(texts, batch_size=32)
    finally:
        end = time.monotonic()
        running.clear()
        counter.join()
    during = [t for t in ticks if start < t < end]
    print(f"\nencode took {end - start:.2f} s; the other thread ran {len(during)} times meanwhile")
    assert end - start > 0.3, "too short to tell"
    # Holding the GIL, encode would leave the other thread a tick per switch
    # interval (5 ms) at most and none while inside the compiled call.
    assert len(during) >= 0.3 * (end - start) / 0.005


def test_encode_query_and_document_take_the_models_prompts(models):
    """sentence-transformers 6.2's encode_query / encode_document: the prompt
    named "query", or the first of "document", "passage", "corpus"."""
    _, ref = models
    prompts = {"query": "query: ", "passage": "passage: ", "corpus": "corpus: "}
    ours = qkv.SentenceEncoder(MINILM, prompts=prompts)
    theirs = st.SentenceTransformer(str(MINILM), device="cpu", prompts=prompts)
    texts = TEXTS[:3]
    for method in ("encode_query", "encode_document"):
        got = getattr(ours, method)(texts)
        assert err(got, getattr(theirs, method)(texts)) <= TOLERANCE, method
        # An explicit prompt wins, as in sentence-transformers.
        got = getattr(ours, method)(texts, prompt="x: ")
        assert err(got, getattr(theirs, method)(texts, prompt="x: ")) <= TOLERANCE, method
    # "document" is always among the prompts ("" unless set): it comes first.
    assert ours.prompts == {"query": "query: ", "document": "", "passage": "passage: ",
                            "corpus": "corpus: "} == theirs.prompts
    assert err(ours.encode_document(texts), ours.encode(texts)) == 0.0
    assert err(ours.encode_query(texts), ours.encode(texts)) > 1e-3  # the prompt mattered
    # A None prompt is unset: "" (sentence-transformers fills it from the saved
    # config first; all-MiniLM-L6-v2 saves none).
    unset = {"document": None, "passage": "passage: "}
    assert qkv.SentenceEncoder(MINILM, prompts=unset).prompts == st.SentenceTransformer(
        str(MINILM), device="cpu", prompts=unset).prompts
    # Without such prompts: plain encode (the model's default prompt, here none).
    plain = qkv.SentenceEncoder(MINILM)
    assert err(plain.encode_query(texts), ref.encode_query(texts)) <= TOLERANCE
    assert err(plain.encode_document(texts, normalize_embeddings=True),
               ref.encode_document(texts, normalize_embeddings=True)) <= TOLERANCE
    # encode's texts by sentence-transformers 6's name and by the older one.
    assert err(plain.encode(inputs=texts), plain.encode(sentences=texts)) == 0.0
    with pytest.raises(TypeError, match="once"):
        plain.encode(texts, sentences=texts)


def test_similarity_pairwise(models):
    ours, ref = models
    a, b = ours.encode(TEXTS[:4]), ours.encode(TEXTS[4:])
    for name in ("cosine", "dot", "euclidean", "manhattan"):
        ours.similarity_fn_name = ref.similarity_fn_name = name
        try:
            want = ref.similarity_pairwise(2 * a, b)
            got = ours.similarity_pairwise(2 * a, b)
            assert isinstance(got, np.ndarray) and got.shape == (4,)
            assert err(got, want) <= 1e-5, name
            got_t = ours.similarity_pairwise(torch.from_numpy(2 * a), b)
            assert isinstance(got_t, torch.Tensor) and err(got_t, want) <= 1e-5, name
        finally:
            ours.similarity_fn_name = ref.similarity_fn_name = "cosine"
    with pytest.raises(ValueError, match="same shape"):
        ours.similarity_pairwise(a, b[:2])


def test_tokenizer_and_tokenize(models):
    ours, ref = models
    for text in TEXTS:
        assert ours.tokenizer(text)["input_ids"] == ref.tokenizer(
            text, truncation=True, max_length=ref.max_seq_length)["input_ids"], text
    batch = ours.tokenizer(TEXTS[:2])
    assert batch["input_ids"] == [ours.token_ids(t) for t in TEXTS[:2]]
    assert batch["attention_mask"] == [[1] * len(r) for r in batch["input_ids"]]
    got, want = ours.tokenize(TEXTS), ref.tokenize(TEXTS)
    for key in ("input_ids", "attention_mask"):
        assert torch.equal(got[key], want[key].to(torch.int64)), key
    with pytest.raises(TypeError, match="tokenize"):
        ours.tokenizer(TEXTS[0], padding=True)
    with pytest.raises(TypeError, match=r"texts\[1\] must be a str"):
        ours.tokenize(["a", 3])


def test_calling_the_model_on_tokenized_features(models):
    """model(model.tokenize(texts)) as sentence-transformers: the features
    plus token_embeddings [B, T, D] and sentence_embedding [B, D]."""
    ours, ref = models
    texts = TEXTS[:5]
    features = ours.tokenize(texts)
    got = ours(features)
    with torch.no_grad():
        want = ref(ref.tokenize(texts))
    assert got["input_ids"] is features["input_ids"]
    for key in ("token_embeddings", "sentence_embedding"):
        assert isinstance(got[key], torch.Tensor)
        assert err(got[key], want[key]) <= TOLERANCE, key
    assert err(got["sentence_embedding"], ours.encode(texts)) <= TOLERANCE
    # numpy features give numpy results.
    plain = ours({k: v.numpy() for k, v in features.items()})
    assert isinstance(plain["sentence_embedding"], np.ndarray)
    assert err(plain["sentence_embedding"], got["sentence_embedding"]) == 0.0
    # What would change the math is refused by name.
    left = {"input_ids": features["input_ids"], "attention_mask": features["attention_mask"].flip(1)}
    with pytest.raises(ValueError, match="right padding"):
        ours(left)
    with pytest.raises(ValueError, match="token_type_ids"):
        ours({**features, "token_type_ids": torch.ones_like(features["input_ids"])})
    with pytest.raises(ValueError, match="attention_mask must have input_ids' shape"):
        ours({"input_ids": features["input_ids"], "attention_mask": features["attention_mask"][:2]})
    with pytest.raises(TypeError, match="input_ids"):
        ours(texts)
