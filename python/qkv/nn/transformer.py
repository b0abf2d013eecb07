"""qkv.nn's Transformer blocks with torch.nn's names (tutorial §8.1):
TransformerEncoderLayer, TransformerDecoderLayer, TransformerEncoder,
TransformerDecoder and Transformer.

Same constructor arguments, defaults, forward signatures, mask polarity,
parameter names and initialisation as torch 2.13, so a torch state_dict loads
unchanged:

    import torch, qkv
    ref = torch.nn.TransformerEncoderLayer(64, 4, batch_first=True).eval()
    layer = qkv.nn.TransformerEncoderLayer(64, 4, batch_first=True).eval()
    layer.load_state_dict(ref.state_dict())
    y = layer(x, src_key_padding_mask=padding)       # numpy [B, L, 64]

Masks follow torch: bool True = masked out (not allowed / padding), float
masks are added to the scores. Layouts: [L, B, D] by default, [B, L, D] with
batch_first, or unbatched [L, D]. Inputs are numpy arrays or CPU torch
tensors; outputs are numpy arrays.

Differences from torch: no autograd; the activation is "relu" or "gelu" (the
strings, or torch's F.relu/F.gelu/nn.ReLU/nn.GELU()), not any callable; a
query whose keys are all masked gives 0, not NaN; there is no "fast path" with
different numerics (torch's eval-mode fast path and nested tensors).
"""

from .. import _core
from ._grad import GradMixin
from ._module import Module, check_device, check_generator, kept_generators
from .layers import LayerNorm
from .multihead_attention import MultiheadAttention

__all__ = [
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
]


def _child_view(module_class, name, what, owner="layer"):
    """The read-only attribute `name`: the child module self._impl.<name> as a
    `module_class` view, which shares its owner's parameters."""
    return property(lambda self: module_class._wrap(getattr(self._impl, name), self, name),
                    doc=f"{what} (a view: it shares this {owner}'s parameters).")


def _activation_name(activation, module):
    """"relu" or "gelu" from a string or from torch's functions and modules."""
    if isinstance(activation, str):
        if activation in ("relu", "gelu"):
            return activation
        raise ValueError(f"{module}(): activation should be relu/gelu, not {activation}")
    kind = type(activation).__name__
    if kind == "ReLU":
        return "relu"
    if kind == "GELU" and getattr(activation, "approximate", "none") == "none":
        return "gelu"
    name = getattr(activation, "__name__", None)  # F.relu, F.gelu, torch.relu
    if callable(activation) and name in ("relu", "gelu"):
        return name
    raise TypeError(f"{module}(): activation must be 'relu' or 'gelu' (or torch's F.relu, F.gelu, "
                    f"nn.ReLU(), nn.GELU()); qkv does not run arbitrary callables, got "
                    f"{activation!r}")


class _Layer:
    """The constructor of both layer kinds and its arguments, read back."""

    _core_class = None  # _core's class of the layer

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 device=None, dtype=None, *, generator=None):
        module = type(self).__name__
        check_device(device, module)
        check_generator(generator, module)
        self._impl = self._core_class((
            int(d_model), int(nhead), int(dim_feedforward), float(dropout),
            _activation_name(activation, module), float(layer_norm_eps), bool(batch_first),
            bool(norm_first), bool(bias), dtype, generator))

    d_model = property(lambda self: self._impl.d_model)
    nhead = property(lambda self: self._impl.nhead)
    dim_feedforward = property(lambda self: self._impl.dim_feedforward)
    dropout = property(lambda self: self._impl.dropout)
    activation = property(lambda self: self._impl.activation, doc='"relu" or "gelu"')
    layer_norm_eps = property(lambda self: self._impl.layer_norm_eps)
    batch_first = property(lambda self: self._impl.batch_first)
    norm_first = property(lambda self: self._impl.norm_first)

    def __repr__(self):
        impl = self._impl
        return (f"{type(self).__name__}(d_model={impl.d_model}, nhead={impl.nhead}, "
                f"dim_feedforward={impl.dim_feedforward}, dropout={impl.dropout}, "
                f"activation={impl.activation!r}, layer_norm_eps={impl.layer_norm_eps}, "
                f"batch_first={impl.batch_first}, norm_first={impl.norm_first}, "
                f"bias={impl.bias}, dtype={impl.dtype!r})")


