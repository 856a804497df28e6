"""Shared argument handling for kiln.numpy: array conversion, JAX dtype promotion, NumPy broadcasting,
axis normalisation. Built only on kiln.lax, kiln._src.core and kiln._src.dtypes (no jnp functions here,
so every other kiln.numpy module may import this one).

Contract of the helpers used across modules (part A and part B):
  asarray_arg(opname, x)               -> Array (TypeError naming opname for strings/objects)
  dtype_arg(dtype)                     -> canonical numpy dtype or None
  broadcast_shapes(*shapes, opname=)   -> tuple (ValueError "add: shapes (3,) and (4,) cannot be broadcast")
  broadcast_to_shape(x, shape, opname) -> Array of exactly `shape`
  promote_dtypes(opname, *args)        -> list of Arrays sharing JAX's promoted dtype (shapes untouched)
  promote_args(opname, *args)          -> promote_dtypes + broadcast to one shape
  promote_args_inexact(opname, *args)  -> as promote_args, integers/bools promoted by to_inexact_dtype
  to_inexact_dtype(dtype)              -> float dtype integer/bool data is computed in (int32 -> float32)
  canonicalize_axis(axis, ndim, opname)  -> int in [0, ndim)  (AxisError, a ValueError, when out of range)
  canonicalize_axes(axis, ndim, opname)  -> tuple of ints in the given order (None -> all axes)
  full_like_scalar(x, value)           -> Array shaped and typed like x, filled with a Python scalar
"""

import operator
import warnings

import numpy as np

from kiln import lax
from kiln._src import core
from kiln._src import dtypes
from kiln._src.config import config

try:  # NumPy >= 1.25
    from numpy.exceptions import AxisError
except ImportError:  # pragma: no cover
    AxisError = np.AxisError

__all__ = []  # helpers only; nothing here is public kiln.numpy API

_PY_SCALARS = (bool, int, float, complex)


def is_python_scalar(x):
    return type(x) in _PY_SCALARS


def asarray_arg(opname, x, position=None):
    """Converts one argument of `opname` to an Array, with an error naming the operation."""
    if isinstance(x, core.Array):
        return x
    if type(x) in (list, tuple):
        raise_sequence_arg(opname, x, position)
    where = "" if position is None else f" at position {position}"
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{opname}: expected an array or a number{where}, got {type(x).__name__} {x!r}")
    try:
        return core.asarray(x)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{opname}: cannot convert argument{where} of type {type(x).__name__} "
                      f"to an array: {e}") from None


def raise_sequence_arg(opname, x, position=None):
    """The TypeError JAX's check_arraylike raises for a list or tuple given where an array goes (jnp.sum([1,
    2]) is refused: the conversion of a long list is slow and easily done by accident; jnp.asarray makes one)."""
    raise TypeError(f"{opname} requires ndarray or scalar arguments, got {type(x)} at position "
                    f"{position or 0}; convert it with kiln.numpy.asarray first (as JAX requires)")


def dtype_arg(dtype):
    """Normalises a user `dtype=` (np.dtype, type, string, kiln scalar type) to a canonical dtype."""
    if dtype is None:
        return None
    if isinstance(dtype, (core.Array, np.ndarray)):  # as JAX: an array is no dtype
        raise ValueError("Passing an array as a dtype argument is no longer supported; instead of dtype=arr use "
                         "dtype=arr.dtype")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        inner = getattr(dtype, "dtype", None)  # kiln scalar types such as kiln.numpy.float32
        if inner is None or isinstance(inner, property):
            raise TypeError(f"dtype: cannot interpret {dtype!r} as a data type") from None
        dt = np.dtype(inner)
    return np.dtype(dtypes.canonicalize_dtype(dt))


def shape_of(x):
    return tuple(x.shape) if hasattr(x, "shape") else np.shape(x)


