"""qkv.nn.functional.scaled_dot_product_attention against torch 2.13.

A seeded randomised grid (N_CASES cases, each reproducible from its index)
spans leading batch dims, heads, L != S, head dims 1..128, Ev != E, bool and
float masks of every broadcastable shape (with fully masked rows), is_causal
with L < S and L > S, bottom-right causal, explicit scales, GQA, broadcast
key/value batch dims, numpy and torch inputs, float32 and float64. Outputs are
compared with torch's public SDPA, weights with torch's math reference.
"""

import math
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import qkv
from helpers import as_numpy, assert_close, sdpa_case_id

N_CASES = 640
HEAD_DIMS = [1, 3, 8, 16, 17, 32, 64, 80, 128]
LENGTHS = [1, 2, 3, 5, 8, 13, 17, 32, 33, 47]
MASK_KINDS = ["none", "bool", "bool", "float", "float", "causal", "bottom_right"]
# Elements of the largest score/value product per case: keeps the grid fast.
MAX_WORK = 300_000


def make_case(index):
    """The description of case `index`: shapes, dtype, mask and options."""
    r = random.Random(7919 * index + 17)
    c = {"index": index, "dtype": np.float32 if index % 2 == 0 else np.float64}
    c["batch"] = [r.choice([1, 2, 3]) for _ in range(r.choice([0, 1, 2]))]
    c["heads"] = r.random() < 0.9
    H = r.choice([1, 2, 3, 4]) if c["heads"] else None
    c["gqa"] = c["heads"] and r.random() < 0.2
    if c["gqa"]:
        c["Hkv"] = H
        H = H * r.choice([2, 3])
    else:
        c["Hkv"] = H
    c["H"] = H
    c["E"] = r.choice(HEAD_DIMS)
    c["Ev"] = c["E"] if r.random() < 0.5 else r.choice(HEAD_DIMS)
    while True:
        c["L"], c["S"] = r.choice(LENGTHS), r.choice(LENGTHS)
        work = math.prod(c["batch"]) * (H or 1) * c["L"] * c["S"] * (c["E"] + c["Ev"])
        if work <= MAX_WORK:
            break
    c["mask"] = r.choice(MASK_KINDS)
    if c["mask"] in ("bool", "float"):
        full = c["batch"] + ([H] if H else []) + [c["L"], c["S"]]
        shape = [n if r.random() < 0.5 else 1 for n in full]
        # 2 .. all dims (torch rejects 1-D masks; qkv broadcasts them too)
        c["mask_shape"] = shape[r.randrange(len(shape) - 1) :]
        c["fully_masked_rows"] = r.random() < 0.3
    c["scale"] = None if r.random() < 0.6 else round(r.uniform(0.05, 1.5), 3)
    c["broadcast_kv"] = len(c["batch"]) > 0 and r.random() < 0.1
    c["torch_inputs"] = r.random() < 0.3
    return c


def case_id(c):
    heads = f"H{c['H']}" + (f"/{c['Hkv']}" if c["gqa"] else "") if c["heads"] else "noH"
    return sdpa_case_id(c, heads)


CASES = [make_case(i) for i in range(N_CASES)]


def make_inputs(c):
    rng = np.random.default_rng(c["index"])
    dt = c["dtype"]
    head = [c["H"]] if c["heads"] else []
    kv_head = [c["Hkv"]] if c["heads"] else []
    kv_batch = [1] * len(c["batch"]) if c["broadcast_kv"] else c["batch"]
    q = rng.standard_normal(c["batch"] + head + [c["L"], c["E"]]).astype(dt)
    k = rng.standard_normal(kv_batch + kv_head + [c["S"], c["E"]]).astype(dt)
    v = rng.standard_normal(kv_batch + kv_head + [c["S"], c["Ev"]]).astype(dt)
    mask = None
    if c["mask"] == "bool":
        mask = rng.random(c["mask_shape"]) < 0.7
        if c["fully_masked_rows"]:
            rows = rng.random(c["mask_shape"][:-1]) < 0.3
            mask[rows] = False
    elif c["mask"] == "float":
        mask = (2 * rng.standard_normal(c["mask_shape"])).astype(dt)
        mask[rng.random(c["mask_shape"]) < 0.15] = -np.inf
        if c["fully_masked_rows"]:
            rows = rng.random(c["mask_shape"][:-1]) < 0.3
            mask[rows] = -np.inf
    return q, k, v, mask


