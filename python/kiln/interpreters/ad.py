"""jax.interpreters.ad: derivative rules of library primitives (primitive_jvps, primitive_transposes),
symbolic zeros (Zero) and helpers. kiln uses a primitive's JVP rule when the primitive is bound under
grad/jvp (see kiln/_src/primitive.py); transposition is kiln's own, of what the JVP rule computes."""
import numpy as np

from kiln._src.primitive import primitive_jvps, primitive_transposes  # noqa: F401


class Zero:
    """A symbolic zero tangent of abstract value aval."""

    def __init__(self, aval):
        self.aval = aval

    @staticmethod
    def from_primal_value(x):
        """The zero tangent of x: its tangent aval (float0 for integers and booleans, as JAX's)."""
        from kiln._src.primitive import aval_of
        return Zero(aval_of(x).to_tangent_aval())

    def __repr__(self):
        return f"Zero({self.aval})"


# As JAX's: a pytree node without children (its aval the aux data), so a tree_map over tangents
# passes a symbolic zero through and vmap hands one back as it is
from kiln._src import tree_util as _tree_util  # noqa: E402
_tree_util.register_pytree_node(Zero, lambda z: ((), z.aval), lambda aval, _: Zero(aval))


class UndefinedPrimal:
    """A linear input of a transpose rule (its value is not known)."""

    def __init__(self, aval):
        self.aval = aval

    def __repr__(self):
        return f"UndefinedPrimal({self.aval})"


def is_undefined_primal(x):
    return isinstance(x, UndefinedPrimal)


def instantiate_zeros(t):
    """A dense array for a symbolic Zero (other tangents as they are)."""
    if isinstance(t, Zero):
        return zeros_like_aval(t.aval)
    return t


def zeros_like_aval(aval):
    """Zeros of aval: an array, or for float0 (an integer's tangent) a NumPy float0 array, as JAX's."""
    from kiln._src.toplevel import float0
    if np.dtype(aval.dtype) == float0:
        return np.zeros(aval.shape, float0)
    import kiln.numpy as jnp
    return jnp.zeros(aval.shape, aval.dtype)


def add_tangents(x, y):
    if isinstance(x, Zero):
        return y
    if isinstance(y, Zero):
        return x
    return x + y


add_jaxvals = add_tangents


def defjvp(primitive, *jvprules):
    """primitive's JVP from one rule per operand: rule(tangent, *primals, **params) -> its output
    tangent (None: that operand has no derivative)."""
    _def_sum_jvp(primitive, jvprules, with_out=False)


def defjvp2(primitive, *jvprules):
    """As defjvp, the rules also taking the primal output: rule(tangent, out, *primals, **params)."""
    _def_sum_jvp(primitive, jvprules, with_out=True)


def _def_sum_jvp(primitive, jvprules, with_out):
    """The JVP that sums one rule's term per operand with a nonzero tangent."""
    def jvp(primals, tangents, **params):
        out = primitive.bind(*primals, **params)
        total = None
        for rule, t in zip(jvprules, tangents):
            if rule is None or isinstance(t, Zero):
                continue
            term = rule(t, out, *primals, **params) if with_out else rule(t, *primals, **params)
            total = term if total is None else total + term
        if total is None:
            total = Zero.from_primal_value(out)
        return out, total
    primitive_jvps[primitive] = jvp


def defjvp_zero(primitive):
    def jvp(primals, tangents, **params):
        out = primitive.bind(*primals, **params)
        return out, Zero.from_primal_value(out)
    primitive_jvps[primitive] = jvp


def deflinear(primitive, transpose_rule):
    """A linear primitive: its JVP applies it to the tangents; its transpose is transpose_rule."""
    def jvp(primals, tangents, **params):
        out = primitive.bind(*primals, **params)
        t_out = primitive.bind(*[instantiate_zeros(t) for t in tangents], **params)
        return out, t_out
    primitive_jvps[primitive] = jvp
    primitive_transposes[primitive] = lambda ct, *args, **params: transpose_rule(ct, **params)


def deflinear2(primitive, transpose_rule):
    def jvp(primals, tangents, **params):
        out = primitive.bind(*primals, **params)
        return out, primitive.bind(*[instantiate_zeros(t) for t in tangents], **params)
    primitive_jvps[primitive] = jvp
    primitive_transposes[primitive] = transpose_rule


def defbilinear(primitive, lhs_rule, rhs_rule):
    defjvp(primitive, lambda t, x, y, **p: primitive.bind(t, y, **p), lambda t, x, y, **p: primitive.bind(x, t, **p))
    primitive_transposes[primitive] = lambda ct, x, y, **p: [
        lhs_rule(ct, x, y, **p) if is_undefined_primal(x) else None,
        rhs_rule(ct, x, y, **p) if is_undefined_primal(y) else None]


def get_primitive_transpose(p):
    try:
        return primitive_transposes[p]
    except KeyError:
        raise NotImplementedError(f"Transpose rule (for reverse-mode differentiation) for '{p}' not implemented") \
            from None


def jvp(fun, has_aux=False, instantiate=True, transform_stack=True):
    raise NotImplementedError("jax.interpreters.ad.jvp (on a linear_util.WrappedFun): use kiln.jvp")


def linearize(traceable, *primals, **kwargs):
    raise NotImplementedError("jax.interpreters.ad.linearize: use kiln.linearize")


class JVPTrace:
    """The type of JVP traces (kiln's grad is a program transformation: no JVPTrace objects exist)."""


class _JVPTracerType(type):
    def __instancecheck__(cls, x):
        from kiln._src import tracing
        return isinstance(x, tracing.Tracer) and id(x._trace) in tracing._ad_traces and tracing.perturbed(x)


class JVPTracer(metaclass=_JVPTracerType):
    """The values a differentiation traces: isinstance(x, JVPTracer) holds for kiln's tracers of a
    trace grad, jvp, vjp or linearize differentiates that depend on its inputs (JAX's constants
    inside are no JVPTracers); x._trace.main is that trace (equinox's filter_jvp tells its
    outputs apart so)."""


add_jaxvals_p = None
annotations = None
_ = np
