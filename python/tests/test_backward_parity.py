"""The backward of qkv's scaled_dot_product_attention against torch autograd.

scaled_dot_product_attention_with_grad returns (output, grad_fn); grad_fn(dO)
must give torch's q.grad, k.grad, v.grad and attn_mask.grad (float masks) for
the same loss. A seeded grid (N_CASES cases, each reproducible from its index)
spans leading batch dims, GQA, L != S, Ev != E, bool and float masks of
broadcast shapes (with fully masked rows), causal top-left and bottom-right,
explicit scales, float32 (the fused kernel) and float64 (the reference).
Variants torch lacks (sliding window, ALiBi, soft-capping) are checked against
the same formula written in torch ops, and dropout against torch's math path
fed the keep mask that qkv exports.

Metric: max|qkv - torch| / max|torch| (helpers.rel_err), ≤ 1e-5 in float32
and ≤ 1e-12 in float64.
"""

import math
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import qkv
from helpers import as_numpy, assert_close, sdpa_case_id

sdpa_grad = qkv.nn.functional.scaled_dot_product_attention_with_grad

N_CASES = 240
HEAD_DIMS = [1, 3, 8, 16, 17, 32, 64, 80, 128]
LENGTHS = [1, 2, 3, 5, 8, 13, 17, 32, 33, 47, 100, 129]
MASK_KINDS = ["none", "bool", "float", "float", "causal", "bottom_right"]
MAX_WORK = 400_000


def make_case(index):
    """The description of case `index`: shapes, dtype, mask and options."""
    r = random.Random(104729 * index + 3)
    c = {"index": index, "dtype": np.float32 if index % 3 else np.float64}
    c["batch"] = [r.choice([1, 2, 3]) for _ in range(r.choice([0, 1, 1, 2]))]
    Hkv = r.choice([1, 2, 3])
    c["gqa"] = r.random() < 0.3
    c["Hkv"] = Hkv
    c["H"] = Hkv * r.choice([2, 3]) if c["gqa"] else Hkv
    c["E"] = r.choice(HEAD_DIMS)
    c["Ev"] = c["E"] if r.random() < 0.4 else r.choice(HEAD_DIMS)
    while True:
        c["L"], c["S"] = r.choice(LENGTHS), r.choice(LENGTHS)
        work = math.prod(c["batch"]) * c["H"] * c["L"] * c["S"] * (c["E"] + c["Ev"])
        if work <= MAX_WORK:
            break
    c["mask"] = r.choice(MASK_KINDS)
    if c["mask"] in ("bool", "float"):
        full = c["batch"] + [c["H"], c["L"], c["S"]]
        shape = [n if r.random() < 0.5 else 1 for n in full]
        if c["mask"] == "float":
            # Broadcast over keys, a mask's gradient is 0 up to rounding (a
            # softmax ignores shifts): test_mask_shared_by_all_keys_has_zero_gradient.
            shape[-1] = c["S"]
        c["mask_shape"] = shape[r.randrange(len(shape) - 1):]
        c["fully_masked_rows"] = r.random() < 0.3
    c["scale"] = None if r.random() < 0.6 else round(r.uniform(0.05, 1.5), 3)
    c["torch_inputs"] = r.random() < 0.3
    return c


def case_id(c):
    return sdpa_case_id(c, f"H{c['H']}" + (f"/{c['Hkv']}" if c["gqa"] else ""))


CASES = [make_case(i) for i in range(N_CASES)]


def make_inputs(c):
    rng = np.random.default_rng(1000 + c["index"])
    dt = c["dtype"]
    q = rng.standard_normal(c["batch"] + [c["H"], c["L"], c["E"]]).astype(dt)
    k = rng.standard_normal(c["batch"] + [c["Hkv"], c["S"], c["E"]]).astype(dt)
    v = rng.standard_normal(c["batch"] + [c["Hkv"], c["S"], c["Ev"]]).astype(dt)
    grad_out = rng.standard_normal(c["batch"] + [c["H"], c["L"], c["Ev"]]).astype(dt)
    mask = None
    if c["mask"] == "bool":
        mask = rng.random(c["mask_shape"]) < 0.7
        if c["fully_masked_rows"]:
            mask[rng.random(c["mask_shape"][:-1]) < 0.3] = False
    elif c["mask"] == "float":
        mask = (2 * rng.standard_normal(c["mask_shape"])).astype(dt)
        mask[rng.random(c["mask_shape"]) < 0.15] = -np.inf
        if c["fully_masked_rows"]:
            mask[rng.random(c["mask_shape"][:-1]) < 0.3] = -np.inf
    return q, k, v, mask, grad_out


