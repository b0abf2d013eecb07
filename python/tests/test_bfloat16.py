"""bfloat16 attention: torch.bfloat16 tensors in and out, float32 inside.

Compared with torch 2.13's bfloat16 SDPA and with float64 math on the same
bfloat16-rounded inputs; bfloat16 keeps 8 significant bits, so 1e-2 relative.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import qkv
import qkv.nn.functional as F


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / (b.abs().max() + 1e-6)).item()


@pytest.mark.parametrize("shape", [(1, 1, 1, 300, 64), (2, 4, 37, 130, 32), (1, 8, 256, 256, 64)])
@pytest.mark.parametrize("causal", [False, True])
def test_bfloat16_forward_matches_torch_and_float64(shape, causal):
    b, h, L, S, e = shape
    g = torch.Generator().manual_seed(L * 7 + S)
    q = torch.randn(b, h, L, e, generator=g).bfloat16()
    k = torch.randn(b, h, S, e, generator=g).bfloat16()
    v = torch.randn(b, h, S, e, generator=g).bfloat16()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    assert qkv.runtime.last_sdpa_kernel().startswith("fused-")
    exact = TF.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    theirs = TF.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert rel(out, exact) <= 1e-2
    assert rel(out, theirs) <= 1e-2


def test_bfloat16_mask_and_gradients_match_torch_autograd():
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 6, 20, 32, generator=g).bfloat16()
    k = torch.randn(2, 2, 50, 32, generator=g).bfloat16()
    v = torch.randn(2, 2, 50, 16, generator=g).bfloat16()
    mask = torch.randn(20, 50, generator=g).bfloat16()
    dout = torch.randn(2, 6, 20, 16, generator=g).bfloat16()
    out, grad_fn = F.scaled_dot_product_attention_with_grad(q, k, v, mask, enable_gqa=True)
    grads = grad_fn(dout)
    leaves = [t.double().requires_grad_() for t in (q, k, v, mask)]
    ref = TF.scaled_dot_product_attention(*leaves, enable_gqa=True)
    ref_grads = torch.autograd.grad(ref, leaves, dout.double())
    assert rel(out, ref) <= 1e-2
    for got, want in zip(grads, ref_grads):
        assert got.dtype == torch.bfloat16
        assert rel(got, want) <= 1e-2


def test_bfloat16_needs_matching_dtypes():
    q = torch.randn(1, 1, 4, 8).bfloat16()
    with pytest.raises(TypeError, match="bfloat16, float32"):
        F.scaled_dot_product_attention(q, q.float(), q)
    with pytest.raises(TypeError, match="attn_mask must be bool or bfloat16"):
        F.scaled_dot_product_attention(q, q, q, torch.zeros(4, 4))
