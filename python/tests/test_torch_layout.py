"""torch.ops.qkv.scaled_dot_product_attention lays its results out like its
inputs (issue 42, "outputs in the caller's layout"):

  - the output like the query, as torch's SDPA does on CPU: for the heads of
    [B, L, H, E] buffers (q = x.view(B, L, H, E).transpose(1, 2), as Hugging
    Face passes them) the heads of a [B, L, H, Ev] buffer, the strides of
    torch's output; contiguous for contiguous inputs;
  - the gradients dQ, dK, dV with the strides of q, k, v;
  - the values those of torch's SDPA (≤ 1e-5 relative in float32, as
    test_torch_op.py) in either layout, and opcheck passes on strided inputs;
  - a Hugging Face-style call (views in, output transposed back and reshaped)
    runs no more aten::copy_ than torch's sdpa path, forward and
    forward + backward (counted with the torch profiler).
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import qkv.torch
from helpers import assert_close

sdpa = qkv.torch.scaled_dot_product_attention
op = torch.ops.qkv.scaled_dot_product_attention


def strides(t):
    """The strides that place elements: those of dims longer than 1 (qkv, as
    torch's contiguity checks, ignores the others)."""
    return tuple(s for s, n in zip(t.stride(), t.shape) if n > 1)


def heads_of(B, L, H, E, dtype, g):
    """[B, H, L, E]: the heads of a fresh [B, L, H, E] buffer (a leaf)."""
    x = torch.randn(B, L, H, E, dtype=torch.float64, generator=g).to(dtype)
    return x.transpose(1, 2).requires_grad_()


def inputs(layout, B=2, H=4, Hkv=None, L=7, S=9, E=16, Ev=None, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    Hkv, Ev = Hkv or H, Ev or E
    if layout == "transposed":
        return (heads_of(B, L, H, E, dtype, g), heads_of(B, S, Hkv, E, dtype, g),
                heads_of(B, S, Hkv, Ev, dtype, g))
    shapes = ((B, H, L, E), (B, Hkv, S, E), (B, Hkv, S, Ev))
    return tuple(torch.randn(s, dtype=torch.float64, generator=g).to(dtype).requires_grad_()
                 for s in shapes)


# name -> (input kwargs, kwargs for both functions)
CASES = {
    "plain": ({}, {}),
    "is_causal": ({"L": 9}, {"is_causal": True}),
    "gqa": ({"H": 6, "Hkv": 2, "L": 9}, {"enable_gqa": True, "is_causal": True}),
    "bool_mask": ({}, {"attn_mask": torch.rand(2, 1, 7, 9,
                                               generator=torch.Generator().manual_seed(5)) > 0.2}),
    "float_mask": ({}, {"attn_mask": torch.randn(7, 9,
                                                 generator=torch.Generator().manual_seed(6))}),
    "one_query": ({"L": 1}, {}),
    "Ev_ne_E": ({"Ev": 8}, {}),
}


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("case", list(CASES))
def test_output_and_gradients_equal_torch_in_torch_layout(case, layout):
    shape, kwargs = CASES[case]
    ours_in = inputs(layout, seed=3, **shape)
    theirs_in = tuple(t.detach().clone().requires_grad_() for t in ours_in)
    for a, b in zip(ours_in, theirs_in):
        assert a.stride() == b.stride()
    ours = sdpa(*ours_in, **kwargs)
    theirs = F.scaled_dot_product_attention(*theirs_in, **kwargs)
    assert_close(ours.detach(), theirs.detach(), np.float32, "output")
    if case == "Ev_ne_E" and layout == "transposed":
        # torch runs this in its math path, whose layout follows its matmuls
        # (contiguous here); qkv keeps the query's order: [B, L, H, Ev].
        B, H, L, Ev = ours.shape
        assert ours.stride() == (L * H * Ev, Ev, H * Ev, 1)
    else:
        assert strides(ours) == strides(theirs), (ours.stride(), theirs.stride())
    grad_out = torch.randn(ours.shape, generator=torch.Generator().manual_seed(7))
    our_grads = torch.autograd.grad(ours, ours_in, grad_out)
    their_grads = torch.autograd.grad(theirs, theirs_in, grad_out)
    for name, a, b, x in zip("qkv", our_grads, their_grads, ours_in):
        assert_close(a, b, np.float32, f"grad {name}")
        assert strides(a) == strides(x), (name, a.stride(), x.stride())


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_other_dtypes_keep_the_layout(dtype):
    q, k, v = inputs("transposed", H=3, L=6, S=6, E=8, dtype=dtype, seed=4)
    out, _, _ = op(q, k, v, causal="top_left")
    assert strides(out) == strides(F.scaled_dot_product_attention(q, k, v, is_causal=True))
    grads = torch.autograd.grad(sdpa(q, k, v, is_causal=True).float().sum(), (q, k, v))
    for g, x in zip(grads, (q, k, v)):
        assert g.dtype == dtype and strides(g) == strides(x)


def test_packed_slices_give_the_packed_layout():
    # q, k, v slices of one [B, L, 3, H, E] projection: not dense; the output
    # is packed in their order, [B, L, H, E] (as torch.empty_like(q) would be).
    x = torch.randn(2, 5, 3, 4, 8)
    q, k, v = (x[:, :, i].transpose(1, 2) for i in range(3))
    out = sdpa(q, k, v)
    assert out.stride() == (5 * 4 * 8, 8, 4 * 8, 1)
    assert out.stride() == F.scaled_dot_product_attention(q, k, v).stride()
    assert_close(out, F.scaled_dot_product_attention(q, k, v), np.float32, "output")


OPCHECK_CASES = {
    "transposed": lambda: (inputs("transposed"), {}),
    "transposed_gqa_causal": lambda: (inputs("transposed", H=4, Hkv=2, L=9),
                                      {"enable_gqa": True, "causal": "top_left"}),
    "transposed_Ev_ne_E": lambda: (inputs("transposed", Ev=8), {}),
    "transposed_float64": lambda: (inputs("transposed", dtype=torch.float64), {}),
    "transposed_bfloat16": lambda: (inputs("transposed", dtype=torch.bfloat16), {}),
    "transposed_dropout": lambda: (inputs("transposed"), {"dropout_p": 0.25,
                                                          "dropout_seed": torch.tensor(7)}),
    "packed_slices": lambda: (tuple(t.transpose(1, 2).requires_grad_() for t in
                                    torch.randn(2, 5, 3, 4, 8).unbind(2)), {}),
}


@pytest.mark.parametrize("case", list(OPCHECK_CASES))
def test_opcheck_on_strided_inputs(case):
    args, kwargs = OPCHECK_CASES[case]()
    torch.library.opcheck(op, args, kwargs)


def test_opcheck_backward_op_on_strided_inputs():
    q, k, v = (t.detach() for t in inputs("transposed"))
    out, lse, _ = op(q, k, v)
    torch.library.opcheck(torch.ops.qkv.scaled_dot_product_attention_backward,
                          (torch.randn_like(out), q, k, v, out, lse), {})


# -- aten::copy_ per call, Hugging Face style -------------------------------

def hf_style_layer(attention, xq, xk, xv, H, E):
    """What a transformers attention layer does around its attention function:
    q, k, v are views of the projections [B, L, H·E], the output goes back to
    [B, L, H·E] (sdpa_attention_forward's transpose(1, 2).contiguous(), then
    the layer's reshape)."""
    B, L, _ = xq.shape
    q, k, v = (x.view(B, L, H, E).transpose(1, 2) for x in (xq, xk, xv))
    out = attention(q, k, v)
    return out.transpose(1, 2).contiguous().reshape(B, L, H * E)


def torch_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def qkv_attention(q, k, v):
    return sdpa(q, k, v, is_causal=True)


def count_copies(attention, backward):
    B, L, H, E = 2, 64, 4, 32
    g = torch.Generator().manual_seed(9)
    xs = [torch.randn(B, L, H * E, generator=g, requires_grad=backward) for _ in range(3)]
    hf_style_layer(attention, *xs, H, E)  # warm-up (first-call allocations, registrations)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        if backward:
            hf_style_layer(attention, *xs, H, E).square().sum().backward()
        else:
            with torch.no_grad():
                hf_style_layer(attention, *xs, H, E)
    return sum(e.count for e in prof.key_averages() if e.key == "aten::copy_")


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "forward_backward"])
def test_hf_style_call_adds_no_copy(backward):
    ours, theirs = count_copies(qkv_attention, backward), count_copies(torch_attention, backward)
    assert ours <= theirs, f"aten::copy_: qkv {ours}, sdpa {theirs}"
    if not backward:
        assert ours == 0


def test_hf_attention_function_returns_the_layers_layout_without_a_copy():
    transformers = pytest.importorskip("transformers")  # noqa: F841
    from qkv import _hf_attention

    class Layer(torch.nn.Module):
        is_causal = True
        num_key_value_groups = 1

    B, L, H, E = 2, 6, 3, 8
    q, k, v = inputs("transposed", B=B, H=H, L=L, S=L, E=E, seed=10)
    out, _ = _hf_attention.attention_forward(Layer(), q, k, v, None)
    assert out.shape == (B, L, H, E) and out.is_contiguous()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with torch.no_grad():
            _hf_attention.attention_forward(Layer(), q, k, v, None)
    assert not [e for e in prof.key_averages() if e.key == "aten::copy_"]
