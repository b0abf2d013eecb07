"""qkv.text.BpeTokenizer and ChatTemplate against Hugging Face (the oracle),
on SmolLM2-135M-Instruct's vocabulary read from its GGUF file with `gguf`.

Two references, one per pre-tokenizer:
  "gpt2"   transformers' AutoTokenizer.from_pretrained(gguf_file=...): for
           this file (tokenizer.ggml.pre "smollm") it builds a plain
           ByteLevel pre-tokenizer, without SmolLM2's digit splitting;
  "smollm" the same tokenizer with SmolLM2's own pre-tokenizer,
           Sequence[Digits(individual_digits=True), ByteLevel] (as its
           tokenizer.json and llama.cpp).
Ids are compared on every line of tests/data/tokenizer_corpus.txt and on
texts chosen for the pre-tokenizer's corners, pieces on every Unicode code
point, decoding on the ids of every line, and the chat formatting against
apply_chat_template.
"""

import random

import pytest

import qkv
from model_files import ROOT, SMOLLM2_GGUF, needs_smollm2
from tokenizer_texts import HARD_TEXTS

CORPUS = ROOT / "tests" / "data" / "tokenizer_corpus.txt"

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
pytestmark = needs_smollm2


def read_vocabulary():
    reader = gguf.GGUFReader(str(SMOLLM2_GGUF))

    def field(name):
        return reader.fields[name].contents()

    return dict(
        tokens=field("tokenizer.ggml.tokens"),
        merges=field("tokenizer.ggml.merges"),
        token_types=field("tokenizer.ggml.token_type"),
        pre=field("tokenizer.ggml.pre"),
        bos=field("tokenizer.ggml.bos_token_id"),
        eos=field("tokenizer.ggml.eos_token_id"),
        unk=field("tokenizer.ggml.unknown_token_id"),
        pad=field("tokenizer.ggml.padding_token_id"),
        add_bos=field("tokenizer.ggml.add_bos_token"),
        chat_template=field("tokenizer.chat_template"),
    )


@pytest.fixture(scope="module")
def vocab():
    return read_vocabulary()


def make_tok(v, pre_tokenizer):
    return qkv.text.BpeTokenizer(v["tokens"], v["merges"], v["token_types"],
                                 pre_tokenizer=pre_tokenizer, bos=v["bos"], eos=v["eos"],
                                 unk=v["unk"], pad=v["pad"], add_bos=v["add_bos"])


@pytest.fixture(scope="module")
def toks(vocab):
    assert vocab["pre"] == "smollm"
    return {"gpt2": make_tok(vocab, "gpt2"), "smollm": make_tok(vocab, "smollm")}


@pytest.fixture(scope="module")
def hf_auto():
    return transformers.AutoTokenizer.from_pretrained(str(SMOLLM2_GGUF.parent),
                                                      gguf_file=SMOLLM2_GGUF.name)


@pytest.fixture(scope="module")
def hf(hf_auto):
    """The tokenizers.Tokenizer for each pre-tokenizer."""
    backend = hf_auto.backend_tokenizer
    # What transformers builds from the GGUF file: a ByteLevel pre-tokenizer.
    assert backend.normalizer is None
    assert isinstance(backend.pre_tokenizer, tokenizers.pre_tokenizers.ByteLevel)
    smollm = tokenizers.Tokenizer.from_str(backend.to_str())
    smollm.pre_tokenizer = tokenizers.pre_tokenizers.Sequence([
        tokenizers.pre_tokenizers.Digits(individual_digits=True),
        tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    return {"gpt2": backend, "smollm": smollm}


def corpus_lines():
    text = CORPUS.read_bytes().decode("utf-8")
    return text[:-1].split("\n")


def all_texts():
    lines = corpus_lines()
    assert len(lines) >= 1000
    # Also blocks of lines, for the newlines between them.
    blocks = ["\n".join(lines[i:i + 7]) for i in range(0, len(lines), 7)]
    return lines + blocks + HARD_TEXTS


@pytest.mark.parametrize("pre", ["gpt2", "smollm"])
def test_ids_equal_hugging_face_on_every_line(toks, hf, pre):
    texts = all_texts()
    expected = hf[pre].encode_batch(texts)
    for number, (text, enc) in enumerate(zip(texts, expected)):
        assert toks[pre].encode(text) == enc.ids, f"text {number}: {text[:80]!r}"


def test_transformers_tokenizer_is_the_gpt2_reference(toks, hf_auto):
    # The user-facing transformers call agrees too (no BOS: add_bos_token false).
    for text in HARD_TEXTS + corpus_lines()[:200]:
        assert toks["gpt2"].encode(text) == hf_auto(text)["input_ids"], repr(text[:80])


def test_the_two_pre_tokenizers_differ_only_before_digits(toks, hf):
    text = "x  1"
    assert toks["smollm"].encode(text) == hf["smollm"].encode(text).ids
    assert toks["gpt2"].encode(text) == hf["gpt2"].encode(text).ids
    assert toks["smollm"].encode(text) != toks["gpt2"].encode(text)


@pytest.mark.parametrize("pre", ["gpt2", "smollm"])
def test_pieces_of_every_code_point(toks, hf, pre):
    # Each code point in contexts that tell its class (letter, number, space,
    # other), 2048 code points to a string: planes 0-3 and 14, where every
    # assigned code point is, and the first 4096 of each unassigned or
    # private-use plane (all one class, "other").
    b2u = qkv.text._core.BpeTokenizer.bytes_to_unicode
    reference = hf[pre].pre_tokenizer
    code_points = [cp for cp in range(0x40000) if not 0xD800 <= cp <= 0xDFFF]
    code_points += list(range(0xE0000, 0xF0000))
    for plane in list(range(4, 14)) + [15, 16]:
        code_points += range(plane << 16, (plane << 16) + 4096)
    for start in range(0, len(code_points), 2048):
        text = "".join(f"a{c}1{c}!{c} {c}\t{c}\n" for c in map(chr, code_points[start:start + 2048]))
        expected = [piece for piece, _ in reference.pre_tokenize_str(text)]
        got = [b2u(piece.encode()) for piece in toks[pre].pre_tokenize(text)]
        if got != expected:
            first = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
            pytest.fail(f"code points from U+{code_points[start]:04X}: piece {first} is "
                        f"{got[first]!r}, expected {expected[first]!r}")


def test_random_strings(toks, hf):
    rng = random.Random(0)
    # \x04, \x1d and U+50000 (bytes F1 90 80 80) hold bytes with no token.
    alphabet = "aZ09 _-'\n\t.,!é世😀<|>ſ\u00a0\u3000١\x04\x1d\U00050000"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(40)))
             for _ in range(3000)]
    for pre in ("gpt2", "smollm"):
        for text, enc in zip(texts, hf[pre].encode_batch(texts)):
            assert toks[pre].encode(text) == enc.ids, repr(text)


