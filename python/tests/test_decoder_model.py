"""qkv.DecoderModel and qkv.DecoderSession: parity with the same model written
in torch, cached decoding equal to recomputation, generation, files, errors."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import qkv

from helpers import assert_close


def tiny(**fields):
    base = dict(vocab_size=40, d_model=32, num_layers=2, num_heads=4, max_seq_len=64)
    base.update(fields)
    return qkv.DecoderModel(generator=qkv.Generator(0), **base)


def torch_logits(state, config, ids):
    """The decoder-only model in plain torch ops, from qkv's state_dict (RoPE
    half-split, RMSNorm or LayerNorm, SwiGLU or GELU, tied or not)."""
    c = config
    s = {k: torch.from_numpy(v).double() for k, v in state.items()}
    ids = torch.tensor(ids)[None]
    T, D, H = ids.shape[1], c.d_model, c.num_heads
    Hkv, E = c.num_kv_heads, c.d_model // c.num_heads

    def norm(x, prefix):
        if c.norm == "rmsnorm":
            return F.rms_norm(x, (D,), s[prefix + ".weight"], c.norm_eps)
        return F.layer_norm(x, (D,), s[prefix + ".weight"], s.get(prefix + ".bias"), c.norm_eps)

    def lin(x, prefix):
        return F.linear(x, s[prefix + ".weight"], s.get(prefix + ".bias"))

    inv = c.rope_base ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * inv[None]
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)

    def rope(x):
        half = E // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin

    x = s["tok_embeddings.weight"][ids]
    if c.positions == "learned":
        x = x + s["pos_embeddings.weight"][:T]
    for i in range(c.num_layers):
        p = f"layers.{i}"
        h = norm(x, p + ".attention_norm")
        q = lin(h, p + ".attention.q_proj").view(1, T, H, E).transpose(1, 2)
        k = lin(h, p + ".attention.k_proj").view(1, T, Hkv, E).transpose(1, 2)
        v = lin(h, p + ".attention.v_proj").view(1, T, Hkv, E).transpose(1, 2)
        if c.positions == "rope":
            q, k = rope(q), rope(k)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=Hkv != H)
        x = x + lin(o.transpose(1, 2).reshape(1, T, D), p + ".attention.o_proj")
        h = norm(x, p + ".ffn_norm")
        f = p + ".feed_forward"
        if c.ffn == "swiglu":
            x = x + lin(F.silu(lin(h, f + ".w1")) * lin(h, f + ".w3"), f + ".w2")
        else:
            x = x + lin(F.gelu(lin(h, f + ".linear1")), f + ".linear2")
    head = s["tok_embeddings.weight"] if c.tie_embeddings else s["output.weight"]
    return F.linear(norm(x, "norm"), head).numpy()


@pytest.mark.parametrize("fields", [
    {},
    {"num_kv_heads": 2, "tie_embeddings": False},
    {"positions": "learned", "norm": "layernorm", "ffn": "gelu", "bias": True},
])
def test_forward_matches_torch(fields):
    model = tiny(**fields)
    ids = np.random.default_rng(0).integers(0, 40, size=20).tolist()
    assert_close(model(ids), torch_logits(model.state_dict(), model.config, ids), np.float32,
                 f"logits {fields}")


def test_cached_greedy_decoding_equals_recomputation():
    model = tiny(num_kv_heads=2)
    prompt = [3, 1, 4, 1, 5]
    ids = model.generate(prompt, 20, temperature=0)
    seq = list(prompt)
    session = model.session()
    logits = session.prefill(prompt)
    for token in ids:
        full = model(seq)[0, -1]
        assert np.max(np.abs(logits[0] - full)) <= 1e-5 * max(1.0, np.max(np.abs(full)))
        assert int(np.argmax(full)) == token
        seq.append(token)
        logits = session.step([token])
    assert session.length == len(prompt) + 20


def test_generation_is_seeded_and_filters_apply():
    model = tiny(tie_embeddings=False)
    a = model.generate([1, 2, 3], 30, temperature=1.0, top_k=5, seed=7)
    assert a == model.generate([1, 2, 3], 30, temperature=1.0, top_k=5, seed=7)
    assert a != model.generate([1, 2, 3], 30, temperature=1.0, top_k=5, seed=8)
    assert len(a) == 30 and all(0 <= t < 40 for t in a)
    # top_k = 1 is greedy whatever the seed.
    assert model.generate([1, 2, 3], 10, top_k=1, seed=1) == model.generate([1, 2, 3], 10,
                                                                            temperature=0)
    stop = a[3]
    stopped = model.generate([1, 2, 3], 30, temperature=1.0, top_k=5, seed=7, stop_token=stop)
    assert stopped == a[:a.index(stop) + 1]


def test_batched_session():
    model = tiny()
    session = model.session(batch_size=2)
    logits = session.prefill(np.array([[1, 2, 3], [4, 5, 6]]))
    assert logits.shape == (2, 40)
    logits = session.step([7, 8])
    assert np.allclose(logits[1], model([4, 5, 6, 8])[0, -1], atol=1e-5)


def test_state_dict_round_trip_and_torch_tensors(tmp_path):
    model = tiny(positions="learned", tie_embeddings=False)
    other = qkv.DecoderModel(model.config, generator=qkv.Generator(5))
    assert not np.allclose(other([1, 2]), model([1, 2]))
    other.load_state_dict({k: torch.from_numpy(v) for k, v in model.state_dict().items()})
    np.testing.assert_array_equal(other([1, 2]), model([1, 2]))
    path = tmp_path / "m.safetensors"
    model.save(path, metadata={"qkv.vocabulary": "\"bytes\""})
    loaded = qkv.DecoderModel.load(path)
    assert loaded.config == model.config
    assert loaded.metadata["qkv.vocabulary"] == "\"bytes\""
    np.testing.assert_array_equal(loaded([5, 6, 7]), model([5, 6, 7]))


def test_errors():
    model = tiny()
    with pytest.raises(ValueError, match="top_p"):
        model.generate([1], 5, top_p=0.0)
    with pytest.raises(ValueError, match="temperature"):
        model.generate([1], 5, temperature=-1)
    with pytest.raises(ValueError, match="out of range"):
        model([1, 99])
    with pytest.raises(TypeError):
        model([1.5, 2.0])
    short = model.session(max_len=8)
    short.prefill([1, 2, 3, 4])
    with pytest.raises(ValueError, match="context holds 8"):
        short.decode(10)
    with pytest.raises(ValueError, match="missing"):
        model.load_state_dict({})
    with pytest.raises(ValueError, match="divisible"):
        qkv.DecoderModel(d_model=30, num_heads=4)
    session = model.session(max_len=4)
    session.prefill([1, 2, 3])
    session.step([4])
    with pytest.raises(ValueError, match="full"):
        session.step([5])
