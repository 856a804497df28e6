"""Tracing: kiln.Tracer and the trace handles. The trace state itself (the stack of live
traces, their levels, the program each builds, lifting outer values, leak detection) lives in C
(tracer/trace.c, bound by python/ext/tracer.c); this module gives it its Python face.

Imports array.py only; dispatch.py (bind) builds on it.
"""

import numpy as np

from kiln import _kiln
from kiln._src.array import Array, scalar_array
from kiln._src.thread_state import Cell, Stack
from kiln.errors import (ConcretizationTypeError, TracerArrayConversionError,
                         TracerBoolConversionError, TracerIntegerConversionError)

Trace = _kiln.Trace  # a handle on one C trace: new_input, literal_tracer, vid_of, set_outputs, take_builder

current_trace = _kiln.current_trace  # the innermost live Trace, or None
tracing = _kiln.tracing              # whether any trace is live

_ad_depth = Cell(0)  # > 0 while this thread traces a function for differentiation


def ad_tracing():
    return _ad_depth[0] > 0


# The traces grad/vjp/jvp differentiate: id(trace) -> how many of its first inputs it differentiates.
# _deps: id(trace) -> [consts looked at, equations looked at, ids of its perturbed values], built as
# custom_vjp asks (its perturbed flags).
# _origins: id(trace) -> per explicit input, whether it is perturbed (a body traced by a control-flow
# primitive under differentiation: its operands' flags, see custom._trace_sub).
_ad_traces = {}
_deps = {}
_origins = {}
_next_is_ad = Cell(0)  # set by ad._trace_flat: the next trace differentiates this many inputs
_next_origins = Cell(None)  # set by custom._trace_sub: the next trace's inputs' perturbed flags
# How many Python-side contexts that a trace reports to are open on this thread (checkify's frames:
# its checks register there as they are traced): a traced program is then not kept for replay
# (jit's _nested), as replaying it would skip those reports.
trace_reporters = Cell(0)
# per trace being built on this thread (api._trace_body), innermost last: with_sharding_constraint's
# constraints on its values, id -> (value, sharding); jit places the outputs they name
sharding_constraints = Stack()
perturbed_asked = Cell(0)  # how many times perturbed() ran on this thread (a retrace is needed only then)


def push_trace(concrete=False):
    """Starts a trace one level deeper (concrete: values are computed as equations are recorded)."""
    t = _kiln.trace_push(concrete)
    if _next_is_ad[0]:
        _ad_traces[id(t)] = _next_is_ad[0]
        _next_is_ad[0] = 0
    if _next_origins[0] is not None:
        _origins[id(t)] = _next_origins[0]
        _next_origins[0] = None
    return t


def pop_trace(t):
    """Ends trace t, the innermost: its tracers are dead from now on (UnexpectedTracerError)."""
    _ad_traces.pop(id(t), None)
    _deps.pop(id(t), None)
    _origins.pop(id(t), None)
    _kiln.trace_pop(t)


# primitives whose results carry no derivative whatever their operands do
_NO_TANGENT = frozenset({"stop_gradient"})


def note_inputs(in_leaves):
    """Called as a trace starts under differentiation (api._trace): where its inputs come from, to
    say later which are perturbed (the values they stand for; abstract ones are not)."""
    if _ad_depth[0] and _next_origins[0] is None and not _next_is_ad[0]:
        _next_origins[0] = [getattr(x, "vma_src", x) for x in in_leaves]


def replayable_next(n):
    """The next trace's n inputs count as perturbed: what it records (make_jaxpr's jaxpr) may be
    evaluated again on other values, under a differentiation kiln cannot see from here."""
    if _ad_depth[0]:
        _next_origins[0] = [True] * n


def _flag(src):
    """Whether a trace input standing for src is perturbed: a traced value as it is there, a
    concrete one not, an abstract one (make_jaxpr, eval_shape, closure conversion: what is traced may
    be replayed later under a differentiation kiln cannot see from here) conservatively yes."""
    if src is True or src is False:
        return src
    if isinstance(src, Tracer):
        return _is_perturbed(src)
    if isinstance(src, Array) or isinstance(src, (np.ndarray, np.generic, int, float, complex)):
        return False
    return True


def program_perturbed(builder, in_flags, consts):
    """Per output of a traced program (a Builder whose inputs are its explicit inputs, then its
    consts): whether it depends on a perturbed input (in_flags) or a perturbed const."""
    ids = builder.inputs()
    dep = {i for i, f in zip(ids, in_flags) if f}
    first = len(ids) - len(consts)
    dep.update(ids[first + k] for k, c in enumerate(consts) if _is_perturbed(c))
    for prim, ins, outs, _ in builder.equations():
        if prim not in _NO_TANGENT and any(i in dep for i in ins):
            dep.update(outs)
    return [o in dep for o in builder.outputs()]


def _inexact(dtype):
    try:
        d = np.dtype(dtype)
    except TypeError:  # an extended dtype (typed keys)
        return False
    return d.kind in "fc" or d.name == "bfloat16" or d.name.startswith("float")  # (ml_dtypes' floats: kind 'V')


def perturbed(x):
    """Whether x may carry a derivative (JAX's custom_vjp `perturbed`): x depends on an input being
    differentiated (at any level). A control-flow body's inputs are perturbed as their operands
    (loop carries: to a fixed point, custom._trace_sub), values lifted into a trace from outside as
    they were there; the inputs of other traces inside a differentiated one count as perturbed; a
    concrete value is not."""
    perturbed_asked[0] += 1
    return _is_perturbed(x)


def _is_perturbed(x):
    if not isinstance(x, Tracer) or not _inexact(x.dtype):  # integers carry no derivative (float0)
        return False
    t = x._trace
    entry = _deps.get(id(t))
    if entry is None:
        ids = t.input_ids()
        n_explicit = len(ids) - len(t.consts)
        flags = _origins.get(id(t))
        if id(t) in _ad_traces:  # the inputs it differentiates
            seeds = ids[:_ad_traces[id(t)]]
        elif flags is None:  # a trace begun outside differentiation: nothing in it is perturbed
            seeds = []
        elif len(flags) == n_explicit:  # begun inside: its inputs as what they stand for
            seeds = [i for i, f in zip(ids, flags) if _flag(f)]
        else:
            seeds = ids[:n_explicit]
        entry = _deps[id(t)] = [0, 0, set(seeds)]
    seen_c, seen_e, dep = entry
    consts = t.consts
    if len(consts) > seen_c:
        ids = t.input_ids()
        first = len(ids) - len(consts)
        for k in range(seen_c, len(consts)):
            if _is_perturbed(consts[k]):
                dep.add(ids[first + k])
        entry[0] = len(consts)
    eqns = t.equations(seen_e)
    for prim, ins, outs, _ in eqns:
        if prim not in _NO_TANGENT and any(i in dep for i in ins):
            dep.update(outs)
    entry[1] = seen_e + len(eqns)
    return x._vid in dep


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
