"""Torch in, torch out: the rule qkv's functions follow for their results.

If any tensor argument of a call is a torch.Tensor, the call's array results
are torch tensors (over qkv's output memory: torch.from_numpy, no copy);
otherwise they are numpy arrays, as before. torch is never imported here: a
torch tensor argument means the caller already imported it.
"""

import sys

import numpy as np


def torch_if_any(*args):
    """The torch module if any of `args` is a torch.Tensor, else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    for a in args:
        if isinstance(a, torch.Tensor):
            return torch
    return None


def needs_grad(torch, *args):
    """True when grad mode is on and a torch tensor among `args` requires grad."""
    return torch.is_grad_enabled() and any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in args)


def plain_tensors(torch, *args):
    """False when a torch tensor among `args` is a subclass other than a
    Parameter or Buffer (and not a torch CausalBias, which qkv maps to its
    causal alignments), or is not a dense CPU tensor (nested, sparse, another
    device): those the bindings refuse by name."""
    nn = torch.nn
    plain = (torch.Tensor, nn.Parameter, getattr(nn, "Buffer", torch.Tensor))
    for a in args:
        if not isinstance(a, torch.Tensor):
            continue
        if type(a).__name__ == "CausalBias" and type(a).__module__.startswith("torch."):
            continue
        if type(a) not in plain or a.is_nested or a.layout != torch.strided or \
                a.device.type != "cpu":
            return False
    return True


def as_torch(torch, x):
    """x as a torch tensor: numpy arrays shared (copied if read-only: torch
    tensors are always writable), tuples element-wise, None and others as is."""
    if torch is None or x is None or isinstance(x, torch.Tensor):
        return x
    if isinstance(x, tuple):
        return type(x)(*(as_torch(torch, e) for e in x)) if hasattr(x, "_fields") else tuple(
            as_torch(torch, e) for e in x)
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x if x.flags.writeable else x.copy())
    return x


def torch_input(torch, x):
    """An argument for a torch operator: torch tensors as they are, None as
    None, anything numpy reads as a tensor over the same memory."""
    if x is None or isinstance(x, torch.Tensor):
        return x
    array = np.asarray(x)
    return torch.from_numpy(array if array.flags.writeable else array.copy())
