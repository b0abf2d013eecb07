"""qkv.torch.nn.MultiheadAttention is a torch.nn.Module that torch users drop
in (issue 42, item 4): torch's parameters and state_dict, outputs, weights
and gradients equal torch.nn.MultiheadAttention's (≤ 1e-5 relative, float32;
float64 tighter), autograd through qkv's operator, and it trains inside a
torch model with a torch optimizer as torch's module does.
"""

import pytest
import torch

import qkv
import qkv.torch
from qkv.torch.nn import MultiheadAttention

from helpers import rel_err

# name -> (constructor kwargs, call builder (q, k, v) -> forward kwargs, key/value source dims)
CASES = {
    "self_attention": ({}, lambda L, S, B: {}),
    "batch_first_no_weights": ({"batch_first": True}, lambda L, S, B: {"need_weights": False}),
    "kdim_vdim_bool_masks": (
        {"kdim": 6, "vdim": 10},
        lambda L, S, B: {"attn_mask": torch.rand(L, S, generator=gen(1)) > 0.7,
                         "key_padding_mask": padding(B, S)}),
    "float_masks_per_head_weights": (
        {}, lambda L, S, B: {"attn_mask": torch.randn(B * 4, L, S, generator=gen(2)),
                             "key_padding_mask": padding(B, S).float() * -3.0,
                             "average_attn_weights": False}),
    "bias_kv_zero_attn": ({"add_bias_kv": True, "add_zero_attn": True},
                          lambda L, S, B: {"key_padding_mask": padding(B, S)}),
    "no_bias": ({"bias": False}, lambda L, S, B: {}),
    "causal_hint": ({}, lambda L, S, B: {
        "attn_mask": torch.nn.Transformer.generate_square_subsequent_mask(L),
        "is_causal": True, "need_weights": False}),
}


def gen(seed):
    return torch.Generator().manual_seed(seed)


def padding(B, S):
    mask = torch.zeros(B, S, dtype=torch.bool)
    mask[0, S - 2:] = True  # the first sequence is padded: its last two keys are ignored
    return mask


def pair(seed=0, dtype=torch.float32, **kwargs):
    """(torch's module, qkv's module) with the same parameters."""
    torch.manual_seed(seed)
    theirs = torch.nn.MultiheadAttention(16, 4, dtype=dtype, **kwargs)
    ours = MultiheadAttention(16, 4, dtype=dtype, **kwargs)
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


def make_inputs(module, L, S, B, dtype, self_attention, seed=5):
    g = gen(seed)
    kdim, vdim = module.kdim, module.vdim
    shape = (lambda n, d: (B, n, d)) if module.batch_first else (lambda n, d: (n, B, d))
    q = torch.randn(shape(L, 16), dtype=dtype, generator=g)
    if self_attention:
        return q, q, q
    k = torch.randn(shape(S, kdim), dtype=dtype, generator=g)
    v = torch.randn(shape(S, vdim), dtype=dtype, generator=g)
    return q, k, v


def run(module, inputs, kwargs):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out, weights = module(*leaves, **kwargs)
    grad_out = torch.randn(out.shape, dtype=out.dtype, generator=gen(9))
    loss = (out * grad_out).sum() + (0.0 if weights is None else weights.square().sum())
    params = [p for _, p in module.named_parameters()]
    grads = torch.autograd.grad(loss, leaves + params, allow_unused=True)
    return out, weights, grads


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", list(CASES))
def test_outputs_weights_and_gradients_equal_torch(case, dtype):
    ctor, call = CASES[case]
    theirs, ours = pair(dtype=dtype, **ctor)
    theirs.eval(), ours.eval()
    L, B = 5, 3
    self_attention = "kdim" not in ctor and case != "float_masks_per_head_weights"
    S = L if self_attention else 7
    inputs = make_inputs(ours, L, S, B, dtype, self_attention)
    kwargs = {name: value.to(dtype) if torch.is_tensor(value) and value.is_floating_point()
              else value for name, value in call(L, S, B).items()}
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    ref_out, ref_w, ref_grads = run(theirs, inputs, kwargs)
    out, w, grads = run(ours, inputs, kwargs)
    assert out.shape == ref_out.shape and out.dtype == dtype
    assert rel_err(out, ref_out) <= tol
    assert (w is None) == (ref_w is None)
    if w is not None:
        assert w.shape == ref_w.shape and rel_err(w, ref_w) <= tol
    names = ["query", "key", "value"] + [n for n, _ in ours.named_parameters()]
    for name, a, b in zip(names, grads, ref_grads):
        assert (a is None) == (b is None), name
        if a is not None:
            assert rel_err(a, b) <= tol, f"gradient of {name}: {rel_err(a, b)}"


