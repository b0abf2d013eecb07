"""qkv.nn's Transformer blocks against torch.nn's (torch 2.13), same state_dict.

A seeded randomised grid covers TransformerEncoderLayer, TransformerDecoderLayer,
Transformer and the two stacks over both norm orders, both activations, bias,
batch_first / not / unbatched, float32 and float64, eval mode (dropout 0.1, which
eval turns off) and training mode with dropout 0, and masks: 2-D and 3-D
attention masks (bool and float), key padding masks (bool and float), causal
masks with and without the is_causal hints. Key 0 is never masked, so no row is
fully masked. Targeted cases follow, then Linear, LayerNorm, RMSNorm and
Embedding. torch's MHA fast path is pinned off in conftest.py.

Metric: max|qkv − torch| / max|torch| ≤ 1e-5 (float32), ≤ 1e-12 (float64).
"""

import random
import warnings

import numpy as np
import pytest
import torch

import qkv
from helpers import TOLERANCE, assert_close, copy_torch_state, rel_err

TORCH_DTYPE = {np.float32: torch.float32, np.float64: torch.float64}
KINDS = ("encoder_layer", "decoder_layer", "transformer", "encoder", "decoder")
N_CASES = 500

# The worst relative error seen per (module kind, dtype), reported at the end.
WORST = {}


def record(kind, dtype, err):
    key = (kind, np.dtype(dtype).name)
    WORST[key] = max(WORST.get(key, 0.0), err)


@pytest.fixture(scope="module", autouse=True)
def report_worst():
    yield
    lines = [f"  {kind:16s} {dt}: {err:.3g}" for (kind, dt), err in sorted(WORST.items())]
    if lines:
        print("\nworst max|qkv - torch| / max|torch|:\n" + "\n".join(lines))


# --- The grid ------------------------------------------------------------------------


