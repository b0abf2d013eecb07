"""What qkv.nn's module classes share: torch.nn.Module's small interface
(__call__, train/eval, state_dict/load_state_dict) over a compiled _core object.

Not public: use the classes in qkv.nn.
"""

import sys
from collections import namedtuple

import numpy as np

from .. import _core
from .._parameters import NamedParameterList, named_parameters_of, parameter_list

# As torch's load_state_dict result.
IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def check_device(device, module):
    if device is not None and str(device) not in ("cpu", "cpu:0"):
        raise ValueError(f"{module}(): qkv runs on the CPU only, got device={device!r}")


def check_generator(generator, function):
    if generator is not None and not isinstance(generator, _core.Generator):
        raise TypeError(f"{function}(): argument 'generator' must be a qkv.Generator or None, "
                        f"got {type(generator).__name__}")


def is_torch_tensor(x):
    torch = sys.modules.get("torch")  # never import torch just to ask
    return torch is not None and isinstance(x, torch.Tensor)


def integer_array(x, function, name):
    """x (array, torch tensor, list or int) as a C-contiguous int64 array."""
    if is_torch_tensor(x):
        if x.device.type != "cpu":
            raise ValueError(f"{function}(): argument '{name}' must be a CPU tensor, "
                             f"got a tensor on {x.device}")
        x = x.detach().numpy()
    array = np.asarray(x)
    if array.dtype.kind not in "iu":
        raise TypeError(f"{function}(): argument '{name}' must hold integers (e.g. int64), "
                        f"got dtype {array.dtype}")
    return np.ascontiguousarray(array, dtype=np.int64)


def attach_view(view, owner, name):
    """Marks `view` as the part `name` of `owner` (None: not a view)."""
    if owner is not None:
        view._owner = owner._owner if owner._owner is not None else owner
        view._path = f"{owner._path}.{name}" if owner._path else name


def keep_generator(module, generator):
    """Keeps `generator` alive as long as the compiled module that uses it.

    The compiled modules hold a plain pointer to their generator. The binding
    ties the generator to the Python object set_generator was called on; a
    view (e.g. encoder.layers[0]) may die long before the module it belongs to,
    so the generator is also kept by the top module, under the view's path
    (replacing what that path and the parts below it had).
    """
    top = module._owner if module._owner is not None else module
    kept = top.__dict__.setdefault("_kept_generators", {})
    path = module._path
    for key in [k for k in kept if not path or k == path or k.startswith(path + ".")]:
        del kept[key]
    if generator is not None:
        kept[path] = generator


def kept_generators(module):
    """The generators the module tree of `module` uses (see keep_generator)."""
    top = module._owner if module._owner is not None else module
    return list(top.__dict__.get("_kept_generators", {}).values())


class Module:
    """torch.nn.Module's interface over `self._impl`, a qkv._core module.

    Subclasses set self._impl in __init__ and define forward().
    """

    # A view (a part of another module, e.g. a stack's layer) records the
    # module at the top and its own name under it; see keep_generator.
    _owner = None
    _path = ""

    @classmethod
    def _wrap(cls, impl, owner=None, name=""):
        """A Python module over an existing compiled one: the part `name` of `owner`."""
        module = cls.__new__(cls)
        module._impl = impl
        attach_view(module, owner, name)
        return module

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # --- Mode ------------------------------------------------------------------
    def train(self, mode=True):
        """Training mode (dropout active) when mode is True; returns self."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self._impl.train(mode)
        return self

    def eval(self):
        """Inference mode (no dropout); returns self."""
        return self.train(False)

    @property
    def training(self):
        return self._impl.training

    @training.setter
    def training(self, mode):
        self.train(bool(mode))

    # --- Precision -------------------------------------------------------------
    def set_precision(self, precision):
        """Inference arithmetic of the module and its children: "float32"
        (exact), "bfloat16" ("bf16") or "int8". Linear weights are converted
        once, now; training needs "float32". Returns self."""
        self._impl.set_precision(str(precision))
        return self

    def record_input_ranges(self, on=True):
        """int8 calibration (SmoothQuant): while on, float32 forward passes
        note the largest |x| of each input feature of every linear map;
        set_precision("int8") then smooths the weights against them. Turning
        it on forgets earlier notes. Returns self."""
        self._impl.record_input_ranges(bool(on))
        return self

    @property
    def precision(self):
        return self._impl.precision

    def set_generator(self, generator):
        """Draw dropout from `generator` (a qkv.Generator; None = the default one)."""
        name = type(self).__name__
        if not hasattr(self._impl, "set_generator"):
            raise TypeError(f"{name}.set_generator(): {name} draws no random numbers")
        check_generator(generator, f"{name}.set_generator")
        self._impl.set_generator(generator)
        keep_generator(self, generator)

    # --- Parameters ------------------------------------------------------------
    def state_dict(self):
        """name -> numpy array (a copy), with torch's names and order."""
        return self._impl.state_dict()

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copies parameters in from a mapping name -> numpy array or CPU torch
        tensor, e.g. the same torch module's state_dict().

        strict=True (the default, as torch): every expected name must be
        present with its exact shape and no other name, else ValueError and
        nothing changes. strict=False loads the names that match and ignores
        the rest. Returns (missing_keys, unexpected_keys) as torch does.
        `assign` is accepted for torch's signature; values are always copied.
        """
        del assign  # qkv copies in every case: the module owns its memory
        given = dict(state_dict)
        expected = self._impl.state_dict()
        missing = [name for name in expected if name not in given]
        unexpected = [name for name in given if name not in expected]
        if strict:
            self._impl.load_state_dict(given)
        else:
            merged = dict(expected)
            merged.update({name: value for name, value in given.items() if name in expected})
            self._impl.load_state_dict(merged)
        return IncompatibleKeys(missing, unexpected)

    def parameters(self, recurse=True):
        """The module's own parameters, in torch's order: numpy arrays over
        its memory (not copies), so that `qkv.optim.AdamW(m.parameters())`
        trains the module (see qkv/_parameters.py). recurse=False: only the
        parameters of this module itself, not of its children."""
        return parameter_list(self.named_parameters(recurse=recurse))

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """(torch's name, live numpy array) pairs, as parameters(); names
        start with `prefix` + "." when a prefix is given. remove_duplicate is
        accepted for torch's signature (qkv modules share no parameter)."""
        del remove_duplicate
        named = named_parameters_of(self._impl)
        if not recurse:
            kept = NamedParameterList((n, a) for n, a in named if "." not in n)
            kept._module_parameters = None  # a subset: the optimizer needs the gradients
            named = kept
        if prefix:
            handle = named._module_parameters
            named = NamedParameterList((f"{prefix}.{n}", a) for n, a in named)
            named._module_parameters = handle
        return named

    @property
    def dtype(self):
        """"float32" or "float64"."""
        return self._impl.dtype
