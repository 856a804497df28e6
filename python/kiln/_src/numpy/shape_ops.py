# kiln.numpy shape, joining, splitting, ordering and selection functions.
# Built only from kiln.lax primitives, kiln._src.core and kiln._src.dtypes:
# everything here must trace (jit/vmap/grad) unless it says it needs
# concrete values (nonzero/unique without size=, boolean masks).
import builtins
import collections
import functools
import operator

import numpy as np

from kiln import lax
from kiln._src import core, dtypes
from kiln._src.numpy import util


def _keys_by_part(fn):
    """fn (a shape op whose first argument is the array) on a typed key array too, as JAX's: applied
    to each uint32 word of the key data (an array of the key array's shape) and the words stacked
    back as the data's last axis, so axis arguments mean the key array's axes."""
    @functools.wraps(fn)
    def wrapped(a, *args, **kwargs):
        if getattr(a, "_is_key_array", False):
            from kiln import random
            d = a._data
            return random.PRNGKeyArray(stack([wrapped(d[..., j], *args, **kwargs) for j in range(d.shape[-1])], -1))
        return fn(a, *args, **kwargs)
    return wrapped

__all__ = [
    "reshape", "ravel", "transpose", "permute_dims", "matrix_transpose",
    "swapaxes", "moveaxis", "squeeze", "expand_dims", "broadcast_to",
    "broadcast_arrays", "atleast_1d", "atleast_2d", "atleast_3d",
    "concatenate", "concat", "stack", "hstack", "vstack", "dstack",
    "column_stack", "split", "array_split", "hsplit", "vsplit", "dsplit",
    "tile", "repeat", "flip", "fliplr", "flipud", "roll", "rot90", "pad",
    "tril", "triu", "diag", "diagonal", "diagflat", "trace", "take",
    "take_along_axis", "nonzero", "flatnonzero", "argwhere", "sort",
    "argsort", "lexsort", "searchsorted", "unique", "copy", "append",
    "insert", "delete", "resize", "select",
]


# ----------------------------------------------------------------------------
# Private helpers shared with indexing.py and linalg.py.

def _asarray(x):
    """An array-valued argument of a kiln.numpy function as an Array (a list or tuple raises TypeError
    naming the function, as JAX's check_arraylike does)."""
    if type(x) in (list, tuple):
        import sys
        util.raise_sequence_arg(sys._getframe(1).f_code.co_name, x)
    return core.asarray(x)


def _static_int(x, what):
    """A Python int from x; x must be static (not traced)."""
    if isinstance(x, core.Array):
        x = core.concrete_or_error(x, what)
    try:
        return operator.index(x)
    except TypeError:
        if isinstance(x, np.ndarray) and x.ndim == 0 and np.issubdtype(x.dtype, np.integer):
            return int(x)
        raise TypeError(f"{what} must be an integer, got {x!r}") from None


def _static_ints(xs, what):
    if isinstance(xs, core.Array):
        xs = core.concrete_or_error(xs, what)
    if isinstance(xs, np.ndarray):
        xs = xs.tolist()
    if not util.is_int_sequence_like(xs):
        return (_static_int(xs, what),)
    return tuple(_static_int(x, what) for x in xs)


def _axis(axis, ndim, opname):
    """Canonicalize one axis into range(ndim); AxisError (a ValueError) if out of range."""
    axis = _static_int(axis, f"{opname}: axis")
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(axis, ndim, opname)
    return axis % ndim if ndim else 0


def _axes(axes, ndim, opname, allow_repeats=False):
    out = tuple(_axis(a, ndim, opname) for a in _static_ints(axes, f"{opname}: axis"))
    if not allow_repeats and len(set(out)) != len(out):
        raise ValueError(f"{opname}: repeated axis in {axes}")
    return out


def _result_dtype(opname, *xs):
    try:
        return np.dtype(dtypes.result_type(*xs))
    except Exception as e:  # noqa: BLE001 - re-raised with the op's name
        raise TypeError(f"{opname}: cannot promote the dtypes of its arguments: {e}") from e


def _promote_weak(opname, *xs):
    """JAX's promoted dtype of xs and whether it is weak (every input weakly typed or a Python scalar)."""
    try:
        dt, weak = dtypes.result_type(*xs, return_weak_type_flag=True)
    except Exception as e:  # noqa: BLE001 - re-raised with the op's name
        raise TypeError(f"{opname}: cannot promote the dtypes of its arguments: {e}") from e
    return np.dtype(dt), bool(weak)


def _promote(opname, *xs):
    """Arrays with one common (JAX-promoted) dtype, weakly typed where JAX's promote_dtypes leaves them
    so (concatenate([int8 array, 1.5]) is a weak float32, which a later float16 operand wins over)."""
    dt, weak = _promote_weak(opname, *xs)
    out = []
    for x in xs:
        if isinstance(x, (np.ndarray, np.generic)):
            # canonicalized first, as JAX (bug, issue 32: an int64 NumPy array went straight to the
            # promoted float32 without x64, where JAX wraps it to int32 first: matmul differed)
            x = core.asarray(x)
        x = x if isinstance(x, core.Array) else core.asarray(x, dtype=dt)
        out.append(x if x.dtype == dt and x.weak_type == weak else lax.convert_element_type(x, dt, weak))
    return out


def _promote_inexact(opname, *xs):
    dt, weak = _promote_weak(opname, *xs)
    dt = np.dtype(dtypes.to_inexact_dtype(dt))  # int32 -> float32 under x64 too, as JAX
    return [lax.convert_element_type(_asarray(x), dt, weak) for x in xs]


def _convert(x, dt):
    x = _asarray(x)
    return x if x.dtype == np.dtype(dt) else lax.convert_element_type(x, dt)


def _default_int():
    return np.dtype(dtypes.default_int_dtype())


def _index_dtype(n):
    """Index dtype able to address n elements."""
    return np.dtype(np.int32) if n < 2**31 else _default_int()


def _sum_dtype(dt):
    """Accumulation dtype of jnp.sum (small ints widen to the default int)."""
    dt = np.dtype(dt)
    if dt == np.bool_:
        return _default_int()
    if np.issubdtype(dt, np.signedinteger) and dt.itemsize < _default_int().itemsize:
        return _default_int()
    if np.issubdtype(dt, np.unsignedinteger):
        udef = np.dtype(np.uint64 if _default_int().itemsize == 8 else np.uint32)
        if dt.itemsize < udef.itemsize:
            return udef
    return dt


def _default_fill(dt):
    """Fill value of JAX's 'fill' gather mode for dtype dt."""
    dt = np.dtype(dt)
    if dt == np.bool_:
        return True
    if np.issubdtype(dt, np.signedinteger):
        return int(np.iinfo(dt).min)
    if np.issubdtype(dt, np.unsignedinteger):
        return int(np.iinfo(dt).max)
    return float("nan")


