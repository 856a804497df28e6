"""kiln.numpy array creation: array/asarray, zeros/ones/full(_like), arange, linspace and friends, eye,
tri, meshgrid, indices. Shapes must be static (a traced shape raises ConcretizationTypeError); built on
kiln.lax, kiln._src.core and kiln._src.dtypes only.
"""

import operator

import numpy as np

from kiln import lax
from kiln._src import array as array_mod, core
from kiln._src import dtypes
from kiln._src.numpy import util
from kiln._src.numpy.util import full_like_scalar as _c, is_inexact_dtype, is_int_dtype

__all__ = [
    "array", "asarray", "zeros", "ones", "full", "empty", "zeros_like", "ones_like", "full_like",
    "empty_like", "arange", "linspace", "logspace", "geomspace", "eye", "identity", "tri", "meshgrid",
    "indices",
]


def _default_float():
    return np.dtype(dtypes.default_float_dtype())


def _cast(x, dtype):
    dtype = np.dtype(dtype)
    if x.dtype == dtype and not x.weak_type:
        return x
    return lax.convert_element_type(x, dtype)  # an explicit dtype makes the result strongly typed


# ---------------------------------------------------------------------------------------------------------
# array / asarray

def _contains_array(obj):
    if isinstance(obj, core.Array):
        return True
    if isinstance(obj, (list, tuple)):
        return any(_contains_array(o) for o in obj)
    return False


def _stack_nested(obj):
    """Builds an Array from a (possibly nested) list mixing Arrays and scalars, by stacking."""
    if not isinstance(obj, (list, tuple)):
        return util.asarray_arg("array", obj)
    if len(obj) == 0:
        return core.asarray(np.zeros((0,)))
    parts = util.promote_dtypes("array", *[_stack_nested(o) for o in obj])
    shapes = {tuple(p.shape) for p in parts}
    if len(shapes) != 1:
        raise ValueError(f"array: setting an array element with a sequence: the nested sequence is ragged "
                         f"(element shapes {sorted(shapes)})")
    shape = shapes.pop()
    parts = [lax.broadcast_in_dim(p, (1,) + shape, tuple(range(1, len(shape) + 1))) for p in parts]
    return lax.concatenate(parts, 0)


def array(object, dtype=None, copy=True, order="K", ndmin=0):
    """Creates an Array from a scalar, (nested) sequence, NumPy array or Array; `ndmin` pads leading 1s."""
    if order not in (None, "K", "A", "C"):
        raise NotImplementedError(f"array: only C order is supported, got order={order!r}")
    if getattr(object, "_is_key_array", False):  # a typed key array is its own array (as JAX)
        from kiln import random
        return random._key_structural("array", [object], dtype, lambda ds: array(ds[0], copy=copy, ndmin=ndmin))
    dtype = util.dtype_arg(dtype)
    if isinstance(object, (str, bytes)) or object is None:
        raise TypeError(f"array: cannot make an array from {type(object).__name__} {object!r}; "
                        f"kiln arrays hold numbers and booleans only")
    if _contains_array(object) and not isinstance(object, core.Array):
        out = _stack_nested(object)
        if out.weak_type:  # as JAX: an array made of a sequence is strongly typed, whatever its elements
            out = lax.convert_element_type(out, out.dtype, weak_type=False)
    else:
        try:
            if isinstance(object, core.Array):
                out = object
            elif type(object) is int and dtype is not None and dtype.kind in "iu":
                _check_python_ints_fit(object, dtype)
                out = core.asarray(object, dtype)  # straight to dtype: 2**32 - 1 fits uint32, not int32
            else:
                out = core.asarray(object)
        except (TypeError, ValueError) as e:
            raise type(e)(f"array: cannot convert {type(object).__name__} to an array: {e}") from None
    if dtype is not None:
        if dtype.kind in "iu" and not isinstance(object, (core.Array, np.ndarray, np.generic)):
            _check_python_ints_fit(object, dtype)
        out = _cast(out, dtype)
    ndmin = operator.index(ndmin)
    if out.ndim < ndmin:
        shape = (1,) * (ndmin - out.ndim) + tuple(out.shape)
        out = lax.reshape(out, shape)
    if isinstance(object, (bool, int, float, complex)) and not isinstance(out, core.Tracer):
        # an array of its own, as JAX's: a Python scalar's array may be the cached constant that eager
        # operations share, which a donation or delete() must never take from them
        out = array_mod.from_numpy(np.asarray(out), out.weak_type)
    return out


