"""qkv.nn.positional: positional encodings (tutorial §3.4).

Self-attention cannot tell positions apart, so position information goes into
one of three places:

    added to the input    sinusoidal_encoding, SinusoidalPositionalEncoding
                          (the tutorial's formula), LearnedPositionalEncoding
    rotating q and k      RotaryEmbedding / apply_rotary (RoPE), two conventions:
                          "half_split" pairs (i, i + E/2) — GPT-NeoX, Hugging Face
                          LLaMA's rotate_half; "interleaved" pairs (2i, 2i+1) —
                          RoFormer, GPT-J, Meta's LLaMA. Not interchangeable.
    added to the scores   alibi_slopes, Alibi (ALiBi's linear distance penalty);
                          relative_position_bucket, RelativePositionBias (T5)

The score biases are [H, L, S] float arrays: pass them as a float attn_mask to
qkv.nn.functional.scaled_dot_product_attention (it broadcasts over the batch).
They align queries bottom-right, as when decoding with a cache: query i of L
is at position i + S − L among S keys.

    import qkv
    pe = qkv.nn.positional.sinusoidal_encoding(100, 64)         # [100, 64]
    rope = qkv.nn.positional.RotaryEmbedding(64, style="interleaved")
    q2, k2 = rope.forward_qk(q, k)                               # q, k: [B, H, L, 64]
    bias = qkv.nn.positional.Alibi(8)(L=10, S=10)                # [8, 10, 10]
"""

import numbers as _numbers

import numpy as _np

from .. import _core
from ._module import Module, check_generator, integer_array

__all__ = [
    "Alibi",
    "LearnedPositionalEncoding",
    "RelativePositionBias",
    "RotaryEmbedding",
    "SinusoidalPositionalEncoding",
    "alibi_slopes",
    "apply_rotary",
    "relative_position_bucket",
    "sinusoidal_encoding",
]


# --- Added to the input ---------------------------------------------------------------


def sinusoidal_encoding(length, d_model, offset=0, dtype=None):
    """The sinusoidal table of §3.4 for positions offset … offset + length − 1.

    PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(same angle),
    computed in float64 and rounded once to dtype (float32 unless float64).
    -> [length, d_model]
    """
    return _core.sinusoidal_encoding(int(length), int(d_model), int(offset), dtype)


class SinusoidalPositionalEncoding(Module):
    """dropout(x + PE[offset : offset + L]) with the fixed sinusoidal table.

    SinusoidalPositionalEncoding(d_model, max_len=5000, dropout=0.0, batch_first=False,
                                 dtype=None)

    input: [L, B, D] ([B, L, D] if batch_first; unbatched [L, D])  ->  like input
    No parameters (state_dict is empty); `table` is the [max_len, d_model] table.
    """

    def __init__(self, d_model, max_len=5000, dropout=0.0, batch_first=False, dtype=None):
        self._impl = _core.SinusoidalPositionalEncoding((int(d_model), int(max_len),
                                                         float(dropout), bool(batch_first),
                                                         dtype))

    def forward(self, input, offset=0):
        return self._impl.forward(input, int(offset))

    table = property(lambda self: self._impl.table, doc="[max_len, d_model], a copy")
    d_model = property(lambda self: self._impl.d_model)
    max_len = property(lambda self: self._impl.max_len)

    def __repr__(self):
        return f"SinusoidalPositionalEncoding(d_model={self.d_model}, max_len={self.max_len})"


class LearnedPositionalEncoding(Module):
    """dropout(x + weight[offset : offset + L]) with a learned table (BERT, GPT-2).

    LearnedPositionalEncoding(d_model, max_len=512, dropout=0.0, batch_first=False,
                              dtype=None, *, generator=None)

    input: [L, B, D] ([B, L, D] if batch_first; unbatched [L, D])  ->  like input
    Parameter "weight" [max_len, d_model] ~ N(0, 1), as nn.Embedding.
    """

    def __init__(self, d_model, max_len=512, dropout=0.0, batch_first=False, dtype=None, *,
                 generator=None):
        check_generator(generator, "LearnedPositionalEncoding")
        self._impl = _core.LearnedPositionalEncoding((int(d_model), int(max_len),
                                                      float(dropout), bool(batch_first), dtype,
                                                      generator))

    def forward(self, input, offset=0):
        return self._impl.forward(input, int(offset))

    d_model = property(lambda self: self._impl.d_model)
    max_len = property(lambda self: self._impl.max_len)

    def __repr__(self):
        return f"LearnedPositionalEncoding(d_model={self.d_model}, max_len={self.max_len})"


# --- Rotating q and k (RoPE) -------------------------------------------------------------


