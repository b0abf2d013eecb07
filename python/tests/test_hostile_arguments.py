"""Arguments that used to crash or answer wrongly without a word.

torch tensor subclasses read as plain storage (CausalBias: output off by up to
3), sizes whose byte counts wrapped around (segfaults), NaN turned into zeros
on the float64 path, and attention calls that Ctrl-C could not stop.
"""

import os
import signal
import threading
import time

import numpy as np
import pytest
import torch
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

import qkv

sdpa = qkv.nn.functional.scaled_dot_product_attention


def qkv_inputs(L, S, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2, 3, L, 8, generator=g, dtype=dtype),
            torch.randn(2, 3, S, 8, generator=g, dtype=dtype),
            torch.randn(2, 3, S, 8, generator=g, dtype=dtype))


# --- torch tensor subclasses -------------------------------------------------------

@pytest.mark.parametrize("make_bias", [causal_upper_left, causal_lower_right])
@pytest.mark.parametrize("L,S", [(5, 37), (6, 6), (1, 9)])
def test_causal_bias_is_applied_as_torch_applies_it(make_bias, L, S):
    q, k, v = qkv_inputs(L, S)
    bias = make_bias(L, S)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    ours = sdpa(q, k, v, attn_mask=bias)
    np.testing.assert_allclose(ours, expected.numpy(), rtol=1e-5, atol=1e-5)
    # ... and it is the causal alignment of the same name.
    causal = "top_left" if make_bias is causal_upper_left else "bottom_right"
    np.testing.assert_array_equal(ours, sdpa(q, k, v, causal=causal))


def test_causal_bias_of_other_lengths_or_with_is_causal_is_an_error():
    q, k, v = qkv_inputs(5, 37)
    with pytest.raises(ValueError, match="CausalBias for 5 queries and 36 keys.*the key 37"):
        sdpa(q, k, v, attn_mask=causal_lower_right(5, 36))
    with pytest.raises(ValueError, match="CausalBias; do not also pass is_causal"):
        sdpa(q, k, v, attn_mask=causal_lower_right(5, 37), is_causal=True)


class Scaled(torch.Tensor):
    """A subclass whose values are not its storage's (as CausalBias's)."""


def test_other_tensor_subclasses_are_refused_by_name():
    q, k, v = qkv_inputs(5, 7)
    odd = q.as_subclass(Scaled)
    with pytest.raises(TypeError, match=r"argument 'query' is a .*Scaled, a torch.Tensor subclass"):
        sdpa(odd, k, v)
    mha = qkv.nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 5, 8)
    with pytest.raises(TypeError, match=r"'attn_mask' is a .*CausalBias, a torch.Tensor subclass"):
        mha(x, x, x, attn_mask=causal_upper_left(5, 5))
    # Parameters are plain tensors.
    out = sdpa(torch.nn.Parameter(q), k, v)
    np.testing.assert_array_equal(out.detach(), sdpa(q, k, v))
    # A subclass that requires grad is refused too (not handed to autograd).
    with pytest.raises(TypeError, match=r"argument 'query' is a .*Scaled"):
        sdpa(odd.detach().requires_grad_(), k, v)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_nested_and_sparse_tensors_are_refused():
    q, k, v = qkv_inputs(5, 7)
    for layout in (torch.strided, torch.jagged):
        nested = torch.nested.nested_tensor([torch.randn(5, 3, 8), torch.randn(4, 3, 8)],
                                            layout=layout).transpose(1, 2)
        with pytest.raises(TypeError, match="argument 'query' is a nested tensor"):
            sdpa(nested, k, v)
    with pytest.raises(TypeError, match="argument 'key' has layout torch.sparse_coo"):
        sdpa(q, k.to_sparse(), v)


# --- sizes -------------------------------------------------------------------------

def test_sizes_past_64_bits_are_errors_not_segfaults():
    with pytest.raises(ValueError, match=r"float32 tensor of shape \[2147483648, 2147483648\]"):
        qkv.nn.Linear(2**31, 2**31)
    with pytest.raises(ValueError, match=r"2\^63 bytes|64-bit size"):
        qkv.nn.MultiheadAttention(2**31, 1)
    with pytest.raises(MemoryError, match="cannot allocate"):
        qkv.nn.Linear(2**28, 2**28)  # fits in 64 bits, not in any machine


# --- the NaN/inf contract ------------------------------------------------------------

@pytest.mark.parametrize("dtype,backend", [(torch.float64, "auto"), (torch.float64, "reference"),
                                           (torch.float32, "reference"),
                                           (torch.float32, "auto")])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_nan_in_any_input_raises_on_every_path(dtype, backend, which):
    inputs = list(qkv_inputs(5, 7, dtype))
    inputs[which][1, 2, 3, 4] = float("nan")
    name = ["query", "key", "value"][which]
    with pytest.raises(ValueError, match=f"{name} of shape .* contains NaN"):
        sdpa(*inputs, backend=backend)


# --- Ctrl-C --------------------------------------------------------------------------

def test_ctrl_c_stops_a_long_attention_call():
    # About a minute of work on two cores, unless interrupted.
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 200_000, 64, generator=g)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            sdpa(q, q, q)
    finally:
        timer.cancel()
    assert time.monotonic() - start < 5
    # The next call runs normally.
    small = q[:, :, :64]
    np.testing.assert_allclose(sdpa(small, small, small),
                               torch.nn.functional.scaled_dot_product_attention(
                                   small, small, small).numpy(), rtol=1e-5, atol=1e-6)


def test_a_signal_handler_of_the_users_own_is_what_the_call_raises():
    class Stop(Exception):
        pass

    def handler(signum, frame):
        raise Stop("from the handler")

    previous = signal.signal(signal.SIGALRM, handler)
    q = torch.randn(1, 1, 200_000, 64)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(Stop, match="from the handler"):
            sdpa(q, q, q)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
