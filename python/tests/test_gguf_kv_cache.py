"""qkv.models.load_gguf(..., kv_cache=...): the q8_0 KV cache from Python.

The q8_0 cache's accuracy is tested in C++ (tests/test_kv_cache_q8.cc); here:
the option reaches the model, its greedy answer matches the float cache's on a
short prompt, and an unknown storage name is a ValueError naming it.
"""

import numpy as np
import pytest

import qkv
from model_files import SMOLLM2_GGUF, needs_smollm2

pytestmark = needs_smollm2


def test_q8_0_cache_generates_like_the_float_cache():
    f32 = qkv.models.load_gguf(SMOLLM2_GGUF, max_seq_len=128)
    q8 = qkv.models.load_gguf(SMOLLM2_GGUF, max_seq_len=128, kv_cache="q8_0")
    assert (f32.kv_cache, q8.kv_cache) == ("f32", "q8_0")
    prompt = "The capital of France is"
    a = f32.generate(prompt, max_new_tokens=8)
    b = q8.generate(prompt, max_new_tokens=8)
    assert b[:4] == a[:4], (f32.tokenizer.decode(a), q8.tokenizer.decode(b))
    # The session's prefill logits stay close to the float cache's.
    ids = f32.tokenizer.encode(prompt)
    la = np.asarray(f32.model.session(max_len=16).prefill(ids))
    lb = np.asarray(q8.model.session(max_len=16).prefill(ids))
    assert 0 < np.abs(la - lb).max() < 0.05 * np.abs(la).max()


def test_unknown_kv_cache_is_a_value_error():
    with pytest.raises(ValueError, match='"q4_0".*f32.*q8_0'):
        qkv.models.load_gguf(SMOLLM2_GGUF, kv_cache="q4_0")
