"""The trace state (tracer/trace.c through python/ext/tracer.c): nesting and levels, lifting of
outer values and constants (once per object), literal reuse, leak detection, concrete values."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln._src import core
from kiln.errors import UnexpectedTracerError

F32 = np.dtype("float32")


def test_nested_traces_lift_outer_values_and_constants_once():
    c = jnp.ones(3)
    outer = core.push_trace()
    try:
        x = outer.new_input((3,), F32, False)
        inner = core.push_trace()
        try:
            assert core.current_trace() is inner and inner.level == outer.level + 1
            y = inner.new_input((3,), F32, False)
            z = core.bind1("add", [y, x])
            z = core.bind1("mul", [x, z])
            z = core.bind1("sub", [z, c])
            z = core.bind1("sub", [c, z])
            assert z._trace is inner
            assert inner.consts == [x, c]  # each outer object is one extra input, in order of first use
        finally:
            core.pop_trace(inner)
        assert not inner.alive and outer.alive and core.current_trace() is outer
        with pytest.raises(UnexpectedTracerError, match="passed to add"):
            core.bind1("add", [x, z])  # a value of the ended inner trace
        with pytest.raises(AssertionError):
            core.pop_trace(inner)
    finally:
        core.pop_trace(outer)
    assert not core.tracing() and core.current_trace() is None


def test_literals_are_reused_per_trace():
    t = core.push_trace()
    try:
        a = t.literal_tracer(2.0, F32, True)
        b = t.literal_tracer(2.0, F32, True)
        c = t.literal_tracer(2.0, F32, False)
        assert a._vid == b._vid != c._vid
        t.set_outputs([a._vid])
    finally:
        core.pop_trace(t)
    assert t.take_builder().counts() == (0, 2, 1)


def test_concrete_trace_computes_values_as_it_records():
    t = core.push_trace(concrete=True)
    try:
        x = t.new_input((3,), F32, False, jnp.arange(3.0))
        y = core.bind1("mul", [x, x])
        assert y._cval is not None and float(y.sum()) == 5.0  # Python can read traced values
    finally:
        core.pop_trace(t)


def test_jit_closure_constants_are_inputs():
    c = jnp.ones(3)
    j = kiln.make_jaxpr(lambda x: x * c + c)(jnp.zeros(3))
    assert len(j.consts) == 1