def _check_python_ints_fit(obj, dtype):
    """OverflowError for Python numbers outside an integer dtype's range (JAX's jnp.array(300, int8)
    raises; a float counts by its integer part, as NumPy converts it)."""
    values = np.asarray(obj)
    if values.dtype.kind not in "iuf" or values.size == 0:
        return
    finite = values[np.isfinite(values)] if values.dtype.kind == "f" else values
    if finite.size == 0:
        return
    info = np.iinfo(dtype)
    for v in (int(finite.min()), int(finite.max())):
        if not info.min <= v <= info.max:
            raise OverflowError(f"array: Python integer {v} out of bounds for {dtype.name}")


def asarray(a, dtype=None, order=None, *, copy=None):
    """array() without a forced copy (kiln arrays are immutable, so copies are never observable)."""
    if copy is False and dtype is not None and isinstance(a, core.Array) and \
            np.dtype(util.dtype_arg(dtype)) != a.dtype:
        raise ValueError(f"asarray: copy=False but converting {a.dtype} to {np.dtype(dtype)} needs a copy")
    return array(a, dtype=dtype, copy=False, order=order or "K")


# ---------------------------------------------------------------------------------------------------------
# Filled arrays

def _fill(opname, shape, fill_value, dtype):
    shape = util.canonicalize_shape(shape, opname)
    dtype = util.dtype_arg(dtype)
    if isinstance(fill_value, core.Array) or isinstance(fill_value, np.ndarray) and fill_value.ndim > 0:
        v = util.asarray_arg(opname, fill_value)
        v = _cast(v, dtype if dtype is not None else v.dtype)
        return util.broadcast_to_shape(v, shape, opname)
    if isinstance(fill_value, (list, tuple)):
        v = array(fill_value, dtype=dtype)
        return util.broadcast_to_shape(v, shape, opname)
    if isinstance(fill_value, (str, bytes)) or fill_value is None:
        raise TypeError(f"{opname}: fill_value must be a number or array, got {fill_value!r}")
    if dtype is None and util.is_python_scalar(fill_value):
        return lax.full(shape, fill_value)  # weakly typed, as jnp.full((2,), 3) is in JAX
    if dtype is None:
        dtype = np.dtype(dtypes.dtype_of(fill_value))
    return lax.full(shape, fill_value, dtype)


def zeros(shape, dtype=None):
    """Array of `shape` filled with 0 (default dtype: the default float)."""
    return _fill("zeros", shape, 0, dtype if dtype is not None else _default_float())


def ones(shape, dtype=None):
    """Array of `shape` filled with 1 (default dtype: the default float)."""
    return _fill("ones", shape, 1, dtype if dtype is not None else _default_float())


def empty(shape, dtype=None):
    """As zeros (kiln never exposes uninitialised memory)."""
    return _fill("empty", shape, 0, dtype if dtype is not None else _default_float())


def full(shape, fill_value, dtype=None):
    """Array of `shape` filled with `fill_value` (an array fill_value is broadcast)."""
    return _fill("full", shape, fill_value, dtype)


def _like(opname, a, dtype, shape):
    if isinstance(a, (str, bytes)) or a is None:
        raise TypeError(f"{opname}: expected an array, got {type(a).__name__} {a!r}")
    if hasattr(a, "shape") and hasattr(a, "dtype"):
        a_shape, a_dtype = tuple(a.shape), np.dtype(a.dtype)
    else:
        a_shape, a_dtype = tuple(np.shape(a)), np.dtype(dtypes.dtype_of(a) if util.is_python_scalar(a)
                                                         else util.asarray_arg(opname, a).dtype)
    out_dtype = util.dtype_arg(dtype) if dtype is not None else np.dtype(dtypes.canonicalize_dtype(a_dtype))
    out_shape = a_shape if shape is None else shape
    return out_shape, out_dtype


