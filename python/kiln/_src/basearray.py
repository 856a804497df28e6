"""kiln.Array as users see it (jax.Array): an abstract class that kiln's concrete arrays, its
tracers and typed PRNG key arrays are all instances of.

kiln's own code asks `isinstance(x, core.Array)` of the concrete class, a plain type whose check
runs in C and never admits a key array (whose numbers live in uint32 data underneath); only users
and libraries ask this abstract class, as they ask JAX's."""

import abc

from kiln._src.array import Array as _ConcreteArray


class _ArrayMeta(abc.ABCMeta):
    """ABCMeta whose isinstance answers kiln.Array from one dict lookup per type (libraries ask it
    of every leaf they touch; ABCMeta's own check walks weak sets). register clears the memo."""

    def __instancecheck__(cls, instance):
        if cls is Array:
            t = type(instance)
            known = _is_array.get(t)
            if known is None:
                known = _is_array[t] = abc.ABCMeta.__subclasscheck__(cls, t)
            return known
        return abc.ABCMeta.__instancecheck__(cls, instance)

    def register(cls, subclass):
        _is_array.clear()
        return abc.ABCMeta.register(cls, subclass)


_is_array = {}  # type -> whether its instances are kiln.Array instances


class Array(metaclass=_ArrayMeta):
    """The type of every kiln array value: concrete arrays, tracers (under jit, vmap, grad, ...)
    and typed key arrays (kiln.random.key). Abstract: arrays are made by kiln.numpy and friends."""
    __slots__ = ()


Array.register(_ConcreteArray)  # its subclasses (Tracer) come with it
Array.__module__ = "kiln"
