"""qkv.models.BertModel against transformers.BertModel, and qkv.SentenceEncoder
against sentence-transformers (the oracles), on all-MiniLM-L6-v2
(scripts/fetch_model.sh) and on small random BERTs.

Hidden states: max|qkv - transformers| / max|transformers| <= 1e-5 in float32
on every real token (and on every position of unpadded batches). The hidden
states of padding positions (which nothing reads) are ill-conditioned:
transformers' own float32 result is 1e-5 to 3e-5 away from its float64 one
there, so they are checked against transformers in float64, qkv being no
further from it than transformers' float32.

Embeddings: the cosine of qkv's and sentence-transformers' embedding of every
line of tests/data/tokenizer_corpus.txt is >= 0.99999.
"""

import numpy as np
import pytest
import torch

import qkv
from model_files import MINILM, ROOT, needs_minilm

transformers = pytest.importorskip("transformers")

CORPUS = ROOT / "tests" / "data" / "tokenizer_corpus.txt"
TOLERANCE = 1e-5
MIN_COSINE = 0.99999

needs_tokenizer = pytest.mark.skipif(
    not hasattr(qkv, "text"), reason="qkv.text (the WordPiece tokenizer) is not built yet")

# Used when the tokenizer corpus is absent: short, long, accents, CJK, emoji, code, numbers.
FALLBACK_SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "Un café à Paris, s'il vous plaît — déjà vu!",
    "東京は日本の首都です。",
    "I can't believe it's not butter!!! 😀",
    "def f(x): return x ** 2  # squares",
    "3.14159 26535 89793, 2.71828",
    "",
    " ".join(["attention"] * 300),  # truncated to max_seq_length
]


def corpus_lines():
    if not CORPUS.exists():
        return FALLBACK_SENTENCES
    text = CORPUS.read_bytes().decode("utf-8")
    # Lines hold \r, \x0b, U+2028 ...: split on "\n" only.
    return text[:-1].split("\n") if text.endswith("\n") else text.split("\n")


def rel_err(ours, theirs, where=None):
    ours = np.asarray(ours, np.float64)
    theirs = np.asarray(theirs, np.float64)
    assert ours.shape == theirs.shape
    if where is not None:
        ours, theirs = ours[where], theirs[where]
    return float(np.abs(ours - theirs).max() / np.abs(theirs).max())


def hf_hidden(model, ids, mask, types=None):
    with torch.no_grad():
        out = model(input_ids=torch.as_tensor(ids), attention_mask=torch.as_tensor(mask),
                    token_type_ids=None if types is None else torch.as_tensor(types))
    return out.last_hidden_state.numpy()


def hf_tokenize(texts):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(str(MINILM / "tokenizer.json"))
    tok.enable_truncation(256)
    tok.enable_padding()
    enc = tok.encode_batch(texts)
    return (np.array([e.ids for e in enc], np.int64),
            np.array([e.attention_mask for e in enc], np.int64))


# --- (a) hidden states ---------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm():
    hf = transformers.BertModel.from_pretrained(MINILM, attn_implementation="eager").eval()
    return hf, qkv.models.BertModel.from_pretrained(MINILM)


@needs_minilm
def test_minilm_hidden_states_match_transformers(minilm):
    hf, ours = minilm
    texts = FALLBACK_SENTENCES + corpus_lines()[:22]
    ids, mask = hf_tokenize(texts)
    assert ids.shape[1] > 64 and (mask == 0).any()
    expected = hf_hidden(hf, ids, mask)
    got = ours(ids, mask)
    assert got.shape == expected.shape == (len(texts), ids.shape[1], 384)
    real = mask.astype(bool)
    err = rel_err(got, expected, real)
    print(f"\nall-MiniLM-L6-v2, {real.sum()} real tokens: max rel diff vs transformers fp32 "
          f"{err:.2e}")
    assert err <= TOLERANCE

    # Padding positions: against transformers in float64, qkv must be no further
    # than transformers' own float32 result is (both are ~1e-5 there).
    expected64 = hf_hidden(hf.double(), ids, mask)
    hf.float()
    pad = ~real
    ours_pad, theirs_pad = (rel_err(x, expected64, pad) for x in (got, expected))
    print(f"padding positions vs transformers fp64: qkv {ours_pad:.2e}, "
          f"transformers fp32 {theirs_pad:.2e}")
    assert ours_pad <= max(TOLERANCE, 2 * theirs_pad)
    assert rel_err(got, expected64, real) <= TOLERANCE


