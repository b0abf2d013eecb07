"""qkv.nn.MultiheadAttention against torch.nn.MultiheadAttention (torch 2.13).

Each case of a seeded randomised grid builds a torch module, loads its
state_dict into qkv and compares outputs and weights, over every constructor
option (kdim/vdim, bias, add_bias_kv, add_zero_attn, batch_first, dtype) and
forward option (unbatched, key_padding_mask and 2-D/3-D attn_mask as bool or
float, need_weights, average_attn_weights, is_causal, train/eval).
Key 0 is never masked, so no row is fully masked (torch gives NaN there; see
test_fully_masked_rows_nan_in_torch_zero_in_qkv).
"""

import math
import random

import numpy as np
import pytest
import torch

import qkv
from helpers import assert_close, copy_torch_state

N_CASES = 240
TORCH_DTYPE = {np.float32: torch.float32, np.float64: torch.float64}


def make_case(index):
    r = random.Random(104729 * index + 3)
    c = {"index": index, "dtype": np.float32 if index % 2 == 0 else np.float64}
    c["H"] = r.choice([1, 2, 3, 4])
    c["D"] = c["H"] * r.choice([1, 2, 3, 4, 8])
    c["kdim"] = r.choice([3, 5, 7, c["D"]]) if r.random() < 0.25 else None
    c["vdim"] = r.choice([2, 6, c["D"]]) if r.random() < 0.25 else None
    c["bias"] = r.random() < 0.75
    c["add_bias_kv"] = r.random() < 0.25
    c["add_zero_attn"] = r.random() < 0.25
    c["batch_first"] = r.random() < 0.5
    c["unbatched"] = r.random() < 0.2
    c["B"] = 1 if c["unbatched"] else r.choice([1, 2, 3])
    c["L"] = r.choice([1, 2, 3, 5, 8, 11])
    c["S"] = r.choice([1, 2, 3, 5, 8, 11])
    c["self_attention"] = (c["kdim"] is None and c["vdim"] is None and r.random() < 0.3)
    if c["self_attention"]:
        c["S"] = c["L"]
    c["key_padding_mask"] = r.choice([None, None, "bool", "float"])
    c["is_causal"] = r.random() < 0.15
    if c["is_causal"]:
        c["attn_mask"] = r.choice(["bool2d", "float2d"])
    else:
        c["attn_mask"] = r.choice([None, None, "bool2d", "float2d", "bool3d", "float3d"])
    if c["attn_mask"] and c["key_padding_mask"]:
        # torch deprecates mixing a bool and a float mask: use one kind.
        c["key_padding_mask"] = c["attn_mask"][:-2]
    c["need_weights"] = r.random() < 0.7
    c["average_attn_weights"] = r.random() < 0.5
    c["mode"] = r.choice(["eval", "train_p0", "eval_with_dropout"])
    c["torch_state"] = r.random() < 0.5  # load torch tensors (else numpy copies)
    c["torch_inputs"] = r.random() < 0.3
    return c


def case_id(c):
    dt = "f32" if c["dtype"] == np.float32 else "f64"
    opts = [k for k in ("bias", "add_bias_kv", "add_zero_attn", "batch_first", "unbatched",
                        "self_attention", "is_causal", "need_weights", "average_attn_weights")
            if c[k]]
    kv = f"k{c['kdim']}v{c['vdim']}" if c["kdim"] or c["vdim"] else ""
    return (f"{c['index']:03d}-{dt}-D{c['D']}H{c['H']}{kv}-B{c['B']}L{c['L']}S{c['S']}-"
            f"kpm={c['key_padding_mask']}-am={c['attn_mask']}-{c['mode']}-" + ",".join(opts))


CASES = [make_case(i) for i in range(N_CASES)]


