"""Gemma 3 270M (Q4_K_M GGUF, scripts/fetch_model.sh) against transformers.

Issue 39's line: transformers' model loaded from the same file
(`from_pretrained(dir, gguf_file=...)`, float32) on 20 prompts of
tests/data/tokenizer_corpus.txt:
  exact mode (every weight dequantized to float32, as transformers does):
  the next-token logits agree to 1e-4 relative (max |diff| / max |ref|) and
  the first 32 greedy tokens are equal on every prompt;
  fast mode (weights kept in their blocks): the first 16 greedy tokens are
  equal on at least 18 of 20 (the two may part at a near-tie).

The file needs the Q5_0 block type and the SentencePiece-style tokenizer:
until qkv has both, loading it fails naming them and the tests skip. Before
they landed, the exact line was checked on a float32 copy of the file
(dequantized by the gguf package, with the ids of transformers' tokenizer):
next-token logits within 1.6e-6, 32 greedy tokens equal on 20 of 20 prompts;
and over 601 tokens (past the 512-position window, the ring wrapped):
3.3e-6 whole, 4.0e-6 through the cache.
"""

import numpy as np
import pytest

import qkv
from model_files import ROOT

GEMMA3 = ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"
CORPUS = ROOT / "tests" / "data" / "tokenizer_corpus.txt"

pytestmark = pytest.mark.skipif(
    not GEMMA3.exists(), reason=f"{GEMMA3} is missing: run scripts/fetch_model.sh")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")


def load(exact):
    try:
        return qkv.models.load_gguf(GEMMA3, exact=exact, max_seq_len=512)
    except ValueError as e:
        # What this file needs beyond the architecture (issue 39, items 2 and 3).
        if "Q5_0" in str(e) or "tokenizer.ggml.model" in str(e):
            pytest.skip(f"qkv cannot read this file yet: {e}")
        raise


@pytest.fixture(scope="module")
def exact():
    return load(exact=True)


@pytest.fixture(scope="module")
def fast():
    return load(exact=False)


@pytest.fixture(scope="module")
def hf_model():
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(GEMMA3.parent), gguf_file=GEMMA3.name, dtype=torch.float32,
        attn_implementation="eager")
    return model.eval()


@pytest.fixture(scope="module")
def prompts(exact):
    lines = [line.strip() for line in CORPUS.read_text().splitlines() if line.strip()][:20]
    return [exact.tokenizer.encode(line) for line in lines]


def hf_greedy(hf_model, ids, n):
    with torch.no_grad():
        out = hf_model.generate(torch.tensor([ids]), max_new_tokens=n, min_new_tokens=n,
                                do_sample=False)
    return out[0, len(ids):].tolist()


def qkv_greedy(m, ids, n):
    return list(m.model.generate(ids, n, temperature=0))[-n:]


def test_config_is_gemma3s(exact):
    c = exact.model.config
    assert exact.architecture == "gemma3"
    assert (c.num_layers, c.d_model, c.num_heads, c.num_kv_heads, c.head_dim) == \
        (18, 640, 4, 1, 256)
    assert c.sliding_windows == ([512] * 5 + [0]) * 3
    assert (c.rope_base, c.sliding_rope_base) == (1e6, 10000.0)


def test_exact_matches_transformers(exact, hf_model, prompts):
    for ids in prompts:
        with torch.no_grad():
            ref = hf_model(torch.tensor([ids])).logits[0, -1].numpy()
        rel = float(np.abs(exact.logits(ids)[0][-1] - ref).max() / np.abs(ref).max())
        assert rel <= 1e-4, f"{ids[:8]}...: next-token logits differ by {rel:.3g}"
        assert qkv_greedy(exact, ids, 32) == hf_greedy(hf_model, ids, 32)


def test_fast_mostly_matches_transformers(fast, hf_model, prompts):
    equal = sum(qkv_greedy(fast, ids, 16) == hf_greedy(hf_model, ids, 16) for ids in prompts)
    assert equal >= 18, f"the first 16 greedy tokens agree on {equal} of 20 prompts"