def broadcast_shapes(*shapes, opname="broadcast_shapes"):
    """NumPy broadcasting of several shapes; raises ValueError naming `opname` and the shapes."""
    if not shapes:
        return ()
    first = shapes[0]
    if all(s == first for s in shapes):  # the common case: nothing to broadcast
        return tuple(first)
    shapes = [tuple(s) for s in shapes]
    nd = max(len(s) for s in shapes)
    result = []
    for i in range(nd):
        size = 1
        for s in shapes:
            d = s[i - nd + len(s)] if i - nd + len(s) >= 0 else 1
            if d == 1:
                continue
            if size != 1 and d != size:
                listed = " and ".join(str(s) for s in shapes)
                raise ValueError(f"{opname}: shapes {listed} cannot be broadcast together")
            size = d
        result.append(size)
    return tuple(result)


def broadcast_to_shape(x, shape, opname="broadcast_to"):
    """Broadcasts Array `x` to `shape` with NumPy rules (leading axes added, size-1 axes stretched)."""
    shape = tuple(shape)
    if tuple(x.shape) == shape:
        return x
    if len(shape) < x.ndim or broadcast_shapes(x.shape, shape, opname=opname) != shape:
        raise ValueError(f"{opname}: cannot broadcast an array of shape {tuple(x.shape)} to shape {shape}")
    lead = len(shape) - x.ndim
    return lax.broadcast_in_dim(x, shape, tuple(range(lead, len(shape))))


def _convert(opname, original, arr, dtype, weak):
    """Converts `arr` (made from `original`) to `dtype`; Python scalars become constants of the
    result dtype directly (no conversion kernel), weakly typed where the result is."""
    if arr.dtype == dtype and (arr.weak_type == weak or not is_python_scalar(original)):
        return arr
    if is_python_scalar(original) and not isinstance(original, complex):
        # A Python int into a narrower int dtype wraps, as in JAX (int8 array + 300 adds 44).
        value = np.array(original).astype(dtype).item() if dtype.kind in "iub" else float(original)
        return core.scalar_constant(value, dtype, weak)
    return lax.convert_element_type(arr, dtype, weak_type=weak)  # every operand takes the result's weak type (JAX)


def _result_dtype(opname, arrays):
    try:
        return dtypes.result_type(*arrays, return_weak_type_flag=True)
    except dtypes.TypePromotionError:
        raise
    except (TypeError, ValueError) as e:
        listed = ", ".join(str(np.dtype(a.dtype)) for a in arrays)
        raise TypeError(f"{opname}: cannot promote dtypes ({listed}): {e}") from None


def promote_dtypes(opname, *args):
    """Converts every argument to an Array of JAX's promoted dtype (weak types as JAX); shapes untouched."""
    arrays = [asarray_arg(opname, a, i if len(args) > 1 else None) for i, a in enumerate(args)]
    if len(arrays) <= 1:
        return arrays
    dtype, weak = _result_dtype(opname, arrays)
    dtype = np.dtype(dtype)
    return [_convert(opname, a, x, dtype, weak) for a, x in zip(args, arrays)]


def promote_dtypes_inexact(opname, *args):
    """As promote_dtypes, then bool/integer results become the default float dtype (float32 unless x64)."""
    arrays = [asarray_arg(opname, a, i if len(args) > 1 else None) for i, a in enumerate(args)]
    dtype, weak = _result_dtype(opname, arrays)
    dtype = to_inexact_dtype(dtype)
    return [_convert(opname, a, x, dtype, weak) for a, x in zip(args, arrays)]


def to_inexact_dtype(dtype):
    """The float dtype integer/bool data is computed in (JAX's rule): float32 for bool and integers of
    up to 32 bits, float64 for 64-bit integers (float32 again unless x64 is on); floats are kept."""
    dtype = np.dtype(dtype)
    if is_inexact_dtype(dtype):
        return dtype
    return np.dtype(dtypes.canonicalize_dtype(np.float64 if dtype.itemsize > 4 else np.float32))