@needs_minilm
def test_minilm_random_ids_and_token_types(minilm):
    hf, ours = minilm
    rng = np.random.default_rng(0)
    for batch, length in [(1, 1), (2, 7), (4, 129), (1, 512)]:
        ids = rng.integers(0, 30522, size=(batch, length))
        types = rng.integers(0, 2, size=(batch, length))
        mask = np.ones((batch, length), np.int64)
        err = rel_err(ours(ids, mask, types), hf_hidden(hf, ids, mask, types))
        assert err <= TOLERANCE, f"[{batch}, {length}]: {err:.3g}"
    # torch tensors and defaults (no mask, type 0).
    ids = torch.randint(0, 30522, (2, 9))
    err = rel_err(ours(ids), hf_hidden(hf, ids, torch.ones_like(ids)))
    assert err <= TOLERANCE


@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu", "silu"])
def test_random_bert_matches_transformers(act, tmp_path):
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=97, hidden_size=48, num_hidden_layers=3,
                                     num_attention_heads=6, intermediate_size=80,
                                     max_position_embeddings=40, type_vocab_size=3,
                                     layer_norm_eps=1e-6, hidden_act=act,
                                     attn_implementation="eager")
    hf = transformers.BertModel(config, add_pooling_layer=False).eval()
    with torch.no_grad():  # away from the initial 1/0 LayerNorms and zero biases
        for name, p in hf.named_parameters():
            p.add_(0.1 * torch.randn_like(p))
    ours = qkv.models.BertModel(config.to_dict())
    ours.load_state_dict({k: v for k, v in hf.state_dict().items() if "position_ids" not in k})
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 97, size=(3, 40))
    types = rng.integers(0, 3, size=(3, 40))
    mask = (np.arange(40)[None, :] < np.array([[40], [17], [1]])).astype(np.int64)
    got = ours(ids, mask, types)
    assert rel_err(got, hf_hidden(hf, ids, mask, types), mask.astype(bool)) <= TOLERANCE
    assert rel_err(got, hf_hidden(hf.double(), ids, mask, types)) <= TOLERANCE

    # A BertForMaskedLM checkpoint ("bert." prefix, extra heads) loads as well.
    mlm = transformers.BertForMaskedLM(config)
    mlm.bert.load_state_dict(hf.state_dict(), strict=False)
    mlm.save_pretrained(tmp_path)
    loaded = qkv.models.BertModel.from_pretrained(tmp_path)
    assert rel_err(loaded(ids, mask, types), got) == 0.0


def test_bert_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="hidden_size"):
        qkv.models.BertModel({"vocab_size": 5, "hidden_size": 10, "num_hidden_layers": 1,
                              "num_attention_heads": 3, "intermediate_size": 8})
    with pytest.raises(FileNotFoundError, match="not a directory"):
        qkv.models.BertModel.from_pretrained(tmp_path / "absent")
    (tmp_path / "config.json").write_text('{"vocab_size": 5, "hidden_size": 4, '
                                          '"num_hidden_layers": 1, "num_attention_heads": 2, '
                                          '"intermediate_size": 8}')
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        qkv.models.BertModel.from_pretrained(tmp_path)
    model = qkv.models.BertModel(tmp_path / "config.json")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model([[1, 5]])
    with pytest.raises(TypeError, match="input_ids"):
        model(np.zeros((1, 2), np.float32))
    with pytest.raises(ValueError, match="attention_mask must have the shape"):
        model([[1, 2]], [[1]])


# --- (b) sentence embeddings -----------------------------------------------------------


