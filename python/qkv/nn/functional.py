"""qkv.nn.functional: torch.nn.functional's attention ops.

scaled_dot_product_attention has torch 2.13's signature and semantics. qkv adds
keyword-only extras that torch does not have:

    causal="bottom_right"      causal mask aligned to the last key (decoding with a
                               KV cache); causal="top_left" equals is_causal=True
    dropout_mask=keep          use this bool keep mask (True = keep) for dropout
                               instead of sampling one
    return_dropout_mask=True   also return the keep mask dropout used
    generator=qkv.Generator(s) draw dropout from this generator, not the default

and scaled_dot_product_attention_with_weights, which also returns the
attention weights (after dropout, as multiplied with the values).
"""

from .. import _core

__all__ = [
    "linear",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_with_weights",
]


def _causal_name(is_causal, causal, function):
    if causal is None or causal is False:
        return "top_left" if is_causal else "none"
    if is_causal:
        raise ValueError(
            f"{function}(): pass either is_causal=True or causal={causal!r}, not both"
        )
    if causal is True:
        return "top_left"
    if causal not in ("top_left", "bottom_right"):
        raise ValueError(
            f"{function}(): argument 'causal' must be None, 'top_left' or 'bottom_right', "
            f"got {causal!r}"
        )
    return causal


def _check_generator(generator, function):
    if generator is not None and not isinstance(generator, _core.Generator):
        raise TypeError(f"{function}(): argument 'generator' must be a qkv.Generator or None, "
                        f"got {type(generator).__name__}")


def _sdpa(function, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
          need_weights, causal, dropout_mask, return_dropout_mask, generator):
    _check_generator(generator, function)
    return _core.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attn_mask,
        dropout_p=float(dropout_p),
        causal=_causal_name(bool(is_causal), causal, function),
        scale=None if scale is None else float(scale),
        enable_gqa=bool(enable_gqa),
        need_weights=need_weights,
        dropout_mask=dropout_mask,
        return_dropout_mask=bool(return_dropout_mask),
        generator=generator,
        function=function,
    )


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, *,
                                 causal=None, dropout_mask=None, return_dropout_mask=False,
                                 generator=None):
    """softmax(query @ keyᵀ · scale + mask) @ value, as torch.nn.functional's.

    query: [..., H, L, E]  key: [..., Hkv, S, E]  value: [..., Hkv, S, Ev]  ->  [..., H, L, Ev]

    Leading dims broadcast. All three float32 or float64, the same dtype.

    attn_mask: bool (True = take part) or floating of the query's dtype (added
        to the scores), broadcastable to [..., H, L, S]. Not with is_causal.
    dropout_p: probability of dropping a weight, applied whenever > 0 (as in
        torch: call with 0.0 for inference). Kept weights are scaled by 1/(1-p).
    is_causal: top-left causal mask, query i sees keys j <= i (torch.tril).
    scale: defaults to 1/sqrt(E).
    enable_gqa: grouped-query attention, query head h uses key/value head
        h // (H / Hkv).

    qkv extras (keyword-only):
    causal: None, "top_left" (same as is_causal=True) or "bottom_right" (query
        i sees keys j <= i + S - L, as decoding against a KV cache needs).
    dropout_mask: bool keep mask (True = keep), broadcastable to [..., H, L, S],
        used instead of sampling one when dropout_p > 0.
    return_dropout_mask: return (output, keep_mask) instead of output;
        keep_mask is a bool [..., H, L, S] array, or None when dropout_p == 0.
    generator: a qkv.Generator for the dropout samples (default: the one
        seeded by qkv.manual_seed).

    A query row whose keys are all masked gives 0 (as torch 2.13's SDPA).
    """
    output, _, keep = _sdpa("scaled_dot_product_attention", query, key, value, attn_mask,
                            dropout_p, is_causal, scale, enable_gqa, False, causal,
                            dropout_mask, return_dropout_mask, generator)
    if return_dropout_mask:
        return output, keep
    return output


def scaled_dot_product_attention_with_weights(query, key, value, attn_mask=None, dropout_p=0.0,
                                              is_causal=False, scale=None, enable_gqa=False, *,
                                              causal=None, dropout_mask=None,
                                              return_dropout_mask=False, generator=None):
    """scaled_dot_product_attention that also returns the attention weights.

    -> (output [..., H, L, Ev], weights [..., H, L, S]), and the bool keep mask
    [..., H, L, S] (None when dropout_p == 0) as a third element when
    return_dropout_mask=True.

    The weights are those multiplied with the values: softmax rows (0 for a
    fully masked row), after dropout and its 1/(1-p) scaling. The arguments are
    those of scaled_dot_product_attention.
    """
    output, weights, keep = _sdpa("scaled_dot_product_attention_with_weights", query, key,
                                  value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                                  True, causal, dropout_mask, return_dropout_mask, generator)
    if return_dropout_mask:
        return output, weights, keep
    return output, weights


def linear(input, weight, bias=None):
    """y = input @ weightᵀ + bias, as torch.nn.functional.linear.

    input: [..., in]  weight: [out, in]  bias: [out] or None  ->  [..., out]
    """
    return _core.linear(input, weight, bias)
