"""qkv.optim: SGD, Adam and AdamW with torch.optim's semantics, over numpy arrays.

The C++ optimizers of qkv (include/qkv/optim/) update parameters in place.
Here the parameters are numpy arrays (float32 or float64, C-contiguous,
writeable) that each step() changes in place; numpy arrays carry no .grad,
so the gradients are passed to step(), in the order of the parameters:

    import numpy as np, qkv
    w = np.random.randn(4, 3).astype(np.float32)
    b = np.zeros(4, np.float32)
    opt = qkv.optim.AdamW([w, b], lr=1e-3, weight_decay=0.01)
    for batch in data:
        grad_w, grad_b = ...                    # gradients of the loss
        qkv.optim.clip_grad_norm_([grad_w, grad_b], max_norm=1.0)
        opt.step([grad_w, grad_b])              # w and b change in place

`params` may also be a dict name -> array: the names then key state_dict()
("<name>.exp_avg", ...), as in a checkpoint written by the C++ library;
with a list the names are "0", "1", ....

Or `params` is a trainable qkv.nn module (one with forward_with_grad): the
optimizer then updates the module's own parameters, in place and without
copies, from the gradients its backward accumulated, as torch's
`AdamW(model.parameters())` does:

    enc = qkv.nn.TransformerEncoder(layer, num_layers=6)
    opt = qkv.optim.AdamW(enc, lr=1e-4)
    out, grad_fn = enc.forward_with_grad(x)
    grad_fn(grad_out)
    opt.step()                                  # no gradients to pass
    enc.zero_grad()

Or `params` is what a qkv module's parameters() or named_parameters()
returns (live arrays over the module's memory): `AdamW(model.parameters())`
updates the model, from the gradients its backward accumulated when it is
trainable (step()), else from the gradients passed to step(grads).

The arithmetic is torch 2.13's single-tensor update in the parameters' dtype
(one rounding per torch tensor op), so results agree with torch.optim to the
last bits or nearly so. Hyperparameters are given once; `opt.lr` may be set
between steps (see WarmupCosineSchedule).
"""

import numbers as _numbers

import numpy as _np

from . import _core

__all__ = ["Adam", "AdamW", "SGD", "WarmupCosineSchedule", "clip_grad_norm_"]


def _named_params(params, kind):
    impl = getattr(params, "_impl", None)
    if impl is not None and hasattr(impl, "_parameter_list"):
        handle = impl._parameter_list()
        if len(handle) == 0:
            raise ValueError(f"{kind}(): optimizer got a module without parameters")
        return handle
    # A module's parameters() or named_parameters() (qkv/_parameters.py): a
    # trainable module's own values and gradient buffers.
    handle = getattr(params, "_module_parameters", None)
    if handle is not None:
        if len(handle) == 0:
            raise ValueError(f"{kind}(): optimizer got a module without parameters")
        return handle
    if isinstance(params, dict):
        items = [(str(name), array) for name, array in params.items()]
    else:
        try:
            params = list(params)  # a generator too, as torch takes
        except TypeError:
            raise TypeError(f"{kind}(): params must be a list or dict of numpy arrays, "
                            f"got {type(params).__name__}") from None
        # named_parameters(): (name, array) pairs, as torch's optimizers take them.
        if params and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                          for p in params):
            items = [(name, array) for name, array in params]
        else:
            items = [(str(i), array) for i, array in enumerate(params)]
    if not items:
        raise ValueError(f"{kind}(): optimizer got an empty parameter list")
    return items