def _full(shape, value, dt):
    return lax.full(tuple(shape), value, dt)


def _slice_axis(x, start, stop, axis, stride=1):
    starts = [0] * x.ndim
    stops = list(x.shape)
    strides = [1] * x.ndim
    starts[axis], stops[axis], strides[axis] = start, stop, stride
    if starts == [0] * x.ndim and stops == list(x.shape) and stride == 1:
        return x
    return lax.slice(x, starts, stops, strides)


def _bcast_dims(x, shape, dims):
    return lax.broadcast_in_dim(x, tuple(shape), tuple(dims))


def _take_static(x, idx, axis):
    """x gathered along axis at static in-range indices idx (1-d numpy ints).

    Runs of consecutive (+1/-1) or repeated indices become slices, reversals
    and broadcasts; an irregular index falls back to one gather."""
    idx = np.asarray(idx, np.int64).reshape(-1)
    if idx.size == 0:
        return _slice_axis(x, 0, 0, axis)
    runs, i = [], 0
    while i < idx.size:
        j, step = i + 1, 1
        if j < idx.size and idx[j] - idx[i] in (-1, 0, 1):
            step = int(idx[j] - idx[i])
            while j + 1 < idx.size and idx[j + 1] - idx[j] == step:
                j += 1
            j += 1
        runs.append((int(idx[i]), j - i, step))
        i = j
    if len(runs) > 16:
        return lax._take(x, core.asarray(idx.astype(_index_dtype(x.shape[axis]))), axis)
    pieces = []
    for start, length, step in runs:
        if step == 1:
            pieces.append(_slice_axis(x, start, start + length, axis))
        elif step == -1:
            pieces.append(lax.rev(_slice_axis(x, start - length + 1, start + 1, axis), (axis,)))
        else:
            one = _slice_axis(x, start, start + 1, axis)
            shape = list(x.shape)
            shape[axis] = length
            pieces.append(_bcast_dims(one, shape, range(x.ndim)))
    return pieces[0] if len(pieces) == 1 else lax.concatenate(pieces, axis)


def _reduce(kind, x, axes):
    axes = tuple(axes)
    if not axes:
        return x
    if x.dtype == np.bool_:  # bools sum with or and multiply with and, as JAX's (einsum's 'ij->i')
        kind = {"sum": "or", "prod": "and"}.get(kind, kind)
    fn = {"sum": lax.reduce_sum, "prod": lax.reduce_prod, "max": lax.reduce_max,
          "min": lax.reduce_min, "or": lax.reduce_or, "and": lax.reduce_and}[kind]
    return fn(x, axes)


def _nonzero_mask(x):
    x = _asarray(x)
    if x.dtype == np.bool_:
        return x
    return lax.ne(x, _full((), 0, x.dtype))


# ----------------------------------------------------------------------------
# Shapes.

def _resolve_shape(size, shape, opname, orig_shape):
    shape = list(shape)
    if shape.count(-1) > 1:
        raise ValueError(f"{opname}: can only specify one unknown dimension (-1), got {tuple(shape)}")
    if any(d < -1 for d in shape):
        raise ValueError(f"{opname}: negative dimension in new shape {tuple(shape)}")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        if known == 0 or size % known:
            raise ValueError(f"{opname}: cannot reshape array of shape {orig_shape} "
                             f"(size {size}) into shape {tuple(shape)}")
        shape[shape.index(-1)] = size // known
    if int(np.prod(shape, dtype=np.int64)) != size:
        raise ValueError(f"{opname}: cannot reshape array of shape {orig_shape} "
                         f"(size {size}) into shape {tuple(shape)}")
    return tuple(shape)


@_keys_by_part
def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    if shape is None:
        shape = newshape
    if shape is None:
        raise TypeError("reshape: missing required argument 'shape'")
    a = _asarray(a)
    new = _resolve_shape(a.size, _static_ints(shape, "reshape: shape"), "reshape", a.shape)
    if order in ("C", "A", None):
        return a if new == a.shape else lax.reshape(a, new)
    if order == "F":
        rev_t = tuple(reversed(range(a.ndim)))
        flat = lax.reshape(lax.transpose(a, rev_t), tuple(reversed(new)))
        return lax.transpose(flat, tuple(reversed(range(len(new)))))
    raise ValueError(f"reshape: order must be 'C', 'F' or 'A', got {order!r}")


@_keys_by_part
def ravel(a, order="C"):
    a = _asarray(a)
    return reshape(a, (a.size,), order=order)


@_keys_by_part
def transpose(a, axes=None):
    a = _asarray(a)
    if axes is None:
        perm = tuple(reversed(range(a.ndim)))
    else:
        given = _static_ints(axes, "transpose: axes")
        if len(given) != a.ndim or sorted(p % a.ndim if -a.ndim <= p < a.ndim else p
                                          for p in given) != list(range(a.ndim)):
            raise ValueError(f"transpose: axes {tuple(given)} is not a permutation of the "
                             f"{a.ndim} axes of an array of shape {a.shape}")
        perm = tuple(p % a.ndim for p in given)
    return a if perm == tuple(range(a.ndim)) else lax.transpose(a, perm)


def permute_dims(a, axes=None):
    return transpose(a, axes)


def matrix_transpose(x):
    x = _asarray(x)
    if x.ndim < 2:
        raise ValueError(f"matrix_transpose: needs an array of rank >= 2, got shape {x.shape}")
    return swapaxes(x, -1, -2)


@_keys_by_part
def swapaxes(a, axis1, axis2):
    a = _asarray(a)
    i, j = _axis(axis1, a.ndim, "swapaxes"), _axis(axis2, a.ndim, "swapaxes")
    perm = list(range(a.ndim))
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(a, perm)


@_keys_by_part
def moveaxis(a, source, destination):
    a = _asarray(a)
    src = _axes(source, a.ndim, "moveaxis")
    dst = _axes(destination, a.ndim, "moveaxis")
    if len(src) != len(dst):
        raise ValueError(f"moveaxis: source {source} and destination {destination} must "
                         "have the same number of elements")
    rest = [d for d in range(a.ndim) if d not in src]
    perm = [None] * a.ndim
    for s, d in zip(src, dst):
        perm[d] = s
    it = iter(rest)
    perm = [next(it) if p is None else p for p in perm]
    return transpose(a, perm)


@_keys_by_part
def squeeze(a, axis=None):
    a = _asarray(a)
    if axis is None:
        axes = tuple(i for i, d in enumerate(a.shape) if d == 1)
    else:
        axes = _axes(axis, a.ndim, "squeeze")
        bad = [ax for ax in axes if a.shape[ax] != 1]
        if bad:
            raise ValueError(f"squeeze: cannot select an axis to squeeze out which has size "
                             f"not equal to one: axis {bad[0]} of shape {a.shape}")
    if not axes:
        return a
    return lax.reshape(a, tuple(d for i, d in enumerate(a.shape) if i not in axes))