@needs_minilm
@needs_tokenizer
def test_embeddings_match_sentence_transformers():
    st = pytest.importorskip("sentence_transformers")
    lines = corpus_lines()
    reference = st.SentenceTransformer(str(MINILM), device="cpu").encode(lines, batch_size=32)
    encoder = qkv.SentenceEncoder(MINILM)
    assert (encoder.pooling, encoder.normalize, encoder.max_seq_length) == ("mean", True, 256)
    ours = encoder.encode(lines)
    assert ours.shape == reference.shape == (len(lines), 384) and ours.dtype == np.float32
    cosine = (ours.astype(np.float64) * reference).sum(1) / (
        np.linalg.norm(ours.astype(np.float64), axis=1) * np.linalg.norm(reference, axis=1))
    worst = int(cosine.argmin())
    print(f"\n{len(lines)} lines of {CORPUS.name if CORPUS.exists() else 'fallback sentences'}: "
          f"min cosine vs sentence-transformers {cosine.min():.8f} (line {worst + 1}), "
          f"max |diff| {np.abs(ours - reference).max():.2e}")
    assert cosine.min() >= MIN_COSINE, f"line {worst + 1}: {lines[worst][:80]!r}"
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, rtol=1e-6)


@needs_minilm
@needs_tokenizer
def test_batching_keeps_the_input_order():
    encoder = qkv.SentenceEncoder(MINILM)
    lines = FALLBACK_SENTENCES + corpus_lines()[:40]
    all_at_once = encoder.encode(lines, batch_size=len(lines))
    small = encoder.encode(lines, batch_size=3)
    reversed_ = encoder.encode(lines[::-1], batch_size=5)[::-1]
    np.testing.assert_allclose(small, all_at_once, atol=1e-6)
    np.testing.assert_allclose(reversed_, all_at_once, atol=1e-6)
    one = encoder.encode(lines[3])
    assert one.shape == (384,)
    np.testing.assert_allclose(one, all_at_once[3], atol=1e-6)
    assert encoder.encode([]).shape == (0, 384)
    with pytest.raises(ValueError, match="batch_size"):
        encoder.encode(["a"], batch_size=0)


@needs_tokenizer
def test_sentence_encoder_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        qkv.SentenceEncoder(tmp_path / "absent")
    (tmp_path / "modules.json").write_text('[{"type": "sentence_transformers.models.Dense"}]')
    with pytest.raises(ValueError, match="modules.json.*Dense"):
        qkv.SentenceEncoder(tmp_path)


@needs_minilm
@needs_tokenizer
@pytest.mark.parametrize("pooling,normalize", [("cls", False), ("max", True),
                                               ("mean_sqrt_len_tokens", False), ("mean", False)])
def test_pooling_modes_match_sentence_transformers(pooling, normalize, tmp_path):
    # A small random BERT with all-MiniLM-L6-v2's tokenizer, saved by
    # sentence-transformers with another pooling and max_seq_length 20.
    st = pytest.importorskip("sentence_transformers")
    torch.manual_seed(2)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64,
                                     max_position_embeddings=64)
    transformers.BertModel(config).save_pretrained(tmp_path / "bert")
    for name in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                 "vocab.txt"]:
        (tmp_path / "bert" / name).write_bytes((MINILM / name).read_bytes())
    from sentence_transformers.sentence_transformer import modules as st_modules
    modules = [st_modules.Transformer(str(tmp_path / "bert"), max_seq_length=20),
               st_modules.Pooling(32, pooling_mode=pooling)]
    if normalize:
        modules.append(st_modules.Normalize())
    reference_model = st.SentenceTransformer(modules=modules, device="cpu")
    reference_model.save(str(tmp_path / "st"))

    encoder = qkv.SentenceEncoder(tmp_path / "st")
    assert (encoder.pooling, encoder.normalize, encoder.max_seq_length) == (pooling, normalize, 20)
    texts = FALLBACK_SENTENCES + corpus_lines()[:30]
    assert max(len(encoder.token_ids(t)) for t in texts) == 20  # some are truncated
    reference = reference_model.encode(texts, batch_size=8)
    ours = encoder.encode(texts, batch_size=8)
    assert rel_err(ours, reference) <= TOLERANCE
