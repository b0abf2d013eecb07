"""qkv.nn.functional: torch.nn.functional's attention ops.

scaled_dot_product_attention has torch 2.13's signature and semantics. qkv adds
keyword-only extras that torch does not have:

    causal="bottom_right"      causal mask aligned to the last key (decoding with a
                               KV cache); causal="top_left" equals is_causal=True
    dropout_mask=keep          use this bool keep mask (True = keep) for dropout
                               instead of sampling one
    return_dropout_mask=True   also return the keep mask dropout used
    generator=qkv.Generator(s) draw dropout from this generator, not the default
    window_left=, window_right=  sliding window: query i sees keys i-left .. i+right
    alibi_slopes=[...]         ALiBi: adds -slope[h]·|i - j| to head h's scores
    softcap=c                  logit soft-capping: scores become c·tanh(scores / c)
    backend="auto"             "fused" (float32 kernels) or "reference" (float64
                               arithmetic) forces an implementation

and two companions with the same arguments:

    scaled_dot_product_attention_with_weights  also returns the attention weights
                               (after dropout, as multiplied with the values)
    scaled_dot_product_attention_with_grad     returns (output, grad_fn); grad_fn(dO)
                               gives the gradients of query, key, value and a float
                               attn_mask (the backward pass, without torch.autograd)

qkv.runtime.last_sdpa_kernel() names the kernel the last call ran.
"""

import collections
import threading
import warnings

import numpy as np

from .. import _core

__all__ = [
    "SdpaBackward",
    "SdpaGradients",
    "linear",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_with_grad",
    "scaled_dot_product_attention_with_weights",
]

# The kernel of this thread's last SDPA call (read by qkv.runtime.last_sdpa_kernel).
_last_call = threading.local()


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


def _bfloat16_out(x):
    """_core returns bfloat16 results as uint16 bit patterns (numpy has no
    bfloat16); they came from torch.bfloat16 inputs, so they go back as such."""
    if isinstance(x, np.ndarray) and x.dtype == np.uint16:
        import torch  # already imported: the inputs were torch tensors

        if x.flags.writeable:
            return torch.from_numpy(x).view(torch.bfloat16)
        # The output of a *_with_grad call is read-only on purpose (its backward
        # reads it again); torch would warn that it cannot mark it so.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(x).view(torch.bfloat16)
    return x


def _check_generator(generator, function):
    if generator is not None and not isinstance(generator, _core.Generator):
        raise TypeError(f"{function}(): argument 'generator' must be a qkv.Generator or None, "
                        f"got {type(generator).__name__}")


def _alibi_list(alibi_slopes, function):
    if alibi_slopes is None:
        return []
    slopes = np.asarray(alibi_slopes, dtype=np.float64)
    if slopes.ndim != 1:
        raise ValueError(f"{function}(): argument 'alibi_slopes' must be 1-D (one slope per "
                         f"query head), got shape {tuple(slopes.shape)}")
    return slopes.tolist()


def _sdpa(function, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
          need_weights, causal, dropout_mask, return_dropout_mask, generator, window_left,
          window_right, alibi_slopes, softcap, backend, core=None):
    """Calls _core's SDPA; returns (output, weights, keep mask, kernel or grad_fn)."""
    _check_generator(generator, function)
    if core is None:
        core = _core.scaled_dot_product_attention
    # Positional: pybind11 matches keyword arguments by name, which costs
    # microseconds per call on small shapes.
    result = core(
        query,
        key,
        value,
        attn_mask,
        float(dropout_p),
        _causal_name(bool(is_causal), causal, function),
        None if scale is None else float(scale),
        bool(enable_gqa),
        need_weights,
        dropout_mask,
        bool(return_dropout_mask),
        generator,
        -1 if window_left is None else int(window_left),
        -1 if window_right is None else int(window_right),
        _alibi_list(alibi_slopes, function),
        0.0 if softcap is None else float(softcap),
        backend,
        function,
    )
    last = result[3]
    _last_call.kernel = last if isinstance(last, str) else last.kernel
    return (_bfloat16_out(result[0]), _bfloat16_out(result[1])) + tuple(result[2:])


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, *,
                                 causal=None, dropout_mask=None, return_dropout_mask=False,
                                 generator=None, window_left=None, window_right=None,
                                 alibi_slopes=None, softcap=None, backend="auto"):
    """softmax(query @ keyᵀ · scale + mask) @ value, as torch.nn.functional's.

    query: [..., H, L, E]  key: [..., Hkv, S, E]  value: [..., Hkv, S, Ev]  ->  [..., H, L, Ev]

    Leading dims broadcast. All three float32 or float64 (numpy arrays or torch
    tensors), or all three torch.bfloat16 tensors (computed in float32, the
    output a torch.bfloat16 tensor); the same dtype.

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
    window_left, window_right: sliding window, query i sees keys j with
        i' - window_left <= j <= i' + window_right (i' = i + S - L with
        causal="bottom_right", else i). None = unbounded on that side.
    alibi_slopes: ALiBi, one slope per query head ([H]); adds
        -slope[h]·|i' - j| to the scores of head h.
    softcap: logit soft-capping, scores become softcap·tanh(scores / softcap)
        before masks and biases. None or 0 = off.
    backend: "auto" (the fused float32 kernel for float32, the reference for
        float64), "fused" (float32 only) or "reference" (float64 arithmetic,
        any float dtype). qkv.runtime.last_sdpa_kernel() tells which ran.

    A query row whose keys are all masked gives 0 (as torch 2.13's SDPA).
    """
    output, _, keep, _ = _sdpa("scaled_dot_product_attention", query, key, value, attn_mask,
                               dropout_p, is_causal, scale, enable_gqa, False, causal,
                               dropout_mask, return_dropout_mask, generator, window_left,
                               window_right, alibi_slopes, softcap, backend)
    if return_dropout_mask:
        return output, keep
    return output