def torch_leaves(q, k, v, mask):
    """q, k, v and the float mask (None when there is none) as torch tensors
    that require grad, and the list of them to differentiate by."""
    tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
    inputs = [tq, tk, tv]
    tmask = None
    if mask is not None:
        tmask = torch.from_numpy(mask).requires_grad_()
        inputs.append(tmask)
    return tq, tk, tv, tmask, inputs


def assert_grads_close(ours, theirs, dtype, what):
    """The gradients by query, key, value (and attn_mask) against torch's."""
    for name, a, b in zip(("query", "key", "value", "attn_mask"), ours, theirs):
        assert_close(a, b, dtype, f"{what} {name}")


def torch_grads(c, q, k, v, mask, grad_out):
    """(dq, dk, dv, dmask or None) from torch autograd through torch's public SDPA,
    and whether some query row sees two or more keys."""
    tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
    inputs = [tq, tk, tv]
    tmask = None
    if mask is not None:
        tmask = torch.from_numpy(mask)
        if mask.dtype != np.bool_:
            tmask.requires_grad_()
            inputs.append(tmask)
    if c["mask"] == "bottom_right":
        tmask = torch.ones(c["L"], c["S"], dtype=torch.bool).tril(c["S"] - c["L"])
    is_causal = c["mask"] == "causal"
    out = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tmask, is_causal=is_causal,
                                         scale=c["scale"], enable_gqa=c["gqa"])
    grads = torch.autograd.grad(out, inputs, torch.from_numpy(grad_out))
    with torch.no_grad():
        if tmask is not None and tmask.dtype == torch.bool:
            tmask = torch.zeros(tmask.shape, dtype=tq.dtype).masked_fill(~tmask, -math.inf)
        _, weights = torch._scaled_dot_product_attention_math(
            tq, tk, tv, attn_mask=tmask, is_causal=is_causal, scale=c["scale"],
            enable_gqa=c["gqa"])
    mixes = bool(((weights > 0).sum(-1) >= 2).any())
    return [g.numpy() for g in grads] + [None] * (4 - len(grads)), mixes


def assert_zero_up_to_rounding(grads, what, factor, dtype, grad_out, v, name):
    """When every query sees at most one key, its softmax is constant and the
    gradients of q, k and the mask are 0 up to the rounding of
    dS = P∘(dP − D): about eps·|dO|·|v|·Ev per score, times `factor` (what the
    product or sum with dS adds)."""
    eps = np.finfo(dtype).eps
    bound = 64 * eps * np.abs(grad_out).max() * np.abs(v).max() * v.shape[-1] * factor
    for g in grads:
        assert np.abs(g).max() <= bound, f"{what} in {name}: {np.abs(g).max():.3g} > {bound:.3g}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_gradients_match_torch_autograd(case):
    c = case
    q, k, v, mask, grad_out = make_inputs(c)
    theirs, mixes = torch_grads(c, q, k, v, mask, grad_out)

    args = (q, k, v)
    if c["torch_inputs"]:
        args = tuple(map(torch.from_numpy, args))
    kwargs = dict(attn_mask=mask, scale=c["scale"], enable_gqa=c["gqa"])
    if c["mask"] == "causal":
        kwargs["is_causal"] = True
    elif c["mask"] == "bottom_right":
        kwargs["causal"] = "bottom_right"
    out, grad_fn = sdpa_grad(*args, **kwargs)
    assert grad_fn.kernel == ("fused-" + qkv.runtime.kernel_isa()
                              if c["dtype"] == np.float32 else "reference")
    ours = grad_fn(grad_out)

    name = case_id(c)
    # Torch inputs give torch gradients (torch in, torch out).
    assert all(isinstance(g, torch.Tensor) == c["torch_inputs"] for g in ours[:3])
    ours = {what: None if g is None else as_numpy(g) for what, g in ours._asdict().items()}
    theirs = dict(zip(("query", "key", "value", "attn_mask"), theirs))
    for what in ("query", "key", "value"):
        assert ours[what].dtype == c["dtype"], (what, ours[what].dtype)
    assert_close(ours["value"], theirs["value"], c["dtype"], f"grad of value in {name}")
    checked = ["query", "key"]
    if c["mask"] == "float":
        assert ours["attn_mask"].shape == mask.shape
        checked.append("attn_mask")
    else:
        assert ours["attn_mask"] is None
    if mixes:
        for what in checked:
            assert_close(ours[what], theirs[what], c["dtype"], f"grad of {what} in {name}")
    else:  # the relative metric would compare two rounding residues
        scale = c["scale"] or 1 / math.sqrt(c["E"])
        # How many dS terms, of what weight, add into one gradient element.
        factor = {"query": scale * np.abs(k).max() * c["S"],
                  "key": scale * np.abs(q).max() * c["L"],
                  "attn_mask": math.prod(grad_out.shape[:-1]) * c["S"] / (mask.size or 1)
                  if mask is not None else 0}
        for what in checked:
            assert_zero_up_to_rounding((ours[what], theirs[what]), f"grad of {what}",
                                       factor[what], c["dtype"], grad_out, v, name)