class TransformerEncoderLayer(_Layer, GradMixin, Module):
    """Self-attention and a feed-forward network with residual connections and
    LayerNorm, as torch.nn.TransformerEncoderLayer.

    TransformerEncoderLayer(d_model, nhead, dim_feedforward=2048, dropout=0.1,
                            activation="relu", layer_norm_eps=1e-05, batch_first=False,
                            norm_first=False, bias=True, device=None, dtype=None)

    post-norm (default): x = norm1(x + sa(x));  x = norm2(x + ff(x))
    norm_first:          x = x + sa(norm1(x));  x = x + ff(norm2(x))

    Parameters: self_attn.{in_proj_weight, in_proj_bias, out_proj.weight,
    out_proj.bias}, linear1.*, linear2.*, norm1.*, norm2.* (biases only with
    bias=True). A new layer is in training mode, as in torch: call eval().
    qkv extra (keyword-only): generator, a qkv.Generator for the initial
    parameters.
    """

    _core_class = _core.TransformerEncoderLayer

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        """-> like src

        src: [L, B, D] ([B, L, D] if batch_first; unbatched [L, D])
        src_mask: [L, L] or [B*nhead, L, L]; bool True = not allowed, or float added.
        src_key_padding_mask: [B, L] ([L] unbatched); bool True = padding, or float added.
        is_causal: a hint that src_mask is the causal mask (it needs src_mask).
        """
        return self._impl.forward((src, src_mask, src_key_padding_mask, bool(is_causal)))

    def forward_with_grad(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        """-> (output, grad_fn): forward() that keeps what its backward needs.

        grad_fn(grad_output) -> grad_src, and adds the parameter gradients
        into named_grads() (zero_grad() clears them). Dropout is replayed.
        """
        return self._impl.forward_with_grad((src, src_mask, src_key_padding_mask,
                                             bool(is_causal)))

    self_attn = _child_view(MultiheadAttention, "self_attn", "The self-attention")


class TransformerDecoderLayer(_Layer, GradMixin, Module):
    """Self-attention, cross-attention to the encoder's output ("memory") and a
    feed-forward network, as torch.nn.TransformerDecoderLayer.

    TransformerDecoderLayer(d_model, nhead, dim_feedforward=2048, dropout=0.1,
                            activation="relu", layer_norm_eps=1e-05, batch_first=False,
                            norm_first=False, bias=True, device=None, dtype=None)

    Parameters: as TransformerEncoderLayer plus multihead_attn.* (the
    cross-attention) and norm3.*.
    """

    _core_class = _core.TransformerDecoderLayer

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        """-> like tgt

        tgt: [T, B, D]  memory: [S, B, D] ([B, T, D], [B, S, D] if batch_first;
            unbatched [T, D], [S, D])
        tgt_mask: [T, T] or [B*nhead, T, T]   memory_mask: [T, S] or [B*nhead, T, S]
        tgt_key_padding_mask: [B, T]          memory_key_padding_mask: [B, S]
        bool True = masked out, or float added. tgt_is_causal / memory_is_causal:
        hints that tgt_mask / memory_mask are causal.
        """
        return self._impl.forward((tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                                   memory_key_padding_mask, bool(tgt_is_causal),
                                   bool(memory_is_causal)))

    def forward_with_grad(self, tgt, memory, tgt_mask=None, memory_mask=None,
                          tgt_key_padding_mask=None, memory_key_padding_mask=None,
                          tgt_is_causal=False, memory_is_causal=False):
        """-> (output, grad_fn): forward() that keeps what its backward needs.

        grad_fn(grad_output) -> (grad_tgt, grad_memory), and adds the
        parameter gradients into named_grads() (zero_grad() clears them).
        """
        return self._impl.forward_with_grad((tgt, memory, tgt_mask, memory_mask,
                                             tgt_key_padding_mask, memory_key_padding_mask,
                                             bool(tgt_is_causal), bool(memory_is_causal)))

    self_attn = _child_view(MultiheadAttention, "self_attn", "The self-attention")

    multihead_attn = _child_view(MultiheadAttention, "multihead_attn", "The cross-attention")


def _optional_bool(value):
    return None if value is None else bool(value)


class _Stack(Module):
    _layer_class = None

    @property
    def layers(self):
        """The layers (views: they share this stack's parameters)."""
        return [self._layer_class._wrap(self._impl.layer(i), self, f"layers.{i}")
                for i in range(self._impl.num_layers)]

    @property
    def num_layers(self):
        return self._impl.num_layers

    @property
    def dtype(self):
        """"float32" or "float64"."""
        return self._impl.layer(0).dtype

    @property
    def norm(self):
        """The final LayerNorm (a view), or None."""
        impl = self._impl.norm
        return None if impl is None else LayerNorm._wrap(impl, self, "norm")

    def __repr__(self):
        layer = self._layer_class._wrap(self._impl.layer(0))
        norm = self.norm
        return (f"{type(self).__name__}({layer!r}, num_layers={self.num_layers}"
                f"{'' if norm is None else f', norm={norm!r}'})")


def _check_stack_args(module, layer, layer_class, num_layers, norm):
    if not isinstance(layer, layer_class):
        raise TypeError(f"{module}(): the layer must be a qkv.nn.{layer_class.__name__}, got "
                        f"{type(layer).__name__}")
    if isinstance(num_layers, bool) or int(num_layers) != num_layers:
        raise TypeError(f"{module}(): num_layers must be an int, got {num_layers!r}")
    if norm is not None and not isinstance(norm, LayerNorm):
        raise TypeError(f"{module}(): norm must be a qkv.nn.LayerNorm or None, got "
                        f"{type(norm).__name__}")


class TransformerEncoder(GradMixin, _Stack):
    """num_layers copies of an encoder layer and an optional final norm, as
    torch.nn.TransformerEncoder.

    TransformerEncoder(encoder_layer, num_layers, norm=None, enable_nested_tensor=True,
                       mask_check=True)

    The layers are deep copies of encoder_layer (same weights, same mode);
    norm is copied too. Parameters: layers.<i>.<layer's names>, norm.weight,
    norm.bias. enable_nested_tensor and mask_check concern torch's fast path
    and are accepted for compatibility.
    """

    _layer_class = TransformerEncoderLayer

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True,
                 mask_check=True):
        del enable_nested_tensor, mask_check  # torch's fast path only
        _check_stack_args("TransformerEncoder", encoder_layer, TransformerEncoderLayer,
                          num_layers, norm)
        self._impl = _core.TransformerEncoder(encoder_layer._impl, int(num_layers),
                                              None if norm is None else norm._impl)
        # The copied layers draw dropout from encoder_layer's generator, if it has one.
        self._copied_generators = kept_generators(encoder_layer)

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        """-> like src

        src: [L, B, D] ([B, L, D] if batch_first; unbatched [L, D])
        mask: [L, L] or [B*nhead, L, L]   src_key_padding_mask: [B, L]
        is_causal: None (torch's default) detects whether mask is the causal
        mask; True/False is a hint passed to every layer.
        """
        return self._impl.forward((src, mask, src_key_padding_mask, _optional_bool(is_causal)))

    def forward_with_grad(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        """-> (output, grad_fn): forward() that keeps what its backward needs.

        grad_fn(grad_output) -> grad_src, and adds the parameter gradients
        into named_grads() (zero_grad() clears them).
        """
        return self._impl.forward_with_grad((src, mask, src_key_padding_mask,
                                             _optional_bool(is_causal)))


class TransformerDecoder(_Stack):
    """num_layers copies of a decoder layer and an optional final norm, as
    torch.nn.TransformerDecoder.

    TransformerDecoder(decoder_layer, num_layers, norm=None)
    """

    _layer_class = TransformerDecoderLayer

    def __init__(self, decoder_layer, num_layers, norm=None):
        _check_stack_args("TransformerDecoder", decoder_layer, TransformerDecoderLayer,
                          num_layers, norm)
        self._impl = _core.TransformerDecoder(decoder_layer._impl, int(num_layers),
                                              None if norm is None else norm._impl)
        # The copied layers draw dropout from decoder_layer's generator, if it has one.
        self._copied_generators = kept_generators(decoder_layer)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        """-> like tgt; arguments as TransformerDecoderLayer.forward, except that
        tgt_is_causal=None (the default) detects whether tgt_mask is causal."""
        return self._impl.forward((tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                                   memory_key_padding_mask, _optional_bool(tgt_is_causal),
                                   bool(memory_is_causal)))


class Transformer(Module):
    """An encoder and a decoder, each with a final LayerNorm, as torch.nn.Transformer.

    Transformer(d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
                dim_feedforward=2048, dropout=0.1, activation="relu", custom_encoder=None,
                custom_decoder=None, layer_norm_eps=1e-05, batch_first=False,
                norm_first=False, bias=True, device=None, dtype=None)

    Parameters: encoder.layers.<i>.*, encoder.norm.*, decoder.layers.<i>.*,
    decoder.norm.*; initialised as torch (xavier_uniform_ on every matrix).
    custom_encoder/custom_decoder are not supported.
    """

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
                 dim_feedforward=2048, dropout=0.1, activation="relu", custom_encoder=None,
                 custom_decoder=None, layer_norm_eps=1e-5, batch_first=False, norm_first=False,
                 bias=True, device=None, dtype=None, *, generator=None):
        check_device(device, "Transformer")
        check_generator(generator, "Transformer")
        if custom_encoder is not None or custom_decoder is not None:
            raise NotImplementedError("Transformer(): custom_encoder and custom_decoder are not "
                                      "supported by qkv")
        self._impl = _core.Transformer((
            int(d_model), int(nhead), int(num_encoder_layers), int(num_decoder_layers),
            int(dim_feedforward), float(dropout), _activation_name(activation, "Transformer"),
            float(layer_norm_eps), bool(batch_first), bool(norm_first), bool(bias), dtype,
            generator))

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):
        """-> like tgt

        src: [S, B, D]  tgt: [T, B, D] ([B, S, D], [B, T, D] if batch_first;
            unbatched [S, D], [T, D])
        src_mask: [S, S] or [B*nhead, S, S]   tgt_mask: [T, T] or [B*nhead, T, T]
        memory_mask: [T, S] or [B*nhead, T, S]
        src/tgt/memory_key_padding_mask: [B, S], [B, T], [B, S]
        bool True = masked out, or float added. src_is_causal / tgt_is_causal:
        None detects a causal mask; memory_is_causal: a hint for memory_mask.
        """
        return self._impl.forward((src, tgt, src_mask, tgt_mask, memory_mask,
                                   src_key_padding_mask, tgt_key_padding_mask,
                                   memory_key_padding_mask, _optional_bool(src_is_causal),
                                   _optional_bool(tgt_is_causal), bool(memory_is_causal)))

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        """The causal mask [sz, sz]: -inf above the diagonal, 0 elsewhere
        (float32 unless dtype says float64)."""
        check_device(device, "Transformer.generate_square_subsequent_mask")
        return _core.Transformer.generate_square_subsequent_mask(int(sz), dtype)

    encoder = _child_view(TransformerEncoder, "encoder", "The TransformerEncoder", "model")
    decoder = _child_view(TransformerDecoder, "decoder", "The TransformerDecoder", "model")

    d_model = property(lambda self: self._impl.d_model)
    nhead = property(lambda self: self._impl.nhead)
    batch_first = property(lambda self: self._impl.batch_first)

    def __repr__(self):
        return (f"Transformer(d_model={self.d_model}, nhead={self.nhead}, "
                f"num_encoder_layers={self._impl.encoder.num_layers}, "
                f"num_decoder_layers={self._impl.decoder.num_layers}, "
                f"batch_first={self.batch_first})")