def make_case(index):
    r = random.Random(7919 * index + 11)
    c = {"index": index, "kind": KINDS[index % len(KINDS)]}
    c["dtype"] = np.float32 if (index // len(KINDS)) % 2 == 0 else np.float64
    c["nhead"] = r.choice([1, 2, 4])
    c["d_model"] = c["nhead"] * r.choice([2, 4, 8])
    c["dim_feedforward"] = r.choice([4, 16, 24])
    c["activation"] = r.choice(["relu", "gelu"])
    c["norm_first"] = r.random() < 0.5
    c["bias"] = r.random() < 0.8
    c["layer_norm_eps"] = r.choice([1e-5, 1e-5, 1e-3])
    c["batch_first"] = r.random() < 0.5
    c["unbatched"] = r.random() < 0.15
    c["B"] = 1 if c["unbatched"] else r.choice([1, 2, 3])
    c["L"] = r.choice([1, 2, 3, 5, 8])  # the source / encoder input
    c["T"] = r.choice([1, 2, 4, 7])  # the target / decoder input
    c["num_layers"] = r.choice([1, 2])
    c["mode"] = r.choice(["eval", "train_p0"])
    c["torch_state"] = r.random() < 0.5  # load torch tensors (else numpy copies)
    c["torch_inputs"] = r.random() < 0.3
    kinds = ["none", "none", "bool2d", "float2d", "bool3d", "float3d", "causal"]
    c["self_mask"] = r.choice(kinds)
    c["memory_mask"] = r.choice(["none", "none", "bool2d", "float2d", "bool3d", "float3d"])
    c["causal_hint"] = c["self_mask"] == "causal" and r.random() < 0.6
    c["self_padding"] = r.choice(["none", "none", "bool", "float"])
    c["memory_padding"] = r.choice(["none", "none", "bool", "float"])
    # torch deprecates a bool and a float mask on one attention: keep them alike.
    if c["self_mask"] not in ("none", "causal") and c["self_padding"] != "none":
        c["self_padding"] = c["self_mask"][:-2]
    if c["self_mask"] == "causal" and c["self_padding"] == "bool":
        c["self_padding"] = "float"
    if c["memory_mask"] != "none" and c["memory_padding"] != "none":
        c["memory_padding"] = c["memory_mask"][:-2]
    return c


def case_id(c):
    dt = "f32" if c["dtype"] == np.float32 else "f64"
    flags = [k for k in ("norm_first", "batch_first", "unbatched", "causal_hint") if c[k]]
    if not c["bias"]:
        flags.append("nobias")
    return (f"{c['index']:03d}-{c['kind']}-{dt}-{c['activation']}-D{c['d_model']}H{c['nhead']}-"
            f"B{c['B']}L{c['L']}T{c['T']}-{c['mode']}-sm={c['self_mask']}-"
            f"mm={c['memory_mask']}-sp={c['self_padding']}-mp={c['memory_padding']}-"
            + ",".join(flags))


CASES = [make_case(i) for i in range(N_CASES)]


def attn_mask(kind, n_query, n_key, c, rng):
    """An attention mask of torch's polarity (bool True = not allowed); key 0 open."""
    if kind == "none":
        return None
    if kind == "causal":
        return torch.nn.Transformer.generate_square_subsequent_mask(
            n_query, dtype=TORCH_DTYPE[c["dtype"]]).numpy()
    shape = (n_query, n_key) if kind.endswith("2d") else (c["B"] * c["nhead"], n_query, n_key)
    if kind.startswith("bool"):
        mask = rng.random(shape) < 0.35
        mask[..., 0] = False
        return mask
    mask = rng.standard_normal(shape).astype(c["dtype"])
    mask[rng.random(shape) < 0.2] = -np.inf
    mask[..., 0] = np.where(np.isinf(mask[..., 0]), 0.0, mask[..., 0])
    return mask


def padding_mask(kind, n_key, c, rng):
    """A key padding mask: bool True = padding, or float added; key 0 open."""
    if kind == "none":
        return None
    shape = (n_key,) if c["unbatched"] else (c["B"], n_key)
    if kind == "bool":
        mask = rng.random(shape) < 0.3
        mask[..., 0] = False
        return mask
    mask = rng.standard_normal(shape).astype(c["dtype"])
    mask[rng.random(shape) < 0.2] = -np.inf
    mask[..., 0] = 0.0
    return mask


def sequence(n, c, rng):
    d = c["d_model"]
    if c["unbatched"]:
        shape = (n, d)
    else:
        shape = (c["B"], n, d) if c["batch_first"] else (n, c["B"], d)
    return rng.standard_normal(shape).astype(c["dtype"])


def layer_kwargs(c):
    return dict(d_model=c["d_model"], nhead=c["nhead"], dim_feedforward=c["dim_feedforward"],
                dropout=0.1 if c["mode"] == "eval" else 0.0, activation=c["activation"],
                layer_norm_eps=c["layer_norm_eps"], batch_first=c["batch_first"],
                norm_first=c["norm_first"], bias=c["bias"])


# The classes of each kind of case but "transformer": (stack, layer).
KIND_CLASSES = {
    "encoder_layer": (None, "TransformerEncoderLayer"),
    "decoder_layer": (None, "TransformerDecoderLayer"),
    "encoder": ("TransformerEncoder", "TransformerEncoderLayer"),
    "decoder": ("TransformerDecoder", "TransformerDecoderLayer"),
}


def make_module(nn, c, dtype):
    """The module of the case's kind from `nn` (torch.nn or qkv.nn), in `dtype`."""
    kw = layer_kwargs(c)
    n = c["num_layers"]
    if c["kind"] not in KIND_CLASSES:
        return nn.Transformer(num_encoder_layers=n, num_decoder_layers=3 - n, **kw, dtype=dtype)
    stack, layer = KIND_CLASSES[c["kind"]]
    if stack is None:
        return getattr(nn, layer)(**kw, dtype=dtype)
    norm = c["index"] % 3 != 0
    return getattr(nn, stack)(getattr(nn, layer)(**kw, dtype=dtype), n,
                              nn.LayerNorm(c["d_model"], dtype=dtype) if norm else None)


def build(c):
    """(torch module, qkv module) of the case's kind; qkv holds torch's weights."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's notes about nested tensors
        ref = make_module(torch.nn, c, TORCH_DTYPE[c["dtype"]])
        ours = make_module(qkv.nn, c, c["dtype"])
    # Make the norms' affine parameters non-trivial, so that they are tested too.
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    copy_torch_state(ref, ours, c["torch_state"], train=c["mode"] != "eval")
    return ref, ours


def run_both(ref, ours, args, kwargs, c):
    def to_torch(x):
        return None if x is None or isinstance(x, bool) else torch.from_numpy(np.asarray(x))

    t_args = [to_torch(a) for a in args]
    t_kwargs = {k: (v if isinstance(v, bool) or v is None else to_torch(v))
                for k, v in kwargs.items()}
    with torch.no_grad():
        expected = ref(*t_args, **t_kwargs)
    if c["torch_inputs"]:
        got = ours(*t_args, **t_kwargs)
    else:
        got = ours(*args, **kwargs)
    return got, expected


@pytest.mark.parametrize("c", CASES, ids=case_id)
def test_grid(c):
    rng = np.random.default_rng(c["index"])
    torch.manual_seed(c["index"])
    ref, ours = build(c)
    kind = c["kind"]
    L, T = c["L"], c["T"]
    if kind in ("encoder_layer", "encoder"):
        src = sequence(L, c, rng)
        mask = attn_mask(c["self_mask"], L, L, c, rng)
        kwargs = {"src_key_padding_mask": padding_mask(c["self_padding"], L, c, rng)}
        if kind == "encoder_layer":
            kwargs["src_mask"] = mask
            kwargs["is_causal"] = c["causal_hint"]
        else:
            kwargs["mask"] = mask
            if c["causal_hint"]:
                kwargs["is_causal"] = True
        got, expected = run_both(ref, ours, [src], kwargs, c)
    elif kind in ("decoder_layer", "decoder"):
        tgt, memory = sequence(T, c, rng), sequence(L, c, rng)
        kwargs = {
            "tgt_mask": attn_mask(c["self_mask"], T, T, c, rng),
            "memory_mask": attn_mask(c["memory_mask"], T, L, c, rng),
            "tgt_key_padding_mask": padding_mask(c["self_padding"], T, c, rng),
            "memory_key_padding_mask": padding_mask(c["memory_padding"], L, c, rng),
        }
        if c["causal_hint"]:
            kwargs["tgt_is_causal"] = True
        got, expected = run_both(ref, ours, [tgt, memory], kwargs, c)
    else:
        src, tgt = sequence(L, c, rng), sequence(T, c, rng)
        # The source self-attention gets the memory mask's kind (an [L, L] mask).
        src_kind = c["memory_mask"]
        kwargs = {
            "src_mask": attn_mask(src_kind, L, L, c, rng),
            "tgt_mask": attn_mask(c["self_mask"], T, T, c, rng),
            "memory_mask": attn_mask(c["memory_mask"], T, L, c, rng),
            "src_key_padding_mask": padding_mask(c["memory_padding"], L, c, rng),
            "tgt_key_padding_mask": padding_mask(c["self_padding"], T, c, rng),
            "memory_key_padding_mask": padding_mask(c["memory_padding"], L, c, rng),
        }
        if c["causal_hint"]:
            kwargs["tgt_is_causal"] = True
        got, expected = run_both(ref, ours, [src, tgt], kwargs, c)
    assert isinstance(got, np.ndarray) and got.dtype == c["dtype"]
    err = rel_err(got, expected)
    record(kind, c["dtype"], err)
    assert err <= TOLERANCE[c["dtype"]], f"{case_id(c)}: relative error {err:.3g}"


# --- Targeted cases --------------------------------------------------------------------


def _torch_pair(torch_cls, qkv_cls, *args, **kwargs):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = torch_cls(*args, **kwargs)
    ours = qkv_cls(*args, **{k: (str(v).replace("torch.", "") if k == "dtype" else v)
                             for k, v in kwargs.items()})
    ours.load_state_dict(ref.state_dict())
    return ref, ours


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_causal_padding_full_options(dtype, norm_first, activation):
    """nn.Transformer with every mask at once: causal target (detected and hinted),
    padding on source and target, a float memory mask; eval mode and train with p=0."""
    tdt = TORCH_DTYPE[dtype]
    for mode in ("eval", "train"):
        p = 0.1 if mode == "eval" else 0.0
        ref, ours = _torch_pair(torch.nn.Transformer, qkv.nn.Transformer, d_model=32, nhead=4,
                                num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=48,
                                dropout=p, activation=activation, batch_first=True,
                                norm_first=norm_first, dtype=tdt)
        ref.train(mode == "train")
        ours.train(mode == "train")
        rng = np.random.default_rng(5)
        B, S, T = 3, 9, 6
        src = torch.from_numpy(rng.standard_normal((B, S, 32)).astype(dtype))
        tgt = torch.from_numpy(rng.standard_normal((B, T, 32)).astype(dtype))
        tgt_mask = torch.nn.Transformer.generate_square_subsequent_mask(T, dtype=tdt)
        src_pad = torch.zeros(B, S, dtype=torch.bool)
        src_pad[1, 6:] = True
        src_pad[2, 3:] = True
        tgt_pad = torch.zeros(B, T, dtype=torch.bool)
        tgt_pad[0, 4:] = True
        memory_mask = torch.from_numpy(rng.standard_normal((T, S)).astype(dtype))
        for hint in (None, True):
            # torch warns about mixing a bool padding and a float mask; both agree anyway.
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                expected = ref(src, tgt, tgt_mask=tgt_mask, memory_mask=memory_mask,
                               src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                               memory_key_padding_mask=src_pad, tgt_is_causal=hint)
            got = ours(src, tgt, tgt_mask=tgt_mask, memory_mask=memory_mask,
                       src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                       memory_key_padding_mask=src_pad, tgt_is_causal=hint)
            err = rel_err(got, expected)
            record("transformer", dtype, err)
            assert err <= TOLERANCE[dtype], f"{mode} hint={hint}: {err:.3g}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_memory_is_causal_and_src_is_causal(dtype):
    tdt = TORCH_DTYPE[dtype]
    ref, ours = _torch_pair(torch.nn.Transformer, qkv.nn.Transformer, d_model=16, nhead=2,
                            num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=32,
                            dtype=tdt)
    ref.eval()
    ours.eval()
    n = 5
    src = torch.randn(n, 2, 16, dtype=tdt)
    tgt = torch.randn(n, 2, 16, dtype=tdt)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(n, dtype=tdt)
    causal_bool = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    for mask in (causal, causal_bool):
        with torch.no_grad():
            expected = ref(src, tgt, src_mask=mask, tgt_mask=mask, memory_mask=mask,
                           src_is_causal=True, tgt_is_causal=True, memory_is_causal=True)
        got = ours(src, tgt, src_mask=mask, tgt_mask=mask, memory_mask=mask, src_is_causal=True,
                   tgt_is_causal=True, memory_is_causal=True)
        assert_close(got, expected, dtype, f"causal hints, mask dtype {mask.dtype}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_decoder_layer_unbatched_and_torch_views(dtype):
    """Unbatched inputs, and torch inputs that are non-contiguous views."""
    tdt = TORCH_DTYPE[dtype]
    ref, ours = _torch_pair(torch.nn.TransformerDecoderLayer, qkv.nn.TransformerDecoderLayer,
                            24, 3, 40, dropout=0.0, activation="gelu", norm_first=True,
                            dtype=tdt)
    tgt = torch.randn(6, 24, dtype=tdt)
    memory = torch.randn(24, 4, dtype=tdt).t()  # [4, 24], transposed view
    with torch.no_grad():
        expected = ref(tgt, memory)
    assert_close(ours(tgt, memory), expected, dtype, "unbatched")
    batched = torch.randn(2, 6, 24, dtype=tdt).transpose(0, 1)  # [6, 2, 24] view
    mem = torch.randn(4, 2, 24, dtype=tdt)
    with torch.no_grad():
        expected = ref(batched, mem)
    assert_close(ours(batched, mem), expected, dtype, "transposed view")


def test_activation_callables_and_modules():
    F = torch.nn.functional
    for activation, name in ((F.relu, "relu"), (F.gelu, "gelu"), (torch.nn.ReLU(), "relu"),
                             (torch.nn.GELU(), "gelu")):
        ref, ours = _torch_pair(torch.nn.TransformerEncoderLayer, qkv.nn.TransformerEncoderLayer,
                                8, 2, 16, dropout=0.0, activation=activation)
        assert ours.activation == name
        x = torch.randn(3, 2, 8)
        with torch.no_grad():
            assert_close(ours(x), ref(x), np.float32, f"activation {name}")
    with pytest.raises(ValueError, match="relu/gelu"):
        qkv.nn.TransformerEncoderLayer(8, 2, activation="tanh")
    with pytest.raises(TypeError, match="callables"):
        qkv.nn.TransformerEncoderLayer(8, 2, activation=torch.tanh)
    with pytest.raises(TypeError, match="callables"):
        qkv.nn.TransformerEncoderLayer(8, 2, activation=torch.nn.GELU(approximate="tanh"))


def test_qkv_state_dict_loads_into_torch():
    """qkv's own initialisation has torch's names, shapes and order, and torch
    computes the same function from it."""
    ours = qkv.nn.Transformer(16, 2, 2, 1, 32, dropout=0.0, generator=qkv.Generator(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = torch.nn.Transformer(16, 2, 2, 1, 32, dropout=0.0)
    state = ours.state_dict()
    assert list(state) == list(ref.state_dict())
    ref.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    src, tgt = torch.randn(4, 2, 16), torch.randn(3, 2, 16)
    with torch.no_grad():
        assert_close(ours(src, tgt), ref(src, tgt), np.float32, "qkv weights in torch")
    # xavier_uniform_ as torch: every matrix within its bound, layers not identical.
    for name, p in state.items():
        if p.ndim > 1:
            bound = np.sqrt(6.0 / (p.shape[0] + p.shape[1]))
            assert np.abs(p).max() <= bound, name
    assert not np.array_equal(state["encoder.layers.0.linear1.weight"],
                              state["encoder.layers.1.linear1.weight"])


def test_state_dict_order_every_module():
    cases = [
        (torch.nn.TransformerEncoderLayer(8, 2, 16), qkv.nn.TransformerEncoderLayer(8, 2, 16)),
        (torch.nn.TransformerDecoderLayer(8, 2, 16, bias=False),
         qkv.nn.TransformerDecoderLayer(8, 2, 16, bias=False)),
        (torch.nn.Linear(3, 4), qkv.nn.Linear(3, 4)),
        (torch.nn.LayerNorm([2, 3]), qkv.nn.LayerNorm([2, 3])),
        (torch.nn.RMSNorm(5), qkv.nn.RMSNorm(5)),
        (torch.nn.Embedding(7, 3), qkv.nn.Embedding(7, 3)),
    ]
    for ref, ours in cases:
        theirs = ref.state_dict()
        mine = ours.state_dict()
        assert list(mine) == list(theirs), type(ours).__name__
        for name in theirs:
            assert mine[name].shape == tuple(theirs[name].shape), name


def test_stack_copies_layer_and_exposes_views():
    layer = qkv.nn.TransformerEncoderLayer(8, 2, 16, generator=qkv.Generator(1))
    norm = qkv.nn.LayerNorm(8)
    encoder = qkv.nn.TransformerEncoder(layer, 3, norm)
    assert encoder.num_layers == 3 and len(encoder.layers) == 3
    first = layer.state_dict()
    for i in range(3):  # deep copies: the same weights
        for name, value in encoder.layers[i].state_dict().items():
            np.testing.assert_array_equal(value, first[name])
    # A view shares the stack's parameters: loading into it changes the stack.
    new = {k: v + 1.0 for k, v in first.items()}
    encoder.layers[1].load_state_dict(new)
    np.testing.assert_array_equal(encoder.state_dict()["layers.1.linear1.bias"],
                                  new["linear1.bias"])
    np.testing.assert_array_equal(layer.state_dict()["linear1.bias"], first["linear1.bias"])
    assert isinstance(encoder.norm, qkv.nn.LayerNorm)
    assert isinstance(encoder.layers[0].self_attn, qkv.nn.MultiheadAttention)
    # The stack follows train()/eval(), down to its layers' attention.
    encoder.eval()
    assert not encoder.training and not encoder.layers[2].training
    assert not encoder.layers[2].self_attn.training
    encoder.train()
    assert encoder.layers[0].training
    # A view of the model outlives the Python object it came from.
    model = qkv.nn.Transformer(8, 2, 1, 1, 16)
    decoder = model.decoder
    del model
    assert decoder.num_layers == 1 and decoder.norm is not None
    with pytest.raises(IndexError):
        encoder._impl.layer(3)


def test_self_attn_weights_view():
    """layer.self_attn gives the attention weights torch's would (for heatmaps)."""
    ref, ours = _torch_pair(torch.nn.TransformerEncoderLayer, qkv.nn.TransformerEncoderLayer,
                            8, 2, 16, dropout=0.0, batch_first=True)
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        _, expected = ref.self_attn(x, x, x)
    _, got = ours.self_attn(x, x, x)
    assert_close(got, expected, np.float32, "self_attn weights")


def test_dropout_training_vs_eval_and_generator():
    layer = qkv.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.5, generator=qkv.Generator(0))
    x = np.random.default_rng(0).standard_normal((4, 2, 8)).astype(np.float32)
    assert layer.training
    layer.set_generator(qkv.Generator(42))
    a = layer(x)
    layer.set_generator(qkv.Generator(42))
    b = layer(x)
    np.testing.assert_array_equal(a, b)  # same stream, same dropout
    c = layer(x)
    assert not np.array_equal(a, c)
    e1 = layer.eval()(x)
    e2 = layer(x)
    np.testing.assert_array_equal(e1, e2)
    assert not np.array_equal(a, e1)