def torch_reference(c, q, k, v, mask):
    """(output from torch's SDPA, weights from torch's math reference)."""
    tq, tk, tv = map(torch.from_numpy, (q, k, v))
    tmask, is_causal = None, c["mask"] == "causal"
    if mask is not None:
        tmask = torch.from_numpy(mask)
    if c["mask"] == "bottom_right":
        tmask = torch.ones(c["L"], c["S"], dtype=torch.bool).tril(c["S"] - c["L"])
    out = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tmask, is_causal=is_causal,
                                         scale=c["scale"], enable_gqa=c["gqa"])
    # The math reference mishandles bool masks: give it the additive form.
    if tmask is not None and tmask.dtype == torch.bool:
        tmask = torch.zeros(tmask.shape, dtype=tq.dtype).masked_fill(~tmask, -math.inf)
    _, weights = torch._scaled_dot_product_attention_math(
        tq, tk, tv, attn_mask=tmask, is_causal=is_causal, scale=c["scale"], enable_gqa=c["gqa"])
    return out, weights


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_sdpa_matches_torch(case):
    c = case
    q, k, v, mask = make_inputs(c)
    ref_out, ref_weights = torch_reference(c, q, k, v, mask)

    args = (q, k, v)
    if c["torch_inputs"]:
        args = tuple(map(torch.from_numpy, args))
        mask = None if mask is None else torch.from_numpy(mask)
    kwargs = dict(attn_mask=mask, scale=c["scale"], enable_gqa=c["gqa"])
    if c["mask"] == "causal":
        kwargs["is_causal"] = True
    elif c["mask"] == "bottom_right":
        kwargs["causal"] = "bottom_right"

    out = qkv.nn.functional.scaled_dot_product_attention(*args, **kwargs)
    expected = torch.Tensor if c["torch_inputs"] else np.ndarray  # torch in, torch out
    assert isinstance(out, expected) and as_numpy(out).dtype == c["dtype"]
    assert_close(out, ref_out, c["dtype"], f"output of {case_id(c)}")

    out2, weights = qkv.nn.functional.scaled_dot_product_attention_with_weights(*args, **kwargs)
    np.testing.assert_array_equal(out2, out, err_msg=f"with_weights output of {case_id(c)}")
    assert_close(weights, ref_weights, c["dtype"], f"weights of {case_id(c)}")


def test_grid_covers_the_brief():
    """The grid really contains what it claims to span."""
    seen = lambda pred: sum(1 for c in CASES if pred(c))
    assert len(CASES) >= 500
    for n in (0, 1, 2):
        assert seen(lambda c: len(c["batch"]) == n) > 50
    for e in (1, 3, 17, 80, 128):
        assert seen(lambda c: c["E"] == e) > 10
    assert seen(lambda c: c["E"] != c["Ev"]) > 100
    assert seen(lambda c: c["L"] != c["S"]) > 300
    assert seen(lambda c: c["mask"] == "causal" and c["L"] < c["S"]) > 10
    assert seen(lambda c: c["mask"] == "causal" and c["L"] > c["S"]) > 10
    assert seen(lambda c: c["mask"] == "bottom_right" and c["L"] > c["S"]) > 10
    assert seen(lambda c: c["gqa"]) > 50
    assert seen(lambda c: c["scale"] is not None) > 100
    assert seen(lambda c: c["dtype"] == np.float64) >= N_CASES // 2
    for kind in ("bool", "float"):
        shapes = {len(c["mask_shape"]) for c in CASES if c["mask"] == kind}
        assert shapes == {2, 3, 4, 5}, (kind, shapes)
        assert seen(lambda c: c["mask"] == kind and c.get("fully_masked_rows")) > 20
        # Shapes named in the brief: [L,S], [1,S], [H,1,S], [B,1,1,S], [B,H,L,S].
        assert seen(lambda c: c["mask"] == kind and len(c["mask_shape"]) == 2
                    and c["mask_shape"][0] == 1)
        assert seen(lambda c: c["mask"] == kind and len(c["mask_shape"]) == 4
                    and c["mask_shape"][1:3] == [1, 1] and c["batch"] and c["mask_shape"][0] > 1)


