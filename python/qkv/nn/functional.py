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
    precision="bfloat16"       bfloat16 products, float32 softmax and sums

and two companions with the same arguments:

    scaled_dot_product_attention_with_weights  also returns the attention weights
                               (after dropout, as multiplied with the values)
    scaled_dot_product_attention_with_grad     returns (output, grad_fn); grad_fn(dO)
                               gives the gradients of query, key, value and a float
                               attn_mask (the backward pass, without torch.autograd)

qkv.runtime.last_sdpa_kernel() names the kernel the last call ran.

Torch in, torch out. Arguments may be numpy arrays or CPU torch tensors, mixed
freely. The rule: if any tensor argument (query, key, value, attn_mask,
dropout_mask, alibi_slopes; input, weight, bias) is a torch.Tensor, every
array result is a torch tensor (sharing qkv's output memory, no copy; gradients
from a grad_fn too); otherwise the results are numpy arrays. bfloat16 inputs
are torch tensors, so their results are too.

One entry point for torch: given torch tensors, scaled_dot_product_attention
runs as the torch operator torch.ops.qkv.scaled_dot_product_attention (see
qkv.torch), with or without grad, so torch.compile(fullgraph=True) traces it
and autograd differentiates it with qkv's fused backward; with dropout its
seed is one draw from `generator` (or qkv's default generator), so the keep
mask differs from the one the same generator gives numpy inputs. (Drawing
from a qkv.Generator is a graph break under torch.compile; with dropout
there, call qkv.torch.scaled_dot_product_attention, which draws from torch's
RNG.)
scaled_dot_product_attention_with_weights and linear have no autograd and
raise RuntimeError there (call them under torch.no_grad()).
scaled_dot_product_attention_with_grad returns a detached output by design:
its grad_fn is the backward.
"""

import collections as _collections
import threading as _threading

from .. import _core, _torch_io

__all__ = [
    "SdpaBackward",
    "SdpaGradients",
    "linear",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_with_grad",
    "scaled_dot_product_attention_with_weights",
]

# The kernel of this thread's last SDPA call (read by qkv.runtime.last_sdpa_kernel).
_last_call = _threading.local()


def _sdpa_signature(core, need_weights=False, autograd=None):
    """Gives the function it decorates scaled_dot_product_attention's signature.

    That signature is written once, here. The returned function passes all its
    arguments to `core` (_core's entry) as one tuple, in signature order (the
    bindings read them in that order), and hands the result (output, weights or
    None, keep mask or None, the kernel's name or an SdpaBackward) and
    return_dropout_mask to the decorated function, which shapes what the
    caller gets.

    Torch in, torch out: with a torch tensor among the tensor arguments, the
    results are torch tensors. For plain torch tensors, `autograd(torch,
    *arguments)` is asked first: its result, unless None, is the call's (the
    torch operator's, with or without grad, for scaled_dot_product_attention).
    """

    def decorate(finish):
        name = finish.__name__

        def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                 enable_gqa=False, *, causal=None, dropout_mask=None, return_dropout_mask=False,
                 generator=None, window_left=None, window_right=None, alibi_slopes=None,
                 softcap=None, backend="auto", precision="float32"):
            args = (query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, causal,
                    dropout_mask, return_dropout_mask, generator, window_left, window_right,
                    alibi_slopes, softcap, backend, precision)
            torch = _torch_io.torch_if_any(query, key, value, attn_mask, dropout_mask,
                                           alibi_slopes)
            # Torch tensors always take the torch operator, grad or not, so
            # that torch.compile traces this function instead of breaking on
            # the binding (one entry point for torch; see qkv.torch).
            if autograd is not None and torch is not None and _torch_io.plain_tensors(
                    torch, query, key, value, attn_mask, dropout_mask, alibi_slopes):
                result = autograd(torch, *args)
                if result is not None:
                    return result
            output, weights, keep, kernel = core(args, need_weights, name)
            if torch is not None:
                output, weights, keep = (_torch_io.as_torch(torch, x)
                                         for x in (output, weights, keep))
            if isinstance(kernel, _core.SdpaBackward):
                kernel = SdpaBackward(kernel, keep, torch)
            return finish(output, weights, keep, kernel, return_dropout_mask)

        sdpa.__name__ = sdpa.__qualname__ = name
        sdpa.__code__ = sdpa.__code__.replace(co_name=name)  # as tracebacks name it
        sdpa.__doc__ = finish.__doc__
        sdpa.__module__ = finish.__module__
        return sdpa

    return decorate


def _sdpa_autograd(torch, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                   causal, dropout_mask, return_dropout_mask, generator, window_left,
                   window_right, alibi_slopes, softcap, backend, precision):
    """scaled_dot_product_attention through the torch operator qkv.torch
    registers: autograd differentiates it and torch.compile traces it."""
    from .. import torch as qkv_torch

    seed = None
    if dropout_p > 0 and dropout_mask is None:
        # One draw from qkv's generator seeds the op's dropout.
        seed = qkv_torch._dropout_seed(generator if generator is not None else
                                       _core.default_generator())
    query, key, value, attn_mask, dropout_mask = (
        _torch_io.torch_input(torch, x) for x in (query, key, value, attn_mask, dropout_mask))
    output, keep = qkv_torch._call_op(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                      enable_gqa, causal, window_left, window_right,
                                      alibi_slopes, softcap, seed, dropout_mask,
                                      return_dropout_mask and dropout_p > 0, backend, precision)
    if return_dropout_mask:
        return output, keep if dropout_p > 0 else None
    return output


def _weights_autograd(torch, query, key, value, attn_mask, *args):
    """None (run _core) unless an input requires grad, which this has no autograd for."""
    if not _torch_io.needs_grad(torch, query, key, value, attn_mask):
        return None
    raise RuntimeError(
        "scaled_dot_product_attention_with_weights(): an input requires grad, but qkv has no "
        "autograd for the attention weights; call it under torch.no_grad() (inspection), or "
        "call scaled_dot_product_attention, whose output autograd differentiates")


# The three SDPA functions: each has the signature _sdpa_signature writes;
# the bodies below only shape what _core returned.
@_sdpa_signature(_core.scaled_dot_product_attention, autograd=_sdpa_autograd)
def scaled_dot_product_attention(output, weights, keep, kernel, return_dropout_mask):
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
    precision: "float32" (default) or "bfloat16" ("bf16"): with "bfloat16",
        float32 inputs are rounded to bfloat16 for the two products (q·kᵀ and
        P·v, vdpbf16ps where the CPU has AVX512_BF16); softmax and sums stay
        float32 and the output is float32. "int8" means "bfloat16" here.
        Problems of at most four queries (decoding) keep float32 products.
        bfloat16 tensors always take bfloat16 products.

    A query row whose keys are all masked gives 0 (as torch 2.13's SDPA).
    """
    _last_call.kernel = kernel
    if return_dropout_mask:
        return output, keep
    return output


@_sdpa_signature(_core.scaled_dot_product_attention, need_weights=True,
                 autograd=_weights_autograd)
def scaled_dot_product_attention_with_weights(output, weights, keep, kernel, return_dropout_mask):
    """scaled_dot_product_attention that also returns the attention weights.

    -> (output [..., H, L, Ev], weights [..., H, L, S]), and the bool keep mask
    [..., H, L, S] (None when dropout_p == 0) as a third element when
    return_dropout_mask=True.

    The weights are those multiplied with the values: softmax rows (0 for a
    fully masked row), after dropout and its 1/(1-p) scaling. The arguments are
    those of scaled_dot_product_attention.
    """
    _last_call.kernel = kernel
    if return_dropout_mask:
        return output, weights, keep
    return output, weights


SdpaGradients = _collections.namedtuple("SdpaGradients", ["query", "key", "value", "attn_mask"])
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

    __slots__ = ("_impl", "_torch", "dropout_mask")

    def __init__(self, impl, dropout_mask, torch=None):
        # torch: the torch module when the forward's inputs were torch
        # tensors (the results are then torch tensors too), else None.
        self._impl = impl
        self._torch = torch
        self.dropout_mask = dropout_mask

    @property
    def kernel(self):
        return self._impl.kernel

    @property
    def logsumexp(self):
        return _torch_io.as_torch(self._torch, self._impl.logsumexp)

    def __call__(self, grad_output):
        return SdpaGradients(*_torch_io.as_torch(self._torch, self._impl(grad_output)))

    def __repr__(self):
        return f"<qkv SdpaBackward kernel={self.kernel!r}>"


@_sdpa_signature(_core.scaled_dot_product_attention_with_grad)
def scaled_dot_product_attention_with_grad(output, weights, keep, grad_fn, return_dropout_mask):
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
    _last_call.kernel = grad_fn.kernel
    return output, grad_fn


def linear(input, weight, bias=None):
    """y = input @ weightᵀ + bias, as torch.nn.functional.linear.

    input: [..., in]  weight: [out, in]  bias: [out] or None  ->  [..., out]

    No autograd: with an input that requires grad (grad mode on) it raises
    instead of returning a detached result.
    """
    torch = _torch_io.torch_if_any(input, weight, bias)
    if torch is not None and _torch_io.needs_grad(torch, input, weight, bias):
        raise RuntimeError("linear(): an input requires grad, but qkv's linear has no autograd; "
                           "call it under torch.no_grad(), or use torch.nn.functional.linear")
    return _torch_io.as_torch(torch, _core.linear((input, weight, bias)))
