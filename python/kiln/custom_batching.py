"""kiln.custom_batching: jax.custom_batching."""
import functools


def sequential_vmap(f):
    """f whose vmap runs it once per element (kiln's vmap of f gives the same values: f is
    returned as it is, batched by kiln's rules)."""
    return f


class custom_vmap:
    """A function with a user-defined batching rule: not supported yet by kiln (define the
    batched computation directly, or let kiln's rules batch the function)."""

    def __init__(self, fun):
        self.fun = fun
        functools.update_wrapper(self, fun)

    def def_vmap(self, rule):
        raise NotImplementedError("custom_vmap.def_vmap: user-defined batching rules are not supported yet by kiln")

    def __call__(self, *args, **kwargs):
        return self.fun(*args, **kwargs)
