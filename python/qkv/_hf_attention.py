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
    attend), or None when the layer's causality (is_causal) says it all.

The function runs qkv.torch.scaled_dot_product_attention, a torch custom op
with autograd, so models train through it. GQA (module.num_key_value_groups
> 1) runs natively (enable_gqa), without repeating keys and values.
"""

import importlib.abc
import importlib.machinery
import sys

import torch

__all__ = ["NAME", "attention_forward", "register"]

NAME = "qkv"


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      is_causal=None, **kwargs):
    """transformers' attention-function signature -> (attn_output [B, L, H, E], None).

    attention_mask: sdpa's boolean [B, 1|H, L, S] (True = attend), a float
    additive mask, or None. is_causal: None means module.is_causal (default
    True, as sdpa); it only applies without a mask and for L > 1 (a mask
    already holds the causal pattern; one query token sees every key).
    dropout: the probability (transformers passes 0.0 in eval mode).
    """
    from . import torch as qkv_torch  # qkv.torch imports this module: import late

    softcap = kwargs.get("softcap")  # Gemma-2's logit soft-capping: qkv has it
    if kwargs.get("position_bias") is not None:
        raise ValueError("qkv attention: position_bias (T5-style) is not supported; use "
                         "attn_implementation=\"sdpa\" or \"eager\" for this model")
    groups = getattr(module, "num_key_value_groups", 1) or 1
    q_length, kv_length = query.shape[2], key.shape[2]
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    causal = None
    if attention_mask is None and is_causal and q_length > 1:
        # Queries are the last q_length positions of the keys (a cache before them).
        causal = "bottom_right" if kv_length > q_length else "top_left"
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        attention_mask = attention_mask.to(query.dtype)
    out = qkv_torch.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=float(dropout), scale=scaling,
        enable_gqa=groups > 1, causal=causal,
        softcap=None if softcap is None else float(softcap))
    return out.transpose(1, 2).contiguous(), None


def _register_attention(modeling_utils):
    modeling_utils.AttentionInterface.register(NAME, attention_forward)


def _register_mask(masking_utils):
    masking_utils.AttentionMaskInterface.register(NAME, masking_utils.sdpa_mask)


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
