"""qkv.torch: qkv's attention as PyTorch operators, with autograd.

    import qkv.torch
    out = qkv.torch.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.sum().backward()                      # qkv's fused backward

Importing this module registers two custom operators (torch.library):

    torch.ops.qkv.scaled_dot_product_attention            (see FORWARD_SCHEMA)
    torch.ops.qkv.scaled_dot_product_attention_backward   (see BACKWARD_SCHEMA)

qkv.torch.scaled_dot_product_attention (and qkv.nn.functional's with torch
tensors) calls the forward op, except where the op's dispatch would do
nothing but cost time: an eager call with no input for autograd, no trace,
mode or transform runs the op's kernel directly on numpy views of the same
memory (the profiler sees it under the op's name).

The forward's autograd formula calls the backward op, qkv's fused backward
(FlashAttention-2 recomputation from the forward's output and per-row
log-sum-exp: no L×S matrix is kept). Both ops have fake (meta) kernels, so
torch.compile(fullgraph=True) traces them, forward and backward, without a
graph break. CPU tensors of dtype float32, float64 or bfloat16.

The output is laid out like the query and each gradient like its input (the
layout torch's CPU flash kernel gives): for the heads of [B, L, H, E] buffers,
q = x.view(B, L, H, E).transpose(1, 2) as Hugging Face passes them, the output
is the heads of a [B, L, H, Ev] buffer and dQ, dK, dV those of [B, L, H, E]
buffers, so that transposing back costs no copy (qkv's kernels write through
the strides). Contiguous inputs give contiguous results.

Dropout is deterministic given a seed: the op takes `dropout_seed`, a 0-d
int64 tensor, and samples its keep mask from qkv.Generator(seed); the
backward replays the same mask from the same seed. The public function
draws that seed from the `generator` it is given (a torch.Generator or a
qkv.Generator) or, by default, from torch's global RNG (torch.manual_seed
makes it repeatable; under torch.compile the draw is part of the graph).

qkv.torch.nn holds torch.nn.Modules on these ops (MultiheadAttention).

Only torch is imported here; the rest of qkv stays usable without it.
"""

import sys

import torch

from . import _core
from .nn import functional as _functional

__all__ = ["BACKWARD_SCHEMA", "FORWARD_SCHEMA", "nn", "scaled_dot_product_attention"]

# The arguments qkv's SDPA takes, shared by both ops. causal is "none",
# "top_left" or "bottom_right"; alibi_slopes is one slope per query head;
# softcap None or 0 is off; dropout_seed is a 0-d int64 tensor (needed when
# dropout_p > 0 and no dropout_mask is given); dropout_mask a bool keep mask;
# backend and precision as in qkv.nn.functional.scaled_dot_product_attention.
_OPTIONS = ("Tensor? attn_mask=None, float dropout_p=0.0, str causal=\"none\", "
            "float? scale=None, bool enable_gqa=False, int? window_left=None, "
            "int? window_right=None, Tensor? alibi_slopes=None, float? softcap=None, "
            "Tensor? dropout_seed=None, Tensor? dropout_mask=None, "
            "bool return_dropout_mask=False, str backend=\"auto\", str precision=\"float32\"")

# -> (output [..., H, L, Ev], logsumexp [..., H, L] float64, keep mask
#     [..., H, L, S] bool when return_dropout_mask and dropout_p > 0, else empty)
FORWARD_SCHEMA = ("(Tensor query, Tensor key, Tensor value, " + _OPTIONS +
                  ") -> (Tensor, Tensor, Tensor)")

# -> (grad_query, grad_key, grad_value, grad_attn_mask: like a float attn_mask
#     when attn_mask_requires_grad, else empty). output and logsumexp are the
#     forward's. A mask that needs no gradient spares the [..., H, L, S] score
#     gradients (and keeps bfloat16 products with precision="bfloat16").
BACKWARD_SCHEMA = ("(Tensor grad_output, Tensor query, Tensor key, Tensor value, Tensor output, "
                   "Tensor logsumexp, " + _OPTIONS + ", bool attn_mask_requires_grad=True) -> "
                   "(Tensor, Tensor, Tensor, Tensor)")

_NAME = "scaled_dot_product_attention"
# Results laid out like the inputs (qkv's SdpaLayout::kLikeInputs).
_LAYOUT = "like_inputs"