@_keys_by_part
def expand_dims(a, axis):
    a = _asarray(a)
    n = len(_static_ints(axis, "expand_dims: axis"))
    axes = _axes(axis, a.ndim + n, "expand_dims")
    shape, it = [], iter(a.shape)
    for i in range(a.ndim + n):
        shape.append(1 if i in axes else next(it))
    return lax.reshape(a, tuple(shape))


def _broadcast_shapes(opname, *shapes):
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(f"{opname}: shapes {', '.join(map(str, shapes))} cannot be "
                         "broadcast together") from None


@_keys_by_part
def broadcast_to(array, shape):
    a = _asarray(array)
    shape = _static_ints(shape, "broadcast_to: shape")
    if shape == a.shape:
        return a
    nlead = len(shape) - a.ndim
    if nlead < 0 or any(s not in (1, t) for s, t in zip(a.shape, shape[nlead:])):
        raise ValueError(f"broadcast_to: cannot broadcast array of shape {a.shape} "
                         f"to shape {shape}")
    return _bcast_dims(a, shape, range(nlead, len(shape)))


def broadcast_arrays(*args):
    arrs = [_asarray(a) for a in args]
    shape = _broadcast_shapes("broadcast_arrays", *(a.shape for a in arrs))
    return [broadcast_to(a, shape) for a in arrs]


def _atleast(n, arys):
    out = []
    for a in arys:
        a = _asarray(a)
        if a.ndim < n:
            if n == 3 and a.ndim == 1:
                shape = (1, a.shape[0], 1)
            elif n == 3 and a.ndim == 2:
                shape = a.shape + (1,)
            else:
                shape = (1,) * (n - a.ndim) + a.shape
            a = lax.reshape(a, shape)
        out.append(a)
    return out[0] if len(out) == 1 else out


def atleast_1d(*arys):
    return _atleast(1, arys)


def atleast_2d(*arys):
    return _atleast(2, arys)


def atleast_3d(*arys):
    return _atleast(3, arys)


# ----------------------------------------------------------------------------
# Joining and splitting.

def _seq(arrays, opname):
    if isinstance(arrays, (core.Array, np.ndarray)):
        arrays = _asarray(arrays)
        return [_index0(arrays, i) for i in range(arrays.shape[0])]
    arrays = list(arrays)
    if not arrays:
        raise ValueError(f"{opname}: need at least one array")
    return arrays


def _index0(a, i):
    return lax.reshape(_slice_axis(a, i, i + 1, 0), a.shape[1:])


def concatenate(arrays, axis=0, dtype=None):
    arrays = _seq(arrays, "concatenate")
    if any(getattr(a, "_is_key_array", False) for a in arrays):  # typed keys: their data, rewrapped
        from kiln import random
        if axis is None:
            arrays, axis = [a.ravel() if getattr(a, "_is_key_array", False) else a for a in arrays], 0
        nd = builtins.max(arrays[0].ndim, 1)  # (0-d keys: _key_structural raises numpy's error)
        ax = _axis(axis, nd, "concatenate")
        return random._key_structural("concatenate", arrays, dtype, lambda ds: concatenate(ds, ax))
    if axis is None:
        arrays = [ravel(a) for a in arrays]
        axis = 0
    arrs = _promote("concatenate", *arrays)
    if dtype is not None:
        arrs = [_convert(a, dtypes.canonicalize_dtype(dtype)) for a in arrs]
    nd = arrs[0].ndim
    if nd == 0:
        raise ValueError("concatenate: zero-dimensional arrays cannot be concatenated")
    ax = _axis(axis, nd, "concatenate")
    for a in arrs:
        if a.ndim != nd or any(i != ax and s != t for i, (s, t) in enumerate(zip(a.shape, arrs[0].shape))):
            raise ValueError("concatenate: all input arrays must have the same shape except "
                             f"along axis {ax}; got shapes {[x.shape for x in arrs]}")
    return arrs[0] if len(arrs) == 1 else lax.concatenate(arrs, ax)


def concat(arrays, /, *, axis=0):
    return concatenate(arrays, axis)


def stack(arrays, axis=0, out=None, dtype=None):
    arrays = _seq(arrays, "stack")
    if any(getattr(a, "_is_key_array", False) for a in arrays):  # typed keys: their data, rewrapped
        from kiln import random
        nd = arrays[0].ndim + 1
        ax = _axis(axis, nd, "stack")
        return random._key_structural("stack", arrays, dtype, lambda ds: stack(ds, ax))
    arrays = [_asarray(a) for a in arrays]
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise ValueError(f"stack: all input arrays must have the same shape, got "
                         f"{[a.shape for a in arrays]}")
    ax = _axis(axis, arrays[0].ndim + 1, "stack")
    return concatenate([expand_dims(a, ax) for a in arrays], ax, dtype=dtype)


def hstack(tup, dtype=None):
    arrs = [atleast_1d(a) for a in _seq(tup, "hstack")]
    return concatenate(arrs, 0 if arrs[0].ndim == 1 else 1, dtype=dtype)


def vstack(tup, dtype=None):
    return concatenate([atleast_2d(a) for a in _seq(tup, "vstack")], 0, dtype=dtype)


def dstack(tup, dtype=None):
    return concatenate([atleast_3d(a) for a in _seq(tup, "dstack")], 2, dtype=dtype)


def column_stack(tup):
    arrs = []
    for a in _seq(tup, "column_stack"):
        a = _asarray(a)
        arrs.append(lax.reshape(a, (a.size, 1)) if a.ndim < 2 else a)
    return concatenate(arrs, 1)


def _split(opname, ary, indices_or_sections, axis, equal):
    a = _asarray(ary)
    ax = _axis(axis, a.ndim, opname)
    n = a.shape[ax]
    if isinstance(indices_or_sections, (int, np.integer)) or (
            hasattr(indices_or_sections, "ndim") and indices_or_sections.ndim == 0):
        sections = _static_int(indices_or_sections, f"{opname}: sections")
        if sections <= 0:
            raise ValueError(f"{opname}: number of sections must be larger than 0, got {sections}")
        if equal and n % sections:
            raise ValueError(f"{opname}: array split does not result in an equal division: "
                             f"axis {ax} of size {n} into {sections} sections")
        q, r = divmod(n, sections)
        sizes = [q + 1] * r + [q] * (sections - r)
        bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    else:
        idx = list(_static_ints(indices_or_sections, f"{opname}: indices"))
        bounds = [0] + idx + [n]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        lo = builtins.min(builtins.max(lo + n if lo < 0 else lo, 0), n)
        hi = builtins.min(builtins.max(hi + n if hi < 0 else hi, 0), n)
        out.append(_slice_axis(a, lo, builtins.max(lo, hi), ax))
    return out


def split(ary, indices_or_sections, axis=0):
    return _split("split", ary, indices_or_sections, axis, True)


