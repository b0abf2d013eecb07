"""qkv's SDPA as a torch operator (qkv.torch), and torch in / torch out.

torch.ops.qkv.scaled_dot_product_attention must be differentiable (gradcheck
in float64 for every option qkv has), pass torch.library.opcheck, give
torch's SDPA gradients in float32 (≤ 1e-5 relative, helpers.rel_err) where
torch has the feature, trace under torch.compile(fullgraph=True), and replay
its dropout mask in the backward (test_torch_compile_inductor_fullgraph, the
slow one, runs with QKV_SLOW_TESTS=1). qkv.nn.functional returns torch tensors for
torch inputs and routes inputs that require grad through the operator.
"""

import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

import qkv
import qkv.torch
from helpers import assert_close, rel_err

QF = qkv.nn.functional
sdpa = qkv.torch.scaled_dot_product_attention
op = torch.ops.qkv.scaled_dot_product_attention


def qkv_inputs(B=2, H=2, Hkv=None, L=5, S=5, E=4, Ev=None, dtype=torch.float64, seed=0,
               requires_grad=True):
    g = torch.Generator().manual_seed(seed)
    Hkv = Hkv or H
    Ev = Ev or E
    q = torch.randn(B, H, L, E, dtype=dtype, generator=g)
    k = torch.randn(B, Hkv, S, E, dtype=dtype, generator=g)
    v = torch.randn(B, Hkv, S, Ev, dtype=dtype, generator=g)
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


def random_bool_mask(shape, seed=1):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=g) > 0.3
    mask[..., 0] = True  # no fully masked rows: their gradient is a kink
    return mask


# name -> (input kwargs, sdpa kwargs builder). Each is checked by gradcheck.
GRADCHECK_CASES = {
    "plain": ({}, lambda q, k: {}),
    "bool_mask": ({}, lambda q, k: {"attn_mask": random_bool_mask((2, 1, 5, 5))}),
    "gqa": ({"H": 4, "Hkv": 2}, lambda q, k: {"enable_gqa": True}),
    "is_causal": ({}, lambda q, k: {"is_causal": True}),
    "top_left_L_ne_S": ({"L": 3, "S": 6}, lambda q, k: {"causal": "top_left"}),
    "bottom_right_L_ne_S": ({"L": 3, "S": 6}, lambda q, k: {"causal": "bottom_right"}),
    "window": ({"L": 6, "S": 6}, lambda q, k: {"window_left": 2, "window_right": 1}),
    "alibi": ({}, lambda q, k: {"alibi_slopes": [0.5, 0.25]}),
    "softcap": ({}, lambda q, k: {"softcap": 2.0, "scale": 0.9}),
    "causal_bias": ({"L": 3, "S": 6}, lambda q, k: {"attn_mask": causal_lower_right(3, 6)}),
    "Ev_ne_E": ({"E": 3, "Ev": 5}, lambda q, k: {}),
}


@pytest.mark.parametrize("case", list(GRADCHECK_CASES))
def test_gradcheck_float64(case):
    shape, make_kwargs = GRADCHECK_CASES[case]
    q, k, v = qkv_inputs(**shape)
    kwargs = make_kwargs(q, k)
    assert torch.autograd.gradcheck(lambda q, k, v: sdpa(q, k, v, **kwargs), (q, k, v))


def test_gradcheck_float_mask_and_its_gradient():
    q, k, v = qkv_inputs()
    mask = torch.randn(1, 2, 5, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, k, v, m: sdpa(q, k, v, attn_mask=m),
                                    (q, k, v, mask))


def test_gradcheck_dropout_with_a_fixed_seed():
    q, k, v = qkv_inputs()
    seed = torch.tensor(1234)

    def f(q, k, v):
        return op(q, k, v, dropout_p=0.3, dropout_seed=seed)[0]

    assert torch.autograd.gradcheck(f, (q, k, v))


def op_args(dtype=torch.float32, **kwargs):
    q, k, v = qkv_inputs(dtype=dtype, **kwargs)
    return q, k, v


