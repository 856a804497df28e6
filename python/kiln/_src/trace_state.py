"""The trace-level names of jax.core / jax.extend.core that libraries use: the current trace as an
opaque, comparable token (flax nnx and haiku check that state is touched in the trace it was made
in), the trace of a set of values, abstract-value helpers (mapped/unmapped avals), and JAX's
class names for isinstance checks and subclassing.

kiln's traces live in C (python/ext/tracer.c); a kiln Trace handle is the same object for as long
as its trace lives, so it is the token itself. Writing one's own Trace (JAX's interpreter API:
process_primitive, set_current_trace) is not supported: those entry points raise
NotImplementedError saying so."""
import abc
import contextlib
import typing

import numpy as np

from kiln._src import core
from kiln._src.extras import ShapedArray
from kiln._src.thread_state import body_token


class AbstractValue(abc.ABC):
    """The type of abstract values (kiln's ShapedArray is one)."""


AbstractValue.register(ShapedArray)

Value = typing.Any
Atom = typing.Any  # Var | Literal
ParamDict = dict


class Trace:
    """The type of traces. kiln's own traces are C handles (kiln._kiln.Trace); subclassing this to
    write an interpreter (JAX's process_primitive API) is not supported by kiln."""

    def __init__(self, *args, **kwargs):
        del args, kwargs

    def process_primitive(self, primitive, tracers, params):
        raise NotImplementedError("kiln does not run user-defined Traces (jax.core.Trace subclasses): its "
                                  "transformations are program-to-program passes")


class EvalTrace(Trace):
    """The trace of concrete values (outside every transformation)."""

    def __repr__(self):
        return "EvalTrace"


_EVAL = EvalTrace()


class TraceTag:
    """An identity token for a user trace (compares by identity)."""


class OpaqueTraceState:
    """The current trace as a token: equal exactly when taken in the same trace and the same
    control-flow body."""
    __slots__ = ("_trace", "_body")

    def __init__(self, trace, body=None):
        self._trace = trace
        self._body = body

    def __eq__(self, other):
        return isinstance(other, OpaqueTraceState) and self._trace is other._trace and self._body is other._body

    def __hash__(self):
        return hash((id(self._trace), id(self._body)))

    def __repr__(self):
        return f"OpaqueTraceState({self._trace!r})"


def get_opaque_trace_state(convention=None):
    """A token of the current trace (cheap; equal for two calls in the same trace)."""
    del convention
    return OpaqueTraceState(core.current_trace(), body_token[0])


def find_top_trace(xs):
    """The innermost trace among the values xs (the trace of concrete values when none is traced)."""
    from kiln._src.tree_util import tree_leaves
    best = None
    for x in tree_leaves(xs):
        if isinstance(x, core.Tracer) and x._trace.alive:
            if best is None or x._trace.level > best.level:
                best = x._trace
    return _EVAL if best is None else best


@contextlib.contextmanager
def take_current_trace():
    raise NotImplementedError("take_current_trace: kiln does not expose its traces to user interpreters")
    yield  # pragma: no cover


@contextlib.contextmanager
def set_current_trace(trace, check_leaks=False):
    del trace, check_leaks
    raise NotImplementedError("set_current_trace: kiln does not run user-defined traces")
    yield  # pragma: no cover


@contextlib.contextmanager
def eval_context():
    """Within the block, operations on concrete values compute now (as ensure_compile_time_eval)."""
    from kiln._src.extras import ensure_compile_time_eval
    with ensure_compile_time_eval():
        yield


def max_dim(d1, d2):
    return max(d1, d2)


def min_dim(d1, d2):
    return min(d1, d2)


def mapped_aval(size, axis, aval):
    """aval without its axis `axis` (of length size): what one batch element looks like."""
    if axis is None:
        return aval
    shape = tuple(aval.shape)
    if shape[axis] != size:
        raise ValueError(f"mapped_aval: axis {axis} of {aval} has size {shape[axis]}, not {size}")
    return ShapedArray(shape[:axis] + shape[axis + 1:], aval.dtype, aval.weak_type)


def unmapped_aval(size, axis, aval, explicit_mesh_axis=None):
    """aval with an axis of length size inserted at `axis`."""
    del explicit_mesh_axis
    if axis is None:
        return aval
    shape = tuple(aval.shape)
    return ShapedArray(shape[:axis] + (size,) + shape[axis:], aval.dtype, aval.weak_type)


def raise_to_shaped(aval, weak_type=None):
    return aval if weak_type is None else ShapedArray(aval.shape, aval.dtype, weak_type)


def valid_jaxtype(x):
    """Whether x can be an array value (an array, NumPy value or Python scalar)."""
    if isinstance(x, (core.Array, bool, int, float, complex, np.ndarray, np.generic)):
        try:
            from kiln._src import dtypes
            dtypes.canonicalize_dtype(np.asarray(x).dtype if not isinstance(x, core.Array) else x.dtype)
            return True
        except (TypeError, ValueError):
            return False
    return False


def primal_dtype_to_tangent_dtype(dtype):
    """float0 for integer and bool primals (no tangent), else the dtype itself."""
    from kiln._src.toplevel import float0
    dtype = np.dtype(dtype)
    return float0 if dtype.kind in "biu" else dtype