def array_split(ary, indices_or_sections, axis=0):
    return _split("array_split", ary, indices_or_sections, axis, False)


def hsplit(ary, indices_or_sections):
    a = _asarray(ary)
    if a.ndim == 0:
        raise ValueError("hsplit: only works on arrays of 1 or more dimensions")
    return _split("hsplit", a, indices_or_sections, 1 if a.ndim > 1 else 0, True)


def vsplit(ary, indices_or_sections):
    a = _asarray(ary)
    if a.ndim < 2:
        raise ValueError(f"vsplit: only works on arrays of 2 or more dimensions, got shape {a.shape}")
    return _split("vsplit", a, indices_or_sections, 0, True)


def dsplit(ary, indices_or_sections):
    a = _asarray(ary)
    if a.ndim < 3:
        raise ValueError(f"dsplit: only works on arrays of 3 or more dimensions, got shape {a.shape}")
    return _split("dsplit", a, indices_or_sections, 2, True)


@_keys_by_part
def tile(A, reps):
    a = _asarray(A)
    reps = _static_ints(reps, "tile: reps")
    if any(r < 0 for r in reps):
        raise ValueError(f"tile: reps must be non-negative, got {reps}")
    nd = builtins.max(a.ndim, len(reps))
    reps = (1,) * (nd - len(reps)) + tuple(reps)
    shape = (1,) * (nd - a.ndim) + a.shape
    inter = [v for r, s in zip(reps, shape) for v in (r, s)]
    b = _bcast_dims(lax.reshape(a, shape), inter, range(1, 2 * nd, 2))
    return lax.reshape(b, tuple(r * s for r, s in zip(reps, shape)))


@_keys_by_part
def repeat(a, repeats, axis=None, *, total_repeat_length=None):
    a = _asarray(a)
    if axis is None:
        a, axis = ravel(a), 0
    ax = _axis(axis, a.ndim, "repeat")
    n = a.shape[ax]
    if isinstance(repeats, core.Array) and core.is_tracer(repeats):
        if total_repeat_length is None:
            core.concrete_or_error(repeats, "repeat: repeats (pass total_repeat_length= "
                                         "to repeat a traced number of times)")
        reps = broadcast_to(_convert(repeats, _default_int()), (n,))
        ends = lax.cumsum(reps, 0)
        pos = lax.broadcasted_iota(ends.dtype, (total_repeat_length, n), 0)
        src = _reduce("sum", _convert(lax.ge(pos, _bcast_dims(ends, pos.shape, (1,))),
                                      ends.dtype), (1,))
        src = lax.clamp(_full((), 0, src.dtype), src, _full((), builtins.max(n - 1, 0), src.dtype))
        return lax._take(a, src, ax)
    reps = np.asarray(core.concrete_or_error(repeats, "repeat: repeats")
                      if isinstance(repeats, core.Array) else repeats)
    if not np.issubdtype(reps.dtype, np.integer) and reps.size:
        raise TypeError(f"repeat: repeats must be integers, got dtype {reps.dtype}")
    if np.any(reps < 0):
        raise ValueError("repeat: repeats may not contain negative values")
    if reps.ndim == 0 or reps.size == 1:
        r = int(reps.reshape(()))
        shape = list(a.shape)
        b = _bcast_dims(a, shape[:ax + 1] + [r] + shape[ax + 1:],
                        [d if d <= ax else d + 1 for d in range(a.ndim)])
        shape[ax] = n * r
        out = lax.reshape(b, tuple(shape))
        src = None
    else:
        if reps.shape != (n,):
            raise ValueError(f"repeat: repeats of shape {reps.shape} do not match axis {ax} "
                             f"of size {n}")
        src = np.repeat(np.arange(n), reps)
        out = None
    if total_repeat_length is not None:
        if src is None:
            src = np.repeat(np.arange(n), int(reps.reshape(())))
        src = src[:total_repeat_length]
        if src.size < total_repeat_length:
            src = np.concatenate([src, np.full(total_repeat_length - src.size, builtins.max(n - 1, 0))])
        out = None
    return out if out is not None else _take_static(a, src, ax)


@_keys_by_part
def flip(m, axis=None):
    m = _asarray(m)
    axes = tuple(range(m.ndim)) if axis is None else _axes(axis, m.ndim, "flip")
    return lax.rev(m, axes) if axes else m


@_keys_by_part
def fliplr(m):
    m = _asarray(m)
    if m.ndim < 2:
        raise ValueError(f"fliplr: input must be >= 2-d, got shape {m.shape}")
    return flip(m, 1)


@_keys_by_part
def flipud(m):
    m = _asarray(m)
    if m.ndim < 1:
        raise ValueError("flipud: input must be >= 1-d")
    return flip(m, 0)


def _roll_one(a, shift, ax):
    n = a.shape[ax]
    if n == 0:
        return a
    if isinstance(shift, core.Array) and core.is_tracer(shift):
        s = _convert(shift, np.int32)
        s = lax.rem(lax.add(lax.rem(s, np.int32(n)), np.int32(n)), np.int32(n))
        start = lax.sub(np.int32(n), s)
        both = lax.concatenate([a, a], ax)
        starts = [np.int32(0)] * a.ndim
        starts[ax] = start
        return lax.dynamic_slice(both, starts, a.shape)
    s = _static_int(shift, "roll: shift") % n
    if s == 0:
        return a
    return lax.concatenate([_slice_axis(a, n - s, n, ax), _slice_axis(a, 0, n - s, ax)], ax)


@_keys_by_part
def roll(a, shift, axis=None):
    a = _asarray(a)
    if axis is None:
        return reshape(roll(ravel(a), shift, 0), a.shape)
    axes = _axes(axis, a.ndim, "roll", allow_repeats=True)
    if isinstance(shift, core.Array) and core.is_tracer(shift):
        shifts = [shift] if shift.ndim == 0 else [_index0(shift, i) for i in range(shift.shape[0])]
    else:
        shifts = list(_static_ints(shift, "roll: shift"))
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    if len(axes) == 1:
        axes = axes * len(shifts)
    if len(shifts) != len(axes):
        raise ValueError(f"roll: shift {shift} and axis {axis} must have the same length")
    for s, ax in zip(shifts, axes):
        a = _roll_one(a, s, ax)
    return a


def rot90(m, k=1, axes=(0, 1)):
    m = _asarray(m)
    if m.ndim < 2:
        raise ValueError(f"rot90: array must be at least 2-d, got shape {m.shape}")
    ax = _axes(axes, m.ndim, "rot90", allow_repeats=True)
    if len(ax) != 2 or ax[0] == ax[1]:
        raise ValueError(f"rot90: axes must be two different axes, got {axes}")
    k = _static_int(k, "rot90: k") % 4
    if k == 0:
        return m
    if k == 2:
        return flip(m, ax)
    perm = list(range(m.ndim))
    perm[ax[0]], perm[ax[1]] = perm[ax[1]], perm[ax[0]]
    if k == 1:
        return transpose(flip(m, ax[1]), perm)
    return flip(transpose(m, perm), ax[1])


