"""qkv.text.BpeTokenizer.from_gguf against transformers' tokenizer of the same
GGUF file (the oracle), for the vocabularies of issue 39:

  Gemma 3 270M     tokenizer.ggml.model "llama" (SentencePiece-style: scores,
                   "▁", byte fallback), the real file (skipped when missing);
  "llama" generic  a cut of Gemma's vocabulary written as an architecture
                   "llama" file, scores rounded so that many tie (transformers'
                   LlamaTokenizer: the file's scores, Metaspace prefix);
  Qwen2, Llama 3   byte-level BPE with tokenizer.ggml.pre "qwen2" / "llama-bpe":
                   a cut of SmolLM2's vocabulary and merges (plus digit merges,
                   so that Llama 3's numbers in threes matter) in a written file.

Ids are compared on every line of tests/data/tokenizer_corpus.txt, on texts
chosen for the corners and on fuzzed text (fixed seed); decoding against
transformers' decode, the stream decoder against decode, and decoding ids back
gives the text.

The reference for the Gemma file is the tokenizer class AutoTokenizer picks for
it (GemmaTokenizer) loaded with gguf_file=: AutoTokenizer itself would first
parse the model's whole configuration from the 262,144-token file with the
gguf package (about a minute here) only to pick that class.
"""

import functools
import itertools
import random
import time

import pytest

import qkv
from model_files import ROOT, SMOLLM2_GGUF
from tokenizer_texts import HARD_TEXTS

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")
transformers = pytest.importorskip("transformers")

CORPUS = ROOT / "tests" / "data" / "tokenizer_corpus.txt"
GEMMA3_GGUF = ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"
needs_gemma3 = pytest.mark.skipif(
    not GEMMA3_GGUF.exists(),
    reason=f"{GEMMA3_GGUF} is missing: fetch it with scripts/fetch_model.sh")
needs_smollm2 = pytest.mark.skipif(not SMOLLM2_GGUF.exists(), reason=f"{SMOLLM2_GGUF} is missing")


@functools.cache
def byte_table():
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    return bytes_to_unicode()


def byte_level(data):
    """GPT-2's bytes_to_unicode spelling of `data`, as transformers has it."""
    table = byte_table()
    return "".join(table[b] for b in data)


def corpus_lines():
    return CORPUS.read_text(encoding="utf-8")[:-1].split("\n")