def _keep_weak(a, dtype, out):
    """out weakly typed when a is and no dtype was given, as JAX (zeros_like(1.5) is a weak float32)."""
    if dtype is None and (util.is_python_scalar(a) or getattr(a, "weak_type", False)) and not out.weak_type:
        return lax.convert_element_type(out, out.dtype, weak_type=True)
    return out


def zeros_like(a, dtype=None, shape=None):
    """zeros with a's shape and dtype unless given."""
    out_shape, out_dtype = _like("zeros_like", a, dtype, shape)
    return _keep_weak(a, dtype, _fill("zeros_like", out_shape, 0, out_dtype))


def ones_like(a, dtype=None, shape=None):
    """ones with a's shape and dtype unless given."""
    out_shape, out_dtype = _like("ones_like", a, dtype, shape)
    return _keep_weak(a, dtype, _fill("ones_like", out_shape, 1, out_dtype))


def empty_like(prototype, dtype=None, shape=None):
    """As zeros_like."""
    out_shape, out_dtype = _like("empty_like", prototype, dtype, shape)
    return _keep_weak(prototype, dtype, _fill("empty_like", out_shape, 0, out_dtype))


def full_like(a, fill_value, dtype=None, shape=None):
    """full with a's shape and dtype unless given."""
    out_shape, out_dtype = _like("full_like", a, dtype, shape)
    return _keep_weak(a, dtype, _fill("full_like", out_shape, fill_value, out_dtype))


# ---------------------------------------------------------------------------------------------------------
# Ranges

def _static_number(x, what):
    if isinstance(x, core.Array):
        x = core.concrete_or_error(x, what)
    if isinstance(x, np.ndarray):
        if x.ndim != 0:
            raise TypeError(f"{what}: expected a scalar, got an array of shape {x.shape}")
        x = x.item()
    if isinstance(x, np.generic):
        x = x.item()
    if not isinstance(x, (bool, int, float)):
        raise TypeError(f"{what}: expected a real number, got {type(x).__name__} {x!r}")
    return x


def arange(start, stop=None, step=None, dtype=None):
    """Evenly spaced values in [start, stop) by `step`; int arguments give the default int dtype."""
    args = [start, stop, step]
    names = ["start", "stop", "step"]
    values = [None if v is None else _static_number(v, f"arange: the {n} argument (arange needs static "
                                                       f"bounds; use a static argument or linspace)")
              for v, n in zip(args, names)]
    start, stop, step = values
    if stop is None:
        start, stop = 0, start
    if step is None:
        step = 1
    if step == 0:
        raise ValueError("arange: step must not be zero")
    given = [v for v in values if v is not None]
    if dtype is None:
        is_float = any(isinstance(v, float) for v in given) or any(
            isinstance(v, (core.Array, np.ndarray, np.generic)) and np.dtype(v.dtype).kind == "f"
            for v in args if v is not None)
        dtype = _default_float() if is_float else np.dtype(dtypes.default_int_dtype())
    dtype = util.dtype_arg(dtype)
    if dtype == np.bool_:  # as JAX, whose arange is an iota (bug, issue 32: kiln computed [False, True])
        raise TypeError("arange: iota does not accept dtype bool; accepted dtypes are integer, floating and "
                        "complex types (compare an integer arange instead, e.g. jnp.arange(n) > 0)")
    length = max(int(np.ceil((stop - start) / step)), 0)
    if is_int_dtype(dtype) and all(isinstance(v, (bool, int)) for v in (start, stop, step)):
        out = lax.iota(dtype, length)
        if step != 1:
            out = lax.mul(out, _c(out, step))
        if start != 0:
            out = lax.add(out, _c(out, start))
        return out
    return core.asarray(np.arange(start, stop, step, dtype=np.float64).astype(dtype)
                        if is_inexact_dtype(dtype) else np.arange(start, stop, step).astype(dtype),
                        dtype=dtype)