def _check_rank_promotion(opname, arrays):
    """jax_numpy_rank_promotion 'warn'/'raise': operands of different nonzero ranks (rank 0 always
    broadcasts) warn or raise ValueError, as in JAX."""
    mode = config.jax_numpy_rank_promotion
    if mode == "allow" or len({x.ndim for x in arrays if x.ndim}) < 2:
        return
    shapes = " ".join(str(tuple(x.shape)) for x in arrays)
    if mode == "raise":
        raise ValueError(f"Operands could not be broadcast together for {opname} on shapes {shapes} and with "
                         f"the config option jax_numpy_rank_promotion='raise'. For more information, see "
                         f"https://docs.jax.dev/en/latest/rank_promotion_warning.html.")
    warnings.warn(f"Following NumPy automatic rank promotion for {opname} on shapes {shapes}. Set the "
                  f"jax_numpy_rank_promotion config option to 'allow' to disable this warning; for more "
                  f"information, see https://docs.jax.dev/en/latest/rank_promotion_warning.html.", stacklevel=4)


def _broadcast_all(opname, arrays, rank_promotion=True):
    if rank_promotion:  # (JAX checks its ufuncs' operands, not where's)
        _check_rank_promotion(opname, arrays)
    shape = broadcast_shapes(*(x.shape for x in arrays), opname=opname)
    return [broadcast_to_shape(x, shape, opname) for x in arrays]


def promote_args(opname, *args):
    """JAX dtype promotion plus NumPy broadcasting: returns Arrays of one dtype and one shape."""
    return _broadcast_all(opname, promote_dtypes(opname, *args))


def promote_args_inexact(opname, *args):
    """As promote_args, with bool/integer promoted to the default float (as jnp.sin(1) is float32)."""
    return _broadcast_all(opname, promote_dtypes_inexact(opname, *args))


def is_inexact_dtype(dtype):
    dtype = np.dtype(dtype)
    return dtype.kind in "fc" or dtype.name in ("bfloat16",) or dtype.name.startswith("float8")


def is_float_dtype(dtype):
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype.name == "bfloat16" or dtype.name.startswith("float8")


def is_int_dtype(dtype):
    return np.dtype(dtype).kind in "iu"


def is_bool_dtype(dtype):
    return np.dtype(dtype).kind == "b"


def is_complex_dtype(dtype):
    return np.dtype(dtype).kind == "c"


def canonicalize_axis(axis, ndim, opname="axis"):
    """Returns `axis` as an int in [0, ndim); raises AxisError (a ValueError and IndexError) naming opname."""
    try:
        axis = operator.index(axis)
    except TypeError:
        raise TypeError(f"{opname}: axis must be an integer, got {type(axis).__name__} {axis!r}") from None
    if not -ndim <= axis < ndim:
        raise AxisError(axis, ndim, opname)
    return axis + ndim if axis < 0 else axis


def canonicalize_axes(axis, ndim, opname="axis"):
    """Normalises None / int / sequence of ints to a tuple of distinct axes in [0, ndim), order kept."""
    if axis is None:
        return tuple(range(ndim))
    if is_int_sequence_like(axis):
        axes = tuple(canonicalize_axis(a, ndim, opname) for a in axis)
    else:
        axes = (canonicalize_axis(axis, ndim, opname),)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{opname}: duplicate value in 'axis': {axis!r}")
    return axes


def full_like_scalar(x, value):
    """An Array with x's shape and dtype filled with Python scalar `value` (for constants inside ops)."""
    return lax.full(tuple(x.shape), value, x.dtype)


def concrete_int(x, what):
    """A static Python int from an int-like argument (traced values raise ConcretizationTypeError)."""
    if isinstance(x, core.Array):
        x = core.concrete_or_error(x, what)
    try:
        return operator.index(x)
    except TypeError:
        if isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "iu":
            return int(x)
        raise TypeError(f"{what}: expected an integer, got {type(x).__name__} {x!r}") from None


def is_int_sequence_like(x):
    """Whether a shape or axis argument is a sequence of ints (a tuple, list, range, or another
    library's shape object such as TensorFlow Probability's TensorShape) rather than one int, as
    JAX reads them: anything iterable that is not itself an integer."""
    if isinstance(x, (tuple, list, range)):
        return True
    if isinstance(x, (str, bytes, dict)) or hasattr(x, "__index__"):
        return False
    return hasattr(x, "__iter__") and hasattr(x, "__len__")


