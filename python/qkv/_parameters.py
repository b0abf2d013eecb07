"""parameters() / named_parameters() of qkv's modules and models, as torch's:
the model's own parameters, which an optimizer given them updates in place.

    opt = qkv.optim.AdamW(model.parameters(), lr=1e-3)
    sum(p.size for p in model.parameters())          # the parameter count
    dict(model.named_parameters())["linear.weight"]  # a live numpy array

Each parameter is a numpy array over the model's memory (no copy: writing
into it changes the model; state_dict() gives copies instead). For a
trainable module (one with forward_with_grad) the list also carries the
module's gradient buffers, so that `opt.step()` reads what its backward
accumulated, as torch's optimizers read `.grad`.

Not public: the lists come from the modules' methods.
"""

__all__ = ["ParameterList", "NamedParameterList", "named_parameters_of", "parameter_list",
           "WrappedModelParameters"]


class ParameterList(list):
    """A list of live numpy arrays, in torch's order (see the module doc)."""

    # qkv._core.ModuleParameters of a trainable module (values and gradient
    # buffers), or None: an optimizer then needs the gradients in step().
    _module_parameters = None


class NamedParameterList(list):
    """A list of (torch's name, live numpy array) pairs (see the module doc)."""

    _module_parameters = None


def _views(impl, prefix):
    views = impl._parameter_views()
    return [(f"{prefix}.{name}" if prefix else name, array) for name, array in views]


def _module_handle(impl):
    # Only modules that accumulate gradients get the handle; _parameter_list()
    # allocates their gradient buffers (what their backward would do anyway).
    return impl._parameter_list() if hasattr(impl, "_parameter_list") else None


def named_parameters_of(impl, prefix=""):
    """NamedParameterList of the compiled model `impl` (torch's names under `prefix`)."""
    out = NamedParameterList(_views(impl, prefix))
    out._module_parameters = _module_handle(impl)
    return out


def parameter_list(named):
    """The arrays of a NamedParameterList, with its gradient handle."""
    out = ParameterList(array for _, array in named)
    out._module_parameters = named._module_parameters
    return out


class WrappedModelParameters:
    """state_dict / load_state_dict / parameters / named_parameters /
    num_parameters of a Python model class that wraps a compiled model in
    `self._model` (BertModel, DecoderModel)."""

    def state_dict(self):
        """name -> numpy array (copies)."""
        return self._model.state_dict()

    def load_state_dict(self, state_dict):
        """Strict: exactly the names and shapes of state_dict(); numpy arrays
        or CPU torch tensors. A failed load changes nothing."""
        self._model.load_state_dict(dict(state_dict))

    def parameters(self):
        """The parameters as live numpy arrays over the model's memory, in
        state_dict() order: `qkv.optim.AdamW(model.parameters())` updates the
        model itself."""
        return parameter_list(self.named_parameters())

    def named_parameters(self, prefix=""):
        """(name, live numpy array) pairs, as parameters()."""
        return named_parameters_of(self._model, prefix)

    def num_parameters(self):
        return self._model.num_parameters()
