"""Dropout in qkv's scaled_dot_product_attention.

Random streams cannot match torch's, so statistics and seeding are checked
directly, and exact parity uses torch's private math reference, which accepts
the keep mask that qkv exports: its output is (softmax · keep / (1-p)) @ v.
"""

import math
import warnings

import numpy as np
import pytest
import torch

import qkv
from helpers import assert_close

sdpa = qkv.nn.functional.scaled_dot_product_attention
sdpa_w = qkv.nn.functional.scaled_dot_product_attention_with_weights


def inputs(shape_q=(2, 4, 64, 16), S=64, Ev=16, dtype=np.float32, seed=0, Hkv=None):
    rng = np.random.default_rng(seed)
    *lead, L, E = shape_q
    kv_lead = list(lead[:-1]) + [Hkv] if Hkv else list(lead)
    q = rng.standard_normal(shape_q).astype(dtype)
    k = rng.standard_normal(kv_lead + [S, E]).astype(dtype)
    v = rng.standard_normal(kv_lead + [S, Ev]).astype(dtype)
    return q, k, v


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_kept_fraction_is_one_minus_p(p):
    q, k, v = inputs()
    _, keep = sdpa(q, k, v, dropout_p=p, return_dropout_mask=True,
                   generator=qkv.Generator(int(p * 100)))
    assert keep.dtype == np.bool_ and keep.shape == (2, 4, 64, 64)
    n = keep.size
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(keep.mean() - (1 - p)) < 6 * sigma, (keep.mean(), 1 - p)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kept_weights_are_scaled_by_one_over_one_minus_p(dtype):
    p = 0.3
    q, k, v = inputs(dtype=dtype)
    _, plain = sdpa_w(q, k, v)
    out, dropped, keep = sdpa_w(q, k, v, dropout_p=p, return_dropout_mask=True,
                                generator=qkv.Generator(1))
    assert np.all(dropped[~keep] == 0)
    assert_close(dropped, plain * keep / (1 - p), dtype, "weights after dropout")
    assert_close(out, dropped @ v, dtype, "output = dropped weights @ v")


def test_same_seed_same_result_different_seed_different():
    q, k, v = inputs()
    qkv.manual_seed(123)
    a = sdpa(q, k, v, dropout_p=0.4)
    qkv.manual_seed(123)
    b = sdpa(q, k, v, dropout_p=0.4)
    qkv.manual_seed(124)
    c = sdpa(q, k, v, dropout_p=0.4)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # Explicit generators behave the same and leave the default stream alone.
    g1 = sdpa(q, k, v, dropout_p=0.4, generator=qkv.Generator(7))
    g2 = sdpa(q, k, v, dropout_p=0.4, generator=qkv.Generator(7))
    g3 = sdpa(q, k, v, dropout_p=0.4, generator=qkv.Generator(8))
    np.testing.assert_array_equal(g1, g2)
    assert not np.array_equal(g1, g3)
    # Consecutive calls draw new masks.
    qkv.manual_seed(123)
    sdpa(q, k, v, dropout_p=0.4)
    assert not np.array_equal(sdpa(q, k, v, dropout_p=0.4), a)


def test_manual_seed_accepts_torch_seed_range():
    gen = qkv.manual_seed(-1)
    assert isinstance(gen, qkv.Generator)
    a = gen.next_u64()
    qkv.manual_seed(2**64 - 1)  # the same seed as -1, as in torch
    assert qkv.default_generator().next_u64() == a
    with pytest.raises(ValueError, match="seed"):
        qkv.manual_seed(2**64)


def test_passed_mask_reproduces_the_sampled_one():
    q, k, v = inputs(dtype=np.float64)
    out, keep = sdpa(q, k, v, dropout_p=0.25, return_dropout_mask=True)
    again, keep2 = sdpa(q, k, v, dropout_p=0.25, dropout_mask=keep, return_dropout_mask=True)
    np.testing.assert_array_equal(out, again)
    np.testing.assert_array_equal(keep, keep2)
    # A broadcast mask: drop the same keys for every query.
    per_key = np.random.default_rng(1).random((1, 1, 1, 64)) < 0.5
    _, w = sdpa_w(q, k, v, dropout_p=0.5, dropout_mask=per_key)
    assert np.all(w[..., ~per_key[0, 0, 0]] == 0)


def test_no_dropout_mask_without_dropout():
    q, k, v = inputs()
    out, keep = sdpa(q, k, v, return_dropout_mask=True)
    assert keep is None
    np.testing.assert_array_equal(out, sdpa(q, k, v))


CASES = [
    # (name, q shape, S, Ev, dtype, p, mask kind, scale, Hkv)
    ("f32-plain", (2, 3, 17, 8), 33, 8, np.float32, 0.2, None, None, None),
    ("f64-plain", (2, 3, 17, 8), 33, 8, np.float64, 0.2, None, None, None),
    ("f32-Ev", (1, 2, 5, 16), 9, 3, np.float32, 0.5, None, 0.3, None),
    ("f64-float-mask", (2, 2, 8, 17), 12, 17, np.float64, 0.7, "float", None, None),
    ("f32-float-mask", (2, 2, 8, 17), 12, 17, np.float32, 0.1, "float", 1.2, None),
    ("f64-causal-as-float", (1, 4, 12, 32), 12, 32, np.float64, 0.3, "causal", None, None),
    ("f32-gqa", (2, 4, 6, 8), 10, 8, np.float32, 0.4, None, None, 2),
    ("f64-gqa-float-mask", (1, 6, 7, 80), 5, 64, np.float64, 0.6, "float", None, 3),
    ("f32-3d", (4, 20, 128), 20, 128, np.float32, 0.2, None, None, None),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_exact_agreement_with_torch_math_given_our_mask(case):
    name, shape_q, S, Ev, dtype, p, mask_kind, scale, Hkv = case
    q, k, v = inputs(shape_q, S, Ev, dtype, seed=len(name), Hkv=Hkv)
    L = shape_q[-2]
    mask = None
    if mask_kind == "float":
        rng = np.random.default_rng(9)
        mask = rng.standard_normal((L, S)).astype(dtype)
        mask[rng.random((L, S)) < 0.2] = -np.inf
        mask[:, 0] = 0.0  # no fully masked rows: torch's math path gives NaN there with dropout
    elif mask_kind == "causal":
        mask = qkv.masks.keep_mask_to_additive(qkv.masks.causal_mask(L, S), dtype)
    gqa = Hkv is not None
    out, weights, keep = sdpa_w(q, k, v, attn_mask=mask, dropout_p=p, scale=scale,
                                enable_gqa=gqa, return_dropout_mask=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Dropout mask should only be used for testing"
        theirs, _ = torch._scaled_dot_product_attention_math(
            *map(torch.from_numpy, (q, k, v)),
            attn_mask=None if mask is None else torch.from_numpy(mask), dropout_p=p,
            is_causal=False, dropout_mask=torch.from_numpy(keep), scale=scale, enable_gqa=gqa)
    assert keep.shape == weights.shape
    assert_close(out, theirs, dtype, f"dropout output of {name}")
    # And the output without weights is the same computation.
    np.testing.assert_array_equal(
        sdpa(q, k, v, attn_mask=mask, dropout_p=p, scale=scale, enable_gqa=gqa, dropout_mask=keep),
        out)