def test_invalid_utf8_is_replaced(toks, hf):
    data = b"ok \xff\xfe bad \xe4\xb8 cut \xed\xa0\x80 surrogate \xc0\xaf"
    text = data.decode("utf-8", "replace")
    assert toks["gpt2"].encode(data) == hf["gpt2"].encode(text).ids


def test_parse_special_off_reads_markup_as_text(toks, hf):
    # tokenizers' encode_special_tokens (transformers' split_special_tokens).
    reference = tokenizers.Tokenizer.from_str(hf["smollm"].to_str())
    reference.encode_special_tokens = True
    for text in HARD_TEXTS:
        plain = toks["smollm"].encode(text, parse_special=False)
        assert plain == reference.encode(text).ids, repr(text)
    assert 1 not in toks["smollm"].encode("<|im_start|>", parse_special=False)


@pytest.mark.parametrize("skip_special", [False, True])
def test_decode_equals_hugging_face(toks, hf, skip_special):
    tok = toks["smollm"]
    for text in all_texts():
        ids = tok.encode(text)
        expected = hf["gpt2"].decode(ids, skip_special_tokens=skip_special)
        assert tok.decode(ids, skip_special=skip_special) == expected, repr(text[:80])
        stream = tok.stream_decoder(skip_special)
        streamed = "".join(stream.push(i) for i in ids) + stream.finish()
        assert streamed == expected


def test_decode_of_random_ids(toks, hf):
    rng = random.Random(1)
    tok = toks["gpt2"]
    for _ in range(2000):
        ids = [rng.randrange(tok.vocab_size) for _ in range(rng.randrange(1, 8))]
        expected = hf["gpt2"].decode(ids, skip_special_tokens=False)
        assert tok.decode(ids) == expected, ids
        stream = tok.stream_decoder()
        assert "".join(stream.push(i) for i in ids) + stream.finish() == expected


CONVERSATIONS = [
    [{"role": "user", "content": "Hi!"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "Tell me a joke."},
     {"role": "assistant", "content": "Why did the chicken cross the road?"},
     {"role": "user", "content": "Why?\nI don't know. 😀"}],
    [{"role": "assistant", "content": "I start."}, {"role": "system", "content": "late"}],
    [{"role": "user", "content": ""}],
]  # transformers refuses an empty conversation (tests/test_chat_template.cc has it)

PLAIN_CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
                "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


@pytest.mark.parametrize("generation", [False, True])
def test_chat_template_equals_apply_chat_template(vocab, toks, hf_auto, generation):
    source = vocab["chat_template"]
    assert hf_auto.chat_template == source
    for template in (source, PLAIN_CHATML):
        ours = qkv.text.ChatTemplate.from_jinja(template)
        for messages in CONVERSATIONS:
            expected = hf_auto.apply_chat_template(messages, chat_template=template,
                                                   tokenize=False,
                                                   add_generation_prompt=generation)
            text = ours.apply(messages, add_generation_prompt=generation)
            assert text == expected, messages
            assert toks["smollm"].encode(text) == hf_auto(text)["input_ids"]


def test_broken_chat_templates_are_refused():
    # Any template renders (python/tests/test_chat_template_jinja.py); a broken one is refused.
    with pytest.raises(ValueError, match="chat template line 2: the template ends before"):
        qkv.text.ChatTemplate.from_jinja("{% for message in messages %}\n{{ message }}")


def test_hostile_vocabularies_raise_value_error(vocab):
    tokens = list(vocab["tokens"])
    with pytest.raises(ValueError, match=r"merges\[48\] = \"o m\": \"om\" is not a token"):
        qkv.text.BpeTokenizer(tokens[:300], vocab["merges"], vocab["token_types"][:300])
    with pytest.raises(ValueError, match="pre_tokenizer \"deepseek-llm\" is not supported"):
        qkv.text.BpeTokenizer(tokens, [], pre_tokenizer="deepseek-llm")
    tok = make_tok(vocab, "smollm")
    with pytest.raises(ValueError, match=r"ids\[1\] = 49152 is out of range"):
        tok.decode([0, 49152])
    # Named as given, not pybind's dump of the int32 signature.
    with pytest.raises(ValueError, match=r"ids\[0\] = 1099511627776 is out of range"):
        tok.decode([2**40])
