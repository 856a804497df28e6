"""kiln.numpy whole-array comparisons (isclose, allclose, array_equal, array_equiv) and the shape
queries isscalar/ndim/shape/size. Built on kiln.lax, kiln._src.core and kiln._src.dtypes only.
"""

import numpy as np

from kiln import lax
from kiln._src import core
from kiln._src.numpy import util
from kiln._src.numpy.util import full_like_scalar as _c, is_inexact_dtype

__all__ = ["isclose", "allclose", "array_equal", "array_equiv", "isscalar", "ndim", "shape", "size"]


def _all(x):
    return lax.reduce_and(x, tuple(range(x.ndim)))


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol * |b| element-wise; infinities are close only to themselves."""
    a, b = util.promote_args("isclose", a, b)
    if not is_inexact_dtype(a.dtype):
        return lax.eq(a, b)
    abs_b = lax.abs(b)  # real for complex b: the tolerances are real, as in JAX
    if util.is_python_scalar(atol) and util.is_python_scalar(rtol):
        tol = lax.add(_c(abs_b, atol), lax.mul(_c(abs_b, rtol), abs_b))
    else:  # array tolerances (per element, as JAX's): broadcast with the operands
        atol, rtol = (lax.convert_element_type(core.asarray(t), abs_b.dtype) for t in (atol, rtol))
        a, b, atol, rtol = util._broadcast_all("isclose", [a, b, atol, rtol])
        abs_b = lax.abs(b)
        tol = lax.add(atol, lax.mul(rtol, abs_b))
    close = lax.le(lax.abs(lax.sub(a, b)), tol)
    inf = _c(abs_b, np.inf)
    either_inf = lax.or_(lax.eq(lax.abs(a), inf), lax.eq(abs_b, inf))
    close = lax.select(either_inf, lax.eq(a, b), close)
    if equal_nan:
        close = lax.or_(close, lax.and_(lax.ne(a, a), lax.ne(b, b)))
    return close


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """True when every element pair isclose."""
    return _all(isclose(a, b, rtol, atol, equal_nan))


def array_equal(a1, a2, equal_nan=False):
    """True when the shapes match and every element is equal (nan == nan if equal_nan). Typed PRNG
    keys compare by their key data, as JAX's do."""
    from kiln import random as _random
    if isinstance(a1, _random.PRNGKeyArray) and isinstance(a2, _random.PRNGKeyArray):
        a1, a2 = _random.key_data(a1), _random.key_data(a2)
    a1 = util.asarray_arg("array_equal", a1)
    a2 = util.asarray_arg("array_equal", a2)
    if tuple(a1.shape) != tuple(a2.shape):
        return core.asarray(False)
    a1, a2 = util.promote_dtypes("array_equal", a1, a2)
    eq = lax.eq(a1, a2)
    if equal_nan and is_inexact_dtype(a1.dtype):
        eq = lax.or_(eq, lax.and_(lax.ne(a1, a1), lax.ne(a2, a2)))
    return _all(eq)


def array_equiv(a1, a2):
    """True when the arrays broadcast together and are equal everywhere."""
    a1 = util.asarray_arg("array_equiv", a1)
    a2 = util.asarray_arg("array_equiv", a2)
    try:
        a1, a2 = util.promote_args("array_equiv", a1, a2)
    except ValueError:
        return core.asarray(False)
    return _all(lax.eq(a1, a2))


def isscalar(element):
    """True for Python/NumPy scalars and 0-d arrays (kiln and NumPy), as jax.numpy.isscalar."""
    if isinstance(element, (core.Array, np.ndarray)):
        return element.ndim == 0
    return util.is_python_scalar(element) or isinstance(element, np.generic) and \
        not isinstance(element, (np.str_, np.bytes_, np.void))


def ndim(a):
    """Number of dimensions of an array or array-like."""
    return a.ndim if isinstance(a, core.Array) else np.ndim(a)


def shape(a):
    """Shape of an array or array-like."""
    return tuple(a.shape) if isinstance(a, core.Array) else np.shape(a)


def size(a, axis=None):
    """Number of elements (along `axis` when given)."""
    s = shape(a)
    if axis is None:
        n = 1
        for d in s:
            n *= d
        return n
    return s[util.canonicalize_axis(axis, len(s), "size")]
