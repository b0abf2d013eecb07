"""BERT-family encoders (BERT, MiniLM, all-MiniLM-L6-v2, ...) computing what
transformers' BertModel computes: the last hidden state.

    import qkv
    model = qkv.models.BertModel.from_pretrained("models/all-MiniLM-L6-v2")
    hidden = model(input_ids, attention_mask)       # [B, L] ints -> [B, L, 384] (numpy)

Parameter names (state_dict) are transformers' without the "bert." prefix:
embeddings.word_embeddings.weight, encoder.layer.<i>.attention.self.query.weight,
... so that `model.load_state_dict(hf_model.state_dict())` works once the
non-parameter buffer embeddings.position_ids and the pooler are left out.
"""

import json as _json
import os as _os

from . import _core
from ._parameters import WrappedModelParameters

__all__ = ["BertModel"]


class BertModel(WrappedModelParameters):
    """Embeddings (word + position + token type, LayerNorm) and N post-norm
    encoder layers, as transformers.BertModel without its pooler.

    BertModel(config, *, generator=None): `config` is a dict of config.json
    fields (vocab_size, hidden_size, num_hidden_layers, num_attention_heads,
    intermediate_size required; max_position_embeddings, type_vocab_size,
    layer_norm_eps, hidden_act optional) or the path of a config.json. The
    weights are random (normal, std 0.02, as transformers initialises them).
    Use from_pretrained() for a model directory.
    """

    def __init__(self, config, *, generator=None):
        if isinstance(config, (str, _os.PathLike)):
            with open(config, encoding="utf-8") as f:
                text = f.read()
        else:
            text = _json.dumps(dict(config))
        self._model = _core.BertModel(text, generator)

    @classmethod
    def from_pretrained(cls, model_dir):
        """config.json and model.safetensors of a (Hugging Face) model directory."""
        self = cls.__new__(cls)
        self._model = _core.BertModel.from_pretrained(_os.fspath(model_dir))
        return self

    @property
    def config(self):
        """The config fields that shape the model, as a dict."""
        return self._model.config()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        """input_ids, attention_mask, token_type_ids: [B, L] or [L] ints (numpy,
        torch or lists); attention_mask 1 for real tokens, 0 for padding (default
        all 1); token_type_ids default all 0  ->  last hidden state [B, L, D] float32.
        """
        return self._model.forward(input_ids, attention_mask, token_type_ids)

    __call__ = forward