def fuzz_texts(seed, count, specials=()):
    """Random texts: runs of letters, digits, punctuation, whitespace of every
    kind, contractions, emoji, CJK, other numbers, control characters, marks,
    special-token texts and any code point at all."""
    rng = random.Random(seed)
    kinds = [
        lambda: rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") * rng.randint(1, 3),
        lambda: "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 7))),
        lambda: rng.choice("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
        lambda: rng.choice([" ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", "\r", "\u00a0",
                            "\u3000", "\u2028", "\x0b", "\x0c", "\u200b", " \n ", "\u2581"]),
        lambda: rng.choice(["'s", "'S", "'t", "'re", "'RE", "'ve", "'Ve", "'m", "'ll", "'LL",
                            "'d", "'D", "'ſ", "'"]),
        lambda: rng.choice(["😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "🤖", "\U0001FAE8"]),
        lambda: rng.choice("中文分词测试你好世界日本語のテキスト한국어"),
        lambda: rng.choice("١٢٣٤½²³Ⅻ〇⑳𝟙"),
        lambda: chr(rng.choice(list(range(0, 32)) + [0x7F, 0x85, 0xAD])),
        lambda: rng.choice(["e\u0301", "\u0300", "\u094d", "\ufe0f", "\u200d"]),
        lambda: rng.choice(specials) if specials else "<s>",
        lambda: chr(rng.choice([rng.randint(0, 0xD7FF), rng.randint(0xE000, 0x10FFFF)])),
    ]
    texts = []
    for _ in range(count):
        n = rng.randint(1, 40)
        texts.append("".join(rng.choice(kinds)() for _ in range(n)))
    return texts


def expect_same(tok, hf, texts, round_trip=True):
    """Ids (with and without bos/eos), decoding and streamed decoding agree
    with transformers on every text; decoding gives the text back."""
    for text in texts:
        ids = tok.encode(text)
        assert ids == hf.encode(text), repr(text)
        plain = tok.encode(text, add_special=False)
        assert plain == hf.encode(text, add_special_tokens=False), repr(text)
        assert tok.decode(ids) == hf.decode(ids), repr(text)
        assert tok.decode(ids, skip_special=True) == hf.decode(ids, skip_special_tokens=True)
        stream = tok.stream_decoder()
        assert "".join(stream.push(i) for i in ids) + stream.finish() == tok.decode(ids)
        if round_trip:
            assert tok.decode(plain) == text, repr(text)


def special_texts(hf):
    return [t for t in hf.all_special_tokens if t][:20]


# --- Gemma 3 (tokenizer.ggml.model "llama") ---------------------------------------------------


@pytest.fixture(scope="module")
def gemma():
    start = time.perf_counter()
    tok = qkv.text.BpeTokenizer.from_gguf(GEMMA3_GGUF)
    seconds = time.perf_counter() - start
    print(f"\nqkv: Gemma 3's 262,144-token tokenizer loaded from the GGUF file in {seconds:.2f} s")
    # The class AutoTokenizer picks for a gemma3 file.
    names = transformers.models.auto.tokenization_auto.TOKENIZER_MAPPING_NAMES["gemma3"]
    assert "GemmaTokenizer" in (names if isinstance(names, (tuple, list)) else [names])
    hf = transformers.GemmaTokenizer.from_pretrained(str(GEMMA3_GGUF.parent),
                                                     gguf_file=GEMMA3_GGUF.name)
    return tok, hf, seconds


@needs_gemma3
def test_gemma_loads_quickly(gemma):
    tok, _, seconds = gemma
    assert tok.vocab_size == 262144
    assert seconds < 10, f"{seconds:.1f} s to load the tokenizer"


@needs_gemma3
def test_gemma_corpus(gemma):
    tok, hf, _ = gemma
    for line in corpus_lines():
        ids = tok.encode(line)
        assert ids == hf.encode(line), repr(line)
        assert ids[0] == tok.bos_token_id
        assert tok.decode(ids[1:]) == line, repr(line)
        assert tok.decode(ids) == hf.decode(ids), repr(line)


@needs_gemma3
def test_gemma_extra_and_fuzzed_texts(gemma):
    tok, hf, _ = gemma
    specials = special_texts(hf) + ["<start_of_turn>", "<end_of_turn>", "[multimodal]"]
    texts = HARD_TEXTS + fuzz_texts(39, 300, specials)
    # "▁" in the text is a space once encoded; specials come back as themselves.
    expect_same(tok, hf, [t for t in texts if "\u2581" not in t], round_trip=True)
    expect_same(tok, hf, [t for t in texts if "\u2581" in t], round_trip=False)


@needs_gemma3
def test_gemma_decodes_byte_runs_as_transformers(gemma):
    tok, hf, _ = gemma
    byte = {b: tok.token_to_id(f"<0x{b:02X}>") for b in range(256)}
    a = tok.token_to_id("a")
    rng = random.Random(7)
    for _ in range(200):
        ids = [rng.choice([a, byte[rng.randrange(256)], byte[0xE4], byte[0xB8], byte[0xAD]])
               for _ in range(rng.randint(1, 8))]
        assert tok.decode(ids) == hf.decode(ids), ids
        stream = tok.stream_decoder()
        assert "".join(stream.push(i) for i in ids) + stream.finish() == tok.decode(ids)


# --- a generic "llama" vocabulary: LlamaTokenizer, scores with ties ----------------------------


def gguf_tokenizer_fields(path, keys):
    from transformers.integrations.gguf import read_gguf_metadata
    metadata, _ = read_gguf_metadata(str(path), ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"))
    return {k: metadata.get(k) for k in keys}


def write_tokenizer_gguf(path, arch, model, tokens, token_types, *, merges=None, scores=None,
                         pre=None, bos=None, eos=None, unk=None, add_bos=None,
                         add_space_prefix=None):
    """A GGUF file with a tokenizer and the smallest model transformers' loader accepts."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([int(t) for t in token_types])
    if merges is not None:
        w.add_token_merges(merges)
    if scores is not None:
        w.add_token_scores([float(s) for s in scores])
    for value, add in ((bos, w.add_bos_token_id), (eos, w.add_eos_token_id),
                       (unk, w.add_unk_token_id), (add_bos, w.add_add_bos_token),
                       (add_space_prefix, w.add_add_space_prefix)):
        if value is not None:
            add(value)
    w.add_tensor("token_embd.weight", np.zeros((len(tokens), 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def llama_spm(tmp_path_factory):
    """Gemma's first 20,000 tokens (specials, bytes, the commonest pieces) and
    "▁" as a "llama" file, scores rounded to multiples of 1,000 so that merges
    tie. (Gemma's tokens of spaces stay user-defined text here.)"""
    fields = gguf_tokenizer_fields(GEMMA3_GGUF, ["tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                                                 "tokenizer.ggml.token_type"])
    n = 20000
    tokens = list(fields["tokenizer.ggml.tokens"][:n])
    types = [int(t) for t in fields["tokenizer.ggml.token_type"][:n]]
    scores = [1000.0 * round(float(s) / 1000.0) for s in fields["tokenizer.ggml.scores"][:n]]
    # Gemma's "▁" comes late (id 236,743): without it a space would be bytes.
    tokens.append("\u2581")
    types.append(1)
    scores.append(0.0)
    folder = tmp_path_factory.mktemp("llama_spm")
    path = folder / "spm.gguf"
    write_tokenizer_gguf(path, "llama", "llama", tokens, types, scores=scores, bos=2, eos=1,
                         unk=3, add_bos=True, add_space_prefix=True)
    tok = qkv.text.BpeTokenizer.from_gguf(path)
    hf = transformers.AutoTokenizer.from_pretrained(str(folder), gguf_file=path.name)
    return tok, hf


@needs_gemma3
def test_llama_sentencepiece_with_tied_scores(llama_spm):
    tok, hf = llama_spm
    # transformers' LlamaTokenizer backend (AutoTokenizer wraps it in TokenizersBackend).
    assert "Metaspace" in str(hf.backend_tokenizer.pre_tokenizer)
    lines = corpus_lines()
    # The prefix space is dropped again by decoding, but a text's own leading
    # space is not given back (Metaspace adds no second "▁"): no round trip.
    expect_same(tok, hf, lines[::3] + HARD_TEXTS, round_trip=False)
    expect_same(tok, hf, fuzz_texts(40, 200, special_texts(hf)), round_trip=False)
    for text in lines[:200]:
        if not text.startswith(" ") and "\u2581" not in text:
            assert tok.decode(tok.encode(text, add_special=False)) == text


# Each tie-break of the merge order on its own (tests/test_sentencepiece_tokenizer.cc
# holds the same cases): tokens with scores, a text.
TIE_CASES = {
    "score": ([("a", 0), ("b", 0), ("c", 0), ("ab", -2), ("bc", -1)], "abc"),
    "longer left": ([("a", 0), ("b", 0), ("c", 0), ("d", 0), ("ab", 10), ("cd", 0), ("abc", 0)],
                    "abcd"),
    "longer right": ([("a", 0), ("b", 0), ("c", 0), ("d", 0), ("cd", 10), ("ab", 0), ("bcd", 0)],
                     "abcd"),
    "lower id": ([("a", 0), ("b", 0), ("c", 0), ("bc", -1), ("ab", -1)], "abc"),
    "lower id again": ([("a", 0), ("b", 0), ("c", 0), ("ab", -1), ("bc", -1)], "abc"),
    "leftmost": ([("a", 0), ("aa", -1)], "aaaaa"),
}


@pytest.mark.parametrize("case", sorted(TIE_CASES))
def test_llama_merge_order(case, tmp_path):
    pieces, text = TIE_CASES[case]
    tokens = ["<unk>", "<s>", "</s>"] + [t for t, _ in pieces]
    scores = [0.0, 0.0, 0.0] + [s for _, s in pieces]
    write_tokenizer_gguf(tmp_path / "t.gguf", "llama", "llama", tokens, [2, 3, 3] + [1] * len(pieces),
                         scores=scores, bos=1, eos=2, unk=0, add_space_prefix=False)
    tok = qkv.text.BpeTokenizer.from_gguf(tmp_path / "t.gguf")
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="t.gguf")
    assert tok.encode(text) == hf.encode(text)


@pytest.mark.parametrize("arch", ["gemma3", "llama"])
def test_llama_unknown_characters_without_byte_tokens(arch, tmp_path):
    """A character without a token and without "<0xNN>" tokens is unk (one for
    a run), as SentencePiece, llama.cpp and transformers' Gemma path do.
    transformers' LlamaTokenizer path drops it instead (its BPE model has no
    unk token): there qkv differs by exactly those unks."""
    tokens = ["<unk>", "<s>", "</s>", "a", "\u2581", "\u2581a"]
    write_tokenizer_gguf(tmp_path / "t.gguf", arch, "llama", tokens, [2, 3, 3, 1, 1, 1],
                         scores=[0, 0, 0, 0, 0, -1], bos=1, eos=2, unk=0,
                         add_space_prefix=arch == "llama")
    tok = qkv.text.BpeTokenizer.from_gguf(tmp_path / "t.gguf")
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="t.gguf")
    for text in ["a\u2603\u2603a", "\u2603", "a b\u2603 a"]:
        ids = tok.encode(text)
        assert ids.count(0) == text.replace("\u2603\u2603", "\u2603").count("\u2603")
        if arch == "gemma3":
            assert ids == hf.encode(text)
        else:
            assert [i for i in ids if i != 0] == hf.encode(text)


# --- Qwen2 and Llama 3 pre-tokenizers on a byte-level vocabulary -------------------------------


@pytest.fixture(scope="module")
def smollm2_cut():
    """SmolLM2's first 8,000 tokens and the merges among them, every byte a
    token, and merges joining digits in twos and threes."""
    fields = gguf_tokenizer_fields(SMOLLM2_GGUF, ["tokenizer.ggml.tokens", "tokenizer.ggml.merges",
                                                  "tokenizer.ggml.token_type"])
    n = 8000
    tokens = list(fields["tokenizer.ggml.tokens"][:n])
    types = [int(t) for t in fields["tokenizer.ggml.token_type"][:n]]
    known = set(tokens)
    merges = [m for m in fields["tokenizer.ggml.merges"]
              if all(p in known for p in m.split(" ")) and m.replace(" ", "") in known]
    for b in range(256):  # SmolLM2 has no token for 21 bytes
        char = byte_level(bytes([b]))
        if char not in known:
            tokens.append(char)
            types.append(1)
            known.add(char)
    for a in "0123456789":
        for b in "0123456789":
            merges.append(f"{a} {b}")
            tokens.append(a + b)
            types.append(1)
    for number in ("123", "100", "999", "202", "000"):
        merges.append(f"{number[:2]} {number[2]}")
        tokens.append(number)
        types.append(1)
    return tokens, types, merges


@pytest.fixture(scope="module", params=[("qwen2", "qwen2"), ("llama", "llama-bpe")],
                ids=["qwen2", "llama-bpe"])
def byte_level_file(request, smollm2_cut, tmp_path_factory):
    arch, pre = request.param
    tokens, types, merges = smollm2_cut
    folder = tmp_path_factory.mktemp(pre)
    path = folder / f"{pre}.gguf"
    write_tokenizer_gguf(path, arch, "gpt2", tokens, types, merges=merges, pre=pre, bos=1, eos=2,
                         add_bos=pre == "llama-bpe")
    tok = qkv.text.BpeTokenizer.from_gguf(path)
    hf = transformers.AutoTokenizer.from_pretrained(str(folder), gguf_file=path.name)
    return pre, tok, hf


@needs_smollm2
def test_byte_level_pre_tokenizers(byte_level_file):
    pre, tok, hf = byte_level_file
    assert repr(tok).endswith(f"pre_tokenizer={pre!r})")
    texts = corpus_lines() + HARD_TEXTS + fuzz_texts(41, 300, special_texts(hf))
    expect_same(tok, hf, texts)


@needs_smollm2
def test_byte_level_pieces_on_every_code_point(byte_level_file):
    """The regex's classes (\\p{L}, \\p{N}, \\s, \\r\\n) on every code point, each
    next to a neighbour of another kind; above U+3FFFF (unassigned planes and
    private use) every 97th. Llama 3's split differs from Qwen2's only in digit
    runs: every 13th code point there."""
    pre, tok, hf = byte_level_file
    step = 1 if pre == "qwen2" else 13
    points = itertools.chain(range(0, 0x40000, step), range(0x40000, 0x110000, 97))
    chars = [chr(c) for c in points if not 0xD800 <= c <= 0xDFFF]
    rng = random.Random(42)
    neighbours = ["a", "1", " ", "\n", "'", ".", "\t", "\u00e9", "\u0663"]
    text = "".join(c + rng.choice(neighbours) for c in chars)
    # Where the pieces end, in characters of `text` (the reference's offsets).
    ends = list(itertools.accumulate(len(p) for p in tok.pre_tokenize(text)))
    reference = [end for _, (_, end) in hf.backend_tokenizer.pre_tokenizer.pre_tokenize_str(text)]
    if ends != reference:
        i = next(i for i, (a, b) in enumerate(zip(ends, reference)) if a != b)
        start = reference[i - 1] if i else 0
        pytest.fail(f"piece {i}: {text[start:ends[i]]!r} != {text[start:reference[i]]!r}")
    assert len(ends) == len(reference)


def test_refusals_name_the_field(tmp_path):
    tokens = ["<unk>", "<s>", "</s>", "\u2581", "a", "\u2581a"]
    with pytest.raises(ValueError, match="BpeVocabulary.scores has 0 entries"):
        qkv.text.BpeTokenizer(tokens, model="llama")
    with pytest.raises(ValueError, match="takes none"):
        qkv.text.BpeTokenizer(tokens, ["\u2581 a"], model="llama", scores=[0.0] * 6)
    with pytest.raises(ValueError, match=r"scores\[2\] = nan"):
        qkv.text.BpeTokenizer(tokens, model="llama", scores=[0, 0, float("nan"), 0, 0, 0])
    with pytest.raises(ValueError, match="pre_tokenizer \"qwen2\" is not supported for the"):
        qkv.text.BpeTokenizer(tokens, model="llama", scores=[0.0] * 6, pre_tokenizer="qwen2")
    with pytest.raises(ValueError, match="BpeVocabulary.model \"t5\""):
        qkv.text.BpeTokenizer(tokens, model="t5")
    path = tmp_path / "charsmap.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * 6)
    w.add_array("tokenizer.ggml.precompiled_charsmap", [1, 2, 3])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    with pytest.raises(ValueError, match="tokenizer.ggml.precompiled_charsmap is present"):
        qkv.text.BpeTokenizer.from_gguf(path)