def test_grid_covers_the_brief():
    seen = lambda pred: sum(1 for c in CASES if pred(c))
    assert seen(lambda c: c["dtype"] == np.float32) > 100
    assert seen(lambda c: c["dtype"] == np.float64) > 50
    assert seen(lambda c: c["gqa"]) > 30
    assert seen(lambda c: c["E"] != c["Ev"]) > 80
    assert seen(lambda c: c["mask"] == "causal" and c["L"] != c["S"]) > 10
    assert seen(lambda c: c["mask"] == "bottom_right" and c["L"] > c["S"]) > 5
    assert seen(lambda c: c["mask"] == "float" and c["dtype"] == np.float32) > 30
    assert seen(lambda c: c["mask"] == "float" and c.get("fully_masked_rows")) > 10
    assert seen(lambda c: c["mask"] == "float" and len(c["mask_shape"]) < len(c["batch"]) + 3) > 20
    assert seen(lambda c: c["L"] > 96 or c["S"] > 96) > 20  # several kernel tiles
    assert seen(lambda c: c["scale"] is not None) > 50
    # Cases where the relative metric applies to dq and dk: all but a few.
    mixing = sum(1 for c in CASES if torch_grads(c, *make_inputs(c))[1])
    assert mixing >= 0.85 * len(CASES), mixing


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mask_shared_by_all_keys_has_zero_gradient(dtype):
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 3, 40, 16)).astype(dtype)
    k = rng.standard_normal((2, 3, 50, 16)).astype(dtype)
    v = rng.standard_normal((2, 3, 50, 16)).astype(dtype)
    mask = rng.standard_normal((3, 40, 1)).astype(dtype)
    out, grad_fn = sdpa_grad(q, k, v, attn_mask=mask)
    grad_mask = grad_fn(np.ones_like(out)).attn_mask
    assert grad_mask.shape == mask.shape
    tol = 1e-4 if dtype == np.float32 else 1e-12
    assert np.abs(grad_mask).max() < tol


# --- Both kernels, forced -------------------------------------------------------

@pytest.mark.parametrize("backend", ["fused", "reference"])
def test_forced_backend_runs_and_agrees(backend):
    c = make_case(4)
    c.update(dtype=np.float32, mask="float", mask_shape=[c["L"], c["S"]], fully_masked_rows=True)
    q, k, v, mask, grad_out = make_inputs(c)
    theirs, _ = torch_grads(c, q, k, v, mask, grad_out)
    out, grad_fn = sdpa_grad(q, k, v, attn_mask=mask, scale=c["scale"], enable_gqa=c["gqa"],
                             backend=backend)
    assert grad_fn.kernel.startswith(backend)
    assert qkv.runtime.last_sdpa_kernel() == grad_fn.kernel
    for a, b in zip(grad_fn(grad_out), theirs):
        assert_close(a, b, np.float32, f"{backend} backward")


