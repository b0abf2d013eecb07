"""What qkv.nn's trainable modules share: named_grads() and zero_grad().

A module keeps the gradients of its parameters (as torch's .grad); the
backward of a forward_with_grad call adds into them:

    out, grad_fn = layer.forward_with_grad(x)
    grad_x = grad_fn(grad_out)          # ∂loss/∂x; parameter gradients accumulate
    layer.named_grads()                 # {torch's parameter name: numpy array}
    layer.zero_grad()
"""


class GradMixin:
    """named_grads() and zero_grad() over self._impl."""

    def named_grads(self):
        """name -> gradient (a numpy copy), with torch's parameter names and order;
        zeros for parameters no backward has reached yet."""
        return self._impl.named_grads()

    def zero_grad(self):
        """Sets every parameter gradient to 0."""
        self._impl.zero_grad()
