"""qkv.nn.MultiheadAttention: torch.nn.MultiheadAttention on qkv's C++ module."""

from .. import _core
from ._grad import GradMixin
from ._module import Module, check_device, check_generator

__all__ = ["MultiheadAttention"]


class MultiheadAttention(GradMixin, Module):
    """Multi-head attention with torch.nn.MultiheadAttention's arguments, defaults,
    parameter names and initialisation, so that torch state_dicts load unchanged.

    MultiheadAttention(embed_dim, num_heads, dropout=0.0, bias=True,
                       add_bias_kv=False, add_zero_attn=False, kdim=None, vdim=None,
                       batch_first=False, device=None, dtype=None)

    device: None or "cpu". dtype: None (float32), float32 or float64, as a numpy
    or torch dtype or its name. qkv extra (keyword-only): generator, a
    qkv.Generator for the initial parameters (default: qkv's default generator).

    Like torch, a new module is in training mode (dropout active when
    dropout > 0); call eval() for inference. Unlike torch, a query whose keys
    are all masked gives output 0 and weights 0 (torch gives NaN when
    need_weights=True), and forward never takes a "fast path" with different
    numerics.

    Not a torch.nn.Module: it runs without torch (torch tensors come back as
    numpy arrays, without autograd). Torch users want
    qkv.torch.nn.MultiheadAttention.
    """

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None, *, generator=None):
        check_device(device, "MultiheadAttention")
        check_generator(generator, "MultiheadAttention")
        self._impl = _core.MultiheadAttention((
            int(embed_dim), int(num_heads), float(dropout), bool(bias), bool(add_bias_kv),
            bool(add_zero_attn), None if kdim is None else int(kdim),
            None if vdim is None else int(vdim), bool(batch_first), dtype, generator))

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        """-> (attn_output, attn_weights or None)

        query: [L, B, D] ([B, L, D] if batch_first; [L, D] unbatched)
        key: [S, B, kdim]  value: [S, B, vdim] (same layout as query)
        key_padding_mask: [B, S] ([S] unbatched); bool True = ignore the key, or
            float added to the scores.
        attn_mask: [L, S] or [B*num_heads, L, S]; bool True = not allowed, or
            float added to the scores.
        need_weights: also return the weights, averaged over heads ([B, L, S])
            if average_attn_weights, else per head ([B, H, L, S]); after dropout.
        is_causal: a hint that attn_mask is causal; needs attn_mask, as in torch.
        """
        return self._impl.forward((query, key, value, key_padding_mask, bool(need_weights),
                                   attn_mask, bool(average_attn_weights), bool(is_causal)))

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward_with_grad(self, query, key, value, key_padding_mask=None, need_weights=False,
                          attn_mask=None, average_attn_weights=True, is_causal=False):
        """-> (attn_output, attn_weights or None, grad_fn): forward() that keeps
        what its backward needs (need_weights defaults to False here).

        grad_fn(grad_output) -> (grad_query, grad_key, grad_value) given
        grad_output = ∂loss/∂attn_output, and adds the parameter gradients into
        named_grads() (every call adds again; zero_grad() clears). For
        self-attention the input's gradient is the sum of the three. Dropout is
        replayed; masks get no gradient. The inputs are held, not copied: do not
        change them in place before calling grad_fn.
        """
        return self._impl.forward_with_grad((query, key, value, key_padding_mask,
                                             bool(need_weights), attn_mask,
                                             bool(average_attn_weights), bool(is_causal)))

    # --- Configuration -----------------------------------------------------------
    embed_dim = property(lambda self: self._impl.embed_dim)
    num_heads = property(lambda self: self._impl.num_heads)
    head_dim = property(lambda self: self._impl.head_dim)
    dropout = property(lambda self: self._impl.dropout)
    kdim = property(lambda self: self._impl.kdim)
    vdim = property(lambda self: self._impl.vdim)
    batch_first = property(lambda self: self._impl.batch_first)
    dtype = property(lambda self: self._impl.dtype, doc='"float32" or "float64"')
    # torch's attribute: True when q, k and v share one packed in_proj_weight.
    _qkv_same_embed_dim = property(lambda self: self._impl.packed_in_proj)

    def __repr__(self):
        impl = self._impl
        extras = "".join(
            f", {name}={value!r}"
            for name, value, default in (
                ("dropout", impl.dropout, 0.0),
                ("bias", impl.bias, True),
                ("add_bias_kv", impl.add_bias_kv, False),
                ("add_zero_attn", impl.add_zero_attn, False),
                ("kdim", impl.kdim, impl.embed_dim),
                ("vdim", impl.vdim, impl.embed_dim),
                ("batch_first", impl.batch_first, False),
                ("dtype", impl.dtype, "float32"),
            )
            if value != default
        )
        return f"MultiheadAttention(embed_dim={impl.embed_dim}, num_heads={impl.num_heads}{extras})"
