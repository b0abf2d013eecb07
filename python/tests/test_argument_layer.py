"""The one argument layer: python/qkv owns every signature and default and
passes a call's arguments to _core as one tuple, which the bindings read in
the order of the Python signature.

These tests pin that order down: every argument given a value of the wrong
kind must come back as an error that names that argument (an argument read
from the wrong place of the tuple would name another), and the three SDPA
functions share one signature, torch's with qkv's keyword-only extras.
"""

import inspect

import numpy as np
import pytest

import qkv
from qkv import _core

F = qkv.nn.functional

SDPA_PARAMETERS = [
    "query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa",
    "causal", "dropout_mask", "return_dropout_mask", "generator", "window_left", "window_right",
    "alibi_slopes", "softcap", "backend", "precision",
]
SDPA_FUNCTIONS = [F.scaled_dot_product_attention, F.scaled_dot_product_attention_with_weights,
                  F.scaled_dot_product_attention_with_grad]


def _x(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("function", SDPA_FUNCTIONS, ids=lambda f: f.__name__)
def test_sdpa_functions_have_one_signature(function):
    signature = inspect.signature(function)
    assert list(signature.parameters) == SDPA_PARAMETERS
    assert signature == inspect.signature(F.scaled_dot_product_attention)
    kinds = [p.kind for p in signature.parameters.values()]
    assert kinds[:8] == [inspect.Parameter.POSITIONAL_OR_KEYWORD] * 8
    assert set(kinds[8:]) == {inspect.Parameter.KEYWORD_ONLY}
    assert function.__doc__ and function.__doc__ != _core.scaled_dot_product_attention.__doc__
    assert function.__module__ == "qkv.nn.functional"


# (argument, a wrong value) for each SDPA argument that is checked in C++.
SDPA_WRONG = [
    ("attn_mask", "mask"), ("dropout_p", "high"), ("scale", "big"), ("causal", "sideways"),
    ("dropout_mask", np.ones((4, 4), np.float32)), ("generator", 3), ("window_left", "far"),
    ("window_right", "far"), ("alibi_slopes", [[1.0]]), ("softcap", "cap"), ("backend", 3),
    ("precision", 3), ("precision", "fp8"),
]


@pytest.mark.parametrize("function", SDPA_FUNCTIONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("name,value", SDPA_WRONG, ids=[n for n, _ in SDPA_WRONG])
def test_sdpa_errors_name_the_argument(function, name, value):
    q = _x(1, 1, 4, 8)
    with pytest.raises((TypeError, ValueError), match=f"{function.__name__}\\(\\).*'{name}'"):
        function(q, q, q, **{name: value})


@pytest.mark.parametrize("name", ["is_causal", "enable_gqa", "return_dropout_mask"])
def test_sdpa_flag_without_a_truth_value_names_the_argument(name):
    q = _x(1, 1, 4, 8)
    with pytest.raises(TypeError, match=f"argument '{name}' must be a bool, got ndarray"):
        F.scaled_dot_product_attention(q, q, q, **{name: np.array([True, False])})


@pytest.mark.parametrize("name", ["query", "key", "value"])
def test_sdpa_tensor_errors_name_the_argument(name):
    args = {"query": _x(1, 1, 4, 8), "key": _x(1, 1, 4, 8), "value": _x(1, 1, 4, 8)}
    args[name] = "not an array"
    with pytest.raises((TypeError, ValueError), match=f"'{name}'"):
        F.scaled_dot_product_attention(**args)


def test_mha_forward_errors_name_the_argument():
    mha = qkv.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = _x(1, 4, 8)
    for name in ["key_padding_mask", "attn_mask"]:
        for forward in (mha.forward, mha.forward_with_grad):
            with pytest.raises((TypeError, ValueError), match=f"'{name}'"):
                forward(x, x, x, **{name: "mask"})


@pytest.mark.parametrize("names,make,inputs", [
    (["src_mask", "src_key_padding_mask"],
     lambda: qkv.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 1),
    (["tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask"],
     lambda: qkv.nn.TransformerDecoderLayer(8, 2, 16, batch_first=True), 2),
    (["src_mask", "tgt_mask", "memory_mask", "src_key_padding_mask", "tgt_key_padding_mask",
      "memory_key_padding_mask"],
     lambda: qkv.nn.Transformer(8, 2, 1, 1, 16, batch_first=True), 2),
], ids=["encoder_layer", "decoder_layer", "transformer"])
def test_transformer_forward_errors_name_the_argument(names, make, inputs):
    module = make().eval()
    x = _x(1, 4, 8)
    for name in names:
        with pytest.raises((TypeError, ValueError), match=f"'{name}'"):
            module(*[x] * inputs, **{name: "mask"})


def test_constructor_errors_name_the_argument():
    with pytest.raises(TypeError, match=r"Linear\(\): argument 'dtype'"):
        qkv.nn.Linear(2, 3, dtype="float16")
    with pytest.raises(TypeError, match=r"MultiheadAttention\(\): argument 'dtype'"):
        qkv.nn.MultiheadAttention(8, 2, dtype="int32")
    with pytest.raises(ValueError, match=r"MultiheadAttention\(\): vdim must be positive"):
        qkv.nn.MultiheadAttention(8, 2, kdim=4, vdim=0)
    with pytest.raises(ValueError, match=r"RotaryEmbedding\(\): argument 'style'"):
        qkv.nn.positional.RotaryEmbedding(8, style="diagonal")


def test_a_tuple_of_the_wrong_length_is_reported_as_a_bug():
    x = _x(2, 2)
    with pytest.raises(RuntimeError, match=r"matmul\(\): qkv's Python layer and its bindings"):
        _core.matmul((x,))
    with pytest.raises(RuntimeError, match=r"matmul\(\): .*read 2 of 3 fields"):
        _core.matmul((x, x, x))
    with pytest.raises(RuntimeError, match=r"linear\(\): .*expected a tuple, got list"):
        _core.linear([x, x, None])