def test_load_state_dict_strict_and_errors():
    layer = qkv.nn.TransformerEncoderLayer(8, 2, 16)
    before = layer.state_dict()
    bad = dict(before)
    del bad["norm2.bias"]
    bad["extra"] = np.zeros(1, np.float32)
    with pytest.raises(ValueError, match="norm2.bias"):
        layer.load_state_dict(bad)
    for name, value in layer.state_dict().items():  # a failed load changes nothing
        np.testing.assert_array_equal(value, before[name])
    wrong_shape = dict(before, **{"linear1.weight": np.zeros((3, 3), np.float32)})
    with pytest.raises(ValueError, match="linear1.weight"):
        layer.load_state_dict(wrong_shape)
    changed = {"linear1.bias": before["linear1.bias"] + 2.0, "extra": np.zeros(1, np.float32)}
    result = layer.load_state_dict(changed, strict=False)
    assert result.unexpected_keys == ["extra"]
    assert "linear1.bias" not in result.missing_keys and "norm1.weight" in result.missing_keys
    np.testing.assert_array_equal(layer.state_dict()["linear1.bias"], changed["linear1.bias"])
    # state_dict() returns copies.
    state = layer.state_dict()
    state["linear1.bias"][:] = 0
    assert np.array_equal(layer.state_dict()["linear1.bias"], changed["linear1.bias"])