def _core_args(query, key, value, attn_mask, dropout_p, causal, scale, enable_gqa, window_left,
               window_right, alibi_slopes, softcap, dropout_seed, dropout_mask,
               return_dropout_mask, backend, precision):
    """The tuple _core reads, in qkv.nn.functional.scaled_dot_product_attention's order."""
    generator = None
    if dropout_seed is not None:
        generator = _core.Generator(int(dropout_seed) % (1 << 64))
    return (query, key, value, attn_mask, dropout_p, False, scale, enable_gqa,
            None if causal == "none" else causal, dropout_mask, return_dropout_mask, generator,
            window_left, window_right, alibi_slopes, softcap, backend, precision)


def _as_torch(x, dtype):
    """A torch tensor over _core's result (numpy shares its memory); None -> empty."""
    if x is None:
        return torch.empty(0, dtype=dtype)
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(x)


def _forward_kernel(query, key, value, attn_mask, dropout_p, causal, scale, enable_gqa,
                    window_left, window_right, alibi_slopes, softcap, dropout_seed, dropout_mask,
                    return_dropout_mask, backend, precision):
    """The forward op's CPU kernel, also run directly by _call_op: the op's
    arguments (torch tensors, or numpy views of them) -> (output, logsumexp,
    keep mask) as torch tensors."""
    args = _core_args(query, key, value, attn_mask, dropout_p, causal, scale, enable_gqa,
                      window_left, window_right, alibi_slopes, softcap, dropout_seed, dropout_mask,
                      return_dropout_mask, backend, precision)
    output, lse, keep, kernel = _core.scaled_dot_product_attention_op(args, _NAME, _LAYOUT)
    _functional._last_call.kernel = kernel  # for qkv.runtime.last_sdpa_kernel()
    # (output is never None: its dtype argument is not used)
    return _as_torch(output, None), _as_torch(lse, torch.float64), _as_torch(keep, torch.bool)


@torch.library.custom_op("qkv::scaled_dot_product_attention", mutates_args=(),
                         device_types="cpu", schema=FORWARD_SCHEMA)
def _forward(query, key, value, attn_mask=None, dropout_p=0.0, causal="none", scale=None,
             enable_gqa=False, window_left=None, window_right=None, alibi_slopes=None,
             softcap=None, dropout_seed=None, dropout_mask=None, return_dropout_mask=False,
             backend="auto", precision="float32"):
    return _forward_kernel(query, key, value, attn_mask, dropout_p, causal, scale, enable_gqa,
                           window_left, window_right, alibi_slopes, softcap, dropout_seed,
                           dropout_mask, return_dropout_mask, backend, precision)


@torch.library.custom_op("qkv::scaled_dot_product_attention_backward", mutates_args=(),
                         device_types="cpu", schema=BACKWARD_SCHEMA)
def _backward(grad_output, query, key, value, output, logsumexp, attn_mask=None, dropout_p=0.0,
              causal="none", scale=None, enable_gqa=False, window_left=None, window_right=None,
              alibi_slopes=None, softcap=None, dropout_seed=None, dropout_mask=None,
              return_dropout_mask=False, backend="auto", precision="float32",
              attn_mask_requires_grad=True):
    args = _core_args(query, key, value, attn_mask, dropout_p, causal, scale, enable_gqa,
                      window_left, window_right, alibi_slopes, softcap, dropout_seed, dropout_mask,
                      False, backend, precision)
    grads = _core.scaled_dot_product_attention_op_backward(
        grad_output, output, logsumexp, args, _NAME + "_backward", _LAYOUT,
        attn_mask_requires_grad)
    return tuple(_as_torch(g, query.dtype) for g in grads)


def _output_lead(query, key, value, enable_gqa):
    """The output's dims before [L, Ev]: batch dims broadcast, heads from the query
    (as qkv's prepare_sdpa)."""
    if enable_gqa and query.dim() >= 3 and key.dim() >= 3 and value.dim() >= 3:
        batch = torch.broadcast_shapes(query.shape[:-3], key.shape[:-3], value.shape[:-3])
        return (*batch, query.shape[-3])
    return tuple(torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2]))


