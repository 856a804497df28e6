"""Per-thread state, as JAX keeps its trace state: threads that trace at the same time (grad,
vmap, jit meeting a new shape) each see their own depth counters, mesh contexts and axis frames.
The C half (the trace stack, python/ext/tracer.c) is per thread too.

Imports nothing of kiln's; the modules holding such state import it.
"""

import functools
import threading


class Cell(threading.local):
    """One value per thread, read and written as cell[0]; each thread starts at `initial`."""

    def __init__(self, initial):
        self.value = initial

    def __getitem__(self, i):
        if i != 0:
            raise IndexError(i)
        return self.value

    def __setitem__(self, i, value):
        if i != 0:
            raise IndexError(i)
        self.value = value


class Stack(threading.local):
    """A list per thread (each starts empty), used as a stack: append, pop, [-1], slices,
    iteration, remove."""

    def __init__(self):
        self.items = []

    def append(self, x):
        self.items.append(x)

    def pop(self, *i):
        return self.items.pop(*i)

    def remove(self, x):
        self.items.remove(x)

    def __getitem__(self, i):
        return self.items[i]

    def __setitem__(self, i, v):
        self.items[i] = v

    def __len__(self):
        return len(self.items)

    def __bool__(self):
        return bool(self.items)

    def __iter__(self):
        return iter(self.items)

    def __reversed__(self):
        return reversed(self.items)

    def __contains__(self, x):
        return x in self.items


# The innermost control-flow call (cond, switch, while_loop, fori_loop, scan, map) of this thread, as
# a token. JAX traces every body in a trace of its own; kiln runs a body whose predicate or bounds
# are concrete as Python calls, so it is this token that tells a body's trace state from its caller's
# (haiku and flax nnx refuse state touched across that boundary).
body_token = Cell(None)


def control_flow_body(fn):
    """fn (a control-flow primitive) with its bodies in a trace state of their own."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        prev = body_token[0]
        body_token[0] = object()
        try:
            return fn(*args, **kwargs)
        finally:
            body_token[0] = prev
    return wrapped