def make_masks(c, rng):
    """(key_padding_mask, attn_mask) as numpy arrays; key 0 always takes part."""
    B, H, L, S, dt = c["B"], c["H"], c["L"], c["S"], c["dtype"]
    kpm = attn = None
    if c["key_padding_mask"]:
        shape = (S,) if c["unbatched"] else (B, S)
        ignore = rng.random(shape) < 0.3
        ignore[..., 0] = False
        if c["key_padding_mask"] == "bool":
            kpm = ignore
        else:
            kpm = rng.standard_normal(shape).astype(dt)
            kpm[ignore] = -np.inf
    if c["attn_mask"]:
        if c["is_causal"]:
            ignore = ~np.tril(np.ones((L, S), dtype=bool))
        else:
            shape = (L, S) if c["attn_mask"].endswith("2d") else (
                (H, L, S) if c["unbatched"] else (B * H, L, S))
            ignore = rng.random(shape) < 0.3
            ignore[..., 0] = False
        if c["attn_mask"].startswith("bool"):
            attn = ignore
        else:
            attn = (0.5 * rng.standard_normal(ignore.shape)).astype(dt)
            attn[ignore] = -np.inf
    return kpm, attn


def make_inputs(c, rng):
    dt = c["dtype"]
    kdim, vdim = c["kdim"] or c["D"], c["vdim"] or c["D"]

    def seq(n, feat):
        if c["unbatched"]:
            shape = (n, feat)
        else:
            shape = (c["B"], n, feat) if c["batch_first"] else (n, c["B"], feat)
        return rng.standard_normal(shape).astype(dt)

    query = seq(c["L"], c["D"])
    if c["self_attention"]:
        return query, query, query
    return query, seq(c["S"], kdim), seq(c["S"], vdim)


def build_pair(c):
    """A torch module and a qkv module holding the same parameters."""
    torch.manual_seed(c["index"])
    dropout = 0.5 if c["mode"] == "eval_with_dropout" else 0.0
    kwargs = dict(dropout=dropout, bias=c["bias"], add_bias_kv=c["add_bias_kv"],
                  add_zero_attn=c["add_zero_attn"], kdim=c["kdim"], vdim=c["vdim"],
                  batch_first=c["batch_first"])
    theirs = torch.nn.MultiheadAttention(c["D"], c["H"], dtype=TORCH_DTYPE[c["dtype"]], **kwargs)
    ours = qkv.nn.MultiheadAttention(c["D"], c["H"], dtype=c["dtype"], **kwargs)
    copy_torch_state(theirs, ours, c["torch_state"], train=c["mode"] == "train_p0")
    return theirs, ours


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_mha_matches_torch(case):
    c = case
    rng = np.random.default_rng(c["index"])
    theirs, ours = build_pair(c)
    assert ours.training == theirs.training
    query, key, value = make_inputs(c, rng)
    kpm, attn = make_masks(c, rng)
    fwd = dict(need_weights=c["need_weights"], average_attn_weights=c["average_attn_weights"],
               is_causal=c["is_causal"])

    to_t = lambda x: None if x is None else torch.from_numpy(x)
    with torch.no_grad():
        ref_out, ref_w = theirs(to_t(query), to_t(key), to_t(value), key_padding_mask=to_t(kpm),
                                attn_mask=to_t(attn), **fwd)
    args = (query, key, value)
    if c["torch_inputs"]:
        args = tuple(map(to_t, args))
        kpm, attn = to_t(kpm), to_t(attn)
    out, w = ours(*args, key_padding_mask=kpm, attn_mask=attn, **fwd)

    assert isinstance(out, np.ndarray) and out.dtype == c["dtype"]
    assert_close(out, ref_out, c["dtype"], f"output of {case_id(c)}")
    if c["need_weights"]:
        assert_close(w, ref_w, c["dtype"], f"weights of {case_id(c)}")
    else:
        assert w is None and ref_w is None