def _empty_laid_out(like, shape):
    """An empty tensor of `shape` laid out as qkv lays out a result computed
    for the input `like` (src/ops/sdpa_prepare.cc, empty_laid_out): as
    torch.empty_like(like) when `shape` is like's, else like's dims in that
    memory order, packed; contiguous where the leading dims differ or the last
    dim would not be innermost."""
    shape = tuple(shape)
    n = len(shape)
    if like.dim() != n or n < 2 or tuple(like.shape[:-1]) != shape[:-1]:
        return like.new_empty(shape)
    out = torch.empty_like(like)
    if shape[-1] != like.shape[-1]:
        strides = out.stride()
        order = sorted(range(n), key=lambda d: -strides[d])  # stable: ties in dim order
        inverse = sorted(range(n), key=lambda i: order[i])
        out = like.new_empty([shape[d] for d in order]).permute(inverse)
    if shape[-1] != 1 and out.stride(-1) != 1:
        return like.new_empty(shape)
    return out


@_forward.register_fake
def _forward_fake(query, key, value, attn_mask=None, dropout_p=0.0, causal="none", scale=None,
                  enable_gqa=False, window_left=None, window_right=None, alibi_slopes=None,
                  softcap=None, dropout_seed=None, dropout_mask=None, return_dropout_mask=False,
                  backend="auto", precision="float32"):
    lead = _output_lead(query, key, value, enable_gqa)
    L, S, Ev = query.shape[-2], key.shape[-2], value.shape[-1]
    output = _empty_laid_out(query, (*lead, L, Ev))
    lse = query.new_empty((*lead, L), dtype=torch.float64)
    keep_shape = (*lead, L, S) if return_dropout_mask and dropout_p > 0 else (0,)
    return output, lse, query.new_empty(keep_shape, dtype=torch.bool)


@_backward.register_fake
def _backward_fake(grad_output, query, key, value, output, logsumexp, attn_mask=None,
                   dropout_p=0.0, causal="none", scale=None, enable_gqa=False, window_left=None,
                   window_right=None, alibi_slopes=None, softcap=None, dropout_seed=None,
                   dropout_mask=None, return_dropout_mask=False, backend="auto",
                   precision="float32", attn_mask_requires_grad=True):
    float_mask = attn_mask is not None and attn_mask.dtype != torch.bool
    mask_shape = attn_mask.shape if float_mask and attn_mask_requires_grad else (0,)
    # Each gradient laid out like its input (a float mask's contiguous).
    return (_empty_laid_out(query, query.shape), _empty_laid_out(key, key.shape),
            _empty_laid_out(value, value.shape), query.new_empty(mask_shape))


# The op's inputs in schema order (the backward op takes them after its own
# grad_output, output and logsumexp).
_INPUTS = ("query", "key", "value", "attn_mask", "dropout_p", "causal", "scale", "enable_gqa",
           "window_left", "window_right", "alibi_slopes", "softcap", "dropout_seed",
           "dropout_mask", "return_dropout_mask", "backend", "precision")
_TENSOR_INPUTS = ("query", "key", "value", "attn_mask", "alibi_slopes", "dropout_seed",
                  "dropout_mask")


def _setup_context(ctx, inputs, output):
    ctx.options = {name: value for name, value in zip(_INPUTS, inputs)
                   if name not in _TENSOR_INPUTS}
    ctx.options["return_dropout_mask"] = False
    tensors = [inputs[_INPUTS.index(name)] for name in _TENSOR_INPUTS]
    ctx.tensor_present = [t is not None for t in tensors]
    ctx.save_for_backward(*[t for t in tensors if t is not None], output[0], output[1])
    ctx.mark_non_differentiable(output[1], output[2])


def _autograd_backward(ctx, grad_output, _grad_lse, _grad_keep):
    saved = list(ctx.saved_tensors)
    out, lse = saved[-2:]
    present = iter(saved[:-2])
    tensors = {name: next(present) if there else None
               for name, there in zip(_TENSOR_INPUTS, ctx.tensor_present)}
    if grad_output is None:
        grad_output = torch.zeros_like(out)
    # One gradient per argument the call passed: the dispatcher drops trailing
    # arguments equal to their defaults, so there may be fewer than _INPUTS.
    need = ctx.needs_input_grad
    mask_index = _INPUTS.index("attn_mask")
    float_mask = tensors["attn_mask"] is not None and tensors["attn_mask"].dtype != torch.bool
    mask_grad = float_mask and mask_index < len(need) and need[mask_index]
    kwargs = dict(ctx.options)
    kwargs.update({k: v for k, v in tensors.items() if k not in ("query", "key", "value")})
    dq, dk, dv, dmask = torch.ops.qkv.scaled_dot_product_attention_backward(
        grad_output, tensors["query"], tensors["key"], tensors["value"], out, lse,
        attn_mask_requires_grad=mask_grad, **kwargs)
    grads = [None] * len(need)
    for i, grad in enumerate((dq, dk, dv, dmask if mask_grad else None)):
        if i < len(need) and need[i]:
            grads[i] = grad
    return tuple(grads)