def _linspace_core(opname, start, stop, num, endpoint, axis, dtype):
    """Returns (samples along a new leading axis moved to `axis`, step, target dtype). JAX's formula,
    start * (1 - t) + stop * t with t = i / div in the target's inexact dtype, so the samples agree with
    JAX's to the last bit (NumPy's start + i * step can differ by an ulp, and a histogram's bins with it)."""
    num = util.concrete_int(num, f"{opname}: num")
    if num < 0:
        raise ValueError(f"{opname}: number of samples, {num}, must be non-negative")
    start, stop = util.promote_dtypes_inexact(opname, start, stop)
    target = util.dtype_arg(dtype) if dtype is not None else start.dtype
    comp = util.to_inexact_dtype(target)
    start, stop = _cast(start, comp), _cast(stop, comp)
    bshape = util.broadcast_shapes(start.shape, stop.shape, opname=opname)
    start = util.broadcast_to_shape(start, bshape, opname)
    stop = util.broadcast_to_shape(stop, bshape, opname)
    full_shape = (num,) + bshape
    dims = tuple(range(1, len(full_shape)))
    div = (num - 1) if endpoint else num
    if num > 1:
        step = lax.div(lax.sub(stop, start), lax.full(bshape, div, comp))
        real = np.dtype(dtypes.finfo(comp).dtype)
        # i / div, as XLA computes JAX's division by the constant div: i * (1 / div)
        t = lax.mul(lax.broadcasted_iota(real, (div,) + bshape, 0),
                    lax.full((div,) + bshape, np.array(1, real) / np.array(div, real), real))
        t = _cast(t, comp)
        one = lax.full(t.shape, 1, comp)
        out = lax.add(lax.mul(lax.broadcast_in_dim(start, t.shape, dims), lax.sub(one, t)),
                      lax.mul(lax.broadcast_in_dim(stop, t.shape, dims), t))
        if endpoint:
            out = lax.concatenate([out, lax.reshape(stop, (1,) + bshape)], 0)
    else:
        step = lax.full(bshape, np.nan, comp) if endpoint or num == 0 else lax.sub(stop, start)
        out = lax.broadcast_in_dim(start, full_shape, dims)
    ax = util.canonicalize_axis(axis, len(full_shape), opname)
    if ax != 0:
        perm = tuple(range(1, ax + 1)) + (0,) + tuple(range(ax + 1, len(full_shape)))
        out = lax.transpose(out, perm)
    return out, step, target


def _to_target(out, target):
    if is_int_dtype(target):
        out = lax.floor(out)
    return _cast(out, target)


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0):
    """`num` evenly spaced samples from start to stop (inclusive unless endpoint=False)."""
    out, step, target = _linspace_core("linspace", start, stop, num, endpoint, axis, dtype)
    out = _to_target(out, target)
    return (out, step) if retstep else out


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    """base ** linspace(start, stop, ...); start and stop are first converted to dtype's inexact dtype, as
    in JAX (complex ends with a real dtype keep their real parts)."""
    if dtype is not None:
        comp = util.to_inexact_dtype(util.dtype_arg(dtype))
        start, stop = (_cast(util.asarray_arg("logspace", v), comp) for v in (start, stop))
    out, _, target = _linspace_core("logspace", start, stop, num, endpoint, axis, None)
    b = util.asarray_arg("logspace", base)
    out, b = util.promote_args_inexact("logspace", out, b)
    out = lax.pow(b, out)
    target = util.dtype_arg(dtype) if dtype is not None else out.dtype
    return _to_target(out, target)


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """Geometric progression from start to stop (both of one sign, nonzero)."""
    start, stop = util.promote_args_inexact("geomspace", start, stop)
    sign = lax.sign(start)
    log_start = lax.log(lax.mul(start, sign))
    log_stop = lax.log(lax.mul(stop, sign))
    out, _, _ = _linspace_core("geomspace", log_start, log_stop, num, endpoint, 0, None)
    full_shape = tuple(out.shape)
    dims = tuple(range(1, len(full_shape)))
    out = lax.mul(lax.exp(out), lax.broadcast_in_dim(sign, full_shape, dims))
    # make the ends exact, as NumPy does
    n = full_shape[0]
    i = lax.broadcasted_iota(np.int32, full_shape, 0)
    if n > 0:
        out = lax.select(lax.eq(i, _c(i, 0)), lax.broadcast_in_dim(start, full_shape, dims), out)
    if endpoint and n > 1:
        out = lax.select(lax.eq(i, _c(i, n - 1)), lax.broadcast_in_dim(stop, full_shape, dims), out)
    ax = util.canonicalize_axis(axis, len(full_shape), "geomspace")
    if ax != 0:
        perm = tuple(range(1, ax + 1)) + (0,) + tuple(range(ax + 1, len(full_shape)))
        out = lax.transpose(out, perm)
    target = util.dtype_arg(dtype) if dtype is not None else out.dtype
    return _to_target(out, target)