def test_grid_covers_the_brief():
    seen = lambda pred: sum(1 for c in CASES if pred(c))
    for key in ("bias", "add_bias_kv", "add_zero_attn", "batch_first", "unbatched",
                "self_attention", "is_causal", "need_weights", "average_attn_weights",
                "torch_state", "torch_inputs"):
        assert 10 < seen(lambda c: c[key]) < N_CASES - 10, key
    assert seen(lambda c: c["kdim"] not in (None, c["D"])) > 10
    assert seen(lambda c: c["vdim"] not in (None, c["D"])) > 10
    for kind in ("bool", "float"):
        assert seen(lambda c: c["key_padding_mask"] == kind) > 10
        for nd in ("2d", "3d"):
            assert seen(lambda c: c["attn_mask"] == kind + nd) > 10
    assert seen(lambda c: c["attn_mask"] and c["key_padding_mask"]) > 10
    assert seen(lambda c: c["attn_mask"] and c["attn_mask"].endswith("3d") and c["unbatched"]) > 2
    for mode in ("eval", "train_p0", "eval_with_dropout"):
        assert seen(lambda c: c["mode"] == mode) > 40
    assert seen(lambda c: c["dtype"] == np.float64) == N_CASES // 2


# --- Fully masked rows ------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fully_masked_rows_nan_in_torch_zero_in_qkv(dtype):
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=TORCH_DTYPE[dtype]).eval()
    ours = qkv.nn.MultiheadAttention(8, 2, batch_first=True, dtype=dtype).eval()
    ours.load_state_dict(theirs.state_dict())
    x = np.random.default_rng(0).standard_normal((2, 4, 8)).astype(dtype)
    kpm = np.zeros((2, 4), dtype=bool)
    kpm[1] = True  # every key of batch 1 is padding
    with torch.no_grad():
        ref_out, ref_w = theirs(*(torch.from_numpy(x),) * 3, key_padding_mask=torch.from_numpy(kpm))
    out, w = ours(x, x, x, key_padding_mask=kpm)
    assert torch.isnan(ref_out[1]).all() and torch.isnan(ref_w[1]).all()
    assert np.all(w[1] == 0)
    # The attention gives 0, so batch 1's output is out_proj's bias (0 by default).
    bias = ours.state_dict()["out_proj.bias"]
    np.testing.assert_array_equal(out[1], np.broadcast_to(bias, (4, 8)))
    assert_close(out[0], ref_out[0], dtype, "unmasked batch")
    assert_close(w[0], ref_w[0], dtype, "unmasked batch weights")


# --- Initialisation and state_dict ------------------------------------------------

def _xavier_bound(shape):
    return math.sqrt(6.0 / (shape[0] + shape[1]))


@pytest.mark.parametrize("kdim", [None, 24])
def test_default_initialisation_has_torch_distributions(kdim):
    D, H = 64, 4
    ours = qkv.nn.MultiheadAttention(D, H, kdim=kdim, vdim=kdim, add_bias_kv=True)
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(D, H, kdim=kdim, vdim=kdim, add_bias_kv=True)
    ref = {name: t.detach().numpy() for name, t in theirs.state_dict().items()}
    state = ours.state_dict()
    assert list(state) == list(ref)  # torch's names, in torch's order
    for name, w in state.items():
        assert w.shape == ref[name].shape and w.dtype == np.float32, name
        if name in ("in_proj_bias", "out_proj.bias"):
            assert np.all(w == 0), name
            continue
        if name.endswith("proj_weight"):
            bound = _xavier_bound(w.shape)  # xavier_uniform_
        elif name == "out_proj.weight":
            bound = 1.0 / math.sqrt(D)  # nn.Linear's kaiming_uniform_(a=sqrt(5))
        else:  # bias_k, bias_v: xavier_normal_ on [1, 1, D], std sqrt(1/D)
            std = math.sqrt(1.0 / D)
            assert 0.6 * std < w.std() < 1.5 * std, name
            continue
        # Uniform on [-bound, bound]: fills the range, std bound/sqrt(3), like torch's.
        for values in (w, ref[name]):
            assert np.abs(values).max() <= bound
            assert np.abs(values).max() > 0.95 * bound
            assert abs(values.std() - bound / math.sqrt(3)) < 0.1 * bound / math.sqrt(3), name
            assert abs(values.mean()) < 0.1 * bound, name