def test_input_errors():
    layer = qkv.nn.TransformerEncoderLayer(8, 2, 16).eval()
    with pytest.raises(ValueError, match="d_model"):
        layer(np.zeros((3, 2, 6), np.float32))
    with pytest.raises(TypeError, match="dtype"):
        layer(np.zeros((3, 2, 8), np.float64))
    with pytest.raises(TypeError):
        layer(np.zeros((3, 2, 8), np.int32))
    with pytest.raises(ValueError):
        layer(np.zeros((3, 2, 8), np.float32), src_mask=np.zeros((3, 4), bool))
    with pytest.raises(ValueError, match="divisible"):
        qkv.nn.TransformerEncoderLayer(10, 3)
    with pytest.raises(ValueError, match="CPU"):
        qkv.nn.TransformerEncoderLayer(8, 2, device="cuda")
    model = qkv.nn.Transformer(8, 2, 1, 1, 16).eval()
    with pytest.raises(ValueError, match="batch"):
        model(np.zeros((3, 2, 8), np.float32), np.zeros((3, 4, 8), np.float32))
    with pytest.raises(NotImplementedError):
        qkv.nn.Transformer(8, 2, custom_encoder=object())
    with pytest.raises(TypeError, match="TransformerEncoderLayer"):
        qkv.nn.TransformerEncoder(qkv.nn.TransformerDecoderLayer(8, 2), 2)
    with pytest.raises(ValueError, match="relu"):
        qkv.nn.Transformer(8, 2, activation="swish")