class Optimizer:
    """Base of SGD, Adam and AdamW: step(grads), lr, state_dict(), load_state_dict()."""

    def __init__(self, impl, params):
        self._impl = impl
        self._params = params  # the arrays (the C++ side holds them too)

    def step(self, grads=None):
        """Updates every parameter in place from its gradient.

        grads: a list of arrays in the order of the parameters (or a dict by
        name when the parameters were given as a dict), each shaped like its
        parameter; None when the optimizer was given a module, whose
        backward left the gradients in the module.
        """
        kind = type(self).__name__
        if isinstance(self._params, _core.ModuleParameters):
            if grads is not None:
                raise ValueError(f"{kind}.step(): this optimizer updates a module from the "
                                 f"gradients its backward accumulated; call step() without "
                                 f"gradients")
            self._impl.step()
            return
        if grads is None:
            raise TypeError(f"{kind}.step(): pass the gradients, one per parameter (only an "
                            f"optimizer over a module reads them from the module)")
        if isinstance(grads, dict):
            grads = [grads[name] for name, _ in self._params]
        self._impl.step(list(grads))

    @property
    def lr(self):
        """The learning rate of the next step(); may be set between steps."""
        return self._impl.lr

    @lr.setter
    def lr(self, value):
        self._impl.lr = float(value)

    def state_dict(self):
        """The running state, name -> numpy array (copies)."""
        return self._impl.state_dict()

    def load_state_dict(self, state_dict):
        """Restores a state_dict() of an optimizer of the same kind and parameters."""
        self._impl.load_state_dict(dict(state_dict))


class SGD(Optimizer):
    """torch.optim.SGD(params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False).

    g = g + weight_decay·p;  b = g (first step) or momentum·b + (1 − dampening)·g;
    g = g + momentum·b (nesterov) or b;  p = p − lr·g.
    """

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False):
        items = _named_params(params, "SGD")
        impl = _core.make_sgd(items, float(lr), float(momentum), float(dampening),
                              float(weight_decay), bool(nesterov))
        super().__init__(impl, items)


def _betas(betas, kind):
    try:
        beta1, beta2 = (float(b) for b in betas)
    except (TypeError, ValueError):
        raise TypeError(f"{kind}(): betas must be a pair of floats, got {betas!r}") from None
    return beta1, beta2


class Adam(Optimizer):
    """torch.optim.Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
    amsgrad=False).

    g = g + weight_decay·p (L2);  m = lerp(m, g, 1 − β1);  v = β2·v + (1 − β2)·g²;
    p = p − lr/(1 − β1ᵗ) · m / (√v / √(1 − β2ᵗ) + eps)   (v → max over steps with amsgrad).
    """

    _decoupled = False
    _kind = "Adam"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False):
        items = _named_params(params, self._kind)
        beta1, beta2 = _betas(betas, self._kind)
        impl = _core.make_adam(items, float(lr), beta1, beta2, float(eps), float(weight_decay),
                               bool(amsgrad), self._decoupled)
        super().__init__(impl, items)


class AdamW(Adam):
    """torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
    amsgrad=False): Adam with decoupled weight decay, p = p·(1 − lr·weight_decay) first."""

    _decoupled = True
    _kind = "AdamW"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)


def clip_grad_norm_(grads, max_norm, norm_type=2.0, error_if_nonfinite=False):
    """torch.nn.utils.clip_grad_norm_ over gradient arrays (scaled in place).

    Returns the total norm of all gradients viewed as one vector (a float),
    and multiplies every gradient by min(max_norm / (total + 1e-6), 1).
    grads: an array or a list of writeable C-contiguous float32/float64 arrays.
    norm_type: any p > 0, or inf (also 'inf').
    """
    if isinstance(grads, _np.ndarray):
        grads = [grads]
    norm_type = float(norm_type)
    return _core.clip_grad_norm_(list(grads), float(max_norm), norm_type,
                                 bool(error_if_nonfinite))


class WarmupCosineSchedule:
    """Linear warmup then cosine decay to min_lr (transformers'
    get_cosine_with_min_lr_schedule_with_warmup with min_lr_rate = min_lr / base_lr).

    lr(step) is the rate for the update after `step` earlier updates:
    base_lr·step/warmup_steps during warmup, then
    min_lr + (base_lr − min_lr)·½(1 + cos(π·progress)); min_lr after total_steps.
    """

    def __init__(self, base_lr, warmup_steps, total_steps, min_lr=0.0):
        for name, value in (("warmup_steps", warmup_steps), ("total_steps", total_steps)):
            if not isinstance(value, _numbers.Integral):
                raise TypeError(f"WarmupCosineSchedule(): {name} must be an int, got {value!r}")
        self.base_lr = float(base_lr)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.min_lr = float(min_lr)
        self.lr(0)  # validates the arguments

    def lr(self, step):
        return _core.warmup_cosine_lr(int(step), self.base_lr, self.warmup_steps,
                                      self.total_steps, self.min_lr)
