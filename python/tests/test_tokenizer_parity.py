"""qkv.text.WordPieceTokenizer against Hugging Face `tokenizers` (the oracle).

Ids and attention masks are compared on every line of
tests/data/tokenizer_corpus.txt (tokenizer.json's own truncation and padding,
then truncation to 512, then batches with padding), on the basic tokenization
of every Unicode code point, on random strings and on random bytes. The model
files come from scripts/fetch_model.sh.
"""

import json
import pathlib
import random

import numpy as np
import pytest

import qkv

tokenizers = pytest.importorskip("tokenizers")

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "all-MiniLM-L6-v2"
CORPUS = ROOT / "tests" / "data" / "tokenizer_corpus.txt"

pytestmark = pytest.mark.skipif(
    not (MODEL / "tokenizer.json").exists(),
    reason=f"{MODEL} is missing: run scripts/fetch_model.sh to fetch all-MiniLM-L6-v2")


def corpus_lines():
    # Lines hold \r, \x0b, U+2028 ...: split on "\n" only.
    text = CORPUS.read_bytes().decode("utf-8")
    assert text.endswith("\n")
    return text[:-1].split("\n")


@pytest.fixture
def hf():
    return tokenizers.Tokenizer.from_file(str(MODEL / "tokenizer.json"))


@pytest.fixture
def tok():
    return qkv.text.WordPieceTokenizer.from_json(MODEL / "tokenizer.json")


def real_ids(encoding):
    return [i for i, m in zip(encoding.ids, encoding.attention_mask) if m]


def test_corpus_with_the_files_settings(hf, tok):
    # tokenizer.json truncates to 128 and pads to a fixed 128.
    assert hf.truncation["max_length"] == 128 and tok.max_length == 128
    assert hf.padding["length"] == 128
    lines = corpus_lines()
    assert len(lines) >= 1000
    for number, line in enumerate(lines, 1):
        expected = hf.encode(line)
        assert tok.encode(line) == real_ids(expected), f"line {number}: {line[:80]!r}"
    # encode_batch pads as the file says.
    for start in range(0, len(lines), 100):
        chunk = lines[start:start + 100]
        expected = hf.encode_batch(chunk)
        ids, mask = tok.encode_batch(chunk)
        np.testing.assert_array_equal(ids, np.array([e.ids for e in expected]))
        np.testing.assert_array_equal(mask, np.array([e.attention_mask for e in expected]))
        assert ids.dtype == np.int64 and mask.dtype == np.int64
    print(f"\n{len(lines)} corpus lines: identical ids (truncation 128, padding 128)")


def test_corpus_truncated_to_512(hf, tok):
    hf.no_padding()
    hf.enable_truncation(512)
    tok.enable_truncation(512)
    lines = corpus_lines()
    for number, line in enumerate(lines, 1):
        expected = hf.encode(line)
        assert tok.encode(line) == expected.ids, f"line {number}: {line[:80]!r}"
    # Word pieces without truncation, as strings.
    hf.no_truncation()
    longest = 0
    for number, line in enumerate(lines, 1):
        expected = hf.encode(line, add_special_tokens=False).tokens
        assert tok.tokenize(line) == expected, f"line {number}: {line[:80]!r}"
        longest = max(longest, len(expected))
    assert longest > 512  # the corpus does exercise truncation
    print(f"\n{len(lines)} corpus lines: identical ids (truncation 512, longest {longest} pieces)")


@pytest.mark.parametrize("padding", [{}, {"pad_to_multiple_of": 8}, {"length": 80}])
@pytest.mark.parametrize("direction", ["right", "left"])
def test_corpus_batches(hf, tok, padding, direction, tmp_path):
    hf.enable_truncation(64, direction=direction)
    hf.enable_padding(**padding)
    if direction == "left":  # read from the file like every other option
        config = json.loads((MODEL / "tokenizer.json").read_text(encoding="utf-8"))
        config["truncation"]["direction"] = "Left"
        (tmp_path / "tokenizer.json").write_text(json.dumps(config), encoding="utf-8")
        tok = qkv.text.WordPieceTokenizer.from_json(tmp_path / "tokenizer.json")
    tok.enable_truncation(64)
    tok.enable_padding(**padding)
    lines = corpus_lines()
    rng = random.Random(5)
    for size in (1, 2, 7, 32, 100):
        chunk = rng.sample(lines, size)
        expected = hf.encode_batch(chunk)
        ids, mask = tok.encode_batch(chunk)
        np.testing.assert_array_equal(ids, np.array([e.ids for e in expected]))
        np.testing.assert_array_equal(mask, np.array([e.attention_mask for e in expected]))


