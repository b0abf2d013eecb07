"""Shared helpers of the parity tests."""

import numpy as np
import torch

# max|qkv - torch| / (max|torch| + 1e-6) must stay below these.
TOLERANCE = {np.float32: 1e-5, np.float64: 1e-12}


def as_numpy(x):
    if isinstance(x, torch.Tensor):
        return x.detach().numpy()
    return np.asarray(x)


def rel_err(ours, theirs):
    """max|ours - theirs| / (max|theirs| + 1e-6); inf when the shapes differ
    or NaNs appear in one of them only."""
    ours, theirs = as_numpy(ours), as_numpy(theirs)
    if ours.shape != theirs.shape:
        return float("inf")
    if ours.size == 0:
        return 0.0
    if np.isnan(ours).any() or np.isnan(theirs).any():
        return float("inf")
    diff = np.max(np.abs(ours.astype(np.float64) - theirs.astype(np.float64)))
    return float(diff / (np.max(np.abs(theirs.astype(np.float64))) + 1e-6))


def assert_close(ours, theirs, dtype, what):
    err = rel_err(ours, theirs)
    tol = TOLERANCE[dtype]
    assert err <= tol, f"{what}: relative error {err:.3g} > {tol:g}"
