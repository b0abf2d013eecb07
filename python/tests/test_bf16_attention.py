"""bfloat16 products in qkv's SDPA, against float64 and against torch's bf16 SDPA.

Both libraries get the same torch.bfloat16 q, k, v; the error of each output
is measured against float64 attention on those same (bfloat16) values. Both
round the output to bfloat16 (2^-8 relative), which dominates, and both round
the softmax weights to bfloat16 before P·V; qkv's max and mean errors must be
within 1.5x of torch's. float32 tensors with precision="bfloat16" give a
float32 output (a numpy array), whose error (P's rounding only) must be below
the bf16 one.
"""

import pytest
import torch
import torch.nn.functional as TF

import qkv
import qkv.nn.functional as F

SHAPES = [  # B, H, Hkv, L, S, E
    (2, 8, 8, 256, 256, 64),
    (1, 8, 8, 129, 300, 128),
    (4, 6, 2, 80, 80, 32),
    (1, 4, 4, 512, 512, 80),
]


def errors(out, exact):
    err = (out.double() - exact).abs()
    return err.max().item(), err.mean().item()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True])
def test_bf16_error_no_worse_than_torch(shape, causal):
    B, H, Hkv, L, S, E = shape
    g = torch.Generator().manual_seed(L + S + E)
    q = torch.randn(B, H, L, E, generator=g).bfloat16()
    k = torch.randn(B, Hkv, S, E, generator=g).bfloat16()
    v = torch.randn(B, Hkv, S, E, generator=g).bfloat16()
    kw = dict(is_causal=causal, enable_gqa=H != Hkv)
    exact = TF.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kw)
    ours = F.scaled_dot_product_attention(q, k, v, **kw)
    kernel = qkv.runtime.last_sdpa_kernel()
    theirs = TF.scaled_dot_product_attention(q, k, v, **kw)
    assert ours.dtype == torch.bfloat16 and kernel.startswith("fused-")
    q_max, q_mean = errors(ours, exact)
    t_max, t_mean = errors(theirs, exact)
    print(f"\n{shape} causal={causal} {kernel}: qkv bf16 max {q_max:.3e} mean {q_mean:.3e}; "
          f"torch bf16 max {t_max:.3e} mean {t_mean:.3e}")
    assert q_max <= 1.5 * t_max
    assert q_mean <= 1.5 * t_mean

    # float32 tensors of the same values with bfloat16 products: float32 out
    f32 = [x.float() for x in (q, k, v)]
    ours32 = F.scaled_dot_product_attention(*f32, precision="bfloat16", **kw)
    p_max, p_mean = errors(ours32, exact)
    print(f"  qkv float32 in, precision=bfloat16: max {p_max:.3e} mean {p_mean:.3e}")
    assert p_max <= q_max and p_mean <= q_mean
    # and it rounds like the bfloat16 tensors (same kernel, same values)
    assert torch.equal(ours32.bfloat16(), ours)


def test_precision_keyword():
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 40, 64, generator=g) for _ in range(3))
    exact = F.scaled_dot_product_attention(q, k, v)
    for name in ("bfloat16", "bf16", "int8"):
        out = F.scaled_dot_product_attention(q, k, v, precision=name)
        err = (out - exact).abs().max().item()
        assert 0 < err < 2e-2, name  # bf16 rounding of q, k, v and P: not the float32 result
    same = F.scaled_dot_product_attention(q, k, v, precision="float32")
    assert torch.equal(same, exact)
    out, w = F.scaled_dot_product_attention_with_weights(q, k, v, precision="bfloat16")
    assert abs(w.sum(-1) - 1).max() < 1e-5
    with pytest.raises(ValueError, match="'precision' must be"):
        F.scaled_dot_product_attention(q, k, v, precision="fp8")
