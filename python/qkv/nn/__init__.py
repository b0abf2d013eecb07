"""qkv.nn: modules and functional ops with torch.nn's names, without torch.

Torch users: qkv.torch.nn has the attention modules as torch.nn.Modules
(torch Parameters, autograd, state_dict), e.g. qkv.torch.nn.MultiheadAttention.
"""

from . import functional
from . import positional
from .layers import Embedding, LayerNorm, Linear, RMSNorm
from .multihead_attention import MultiheadAttention
from .transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer,
                          TransformerEncoder, TransformerEncoderLayer)

__all__ = ["Embedding", "LayerNorm", "Linear", "MultiheadAttention", "RMSNorm", "Transformer",
           "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
           "TransformerEncoderLayer", "functional", "positional"]