def test_added_tokens_of_every_kind(tmp_path):
    """Added tokens matched after normalisation, with lstrip/rstrip and
    single_word, beyond the model's vocabulary."""
    config = json.loads((MODEL / "tokenizer.json").read_text(encoding="utf-8"))
    config["truncation"] = config["padding"] = None
    common = {"single_word": False, "lstrip": False, "rstrip": False, "special": False}
    for i, extra in enumerate([
        {"content": "Hello World", "normalized": True},
        {"content": "<ent>", "normalized": False, "lstrip": True, "rstrip": True},
        {"content": "qkv", "normalized": True, "single_word": True},
        {"content": "Çà-va", "normalized": True},
        {"content": "<ent>>", "normalized": False},
    ]):
        config["added_tokens"].append({**common, **extra, "id": 30522 + i})
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    hf = tokenizers.Tokenizer.from_file(str(path))
    tok = qkv.text.WordPieceTokenizer.from_json(path)
    assert tok.vocab_size == hf.get_vocab_size() == 30527
    texts = corpus_lines()[::7] + [
        "hello world HELLO   WORLD hello-world helloworld", "say <ent>  x <ent>> y  <ent><ent>",
        "qkv xqkv qkvx qkv! (qkv) qkv_ é qkv", "ça-va CA-VA çà-va ça va", "[MASK]hello world",
        "a<ent>b", "  <ent>  ", "qkv", "Hello\u00a0World", "Hello W\u00f6rld",
    ]
    for text in texts:
        assert tok.encode(text) == hf.encode(text).ids, repr(text)
        assert tok.tokenize(text) == hf.encode(text, add_special_tokens=False).tokens, repr(text)


@pytest.mark.parametrize("options", [
    {},
    {"lowercase": False},
    {"lowercase": True, "strip_accents": False},
    {"lowercase": False, "strip_accents": True},
    {"handle_chinese_chars": False, "clean_text": False},
])
def test_from_vocab_options(options):
    # BertWordPieceTokenizer builds the same pipeline from vocab.txt.
    hf = tokenizers.BertWordPieceTokenizer(str(MODEL / "vocab.txt"), **options)
    tok = qkv.text.WordPieceTokenizer.from_vocab(MODEL / "vocab.txt", max_length=None, **options)
    lines = corpus_lines()
    for number, line in enumerate(lines, 1):
        assert tok.encode(line) == hf.encode(line).ids, f"line {number}: {line[:80]!r}"


def test_fixed_padding_shorter_than_a_row(hf, tok):
    """tokenizers leaves rows longer than a fixed padding length ragged; qkv
    pads the batch to its longest row instead (a batch is one array)."""
    hf.enable_truncation(64)
    hf.enable_padding(length=10)
    tok.enable_truncation(64)
    tok.enable_padding(length=10)
    chunk = ["a b", corpus_lines()[0], "x " * 30]
    expected = hf.encode_batch(chunk)
    ids, mask = tok.encode_batch(chunk)
    assert ids.shape == (3, max(10, *(len(e.ids) for e in expected)))
    for row, e in enumerate(expected):
        n = len(e.ids)
        assert ids[row, :n].tolist() == e.ids and mask[row, :n].tolist() == e.attention_mask
        assert not ids[row, n:].any() and not mask[row, n:].any()


def _hf_basic(normalizer, text):
    pre = tokenizers.pre_tokenizers.BertPreTokenizer()
    return [w for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(text))]