def test_unbatched_input():
    theirs, ours = pair()
    x = torch.randn(6, 16, generator=gen(4))
    kpm = torch.tensor([False] * 5 + [True])
    for kwargs in ({}, {"key_padding_mask": kpm}):
        out, w = ours(x, x, x, **kwargs)
        ref_out, ref_w = theirs(x, x, x, **kwargs)
        assert out.shape == (6, 16) and w.shape == (6, 6)
        assert rel_err(out, ref_out) <= 1e-5 and rel_err(w, ref_w) <= 1e-5


def test_is_a_torch_module_with_torch_parameters_and_state_dict():
    theirs, ours = pair(kdim=6, vdim=10, add_bias_kv=True)
    assert isinstance(ours, torch.nn.Module) and isinstance(ours, torch.nn.MultiheadAttention)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert all(isinstance(p, torch.nn.Parameter) for p in ours.parameters())
    # Round trip both ways, tensor for tensor.
    state = ours.state_dict()
    assert list(state) == list(theirs.state_dict())
    fresh = torch.nn.MultiheadAttention(16, 4, kdim=6, vdim=10, add_bias_kv=True)
    assert fresh.load_state_dict(state) is not None
    for name, tensor in fresh.state_dict().items():
        assert torch.equal(tensor, state[name]), name
    back = MultiheadAttention(16, 4, kdim=6, vdim=10, add_bias_kv=True)
    back.load_state_dict(fresh.state_dict())
    for name, tensor in back.state_dict().items():
        assert torch.equal(tensor, state[name]), name
    # torch's module-level conversions apply.
    assert ours.double().in_proj_bias is None or ours.out_proj.weight.dtype == torch.float64


def test_trains_inside_a_torch_model_like_torch():
    class Model(torch.nn.Module):
        def __init__(self, attention):
            super().__init__()
            self.embed = torch.nn.Linear(8, 16)
            self.attention = attention(16, 4, batch_first=True)
            self.head = torch.nn.Linear(16, 1)

        def forward(self, x):
            h = self.embed(x)
            h = h + self.attention(h, h, h, need_weights=False)[0]
            return self.head(h).mean(dim=1)

    torch.manual_seed(0)
    x, y = torch.randn(16, 6, 8), torch.randn(16, 1)
    losses = {}
    for attention in (torch.nn.MultiheadAttention, MultiheadAttention):
        torch.manual_seed(1)  # the same initial parameters for both
        model = Model(attention)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        losses[attention] = []
        for _ in range(15):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses[attention].append(loss.item())
    ours, theirs = losses[MultiheadAttention], losses[torch.nn.MultiheadAttention]
    assert ours[-1] < 0.5 * ours[0]
    for a, b in zip(ours, theirs):
        assert abs(a - b) <= 1e-4 * max(1.0, abs(b))


def test_dropout_in_training_and_weights_follow_the_output():
    _, ours = pair(dropout=0.5, batch_first=True)
    ours.train()
    x = torch.randn(2, 6, 16, generator=gen(6))
    torch.manual_seed(3)
    out, w = ours(x, x, x, average_attn_weights=False)
    torch.manual_seed(3)
    again, _ = ours(x, x, x, need_weights=False)
    assert torch.equal(out, again)  # the same seed from torch's RNG, the same mask
    assert (w == 0).any()  # dropped weights
    # The output is those (dropped-out) weights times the values.
    w_v = ours.in_proj_weight.chunk(3)[2]
    b_v = ours.in_proj_bias.chunk(3)[2]
    v = torch.nn.functional.linear(x, w_v, b_v).unflatten(-1, (4, 4)).transpose(1, 2)
    heads = (w @ v).transpose(1, 2).flatten(2)
    ref = torch.nn.functional.linear(heads, ours.out_proj.weight, ours.out_proj.bias)
    assert rel_err(out, ref) <= 1e-5
    ours.eval()
    a, _ = ours(x, x, x)
    b, _ = ours(x, x, x)
    assert torch.equal(a, b)