def test_generate_square_subsequent_mask():
    for sz in (0, 1, 5):
        expected = torch.nn.Transformer.generate_square_subsequent_mask(sz).numpy()
        got = qkv.nn.Transformer.generate_square_subsequent_mask(sz)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, expected)
    got = qkv.nn.Transformer.generate_square_subsequent_mask(3, dtype="float64")
    assert got.dtype == np.float64


# --- Linear, LayerNorm, RMSNorm, Embedding ---------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linear_and_norms(dtype):
    tdt = TORCH_DTYPE[dtype]
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.standard_normal((3, 4, 6)).astype(dtype))
    cases = [
        ("Linear", (torch.nn.Linear, qkv.nn.Linear), (6, 5), {}),
        ("Linear", (torch.nn.Linear, qkv.nn.Linear), (6, 2), {"bias": False}),
        ("LayerNorm", (torch.nn.LayerNorm, qkv.nn.LayerNorm), (6,), {"eps": 1e-3}),
        ("LayerNorm", (torch.nn.LayerNorm, qkv.nn.LayerNorm), ([4, 6],), {"bias": False}),
        ("LayerNorm", (torch.nn.LayerNorm, qkv.nn.LayerNorm), (6,),
         {"elementwise_affine": False}),
        ("RMSNorm", (torch.nn.RMSNorm, qkv.nn.RMSNorm), (6,), {}),
        ("RMSNorm", (torch.nn.RMSNorm, qkv.nn.RMSNorm), ((4, 6),), {"eps": 1e-2}),
    ]
    for name, (torch_cls, qkv_cls), args, kwargs in cases:
        ref, ours = _torch_pair(torch_cls, qkv_cls, *args, **kwargs, dtype=tdt)
        with torch.no_grad():  # non-trivial affine parameters
            for p in ref.parameters():
                p.add_(torch.randn_like(p))
        ours.load_state_dict(ref.state_dict())
        with torch.no_grad():
            expected = ref(x)
        err = rel_err(ours(x), expected)
        record(name, dtype, err)
        assert err <= TOLERANCE[dtype], f"{name}{args} {kwargs}: {err:.3g}"
        assert ours(x.numpy()).dtype == dtype


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_embedding(dtype):
    tdt = TORCH_DTYPE[dtype]
    ref, ours = _torch_pair(torch.nn.Embedding, qkv.nn.Embedding, 11, 4, padding_idx=-1,
                            dtype=tdt)
    assert ours.padding_idx == 10
    ids = torch.tensor([[0, 3, 10], [7, 7, 1]])
    with torch.no_grad():
        expected = ref(ids)
    np.testing.assert_array_equal(ours(ids), expected.numpy())
    np.testing.assert_array_equal(ours(ids.numpy().astype(np.int32)), expected.numpy())
    np.testing.assert_array_equal(ours([2, 5]), ref.weight.detach().numpy()[[2, 5]])
    assert ours(np.zeros((0, 2), np.int64)).shape == (0, 2, 4)
    with pytest.raises(IndexError, match="11"):
        ours([1, 11])
    with pytest.raises(TypeError, match="integers"):
        ours(np.zeros(3, np.float32))
    fresh = qkv.nn.Embedding(5, 3, padding_idx=2)
    np.testing.assert_array_equal(fresh.weight[2], np.zeros(3, np.float32))
    pretrained = qkv.nn.Embedding.from_pretrained(ref.weight.detach())
    np.testing.assert_array_equal(pretrained(ids), expected.numpy())
    assert pretrained.dtype == np.dtype(dtype).name