OPCHECK_CASES = {
    "plain": lambda: (op_args(), {}),
    "float_mask": lambda: (op_args(), {"attn_mask": torch.randn(2, 1, 5, 5, requires_grad=True)}),
    "bool_mask_gqa": lambda: (op_args(H=4, Hkv=2), {"attn_mask": random_bool_mask((5, 5)),
                                                    "enable_gqa": True}),
    "extras": lambda: (op_args(L=3, S=6), {
        "causal": "bottom_right", "window_left": 2, "alibi_slopes": torch.tensor([0.5, 0.25],
                                                                                 dtype=torch.float64),
        "softcap": 3.0}),
    "dropout": lambda: (op_args(), {"dropout_p": 0.25, "dropout_seed": torch.tensor(7),
                                    "return_dropout_mask": True}),
    "float64": lambda: (op_args(dtype=torch.float64), {"is_causal": False, "scale": 0.5}),
    "bfloat16": lambda: (op_args(dtype=torch.bfloat16), {}),
}


@pytest.mark.parametrize("case", list(OPCHECK_CASES))
def test_opcheck(case):
    args, kwargs = OPCHECK_CASES[case]()
    kwargs.pop("is_causal", None)
    torch.library.opcheck(op, args, kwargs)


def test_opcheck_backward_op():
    q, k, v = op_args(requires_grad=False)
    out, lse, _ = op(q, k, v)
    torch.library.opcheck(torch.ops.qkv.scaled_dot_product_attention_backward,
                          (torch.randn_like(out), q, k, v, out, lse), {})


def grads_of(f, inputs, grad_out):
    for t in inputs:
        t.grad = None
    out = f(*inputs)
    out.backward(grad_out)
    return out.detach(), [t.grad.clone() for t in inputs]


# name -> (input kwargs, kwargs for both functions, mask for both or None).
TORCH_PARITY_CASES = {
    "plain": ({}, {}),
    "bool_mask": ({}, {"attn_mask": random_bool_mask((2, 2, 7, 9), seed=5)}),
    "is_causal": ({"S": 7}, {"is_causal": True}),
    "gqa_scale": ({"H": 6, "Hkv": 2}, {"enable_gqa": True, "scale": 0.3}),
    "causal_lower_right": ({"L": 4, "S": 9}, {"attn_mask": causal_lower_right(4, 9)}),
    "causal_upper_left": ({"L": 4, "S": 9}, {"attn_mask": causal_upper_left(4, 9)}),
}


@pytest.mark.parametrize("case", list(TORCH_PARITY_CASES))
def test_float32_gradients_equal_torch(case):
    shape, kwargs = TORCH_PARITY_CASES[case]
    shape = {"L": 7, "S": 9, "E": 16, **shape}
    inputs = qkv_inputs(dtype=torch.float32, seed=3, **shape)
    grad_out = torch.randn(inputs[0].shape[:-1] + (inputs[2].shape[-1],))
    ours, our_grads = grads_of(lambda q, k, v: sdpa(q, k, v, **kwargs), inputs, grad_out)
    theirs, their_grads = grads_of(lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, **kwargs), inputs, grad_out)
    assert_close(ours, theirs, np.float32, "output")
    for name, a, b in zip("qkv", our_grads, their_grads):
        assert_close(a, b, np.float32, f"grad {name}")


def test_float32_float_mask_gradient_equals_torch():
    inputs = qkv_inputs(dtype=torch.float32, L=6, S=8, E=16, seed=4)
    mask = torch.randn(1, 2, 6, 8, requires_grad=True)
    grad_out = torch.randn(2, 2, 6, 16)
    ours, our_grads = grads_of(lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), inputs + [mask],
                               grad_out)
    theirs, their_grads = grads_of(lambda q, k, v, m: F.scaled_dot_product_attention(
        q, k, v, attn_mask=m), inputs + [mask], grad_out)
    assert_close(ours, theirs, np.float32, "output")
    for name, a, b in zip(["q", "k", "v", "mask"], our_grads, their_grads):
        assert_close(a, b, np.float32, f"grad {name}")


