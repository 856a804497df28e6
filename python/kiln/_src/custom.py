"""custom_jvp, custom_vjp and checkpoint.

Evaluating a custom_jvp/custom_vjp function (eagerly, under jit or vmap) runs the primal function,
as JAX does. Differentiating through one is not supported yet: the custom rule would have to be
carried into the program as an equation with sub-programs, which kiln's IR does not have yet, and
differentiating the primal function instead could give different numbers than the rule (custom
rules exist for numerical safety), so it raises NotImplementedError rather than risk a wrong answer.

checkpoint/remat returns the same values and gradients as the function itself; kiln's reverse mode
does not yet trade memory for recomputation, so the policy is accepted and has no effect yet.
"""

import functools

from kiln._src import core


def _check_not_differentiated(kind, fun):
    if core.ad_tracing():
        name = getattr(fun, "__name__", "function")
        raise NotImplementedError(
            f"differentiating through {kind} function {name!r} is not supported yet by kiln "
            "(its custom rule cannot be carried into the traced program yet); call the function "
            "without grad/jvp/vjp, or differentiate a version without the custom rule")


class custom_jvp:
    """A function with a custom JVP rule (see jax.custom_jvp)."""

    def __init__(self, fun, nondiff_argnums=()):
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp = None
        functools.update_wrapper(self, fun)

    def defjvp(self, jvp, symbolic_zeros=False):
        self.jvp = jvp
        return jvp

    def defjvps(self, *jvps):
        self.jvp = jvps
        return None

    def __call__(self, *args, **kwargs):
        if self.jvp is None:
            raise AttributeError(f"No JVP defined for custom_jvp function {self.fun.__name__} using defjvp.")
        _check_not_differentiated("custom_jvp", self.fun)
        return self.fun(*args, **kwargs)


class custom_vjp:
    """A function with a custom VJP rule (see jax.custom_vjp)."""

    def __init__(self, fun, nondiff_argnums=()):
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd = self.bwd = None
        functools.update_wrapper(self, fun)

    def defvjp(self, fwd, bwd, symbolic_zeros=False, optimize_remat=False):
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args, **kwargs):
        if self.fwd is None:
            raise AttributeError(f"No VJP defined for custom_vjp function {self.fun.__name__} using defvjp.")
        _check_not_differentiated("custom_vjp", self.fun)
        return self.fun(*args, **kwargs)


class checkpoint_policies:
    """Names of JAX's rematerialization policies (accepted; kiln does not rematerialize yet)."""

    @staticmethod
    def nothing_saveable(*_, **__):
        return False

    @staticmethod
    def everything_saveable(*_, **__):
        return True

    dots_saveable = everything_saveable
    dots_with_no_batch_dims_saveable = everything_saveable


def checkpoint(fun=None, *, prevent_cse=True, policy=None, static_argnums=()):
    """Same values and gradients as `fun` (rematerialization itself is not implemented yet)."""
    if fun is None:
        return lambda f: checkpoint(f, prevent_cse=prevent_cse, policy=policy, static_argnums=static_argnums)

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        return fun(*args, **kwargs)
    return wrapped


remat = checkpoint