def scaled_dot_product_attention_with_weights(query, key, value, attn_mask=None, dropout_p=0.0,
                                              is_causal=False, scale=None, enable_gqa=False, *,
                                              causal=None, dropout_mask=None,
                                              return_dropout_mask=False, generator=None,
                                              window_left=None, window_right=None,
                                              alibi_slopes=None, softcap=None, backend="auto"):
    """scaled_dot_product_attention that also returns the attention weights.

    -> (output [..., H, L, Ev], weights [..., H, L, S]), and the bool keep mask
    [..., H, L, S] (None when dropout_p == 0) as a third element when
    return_dropout_mask=True.

    The weights are those multiplied with the values: softmax rows (0 for a
    fully masked row), after dropout and its 1/(1-p) scaling. The arguments are
    those of scaled_dot_product_attention.
    """
    output, weights, keep, _ = _sdpa("scaled_dot_product_attention_with_weights", query, key,
                                     value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                                     True, causal, dropout_mask, return_dropout_mask, generator,
                                     window_left, window_right, alibi_slopes, softcap, backend)
    if return_dropout_mask:
        return output, weights, keep
    return output, weights


SdpaGradients = collections.namedtuple("SdpaGradients", ["query", "key", "value", "attn_mask"])
SdpaGradients.__doc__ = """Gradients of scaled_dot_product_attention's inputs, shaped like them.

query, key, value: arrays like the inputs (key and value summed over the query
    heads of a GQA group and over broadcast batch dims).
attn_mask: like a floating attn_mask; None for a bool mask or no mask.
"""


class SdpaBackward:
    """The backward pass of one scaled_dot_product_attention_with_grad call.

    grad_fn(grad_output) -> SdpaGradients(query, key, value, attn_mask)

    grad_output = ∂loss/∂output, shaped like the output [..., H, L, Ev]. The
    call may be repeated (each returns fresh arrays). It reuses the forward's
    output and per-row log-sum-exp (FlashAttention-2 recomputation, no L×S
    matrix) and replays the forward's dropout: the same weights are dropped.

    The inputs are held, not copied: do not change query, key, value or the
    masks in place before calling it (the output and logsumexp it keeps are
    read-only arrays).

    Attributes:
    kernel: the kernel that ran the forward and runs the backward, e.g.
        "fused-avx512" or "reference".
    logsumexp: float64 [..., H, L], log Σ_j exp(score_ij) per query row
        (-inf for a fully masked row).
    dropout_mask: the bool keep mask [..., H, L, S] when the forward was called
        with return_dropout_mask=True and dropout_p > 0, else None.
    """

    __slots__ = ("_impl", "dropout_mask")

    def __init__(self, impl, dropout_mask):
        self._impl = impl
        self.dropout_mask = dropout_mask

    @property
    def kernel(self):
        return self._impl.kernel

    @property
    def logsumexp(self):
        return self._impl.logsumexp

    def __call__(self, grad_output):
        return SdpaGradients(*(_bfloat16_out(g) for g in self._impl(grad_output)))

    def __repr__(self):
        return f"<qkv SdpaBackward kernel={self.kernel!r}>"


def scaled_dot_product_attention_with_grad(query, key, value, attn_mask=None, dropout_p=0.0,
                                           is_causal=False, scale=None, enable_gqa=False, *,
                                           causal=None, dropout_mask=None,
                                           return_dropout_mask=False, generator=None,
                                           window_left=None, window_right=None,
                                           alibi_slopes=None, softcap=None, backend="auto"):
    """scaled_dot_product_attention, and a handle that runs its backward pass.

    -> (output [..., H, L, Ev], grad_fn)

        out, grad_fn = F.scaled_dot_product_attention_with_grad(q, k, v, is_causal=True)
        dq, dk, dv, dmask = grad_fn(grad_out)     # an SdpaGradients named tuple

    This is what torch.autograd does for torch's SDPA, without a graph: the
    gradients equal torch's (q.grad, k.grad, v.grad, attn_mask.grad). The
    arguments are those of scaled_dot_product_attention; with
    return_dropout_mask=True the keep mask is grad_fn.dropout_mask. The output
    is a read-only array (the backward reads it again). See SdpaBackward.
    """
    output, _, keep, impl = _sdpa("scaled_dot_product_attention_with_grad", query, key, value,
                                  attn_mask, dropout_p, is_causal, scale, enable_gqa, False,
                                  causal, dropout_mask, return_dropout_mask, generator,
                                  window_left, window_right, alibi_slopes, softcap, backend,
                                  core=_core.scaled_dot_product_attention_with_grad)
    return output, SdpaBackward(impl, keep)


def linear(input, weight, bias=None):
    """y = input @ weightᵀ + bias, as torch.nn.functional.linear.

    input: [..., in]  weight: [out, in]  bias: [out] or None  ->  [..., out]
    """
    return _core.linear(input, weight, bias)
