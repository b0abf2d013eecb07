"""qkv.explore's attention weights against transformers' eager attention
(`output_attentions=True`), the oracle bertviz users read:

  all-MiniLM-L6-v2, a sentence pair padded with [PAD]: every layer, head,
  query and key (padding queries and keys too) within 1e-5;
  SmolLM2-135M-Instruct from its GGUF file, transformers loading the same file
  as float32 with attn_implementation="eager": every layer and head within 1e-5.

Also: the masks (padding keys, the causal triangle), the raw scores against
q·k recomputed from the arrays' own softmax, the page's data, and the errors.
"""

import json

import numpy as np
import pytest
import torch

import qkv
from model_files import MINILM, SMOLLM2_GGUF, needs_minilm, needs_smollm2

transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-5
TEXT = "The cat sat on the mat."
TEXT_B = "It was tired, so it slept."


def page_data(attention):
    return json.loads(attention.json())


@pytest.fixture(scope="module")
def minilm():
    return qkv.AttentionExplorer(MINILM)


@needs_minilm
def test_minilm_weights_equal_transformers_eager_on_padded_pair(minilm):
    a = qkv.explore(minilm, TEXT, TEXT_B, pad_to=24)
    tok = transformers.AutoTokenizer.from_pretrained(str(MINILM))
    enc = tok(TEXT, TEXT_B, padding="max_length", max_length=24, return_tensors="pt")
    assert a.ids == enc["input_ids"][0].tolist()
    assert a.tokens == tok.convert_ids_to_tokens(enc["input_ids"][0])
    assert a.segments == enc["token_type_ids"][0].tolist()
    model = transformers.AutoModel.from_pretrained(str(MINILM), attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        out = model(**enc, output_attentions=True)
    theirs = np.stack([w[0].numpy() for w in out.attentions])  # [layers, H, L, L]
    assert a.weights.shape == theirs.shape == (6, 12, 24, 24)
    assert np.abs(a.weights - theirs).max() <= TOLERANCE
    # Padding keys are masked for every query; nothing else is.
    real = enc["attention_mask"][0].numpy().astype(bool)
    assert (~real).sum() > 0
    assert np.array_equal(a.masked, np.broadcast_to(~real[None, None, None, :], a.masked.shape))
    assert np.all(a.weights[a.masked] == 0)


@needs_minilm
def test_scores_give_the_weights_through_the_tutorials_softmax(minilm):
    a = qkv.explore(minilm, TEXT, pad_to=12)
    scaled = a.scores.astype(np.float64) * np.asarray(a.scales)[:, None, None, None]
    scaled[a.masked] = -np.inf
    softmax = np.exp(scaled - scaled.max(-1, keepdims=True))
    softmax /= softmax.sum(-1, keepdims=True)
    assert np.abs(softmax - a.weights).max() <= TOLERANCE
    np.testing.assert_allclose(a.scales, 1 / np.sqrt(384 / 12))


@needs_minilm
def test_page_holds_the_arrays(minilm):
    a = qkv.explore(minilm, TEXT, TEXT_B)
    d = page_data(a)
    assert d["tokens"] == a.tokens and d["segments"] == a.segments
    assert (d["layers"], d["heads"], d["kv_heads"]) == (6, 12, 12)
    # The JSON's shortest decimals read back as the same float32 numbers.
    assert np.array_equal(np.asarray(d["weights"], np.float32), a.weights)
    assert np.array_equal(np.asarray(d["scores"], np.float32), a.scores)
    assert np.array_equal(np.asarray(d["values"], np.float32), a.values)
    masks = np.array([[[[c == "1" for c in row] for row in d["masks"][i]] for i in heads]
                      for heads in d["mask_of"]])
    assert np.array_equal(masks, ~a.masked)
    page = a.html()
    assert page.startswith("<!DOCTYPE html>") and "__QKV_DATA__" not in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "<iframe" in a._repr_html_()


@needs_minilm
def test_text_in_the_page_cannot_end_its_script(minilm):
    a = qkv.explore(minilm, "</script><script>alert(1)</script>")
    page = a.html()
    data = page.split('<script type="application/json" id="qkv-data">')[1].split("</script>")[0]
    assert json.loads(data)["text"] == a.text


@needs_minilm
def test_too_large_inputs_are_refused_by_name(minilm):
    with pytest.raises(ValueError, match=r"max_weights = 1000.*shorten the text"):
        qkv.explore(minilm, TEXT, max_weights=1000)
    with pytest.raises(ValueError, match="pad_to = 3 is shorter than the input's"):
        qkv.explore(minilm, TEXT, pad_to=3)
    with pytest.raises(ValueError, match="max_position_embeddings = 512"):
        qkv.explore(minilm, "word " * 600, max_weights=10**9)
    with pytest.raises(TypeError, match="text must be a str"):
        qkv.explore(minilm, 3)
    with pytest.raises(ValueError, match="neither a model directory"):
        qkv.explore(MINILM / "missing.gguf", TEXT)


@needs_minilm
def test_a_notebook_shows_the_page_inline(minilm, monkeypatch):
    import sys
    import types
    shown = []
    display = types.ModuleType("IPython.display")
    display.HTML = lambda text: ("HTML", text)
    display.display = shown.append
    monkeypatch.setitem(sys.modules, "IPython", types.ModuleType("IPython"))
    monkeypatch.setitem(sys.modules, "IPython.display", display)
    a = qkv.explore(minilm, TEXT)
    a.show()
    assert shown == [("HTML", a._repr_html_())]
    assert a._repr_html_().startswith('<iframe') and "&lt;!DOCTYPE html&gt;" in a._repr_html_()
    with pytest.raises(TypeError, match="model must be a path .* got int"):
        qkv.explore(3, TEXT)


@needs_smollm2
def test_smollm2_weights_equal_transformers_from_the_gguf_file():
    a = qkv.explore(SMOLLM2_GGUF, "The capital of France is", " Paris, a city of light.")
    # The ids are qkv's (test_bpe_parity.py checks its tokenizer against transformers').
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(SMOLLM2_GGUF.parent), gguf_file=SMOLLM2_GGUF.name, dtype=torch.float32,
        attn_implementation="eager")
    model.eval()
    ids = a.ids
    assert a.segments == [0] * 5 + [1] * (len(ids) - 5)
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    theirs = np.stack([w[0].numpy() for w in out.attentions])
    assert a.weights.shape == theirs.shape == (30, 9, len(ids), len(ids))
    assert np.abs(a.weights - theirs).max() <= TOLERANCE
    causal = np.triu(np.ones((len(ids), len(ids)), bool), k=1)
    assert np.array_equal(a.masked, np.broadcast_to(causal, a.masked.shape))
    assert a.values.shape == (30, 3, len(ids), 64)  # GQA: 3 key/value heads
    with pytest.raises(ValueError, match="pad_to is for encoders"):
        qkv.explore(SMOLLM2_GGUF, "x", pad_to=4)