def test_initialisation_follows_the_generator():
    a = qkv.nn.MultiheadAttention(8, 2, generator=qkv.Generator(5)).state_dict()
    b = qkv.nn.MultiheadAttention(8, 2, generator=qkv.Generator(5)).state_dict()
    c = qkv.nn.MultiheadAttention(8, 2, generator=qkv.Generator(6)).state_dict()
    np.testing.assert_array_equal(a["in_proj_weight"], b["in_proj_weight"])
    assert not np.array_equal(a["in_proj_weight"], c["in_proj_weight"])
    qkv.manual_seed(3)
    d = qkv.nn.MultiheadAttention(8, 2).state_dict()
    qkv.manual_seed(3)
    e = qkv.nn.MultiheadAttention(8, 2).state_dict()
    np.testing.assert_array_equal(d["out_proj.weight"], e["out_proj.weight"])


@pytest.mark.parametrize("options", [
    dict(), dict(bias=False), dict(kdim=5, vdim=3, add_bias_kv=True, add_zero_attn=True),
    dict(batch_first=True, add_zero_attn=True),
])
def test_torch_loads_qkv_state_dict(options):
    ours = qkv.nn.MultiheadAttention(12, 3, dtype=torch.float64, **options).eval()
    theirs = torch.nn.MultiheadAttention(12, 3, dtype=torch.float64, **options).eval()
    theirs.load_state_dict({name: torch.from_numpy(w) for name, w in ours.state_dict().items()})
    rng = np.random.default_rng(1)
    shape = lambda n, f: (2, n, f) if options.get("batch_first") else (n, 2, f)
    q = rng.standard_normal(shape(4, 12))
    k = rng.standard_normal(shape(6, options.get("kdim", 12)))
    v = rng.standard_normal(shape(6, options.get("vdim", 12)))
    out, w = ours(q, k, v)
    with torch.no_grad():
        ref_out, ref_w = theirs(*map(torch.from_numpy, (q, k, v)))
    assert_close(out, ref_out, np.float64, "output")
    assert_close(w, ref_w, np.float64, "weights")


def test_state_dict_is_a_copy_and_load_is_strict():
    m = qkv.nn.MultiheadAttention(8, 2)
    state = m.state_dict()
    state["in_proj_weight"][:] = 0
    assert np.any(m.state_dict()["in_proj_weight"] != 0)
    before = m.state_dict()

    missing = dict(state)
    del missing["out_proj.bias"]
    with pytest.raises(ValueError, match="out_proj.bias"):
        m.load_state_dict(missing)
    with pytest.raises(ValueError, match="bias_k"):
        m.load_state_dict({**state, "bias_k": np.zeros((1, 1, 8), np.float32)})
    with pytest.raises(ValueError, match="in_proj_weight.*\\[24, 8\\]"):
        m.load_state_dict({**state, "in_proj_weight": np.zeros((8, 8), np.float32)})
    with pytest.raises(TypeError, match="in_proj_bias.*int64"):
        m.load_state_dict({**state, "in_proj_bias": np.zeros(24, np.int64)})
    for name, w in m.state_dict().items():  # a failed load changes nothing
        np.testing.assert_array_equal(w, before[name])

    result = m.load_state_dict({"in_proj_bias": np.ones(24, np.float32), "extra": 1}, strict=False)
    assert result.unexpected_keys == ["extra"]
    assert set(result.missing_keys) == {"in_proj_weight", "out_proj.weight", "out_proj.bias"}
    assert np.all(m.state_dict()["in_proj_bias"] == 1)
    np.testing.assert_array_equal(m.state_dict()["in_proj_weight"], before["in_proj_weight"])
    assert m.load_state_dict(before) == ([], [])


# --- Modes, attributes, arguments --------------------------------------------------

def test_attributes_and_modes():
    m = qkv.nn.MultiheadAttention(12, 3, kdim=5, batch_first=True)
    assert (m.embed_dim, m.num_heads, m.head_dim, m.batch_first, m.kdim, m.vdim) == (
        12, 3, 4, True, 5, 12)
    assert m.training is True  # torch's default
    assert m.eval() is m and m.training is False
    assert m.train() is m and m.training is True
    m.training = False
    assert m.training is False
    with pytest.raises(ValueError):
        m.train("yes")
    assert "embed_dim=12" in repr(m) and "kdim=5" in repr(m)


