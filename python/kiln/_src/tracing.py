"""Tracing: kiln.Tracer and the trace handles. The trace state itself (the stack of live
traces, their levels, the program each builds, lifting outer values, leak detection) lives in C
(tracer/trace.c, bound by python/ext/tracer.c); this module gives it its Python face.

Imports array.py only; dispatch.py (bind) builds on it.
"""

from kiln import _kiln
from kiln._src.array import Array, scalar_array
from kiln._src.thread_state import Cell
from kiln.errors import (ConcretizationTypeError, TracerArrayConversionError,
                         TracerBoolConversionError, TracerIntegerConversionError)

Trace = _kiln.Trace  # a handle on one C trace: new_input, literal_tracer, vid_of, set_outputs, take_builder

current_trace = _kiln.current_trace  # the innermost live Trace, or None
tracing = _kiln.tracing              # whether any trace is live

_ad_depth = Cell(0)  # > 0 while this thread traces a function for differentiation


def ad_tracing():
    return _ad_depth[0] > 0


def push_trace(concrete=False):
    """Starts a trace one level deeper (concrete: values are computed as equations are recorded)."""
    return _kiln.trace_push(concrete)


def pop_trace(t):
    """Ends trace t, the innermost: its tracers are dead from now on (UnexpectedTracerError)."""
    _kiln.trace_pop(t)


class Tracer(Array, _kiln.TracerBase):
    """A value inside a trace: its shape and dtype are known, its data is not (in a concrete
    trace, `_cval` holds its value). Made by the C trace binding (python/ext/tracer.c), which
    holds its fields: `_trace` (the Trace), `_vid` (its value id), `_cval` (or None)."""
    __slots__ = ()

    def _value(self):
        if self._cval is not None:
            return self._cval._value()
        raise TracerArrayConversionError.for_tracer(self)

    def __array__(self, dtype=None, copy=None):
        if self._cval is not None:
            return self._cval.__array__(dtype, copy)
        raise TracerArrayConversionError.for_tracer(self)

    def __bool__(self):
        if self._cval is not None:
            return bool(self._cval)
        raise TracerBoolConversionError.for_tracer(self)

    def __float__(self):
        if self._cval is not None:
            return float(self._cval)
        raise ConcretizationTypeError.for_tracer(self, "float() was called on it.")

    def __int__(self):
        if self._cval is not None:
            return int(self._cval)
        raise TracerIntegerConversionError.for_tracer(self)

    def __index__(self):
        if self._cval is not None:
            return self._cval.__index__()
        raise TracerIntegerConversionError.for_tracer(self)

    def item(self, *args):
        if self._cval is not None:
            return self._cval.item(*args)
        raise ConcretizationTypeError.for_tracer(self, ".item() was called on it.")

    def tolist(self):
        if self._cval is not None:
            return self._cval.tolist()
        raise ConcretizationTypeError.for_tracer(self, ".tolist() was called on it.")

    def block_until_ready(self):
        return self

    def is_ready(self):
        return False

    @property
    def aval(self):
        """Its abstract value (a ShapedArray), as JAX tracers' .aval."""
        from kiln._src.extras import ShapedArray
        return ShapedArray(self.shape, self.dtype, self.weak_type)

    def __repr__(self):
        if self._cval is not None:
            return f"Traced<ConcreteArray({self._cval._value()!r}, dtype={self.dtype.name})>"
        w = " weak_type=True" if self.weak_type else ""
        return f"Traced<{self.dtype.name}[{','.join(map(str, self.shape))}]{w}>"

    def __str__(self):
        return str(self._cval) if self._cval is not None else repr(self)

    def __format__(self, spec):
        return format(self._cval, spec) if self._cval is not None else repr(self)

    def __reduce__(self):
        raise ConcretizationTypeError.for_tracer(self, "It cannot be pickled.")


def is_tracer(x):
    return isinstance(x, Tracer)


def concrete_or_error(x, what="the value"):
    """NumPy value of a concrete array or scalar; ConcretizationTypeError for a tracer."""
    if isinstance(x, Tracer):
        if x._cval is not None:
            return x._cval._value()
        raise ConcretizationTypeError.for_tracer(x, f"It was used as {what}.")
    if isinstance(x, Array):
        return x._value()
    return x


# ensure_compile_time_eval's flag: constants stay concrete arrays under a trace, so operations on
# them compute now (bind runs eagerly when no operand is a tracer)
compile_time_eval = Cell(False)  # per thread, as the C flag it mirrors


def scalar_constant(value, dtype, weak):
    """A 0-d constant: a literal of the innermost trace when tracing, else a cached array."""
    t = None if compile_time_eval[0] else _kiln.current_trace()
    if t is not None:
        return t.literal_tracer(value, dtype, weak)
    return scalar_array(value, dtype, weak)


def literal(value, dtype, weak, like=None):
    """A scalar constant: a literal equation in the trace of `like` (a Tracer), a cached
    array otherwise."""
    t = like._trace if isinstance(like, Tracer) else None
    if t is not None and not compile_time_eval[0]:
        return t.literal_tracer(value, dtype, weak)
    return scalar_array(value, dtype, weak)