# ---------------------------------------------------------------------------------------------------------
# eye / identity / tri

def _diagonal_mask(opname, N, M, k, compare):
    N = util.concrete_int(N, f"{opname}: N")
    M = N if M is None else util.concrete_int(M, f"{opname}: M")
    k = util.concrete_int(k, f"{opname}: k")
    if N < 0 or M < 0:
        raise ValueError(f"{opname}: negative dimensions are not allowed, got shape {(N, M)}")
    itype = np.dtype(np.int64 if max(N, M) + abs(k) > 2 ** 30 else np.int32)
    rows = lax.broadcasted_iota(itype, (N, M), 0)
    cols = lax.broadcasted_iota(itype, (N, M), 1)
    return compare(lax.sub(cols, rows), lax.full((N, M), k, itype))


def eye(N, M=None, k=0, dtype=None):
    """2-D array with ones on the k-th diagonal."""
    dtype = util.dtype_arg(dtype) or _default_float()
    return lax.convert_element_type(_diagonal_mask("eye", N, M, k, lax.eq), dtype)


def identity(n, dtype=None):
    """n x n identity matrix."""
    return eye(n, dtype=dtype)


def tri(N, M=None, k=0, dtype=None):
    """Ones at and below the k-th diagonal."""
    dtype = util.dtype_arg(dtype) or _default_float()
    return lax.convert_element_type(_diagonal_mask("tri", N, M, k, lax.le), dtype)


# ---------------------------------------------------------------------------------------------------------
# meshgrid / indices

def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """Coordinate arrays from 1-D coordinate vectors ('xy': Cartesian, 'ij': matrix indexing)."""
    del copy
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    arrays = [util.asarray_arg("meshgrid", x) for x in xi]
    for i, a in enumerate(arrays):
        if a.ndim != 1:
            raise ValueError(f"meshgrid: arguments must be 1-D, got shape {tuple(a.shape)} at position {i}")
    if not arrays:
        return []
    sizes = [a.shape[0] for a in arrays]
    if indexing == "xy" and len(arrays) > 1:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for i, a in enumerate(arrays):
        dim = i
        if indexing == "xy" and len(arrays) > 1 and i < 2:
            dim = 1 - i
        if sparse:
            shape = tuple(sizes[d] if d == dim else 1 for d in range(len(arrays)))
            out.append(lax.reshape(a, shape))
        else:
            out.append(lax.broadcast_in_dim(a, tuple(sizes), (dim,)))
    return out


def indices(dimensions, dtype=None, sparse=False):
    """Grid of indices: shape (len(dimensions), *dimensions), or a tuple of broadcastable arrays."""
    dims = util.canonicalize_shape(dimensions, "indices")
    dtype = util.dtype_arg(dtype) or np.dtype(dtypes.default_int_dtype())
    grids = []
    for i, d in enumerate(dims):
        if sparse:
            shape = tuple(d if j == i else 1 for j in range(len(dims)))
            grids.append(lax.broadcasted_iota(dtype, shape, i))
        else:
            grids.append(lax.broadcasted_iota(dtype, (1,) + dims, i + 1))
    if sparse:
        return tuple(grids)
    if not grids:
        return lax.full((0,), 0, dtype)
    return lax.concatenate(grids, 0)