# ----------------------------------------------------------------------------
# pad

def _pad_pairs(width, ndim, opname, what):
    w = np.asarray(core.concrete_or_error(width, f"{opname}: {what}")
                   if isinstance(width, core.Array) else width)
    try:
        return np.broadcast_to(w, (ndim, 2))
    except ValueError:
        raise ValueError(f"{opname}: {what} of shape {w.shape} cannot be broadcast to "
                         f"({ndim}, 2) for an array of rank {ndim}") from None


def _pad_index(mode, n, before, after):
    """Source index of every output position along one axis for index-map pad modes."""
    i = np.arange(-before, n + after)
    if mode == "edge":
        return np.clip(i, 0, n - 1)
    if mode == "wrap":
        return i % n
    if mode == "symmetric":
        j = i % (2 * n)
        return np.where(j >= n, 2 * n - 1 - j, j)
    if n == 1:  # reflect
        return np.zeros_like(i)
    j = i % (2 * n - 2)
    return np.where(j >= n, 2 * n - 2 - j, j)


def pad(array, pad_width, mode="constant", **kwargs):
    a = _asarray(array)
    widths = _pad_pairs(pad_width, a.ndim, "pad", "pad_width")
    if not np.issubdtype(widths.dtype, np.integer):
        raise TypeError(f"pad: pad_width must be integers, got dtype {widths.dtype}")
    if np.any(widths < 0):
        raise ValueError(f"pad: pad_width must be non-negative, got {widths.tolist()}")
    widths = widths.tolist()
    if mode in ("constant", "empty"):
        values = kwargs.pop("constant_values", 0)
        if kwargs:
            raise TypeError(f"pad: unsupported keyword arguments for mode {mode!r}: {list(kwargs)}")
        if isinstance(values, core.Array) and values.ndim == 0:
            vals = None
            scalar = _convert(values, a.dtype)
        else:
            v = np.asarray(core.concrete_or_error(values, "pad: constant_values")
                           if isinstance(values, core.Array) else values)
            vals = _pad_pairs(v, a.ndim, "pad", "constant_values")
            scalar = None
            if v.ndim == 0:
                scalar, vals = core.asarray(v, dtype=a.dtype), None
        if vals is None:
            return lax.pad(a, scalar, [(b, e, 0) for b, e in widths])
        for ax, ((b, e), (vb, ve)) in enumerate(zip(widths, vals.tolist())):
            for side, (w, v) in enumerate(((b, vb), (e, ve))):
                if w:
                    cfg = [(0, 0, 0)] * a.ndim
                    cfg[ax] = (w, 0, 0) if side == 0 else (0, w, 0)
                    a = lax.pad(a, core.asarray(v, dtype=a.dtype), cfg)
        return a
    if mode in ("edge", "reflect", "symmetric", "wrap"):
        reflect_type = kwargs.pop("reflect_type", "even")
        if kwargs:
            raise TypeError(f"pad: unsupported keyword arguments for mode {mode!r}: {list(kwargs)}")
        if reflect_type != "even":
            raise NotImplementedError("pad: reflect_type='odd' is not supported yet")
        for ax, (b, e) in enumerate(widths):
            if b == 0 and e == 0:
                continue
            if a.shape[ax] == 0:
                raise ValueError(f"pad: can't extend empty axis {ax} using modes other "
                                 f"than 'constant' or 'empty' (shape {a.shape})")
            a = _take_static(a, _pad_index(mode, a.shape[ax], b, e), ax)
        return a
    if mode in ("maximum", "minimum", "mean"):
        if kwargs.get("stat_length") is not None:
            raise NotImplementedError(f"pad: stat_length is not supported for mode {mode!r}")
        for ax, (b, e) in enumerate(widths):
            if b == 0 and e == 0:
                continue
            if mode == "mean":
                s = _reduce("sum", a, (ax,))
                stat = lax.div(s, _full((), a.shape[ax], a.dtype))
                if dtypes.issubdtype(a.dtype, np.integer):
                    stat = _convert(lax.round(lax.div(_convert(s, np.float32),
                                                      np.float32(a.shape[ax]))), a.dtype)
            else:
                stat = _reduce("max" if mode == "maximum" else "min", a, (ax,))
            stat = expand_dims(stat, ax)
            parts = []
            for w in (b, e):
                shape = list(a.shape)
                shape[ax] = w
                parts.append(_bcast_dims(stat, shape, range(a.ndim)))
            a = lax.concatenate([parts[0], a, parts[1]], ax)
        return a
    raise NotImplementedError(f"pad: mode {mode!r} is not supported (supported: constant, "
                              "empty, edge, reflect, symmetric, wrap, maximum, minimum, mean)")


# ----------------------------------------------------------------------------
# Triangles and diagonals.

def _tri_mask(shape, k, lower):
    rows = lax.broadcasted_iota(np.int32, shape, len(shape) - 2)
    cols = lax.broadcasted_iota(np.int32, shape, len(shape) - 1)
    rk = lax.add(rows, np.int32(k))
    return lax.ge(rk, cols) if lower else lax.le(rk, cols)


def _tri(m, k, lower, opname):
    m = _asarray(m)
    if m.ndim < 2:  # as JAX (NumPy would broadcast a 1-d row to a square)
        raise ValueError(f"Argument to {opname} must be at least 2D, got shape {tuple(m.shape)}")
    k = _static_int(k, f"{opname}: k")
    # (zeros like m: a weak-typed m stays weak, as in JAX)
    return lax.select(_tri_mask(m.shape, k, lower), m, lax.full_like(m, 0))


def tril(m, k=0):
    return _tri(m, k, True, "tril")


def triu(m, k=0):
    return _tri(m, k, False, "triu")


def diagonal(a, offset=0, axis1=0, axis2=1):
    a = _asarray(a)
    if a.ndim < 2:
        raise ValueError(f"diagonal: requires an array of at least two dimensions, got shape {a.shape}")
    i, j = _axis(axis1, a.ndim, "diagonal"), _axis(axis2, a.ndim, "diagonal")
    if i == j:
        raise ValueError(f"diagonal: axis1 and axis2 cannot be the same (both {i})")
    k = _static_int(offset, "diagonal: offset")
    a = moveaxis(a, (i, j), (-2, -1))
    nd = a.ndim
    n, m = a.shape[-2:]
    if k > 0:  # (k == 0 slices nothing here: the square corner below is the diagonal's box)
        a = _slice_axis(a, builtins.min(k, m), m, nd - 1)
    elif k < 0:
        a = _slice_axis(a, builtins.min(-k, n), n, nd - 2)
    p, q = a.shape[-2:]
    L = builtins.min(p, q)
    a = _slice_axis(_slice_axis(a, 0, L, nd - 2), 0, L, nd - 1)
    flat = lax.reshape(a, a.shape[:-2] + (L * L,))
    if L == 0:
        return flat
    return _slice_axis(flat, 0, L * L, nd - 2, L + 1)