def test_fused_backend_rejects_float64():
    q = np.zeros((1, 2, 3, 4))
    with pytest.raises(TypeError, match="float64"):
        sdpa_grad(q, q, q, backend="fused")


# --- Variants torch lacks: the formula in torch ops -----------------------------

def torch_variant(q, k, v, scale, window_left=-1, window_right=-1, alibi=None, softcap=0.0,
                  causal="none", mask=None):
    """softmax(cap·tanh(s·qkᵀ/cap) + alibi + mask, restricted to the window) @ v."""
    L, S = q.shape[-2], k.shape[-2]
    scores = scale * q @ k.transpose(-1, -2)
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    i = torch.arange(L).unsqueeze(1) + (S - L if causal == "bottom_right" else 0)
    j = torch.arange(S).unsqueeze(0)
    if alibi is not None:
        slopes = torch.tensor(alibi, dtype=q.dtype).reshape(-1, 1, 1)
        scores = scores - slopes * (i - j).abs().to(q.dtype)
    allowed = torch.ones(L, S, dtype=torch.bool)
    if causal != "none":
        allowed &= j <= i
    if window_left >= 0:
        allowed &= j >= i - window_left
    if window_right >= 0:
        allowed &= j <= i + window_right
    if mask is not None:
        scores = scores + mask
    scores = scores.masked_fill(~allowed, -math.inf)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # fully masked rows: 0
    return weights @ v


