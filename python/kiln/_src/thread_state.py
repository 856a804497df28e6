"""Per-thread state, as JAX keeps its trace state: threads that trace at the same time (grad,
vmap, jit meeting a new shape) each see their own depth counters, mesh contexts and axis frames.
The C half (the trace stack, python/ext/tracer.c) is per thread too.

Imports nothing of kiln's; the modules holding such state import it.
"""

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
