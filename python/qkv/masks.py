"""Attention masks (tutorial §3.5, §7.4).

Two polarities exist, and every function here names the one it uses:

    keep mask    True = the key takes part    (SDPA's attn_mask, qkv.attention)
    ignore mask  True = the key is masked out (nn.MultiheadAttention's masks)

Additive masks are floating: 0 where kept, -inf where masked. All functions
return new numpy arrays.
"""

from . import _core

__all__ = [
    "causal_mask",
    "keep_mask_from_lengths",
    "keep_mask_to_additive",
    "key_mask_for_heads",
    "logical_not",
    "padding_mask_from_lengths",
]


def keep_mask_from_lengths(lengths, max_len):
    """Keep mask of the real tokens of sequences of the given lengths.

    -> bool [B, max_len], True where position < lengths[b]
    """
    return _core.keep_mask_from_lengths(list(lengths), max_len)


def padding_mask_from_lengths(lengths, max_len):
    """Ignore mask of the padding (the polarity of torch's key_padding_mask).

    -> bool [B, max_len], True where position >= lengths[b]
    """
    return _core.padding_mask_from_lengths(list(lengths), max_len)


def causal_mask(L, S, alignment="top_left"):
    """Causal keep mask.

    -> bool [L, S]

    alignment="top_left" is torch's is_causal (torch.tril(ones(L, S))): query i
    sees keys j <= i. alignment="bottom_right" is what decoding L new queries
    against S cached keys needs: query i sees keys j <= i + S - L.
    """
    return _core.causal_mask(L, S, alignment)


def key_mask_for_heads(mask):
    """A per-key mask [B, S] reshaped to [B, 1, 1, S], so that it broadcasts
    over heads and queries of [B, H, L, S] scores (the broadcast §5.4 warns about)."""
    return _core.key_mask_for_heads(mask)


def logical_not(mask):
    """Keep mask -> ignore mask, and back."""
    return _core.logical_not(mask)


def keep_mask_to_additive(keep_mask, dtype=None):
    """Bool keep mask -> additive mask (0 kept, -inf masked) of `dtype`
    (float32 by default; numpy or torch dtype, or its name)."""
    return _core.keep_mask_to_additive(keep_mask, dtype)