def canonicalize_shape(shape, opname):
    """Normalises an int or sequence of ints to a shape tuple; negative sizes raise ValueError."""
    if isinstance(shape, core.Array) or isinstance(shape, np.ndarray):
        if isinstance(shape, core.Array):
            shape = core.concrete_or_error(shape, f"{opname}: the shape argument")
        shape = shape.tolist()
    if is_int_sequence_like(shape):
        dims = tuple(concrete_int(d, f"{opname}: the shape argument") for d in shape)
    else:
        dims = (concrete_int(shape, f"{opname}: the shape argument"),)
    if any(d < 0 for d in dims):
        raise ValueError(f"{opname}: negative dimensions are not allowed, got shape {dims}")
    return dims


def check_no_out(opname, out):
    if out is not None:
        raise NotImplementedError(f"{opname}: the 'out' argument is not supported; kiln arrays are "
                                  f"immutable, use the returned value instead")


def _broadcast_nonscalar(opname, arrays):
    """Broadcasts arrays to their common shape, leaving rank-0 arrays as they are (lax's
    elementwise primitives broadcast rank-0 operands themselves, which saves materializing
    a filled array in eager mode). Returns (arrays, common shape).

    Incompatible shapes raise JAX's class: TypeError where every non-scalar operand has one rank (JAX
    hands those to lax unbroadcast, whose shape rule raises it), ValueError otherwise (its broadcast;
    bug, issue 32: always ValueError)."""
    _check_rank_promotion(opname, arrays)
    try:
        shape = broadcast_shapes(*(x.shape for x in arrays), opname=opname)
    except ValueError as e:
        if len({x.ndim for x in arrays if x.ndim}) == 1:
            raise TypeError(str(e)) from None
        raise
    return [x if x.shape == () else broadcast_to_shape(x, shape, opname) for x in arrays], shape


def promote_args_elementwise(opname, *args):
    """promote_dtypes + broadcasting of the non-scalar operands; returns (arrays, shape).
    Callers must broadcast their result to `shape` if it could come out smaller."""
    return _broadcast_nonscalar(opname, promote_dtypes(opname, *args))


def promote_args_elementwise_inexact(opname, *args):
    return _broadcast_nonscalar(opname, promote_dtypes_inexact(opname, *args))


_FAST_SCALARS = (int, float)
_int_ranges = {}


def _scalar_fits(value, dtype):
    if dtype.kind == "f":
        return type(value) is float or abs(value) < 2 ** 53
    if dtype.kind not in "iu" or type(value) is not int:
        return False
    default = dtypes.default_int_dtype()
    r = _int_ranges.get((dtype, default))
    if r is None:
        # a Python int must also fit the default int (int32 unless x64): JAX converts it to that first,
        # so uint32 + (2**32 - 1) raises OverflowError (on the general path) as it does in JAX
        info, dinfo = np.iinfo(dtype), np.iinfo(default)
        r = _int_ranges[(dtype, default)] = (max(int(info.min), int(dinfo.min)), min(int(info.max), int(dinfo.max)))
    return r[0] <= value <= r[1]


def fast_promote2(x1, x2):
    """The common binary cases without the general machinery: two arrays of one dtype and shape,
    or an array and a Python scalar of a kind that does not change its dtype. None otherwise."""
    a1 = isinstance(x1, core.Array)
    a2 = isinstance(x2, core.Array)
    if a1 and a2:
        if x1.dtype == x2.dtype and x1.shape == x2.shape:
            return x1, x2
        return None
    if a1 and type(x2) in _FAST_SCALARS and _scalar_fits(x2, x1.dtype):
        return x1, core.scalar_constant(x2 if x1.dtype.kind != "f" else float(x2), x1.dtype, x1.weak_type)
    if a2 and type(x1) in _FAST_SCALARS and _scalar_fits(x1, x2.dtype):
        return core.scalar_constant(x1 if x2.dtype.kind != "f" else float(x1), x2.dtype, x2.weak_type), x2
    return None
