"""qkv's attention inside Hugging Face transformers: attn_implementation="qkv".

    import qkv.torch                    # registers "qkv" (or call register())
    model = transformers.AutoModel.from_pretrained(path, attn_implementation="qkv")
    st = SentenceTransformer(path, model_kwargs={"attn_implementation": "qkv"})

Two registrations, both under "qkv" (pinned: transformers 5.24), made when
transformers loads the modules holding the interfaces (import qkv.torch
does not import transformers):
  - AttentionInterface: the attention function below, called by each
    attention layer with query [B, H, L, E], key/value [B, Hkv, S, E] and the
    mask, returning (output [B, L, H, E], None) as sdpa_attention_forward does;
  - AttentionMaskInterface: transformers builds the mask per implementation
    name, and a name without an entry gets NO mask (padded batches would
    attend to padding). qkv takes sdpa's masks: boolean [B, 1, L, S] (True =
    attend), or None when the layer's causality (is_causal) says it all;
    and None also for sliding-window layers (Gemma 3, Mistral) without
    padding, whose window qkv's fused kernel applies (no [L, S] mask); a
    padded bidirectional batch (BERT) gets [B, 1, 1, S], one row of keys per
    sequence, whose padded ends the kernels skip. A padded causal prefill
    gets sdpa's dense mask, which attention_forward recognises (by identity)
    and runs as causal (+ window) over the [B, 1, 1, S] key mask instead.

The function runs qkv.torch.scaled_dot_product_attention, a torch custom op
with autograd, so models train through it. GQA (module.num_key_value_groups
> 1) runs natively (enable_gqa), without repeating keys and values;
scaling, softcap, dropout, is_causal and sliding_window are mapped to qkv's
arguments.
"""

import importlib.abc
import importlib.machinery
import sys
import weakref

import torch

__all__ = ["NAME", "attention_forward", "register"]

NAME = "qkv"

# The dense masks the mask function built for causal (or sliding-window)
# layers over a padded batch, by id, with what each means in qkv's fused
# terms: (key-padding mask [B, 1, 1, S], window_left or None), causal top-left.
# attention_forward runs that form for exactly these tensors; any other mask,
# a slice or a copy of one included, is taken as it is.
_FUSED_FORM = {}


def _remember_fused_form(dense, keys, window_left):
    key = id(dense)
    _FUSED_FORM[key] = (keys, window_left)
    weakref.finalize(dense, _FUSED_FORM.pop, key, None)


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      is_causal=None, sliding_window=None, softcap=None, **kwargs):
    """transformers' attention-function signature -> (attn_output [B, L, H, E], None).

    attention_mask: sdpa's boolean [B, 1|H, L, S] (True = attend), a key
    padding mask [B, 1, 1, S] from the mask function below, a float additive
    mask, or None. With None the rules are sdpa_attention_forward's:
    for L > 1 and a causal layer (is_causal, default module.is_causal) the
    mask is causal and top-left aligned (the mask functions leave it out only
    when queries and keys start at the same position), and a query alone
    (L = 1) sees every key. sliding_window: the layer's window W (query i sees
    keys i-W < j <= i); it is applied here only when there is no mask (a mask
    holds it), as qkv's fused window_left = W - 1. softcap: logit
    soft-capping (Gemma 2). scaling: the score scale (default 1/sqrt(E)).
    dropout: the probability (transformers passes 0.0 in eval mode). GQA
    (module.num_key_value_groups > 1) runs natively, keys not repeated.
    """
    from . import torch as qkv_torch  # qkv.torch imports this module: import late

    if kwargs.get("position_bias") is not None:
        raise ValueError("qkv attention: position_bias (T5-style) is not supported; use "
                         "attn_implementation=\"sdpa\" or \"eager\" for this model")
    groups = getattr(module, "num_key_value_groups", 1) or 1
    q_length = query.shape[2]
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    causal = window_left = window_right = None
    if attention_mask is None and is_causal and q_length > 1:
        causal = "top_left"
        if sliding_window is not None:
            window_left = int(sliding_window) - 1
    fused = None
    if attention_mask is not None and not torch.compiler.is_compiling():
        fused = _FUSED_FORM.get(id(attention_mask))
    if fused is not None and is_causal and q_length > 1:
        # Causal top-left as the window's right edge (qkv takes a window with
        # a mask, not causal with one); the key mask's padded ends are skipped.
        attention_mask, window_left = fused
        window_right = 0
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        attention_mask = attention_mask.to(query.dtype)
    out = qkv_torch.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=float(dropout), scale=scaling,
        enable_gqa=groups > 1, causal=causal, window_left=window_left, window_right=window_right,
        softcap=None if softcap is None else float(softcap))
    # qkv lays the output out like the query: for transformers' query (the
    # heads of a [B, L, H, E] projection, transposed) the transpose back is
    # already contiguous, and contiguous() copies nothing.
    return out.transpose(1, 2).contiguous(), None