VARIANTS = {
    "window": dict(window_left=5, window_right=3),
    "window-causal-br": dict(window_left=7, causal="bottom_right"),
    "alibi": dict(alibi=[0.5, 0.25, 0.125, 0.0625]),
    "alibi-causal": dict(alibi=[0.3, 0.2, 0.1, 0.05], causal="top_left"),
    "softcap": dict(softcap=2.0),
    "all": dict(window_left=9, window_right=0, alibi=[0.1, 0.2, 0.3, 0.4], softcap=5.0),
    "softcap-float-mask": dict(softcap=3.0, mask=True),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("variant", VARIANTS, ids=str)
def test_variant_gradients_match_the_formula(variant, dtype):
    opts = dict(VARIANTS[variant])
    rng = np.random.default_rng(len(variant))
    L, S, E, Ev = 37, 101, 24, 40
    q = (2 * rng.standard_normal((2, 4, L, E))).astype(dtype)
    k = (2 * rng.standard_normal((2, 4, S, E))).astype(dtype)
    v = rng.standard_normal((2, 4, S, Ev)).astype(dtype)
    grad_out = rng.standard_normal((2, 4, L, Ev)).astype(dtype)
    mask = rng.standard_normal((4, L, S)).astype(dtype) if opts.pop("mask", False) else None
    scale = 0.3

    tq, tk, tv, tmask, inputs = torch_leaves(q, k, v, mask)
    out_t = torch_variant(tq, tk, tv, scale, mask=tmask, **opts)
    theirs = torch.autograd.grad(out_t, inputs, torch.from_numpy(grad_out))

    kwargs = dict(scale=scale, attn_mask=mask, window_left=opts.get("window_left"),
                  window_right=opts.get("window_right"), alibi_slopes=opts.get("alibi"),
                  softcap=opts.get("softcap"))
    if opts.get("causal", "none") != "none":
        kwargs["causal"] = opts["causal"]
    out, grad_fn = sdpa_grad(q, k, v, **kwargs)
    assert_close(out, out_t, dtype, f"{variant} output")
    assert_grads_close(grad_fn(grad_out), theirs, dtype, f"{variant}: grad of")


# --- Dropout: the backward drops what the forward dropped -----------------------

DROPOUT_CASES = [
    # name, q shape, S, Ev, dtype, p, float mask, Hkv
    ("plain-f32", (2, 3, 40, 16), 50, 16, np.float32, 0.3, False, None),
    ("plain-f64", (2, 3, 40, 16), 50, 24, np.float64, 0.5, False, None),
    ("mask-f32", (2, 4, 33, 32), 130, 8, np.float32, 0.2, True, None),
    ("gqa-f32", (1, 6, 17, 16), 200, 16, np.float32, 0.1, False, 2),
    ("gqa-mask-f64", (2, 6, 9, 8), 21, 5, np.float64, 0.7, True, 3),
]


@pytest.mark.filterwarnings("ignore:Dropout mask should only be used for testing")
@pytest.mark.parametrize("given_mask", [False, True], ids=["seeded", "given-mask"])
@pytest.mark.parametrize("case", DROPOUT_CASES, ids=lambda c: c[0])
def test_dropout_backward_matches_torch_math_with_the_exported_mask(case, given_mask):
    name, shape_q, S, Ev, dtype, p, with_mask, Hkv = case
    rng = np.random.default_rng(len(name) + 10 * given_mask)
    B, H, L, E = shape_q
    Hk = Hkv or H
    q = rng.standard_normal(shape_q).astype(dtype)
    k = rng.standard_normal((B, Hk, S, E)).astype(dtype)
    v = rng.standard_normal((B, Hk, S, Ev)).astype(dtype)
    grad_out = rng.standard_normal((B, H, L, Ev)).astype(dtype)
    mask = rng.standard_normal((L, S)).astype(dtype) if with_mask else None

    kwargs = dict(attn_mask=mask, dropout_p=p, enable_gqa=Hkv is not None)
    if given_mask:
        keep = rng.random((B, H, L, S)) >= p
        out, grad_fn = sdpa_grad(q, k, v, dropout_mask=keep, **kwargs)
    else:
        out, grad_fn = sdpa_grad(q, k, v, return_dropout_mask=True,
                                 generator=qkv.Generator(len(name)), **kwargs)
        keep = grad_fn.dropout_mask
        assert keep is not None and keep.shape == (B, H, L, S)
        assert 0 < keep.mean() < 1

    tq, tk, tv, tmask, inputs = torch_leaves(q, k, v, mask)
    out_t, _ = torch._scaled_dot_product_attention_math(
        tq, tk, tv, attn_mask=tmask, dropout_p=p, dropout_mask=torch.from_numpy(keep),
        enable_gqa=Hkv is not None)
    theirs = torch.autograd.grad(out_t, inputs, torch.from_numpy(grad_out))

    assert_close(out, out_t, dtype, f"{name}: dropout output")
    assert_grads_close(grad_fn(grad_out), theirs, dtype, f"{name}: dropout grad of")


# --- The handle -----------------------------------------------------------------

def _small(dtype=np.float32):
    rng = np.random.default_rng(11)
    return (rng.standard_normal((2, 3, 5, 8)).astype(dtype),
            rng.standard_normal((2, 3, 7, 8)).astype(dtype),
            rng.standard_normal((2, 3, 7, 4)).astype(dtype))


def test_grad_fn_is_repeatable_and_linear_in_grad_output():
    q, k, v = _small()
    out, grad_fn = sdpa_grad(q, k, v, dropout_p=0.4)
    go = np.random.default_rng(0).standard_normal(out.shape).astype(np.float32)
    first, second = grad_fn(go), grad_fn(go)
    for a, b in zip(first[:3], second[:3]):
        np.testing.assert_array_equal(a, b)  # the same dropout mask both times
    doubled = grad_fn(2 * go)
    for a, b in zip(doubled[:3], first[:3]):
        np.testing.assert_allclose(a, 2 * b, rtol=1e-5, atol=1e-6)


def test_output_and_logsumexp_are_read_only_and_right():
    q, k, v = _small(np.float64)
    out, grad_fn = sdpa_grad(q, k, v)
    np.testing.assert_array_equal(out, qkv.nn.functional.scaled_dot_product_attention(q, k, v))
    with pytest.raises(ValueError, match="read-only"):
        out[0] = 0
    lse = grad_fn.logsumexp
    assert lse.shape == (2, 3, 5) and lse.dtype == np.float64
    scores = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(8)
    np.testing.assert_allclose(lse, np.log(np.exp(scores).sum(-1)), rtol=1e-12)
    with pytest.raises(ValueError, match="read-only"):
        lse[0] = 0
    assert grad_fn.dropout_mask is None
    assert "reference" in repr(grad_fn)


def test_torch_inputs_that_require_grad_are_accepted():
    q, k, v = (torch.from_numpy(x).requires_grad_() for x in _small())
    out, grad_fn = sdpa_grad(q, k, v, is_causal=True)
    grads = grad_fn(torch.ones(out.shape))
    ref = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True),
                              (q, k, v), torch.ones(out.shape))
    for a, b in zip(grads, ref):
        assert_close(a, b, np.float32, "torch inputs")


