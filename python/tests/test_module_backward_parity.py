"""Backward passes of qkv.nn's modules against torch 2.13 autograd, same state_dict.

qkv: out, grad_fn = module.forward_with_grad(...); grad_fn(R) gives the inputs'
gradients and adds every parameter's gradient into module.named_grads().
torch: the same forward with requires_grad inputs, out.backward(R).

Covered: MultiheadAttention (bool/float, 2-D/3-D attn_mask, key_padding_mask,
batch_first / [L, B, D] / unbatched, kdim/vdim, bias on/off, add_bias_kv,
add_zero_attn, is_causal, need_weights on and off, self- and cross-attention),
TransformerEncoderLayer and TransformerDecoderLayer (both norm orders,
relu/gelu, masks) and a TransformerEncoder stack with a final norm; float32,
training mode, dropout 0 (torch's MHA fast path is off in conftest.py).
Metric: max|qkv − torch| / max|torch| ≤ 1e-4 for the input gradients and every
parameter gradient, matched by torch's parameter names.

The last test wraps qkv's MultiheadAttention in a torch.autograd.Function and
trains through it inside a torch model.
"""

import numpy as np
import pytest
import torch

import qkv
from helpers import rel_err

TOL = 1e-4
WORST = {}


def note(kind, err):
    WORST[kind] = max(WORST.get(kind, 0.0), err)


@pytest.fixture(scope="module", autouse=True)
def report_worst():
    yield
    lines = [f"  {kind:24s} {err:.3g}" for kind, err in sorted(WORST.items())]
    if lines:
        print("\nworst max|qkv - torch| / max|torch| over all gradients:\n" + "\n".join(lines))


