"""qkv.nn.positional against independent float64 implementations of each formula.

  sinusoidal   the tutorial's §3.4 formula in numpy
  RoPE         half-split = Hugging Face's rotate_half form; interleaved = the
               complex-number form (RoFormer / Meta's LLaMA); the two differ by
               the even/odd permutation
  ALiBi        the slopes of the reference code; the bias m_h (j − i)
  T5 buckets   transformers' T5Attention._relative_position_bucket when
               transformers is installed; always a numpy and a torch
               reimplementation of its formula
"""

import math

import numpy as np
import pytest
import torch

import qkv
from helpers import assert_close

P = qkv.nn.positional


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-30)) if b.size else 0.0


# --- Sinusoidal ----------------------------------------------------------------------


def sinusoidal_reference(length, d_model, offset=0):
    """§3.4: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))."""
    pe = np.zeros((length, d_model))
    pos = np.arange(offset, offset + length, dtype=np.float64)[:, None]
    two_i = np.arange(0, d_model, 2, dtype=np.float64)
    angle = pos / np.power(10000.0, two_i / d_model)
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : d_model // 2])
    return pe


@pytest.mark.parametrize("length,d_model,offset", [(1, 2, 0), (50, 64, 0), (17, 7, 3),
                                                   (8, 512, 4990), (0, 4, 0)])
def test_sinusoidal_formula(length, d_model, offset):
    ref = sinusoidal_reference(length, d_model, offset)
    got64 = P.sinusoidal_encoding(length, d_model, offset, dtype="float64")
    assert got64.dtype == np.float64 and got64.shape == (length, d_model)
    assert np.max(np.abs(got64 - ref), initial=0.0) <= 1e-12
    got32 = P.sinusoidal_encoding(length, d_model, offset)
    assert got32.dtype == np.float32
    # Rounded once from float64: within one float32 rounding of the reference.
    assert np.max(np.abs(got32 - ref), initial=0.0) <= 2 ** -24 * 1.01
    if length > 1 and d_model > 1:
        assert got64[0, 0] == 0.0 or offset  # sin(0) at position 0, column 0
        assert np.all(np.abs(got64) <= 1.0)


@pytest.mark.parametrize("batch_first", [False, True])
def test_sinusoidal_module_adds_table(batch_first):
    pe = P.SinusoidalPositionalEncoding(16, max_len=40, batch_first=batch_first)
    assert pe.state_dict() == {}
    table = pe.table
    np.testing.assert_allclose(table, sinusoidal_reference(40, 16), atol=1e-7)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 16) if batch_first else (5, 3, 16)).astype(np.float32)
    got = pe(x, offset=7)
    rows = table[7:12]
    expected = x + (rows[None] if batch_first else rows[:, None])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    unbatched = x[0] if batch_first else x[:, 0]
    np.testing.assert_allclose(pe(unbatched, 7), unbatched + rows, atol=1e-6)
    with pytest.raises(ValueError, match="max_len"):
        pe(x, offset=36)


def test_learned_module_and_dropout():
    pe = P.LearnedPositionalEncoding(8, max_len=10, dropout=0.5, generator=qkv.Generator(1))
    weight = np.random.default_rng(0).standard_normal((10, 8))
    pe.load_state_dict({"weight": torch.from_numpy(weight.astype(np.float32))})
    x = np.ones((4, 2, 8), np.float32)
    pe.eval()
    np.testing.assert_allclose(pe(x, 2), x + weight[2:6, None].astype(np.float32), atol=1e-6)
    pe.train()
    out = pe(x, 2)
    assert np.any(out == 0) and not np.array_equal(out, pe.eval()(x, 2))
    assert list(pe.state_dict()) == ["weight"]


# --- RoPE --------------------------------------------------------------------------------


def inverse_frequencies(E, base):
    return base ** (-np.arange(0, E, 2, dtype=np.float64) / E)


def rope_half_split_reference(x, offset, base):
    """Hugging Face style: x·cos + rotate_half(x)·sin, cos/sin repeated over both halves."""
    x = np.asarray(x, np.float64)
    L, E = x.shape[-2:]
    angles = np.arange(offset, offset + L, dtype=np.float64)[:, None] * inverse_frequencies(E, base)
    emb = np.concatenate([angles, angles], axis=-1)  # [L, E]
    x1, x2 = x[..., : E // 2], x[..., E // 2:]
    rotate_half = np.concatenate([-x2, x1], axis=-1)
    return x * np.cos(emb) + rotate_half * np.sin(emb)


def rope_interleaved_reference(x, offset, base):
    """The complex-number form: pairs (2i, 2i+1) as a + ib, times e^{i·pos·θ_i}."""
    x = np.asarray(x, np.float64)
    L, E = x.shape[-2:]
    angles = np.arange(offset, offset + L, dtype=np.float64)[:, None] * inverse_frequencies(E, base)
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * angles)
    out = np.empty_like(x)
    out[..., 0::2] = z.real
    out[..., 1::2] = z.imag
    return out