def test_bad_grad_output_names_the_argument():
    q, k, v = _small()
    out, grad_fn = sdpa_grad(q, k, v)
    with pytest.raises(ValueError, match="grad_output"):
        grad_fn(np.zeros((2, 3, 5, 5), np.float32))
    with pytest.raises(TypeError, match="grad_output"):
        grad_fn(np.zeros(out.shape, np.float64))
    with pytest.raises(TypeError, match="grad_output"):
        grad_fn(np.zeros(out.shape, np.int32))
    with pytest.raises(ValueError, match="grad_output"):
        grad_fn(np.full(out.shape, np.nan, np.float32))


def test_bad_variant_arguments_name_the_argument():
    q, k, v = _small()
    with pytest.raises(ValueError, match="backend"):
        sdpa_grad(q, k, v, backend="flash")
    with pytest.raises(ValueError, match="alibi_slopes"):
        sdpa_grad(q, k, v, alibi_slopes=[1.0, 2.0])
    with pytest.raises(ValueError, match="alibi_slopes"):
        sdpa_grad(q, k, v, alibi_slopes=[[1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match="softcap"):
        sdpa_grad(q, k, v, softcap=-1.0)
    with pytest.raises(ValueError, match="window"):
        sdpa_grad(q, k, v, window_left=-2)


# --- qkv.runtime ----------------------------------------------------------------

def test_runtime_reports_threads_isas_and_peak():
    isas = qkv.runtime.supported_isas()
    assert isas and isas[-1] == "portable"
    assert qkv.runtime.kernel_isa() in isas
    before = qkv.runtime.num_threads()
    try:
        qkv.runtime.set_num_threads(1)
        assert qkv.runtime.num_threads() == 1
    finally:
        qkv.runtime.set_num_threads(before)
    assert qkv.runtime.num_threads() == before
    with pytest.raises(ValueError, match="threads"):
        qkv.runtime.set_num_threads(0)
    assert qkv.runtime.measure_fp32_peak_gflops(0.02) > 0.5


def test_buffer_cache_keeps_freed_results_within_its_limit():
    limit = qkv.runtime.buffer_cache_limit()
    try:
        qkv.runtime.empty_buffer_cache()
        assert qkv.runtime.buffer_cache_bytes() == 0
        x = np.ones((1024, 256), np.float32)
        y = qkv.nn.functional.linear(x, np.eye(256, dtype=np.float32))  # 1 MiB: cached
        np.testing.assert_array_equal(y, x)
        assert qkv.runtime.buffer_cache_bytes() == 0
        del y
        assert qkv.runtime.buffer_cache_bytes() == x.nbytes
        qkv.runtime.set_buffer_cache_limit(0)
        assert qkv.runtime.buffer_cache_bytes() == 0
        assert qkv.runtime.buffer_cache_limit() == 0
        with pytest.raises(ValueError, match="bytes"):
            qkv.runtime.set_buffer_cache_limit(-1)
    finally:
        qkv.runtime.set_buffer_cache_limit(limit)
    assert qkv.runtime.buffer_cache_limit() == limit


def test_last_sdpa_kernel_follows_the_calls():
    q, k, v = _small()
    qkv.nn.functional.scaled_dot_product_attention(q, k, v)
    assert qkv.runtime.last_sdpa_kernel() == "fused-" + qkv.runtime.kernel_isa()
    qkv.nn.functional.scaled_dot_product_attention_with_weights(q, k, v, backend="reference")
    assert qkv.runtime.last_sdpa_kernel() == "reference"
    qkv.nn.functional.scaled_dot_product_attention(*(x.astype(np.float64) for x in (q, k, v)))
    assert qkv.runtime.last_sdpa_kernel() == "reference"