def test_constant_float_mask_gets_no_gradient_and_the_same_others():
    """A float mask that does not require grad (padding, a fixed bias): the
    backward op is told so, returns no mask gradient, and q, k, v's gradients
    are those of the call that computes it."""
    inputs = qkv_inputs(dtype=torch.float32, L=6, S=8, E=16, seed=9)
    mask = torch.randn(2, 1, 6, 8)
    grad_out = torch.randn(2, 2, 6, 16)
    ours, our_grads = grads_of(lambda q, k, v: sdpa(q, k, v, attn_mask=mask), inputs, grad_out)
    theirs, their_grads = grads_of(lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask), inputs, grad_out)
    for name, a, b in zip("qkv", our_grads, their_grads):
        assert_close(a, b, np.float32, f"grad {name}")
    q, k, v = (t.detach() for t in inputs)
    out, lse, _ = op(q, k, v, attn_mask=mask)
    backward = torch.ops.qkv.scaled_dot_product_attention_backward
    with_mask = backward(grad_out, q, k, v, out, lse, attn_mask=mask)
    without = backward(grad_out, q, k, v, out, lse, attn_mask=mask, attn_mask_requires_grad=False)
    assert with_mask[3].shape == mask.shape and without[3].numel() == 0
    for a, b in zip(with_mask[:3], without[:3]):
        assert torch.equal(a, b)
    for a, b in zip(without[:3], our_grads):
        assert torch.equal(a, b)


def test_bfloat16_forward_and_backward_follow_float32():
    q, k, v = qkv_inputs(dtype=torch.float32, L=8, S=8, E=16, seed=6)
    ours = [t.detach().bfloat16().requires_grad_() for t in (q, k, v)]
    out = sdpa(*ours, is_causal=True)
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    ref = sdpa(q, k, v, is_causal=True)
    ref.sum().backward()
    assert rel_err(out.float(), ref) < 2e-2
    for a, b in zip(ours, (q, k, v)):
        assert a.grad.dtype == torch.bfloat16
        assert rel_err(a.grad.float(), b.grad) < 5e-2


def window_alibi_softcap(q, k, v):
    return sdpa(q, k, v, causal="bottom_right", window_left=3, alibi_slopes=[0.5, 0.125],
                softcap=4.0)


def test_torch_compile_fullgraph_equals_eager():
    torch._dynamo.reset()
    compiled = torch.compile(window_alibi_softcap, fullgraph=True, backend="aot_eager")
    eager_inputs = qkv_inputs(dtype=torch.float32, L=5, S=8, E=8, seed=8)
    compiled_inputs = [t.detach().clone().requires_grad_() for t in eager_inputs]
    grad_out = torch.randn(2, 2, 5, 8)
    eager, eager_grads = grads_of(window_alibi_softcap, eager_inputs, grad_out)
    traced, traced_grads = grads_of(compiled, compiled_inputs, grad_out)
    assert torch.equal(eager, traced)
    for a, b in zip(eager_grads, traced_grads):
        assert torch.equal(a, b)


@pytest.mark.skipif(not os.environ.get("QKV_SLOW_TESTS"),
                    reason="inductor compiles C++ (~100 s on a loaded 2-core machine); "
                    "set QKV_SLOW_TESTS=1 to run it")
def test_torch_compile_inductor_fullgraph():
    torch._dynamo.reset()

    def f(q, k, v, m):
        return (sdpa(q, k, v, attn_mask=m) * 2).sum()

    compiled = torch.compile(f, fullgraph=True)
    q, k, v = qkv_inputs(dtype=torch.float32, seed=9)
    mask = torch.randn(5, 5, requires_grad=True)
    eager_grads = torch.autograd.grad(f(q, k, v, mask), (q, k, v, mask))
    traced_grads = torch.autograd.grad(compiled(q, k, v, mask), (q, k, v, mask))
    for a, b in zip(eager_grads, traced_grads):
        assert_close(b, a, np.float32, "compiled gradient")


def test_dropout_is_reproducible_with_a_generator():
    q, k, v = qkv_inputs(dtype=torch.float32, seed=10)
    outs = [sdpa(q, k, v, dropout_p=0.4, generator=torch.Generator().manual_seed(5))
            for _ in range(2)]
    assert torch.equal(outs[0], outs[1])
    other = sdpa(q, k, v, dropout_p=0.4, generator=torch.Generator().manual_seed(6))
    assert not torch.equal(outs[0], other)
    torch.manual_seed(11)
    a = sdpa(q, k, v, dropout_p=0.4)
    torch.manual_seed(11)
    assert torch.equal(a, sdpa(q, k, v, dropout_p=0.4))
    qa = sdpa(q, k, v, dropout_p=0.4, generator=qkv.Generator(3))
    assert torch.equal(qa, sdpa(q, k, v, dropout_p=0.4, generator=qkv.Generator(3)))