@pytest.mark.parametrize("options", [
    {"lowercase": True, "strip_accents": True},
    {"lowercase": True, "strip_accents": False},
    {"lowercase": False, "strip_accents": False, "clean_text": False,
     "handle_chinese_chars": False},
])
def test_every_code_point(options):
    """Every code point between letters, 256 per text: clean-up, CJK spacing,
    accents, case, whitespace and punctuation all agree with tokenizers."""
    normalizer = tokenizers.normalizers.BertNormalizer(**options)
    tok = qkv.text.WordPieceTokenizer.from_vocab(MODEL / "vocab.txt", **options)
    points = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    bad = []
    for start in range(0, len(points), 256):
        text = " ".join(f"x{chr(c)}Y" for c in points[start:start + 256])
        if tok.basic_tokenize(text) != _hf_basic(normalizer, text):
            bad += [hex(c) for c in points[start:start + 256]
                    if tok.basic_tokenize(f"x{chr(c)}Y") != _hf_basic(normalizer, f"x{chr(c)}Y")]
    assert not bad, f"{len(bad)} code points differ: {bad[:50]}"


def _random_text(rng):
    pools = [
        (0x20, 0x7F), (0xA0, 0x250), (0x300, 0x370), (0x370, 0x530), (0x590, 0x700),
        (0x900, 0xE00), (0x1100, 0x1200), (0x1D165, 0x1D173), (0x2000, 0x2070), (0x3000, 0x3100),
        (0x4E00, 0x4F00), (0xAC00, 0xAD00), (0xF900, 0xFB50), (0xFE00, 0xFF00), (0x1F300, 0x1FA00),
        (0, 0x110000),
    ]
    out = []
    for _ in range(rng.randint(0, 60)):
        lo, hi = rng.choice(pools)
        c = rng.randrange(lo, hi)
        out.append(chr(c) if not 0xD800 <= c < 0xE000 else "?")
        if rng.random() < 0.05:
            out.append(rng.choice(["[MASK]", "[CLS]", "[SEP]", "[UNK]", "[PAD]", "[mask]"]))
    return "".join(out)


def test_random_strings(hf, tok):
    hf.no_truncation()
    hf.no_padding()
    tok.no_truncation()
    rng = random.Random(11)
    texts = [_random_text(rng) for _ in range(3000)]
    for text in texts:
        assert tok.encode(text) == hf.encode(text).ids, repr(text)
    # Long combining sequences: canonical ordering before marks are dropped.
    marks = [0x301, 0x316, 0x1D165, 0x1D16D, 0x1D16E, 0x327, 0x334, 0x345]
    for _ in range(500):
        text = "a" + "".join(chr(rng.choice(marks)) for _ in range(rng.randint(1, 6))) + "b"
        assert tok.encode(text) == hf.encode(text).ids, [hex(ord(c)) for c in text]


def test_invalid_utf8_is_replaced(hf, tok):
    """bytes in: each invalid sequence is one U+FFFD, as Python's decoder."""
    hf.no_padding()
    rng = random.Random(3)
    samples = [b"caf\xc3", b"\xed\xa0\x80x", b"a\xffb", b"\xf0\x9f\x98", b"\xc0\xafz"]
    samples += [bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))) for _ in range(2000)]
    samples += [("é中😀".encode() * 3)[:rng.randint(0, 27)] + b" ok" for _ in range(200)]
    for data in samples:
        text = data.decode("utf-8", errors="replace")
        assert tok.encode(data) == hf.encode(text).ids, data
    # Without clean_text U+FFFD survives: the count of replacements matters.
    raw = qkv.text.WordPieceTokenizer.from_vocab(MODEL / "vocab.txt", clean_text=False)
    for data in samples[:500]:
        text = data.decode("utf-8", errors="replace")
        assert raw.basic_tokenize(data) == raw.basic_tokenize(text), data


def test_lookups_and_errors(hf, tok, tmp_path):
    assert tok.vocab_size == hf.get_vocab_size() == 30522
    for token in ["[CLS]", "hello", "##ing", "absent-token"]:
        assert tok.token_to_id(token) == hf.token_to_id(token)
    for i in [0, 100, 2023, 30521, 30522]:
        assert tok.id_to_token(i) == hf.id_to_token(i)
    with pytest.raises(OSError, match="absent.json"):
        qkv.text.WordPieceTokenizer.from_json(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"model": {"type": "BPE", "vocab": {}}}')
    with pytest.raises(ValueError, match="model.type is 'BPE'"):
        qkv.text.WordPieceTokenizer.from_json(bad)
    with pytest.raises(TypeError):
        tok.encode_batch("one text")

