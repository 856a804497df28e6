"""Operators and methods of kiln.Array, delegating to kiln.numpy (installed once, at import)."""

import atexit

import numpy as np

from kiln import _kiln
from kiln._src import core


def _install(jnp):
    A = core.Array
    from kiln._src.numpy import indexing

    def swap(f):
        return lambda self, other: f(other, self)

    def guard(f):
        """Binary operators return NotImplemented for operands kiln does not know."""
        known = (core.Array, np.ndarray, np.generic, bool, int, float, complex)

        def op(self, other):
            if not isinstance(other, known) and not hasattr(other, "__jax_array__"):
                if isinstance(other, (list, tuple, set, dict)):  # as JAX (== would else be identity)
                    raise TypeError(f"unsupported operand type(s) for {f.__name__}: 'Array' and "
                                    f"'{type(other).__name__}'; convert it with kiln.numpy.asarray first")
                return NotImplemented  # lets the other operand decide (or Python raise TypeError)
            return f(self, other)
        return op

    ops = {
        "add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "truediv": jnp.true_divide,
        "floordiv": jnp.floor_divide, "mod": jnp.remainder, "pow": jnp.power, "matmul": jnp.matmul,
        "and": jnp.bitwise_and, "or": jnp.bitwise_or, "xor": jnp.bitwise_xor,
        "lshift": jnp.left_shift, "rshift": jnp.right_shift,
    }
    fast = ("add", "sub", "mul", "truediv")  # operators of the C base class (python/ext/array.c)
    for name, f in ops.items():
        if name not in fast:
            setattr(A, f"__{name}__", guard(f))
            setattr(A, f"__r{name}__", guard(swap(f)))

    def in_order(f):
        """The slow road of a C operator, called as f(left, right) whichever side is the array."""
        g, rg = guard(f), guard(swap(f))
        return lambda left, right: g(left, right) if isinstance(left, A) else rg(right, left)
    _kiln.eager_setup(A, core._scalar_cache, core.scalar_array, core._eager_entry,
                      core._fused_exe, tuple(in_order(ops[name]) for name in fast))
    atexit.register(_kiln.eager_shutdown)
    A.__divmod__ = guard(lambda a, b: (jnp.floor_divide(a, b), jnp.remainder(a, b)))
    A.__rdivmod__ = guard(lambda a, b: (jnp.floor_divide(b, a), jnp.remainder(b, a)))
    for name, f in {"eq": jnp.equal, "ne": jnp.not_equal, "lt": jnp.less, "le": jnp.less_equal,
                    "gt": jnp.greater, "ge": jnp.greater_equal}.items():
        setattr(A, f"__{name}__", guard(f))
    A.__neg__ = lambda self: jnp.negative(self)
    A.__pos__ = lambda self: jnp.positive(self)
    A.__abs__ = lambda self: jnp.abs(self)
    A.__invert__ = lambda self: jnp.invert(self)
    A.__round__ = lambda self, ndigits=None: jnp.round(self, ndigits or 0)
    A.__getitem__ = lambda self, idx: indexing.getitem(self, idx)
    A.at = property(lambda self: indexing._AtIndexer(self))

    A.T = property(lambda self: jnp.transpose(self))
    A.mT = property(lambda self: jnp.swapaxes(self, -1, -2))
    A.real = property(lambda self: jnp.real(self))
    A.imag = property(lambda self: jnp.imag(self))
    A.flat = property(lambda self: jnp.ravel(self))

    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and not isinstance(shape[0], int) and hasattr(shape[0], "__len__"):
            shape = shape[0]
        return jnp.reshape(self, shape, order=order)

    def transpose(self, *axes):
        if len(axes) == 1 and (axes[0] is None or hasattr(axes[0], "__len__")):
            axes = axes[0]
        return jnp.transpose(self, axes or None)

    def astype(self, dtype, copy=False):
        # complex to bool tests both parts (JAX's astype; its jnp.asarray and convert_element_type
        # take the real part)
        return jnp.astype(self, dtype) if dtype is not None else self

    A.reshape = reshape
    A.transpose = transpose
    A.astype = astype
    A.view = lambda self, dtype=None: self if dtype is None else _view(self, dtype)
    simple = ["sum", "prod", "mean", "var", "std", "max", "min", "argmax", "argmin", "all", "any", "ptp",
              "cumsum", "cumprod", "ravel", "squeeze", "swapaxes", "flatten", "round", "clip", "conj",
              "conjugate", "dot", "diagonal", "trace", "sort", "argsort", "repeat", "take", "nonzero",
              "searchsorted", "nansum", "nanmean", "nanmax", "nanmin", "item_size"]
    for name in simple:
        f = getattr(jnp, name, None)
        if f is None:
            if name == "flatten":
                f = jnp.ravel
            else:
                continue
        setattr(A, name, (lambda f: lambda self, *a, **k: f(self, *a, **k))(f))
    A.__array_namespace__ = lambda self, api_version=None: jnp


def _view(x, dtype):
    raise NotImplementedError("Array.view(dtype) is not supported yet by kiln")