def diag(v, k=0):
    v = _asarray(v)
    k = _static_int(k, "diag: k")
    if v.ndim == 2:
        return diagonal(v, k)
    if v.ndim != 1:
        raise ValueError(f"diag: input must be 1- or 2-d, got shape {v.shape}")
    n = v.shape[0]
    m = n + abs(k)
    vp = lax.pad(v, _full((), 0, v.dtype), [(0, abs(k), 0)])
    B = _bcast_dims(vp, (m, m), (0,) if k >= 0 else (1,))
    rows = lax.broadcasted_iota(np.int32, (m, m), 0)
    cols = lax.broadcasted_iota(np.int32, (m, m), 1)
    mask = lax.eq(lax.sub(cols, rows), np.int32(k))
    return lax.select(mask, B, _full((m, m), 0, v.dtype))


def diagflat(v, k=0):
    return diag(ravel(v), k)


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    d = diagonal(a, offset, axis1, axis2)
    dt = _sum_dtype(d.dtype) if dtype is None else dtypes.canonicalize_dtype(dtype)
    return _reduce("sum", _convert(d, dt), (d.ndim - 1,))


# ----------------------------------------------------------------------------
# take / take_along_axis

def _int_indices(indices, opname):
    idx = _asarray(indices)
    if not (dtypes.issubdtype(idx.dtype, np.integer)):
        raise TypeError(f"{opname}: indices must be integers, got dtype {idx.dtype}")
    want = np.dtype(np.int64) if idx.dtype.itemsize == 8 and _default_int().itemsize == 8 else np.dtype(np.int32)
    return _convert(idx, want)


def _normalize_index(idx, n, mode, opname):
    """(in-range index, validity mask or None) for indices into an axis of size n."""
    dt = idx.dtype
    zero, nn = _full((), 0, dt), _full((), n, dt)
    if mode == "wrap":
        r = lax.rem(idx, nn)
        return lax.select(lax.lt(r, zero), lax.add(r, nn), r), None
    if mode == "clip":
        return lax.clamp(zero, idx, _full((), n - 1, dt)), None
    wrapped = lax.select(lax.lt(idx, zero), lax.add(idx, nn), idx)
    if mode in ("fill", "drop"):
        valid = lax.and_(lax.ge(wrapped, zero), lax.lt(wrapped, nn))
        return lax.clamp(zero, wrapped, _full((), n - 1, dt)), valid
    if mode == "promise_in_bounds":
        return lax.clamp(zero, wrapped, _full((), n - 1, dt)), None
    raise ValueError(f"{opname}: invalid mode {mode!r}; expected 'fill', 'drop', 'clip', "
                     "'wrap' or 'promise_in_bounds'")


def take(a, indices, axis=None, out=None, mode=None, unique_indices=False,
         indices_are_sorted=False, fill_value=None):
    a = _asarray(a)
    if axis is None:
        a, axis = ravel(a), 0
    ax = _axis(axis, a.ndim, "take")
    idx = _int_indices(indices, "take")
    mode = "fill" if mode is None else mode
    if mode == "raise":
        raise NotImplementedError("take: mode='raise' is not supported (kiln, like JAX, "
                                  "cannot raise on traced indices); use 'fill', 'clip' or 'wrap'")
    n = a.shape[ax]
    out_shape = a.shape[:ax] + idx.shape + a.shape[ax + 1:]
    fill = _default_fill(a.dtype) if fill_value is None else fill_value
    if n == 0:
        if idx.size:  # (as JAX, whatever the mode)
            raise IndexError(f"take: cannot do a non-empty take from an empty axis (shape {a.shape})")
        return _full(out_shape, fill, a.dtype)
    if mode != "wrap":  # (checkify's index checks see the gather's indices, as JAX's)
        from kiln._src.numpy.indexing import _note_index
        _note_index(a.shape, ax, idx)
    norm, valid = _normalize_index(idx, n, mode, "take")
    res = lax._take(a, norm, ax)
    if valid is None:
        return res
    mask = _bcast_dims(valid, out_shape, range(ax, ax + idx.ndim))
    return lax.select(mask, res, _full(out_shape, fill, a.dtype))


def take_along_axis(arr, indices, axis=-1, mode=None, fill_value=None):
    a = _asarray(arr)
    idx = _int_indices(indices, "take_along_axis")
    if axis is None:
        if idx.ndim != 1:
            raise ValueError(f"take_along_axis: with axis=None indices must be 1-d, got {idx.shape}")
        a, axis = ravel(a), 0
    if idx.ndim != a.ndim:
        raise ValueError(f"take_along_axis: indices and array must have the same number of "
                         f"dimensions; got indices {idx.shape} and array {a.shape}")
    ax = _axis(axis, a.ndim, "take_along_axis")
    mode = "fill" if mode is None else mode
    other = [d for d in range(a.ndim) if d != ax]
    bshape = _broadcast_shapes("take_along_axis", tuple(a.shape[d] for d in other),
                               tuple(idx.shape[d] for d in other))
    out_shape = list(idx.shape)
    for d, s in zip(other, bshape):
        out_shape[d] = s
    out_shape = tuple(out_shape)
    fill = _default_fill(a.dtype) if fill_value is None else fill_value
    n = a.shape[ax]
    if n == 0:
        return _full(out_shape, fill, a.dtype)
    if mode != "wrap":  # (checkify's index checks see the gather's indices, as JAX's)
        from kiln._src.numpy.indexing import _note_index
        _note_index(a.shape, ax, idx)
    # Broadcast a over the non-axis dims, then gather with one linear index.
    ashape = list(out_shape)
    ashape[ax] = n
    a = broadcast_to(a, tuple(ashape))
    idx = broadcast_to(idx, out_shape)
    norm, valid = _normalize_index(idx, n, mode, "take_along_axis")
    ldt = _index_dtype(a.size)
    lin = _full(out_shape, 0, ldt)
    stride = 1
    for d in reversed(range(a.ndim)):
        coord = _convert(norm, ldt) if d == ax else lax.broadcasted_iota(ldt, out_shape, d)
        if stride != 1:
            coord = lax.mul(coord, _full((), stride, ldt))
        lin = lax.add(lin, coord)
        stride *= ashape[d]
    res = lax._take(ravel(a), lin, 0)
    if valid is None:
        return res
    return lax.select(valid, res, _full(out_shape, fill, a.dtype))


# ----------------------------------------------------------------------------
# nonzero / argwhere / unique: data-dependent shapes.