# --- Fully masked rows: both give 0 -------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_fully_masked_rows_give_zero_like_torch(dtype, kind):
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 3, 6, 8)).astype(dtype)
    k = rng.standard_normal((2, 3, 5, 8)).astype(dtype)
    v = rng.standard_normal((2, 3, 5, 4)).astype(dtype)
    keep = np.ones((6, 5), dtype=bool)
    keep[[1, 4]] = False
    mask = keep if kind == "bool" else np.where(keep, 0.0, -np.inf).astype(dtype)
    ours, weights = qkv.nn.functional.scaled_dot_product_attention_with_weights(
        q, k, v, attn_mask=mask)
    theirs = F.scaled_dot_product_attention(*map(torch.from_numpy, (q, k, v, mask))).numpy()
    assert np.all(theirs[..., [1, 4], :] == 0)
    assert np.all(ours[..., [1, 4], :] == 0)
    assert np.all(weights[..., [1, 4], :] == 0)
    assert_close(ours, theirs, dtype, "fully masked rows")


# --- Errors: where torch raises, qkv raises, naming the argument ----------------

def _qkv_inputs(dtype=np.float32):
    rng = np.random.default_rng(5)
    return (rng.standard_normal((2, 3, 4, 8)).astype(dtype),
            rng.standard_normal((2, 3, 5, 8)).astype(dtype),
            rng.standard_normal((2, 3, 5, 6)).astype(dtype))


def _torch_raises(fn):
    with pytest.raises(Exception):
        fn()


ERROR_CASES = {
    # name: (mutate(q, k, v) -> (q, k, v, kwargs), exception, message pattern)
    "mask_with_is_causal": (
        lambda q, k, v: (q, k, v, dict(attn_mask=np.ones((4, 5), bool), is_causal=True)),
        ValueError, "attn_mask.*is_causal"),
    "key_head_dim": (lambda q, k, v: (q, k[..., :7], v, {}), ValueError, "key"),
    "value_length": (lambda q, k, v: (q, k, v[..., :4, :], {}), ValueError, "value"),
    "query_1d": (lambda q, k, v: (q[0, 0, 0], k, v, {}), ValueError, "query"),
    "mask_shape": (
        lambda q, k, v: (q, k, v, dict(attn_mask=np.ones((3, 5), bool))),
        ValueError, "attn_mask"),
    "gqa_indivisible": (
        lambda q, k, v: (q, k[:, :2], v[:, :2], dict(enable_gqa=True)), ValueError, "heads"),
    "query_float16": (lambda q, k, v: (q.astype(np.float16), k, v, {}), TypeError,
                      "'query'.*float16"),
    "key_int": (lambda q, k, v: (q, k.astype(np.int64), v, {}), TypeError, "'key'.*int64"),
    "value_other_float": (lambda q, k, v: (q, k, v.astype(np.float64), {}), TypeError, "value"),
    "float_mask_other_dtype": (
        lambda q, k, v: (q, k, v, dict(attn_mask=np.zeros((4, 5), np.float64))),
        TypeError, "attn_mask.*float64"),
    "int_mask": (
        lambda q, k, v: (q, k, v, dict(attn_mask=np.zeros((4, 5), np.int32))),
        TypeError, "'attn_mask'.*int32"),
}


@pytest.mark.parametrize("name", list(ERROR_CASES))
def test_errors_like_torch(name):
    mutate, error, pattern = ERROR_CASES[name]
    q, k, v, kwargs = mutate(*_qkv_inputs())
    torch_kwargs = {key: torch.from_numpy(np.ascontiguousarray(val))
                    if isinstance(val, np.ndarray) else val for key, val in kwargs.items()}
    _torch_raises(lambda: F.scaled_dot_product_attention(
        *(torch.from_numpy(np.ascontiguousarray(x)) for x in (q, k, v)), **torch_kwargs))
    with pytest.raises(error, match=pattern):
        qkv.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)


def test_torch_tensor_dtype_errors_name_the_argument():
    q, k, v = map(torch.from_numpy, _qkv_inputs())
    with pytest.raises(TypeError, match="'query'.*torch.float16"):
        qkv.nn.functional.scaled_dot_product_attention(q.half(), k, v)
    # bfloat16 is accepted for all three together only (test_bfloat16.py).
    with pytest.raises(TypeError, match="same dtype, got float32, float32 and bfloat16"):
        qkv.nn.functional.scaled_dot_product_attention(q, k, v.bfloat16())
    with pytest.raises(TypeError, match="'attn_mask'.*torch.int64"):
        qkv.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=torch.zeros(4, 5).long())
    with pytest.raises(TypeError, match="'query'.*bool"):
        qkv.nn.functional.scaled_dot_product_attention(q > 0, k, v)