_forward.register_autograd(_autograd_backward, setup_context=_setup_context)


def _causal_bias_alignment(mask, query, key):
    """"top_left" / "bottom_right" for a torch CausalBias attn_mask, else None."""
    kind = type(mask)
    if kind.__name__ != "CausalBias" or not kind.__module__.startswith("torch."):
        return None
    L, S = query.shape[-2], key.shape[-2]
    if (mask.seq_len_q, mask.seq_len_kv) != (L, S):
        raise ValueError(f"{_NAME}(): attn_mask is a torch CausalBias for {mask.seq_len_q} "
                         f"queries and {mask.seq_len_kv} keys, but the query has {L} and the "
                         f"key {S}")
    variant = mask.variant.name
    alignments = {"UPPER_LEFT": "top_left", "LOWER_RIGHT": "bottom_right"}
    if variant not in alignments:
        raise ValueError(f"{_NAME}(): attn_mask is a torch CausalBias of variant {variant}, "
                         "which qkv does not know (UPPER_LEFT and LOWER_RIGHT it does)")
    return alignments[variant]


def _causal_name(is_causal, causal, attn_mask, query, key):
    """(causal as the op's str, attn_mask) from torch's and qkv's causal arguments."""
    if causal is None or causal is False:
        name = "top_left" if is_causal else "none"
    else:
        if is_causal:
            raise ValueError(f"{_NAME}(): pass either is_causal=True or causal={causal!r}, "
                             "not both")
        name = "top_left" if causal is True else causal
        if name not in ("top_left", "bottom_right"):
            raise ValueError(f"{_NAME}(): argument 'causal' must be None, 'top_left' or "
                             f"'bottom_right', got {causal!r}")
    if attn_mask is not None:
        bias = _causal_bias_alignment(attn_mask, query, key)
        if bias is not None:
            if name != "none":
                raise ValueError(f"{_NAME}(): attn_mask is a torch CausalBias; do not also "
                                 "pass is_causal or causal")
            return bias, None
    return name, attn_mask


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _dropout_seed(generator):
    """A 0-d int64 tensor drawn from `generator`: a torch.Generator, a
    qkv.Generator, or None for torch's global RNG."""
    if isinstance(generator, _core.Generator):
        seed = generator.next_u64()
        return torch.tensor(seed - (1 << 64) if seed > _INT64_MAX else seed, dtype=torch.int64)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"{_NAME}(): argument 'generator' must be a torch.Generator, a "
                        f"qkv.Generator or None, got {type(generator).__name__}")
    return torch.randint(_INT64_MIN, _INT64_MAX, (), dtype=torch.int64, generator=generator)


def _alibi_tensor(alibi_slopes):
    """The slopes as a float64 tensor (the op's Tensor? argument)."""
    if alibi_slopes is None:
        return None
    if isinstance(alibi_slopes, torch.Tensor) and alibi_slopes.requires_grad and \
            torch.is_grad_enabled():
        raise ValueError(f"{_NAME}(): argument 'alibi_slopes' requires grad, but qkv has no "
                         "gradient for ALiBi slopes; pass alibi_slopes.detach() (or plain "
                         "numbers)")
    return torch.as_tensor(alibi_slopes, dtype=torch.float64)


# The dtypes a direct call takes for each tensor argument of _call_op (query,
# key, value, attn_mask, alibi_slopes, dropout_seed, dropout_mask): numpy views
# of them are what _core accepts. Others go through the op, whose errors name
# torch's dtypes.
_FLOATS = frozenset((torch.float32, torch.float64))
_DIRECT_DTYPES = (_FLOATS, _FLOATS, _FLOATS, _FLOATS | {torch.bool}, _FLOATS,
                  frozenset((torch.int64,)), frozenset((torch.bool,)))