@pytest.mark.parametrize("dtype,expected", [
    (None, np.float32), (torch.float32, np.float32), (torch.float64, np.float64),
    (np.float64, np.float64), (np.dtype("float32"), np.float32), ("float64", np.float64),
])
def test_dtype_and_device_arguments(dtype, expected):
    for device in (None, "cpu", torch.device("cpu")):
        m = qkv.nn.MultiheadAttention(4, 2, device=device, dtype=dtype)
        assert m.state_dict()["in_proj_weight"].dtype == expected


def test_bad_constructor_arguments():
    with pytest.raises(TypeError, match="dtype.*float16"):
        qkv.nn.MultiheadAttention(4, 2, dtype=torch.float16)
    with pytest.raises(TypeError, match="dtype.*int32"):
        qkv.nn.MultiheadAttention(4, 2, dtype=np.int32)
    with pytest.raises(ValueError, match="device"):
        qkv.nn.MultiheadAttention(4, 2, device="cuda")
    with pytest.raises(ValueError, match="divisible"):
        qkv.nn.MultiheadAttention(10, 3)
    with pytest.raises(ValueError, match="kdim"):
        qkv.nn.MultiheadAttention(4, 2, kdim=-1)
    with pytest.raises(TypeError, match="'generator'"):
        qkv.nn.MultiheadAttention(4, 2, generator=torch.Generator())


def test_forward_errors_like_torch():
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(8, 2).eval()
    ours = qkv.nn.MultiheadAttention(8, 2).eval()
    ours.load_state_dict(theirs.state_dict())
    x = np.zeros((3, 2, 8), np.float32)
    bad = [
        (dict(query=np.zeros((3, 2, 7), np.float32)), ValueError, "query"),
        (dict(key=np.zeros((4, 2, 8), np.float32)), ValueError, "value"),
        (dict(key_padding_mask=np.zeros((2, 4), bool)), ValueError, "key_padding_mask"),
        (dict(attn_mask=np.zeros((3, 4), bool)), ValueError, "attn_mask"),
        (dict(attn_mask=np.zeros((5, 3, 3), bool)), ValueError, "attn_mask"),
        (dict(query=x.astype(np.float64)), TypeError, "query"),
        (dict(attn_mask=np.zeros((3, 3), np.int64)), TypeError, "'attn_mask'.*int64"),
        (dict(is_causal=True), ValueError, "is_causal"),
    ]
    for change, error, pattern in bad:
        args = {"query": x, "key": x, "value": x, **change}
        torch_args = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
                      for k, v in args.items()}
        with pytest.raises(Exception):
            with torch.no_grad():
                theirs(**torch_args)
        with pytest.raises(error, match=pattern):
            ours(**args)


def test_dropout_only_in_training_mode():
    m = qkv.nn.MultiheadAttention(8, 2, dropout=0.5, generator=qkv.Generator(0))
    x = np.random.default_rng(0).standard_normal((5, 2, 8)).astype(np.float32)
    m.eval()
    a, wa = m(x, x, x)
    np.testing.assert_array_equal(a, m(x, x, x)[0])
    m.train()
    m.set_generator(qkv.Generator(1))
    b, wb = m(x, x, x, average_attn_weights=False)
    m.set_generator(qkv.Generator(1))
    np.testing.assert_array_equal(b, m(x, x, x, average_attn_weights=False)[0])
    assert not np.allclose(a, b)
    # Weights come after dropout: kept ones scaled by 1/(1-p), the rest 0.
    m.eval()
    _, plain = m(x, x, x, average_attn_weights=False)
    kept = wb != 0
    assert 0.3 < kept.mean() < 0.7
    np.testing.assert_allclose(wb[kept], plain[kept] * 2, rtol=1e-5)