def test_qkv_extras_reject_bad_arguments():
    q, k, v = _qkv_inputs()
    f = qkv.nn.functional.scaled_dot_product_attention
    with pytest.raises(ValueError, match="causal"):
        f(q, k, v, causal="diagonal")
    with pytest.raises(ValueError, match="causal"):
        f(q, k, v, is_causal=True, causal="bottom_right")
    with pytest.raises(ValueError, match="attn_mask"):
        f(q, k, v, attn_mask=np.ones((4, 5), bool), causal="bottom_right")
    with pytest.raises(TypeError, match="'dropout_mask'.*float32"):
        f(q, k, v, dropout_p=0.5, dropout_mask=np.ones((4, 5), np.float32))
    with pytest.raises(ValueError, match="dropout_p"):
        f(q, k, v, dropout_p=1.5)
    with pytest.raises(TypeError, match="'generator'.*int"):
        f(q, k, v, dropout_p=0.5, generator=42)
    # Scalars of the wrong type name the argument (not pybind11's signature dump).
    for bad, error, message in ((dict(dropout_p="0.1"), TypeError, "'dropout_p' must be a number"),
                                (dict(scale="s"), TypeError, "'scale' must be a number"),
                                (dict(softcap=[1.0]), TypeError, "'softcap' must be a number"),
                                (dict(window_left=2.5), ValueError, "'window_left' must be an int"),
                                (dict(window_right="a"), TypeError, "'window_right' must be an int"),
                                (dict(window_left=2**70), ValueError, "'window_left' is out of"),
                                (dict(backend=3), TypeError, "'backend' must be a str")):
        with pytest.raises(error, match=message):
            f(q, k, v, **bad)


def test_qkv_extras_accept_every_spelling_of_their_defaults_and_forms():
    # _core reads these itself (None defaults, bools, sequences): each form
    # must give what its plain spelling gives.
    q, k, v = _qkv_inputs(np.float64)
    f = qkv.nn.functional.scaled_dot_product_attention
    plain = f(q, k, v)
    for extras in (dict(causal=None), dict(causal=False), dict(window_left=None, window_right=None),
                   dict(alibi_slopes=None), dict(softcap=None), dict(softcap=0.0),
                   dict(generator=None), dict(scale=None)):
        np.testing.assert_array_equal(f(q, k, v, **extras), plain, err_msg=str(extras))
    np.testing.assert_array_equal(f(q, k, v, causal=True), f(q, k, v, is_causal=True))
    # Numbers of other Python and numpy types, as float() and int() take them.
    np.testing.assert_array_equal(f(q, k, v, window_left=2.0, scale=np.float32(0.5)),
                                  f(q, k, v, window_left=2, scale=0.5))
    np.testing.assert_array_equal(f(q, k, v, window_right=np.int64(1), softcap=np.float64(30)),
                                  f(q, k, v, window_right=1, softcap=30.0))
    slopes = [0.5, 0.25, 0.125]  # one per head
    by_list = f(q, k, v, alibi_slopes=slopes)
    assert not np.array_equal(by_list, plain)
    strided = np.array([[s, -1.0] for s in slopes])[:, 0]  # a view with stride 2
    for form in (tuple(slopes), np.array(slopes, np.float32), strided):
        np.testing.assert_array_equal(f(q, k, v, alibi_slopes=form), by_list)
    with pytest.raises(ValueError, match=r"'causal' must be None.*got 5"):
        f(q, k, v, causal=5)
    with pytest.raises(ValueError, match=r"either is_causal=True or causal=True"):
        f(q, k, v, is_causal=True, causal=True)
    with pytest.raises(ValueError, match=r"alibi_slopes.*1-D.*got shape \(1, 3\)"):
        f(q, k, v, alibi_slopes=[slopes])


def test_causal_top_left_equals_is_causal():
    q, k, v = _qkv_inputs(np.float64)
    f = qkv.nn.functional.scaled_dot_product_attention
    np.testing.assert_array_equal(f(q, k, v, is_causal=True), f(q, k, v, causal="top_left"))
    np.testing.assert_array_equal(
        f(q, k, v, causal="bottom_right"),
        f(q, k, v, attn_mask=qkv.masks.causal_mask(4, 5, alignment="bottom_right")))