def _arrays_for_direct_call(*tensors):
    """numpy views of the op's tensor arguments (None stays None) when an eager
    call may run the forward's kernel without torch's dispatcher, else None.

    That is when the call has nothing for the dispatcher to do: no input that
    autograd would differentiate, no torch.compile trace, torch
    function/dispatch mode, functorch transform or autocast, and every tensor a
    plain CPU torch.Tensor (no subclass, such as a FakeTensor). The torch
    profiler sees such a call as a record_function of the op's name. Through the
    dispatcher a one-query decoding step costs several times the kernel;
    _core reads numpy arrays faster than torch tensors. The result is the
    op's, to the bit (the same kernel on the same memory).
    """
    if torch.compiler.is_compiling() or \
            torch._C._len_torch_function_stack() or torch._C._len_torch_dispatch_stack() or \
            torch._C._are_functorch_transforms_active() or torch._C._is_any_autocast_enabled():
        return None
    grad_enabled = torch.is_grad_enabled()
    arrays = []
    try:
        for t, dtypes in zip(tensors, _DIRECT_DTYPES):
            if t is None:
                arrays.append(None)
            elif type(t) is not torch.Tensor or not t.is_cpu or t.dtype not in dtypes:
                return None
            elif not t.requires_grad:
                arrays.append(t.numpy())  # raises for a tensor with its negative bit set
            elif grad_enabled:
                return None
            else:
                arrays.append(t.detach().numpy())
    except RuntimeError:
        return None
    return arrays


def _call_op(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, causal,
             window_left, window_right, alibi_slopes, softcap, dropout_seed, dropout_mask=None,
             return_dropout_mask=False, backend="auto", precision="float32"):
    """torch.ops.qkv.scaled_dot_product_attention from the Python-level arguments;
    -> (output, keep mask tensor)."""
    causal, attn_mask = _causal_name(is_causal, causal, attn_mask, query, key)
    alibi_slopes = _alibi_tensor(alibi_slopes)
    arrays = _arrays_for_direct_call(query, key, value, attn_mask, alibi_slopes, dropout_seed,
                                     dropout_mask)
    if arrays is not None:
        q, k, v, mask, slopes, seed, keep_mask = arrays
        args = (q, k, v, mask, float(dropout_p), causal, scale, bool(enable_gqa), window_left,
                window_right, slopes, softcap, seed, keep_mask, bool(return_dropout_mask),
                backend, precision)
        if torch._C._autograd._profiler_enabled():
            with torch.autograd.profiler.record_function("qkv::" + _NAME):
                output, _, keep = _forward_kernel(*args)
        else:
            output, _, keep = _forward_kernel(*args)
        return output, keep
    output, _, keep = torch.ops.qkv.scaled_dot_product_attention(
        query, key, value, attn_mask, float(dropout_p), causal, scale, bool(enable_gqa),
        window_left, window_right, alibi_slopes, softcap, dropout_seed, dropout_mask,
        bool(return_dropout_mask), backend, precision)
    return output, keep


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, *, causal=None,
                                 window_left=None, window_right=None, alibi_slopes=None,
                                 softcap=None, generator=None):
    """torch.nn.functional.scaled_dot_product_attention on qkv's kernels, differentiable.

    query: [..., H, L, E]  key: [..., Hkv, S, E]  value: [..., Hkv, S, Ev]  ->  [..., H, L, Ev]

    CPU torch tensors, all float32, float64 or bfloat16; the output is a torch
    tensor that autograd differentiates through qkv's fused backward (gradients
    for query, key, value and a floating attn_mask). torch.compile traces it.

    The arguments are torch's, with its semantics (attn_mask bool or floating,
    or a torch CausalBias; dropout applied whenever dropout_p > 0), and qkv's
    extras as in qkv.nn.functional.scaled_dot_product_attention:
    causal: None, "top_left" (= is_causal) or "bottom_right" (query i sees
        keys j <= i + S - L).
    window_left, window_right: sliding window around query i (None = unbounded).
    alibi_slopes: one ALiBi slope per query head (a sequence or tensor; no
        gradient flows to it).
    softcap: scores become softcap·tanh(scores / softcap); None or 0 = off.
    generator: where dropout's seed comes from: a torch.Generator, a
        qkv.Generator, or None for torch's global RNG (torch.manual_seed).
        The same seed gives the same keep mask; the backward reuses it.
    """
    seed = _dropout_seed(generator) if dropout_p > 0 else None
    output, _ = _call_op(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                         causal, window_left, window_right, alibi_slopes, softcap, seed)
    return output


# Hugging Face transformers: attn_implementation="qkv" (python/qkv/_hf_attention.py).
from . import _hf_attention  # noqa: E402

_hf_attention.register()

# qkv.torch.nn: torch.nn.Modules on qkv's attention (python/qkv/torch_nn.py),
# importable as qkv.torch.nn too.
from . import torch_nn as nn  # noqa: E402

sys.modules[__name__ + ".nn"] = nn