def _no_padding(padding_mask):
    """True when a prepared padding mask lets every key through (reads its
    values: not while torch.compile traces)."""
    if padding_mask is None:
        return True
    return not torch.compiler.is_compiling() and bool(padding_mask.all())


def _mask_function(masking_utils):
    """The mask function registered for "qkv": transformers' sdpa_mask, except
    that a sliding-window causal layer gets no [B, 1, L, S] mask where the
    fused window covers it (attention_forward adds causal + window_left), and
    a padded bidirectional batch gets its key-padding mask as [B, 1, 1, S]
    (padding as lengths: the kernels trim the padded keys)."""
    sdpa_mask = masking_utils.sdpa_mask

    def qkv_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0,
                 mask_function=masking_utils.causal_mask_function, attention_mask=None,
                 local_size=None, allow_is_causal_skip=True, **kwargs):
        config = kwargs.get("config")
        if mask_function is masking_utils.bidirectional_mask_function and local_size is None \
                and attention_mask is not None and attention_mask.dim() == 2 \
                and isinstance(kv_offset, int):
            # Padding alone (BERT): one row of keys per sequence, broadcast
            # over the queries. qkv's kernels skip the padded ends of such a
            # mask (key tiles outside are not computed) and read no [L, S].
            padding = masking_utils.prepare_padding_mask(attention_mask, kv_length, kv_offset)
            if kwargs.get("allow_is_bidirectional_skip") and _no_padding(padding):
                return None
            keys = padding[:, kv_offset:kv_offset + kv_length].to(torch.bool)
            return keys[:, None, None, :]
        # Only create_sliding_window_causal_mask passes local_size = the
        # config's sliding_window with allow_is_causal_skip (chunked
        # attention passes its chunk size; and/or overlays turn the skip off).
        windowed = (allow_is_causal_skip and local_size is not None and config is not None
                    and getattr(config, "sliding_window", None) == local_size
                    and getattr(config, "attention_chunk_size", None) != local_size)
        causal = (allow_is_causal_skip and local_size is None
                  and mask_function is masking_utils.causal_mask_function)
        offsets_known = isinstance(q_offset, int) and isinstance(kv_offset, int)
        padding = None
        if windowed and offsets_known:
            padding = masking_utils.prepare_padding_mask(attention_mask, kv_length, kv_offset)
            if _no_padding(padding):
                if q_length > 1 and q_offset == kv_offset:
                    return None  # top-left causal + window: attention_forward's rule
                if q_length == 1 and kv_length <= local_size and \
                        kv_offset + kv_length == q_offset + 1:
                    return None  # one query, its keys all inside the window
        dense = sdpa_mask(batch_size, q_length, kv_length, q_offset=q_offset,
                          kv_offset=kv_offset, mask_function=mask_function,
                          attention_mask=attention_mask, local_size=local_size,
                          allow_is_causal_skip=allow_is_causal_skip, **kwargs)
        if (causal or windowed) and offsets_known and dense is not None and q_length > 1 \
                and q_offset == kv_offset and attention_mask is not None \
                and attention_mask.dim() == 2 and not torch.compiler.is_compiling():
            # A padded prefill: causal (+ window) over the kept keys.
            if padding is None:
                padding = masking_utils.prepare_padding_mask(attention_mask, kv_length, kv_offset)
            keys = padding[:, kv_offset:kv_offset + kv_length].to(torch.bool)[:, None, None, :]
            _remember_fused_form(dense, keys, local_size - 1 if windowed else None)
        return dense

    qkv_mask.__doc__ = _mask_function.__doc__
    return qkv_mask


def _register_attention(modeling_utils):
    modeling_utils.AttentionInterface.register(NAME, attention_forward)


def _register_mask(masking_utils):
    masking_utils.AttentionMaskInterface.register(NAME, _mask_function(masking_utils))


# transformers' module -> what registers "qkv" in it.
_REGISTRARS = {"transformers.modeling_utils": _register_attention,
               "transformers.masking_utils": _register_mask}


class _RegisterOnImport(importlib.abc.MetaPathFinder):
    """Registers "qkv" when transformers loads the module holding an interface,
    so that `import qkv.torch` does not import transformers (seconds)."""

    def find_spec(self, name, path, target=None):
        registrar = _REGISTRARS.get(name)
        if registrar is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            registrar(module)

        spec.loader.exec_module = exec_module
        return spec


_finder = _RegisterOnImport()


def register():
    """Registers "qkv" with transformers' AttentionInterface and
    AttentionMaskInterface (idempotent): now for the modules transformers has
    loaded, and when it loads the others (transformers need not be installed
    or imported yet)."""
    for name, registrar in _REGISTRARS.items():
        module = sys.modules.get(name)
        if module is not None:
            registrar(module)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
