"""qkv.torch.nn: torch.nn modules whose attention runs on qkv's kernels.

    import qkv.torch
    attn = qkv.torch.nn.MultiheadAttention(256, 8, batch_first=True)
    attn.load_state_dict(torch_mha.state_dict())      # same names, same tensors
    out, _ = attn(x, x, x, need_weights=False)
    out.sum().backward()                               # qkv's fused backward

    qkv.torch.nn.use_qkv_attention(model)   # an existing torch model, in place

MultiheadAttention, TransformerEncoderLayer, TransformerDecoderLayer,
TransformerEncoder, TransformerDecoder and Transformer have torch.nn's names
and constructors; given the same seed they draw the same initial parameters
as torch's.

These ARE torch.nn.Modules (subclasses of torch's, so parameters, buffers,
state_dict, initialisation, .to(), hooks and optimizers all work as with
torch's): only the attention itself is replaced, by the custom operator
torch.ops.qkv.scaled_dot_product_attention, so autograd and torch.compile
go through qkv. The torch-free modules stay in qkv.nn for users without
torch.
"""

import torch
import torch.nn.functional as F

from . import torch as _qkv_torch

__all__ = ["MultiheadAttention", "Transformer", "TransformerDecoder", "TransformerDecoderLayer",
           "TransformerEncoder", "TransformerEncoderLayer", "use_qkv_attention"]


def _allowed_mask(attn_mask, key_padding_mask, batch, heads, L, S, dtype):
    """torch's MultiheadAttention masks -> one qkv attn_mask, or None.

    attn_mask: [L, S] or [batch·heads, L, S]; bool True = NOT allowed, or float
        added to the scores.
    key_padding_mask: [batch, S]; bool True = ignore the key, or float added.
    -> bool [b, h, L, S] (True = take part) when both are bool (or absent),
       else float [b, h, L, S] (the sum, bools as -inf), as torch merges them.
    """
    parts = []
    if attn_mask is not None:
        if attn_mask.dim() == 2:
            parts.append(attn_mask.view(1, 1, L, S))
        elif attn_mask.dim() == 3 and attn_mask.shape[0] == batch * heads:
            parts.append(attn_mask.view(batch, heads, L, S))
        else:
            raise ValueError(f"MultiheadAttention: attn_mask must be [L, S] = [{L}, {S}] or "
                             f"[batch·num_heads, L, S] = [{batch * heads}, {L}, {S}], got "
                             f"{list(attn_mask.shape)}")
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (batch, S):
            raise ValueError(f"MultiheadAttention: key_padding_mask must be [batch, S] = "
                             f"[{batch}, {S}], got {list(key_padding_mask.shape)}")
        parts.append(key_padding_mask.view(batch, 1, 1, S))
    if not parts:
        return None
    if all(p.dtype == torch.bool for p in parts):
        blocked = parts[0] if len(parts) == 1 else parts[0] | parts[1]
        return ~blocked
    as_float = [p.to(dtype) if p.dtype != torch.bool else
                torch.zeros(p.shape, dtype=dtype).masked_fill(p, float("-inf")) for p in parts]
    return as_float[0] if len(as_float) == 1 else as_float[0] + as_float[1]


def _append_column(mask):
    """A mask with one more key (the bias_k / zero-attention key), which it lets through."""
    if mask is None:
        return None
    # bool False = allowed in torch's convention; float 0 adds nothing.
    return torch.cat([mask, mask.new_zeros(*mask.shape[:-1], 1)], dim=-1)