def _need_size(x, opname):
    if core.is_tracer(x):
        core.concrete_or_error(x, f"{opname}: the size of the result depends on the "
                                     "values of a traced array; pass size= (and optionally "
                                     f"fill_value=) to use {opname} under jit/vmap/grad")
    return np.asarray(core.concrete_or_error(x, opname))


def _compact_positions(mask, size):
    """Indices (into the flat mask) of its first `size` True entries, and a validity mask."""
    flat = ravel(mask)
    n = flat.shape[0]
    idt = _index_dtype(builtins.max(n, size) + 1)
    m = _convert(flat, idt)
    slot = lax.sub(lax.cumsum(m, 0), _full((), 1, idt))
    target = lax.select(flat, slot, _full((n,), size, idt))
    src = lax.iota(idt, n)
    out = lax._scatter(_full((size,), -1, idt), target, src, 0, "set")
    return out, lax.ge(out, _full((), 0, idt))


def nonzero(a, *, size=None, fill_value=None):
    a = _asarray(a)
    if a.ndim == 0:
        raise ValueError("nonzero: calling nonzero on 0-d arrays is not allowed; use atleast_1d")
    if size is None:
        conc = _need_size(a, "nonzero")
        return tuple(core.asarray(i.astype(_default_int())) for i in np.nonzero(conc))
    size = _static_int(size, "nonzero: size")
    pos, valid = _compact_positions(_nonzero_mask(a), size)
    fills = fill_value if isinstance(fill_value, (tuple, list)) else [fill_value] * a.ndim
    if len(fills) != a.ndim:
        raise ValueError(f"nonzero: fill_value must be a scalar or a tuple of length {a.ndim}")
    out, rem = [], _convert(lax.max(pos, _full((), 0, pos.dtype)), pos.dtype)
    strides = np.cumprod((1,) + a.shape[::-1])[::-1][1:]
    for d, st in enumerate(strides):
        c = lax.div(rem, _full((), int(st), pos.dtype))
        rem = lax.rem(rem, _full((), int(st), pos.dtype))
        c = _convert(c, _default_int())
        f = 0 if fills[d] is None else fills[d]
        out.append(lax.select(valid, c, _full((size,), f, c.dtype)))
    return tuple(out)


def flatnonzero(a, *, size=None, fill_value=None):
    return nonzero(ravel(a), size=size, fill_value=fill_value)[0]


def argwhere(a, *, size=None, fill_value=None):
    a = _asarray(a)
    if size is None and a.ndim == 0:
        conc = _need_size(a, "argwhere")
        return core.asarray(np.argwhere(conc).astype(_default_int()))
    res = nonzero(atleast_1d(a), size=size, fill_value=fill_value)
    return stack(res, axis=1)


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None,
           *, equal_nan=True, size=None, fill_value=None, sorted=True):
    a = _asarray(ar)
    if size is None:
        conc = _need_size(a, "unique")
        res = np.unique(conc, return_index=return_index, return_inverse=return_inverse,
                        return_counts=return_counts, axis=axis, equal_nan=equal_nan)
        if not isinstance(res, tuple):
            return core.asarray(res)
        vals = [core.asarray(res[0])]
        vals += [core.asarray(r.astype(_default_int())) for r in res[1:]]
        return tuple(vals)
    if axis is not None:
        raise NotImplementedError("unique: size= together with axis= is not supported yet")
    size = _static_int(size, "unique: size")
    flat = ravel(a)
    n = flat.shape[0]
    idt = _index_dtype(n + size + 1)
    if n == 0:
        raise ValueError("unique: size= requires a non-empty input")
    sorted_vals, perm = lax.sort((flat, lax.iota(idt, n)), dimension=0, is_stable=True, num_keys=1)
    prev, cur = _slice_axis(sorted_vals, 0, n - 1, 0), _slice_axis(sorted_vals, 1, n, 0)
    differs = lax.ne(cur, prev)
    if equal_nan and dtypes.issubdtype(a.dtype, np.inexact):
        both_nan = lax.and_(lax.ne(cur, cur), lax.ne(prev, prev))
        differs = lax.and_(differs, lax.not_(both_nan))
    first = lax.concatenate([_full((1,), True, np.bool_), differs], 0)
    group = lax.sub(lax.cumsum(_convert(first, idt), 0), _full((), 1, idt))
    target = lax.select(first, group, _full((n,), size, idt))
    fill = _reduce("min", sorted_vals, (0,)) if fill_value is None else _convert(fill_value, a.dtype)
    vals = lax._scatter(_bcast_dims(fill, (size,), ()), target, sorted_vals, 0, "set")
    out = [vals]
    if return_index:
        out.append(_convert(lax._scatter(_full((size,), 0, idt), target, perm, 0, "set"), _default_int()))
    if return_inverse:
        inv = lax._scatter(_full((n,), 0, idt), perm, group, 0, "set")
        out.append(reshape(_convert(inv, _default_int()), a.shape))
    if return_counts:
        ones = _full((n,), 1, idt)
        gt = lax.select(lax.lt(group, _full((), size, idt)), group, _full((n,), size, idt))
        out.append(_convert(lax._scatter(_full((size,), 0, idt), gt, ones, 0, "add"), _default_int()))
    return out[0] if len(out) == 1 else tuple(out)


# ----------------------------------------------------------------------------
# Sorting and searching.

def sort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False):
    a = _asarray(a)
    if order is not None:
        raise ValueError("sort: order= is not supported (kiln arrays have no fields)")
    if axis is None:
        a, axis = ravel(a), 0
    if a.ndim == 0:
        raise np.exceptions.AxisError(axis, 0, "sort")
    ax = _axis(axis, a.ndim, "sort")
    res = lax.sort(a, dimension=ax, is_stable=True)
    return lax.rev(res, (ax,)) if descending else res


def argsort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False, dtype=None):
    a = _asarray(a)
    if order is not None:
        raise ValueError("argsort: order= is not supported (kiln arrays have no fields)")
    if axis is None:
        a, axis = ravel(a), 0
    if a.ndim == 0:
        raise np.exceptions.AxisError(axis, 0, "argsort")
    ax = _axis(axis, a.ndim, "argsort")
    idt = _default_int()
    n = a.shape[ax]
    if descending:
        r = argsort(lax.rev(a, (ax,)), ax)
        return lax.sub(_full((), n - 1, idt), lax.rev(r, (ax,)))
    iota = lax.broadcasted_iota(idt, a.shape, ax)
    return lax.sort((a, iota), dimension=ax, is_stable=True, num_keys=1)[1]


def lexsort(keys, axis=-1):
    if isinstance(keys, (core.Array, np.ndarray)):
        k = _asarray(keys)
        keys = [_index0(k, i) for i in range(k.shape[0])]
    keys = broadcast_arrays(*keys)
    if not keys:
        raise TypeError("lexsort: need at least one key")
    if keys[0].ndim == 0:
        raise TypeError("lexsort: keys must be at least 1-d")
    ax = _axis(axis, keys[0].ndim, "lexsort")
    iota = lax.broadcasted_iota(_default_int(), keys[0].shape, ax)
    return lax.sort(tuple(reversed(keys)) + (iota,), dimension=ax, is_stable=True,
                    num_keys=len(keys))[-1]


