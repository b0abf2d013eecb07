"""qkv.models.load_gguf on SmolLM2-135M-Instruct (Q4_1 GGUF) against Hugging Face.

  exact mode (every weight dequantized to float32) vs transformers'
  AutoModelForCausalLM.from_pretrained(gguf_file=..., float32): logits within
  1e-4 relative (max |diff| / max |ref|) on 8 prompts;
  fast mode (weights kept quantized) vs exact: the same greedy choice on at
  least 99% of 20 prompts x 64 teacher-forced positions (text from
  tests/data/tokenizer_corpus.txt);
  generate(): KV-cached greedy decoding equals argmax of recomputing the
  whole sequence.
"""

import os

import numpy as np
import pytest

import qkv
from model_files import ROOT, SMOLLM2_GGUF, needs_smollm2

CORPUS = ROOT / "tests" / "data" / "tokenizer_corpus.txt"

pytestmark = needs_smollm2

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, in a small village,",
    "Les plus beaux jardins de Paris sont",
    "1, 1, 2, 3, 5, 8, 13,",
    "import numpy as np\nx = np.arange(10)\nprint(",
    "The mitochondria is the powerhouse of the cell. It produces energy by",
]


@pytest.fixture(scope="module")
def exact():
    return qkv.models.load_gguf(SMOLLM2_GGUF, exact=True, max_seq_len=512)


@pytest.fixture(scope="module")
def fast():
    return qkv.models.load_gguf(SMOLLM2_GGUF, max_seq_len=512)


@pytest.fixture(scope="module")
def hf_model():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(SMOLLM2_GGUF.parent), gguf_file=SMOLLM2_GGUF.name, dtype=torch.float32)
    model.eval()
    return model


def test_loads_with_its_config(fast):
    config = fast.model.config
    assert (config.num_layers, config.d_model, config.num_heads, config.num_kv_heads) == \
        (30, 576, 9, 3)
    assert config.vocab_size == 49152 and config.ffn_hidden == 1536
    assert config.rope_style == "interleaved" and config.tie_embeddings
    assert fast.architecture == "llama" and not fast.exact
    assert fast.tokenizer.decode([fast.end_of_turn]) == "<|im_end|>"
    assert "<|im_start|>" in fast.chat_template


def test_exact_logits_match_transformers(exact, hf_model):
    import torch

    for prompt in PROMPTS:
        ids = exact.tokenizer.encode(prompt)
        ours = exact.logits(ids)[0]
        with torch.no_grad():
            ref = hf_model(torch.tensor([ids])).logits[0].numpy()
        rel = np.abs(ours - ref).max() / np.abs(ref).max()
        assert rel <= 1e-4, f"{prompt!r}: relative difference {rel:.3g}"


def teacher_forced_sequences(tokenizer, count=20, prompt_len=16, forced=64):
    """count sequences of prompt_len + forced ids cut from the corpus's text."""
    text = CORPUS.read_text(encoding="utf-8")
    ids = tokenizer.encode(text)
    length = prompt_len + forced
    stride = max(length, (len(ids) - length) // count)
    seqs = [ids[i:i + length] for i in range(0, len(ids) - length + 1, stride)][:count]
    assert len(seqs) == count
    return np.array(seqs, dtype=np.int64)


def test_fast_greedy_agrees_with_exact(exact, fast):
    seqs = teacher_forced_sequences(exact.tokenizer)
    forced = 64
    agree = total = 0
    for start in range(0, len(seqs), 5):  # batches of 5 keep the logits small
        batch = seqs[start:start + 5]
        a = fast.logits(batch)[:, -forced - 1:-1].argmax(-1)
        b = exact.logits(batch)[:, -forced - 1:-1].argmax(-1)
        agree += int((a == b).sum())
        total += a.size
    assert total == 20 * 64
    assert agree / total >= 0.99, f"{agree} of {total}"


@pytest.mark.skipif(os.environ.get("QKV_INT8_DECODE") == "1",
                    reason="QKV_INT8_DECODE=1 rounds x in decoding only, by design "
                           "(include/qkv/quantized_linear.h)")
def test_cached_generation_equals_recomputing(fast):
    prompt = fast.tokenizer.encode(PROMPTS[0])
    new = fast.generate(prompt, max_new_tokens=16, stop_at_end_of_turn=False)
    assert len(new) == 16
    seq = prompt + new
    logits = fast.logits(seq)[0]
    assert list(logits[len(prompt) - 1:-1].argmax(-1)) == new
    text = fast.tokenizer.decode(fast.generate("The capital of France is", 4))
    assert "Paris" in text
