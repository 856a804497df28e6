"""kiln.custom_derivatives: jax.custom_derivatives' public names."""
from kiln._src.custom import custom_jvp, custom_vjp  # noqa: F401
from kiln._src.extras import closure_convert, custom_gradient, linear_transpose  # noqa: F401


class SymbolicZero:
    """A zero tangent known without its values: what a custom_jvp rule defined with
    symbolic_zeros=True gets for an argument no derivative reaches (its aval: the tangent's, float0
    for integers); the rule may return one for a zero output tangent."""

    def __init__(self, aval):
        self.aval = aval

    @property
    def shape(self):
        return self.aval.shape

    @property
    def dtype(self):
        return self.aval.dtype

    def __repr__(self):
        return f"SymbolicZero({self.aval})"


class CustomVJPPrimal:
    """A custom_vjp primal with its perturbed flag (optimize_remat): not used by kiln."""

    def __init__(self, value, perturbed):
        self.value, self.perturbed = value, perturbed


def custom_vjp_primal_tree_values(tree):
    """The values of a tree of CustomVJPPrimal (or plain values)."""
    from kiln._src import tree_util
    return tree_util.tree_map(lambda x: x.value if isinstance(x, CustomVJPPrimal) else x, tree,
                              is_leaf=lambda x: isinstance(x, CustomVJPPrimal))


def zero_from_primal(x, symbolic_zeros=False):
    """Zeros shaped like the primal pytree x."""
    from kiln import numpy as jnp
    from kiln._src import tree_util
    return tree_util.tree_map(jnp.zeros_like, x)


def linear_call(callee, transpose, residual_args, linear_args):
    """callee(residual_args, linear_args): kiln differentiates and transposes callee itself (the
    given transpose is not used; for a callee linear in linear_args the results are the same)."""
    del transpose
    return callee(residual_args, linear_args)


def __getattr__(name):
    """The primitives of custom derivatives (custom_jvp_call_p, custom_vjp_call_p), for comparisons
    with a jaxpr's eqn.primitive."""
    if name in ("custom_jvp_call_p", "custom_vjp_call_p", "custom_lin_p"):
        from kiln._src.primitive import primitive_named
        return primitive_named(name[:-2])
    raise AttributeError(f"module 'kiln.custom_derivatives' has no attribute {name!r}")