REFERENCES = {"half_split": rope_half_split_reference, "interleaved": rope_interleaved_reference}


@pytest.mark.parametrize("style", ["half_split", "interleaved"])
@pytest.mark.parametrize("shape,offset,base", [((2, 3, 7, 8), 0, 10000.0),
                                               ((5, 64), 100, 10000.0),
                                               ((1, 2, 4, 2), 3, 10000.0),
                                               ((2, 9, 32), 0, 500000.0),
                                               ((3, 0, 16), 0, 10000.0)])
def test_rope_matches_formula(style, shape, offset, base):
    rng = np.random.default_rng(sum(shape) + offset)
    x = rng.standard_normal(shape)
    rope = P.RotaryEmbedding(shape[-1], base=base, style=style)
    ref = REFERENCES[style](x, offset, base)
    got64 = rope(x, offset)
    assert got64.dtype == np.float64
    assert rel(got64, ref) <= 1e-12
    x32 = x.astype(np.float32)
    got32 = rope(torch.from_numpy(x32), offset)
    assert got32.dtype == np.float32
    assert rel(got32, REFERENCES[style](x32, offset, base)) <= 1e-6
    np.testing.assert_array_equal(P.apply_rotary(x, offset, base, style), got64)
    np.testing.assert_allclose(rope.inverse_frequencies(), inverse_frequencies(shape[-1], base),
                               rtol=1e-15)


def test_rope_conventions_differ_by_even_odd_permutation():
    E = 16
    perm = np.concatenate([np.arange(0, E, 2), np.arange(1, E, 2)])  # evens, then odds
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 6, E))
    half = P.RotaryEmbedding(E, style="half_split")
    inter = P.RotaryEmbedding(E, style="interleaved")
    # half_split(P x) = P interleaved(x)
    assert rel(half(x[..., perm], 5), inter(x, 5)[..., perm]) <= 1e-15
    # ... and they are not the same function.
    assert rel(half(x, 5), inter(x, 5)) > 1e-2


@pytest.mark.parametrize("style", ["half_split", "interleaved"])
def test_rope_scores_depend_on_relative_position(style):
    rope = P.RotaryEmbedding(8, style=style)
    rng = np.random.default_rng(4)
    q = rng.standard_normal((1, 8))
    k = rng.standard_normal((1, 8))
    q2, k2 = rope.forward_qk(np.repeat(q, 10, 0), np.repeat(k, 10, 0), offset=0)
    # position m vs n depends on m - n only: (3, 1) like (9, 7), offsets shift both.
    assert abs(q2[3] @ k2[1] - q2[9] @ k2[7]) <= 1e-12
    q3, k3 = rope.forward_qk(np.repeat(q, 10, 0), np.repeat(k, 10, 0), offset=20)
    assert abs(q3[3] @ k3[1] - q2[3] @ k2[1]) <= 1e-12
    with pytest.raises(ValueError, match="even"):
        P.RotaryEmbedding(7)
    with pytest.raises(ValueError, match="style"):
        P.RotaryEmbedding(8, style="neox")


# --- ALiBi -----------------------------------------------------------------------------------


