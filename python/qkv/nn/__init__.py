"""qkv.nn: modules and functional ops with torch.nn's names."""

from . import functional
from .multihead_attention import MultiheadAttention

__all__ = ["MultiheadAttention", "functional"]
