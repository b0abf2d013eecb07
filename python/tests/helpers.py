"""Shared helpers of the parity tests."""

import os
import pathlib

import numpy as np
import torch

import qkv

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


def sdpa_case_id(c, heads):
    """The pytest id of a case of the randomised SDPA grids (test_sdpa_parity,
    test_backward_parity): index, dtype, batch dims, `heads` (the grid's own
    notation), lengths, head dims and mask."""
    dt = "f32" if c["dtype"] == np.float32 else "f64"
    mask = c["mask"]
    if "mask_shape" in c:
        mask += "[" + ",".join(map(str, c["mask_shape"])) + "]"
    return (f"{c['index']:03d}-{dt}-B{c['batch']}-{heads}-L{c['L']}-S{c['S']}-E{c['E']}-"
            f"Ev{c['Ev']}-{mask}".replace(" ", ""))


def encoder_layer_like_torch():
    """A float64 TransformerEncoderLayer(16, 4, 32, dropout 0, batch-first) of
    torch with seeded weights, and qkv's with the same weights: (ours, theirs)."""
    torch.manual_seed(0)
    theirs = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True,
                                              dtype=torch.float64)
    ours = qkv.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True,
                                          dtype=np.float64)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


def copy_torch_state(theirs, ours, as_torch, train):
    """Loads the torch module's state_dict into ours (as torch tensors, or as
    numpy copies when not `as_torch`), then puts both in training mode if
    `train`, else in eval mode."""
    state = theirs.state_dict()
    if not as_torch:
        state = {name: t.numpy().copy() for name, t in state.items()}
    ours.load_state_dict(state)
    for module in (theirs, ours):
        module.train(train)


def cli_path():
    """The `qkv` binary: $QKV_CLI, else the build's ($QKV_BUILD_DIR, default build/)."""
    if os.environ.get("QKV_CLI"):
        return pathlib.Path(os.environ["QKV_CLI"])
    root = pathlib.Path(__file__).resolve().parents[2]
    return root / os.environ.get("QKV_BUILD_DIR", "build") / "tools" / "qkv"