def randomize(module, gen):
    """Random values for every parameter (torch's init has zero biases and unit norms)."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)


def compare(kind, ours_inputs, theirs_inputs, ours_params, torch_module):
    """Input gradients (lists, same order) and parameter gradients by name."""
    theirs_params = {n: p.grad for n, p in torch_module.named_parameters()}
    assert sorted(ours_params) == sorted(theirs_params), (sorted(ours_params),
                                                           sorted(theirs_params))
    checks = [(f"input {i}", o, t) for i, (o, t) in enumerate(zip(ours_inputs, theirs_inputs))]
    checks += [(name, ours_params[name], theirs_params[name]) for name in theirs_params]
    for what, ours, theirs in checks:
        assert theirs is not None, f"{kind}: torch has no gradient for {what}"
        err = rel_err(ours, theirs)
        note(kind, err)
        assert err <= TOL, f"{kind}: gradient of {what}: relative error {err:.3g} > {TOL:g}"


def leaf(x):
    return x.detach().clone().requires_grad_(True)


# --- MultiheadAttention --------------------------------------------------------------

E, H, L, S, B = 16, 4, 5, 7, 3


def mha_inputs(gen, layout, kdim, vdim, self_attention):
    def seq(length, feat):
        shape = {"lbd": (length, B, feat), "bld": (B, length, feat), "ld": (length, feat)}[layout]
        return torch.randn(shape, generator=gen)

    q = seq(L if not self_attention else S, E)
    if self_attention:
        return q, q, q
    return q, seq(S, kdim or E), seq(S, vdim or E)


def bool_mask(gen, shape, p, keep_col=0):
    m = torch.rand(shape, generator=gen) < p
    m[..., keep_col] = False  # no query row loses every key
    return m


MHA_CASES = {
    "bool masks, [L, B, D]": dict(masks="bool"),
    "float masks, batch_first": dict(masks="float", batch_first=True),
    "3-D bool attn_mask, kdim/vdim, batch_first": dict(masks="bool3d", kdim=6, vdim=10,
                                                       batch_first=True),
    "kdim/vdim, no bias, unbatched": dict(kdim=12, vdim=8, bias=False, layout="ld"),
    "no bias, key_padding_mask only": dict(bias=False, masks="kpm"),
    "self-attention, causal hint, batch_first": dict(self_attention=True, masks="causal",
                                                     batch_first=True),
    "need_weights (torch's explicit path), masks": dict(masks="bool", need_weights=True),
    "add_bias_kv, add_zero_attn, key_padding_mask": dict(add_bias_kv=True, add_zero_attn=True,
                                                         masks="kpm"),
}


@pytest.mark.parametrize("name", list(MHA_CASES))
def test_multihead_attention_grads(name):
    c = MHA_CASES[name]
    gen = torch.Generator().manual_seed(101 + list(MHA_CASES).index(name))
    batch_first = c.get("batch_first", False)
    layout = c.get("layout", "bld" if batch_first else "lbd")
    kdim, vdim = c.get("kdim"), c.get("vdim")
    ref = torch.nn.MultiheadAttention(E, H, dropout=0.0, bias=c.get("bias", True),
                                      add_bias_kv=c.get("add_bias_kv", False),
                                      add_zero_attn=c.get("add_zero_attn", False), kdim=kdim,
                                      vdim=vdim, batch_first=batch_first)
    randomize(ref, gen)
    ref.train()
    ours = qkv.nn.MultiheadAttention(E, H, dropout=0.0, bias=c.get("bias", True),
                                     add_bias_kv=c.get("add_bias_kv", False),
                                     add_zero_attn=c.get("add_zero_attn", False), kdim=kdim,
                                     vdim=vdim, batch_first=batch_first)
    ours.load_state_dict(ref.state_dict())

    self_attention = c.get("self_attention", False)
    q, k, v = mha_inputs(gen, layout, kdim, vdim, self_attention)
    Lq = q.shape[1] if layout == "bld" else q.shape[0]
    batch = () if layout == "ld" else (B,)
    kwargs = {"need_weights": c.get("need_weights", False)}
    masks = c.get("masks")
    if masks in ("bool", "float", "kpm"):
        if masks == "float":
            kwargs["key_padding_mask"] = torch.randn(batch + (S,), generator=gen)
        else:
            kwargs["key_padding_mask"] = bool_mask(gen, batch + (S,), 0.3)
    if masks == "bool":
        kwargs["attn_mask"] = bool_mask(gen, (Lq, S), 0.4)
    elif masks == "float":
        kwargs["attn_mask"] = torch.randn((Lq, S), generator=gen)
    elif masks == "bool3d":
        kwargs["attn_mask"] = bool_mask(gen, (B * H, Lq, S), 0.4)
    elif masks == "causal":
        kwargs["attn_mask"] = torch.triu(torch.ones(Lq, Lq, dtype=torch.bool), diagonal=1)
        kwargs["is_causal"] = True

    grad_out = torch.randn(q.shape, generator=gen)
    # torch
    if self_attention:
        x = leaf(q)
        out, _ = ref(x, x, x, **kwargs)
        out.backward(grad_out)
        theirs = [x.grad]
    else:
        tq, tk, tv = leaf(q), leaf(k), leaf(v)
        out, _ = ref(tq, tk, tv, **kwargs)
        out.backward(grad_out)
        theirs = [tq.grad, tk.grad, tv.grad]
    # qkv
    ours.zero_grad()
    our_out, weights, grad_fn = ours.forward_with_grad(q, k, v, **kwargs)
    assert (weights is not None) == kwargs["need_weights"]
    assert rel_err(our_out, out) <= 1e-5
    gq, gk, gv = grad_fn(grad_out)
    mine = [gq + gk + gv] if self_attention else [gq, gk, gv]
    compare("MultiheadAttention", mine, theirs, ours.named_grads(), ref)


def test_multihead_attention_grads_accumulate_and_zero():
    gen = torch.Generator().manual_seed(3)
    ours = qkv.nn.MultiheadAttention(E, H)
    x = torch.randn(L, B, E, generator=gen)
    r = torch.randn(L, B, E, generator=gen)
    _, _, grad_fn = ours.forward_with_grad(x, x, x)
    grad_fn(r)
    once = ours.named_grads()
    assert list(once) == ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    grad_fn(r)
    twice = ours.named_grads()
    for name in once:
        assert np.allclose(twice[name], 2 * once[name], rtol=1e-5, atol=1e-7), name
    ours.zero_grad()
    assert all(not g.any() for g in ours.named_grads().values())
    with pytest.raises(ValueError, match="grad_output"):
        grad_fn(torch.zeros(L, B, E + 1))


# --- Transformer layers ---------------------------------------------------------------

D, NHEAD, FF = 16, 4, 32
T, SM = 5, 6  # target and memory lengths


def layer_kwargs(norm_first, activation, batch_first):
    return dict(d_model=D, nhead=NHEAD, dim_feedforward=FF, dropout=0.0, activation=activation,
                batch_first=batch_first, norm_first=norm_first)


LAYER_GRID = [(nf, act) for nf in (False, True) for act in ("relu", "gelu")]


@pytest.mark.parametrize("norm_first,activation", LAYER_GRID)
def test_encoder_layer_grads(norm_first, activation):
    gen = torch.Generator().manual_seed(11 + 2 * norm_first + (activation == "gelu"))
    batch_first = norm_first  # both layouts across the grid
    ref = torch.nn.TransformerEncoderLayer(**layer_kwargs(norm_first, activation, batch_first))
    randomize(ref, gen)
    ref.train()
    ours = qkv.nn.TransformerEncoderLayer(**layer_kwargs(norm_first, activation, batch_first))
    ours.load_state_dict(ref.state_dict())
    x = torch.randn((B, T, D) if batch_first else (T, B, D), generator=gen)
    # float with float, bool with bool (torch deprecates mixing the kinds)
    if activation == "relu":
        src_mask, kpm = torch.randn(T, T, generator=gen), torch.randn(B, T, generator=gen)
    else:
        src_mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        kpm = bool_mask(gen, (B, T), 0.3)
    r = torch.randn(x.shape, generator=gen)

    tx = leaf(x)
    out = ref(tx, src_mask=src_mask, src_key_padding_mask=kpm)
    out.backward(r)
    our_out, grad_fn = ours.forward_with_grad(x, src_mask=src_mask, src_key_padding_mask=kpm)
    assert rel_err(our_out, out) <= 1e-5
    compare("TransformerEncoderLayer", [grad_fn(r)], [tx.grad], ours.named_grads(), ref)


@pytest.mark.parametrize("norm_first,activation", LAYER_GRID)
def test_decoder_layer_grads(norm_first, activation):
    gen = torch.Generator().manual_seed(23 + 2 * norm_first + (activation == "gelu"))
    batch_first = not norm_first
    ref = torch.nn.TransformerDecoderLayer(**layer_kwargs(norm_first, activation, batch_first))
    randomize(ref, gen)
    ref.train()
    ours = qkv.nn.TransformerDecoderLayer(**layer_kwargs(norm_first, activation, batch_first))
    ours.load_state_dict(ref.state_dict())

    def seq(n):
        return torch.randn((B, n, D) if batch_first else (n, B, D), generator=gen)

    tgt, memory = seq(T), seq(SM)
    masks = dict(tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(T),
                 memory_mask=bool_mask(gen, (T, SM), 0.3),
                 tgt_key_padding_mask=torch.randn(B, T, generator=gen),
                 memory_key_padding_mask=bool_mask(gen, (B, SM), 0.2, keep_col=1))
    r = torch.randn(tgt.shape, generator=gen)

    tt, tm = leaf(tgt), leaf(memory)
    out = ref(tt, tm, **masks)
    out.backward(r)
    our_out, grad_fn = ours.forward_with_grad(tgt, memory, **masks)
    assert rel_err(our_out, out) <= 1e-5
    g_tgt, g_mem = grad_fn(r)
    compare("TransformerDecoderLayer", [g_tgt, g_mem], [tt.grad, tm.grad], ours.named_grads(),
            ref)


def test_encoder_stack_grads():
    gen = torch.Generator().manual_seed(31)
    layer = torch.nn.TransformerEncoderLayer(**layer_kwargs(False, "gelu", False))
    ref = torch.nn.TransformerEncoder(layer, num_layers=2, norm=torch.nn.LayerNorm(D),
                                      enable_nested_tensor=False)
    randomize(ref, gen)
    ref.train()
    ours = qkv.nn.TransformerEncoder(
        qkv.nn.TransformerEncoderLayer(**layer_kwargs(False, "gelu", False)), num_layers=2,
        norm=qkv.nn.LayerNorm(D))
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(T, B, D, generator=gen)
    kpm = bool_mask(gen, (B, T), 0.3)
    r = torch.randn(x.shape, generator=gen)
    tx = leaf(x)
    ref(tx, src_key_padding_mask=kpm).backward(r)
    _, grad_fn = ours.forward_with_grad(x, src_key_padding_mask=kpm)
    compare("TransformerEncoder", [grad_fn(r)], [tx.grad], ours.named_grads(), ref)


# --- qkv's MultiheadAttention inside a torch model -------------------------------------


class QkvAttention(torch.autograd.Function):
    """torch.autograd.Function over qkv.nn.MultiheadAttention: the parameters live
    in torch (so torch's optimizers update them); each forward loads them into
    the qkv module, and the backward returns qkv's gradients to autograd."""

    @staticmethod
    def forward(ctx, module, names, query, key, value, *params):
        module.load_state_dict({n: p.detach() for n, p in zip(names, params)})
        module.zero_grad()
        out, _, grad_fn = module.forward_with_grad(query.detach(), key.detach(), value.detach())
        ctx.module, ctx.names, ctx.grad_fn = module, names, grad_fn
        return torch.from_numpy(np.array(out))

    @staticmethod
    def backward(ctx, grad_output):
        gq, gk, gv = ctx.grad_fn(grad_output.contiguous())
        grads = ctx.module.named_grads()
        return (None, None, torch.from_numpy(gq), torch.from_numpy(gk), torch.from_numpy(gv),
                *(torch.from_numpy(grads[n]) for n in ctx.names))


class TinyModel(torch.nn.Module):
    """embed -> self-attention (torch's or qkv's) -> residual -> head."""

    def __init__(self, use_qkv):
        super().__init__()
        self.embed = torch.nn.Linear(6, E)
        self.attn = torch.nn.MultiheadAttention(E, H, batch_first=True)
        self.head = torch.nn.Linear(E, 2)
        self.use_qkv = use_qkv
        if use_qkv:
            self.qkv_attn = qkv.nn.MultiheadAttention(E, H, batch_first=True)

    def forward(self, x):
        h = self.embed(x)
        if self.use_qkv:
            names = [n for n, _ in self.attn.named_parameters()]
            a = QkvAttention.apply(self.qkv_attn, names, h, h, h, *self.attn.parameters())
        else:
            a, _ = self.attn(h, h, h, need_weights=False)
        return self.head(h + a).mean(dim=1)


def test_autograd_function_inside_torch_model():
    torch.manual_seed(0)
    theirs = TinyModel(use_qkv=False)
    ours = TinyModel(use_qkv=True)
    ours.load_state_dict(theirs.state_dict(), strict=False)
    x = torch.randn(B, L, 6)
    target = torch.randn(B, 2)
    for model in (theirs, ours):
        torch.nn.functional.mse_loss(model(x), target).backward()
    for (name, p), (_, q) in zip(theirs.named_parameters(), ours.named_parameters()):
        err = rel_err(q.grad, p.grad)
        note("autograd.Function", err)
        assert err <= TOL, f"{name}: relative error {err:.3g}"
    # One optimizer step through qkv's gradients stays with torch's.
    for model in (theirs, ours):
        torch.optim.SGD(model.parameters(), lr=0.1).step()
    for (name, p), (_, q) in zip(theirs.named_parameters(), ours.named_parameters()):
        assert rel_err(q, p) <= 1e-5, name
