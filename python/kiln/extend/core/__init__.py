"""jax.extend.core: primitives, programs and trace tokens (kiln's own classes)."""
import contextlib

from kiln._src.jaxpr import (ClosedJaxpr, DropVar, Jaxpr, JaxprEqn, Literal, Var, jaxpr_as_fun,  # noqa: F401
                             jaxprs_in_params, subjaxprs)
from kiln._src.primitive import Primitive  # noqa: F401
from kiln._src.tracing import concrete_or_error  # noqa: F401
from kiln._src.trace_state import (TraceTag, find_top_trace, get_opaque_trace_state, mapped_aval,  # noqa: F401
                                   primal_dtype_to_tangent_dtype, set_current_trace, take_current_trace,
                                   unmapped_aval, valid_jaxtype)
from kiln.extend.core import primitives  # noqa: F401


class Effect:
    """The type of a side effect a primitive has (kiln orders effects itself: a library's Effect
    classes are accepted and recorded)."""


Effects = frozenset
no_effects = frozenset()


class Token:
    """An ordering token (kiln keeps effects in program order without tokens)."""


class AbstractToken:
    """The abstract value of a Token."""


class DebugInfo:
    """Where a traced function came from (name, argument names), as JAX records it."""

    def __init__(self, traced_for="", func_src_info=None, arg_names=(), result_paths=None):
        self.traced_for, self.func_src_info, self.arg_names, self.result_paths = \
            traced_for, func_src_info, tuple(arg_names), result_paths


class JaxprTypeError(TypeError):
    """A malformed Jaxpr."""


class InconclusiveDimensionOperation(Exception):
    """A comparison of symbolic dimensions with no definite answer (kiln's shapes are concrete)."""


class CallPrimitive(Primitive):
    """A primitive whose first operand is a function (call_p, closed_call_p)."""
    multiple_results = True
    call_primitive = True


array_types = set()  # (filled below: the array classes)


def _array_types():
    import numpy as np
    from kiln._src import core
    return {np.ndarray, np.generic, core.Array, bool, int, float, complex}


array_types.update(_array_types())


def new_jaxpr_eqn(invars, outvars, primitive, params, effects, source_info=None, ctx=None):
    return JaxprEqn(invars, outvars, primitive, params, effects, source_info, ctx)


def gensym(suffix=""):
    def make(aval):
        return Var(aval, suffix)
    return make


def check_jaxpr(jaxpr):
    """Checks that every variable is defined before it is read; JaxprTypeError otherwise."""
    defined = set(jaxpr.constvars) | set(jaxpr.invars)
    for eqn in jaxpr.eqns:
        for v in eqn.invars:
            if isinstance(v, Var) and v not in defined:
                raise JaxprTypeError(f"check_jaxpr: variable {v} is read before it is defined")
        defined.update(eqn.outvars)
    for v in jaxpr.outvars:
        if isinstance(v, Var) and v not in defined:
            raise JaxprTypeError(f"check_jaxpr: output {v} is not defined")


def call_impl(f, *args, **params):
    del params
    return f.call_wrapped(*args) if hasattr(f, "call_wrapped") else f(*args)


def _unsafe_depth(cell_module, name):
    mod = __import__(cell_module, fromlist=[name])
    return getattr(mod, name)[0] > 0


def unsafe_am_i_under_a_jit_DO_NOT_USE():
    from kiln._src import core
    return core.tracing()


def unsafe_am_i_under_a_vmap_DO_NOT_USE():
    return _unsafe_depth("kiln._src.batching", "vmap_depth")


def unsafe_get_axis_names_DO_NOT_USE():
    from kiln._src import spmd
    return [f.name for f in spmd._axis_stack]


@contextlib.contextmanager
def nonempty_axis_env_DO_NOT_USE():
    yield
