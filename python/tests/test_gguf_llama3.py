"""A Llama 3-style GGUF file against transformers' LlamaForCausalLM.

A tiny random model (2 blocks, width 64, 4 query heads and 2 KV heads of 16,
tied output embeddings) is written here with the `gguf` package as llama.cpp's
converter writes a Llama 3.1 checkpoint: q/k rows permuted for interleaved
RoPE, and `rope_freqs.weight` computed from rope_scaling (rope_type "llama3").
qkv's logits, over a whole sequence and step by step through the KV cache,
are within 1e-4 of transformers' (max |diff| / max |ref|) built from the same
weights with rope_scaling={"rope_type": "llama3", ...}. Without the factors
they are far off, so the comparison sees them.
"""

import numpy as np
import pytest

import qkv

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from tiny_llama3_gguf import (BASE, D, HEAD_DIM, ROPE_SCALING, VOCAB,  # noqa: E402
                              llama3_rope_factors, tiny_llama3, write_gguf)


@pytest.fixture(scope="module")
def hf_model():
    return tiny_llama3()


def relative(ours, ref):
    return float(np.abs(ours - ref).max() / np.abs(ref).max())


IDS = [int(i) for i in np.random.default_rng(5).integers(0, VOCAB, size=48)]


@pytest.fixture(scope="module")
def reference(hf_model):
    with torch.no_grad():
        return hf_model(torch.tensor([IDS])).logits[0].numpy()


def test_factors_are_the_converters(tmp_path, hf_model):
    m = qkv.models.load_gguf(write_gguf(tmp_path / "llama3.gguf", hf_model), exact=True)
    factors = llama3_rope_factors(ROPE_SCALING, BASE, HEAD_DIM)
    assert m.model.config.rope_freq_factors == [float(f) for f in factors]
    # Every band of the rule is present: kept (1), smoothed, divided by the factor.
    assert factors[0] == 1 and 1 < factors[1] < 8 and factors[-1] == 8
    # transformers' inverse frequencies are the base's divided by the factors.
    inv = hf_model.model.rotary_emb.inv_freq.numpy()
    plain = 1.0 / BASE ** (np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    np.testing.assert_allclose(inv, plain / factors, rtol=1e-6)


@pytest.mark.parametrize("exact", [True, False])
def test_logits_match_transformers(tmp_path, hf_model, reference, exact):
    m = qkv.models.load_gguf(write_gguf(tmp_path / "llama3.gguf", hf_model), exact=exact)
    rel = relative(m.logits(IDS)[0], reference)
    print(f"exact={exact}: max relative logit difference vs transformers {rel:.3g}")
    assert rel <= 1e-4


def test_cached_steps_match_transformers(tmp_path, hf_model, reference):
    m = qkv.models.load_gguf(write_gguf(tmp_path / "llama3.gguf", hf_model))
    session = m.model.session()
    rows = [session.prefill(IDS[:8])[0]]
    rows += [session.step([i])[0] for i in IDS[8:]]
    rel = relative(np.stack(rows), reference[7:])
    print(f"cached steps: max relative logit difference vs transformers {rel:.3g}")
    assert rel <= 1e-4


def test_without_the_factors_the_logits_are_far_off(tmp_path, hf_model, reference):
    # The file without rope_freqs.weight is a plain-RoPE model: the test above sees the factors.
    m = qkv.models.load_gguf(write_gguf(tmp_path / "plain.gguf", hf_model, rope_freqs=False),
                             exact=True)
    assert m.model.config.rope_freq_factors == []
    rel = relative(m.logits(IDS)[0], reference)
    print(f"without rope_freqs.weight: max relative logit difference {rel:.3g}")
    assert rel > 1e-2


def test_a_stray_tensor_is_refused_by_name(tmp_path, hf_model):
    # A q bias (Qwen2 has them; llama.cpp's llama takes one too): qkv cannot apply it.
    path = write_gguf(tmp_path / "bias.gguf", hf_model,
                      extra={"blk.1.attn_q.bias": np.zeros(D, dtype=np.float32)})
    with pytest.raises(ValueError, match=r'tensor "blk\.1\.attn_q\.bias" is not one a llama '
                                         r'model uses'):
        qkv.models.load_gguf(path)


@pytest.mark.parametrize("content", [b"", b"GG", b"GGU"])
def test_a_short_file_gets_a_gguf_error(tmp_path, content):
    path = tmp_path / "short.gguf"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r'invalid GGUF file .*the magic "GGUF" needs 4 bytes'):
        qkv.models.load_gguf(path)