class RotaryEmbedding(Module):
    """Rotary position embedding: rotates each pair (a, b) of coordinates by
    pos · θ_i with θ_i = base^(−2i/E):  a' = a cos − b sin,  b' = b cos + a sin.

    RotaryEmbedding(head_dim, base=10000.0, style="half_split")

    style "half_split" rotates pairs (i, i + E/2), "interleaved" pairs (2i, 2i+1);
    with P listing the even coordinates first, half_split(P x) = P interleaved(x).
    Angles, cos and sin are computed in float64. No parameters.
    """

    def __init__(self, head_dim, base=10000.0, style="half_split"):
        self._impl = _core.RotaryEmbedding((int(head_dim), float(base), str(style)))

    def forward(self, input, offset=0):
        """input: [..., L, E] (float32/64)  ->  like input; row l is at position offset + l."""
        return self._impl.forward(input, int(offset))

    def forward_qk(self, query, key, offset=0):
        """query, key: [..., L, E] at the same positions  ->  (query', key').

        When decoding with a cache, offset = the number of cached positions."""
        return self._impl.forward_qk(query, key, int(offset))

    def inverse_frequencies(self):
        """θ_i = base^(−2i/E) for i in [0, E/2), float64.  -> [E/2]"""
        return self._impl.inverse_frequencies()

    head_dim = property(lambda self: self._impl.head_dim)
    base = property(lambda self: self._impl.base)
    style = property(lambda self: self._impl.style, doc='"half_split" or "interleaved"')

    def __repr__(self):
        return (f"RotaryEmbedding(head_dim={self.head_dim}, base={self.base}, "
                f"style={self.style!r})")


def apply_rotary(input, offset=0, base=10000.0, style="half_split"):
    """RoPE on input [..., L, E] (E = input's last dim), rows at positions
    offset … offset + L − 1; see RotaryEmbedding.  ->  like input"""
    shape = tuple(getattr(input, "shape", None) or _np.shape(input))
    head_dim = shape[-1] if shape else 0
    return RotaryEmbedding(head_dim, base, style).forward(input, offset)


# --- Added to the scores ------------------------------------------------------------------


def alibi_slopes(num_heads):
    """ALiBi's per-head slopes m_h (float64): 2^(−8/H), 2^(−16/H), …, 2^(−8) for H
    a power of two; otherwise those of the nearest smaller power of two n,
    followed by every other slope of 2n.  -> [num_heads]"""
    return _core.alibi_slopes(int(num_heads))


class Alibi(Module):
    """ALiBi score bias for L queries (positions S − L … S − 1) against S keys.

    Alibi(num_heads, causal=True, dtype=None)

    causal: m_h (j − pos_i) for keys j ≤ pos_i, −inf after (decoder-only);
    otherwise −m_h |j − pos_i| for every key. forward(L, S) -> [H, L, S].
    """

    def __init__(self, num_heads, causal=True, dtype=None):
        self._impl = _core.Alibi((int(num_heads), bool(causal), dtype))

    def forward(self, L, S):
        return self._impl.forward(int(L), int(S))

    slopes = property(lambda self: self._impl.slopes, doc="[num_heads] float64")
    num_heads = property(lambda self: self._impl.num_heads)
    causal = property(lambda self: self._impl.causal)

    def __repr__(self):
        return f"Alibi(num_heads={self.num_heads}, causal={self.causal})"


def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32,
                             max_distance=128):
    """T5's bucket of relative position (key position − query position), as
    Hugging Face transformers' T5Attention._relative_position_bucket.

    relative_position: an int or an integer array  ->  an int or an int64 array
    of the same shape. Bidirectional: half the buckets for keys after the query;
    causal (bidirectional=False): later keys share bucket 0. Distances below
    num_buckets/4 (/2 causal) get a bucket each, larger ones log-spaced buckets
    up to max_distance, beyond which all share the last.
    """
    args = (bool(bidirectional), int(num_buckets), int(max_distance))
    if isinstance(relative_position, _numbers.Integral):
        return int(_core.relative_position_bucket(_np.array([relative_position], _np.int64),
                                                  *args)[0])
    ids = integer_array(relative_position, "relative_position_bucket", "relative_position")
    return _core.relative_position_bucket(ids, *args)


class RelativePositionBias(Module):
    """T5's learned relative position bias: a table [num_buckets, H]; the bias of
    query i and key j for head h is table[bucket(j − pos_i), h].

    RelativePositionBias(num_heads, num_buckets=32, max_distance=128, bidirectional=True,
                         dtype=None, *, generator=None)

    forward(L, S) -> [H, L, S]. Parameter "relative_attention_bias.weight"
    [num_buckets, H] (the name in T5 checkpoints) ~ N(0, 1).
    """

    def __init__(self, num_heads, num_buckets=32, max_distance=128, bidirectional=True,
                 dtype=None, *, generator=None):
        check_generator(generator, "RelativePositionBias")
        self._impl = _core.RelativePositionBias((int(num_heads), int(num_buckets),
                                                 int(max_distance), bool(bidirectional), dtype,
                                                 generator))

    def forward(self, L, S):
        return self._impl.forward(int(L), int(S))

    num_heads = property(lambda self: self._impl.num_heads)
    num_buckets = property(lambda self: self._impl.num_buckets)
    max_distance = property(lambda self: self._impl.max_distance)
    bidirectional = property(lambda self: self._impl.bidirectional)

    def __repr__(self):
        return (f"RelativePositionBias(num_heads={self.num_heads}, "
                f"num_buckets={self.num_buckets}, max_distance={self.max_distance}, "
                f"bidirectional={self.bidirectional})")
