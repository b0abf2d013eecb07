"""qkv.nn.Linear, LayerNorm, RMSNorm and Embedding: the building blocks of the
Transformer layers, with torch.nn's arguments, defaults, parameter names and
initialisation, so that torch state_dicts load unchanged.

Inputs are numpy arrays or CPU torch tensors of the module's dtype (float32
unless dtype=float64); outputs are numpy arrays. No autograd: these are for
inference and for checking against torch.
"""

import numbers as _numbers

from .. import _core
from ._module import Module, check_device, check_generator, integer_array

__all__ = ["Embedding", "LayerNorm", "Linear", "RMSNorm"]


def _shape_tuple(normalized_shape, module):
    if isinstance(normalized_shape, _numbers.Integral):
        return (int(normalized_shape),)
    try:
        return tuple(int(n) for n in normalized_shape)
    except TypeError:
        raise TypeError(f"{module}(): normalized_shape must be an int or a sequence of ints, "
                        f"got {type(normalized_shape).__name__}") from None


class Linear(Module):
    """y = x Wᵀ + b, as torch.nn.Linear.

    Linear(in_features, out_features, bias=True, device=None, dtype=None)

    input: [..., in_features]  ->  [..., out_features]
    Parameters "weight" [out_features, in_features] and "bias" [out_features],
    initialised U(-1/√in_features, 1/√in_features) as torch (from qkv's own
    random stream: the keyword-only `generator`, else the default generator).
    """

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None, *,
                 generator=None):
        check_device(device, "Linear")
        check_generator(generator, "Linear")
        self._impl = _core.Linear((int(in_features), int(out_features), bool(bias), dtype,
                                   generator))

    def forward(self, input):
        return self._impl.forward(input)

    in_features = property(lambda self: self._impl.in_features)
    out_features = property(lambda self: self._impl.out_features)
    weight = property(lambda self: self._impl.state_dict()["weight"], doc="a copy")
    bias = property(lambda self: self._impl.state_dict().get("bias"), doc="a copy, or None")

    def __repr__(self):
        return (f"Linear(in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self._impl.has_bias})")


class _Norm(Module):
    """What LayerNorm and RMSNorm share: forward and the arguments read back."""

    def forward(self, input):
        return self._impl.forward(input)

    normalized_shape = property(lambda self: tuple(self._impl.normalized_shape))
    eps = property(lambda self: self._impl.eps)
    elementwise_affine = property(lambda self: self._impl.elementwise_affine)
    weight = property(lambda self: self._impl.state_dict().get("weight"), doc="a copy, or None")

    def __repr__(self):
        return (f"{type(self).__name__}({self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine})")


class LayerNorm(_Norm):
    """(x − mean) / √(var + eps) · weight + bias over the trailing
    `normalized_shape` dims, as torch.nn.LayerNorm (biased variance).

    LayerNorm(normalized_shape, eps=1e-05, elementwise_affine=True, bias=True,
              device=None, dtype=None)

    input: [..., *normalized_shape]  ->  like input
    Parameters "weight" (ones) and "bias" (zeros) when elementwise_affine.
    """

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 device=None, dtype=None):
        check_device(device, "LayerNorm")
        shape = _shape_tuple(normalized_shape, "LayerNorm")
        self._impl = _core.LayerNorm((list(shape), float(eps), bool(elementwise_affine),
                                      bool(bias), dtype))

    bias = property(lambda self: self._impl.state_dict().get("bias"), doc="a copy, or None")


class RMSNorm(_Norm):
    """x / √(mean(x²) + eps) · weight over the trailing `normalized_shape` dims,
    as torch.nn.RMSNorm; eps=None means the machine epsilon of the input's dtype.

    RMSNorm(normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None)

    input: [..., *normalized_shape]  ->  like input
    Parameter "weight" (ones) when elementwise_affine.
    """

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None,
                 dtype=None):
        check_device(device, "RMSNorm")
        shape = _shape_tuple(normalized_shape, "RMSNorm")
        self._impl = _core.RMSNorm((list(shape), None if eps is None else float(eps),
                                    bool(elementwise_affine), dtype))


class Embedding(Module):
    """A learned table, one row per token id, as torch.nn.Embedding.

    Embedding(num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
              norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None,
              _freeze=False, device=None, dtype=None)

    input: integer ids of any shape (numpy, torch or a list), each in
    [0, num_embeddings)  ->  [*input.shape, embedding_dim]
    Parameter "weight" [num_embeddings, embedding_dim] ~ N(0, 1), the
    padding_idx row zero. max_norm is not supported (torch renormalises rows in
    place during forward); scale_grad_by_freq, sparse and _freeze concern
    gradients only and have no effect here.
    """

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None,
                 _freeze=False, device=None, dtype=None, *, generator=None):
        del norm_type, scale_grad_by_freq, sparse, _freeze  # gradient-only options
        check_device(device, "Embedding")
        check_generator(generator, "Embedding")
        if max_norm is not None:
            raise NotImplementedError("Embedding(): max_norm is not supported by qkv")
        self._impl = _core.Embedding((int(num_embeddings), int(embedding_dim),
                                      None if padding_idx is None else int(padding_idx), dtype,
                                      generator))
        if _weight is not None:
            self._impl.load_state_dict({"weight": _weight})

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None,
                        norm_type=2.0, scale_grad_by_freq=False, sparse=False):
        """An Embedding whose table is `embeddings` [num_embeddings, embedding_dim]
        (copied), with the dtype of `embeddings`."""
        del freeze  # no gradients in qkv
        shape = tuple(embeddings.shape)
        if len(shape) != 2:
            raise ValueError(f"Embedding.from_pretrained(): embeddings must be 2-D, got shape "
                             f"{shape}")
        return cls(shape[0], shape[1], padding_idx=padding_idx, max_norm=max_norm,
                   norm_type=norm_type, scale_grad_by_freq=scale_grad_by_freq, sparse=sparse,
                   _weight=embeddings, dtype=str(embeddings.dtype))

    def forward(self, input):
        ids = integer_array(input, "Embedding.forward", "input")
        n = self._impl.num_embeddings
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            bad = ids[(ids < 0) | (ids >= n)].flat[0]
            raise IndexError(f"Embedding.forward(): id {bad} is out of range [0, {n})")
        return self._impl.forward(ids)

    num_embeddings = property(lambda self: self._impl.num_embeddings)
    embedding_dim = property(lambda self: self._impl.embedding_dim)
    padding_idx = property(lambda self: self._impl.padding_idx)
    weight = property(lambda self: self._impl.state_dict()["weight"], doc="a copy")

    def __repr__(self):
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"Embedding({self.num_embeddings}, {self.embedding_dim}{pad})"
