"""The README's Python example: qkv where torch.nn.functional and torch.nn were."""
import numpy as np
import torch

import qkv

rng = np.random.default_rng(0)

# Scaled dot-product attention with torch's signature; numpy in, numpy out.
q = rng.standard_normal((2, 8, 16, 64), dtype=np.float32)  # [B, H, L, E]
out = qkv.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
expected = torch.nn.functional.scaled_dot_product_attention(
    torch.from_numpy(q), torch.from_numpy(q), torch.from_numpy(q), is_causal=True)
assert np.allclose(out, expected.numpy(), atol=1e-5)

# MultiheadAttention loads torch's weights unchanged and takes torch's arguments.
torch_mha = torch.nn.MultiheadAttention(embed_dim=64, num_heads=8, batch_first=True).eval()
mha = qkv.nn.MultiheadAttention(embed_dim=64, num_heads=8, batch_first=True).eval()
mha.load_state_dict(torch_mha.state_dict())
x = torch.randn(2, 10, 64)
pad = torch.zeros(2, 10, dtype=torch.bool)
pad[1, 7:] = True  # the second sequence has 7 real tokens
output, weights = mha(x, x, x, key_padding_mask=pad)
print("output", output.shape, "weights", weights.shape)  # (2, 10, 64) (2, 10, 10)
assert weights[1, :, 7:].max() == 0.0  # padding gets no attention