def test_dropout_backward_replays_the_forward_mask():
    p = 0.35
    q, k, v = qkv_inputs(dtype=torch.float64, L=6, S=7, seed=12)
    out, _, keep = op(q, k, v, dropout_p=p, dropout_seed=torch.tensor(99),
                      return_dropout_mask=True)
    assert keep.dtype == torch.bool and keep.shape == (2, 2, 6, 7)
    assert 0 < keep.float().mean() < 1
    grad_out = torch.randn_like(out)
    ours = torch.autograd.grad(out, (q, k, v), grad_out)
    # The same attention written in torch ops, with the mask qkv used.
    weights = torch.softmax(q @ k.transpose(-1, -2) / 2.0, dim=-1) * keep / (1 - p)
    ref = weights @ v
    assert_close(out, ref, np.float64, "output")
    theirs = torch.autograd.grad(ref, (q, k, v), grad_out)
    for name, a, b in zip("qkv", ours, theirs):
        assert_close(a, b, np.float64, f"grad {name}")


def test_numpy_in_numpy_out_torch_in_torch_out():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, 4)).astype(np.float32) for _ in range(3))
    out = QF.scaled_dot_product_attention(q, k, v)
    assert isinstance(out, np.ndarray)
    tq = torch.from_numpy(q)
    for args in [(tq, k, v), (q, torch.from_numpy(k), v), (tq, torch.from_numpy(k), v)]:
        t_out = QF.scaled_dot_product_attention(*args)
        assert isinstance(t_out, torch.Tensor)
        np.testing.assert_array_equal(t_out.numpy(), out)
    # A torch mask alone makes the results torch tensors too.
    mask = torch.ones(3, 3, dtype=torch.bool)
    assert isinstance(QF.scaled_dot_product_attention(q, k, v, attn_mask=mask), torch.Tensor)
    out, weights, keep = QF.scaled_dot_product_attention_with_weights(
        tq, k, v, dropout_p=0.5, return_dropout_mask=True)
    assert all(isinstance(x, torch.Tensor) for x in (out, weights, keep))
    out, grad_fn = QF.scaled_dot_product_attention_with_grad(tq, k, v)
    assert isinstance(out, torch.Tensor) and isinstance(grad_fn.logsumexp, torch.Tensor)
    grads = grad_fn(torch.ones_like(out))
    assert all(isinstance(g, torch.Tensor) for g in grads[:3]) and grads.attn_mask is None
    np_out, np_grad_fn = QF.scaled_dot_product_attention_with_grad(q, k, v)
    assert isinstance(np_out, np.ndarray)
    assert isinstance(np_grad_fn(np.ones_like(np_out)).query, np.ndarray)
    w, x = rng.standard_normal((3, 4)), rng.standard_normal((2, 4))
    assert isinstance(QF.linear(x, w), np.ndarray)
    assert isinstance(QF.linear(torch.from_numpy(x), w), torch.Tensor)


def test_torch_output_shares_qkv_memory():
    q, k, v = qkv_inputs(dtype=torch.float32, requires_grad=False)
    out = QF.scaled_dot_product_attention(q, k, v)
    assert out.is_contiguous() and out.dtype == torch.float32
    out.add_(1.0)  # writable: a torch tensor over qkv's buffer


def test_requires_grad_is_honoured_by_qkv_nn_functional():
    q, k, v = qkv_inputs(dtype=torch.float32, L=6, S=6, E=8, seed=13)
    grad_out = torch.randn(2, 2, 6, 8)
    ours, our_grads = grads_of(lambda q, k, v: QF.scaled_dot_product_attention(
        q, k, v, is_causal=True), [q, k, v], grad_out)
    theirs, their_grads = grads_of(lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=True), [q, k, v], grad_out)
    assert ours.dtype == torch.float32
    for name, a, b in zip("qkv", our_grads, their_grads):
        assert_close(a, b, np.float32, f"grad {name}")
    assert qkv.runtime.last_sdpa_kernel() is not None
    # Only the key requires grad, the query is numpy.
    kk = k.detach().clone().requires_grad_()
    out = QF.scaled_dot_product_attention(q.detach().numpy(), kk, v.detach())
    assert out.requires_grad
    out.sum().backward()
    assert kk.grad is not None and kk.grad.abs().sum() > 0
    # Dropout through the grad route: the keep mask comes back as torch.
    out, keep = QF.scaled_dot_product_attention(q, k, v, dropout_p=0.5, return_dropout_mask=True,
                                                generator=qkv.Generator(1))
    assert out.requires_grad and keep.dtype == torch.bool
    # Under no_grad the operator still runs, and nothing requires grad.
    with torch.no_grad():
        assert not QF.scaled_dot_product_attention(q, k, v).requires_grad
    with pytest.raises(RuntimeError, match="with_weights.*no autograd"):
        QF.scaled_dot_product_attention_with_weights(q, k, v)
    with pytest.raises(RuntimeError, match="linear.*no autograd"):
        QF.linear(q, torch.randn(3, 8))