class MultiheadAttention(torch.nn.MultiheadAttention):
    """torch.nn.MultiheadAttention with qkv's attention: same arguments,
    defaults, parameters, initialisation and state_dict.

    forward(query, key, value, key_padding_mask=None, need_weights=True,
            attn_mask=None, average_attn_weights=True, is_causal=False)
        -> (attn_output, attn_weights or None), as torch's.

    The output (and the gradients through it) come from qkv's fused kernels.
    need_weights=True (torch's default) also computes the weights in torch
    ops from the same scores and, in training with dropout, the same keep
    mask; pass need_weights=False when you do not use them. Dropout draws its
    seed from torch's RNG (torch.manual_seed makes it repeatable), so its
    mask differs from torch's. Unlike torch, a query whose keys are all
    masked gives output 0, not NaN. No "fast path" with other numerics.
    """

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        batched = query.dim() == 3
        if query.dim() not in (2, 3) or key.dim() != query.dim() or value.dim() != query.dim():
            raise ValueError("MultiheadAttention: query, key and value must all be 3-D "
                             "(batched) or all 2-D (unbatched), got "
                             f"{query.dim()}-D, {key.dim()}-D and {value.dim()}-D")
        # Work batch-first: [B, L, D].
        if not batched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        if is_causal and attn_mask is None:
            raise RuntimeError("MultiheadAttention: is_causal=True is a hint that attn_mask is "
                               "causal, and needs attn_mask (as torch's)")

        B, L, D = query.shape
        H, E = self.num_heads, self.head_dim
        q, k, v = self._in_projection(query, key, value)
        if self.bias_k is not None:
            k = torch.cat([k, self.bias_k.expand(B, 1, D)], dim=1)
            v = torch.cat([v, self.bias_v.expand(B, 1, D)], dim=1)
            attn_mask, key_padding_mask = _append_column(attn_mask), _append_column(
                key_padding_mask)
        # [B, L, D] -> [B, H, L, E]
        q, k, v = (t.unflatten(-1, (H, E)).transpose(1, 2) for t in (q, k, v))
        if self.add_zero_attn:
            k = torch.cat([k, k.new_zeros(B, H, 1, E)], dim=2)
            v = torch.cat([v, v.new_zeros(B, H, 1, E)], dim=2)
            attn_mask, key_padding_mask = _append_column(attn_mask), _append_column(
                key_padding_mask)
        S = k.shape[2]

        causal = None
        if is_causal and key_padding_mask is None and not need_weights:
            causal, mask = "top_left", None  # the hint: attn_mask is the causal mask
        else:
            mask = _allowed_mask(attn_mask, key_padding_mask, B, H, L, S, q.dtype)
        dropout_p = self.dropout if self.training else 0.0
        seed = _qkv_torch._dropout_seed(None) if dropout_p > 0 else None
        out, keep = _qkv_torch._call_op(q, k, v, mask, dropout_p, False, None, False, causal, None,
                                        None, None, None, seed,
                                        return_dropout_mask=need_weights and dropout_p > 0)
        # [B, H, L, E] -> [B, L, D]
        out = F.linear(out.transpose(1, 2).flatten(2), self.out_proj.weight, self.out_proj.bias)

        weights = None
        if need_weights:
            weights = self._weights(q, k, mask, keep if dropout_p > 0 else None, dropout_p)
            if average_attn_weights:
                weights = weights.mean(dim=1)
            if not batched:
                weights = weights.squeeze(0)
        if not batched:
            out = out.squeeze(0)
        elif not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights

    def _in_projection(self, query, key, value):
        """[B, L, D], [B, S, kdim], [B, S, vdim] -> q, k, v, each [B, ·, D]."""
        if self._qkv_same_embed_dim:
            w_q, w_k, w_v = self.in_proj_weight.chunk(3)
        else:
            w_q, w_k, w_v = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        b_q = b_k = b_v = None
        if self.in_proj_bias is not None:
            b_q, b_k, b_v = self.in_proj_bias.chunk(3)
        return F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)

    def _weights(self, q, k, mask, keep, dropout_p):
        """The attention weights [B, H, L, S] the output was computed with."""
        scores = (q * self.head_dim**-0.5) @ k.transpose(-1, -2)
        if mask is not None:
            if mask.dtype == torch.bool:
                scores = scores.masked_fill(~mask, float("-inf"))
            else:
                scores = scores + mask
        weights = torch.softmax(scores, dim=-1)
        if keep is not None:
            weights = weights * keep / (1.0 - dropout_p)
        return weights


class TransformerEncoderLayer(torch.nn.TransformerEncoderLayer):
    """torch.nn.TransformerEncoderLayer whose self_attn is qkv's
    MultiheadAttention. forward never takes torch's inference fast path
    (torch's own fused attention); its arguments and results are torch's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        use_qkv_attention(self)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask,
                                   is_causal=is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal=is_causal))
        return self.norm2(x + self._ff_block(x))


class TransformerDecoderLayer(torch.nn.TransformerDecoderLayer):
    """torch.nn.TransformerDecoderLayer whose self_attn and multihead_attn are
    qkv's MultiheadAttention."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        use_qkv_attention(self)


class TransformerEncoder(torch.nn.TransformerEncoder):
    """torch.nn.TransformerEncoder over copies of a layer, its attention qkv's.
    enable_nested_tensor is accepted and off: torch's nested-tensor path is
    its fast path, which bypasses the layers' attention."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True,
                 mask_check=True):
        super().__init__(encoder_layer, num_layers, norm, enable_nested_tensor=False,
                         mask_check=mask_check)
        use_qkv_attention(self)


class TransformerDecoder(torch.nn.TransformerDecoder):
    """torch.nn.TransformerDecoder over copies of a layer, its attention qkv's."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__(decoder_layer, num_layers, norm)
        use_qkv_attention(self)


class Transformer(torch.nn.Transformer):
    """torch.nn.Transformer (same arguments, initialisation and state_dict)
    with every attention on qkv's kernels."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        use_qkv_attention(self)


# torch's class -> qkv's subclass, which adds behaviour and no state.
_QKV_CLASSES = {
    torch.nn.MultiheadAttention: MultiheadAttention,
    torch.nn.TransformerEncoderLayer: TransformerEncoderLayer,
    torch.nn.TransformerDecoderLayer: TransformerDecoderLayer,
    torch.nn.TransformerEncoder: TransformerEncoder,
    torch.nn.TransformerDecoder: TransformerDecoder,
    torch.nn.Transformer: Transformer,
}


def use_qkv_attention(module):
    """Switches, in place, every torch.nn.MultiheadAttention and torch
    Transformer module inside `module` (itself included) to qkv's subclass:
    the same parameters and state_dict, the attention on qkv's kernels.
    Subclasses of those torch classes (user-defined) are left alone.
    -> module."""
    for child in module.modules():
        qkv_class = _QKV_CLASSES.get(type(child))
        if qkv_class is not None:
            child.__class__ = qkv_class
        if isinstance(child, torch.nn.TransformerEncoder):
            child.use_nested_tensor = child.enable_nested_tensor = False
    return module