def _nan_lt(x, y, inexact):
    """x < y in the order sort uses (NaN after everything; complex numbers by real part, then
    imaginary part, as JAX's sort and searchsorted)."""
    if x.dtype.kind == "c":
        xr, yr = lax.real(x), lax.real(y)
        same_re = lax.or_(lax.eq(xr, yr), lax.and_(lax.ne(xr, xr), lax.ne(yr, yr)))
        return lax.or_(_nan_lt(xr, yr, True), lax.and_(same_re, _nan_lt(lax.imag(x), lax.imag(y), True)))
    lt = lax.lt(x, y)
    if not inexact:
        return lt
    return lax.or_(lt, lax.and_(lax.ne(y, y), lax.eq(x, x)))


def searchsorted(a, v, side="left", sorter=None, *, method="scan"):
    a, v = _promote("searchsorted", a, v)
    if a.ndim != 1:
        raise ValueError(f"searchsorted: a must be 1-d, got shape {a.shape}")
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    if sorter is not None:
        a = take(a, sorter, mode="clip")
    n = a.shape[0]
    shape = v.shape + (n,)
    A = _bcast_dims(a, shape, (v.ndim,))
    V = _bcast_dims(v, shape, range(v.ndim))
    inexact = dtypes.issubdtype(a.dtype, np.inexact)
    # left: count of a[i] < v; right: count of a[i] <= v, i.e. not (v < a[i]).
    before = _nan_lt(A, V, inexact) if side == "left" else lax.not_(_nan_lt(V, A, inexact))
    # int32 as JAX (also under x64), int64 only when a's length needs it
    return _reduce("sum", _convert(before, _index_dtype(n + 1)), (v.ndim,))


# ----------------------------------------------------------------------------
# Small constructive helpers.

def copy(a, order=None):
    a = _asarray(a)
    from kiln._src.array import _alias
    return _alias(a)


def append(arr, values, axis=None):
    if axis is None:
        return concatenate([ravel(arr), ravel(values)], 0)
    return concatenate([arr, values], axis)


def _static_positions(obj, n, opname):
    if isinstance(obj, slice):
        return np.arange(n)[obj], False
    if type(obj) in (list, tuple):  # as JAX's check_arraylike
        util.raise_sequence_arg(opname, obj, 1)
    o = np.asarray(core.concrete_or_error(obj, f"{opname}: obj")
                   if isinstance(obj, core.Array) else obj)
    if o.dtype == np.bool_:
        raise TypeError(f"{opname}: boolean obj is not supported; pass integer positions")
    if o.size == 0:
        o = o.astype(np.int64)
    if not np.issubdtype(o.dtype, np.integer):
        raise TypeError(f"{opname}: obj must be integers or a slice, got dtype {o.dtype}")
    return o, o.ndim == 0


def insert(arr, obj, values, axis=None):
    a = _asarray(arr)
    if axis is None:
        a, axis = ravel(a), 0
    ax = _axis(axis, a.ndim, "insert")
    n = a.shape[ax]
    pos, scalar = _static_positions(obj, n, "insert")
    pos = pos.reshape(-1).astype(np.int64)
    if np.any((pos < -n) | (pos > n)):
        raise IndexError(f"insert: index {pos.tolist()} is out of bounds for axis {ax} with size {n}")
    pos = np.where(pos < 0, pos + n, pos)
    v = _convert(values, a.dtype)
    v = lax.reshape(v, (1,) * (a.ndim - v.ndim) + v.shape) if v.ndim < a.ndim else v
    if scalar:
        v = moveaxis(v, 0, ax)
    elif pos.size != 1:
        vshape = list(a.shape)
        vshape[ax] = pos.size
        v = broadcast_to(v, tuple(vshape))
    numnew = v.shape[ax]
    vshape = list(a.shape)
    vshape[ax] = numnew
    v = broadcast_to(v, tuple(vshape))
    if pos.size == 1:
        new_pos = pos[0] + np.arange(numnew)
    else:
        order_ = np.argsort(pos, kind="stable")
        new_pos = np.empty(numnew, np.int64)
        new_pos[order_] = pos[order_] + np.arange(numnew)
    src = np.empty(n + numnew, np.int64)
    is_new = np.zeros(n + numnew, bool)
    is_new[new_pos] = True
    src[new_pos] = n + np.arange(numnew)
    src[~is_new] = np.arange(n)
    return _take_static(lax.concatenate([a, v], ax), src, ax)


def delete(arr, obj, axis=None, *, assume_unique_indices=False):
    a = _asarray(arr)
    if axis is None:
        a, axis = ravel(a), 0
    ax = _axis(axis, a.ndim, "delete")
    n = a.shape[ax]
    pos, _ = _static_positions(obj, n, "delete")
    pos = pos.reshape(-1)
    if np.any((pos < -n) | (pos >= n)):
        raise IndexError(f"delete: index {pos.tolist()} is out of bounds for axis {ax} with size {n}")
    keep = np.ones(n, bool)
    keep[pos % n if n else pos] = False
    return _take_static(a, np.nonzero(keep)[0], ax)


def resize(a, new_shape):
    a = _asarray(a)
    shape = _static_ints(new_shape, "resize: new_shape")
    if any(d < 0 for d in shape):
        raise ValueError(f"resize: all elements of new_shape must be non-negative, got {shape}")
    total = int(np.prod(shape, dtype=np.int64))
    flat = ravel(a)
    if flat.shape[0] == 0:
        return _full(shape, 0, a.dtype)
    reps = -(-total // flat.shape[0])
    flat = _slice_axis(tile(flat, reps), 0, total, 0)
    return lax.reshape(flat, shape)


def select(condlist, choicelist, default=0):
    condlist, choicelist = list(condlist), list(choicelist)
    if len(condlist) != len(choicelist):
        raise ValueError(f"select: condlist and choicelist must have the same length, got "
                         f"{len(condlist)} and {len(choicelist)}")
    if not condlist:
        raise ValueError("select: condlist must not be empty")
    conds = [_asarray(c) for c in condlist]
    for i, c in enumerate(conds):
        if c.dtype != np.bool_:
            raise TypeError(f"select: condlist entry {i} has dtype {c.dtype}; it must be boolean")
    *choices, dflt = _promote("select", *choicelist, default)
    shape = _broadcast_shapes("select", *(x.shape for x in conds + choices + [dflt]))
    out = broadcast_to(dflt, shape)
    for c, v in zip(reversed(conds), reversed(choices)):
        out = lax.select(broadcast_to(c, shape), broadcast_to(v, shape), out)
    return out
