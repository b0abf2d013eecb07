"""qkv: attention, from Query/Key/Value to the Transformer.

The Python face of the qkv C++ library, with PyTorch's names and semantics
(torch 2.13) so that code moves over by changing an import:

    import numpy as np
    import qkv
    q = np.random.randn(2, 4, 10, 16).astype(np.float32)     # [B, H, L, E]
    out = qkv.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    mha = qkv.nn.MultiheadAttention(64, 8, batch_first=True)
    y, w = mha(x, x, x)

Inputs may be numpy arrays or CPU torch tensors of dtype float32 or float64
(bool for masks); they are read in place, without a copy, whenever their
strides allow it. Outputs are numpy arrays, except that qkv.nn.functional
returns torch tensors when any tensor argument is one (see its docstring).
`import qkv.torch` registers qkv's attention as a torch operator with
autograd and torch.compile support (torch.ops.qkv.scaled_dot_product_attention).

One difference from torch, everywhere: a query whose keys are all masked gives
output 0 and weights 0, never NaN (torch's SDPA also gives 0; torch's
nn.MultiheadAttention gives NaN there when need_weights=True).

Errors from the library come as TypeError (wrong dtype), ValueError (wrong
shape or value) or OSError (files), with a message naming the argument.
"""

from ._openblas import fast_kernels_while_loading as _fast_blas

with _fast_blas():
    from . import _core
from ._core import Generator, ScoreFunction
from . import masks
from . import nn
from . import optim
from .models import DecoderModel, DecoderModelConfig, DecoderSession
from . import runtime
from . import text
from .sentence_encoder import SentenceEncoder
from .explore import AttentionExplorer, explore

__version__ = "0.1.0"

__all__ = [
    "Generator",
    "ScoreFunction",
    "attention",
    "default_generator",
    "explore",
    "manual_seed",
    "masks",
    "matmul",
    "nn",
    "optim",
    "runtime",
    "text",
    "simple_attention",
]

_U64 = 1 << 64


def manual_seed(seed):
    """Seeds qkv's default generator (dropout, initialisation) and returns it.

    As torch.manual_seed, `seed` may be any integer in [-2**63, 2**64); a
    negative seed is taken modulo 2**64. The same seed gives the same numbers
    on every machine (but not torch's numbers: the streams differ).
    """
    seed = int(seed)
    if not -(1 << 63) <= seed < _U64:
        raise ValueError(f"manual_seed(): seed must be in [-2**63, 2**64), got {seed}")
    return _core.manual_seed(seed % _U64)


def default_generator():
    """The process-wide Generator used when no generator is passed."""
    return _core.default_generator()


def simple_attention(query, keys, values):
    """Attention of one query over S keys (tutorial §2.4), computed in float64.

    query: [E]  keys: [S, E]  values: [S, Ev]  ->  (output [Ev], weights [S])

    weights = softmax(keys @ query); output = weights @ values.
    """
    return _core.simple_attention((query, keys, values))


def attention(q, k, v, score, mask=None):
    """Attention with any score function (tutorial §2.2).

    q: [..., L, E]  k: [..., S, Ek]  v: [..., S, Ev]  ->  (output [..., L, Ev], weights [..., L, S])

    weights = softmax(score.scores(q, k) + mask); output = weights @ v.
    `score` is a ScoreFunction: ScoreFunction.dot(), .scaled_dot(),
    .additive(w_q, w_k, v) or .bilinear(w). `mask` broadcasts to [..., L, S]:
    bool (True = the key takes part) or floating (added to the scores).
    """
    return _core.attention((q, k, v, score, mask))


def matmul(input, other):
    """Batched matrix product, as torch.matmul for inputs of ≥ 2 dims.

    input: [..., n, k]  other: [..., k, m]  ->  [..., n, m]
    """
    return _core.matmul((input, other))