class _OpRecorder(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the ops that reach torch's dispatcher."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("case", sorted(GRADCHECK_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inference_without_the_dispatcher_equals_the_op(case, dtype, monkeypatch):
    """An eager call with nothing to differentiate runs the op's kernel
    directly (qkv.torch._arrays_for_direct_call): the same values to the bit,
    laid out as the op lays them out; a dispatch mode still sees the op."""
    kwargs, make = GRADCHECK_CASES[case]
    q, k, v = qkv_inputs(dtype=dtype, requires_grad=False, **kwargs)
    q = q.transpose(1, 2).contiguous().transpose(1, 2)  # Hugging Face's [B, L, H, E] heads
    extra = make(q, k)
    recorder = _OpRecorder()
    with recorder:
        through_op = sdpa(q, k, v, **extra)
    assert "qkv.scaled_dot_product_attention.default" in recorder.ops
    calls = []
    real_op = torch.ops.qkv.scaled_dot_product_attention
    monkeypatch.setattr(torch.ops.qkv, "scaled_dot_product_attention",
                        lambda *a, **kw: calls.append(1) or real_op(*a, **kw))
    direct = sdpa(q, k, v, **extra)
    assert calls == [], "an inference call went through the dispatcher"
    assert direct.stride() == through_op.stride() and direct.dtype == dtype
    assert torch.equal(direct, through_op)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        sdpa(q, k, v, **extra)
    assert calls == [] and "qkv::scaled_dot_product_attention" in {e.name for e in prof.events()}
    # Anything autograd must see goes through the op.
    q.requires_grad_()
    assert sdpa(q, k, v, **extra).grad_fn is not None and calls == [1]
    with torch.no_grad():
        assert torch.equal(sdpa(q, k, v, **extra), through_op) and calls == [1]
    # bfloat16 (no numpy view) goes through the op.
    sdpa(*(t.detach().bfloat16() for t in (q, k, v)), **extra)
    assert calls == [1, 1]


def test_causal_bias_through_the_op_equals_torch():
    q, k, v = qkv_inputs(dtype=torch.float32, L=5, S=37, E=8, seed=14)
    for bias in (causal_lower_right(5, 37), causal_upper_left(5, 37)):
        ours = sdpa(q, k, v, attn_mask=bias)
        theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        assert_close(ours, theirs, np.float32, bias.variant.name)
    with pytest.raises(ValueError, match="CausalBias for 4 queries"):
        sdpa(q, k, v, attn_mask=causal_lower_right(4, 37))
    with pytest.raises(ValueError, match="do not also pass"):
        sdpa(q, k, v, attn_mask=causal_lower_right(5, 37), is_causal=True)


def test_hostile_arguments_give_clear_errors():
    q, k, v = qkv_inputs(dtype=torch.float32)
    with pytest.raises(ValueError, match="'causal' must be None"):
        sdpa(q, k, v, causal="diagonal")
    with pytest.raises(ValueError, match="alibi_slopes.*requires grad"):
        sdpa(q, k, v, alibi_slopes=torch.ones(2, requires_grad=True))
    with pytest.raises(TypeError, match="generator"):
        sdpa(q, k, v, dropout_p=0.1, generator=42)
    with pytest.raises(ValueError, match="dropout_p"):
        sdpa(q, k, v, dropout_p=1.5)
    with pytest.raises(TypeError, match="same dtype"):
        sdpa(q, k.double(), v)
    out, lse, _ = op(q, k, v)
    backward = torch.ops.qkv.scaled_dot_product_attention_backward
    with pytest.raises(ValueError, match="'logsumexp' must be float64 of shape"):
        backward(out, q, k, v, out, lse[..., :-1])
    with pytest.raises(TypeError, match="'output' must have the query's dtype"):
        backward(out, q, k, v, out.double(), lse)
    with pytest.raises(ValueError, match="needs the qkv.Generator"):
        backward(out, q, k, v, out, lse, dropout_p=0.5)
