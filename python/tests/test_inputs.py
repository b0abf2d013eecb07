"""How qkv takes arrays in and gives them out.

Inputs: numpy arrays and CPU torch tensors (float32, float64; bool for
masks), read in place whenever their strides allow it, including transposed
and sliced views. Outputs: numpy arrays that own their memory.
"""

import gc

import numpy as np
import pytest
import torch

import qkv
from helpers import assert_close

sdpa = qkv.nn.functional.scaled_dot_product_attention
info = qkv._core._tensor_info


def qkv_inputs(dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((2, 3, 5, 8)).astype(dtype),
            rng.standard_normal((2, 3, 7, 8)).astype(dtype),
            rng.standard_normal((2, 3, 7, 4)).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numpy_and_torch_inputs_agree(dtype):
    q, k, v = qkv_inputs(dtype)
    mask = np.random.default_rng(1).random((5, 7)) < 0.8
    from_numpy = sdpa(q, k, v, attn_mask=mask)
    assert isinstance(from_numpy, np.ndarray) and from_numpy.dtype == dtype
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    from_torch = sdpa(tq, tk, tv, attn_mask=torch.from_numpy(mask))
    mixed = sdpa(tq, k, torch.from_numpy(v), attn_mask=mask)
    # Inputs that require grad go through autograd (test_torch_op.py), same values.
    grad = sdpa(*(t.clone().requires_grad_() for t in (tq, tk, tv)), attn_mask=mask)
    assert grad.requires_grad
    for out in (from_torch, mixed, grad.detach()):  # torch in, torch out
        assert isinstance(out, torch.Tensor) and out.numpy().dtype == dtype
        np.testing.assert_array_equal(out.numpy(), from_numpy)


def test_outputs_are_numpy_arrays_that_own_their_memory():
    q, k, v = qkv_inputs()
    out, w = qkv.nn.functional.scaled_dot_product_attention_with_weights(q, k, v)
    for a in (out, w):
        assert type(a) is np.ndarray
        assert a.flags.c_contiguous and a.flags.writeable
        assert not np.shares_memory(a, q) and not np.shares_memory(a, v)
    expected = out.copy()
    del q, k, v, w
    gc.collect()
    np.testing.assert_array_equal(out, expected)  # still valid once inputs are gone
    out += 1  # and writable
    mha = qkv.nn.MultiheadAttention(8, 2)
    o, weights = mha(np.zeros((3, 8), np.float32), np.zeros((4, 8), np.float32),
                     np.zeros((4, 8), np.float32))
    assert type(o) is np.ndarray and o.shape == (3, 8) and weights.shape == (3, 4)


def test_zero_copy_numpy_views():
    base = np.random.default_rng(0).standard_normal((2, 3, 8, 5)).astype(np.float32)
    view = base.transpose(0, 1, 3, 2)  # [2, 3, 5, 8], not contiguous
    assert not view.flags.c_contiguous
    t = info(view)
    assert t["data"] == view.__array_interface__["data"][0]
    assert t["shape"] == view.shape
    assert t["strides"] == tuple(s // 4 for s in view.strides)
    sliced = base[:, 1:, ::2, 1:4]
    t = info(sliced)
    assert t["data"] == sliced.__array_interface__["data"][0]
    assert t["strides"] == tuple(s // 4 for s in sliced.strides)
    broadcast = np.broadcast_to(base[:1], (4, 3, 8, 5))  # stride 0
    assert info(broadcast)["strides"][0] == 0
    assert info(broadcast)["data"] == base.__array_interface__["data"][0]


def test_zero_copy_torch_tensors():
    t = torch.randn(2, 3, 8, 5, dtype=torch.float64).transpose(-1, -2)
    got = info(t)
    assert got["data"] == t.data_ptr()
    assert got["strides"] == t.stride() and got["dtype"] == "float64"
    m = torch.rand(4, 6) > 0.5
    assert info(m)["data"] == m.data_ptr() and info(m)["dtype"] == "bool"
    p = torch.nn.Parameter(torch.randn(3, 3))
    assert info(p)["data"] == p.data_ptr()


def test_layouts_that_need_a_copy_still_work():
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    assert info(a[::-1])["strides"] == (4, 1)  # negative strides: copied
    assert info(a[::-1])["data"] != a.__array_interface__["data"][0]
    swapped = a.astype(">f8")  # non-native byte order: copied
    assert info(swapped)["dtype"] == "float64"
    assert qkv.matmul(swapped, a.T).tolist() == (a @ a.T).tolist()
    # Plain Python sequences go through numpy.asarray.
    out, w = qkv.simple_attention([1.0, 0.0], [[1.0, 0.0], [0.0, 1.0]], [[1.0], [2.0]])
    assert out.dtype == np.float64 and out.shape == (1,) and w.shape == (2,)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_non_contiguous_views_give_the_same_result(dtype):
    rng = np.random.default_rng(2)
    q, k, v = qkv_inputs(dtype)
    # Same values, strided layouts: transposed, sliced, reversed, broadcast.
    qt = np.ascontiguousarray(q.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    kbig = rng.standard_normal((2, 3, 14, 16)).astype(dtype)
    kbig[:, :, ::2, ::2] = k
    ks = kbig[:, :, ::2, ::2]
    vr = np.ascontiguousarray(v[:, :, ::-1])[:, :, ::-1]
    mask = rng.random((1, 3, 1, 7)) < 0.8
    mask_b = np.broadcast_to(mask, (2, 3, 5, 7))
    for strided in (qt, ks, vr):
        assert not strided.flags.c_contiguous
    expected = sdpa(q, k, v, attn_mask=mask)
    np.testing.assert_array_equal(sdpa(qt, ks, vr, attn_mask=mask_b), expected)
    # torch views too.
    got = sdpa(*(torch.from_numpy(x) for x in (q, k, v)), attn_mask=torch.from_numpy(mask)
               .expand(2, 3, 5, 7))
    np.testing.assert_array_equal(got, expected)
    tq = torch.from_numpy(q.transpose(0, 1, 3, 2).copy()).transpose(-1, -2)
    np.testing.assert_array_equal(sdpa(tq, k, v, attn_mask=mask), expected)
    # MultiheadAttention with a transposed (batch_first <-> seq-first) input.
    mha = qkv.nn.MultiheadAttention(8, 2, dtype=dtype, batch_first=True).eval()
    x = rng.standard_normal((6, 3, 8)).astype(dtype)  # [L, B, D]
    y = x.transpose(1, 0, 2)  # [B, L, D] view
    out_view, w_view = mha(y, y, y)
    out_copy, w_copy = mha(*(np.ascontiguousarray(y),) * 3)
    np.testing.assert_array_equal(out_view, out_copy)
    np.testing.assert_array_equal(w_view, w_copy)


def test_dtype_errors_name_the_argument_and_dtype():
    q, k, v = qkv_inputs()
    cases = [
        (dict(query=q.astype(np.float16)), "'query'.*float16"),
        (dict(key=k.astype(np.int32)), "'key'.*int32"),
        (dict(value=torch.from_numpy(v).to(torch.int64)), "'value'.*torch.int64"),
        (dict(query=torch.from_numpy(q).bfloat16()), "same dtype, got bfloat16, float32"),
        (dict(attn_mask=np.zeros((5, 7), np.uint8)), "'attn_mask'.*uint8"),
        (dict(query=q.astype(np.complex64)), "'query'.*complex64"),
        (dict(query=q > 0), "'query'.*bool"),
        (dict(query="not an array"), "'query'"),
        (dict(query=None), "'query'.*None"),
    ]
    for change, pattern in cases:
        args = {"query": q, "key": k, "value": v, **change}
        with pytest.raises(TypeError, match=pattern):
            sdpa(**args)
    mha = qkv.nn.MultiheadAttention(8, 2)
    x = np.zeros((3, 8), np.float32)
    with pytest.raises(TypeError, match="'key_padding_mask'.*int64"):
        mha(x, x, x, key_padding_mask=np.zeros(3, np.int64))
    with pytest.raises(TypeError, match="state_dict\\['in_proj_weight'\\].*float16"):
        mha.load_state_dict({**mha.state_dict(),
                             "in_proj_weight": np.zeros((24, 8), np.float16)})


def test_non_cpu_tensors_are_rejected():
    q = torch.empty(2, 5, 8, device="meta")
    k = torch.randn(2, 7, 8)
    with pytest.raises(ValueError, match="'query'.*CPU.*meta"):
        sdpa(q, k, k)


def test_torch_tensors_in_masks_helpers_and_linear():
    x = torch.randn(4, 6, dtype=torch.float64)
    w = torch.randn(3, 6, dtype=torch.float64)
    b = torch.randn(3, dtype=torch.float64)
    assert_close(qkv.nn.functional.linear(x, w, b),
                 torch.nn.functional.linear(x, w, b), np.float64, "linear")
    assert_close(qkv.nn.functional.linear(x.numpy(), w.numpy()),
                 torch.nn.functional.linear(x, w), np.float64, "linear without bias")
    keep = qkv.masks.keep_mask_from_lengths([2, 4], 5)
    np.testing.assert_array_equal(keep, np.arange(5)[None] < np.array([[2], [4]]))
    np.testing.assert_array_equal(qkv.masks.padding_mask_from_lengths([2, 4], 5), ~keep)
    np.testing.assert_array_equal(qkv.masks.logical_not(torch.from_numpy(keep)), ~keep)
    heads = qkv.masks.key_mask_for_heads(keep)
    assert heads.shape == (2, 1, 1, 5) and not np.shares_memory(heads, keep)
    np.testing.assert_array_equal(qkv.masks.causal_mask(3, 5), np.tril(np.ones((3, 5), bool)))
    np.testing.assert_array_equal(qkv.masks.causal_mask(3, 5, alignment="bottom_right"),
                                  np.tril(np.ones((3, 5), bool), 2))
    additive = qkv.masks.keep_mask_to_additive(keep, torch.float64)
    assert additive.dtype == np.float64
    np.testing.assert_array_equal(additive, np.where(keep, 0.0, -np.inf))
    assert qkv.masks.keep_mask_to_additive(keep).dtype == np.float32


def test_score_functions_and_attention():
    rng = np.random.default_rng(4)
    q = rng.standard_normal((2, 3, 4))
    k = rng.standard_normal((2, 5, 4))
    v = rng.standard_normal((2, 5, 6))
    dot = qkv.ScoreFunction.dot()
    assert dot.kind == "dot" and qkv.ScoreFunction.scaled_dot().kind == "scaled_dot"
    np.testing.assert_allclose(dot.scores(q, k), q @ k.transpose(0, 2, 1), rtol=1e-12)
    out, w = qkv.attention(q, k, v, qkv.ScoreFunction.scaled_dot())
    ref = torch.nn.functional.scaled_dot_product_attention(*map(torch.from_numpy, (q, k, v)))
    assert_close(out, ref, np.float64, "attention with scaled_dot scores")
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-12)
    W = rng.standard_normal((4, 4))
    W_copy = W.copy()
    bilinear = qkv.ScoreFunction.bilinear(W)
    W[:] = 0  # parameters are copied in
    np.testing.assert_allclose(bilinear.scores(q, k), q @ W_copy @ k.transpose(0, 2, 1),
                               rtol=1e-10)
    wq, wk, a = rng.standard_normal((7, 4)), rng.standard_normal((7, 4)), rng.standard_normal(7)
    additive = qkv.ScoreFunction.additive(torch.from_numpy(wq), wk, a)
    ref = np.tanh((q @ wq.T)[:, :, None, :] + (k @ wk.T)[:, None, :, :]) @ a
    np.testing.assert_allclose(additive.scores(q, k), ref, rtol=1e-10, atol=1e-12)
    keep = rng.random((3, 5)) < 0.7
    keep[:, 0] = True
    _, w = qkv.attention(q, k, v, additive, mask=keep)
    assert np.all(w[:, ~keep] == 0)
