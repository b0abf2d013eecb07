"""qkv.optim against torch.optim, torch.nn.utils.clip_grad_norm_ and
torch.nn.functional.cross_entropy (torch 2.13 is the oracle).

Each optimizer case starts qkv and torch from the same parameters and feeds
both the same sequence of gradients (fixed random arrays, one set per step),
with the learning rate changed between steps as a schedule would; after every
step the parameters must agree within max|qkv - torch| / max|torch| ≤ 1e-6 in
float32 and ≤ 1e-12 in float64. The optimizers' state (moment buffers, step)
is compared too.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import qkv
from helpers import encoder_layer_like_torch, rel_err

TOL = {np.float32: 1e-6, np.float64: 1e-12}
SHAPES = [(7, 5), (5,), (3, 4, 2)]
STEPS = 10


def initial_params(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in SHAPES]


def gradient_sequence(dtype, steps=STEPS, seed=1):
    rng = np.random.default_rng(seed)
    # Gradients of varied size, some tiny, so that eps and the moments matter.
    return [[(rng.standard_normal(s) * 10.0 ** rng.integers(-4, 2)).astype(dtype)
             for s in SHAPES] for _ in range(steps)]


def lr_at(step, base):
    return base * (1.0 + 0.5 * math.sin(step))


def run_both(dtype, make_qkv, make_torch, base_lr, steps=STEPS):
    """Runs both optimizers; returns the worst relative error over all steps and the two."""
    ours = initial_params(dtype)
    theirs = [torch.tensor(p.copy(), requires_grad=True) for p in ours]
    opt_q = make_qkv(ours)
    opt_t = make_torch(theirs)
    worst = 0.0
    for step, grads in enumerate(gradient_sequence(dtype, steps)):
        lr = lr_at(step, base_lr)
        opt_q.lr = lr
        for group in opt_t.param_groups:
            group["lr"] = lr
        for p, g in zip(theirs, grads):
            p.grad = torch.from_numpy(g.copy())
        opt_t.step()
        opt_q.step(grads)
        for p, t in zip(ours, theirs):
            worst = max(worst, rel_err(p, t))
    return worst, opt_q, opt_t, theirs


def check_state(opt_q, opt_t, theirs, names, dtype):
    """Compares qkv's state_dict with torch's per-parameter state."""
    state = opt_q.state_dict()
    for i, p in enumerate(theirs):
        for name in names:
            torch_value = opt_t.state[p][name]
            ours = state[f"{i}.{name}"]
            if name == "step":
                assert float(ours) == float(torch_value)
            else:
                err = rel_err(ours, torch_value)
                assert err <= TOL[dtype] * 10, f"{name} of parameter {i}: {err:.3g}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weight_decay,amsgrad,eps", [
    (0.01, False, 1e-8), (0.1, False, 1e-8), (0.0, False, 1e-8), (0.05, True, 1e-6),
])
def test_adamw(dtype, weight_decay, amsgrad, eps):
    kwargs = dict(betas=(0.9, 0.99), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)
    worst, opt_q, opt_t, theirs = run_both(
        dtype, lambda p: qkv.optim.AdamW(p, lr=1e-2, **kwargs),
        lambda p: torch.optim.AdamW(p, lr=1e-2, **kwargs), 1e-2)
    print(f"AdamW {np.dtype(dtype).name} wd={weight_decay} amsgrad={amsgrad}: {worst:.2e}")
    assert worst <= TOL[dtype]
    names = ["step", "exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if amsgrad else [])
    check_state(opt_q, opt_t, theirs, names, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weight_decay,amsgrad", [(0.0, False), (0.1, False), (0.0, True)])
def test_adam(dtype, weight_decay, amsgrad):
    kwargs = dict(weight_decay=weight_decay, amsgrad=amsgrad)
    worst, opt_q, opt_t, theirs = run_both(
        dtype, lambda p: qkv.optim.Adam(p, lr=3e-3, **kwargs),
        lambda p: torch.optim.Adam(p, lr=3e-3, **kwargs), 3e-3)
    print(f"Adam {np.dtype(dtype).name} wd={weight_decay} amsgrad={amsgrad}: {worst:.2e}")
    assert worst <= TOL[dtype]
    check_state(opt_q, opt_t, theirs, ["step", "exp_avg", "exp_avg_sq"], dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("momentum,dampening,weight_decay,nesterov", [
    (0.9, 0.0, 0.01, True), (0.9, 0.2, 0.05, False), (0.0, 0.0, 0.0, False),
    (0.5, 0.0, 0.0, False),
])
def test_sgd(dtype, momentum, dampening, weight_decay, nesterov):
    kwargs = dict(momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                  nesterov=nesterov)
    worst, opt_q, opt_t, theirs = run_both(
        dtype, lambda p: qkv.optim.SGD(p, lr=1e-2, **kwargs),
        lambda p: torch.optim.SGD(p, lr=1e-2, **kwargs), 1e-2)
    print(f"SGD {np.dtype(dtype).name} momentum={momentum} dampening={dampening} "
          f"wd={weight_decay} nesterov={nesterov}: {worst:.2e}")
    assert worst <= TOL[dtype]
    if momentum:
        check_state(opt_q, opt_t, theirs, ["momentum_buffer"], dtype)


def test_state_dict_round_trip_continues_identically():
    params = {"w": initial_params(np.float32)[0], "b": initial_params(np.float32)[1]}
    opt = qkv.optim.AdamW(params, lr=1e-2)
    grads = gradient_sequence(np.float32)
    for g in grads[:3]:
        opt.step({"w": g[0], "b": g[1]})
    state = opt.state_dict()
    assert sorted(state) == ["b.exp_avg", "b.exp_avg_sq", "b.step", "w.exp_avg",
                             "w.exp_avg_sq", "w.step"]
    copy = {k: v.copy() for k, v in params.items()}
    opt2 = qkv.optim.AdamW(copy, lr=1e-2)
    opt2.load_state_dict(state)
    for g in grads[3:]:
        opt.step({"w": g[0], "b": g[1]})
        opt2.step({"w": g[0], "b": g[1]})
    np.testing.assert_array_equal(params["w"], copy["w"])
    np.testing.assert_array_equal(params["b"], copy["b"])


def test_optimizer_argument_errors():
    p = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match="nesterov"):
        qkv.optim.SGD([p], nesterov=True)
    with pytest.raises(ValueError, match="C-contiguous"):
        qkv.optim.Adam([np.zeros((3, 4), np.float32).T])
    with pytest.raises(TypeError, match="float32 or float64"):
        qkv.optim.Adam([np.zeros(3, np.int64)])
    opt = qkv.optim.SGD([p], lr=0.1)
    with pytest.raises(ValueError, match=r"must have the shape \[3\]"):
        opt.step([np.zeros(4, np.float32)])
    with pytest.raises(ValueError, match="unexpected key"):
        opt.load_state_dict({"1.momentum_buffer": np.zeros(3, np.float32)})


def test_adamw_over_a_module_trains_it_as_torch_does():
    """qkv.optim.AdamW(module): three steps of forward_with_grad, backward and
    step() on a TransformerEncoderLayer, against the same steps in torch."""
    ours, theirs = encoder_layer_like_torch()
    opt_t = torch.optim.AdamW(theirs.parameters(), lr=1e-2, weight_decay=0.1)
    opt_q = qkv.optim.AdamW(ours, lr=1e-2, weight_decay=0.1)
    rng = np.random.default_rng(3)
    for step in range(3):
        x = rng.standard_normal((2, 5, 16))
        g = rng.standard_normal((2, 5, 16))
        (theirs(torch.from_numpy(x)) * torch.from_numpy(g)).sum().backward()
        opt_t.step()
        opt_t.zero_grad()
        _, grad_fn = ours.forward_with_grad(x)
        grad_fn(g)
        opt_q.step()
        ours.zero_grad()
        state = ours.state_dict()
        for name, value in theirs.state_dict().items():
            value = value.numpy()
            if name == "self_attn.in_proj_bias":
                # The key bias (its middle third) has gradient 0 in exact arithmetic, and
                # Adam divides the rounding noise (~1e-17) by its own size: both libraries
                # move it by noise-driven amounts up to lr · 1e-8. Compared on its own.
                key = slice(16, 32)
                assert np.abs(state[name][key] - value[key]).max() <= 1e-2 * 1e-6
                state[name][key] = value[key]
            err = rel_err(state[name], value)
            assert err <= 1e-10, f"step {step}, {name}: {err:.3g}"
    assert all(np.all(g == 0) for g in ours.named_grads().values())


def test_optimizer_over_a_module_takes_no_gradients():
    layer = qkv.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    opt = qkv.optim.SGD(layer, lr=0.1)
    with pytest.raises(ValueError, match="without gradients"):
        opt.step([np.zeros(3, np.float32)])
    arrays = qkv.optim.SGD([np.zeros(3, np.float32)], lr=0.1)
    with pytest.raises(TypeError, match="pass the gradients"):
        arrays.step()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("max_norm,norm_type", [
    (1.0, 2.0), (100.0, 2.0), (0.5, math.inf), (2.0, 1.0), (0.3, 3.0),
])
def test_clip_grad_norm(dtype, max_norm, norm_type):
    grads = gradient_sequence(dtype, steps=1, seed=5)[0]
    ours = [g.copy() for g in grads]
    params = [torch.zeros(g.shape, dtype=torch.from_numpy(g).dtype, requires_grad=True)
              for g in grads]
    for p, g in zip(params, grads):
        p.grad = torch.from_numpy(g.copy())
    total_t = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)
    total_q = qkv.optim.clip_grad_norm_(ours, max_norm, norm_type=norm_type)
    tol = TOL[dtype]
    assert abs(total_q - float(total_t)) <= tol * float(total_t)
    worst = max(rel_err(o, p.grad) for o, p in zip(ours, params))
    print(f"clip_grad_norm_ {np.dtype(dtype).name} max_norm={max_norm} p={norm_type}: "
          f"{worst:.2e}")
    assert worst <= tol


def test_clip_grad_norm_nonfinite():
    g = np.array([1.0, np.inf], np.float32)
    with pytest.raises(ValueError, match="non-finite"):
        qkv.optim.clip_grad_norm_([g.copy()], 1.0, error_if_nonfinite=True)
    ours = g.copy()
    p = torch.zeros(2, requires_grad=True)
    p.grad = torch.from_numpy(g.copy())
    assert math.isinf(qkv.optim.clip_grad_norm_([ours], 1.0))
    torch.nn.utils.clip_grad_norm_([p], 1.0)
    np.testing.assert_array_equal(ours, p.grad.numpy())  # [0, nan] in both


CE_CASES = [  # (ignore_index, label_smoothing, reduction)
    (-100, 0.0, "mean"), (-100, 0.1, "mean"), (2, 0.0, "mean"), (2, 0.25, "mean"),
    (-100, 0.1, "sum"), (3, 0.3, "none"), (-100, 1.0, "mean"),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ignore_index,label_smoothing,reduction", CE_CASES)
def test_cross_entropy(dtype, ignore_index, label_smoothing, reduction):
    rng = np.random.default_rng(7)
    n, c = 13, 9
    logits = (rng.standard_normal((n, c)) * 3).astype(dtype)
    target = rng.integers(0, c, n)
    target[[1, 5]] = ignore_index  # rows 1 and 5 (and any drawn equal to it) are ignored
    x = torch.tensor(logits, requires_grad=True)
    t = torch.tensor(target)
    loss_t = F.cross_entropy(x, t, ignore_index=ignore_index, label_smoothing=label_smoothing,
                             reduction=reduction)
    grad_out = (torch.ones(()) if reduction != "none" else torch.tensor(
        rng.standard_normal(n))).to(x.dtype)
    loss_t.backward(grad_out)
    loss_q = qkv._core.cross_entropy(logits, target.tolist(), ignore_index, label_smoothing,
                                     reduction)
    grad_q = qkv._core.cross_entropy_backward(grad_out.numpy(), logits, target.tolist(),
                                              ignore_index, label_smoothing, reduction)
    tol = 1e-6 if dtype == np.float32 else 1e-12
    loss_err, grad_err = rel_err(loss_q, loss_t), rel_err(grad_q, x.grad)
    print(f"cross_entropy {np.dtype(dtype).name} ignore={ignore_index} "
          f"smoothing={label_smoothing} {reduction}: loss {loss_err:.2e} grad {grad_err:.2e}")
    assert loss_err <= tol
    assert grad_err <= tol


def test_cross_entropy_all_ignored_is_nan_with_zero_gradient():
    logits = np.random.default_rng(0).standard_normal((3, 4))
    target = [-100, -100, -100]
    x = torch.tensor(logits, requires_grad=True)
    loss_t = F.cross_entropy(x, torch.tensor(target), label_smoothing=0.1)
    loss_t.backward()
    loss_q = qkv._core.cross_entropy(logits, target, -100, 0.1, "mean")
    assert math.isnan(float(loss_q)) and math.isnan(float(loss_t.detach()))
    grad_q = qkv._core.cross_entropy_backward(np.ones(()), logits, target, -100, 0.1, "mean")
    np.testing.assert_array_equal(grad_q, x.grad.numpy())


def test_warmup_cosine_schedule_matches_transformers():
    transformers = pytest.importorskip("transformers")
    get = transformers.get_cosine_with_min_lr_schedule_with_warmup
    base, warmup, total, min_lr = 1e-3, 7, 50, 1e-4
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=base)
    sched = get(opt, num_warmup_steps=warmup, num_training_steps=total, min_lr=min_lr)
    ours = qkv.optim.WarmupCosineSchedule(base, warmup, total, min_lr)
    for step in range(total + 1):
        assert ours.lr(step) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-12, abs=1e-18)
        opt.step()
        sched.step()