def test_bad_masks_are_refused_by_name():
    _, ours = pair()
    x = torch.randn(5, 2, 16)
    with pytest.raises(ValueError, match="attn_mask must be"):
        ours(x, x, x, attn_mask=torch.zeros(3, 5, 5))
    with pytest.raises(ValueError, match="key_padding_mask must be"):
        ours(x, x, x, key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(RuntimeError, match="is_causal"):
        ours(x, x, x, is_causal=True)


def transformer_inputs(seed=7, B=2, L=6, T=5, d=16):
    g = gen(seed)
    src, tgt = torch.randn(B, L, d, generator=g), torch.randn(B, T, d, generator=g)
    padding = torch.zeros(B, L, dtype=torch.bool)
    padding[1, L - 2:] = True
    return src, tgt, padding


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_transformer_equals_torch_outputs_and_gradients(norm_first):
    kwargs = dict(d_model=16, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
                  dim_feedforward=32, dropout=0.0, batch_first=True, norm_first=norm_first)
    torch.manual_seed(0)
    theirs = torch.nn.Transformer(**kwargs)
    torch.manual_seed(0)
    ours = qkv.torch.nn.Transformer(**kwargs)
    # The same seed, the same initial parameters; the same state_dict names.
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values()):
        assert torch.equal(a, b), name
    attentions = [m for m in ours.modules() if isinstance(m, torch.nn.MultiheadAttention)]
    assert len(attentions) == 6 and all(isinstance(m, MultiheadAttention) for m in attentions)
    src, tgt, padding = transformer_inputs()
    causal = torch.nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
    for model in (theirs, ours):
        model.eval()
    results = []
    # Not out.square().sum(): after the final LayerNorm that is a constant.
    weights = torch.randn(2, 5, 16, generator=gen(11))
    for model in (theirs, ours):
        out = model(src, tgt, tgt_mask=causal, tgt_is_causal=True,
                    src_key_padding_mask=padding, memory_key_padding_mask=padding)
        grads = torch.autograd.grad((out * weights).sum(), list(model.parameters()))
        results.append((out, grads))
    (ref, ref_grads), (out, grads) = results
    assert rel_err(out, ref) <= 1e-5
    for (name, _), a, b in zip(ours.named_parameters(), grads, ref_grads):
        assert rel_err(a, b) <= 1e-5, name
    # Inference without grad: torch takes its fast path, qkv its kernels.
    with torch.no_grad():
        assert rel_err(ours.encoder(src, src_key_padding_mask=padding)[~padding],
                       theirs.encoder(src, src_key_padding_mask=padding)[~padding]) <= 1e-5


def test_use_qkv_attention_on_an_existing_torch_model():
    torch.manual_seed(2)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.TransformerEncoder(layer, 2))
    model.eval()
    src, _, padding = transformer_inputs(seed=8)
    with torch.no_grad():
        want = model[1](model[0](src), src_key_padding_mask=padding)
    assert qkv.torch.nn.use_qkv_attention(model) is model
    assert isinstance(model[1].layers[0].self_attn, MultiheadAttention)
    assert isinstance(model[1], qkv.torch.nn.TransformerEncoder)
    calls = []
    hook = torch.nn.Module.register_forward_hook  # counts qkv's attention calls
    handles = [hook(layer.self_attn, lambda *a: calls.append(1)) for layer in model[1].layers]
    with torch.no_grad():
        got = model[1](model[0](src), src_key_padding_mask=padding)
    for h in handles:
        h.remove()
    assert len(calls) == 2
    assert rel_err(got[~padding], want[~padding]) <= 1e-5


def test_torch_free_module_is_still_there():
    assert qkv.nn.MultiheadAttention is not MultiheadAttention
    assert not isinstance(qkv.nn.MultiheadAttention(16, 4), torch.nn.Module)