def test_generator_set_on_a_view_lives_as_long_as_the_module():
    """The compiled modules keep a plain pointer to their generator: one set on a
    view (a stack's layer, a layer's attention) or on a layer that is then copied
    into a stack must live as long as the module that uses it."""
    import gc
    import weakref

    x = np.ones((3, 2, 8), np.float32)
    encoder = qkv.nn.TransformerEncoder(qkv.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.5), 2)
    gen = qkv.Generator(1)
    alive = weakref.ref(gen)
    encoder.layers[0].set_generator(gen)
    encoder.layers[1].self_attn.set_generator(qkv.Generator(2))
    del gen
    gc.collect()
    assert alive() is not None
    encoder(x)  # draws from both generators
    encoder.set_generator(None)  # replaces them all: they may go
    gc.collect()
    assert alive() is None

    layer = qkv.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.5)
    gen = qkv.Generator(3)
    alive = weakref.ref(gen)
    layer.set_generator(gen)
    decoder = qkv.nn.TransformerDecoder(layer, 2)  # the copies use layer's generator
    del layer, gen
    gc.collect()
    assert alive() is not None
    decoder(x, x)
    del decoder
    gc.collect()
    assert alive() is None

    # Same seed through a view, same dropout.
    model = qkv.nn.Transformer(8, 2, 1, 1, 16, dropout=0.5)
    outs = []
    for _ in range(2):
        model.set_generator(qkv.Generator(9))
        outs.append(model(x, x))
    np.testing.assert_array_equal(outs[0], outs[1])