def alibi_slopes_reference(n):
    def power_of_two(m):
        start = 2.0 ** (-(2.0 ** -(math.log2(m) - 3)))
        return [start * start ** i for i in range(m)]

    if math.log2(n).is_integer():
        return power_of_two(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_two(closest) + alibi_slopes_reference(2 * closest)[0::2][: n - closest]


def test_alibi_slopes():
    for n in range(1, 33):
        assert rel(P.alibi_slopes(n), alibi_slopes_reference(n)) <= 1e-15, n
    np.testing.assert_array_equal(P.alibi_slopes(8), 2.0 ** -np.arange(1, 9))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("H,L,S", [(4, 5, 5), (3, 2, 6), (8, 1, 9)])
def test_alibi_bias(causal, H, L, S):
    slopes = np.asarray(alibi_slopes_reference(H))[:, None, None]
    pos = (np.arange(L) + S - L)[:, None]
    dist = (np.arange(S)[None, :] - pos).astype(np.float64)  # j − pos_i
    if causal:
        expected = np.where(dist <= 0, slopes * dist, -np.inf)
    else:
        expected = -slopes * np.abs(dist)
    got = P.Alibi(H, causal=causal, dtype="float64")(L, S)
    assert got.shape == (H, L, S)
    np.testing.assert_allclose(got, expected, rtol=1e-15, atol=0)
    # Usable as an SDPA float mask: broadcast over the batch.
    q = np.random.default_rng(0).standard_normal((2, H, L, 4))
    k = np.random.default_rng(1).standard_normal((2, H, S, 4))
    out = qkv.nn.functional.scaled_dot_product_attention(q, k, k, attn_mask=got)
    ref = torch.nn.functional.scaled_dot_product_attention(
        torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(k),
        attn_mask=torch.from_numpy(got))
    assert_close(out, ref, np.float64, "SDPA with the ALiBi bias")


# --- T5 relative position buckets -------------------------------------------------------------


def t5_bucket_torch(relative_position, bidirectional, num_buckets, max_distance):
    """The formula of transformers' T5, written with torch ops (float32 log)."""
    rp = torch.as_tensor(relative_position, dtype=torch.long)
    buckets = torch.zeros_like(rp)
    if bidirectional:
        num_buckets //= 2
        buckets += (rp > 0).long() * num_buckets
        rp = rp.abs()
    else:
        rp = -torch.minimum(rp, torch.zeros_like(rp))
    max_exact = num_buckets // 2
    large = max_exact + (torch.log(rp.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).long()
    large = torch.minimum(large, torch.full_like(large, num_buckets - 1))
    return (buckets + torch.where(rp < max_exact, rp, large)).numpy()


def t5_bucket_numpy(relative_position, bidirectional, num_buckets, max_distance):
    """The same formula in numpy, the log in float32 as T5's."""
    rp = np.asarray(relative_position, np.int64)
    buckets = np.zeros_like(rp)
    if bidirectional:
        num_buckets //= 2
        buckets += (rp > 0) * num_buckets
        rp = np.abs(rp)
    else:
        rp = -np.minimum(rp, 0)
    max_exact = num_buckets // 2
    with np.errstate(divide="ignore"):
        scaled = (np.log(rp.astype(np.float32) / np.float32(max_exact))
                  / np.float32(math.log(max_distance / max_exact))
                  * np.float32(num_buckets - max_exact))
    large = max_exact + np.where(rp < max_exact, 0, scaled).astype(np.int64)
    large = np.minimum(large, num_buckets - 1)
    return buckets + np.where(rp < max_exact, rp, large)


BUCKET_CONFIGS = [(True, 32, 128), (False, 32, 128), (True, 16, 64), (False, 64, 256),
                  (True, 8, 20), (False, 4, 10)]
RELATIVE = np.arange(-1200, 1201, dtype=np.int64)


@pytest.mark.parametrize("bidirectional,num_buckets,max_distance", BUCKET_CONFIGS)
def test_t5_buckets_formula(bidirectional, num_buckets, max_distance):
    got = P.relative_position_bucket(RELATIVE, bidirectional, num_buckets, max_distance)
    assert got.dtype == np.int64 and got.shape == RELATIVE.shape
    args = (bidirectional, num_buckets, max_distance)
    np.testing.assert_array_equal(got, t5_bucket_torch(RELATIVE, *args))
    np.testing.assert_array_equal(got, t5_bucket_numpy(RELATIVE, *args))
    assert P.relative_position_bucket(-5, *args) == got[1200 - 5]
    got2d = P.relative_position_bucket(torch.from_numpy(RELATIVE[:10].reshape(2, 5)), *args)
    np.testing.assert_array_equal(got2d, got[:10].reshape(2, 5))


@pytest.mark.parametrize("bidirectional,num_buckets,max_distance", BUCKET_CONFIGS)
def test_t5_buckets_transformers(bidirectional, num_buckets, max_distance):
    modeling_t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    expected = modeling_t5.T5Attention._relative_position_bucket(
        torch.from_numpy(RELATIVE), bidirectional=bidirectional, num_buckets=num_buckets,
        max_distance=max_distance).numpy()
    got = P.relative_position_bucket(RELATIVE, bidirectional, num_buckets, max_distance)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_position_bias(bidirectional):
    H, L, S = 3, 4, 9
    bias = P.RelativePositionBias(H, num_buckets=16, max_distance=32, bidirectional=bidirectional,
                                  dtype="float64")
    table = np.random.default_rng(2).standard_normal((16, H))
    bias.load_state_dict({"relative_attention_bias.weight": table})
    pos = (np.arange(L) + S - L)[:, None]
    buckets = t5_bucket_numpy(np.arange(S)[None, :] - pos, bidirectional, 16, 32)  # [L, S]
    expected = table[buckets].transpose(2, 0, 1)  # [H, L, S]
    np.testing.assert_array_equal(bias(L, S), expected)
    assert list(bias.state_dict()) == ["relative_attention_bias.weight"]
    with pytest.raises(ValueError):
        bias(5, 4)  # L > S
