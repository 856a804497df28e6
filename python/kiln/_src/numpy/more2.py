"""kiln.numpy's extra indexing, selection and index-building functions with JAX's semantics (bincount,
ravel_multi_index, fill_diagonal, partition, piecewise, put, r_/c_/mgrid...), and
the names kept for NumPy compatibility (printing, file input, dtype names, vectorize and ufunc objects).
Built on kiln.lax and the other kiln._src.numpy modules; re-exported through more.py.
"""

import builtins
import functools
import math
import operator
import re

import numpy as np

from kiln import lax
from kiln._src import core, dtypes
from kiln._src.numpy import creation as _c
from kiln._src.numpy import linalg as _la
from kiln._src.numpy import reductions as _r
from kiln._src.numpy import shape_ops as _s
from kiln._src.numpy import ufuncs as _u
from kiln._src.numpy import util

__all__ = [
    "bincount", "ravel_multi_index", "unravel_index", "ix_", "trim_zeros", "fill_diagonal", "diag_indices",
    "diag_indices_from", "tril_indices", "triu_indices", "tril_indices_from", "triu_indices_from",
    "mask_indices", "apply_along_axis", "apply_over_axes", "block", "partition", "argpartition", "piecewise",
    "extract", "compress", "choose", "place", "put", "put_along_axis", "rollaxis", "unstack", "packbits",
    "unpackbits", "matvec", "vecmat", "astype", "broadcast_shapes", "fromfunction",
    "c_", "r_", "s_", "index_exp", "mgrid", "ogrid",
    "vectorize", "ufunc", "frompyfunc", "einsum_path", "can_cast", "isdtype", "iterable",
    "array_repr", "array_str", "get_printoptions", "set_printoptions", "printoptions",
    "load", "save", "savez", "frombuffer", "fromfile", "fromiter", "fromstring", "from_dlpack",
    "ComplexWarning", "double", "single", "character", "flexible", "object_",
    "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
    "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn",
    "int1", "int2", "int4", "uint1", "uint2", "uint4",
]


def _default_int():
    return np.dtype(dtypes.default_int_dtype())


def _tile_to_size(x, size):
    """1-D x repeated (and cut) to exactly `size` elements."""
    reps = -(-size // x.shape[0]) if x.shape[0] else 0
    return _s.tile(x, reps)[:size] if reps > 1 else x[:size]


def _static_int(x, what):
    return util.concrete_int(x, what)


# ---------------------------------------------------------------------------------------------------------
# Counting and flat indices

def bincount(x, weights=None, minlength=0, *, length=None):
    """How often each value 0..length-1 occurs in the non-negative integers x (or the sum of their
    weights). length defaults to max(minlength, max(x) + 1), which needs x's values: pass length under
    jit. Negative values count as 0 and values from length up are dropped, as JAX."""
    x = util.asarray_arg("bincount", x)
    if util.is_bool_dtype(x.dtype):
        x = x.astype(np.int32)
    if not util.is_int_dtype(x.dtype):
        raise TypeError(f"x argument to bincount must have an integer type; got {x.dtype}")
    if x.ndim != 1:
        raise ValueError("only 1-dimensional input supported.")
    minlength = _static_int(minlength, "bincount: minlength")
    if length is None:
        values = np.asarray(core.concrete_or_error(x, "The error occurred because of argument 'x' of "
                                                      "jnp.bincount. To avoid this error, pass a static `length` "
                                                      "argument."))
        length = builtins.max(minlength, int(builtins.max(0, values.max())) + 1 if values.size else 0)
    else:
        length = _static_int(length, "bincount: length")
    if weights is None:
        w = lax.full(x.shape, 1, _default_int())
    else:
        w = util.asarray_arg("bincount", weights)
        if w.shape != x.shape:
            raise ValueError(f"type of weights must match type of x. Got x of shape {x.shape} and weights of "
                             f"shape {w.shape}")
    return _c.zeros(length, w.dtype).at[_u.clip(x, 0)].add(w, mode="drop")


def ravel_multi_index(multi_index, dims, mode="raise", order="C", *, dtype=None):
    """The flat index of each coordinate tuple of multi_index into an array of shape dims; mode 'clip'
    and 'wrap' bring coordinates into range, 'raise' checks them (needs concrete values)."""
    dims = tuple(_static_int(d, "in `dims` argument of ravel_multi_index()") for d in dims)
    if len(multi_index) != len(dims):
        raise ValueError(f"ravel_multi_index: got {len(multi_index)} index arrays for {len(dims)} dims")
    idx = [util.asarray_arg("ravel_multi_index", i) for i in multi_index]
    dtype = np.dtype(dtypes.result_type(int, *idx)) if dtype is None else util.dtype_arg(dtype)
    if not util.is_int_dtype(dtype):
        raise ValueError(f"dtype={dtype} is not an integer type.")
    if math.prod(dims) - 1 > np.iinfo(dtype).max:
        raise ValueError(f"jnp.ravel_multi_index: dtype={dtype} not large enough to hold flattened index for "
                         f"dims={dims}. Use the dtype argument to pass a suitable dtype.")
    for i in idx:
        if not util.is_int_dtype(i.dtype):
            raise TypeError("only int indices permitted")
    if mode == "raise":
        for i, d in zip(idx, dims):
            v = np.asarray(core.concrete_or_error(i, "The error occurred because ravel_multi_index was "
                                                     "jit-compiled with mode='raise'. Use mode='wrap' or "
                                                     "mode='clip' instead."))
            if np.any((v < 0) | (v >= d)):
                raise ValueError("invalid entry in coordinates array")
    elif mode == "clip":
        idx = [_u.clip(i, 0, d - 1) for i, d in zip(idx, dims)]
    elif mode == "wrap":
        idx = [i % d for i, d in zip(idx, dims)]
    elif mode != "ignore":
        raise ValueError(f"invalid mode={mode!r}. Expected 'raise', 'wrap', 'clip', or 'ignore'.")
    if order == "F":
        strides = np.cumprod((1,) + dims[:-1])
    elif order == "C":
        strides = np.cumprod((1,) + dims[1:][::-1])[::-1]
    else:
        raise ValueError(f"invalid order={order!r}. Expected 'C' or 'F'")
    out = lax.full((), 0, dtype)
    for i, s in zip(idx, strides):
        out = out + i.astype(dtype) * int(s)
    return out


def unravel_index(indices, shape):
    """The coordinate arrays of flat indices into an array of `shape`; out-of-range indices clamp to the
    first or last element, as JAX."""
    idx = util.asarray_arg("unravel_index", indices)
    shape = list(shape) if isinstance(shape, (tuple, list)) else [shape]
    if any(np.ndim(s) != 0 for s in shape):
        raise ValueError("unravel_index: shape should be a scalar or 1D sequence.")
    out = [None] * len(shape)
    rest = idx
    for i in builtins.range(len(shape) - 1, -1, -1):
        rest, out[i] = _u.divmod(rest, shape[i])
    high = rest > 0
    low = rest < -1 if not idx.dtype.kind == "u" else _c.zeros((), np.bool_)
    return tuple(_u.where(high, s - 1, _u.where(low, 0, o)) for s, o in zip(shape, out))


def ix_(*args):
    """Open-mesh index arrays from 1-D sequences: the i-th has shape (1, .., n_i, .., 1)."""
    out = []
    for i, a in enumerate(args):
        a = util.asarray_arg("ix_", a)
        if a.ndim != 1:
            raise ValueError(f"Arguments to jax.numpy.ix_ must be 1-dimensional, got shape {a.shape}")
        if util.is_bool_dtype(a.dtype):
            raise NotImplementedError("Boolean arguments to jax.numpy.ix_ are not implemented")
        shape = [1] * len(args)
        shape[i] = a.shape[0]
        out.append(lax.full(shape, 0, _default_int()) if a.shape[0] == 0 else
                   lax.broadcast_in_dim(a, tuple(shape), (i,)))
    return tuple(out)


def trim_zeros(filt, trim="fb", axis=None):
    """filt without its leading ('f') and/or trailing ('b') zeros along each axis of `axis` (all by
    default); needs concrete values (the result's shape depends on them)."""
    filt = util.asarray_arg("trim_zeros", filt)
    values = np.asarray(core.concrete_or_error(filt, "Error arose in the `filt` argument of trim_zeros()"))
    axes = util.canonicalize_axes(axis, filt.ndim, "trim_zeros")
    trim = trim.lower()
    if not axes or ("f" not in trim and "b" not in trim):
        return filt
    index = []
    for ax in builtins.range(filt.ndim):
        if ax not in axes:
            index.append(builtins.slice(None))
            continue
        mask = values.any(axis=tuple(i for i in builtins.range(filt.ndim) if i != ax))
        nz = np.nonzero(mask)[0]
        if nz.size == 0:
            index.append(builtins.slice(0, 0))
            continue
        index.append(builtins.slice(int(nz[0]) if "f" in trim else None, int(nz[-1]) + 1 if "b" in trim else None))
    return filt[tuple(index)]


# ---------------------------------------------------------------------------------------------------------
# Diagonals and triangles

def diag_indices(n, ndim=2):
    """The indices of the main diagonal of an n x ... x n array of ndim dimensions."""
    n = _static_int(n, "'n' argument of jnp.diag_indices()")
    ndim = _static_int(ndim, "'ndim' argument of jnp.diag_indices()")
    if n < 0:
        raise ValueError(f"n argument to diag_indices must be nonnegative, got {n}")
    if ndim < 0:
        raise ValueError(f"ndim argument to diag_indices must be nonnegative, got {ndim}")
    return (lax.iota(_default_int(), n),) * ndim


def diag_indices_from(arr):
    """diag_indices for an array whose dimensions all have one length."""
    arr = util.asarray_arg("diag_indices_from", arr)
    if arr.ndim < 2:
        raise ValueError("input array must be at least 2-d")
    if len(set(arr.shape)) != 1:
        raise ValueError("All dimensions of input must be of equal length")
    return diag_indices(arr.shape[0], arr.ndim)


def fill_diagonal(a, val, wrap=False, *, inplace=True):
    """a with its main diagonal set to val (a scalar, or values used in order and repeated); needs
    inplace=False, as JAX (kiln arrays are immutable)."""
    if inplace:
        raise NotImplementedError("JAX arrays are immutable, must use inplace=False")
    if wrap:
        raise NotImplementedError("wrap=True is not implemented, must use wrap=False")
    a, val = util.asarray_arg("fill_diagonal", a), util.asarray_arg("fill_diagonal", val)
    if a.ndim < 2:
        raise ValueError("array must be at least 2-d")
    if a.ndim > 2 and len(set(a.shape)) != 1:
        raise ValueError("All dimensions of input must be of equal length")
    n = builtins.min(a.shape)
    values = val if val.ndim == 0 else _tile_to_size(_s.ravel(val), n)
    return a.at[diag_indices(n, a.ndim)].set(values)


def _tri_indices(opname, n, k, m, lower):
    n = _static_int(n, f"n argument of jnp.{opname}")
    k = _static_int(k, f"k argument of jnp.{opname}")
    m = n if m is None else _static_int(m, f"m argument of jnp.{opname}")
    i, j = (np.tril_indices if lower else np.triu_indices)(n, k, m)
    return _c.asarray(i.astype(_default_int())), _c.asarray(j.astype(_default_int()))


def tril_indices(n, k=0, m=None):
    """The row and column indices of the lower triangle (on and below diagonal k) of an n x m array."""
    return _tri_indices("tril_indices", n, k, m, True)


def triu_indices(n, k=0, m=None):
    """The row and column indices of the upper triangle (on and above diagonal k) of an n x m array."""
    return _tri_indices("triu_indices", n, k, m, False)


def _shape_2d(opname, arr):
    shape = tuple(arr.shape) if hasattr(arr, "shape") else util.asarray_arg(opname, arr).shape
    if len(shape) != 2:
        raise ValueError("Only 2-D inputs are accepted")
    return shape


def tril_indices_from(arr, k=0):
    """tril_indices for the shape of a 2-D array."""
    n, m = _shape_2d("tril_indices_from", arr)
    return tril_indices(n, k, m)


def triu_indices_from(arr, k=0):
    """triu_indices for the shape of a 2-D array."""
    n, m = _shape_2d("triu_indices_from", arr)
    return triu_indices(n, k, m)


def mask_indices(n, mask_func, k=0, *, size=None):
    """The indices where mask_func(ones((n, n)), k) is nonzero (size= for a static length)."""
    return _s.nonzero(mask_func(_c.ones((n, n)), k), size=size)


# ---------------------------------------------------------------------------------------------------------
# Function application, blocks, selection

def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    """func1d applied to each 1-D slice of arr along axis (by vmap); its output's axes replace axis."""
    from kiln._src.batching import vmap
    arr = util.asarray_arg("apply_along_axis", arr)
    ax = util.canonicalize_axis(axis, arr.ndim, "apply_along_axis")

    def func(v):
        return func1d(v, *args, **kwargs)
    for i in builtins.range(1, arr.ndim - ax):
        func = vmap(func, in_axes=i, out_axes=-1)
    for _ in builtins.range(ax):
        func = vmap(func, in_axes=0, out_axes=0)
    return func(arr)


def apply_over_axes(func, a, axes):
    """func(a, axis) applied for each axis in turn, its result kept at a's rank (a lost axis is re-added)."""
    a = util.asarray_arg("apply_over_axes", a)
    for axis in axes:
        b = func(a, axis)
        if b.ndim == a.ndim:
            a = b
        elif b.ndim == a.ndim - 1:
            a = _s.expand_dims(b, axis)
        else:
            raise ValueError("function is not returning an array of the correct shape")
    return a


def block(arrays):
    """An array assembled from nested lists of blocks (the innermost lists join along the last axis)."""
    def build(x):
        if isinstance(x, tuple):
            raise ValueError(f"jax.numpy.block does not allow tuples, got {x}")
        if not isinstance(x, list):
            return util.asarray_arg("block", x), 1
        if not x:
            raise ValueError("jax.numpy.block does not allow empty list arguments")
        parts, depths = zip(*(build(e) for e in x))
        if any(d != depths[0] for d in depths):
            raise ValueError("Mismatched list depths in jax.numpy.block")
        rank = builtins.max(depths[0], builtins.max(p.ndim for p in parts))
        parts = [lax.reshape(p, (1,) * (rank - p.ndim) + p.shape) for p in parts]
        return _s.concatenate(parts, axis=-depths[0]), depths[0] + 1
    return build(arrays)[0]


def _partition_prep(opname, a, kth, axis):
    a = util.asarray_arg(opname, a)
    if util.is_complex_dtype(a.dtype):
        raise NotImplementedError(f"jnp.{opname} for complex dtype is not implemented.")
    ax = util.canonicalize_axis(axis, a.ndim, opname)
    kth = util.canonicalize_axis(_static_int(kth, f"{opname}: kth"), a.shape[ax], opname)
    return _s.swapaxes(a, ax, -1), ax, kth


def _negated(a):
    """-a in an order-reversing way that is exact for unsigned integers too."""
    return lax.neg(a + 1) if a.dtype.kind == "u" else lax.neg(a)


def partition(a, kth, axis=-1):
    """a rearranged along axis so the element at kth is the one a sort would put there, the smaller ones
    before it and the rest after (here: the kth + 1 smallest ascending, then the others descending)."""
    arr, ax, kth = _partition_prep("partition", a, kth, axis)
    low = lax.top_k(_negated(arr), kth + 1)[0]
    low = lax.neg(low) - 1 if arr.dtype.kind == "u" else lax.neg(low)
    high = lax.top_k(arr, arr.shape[-1] - kth - 1)[0]
    return _s.swapaxes(lax.concatenate([low, high], arr.ndim - 1), -1, ax)


def argpartition(a, kth, axis=-1):
    """The indices that partition(a, kth, axis) takes from a."""
    from kiln._src.batching import vmap
    arr, ax, kth = _partition_prep("argpartition", a, kth, axis)
    low = lax.top_k(_negated(arr), kth + 1)[1]

    def mark(x, i):  # the positions not taken by the low part, by a proxy that has no ties with them
        return x.at[i].set(0.0)
    for _ in builtins.range(arr.ndim - 1):
        mark = vmap(mark)
    proxy = mark(lax.full(arr.shape, 1.0, np.float32), low)
    high = lax.top_k(proxy, arr.shape[-1] - kth - 1)[1]
    return _s.swapaxes(lax.concatenate([low, high], arr.ndim - 1), -1, ax)


def piecewise(x, condlist, funclist, *args, **kw):
    """funclist[i](x) (or the constant funclist[i]) where condlist[i] holds, the later condition winning;
    one extra function gives the value where none holds (0 otherwise). Each function is traced once and
    chosen per element by switch."""
    from kiln._src.batching import vmap
    x = util.asarray_arg("piecewise", x)
    nc, nf = len(condlist), len(funclist)
    if nf == nc + 1:
        funclist = list(funclist[-1:]) + list(funclist[:-1])
    elif nf == nc:
        funclist = [0] + list(funclist)
    else:
        raise ValueError(f"with {nc} condition(s), either {nc} or {nc + 1} functions are expected; got {nf}")
    conds = _c.asarray(condlist, dtype=bool)
    which = _r.argmax(_r.cumsum(_s.concatenate([_c.zeros_like(conds[:1]), conds], 0).astype(np.int32), 0), 0)

    def branch(f):
        if callable(f):
            return lambda v: _c.asarray(f(v, *args, **kw)).astype(x.dtype)
        return lambda v: _c.asarray(f, dtype=x.dtype)
    branches = [branch(f) for f in funclist]
    flat_i, flat_x = _s.ravel(which), _s.ravel(x)
    return vmap(lambda i, v: lax.switch(i, branches, v))(flat_i, flat_x).reshape(x.shape) if flat_x.shape[0] else x


def compress(condition, a, axis=None, *, size=None, fill_value=0, out=None):
    """The slices of a along axis (the flattened a by default) where condition is true; size= gives a
    static length (padded with fill_value), else condition needs concrete values."""
    util.check_no_out("compress", out)
    cond = util.asarray_arg("compress", condition).astype(bool)
    arr = util.asarray_arg("compress", a)
    if cond.ndim != 1:
        raise ValueError("condition must be a 1D array")
    if axis is None:
        arr, axis = _s.ravel(arr), 0
    else:
        axis = util.canonicalize_axis(axis, arr.ndim, "compress")
        arr = _s.moveaxis(arr, axis, 0)
    cond, extra = cond[:arr.shape[0]], cond[arr.shape[0]:]
    arr = arr[:cond.shape[0]]
    if size is None:
        if np.any(np.asarray(core.concrete_or_error(extra, "compress: condition"))):
            raise ValueError("condition contains entries that are out of bounds")
        result = arr[np.asarray(core.concrete_or_error(cond, "compress: condition (pass size= under jit)"))]
    else:
        size = _static_int(size, "compress: size")
        if not 0 <= size <= arr.shape[0]:
            raise ValueError("size must be positive and not greater than the size of the array axis; got "
                             f"size={size} for a.shape[axis]={arr.shape[0]}")
        mask = lax.broadcast_in_dim(cond, arr.shape, (0,))
        arr = _u.where(mask, arr, _c.asarray(fill_value, dtype=arr.dtype))
        result = arr[_s.argsort(cond, stable=True, descending=True)][:size]
    return _s.moveaxis(result, 0, axis)


def extract(condition, arr, *, size=None, fill_value=0):
    """The elements of arr where condition (same size) is true, flattened; size= as in compress."""
    return compress(_s.ravel(condition), _s.ravel(arr), size=size, fill_value=fill_value)


def choose(a, choices, out=None, mode="raise"):
    """choices[a[i]][i] for every index i (a and the choices broadcast); mode 'wrap' and 'clip' bring a into
    range, 'raise' checks it (needs concrete values)."""
    util.check_no_out("choose", out)
    a = util.asarray_arg("choose", a)
    choices = [util.asarray_arg("choose", ch) for ch in choices]
    if not util.is_int_dtype(a.dtype):
        raise ValueError("`a` array must be integer typed")
    n = len(choices)
    if mode == "raise":
        v = np.asarray(core.concrete_or_error(a, "The error occurred because jnp.choose was jit-compiled with "
                                                 "mode='raise'. Use mode='wrap' or mode='clip' instead."))
        if np.any((v < 0) | (v >= n)):
            raise ValueError("invalid entry in choice array")
    elif mode == "wrap":
        a = a % n
    elif mode == "clip":
        a = _u.clip(a, 0, n - 1)
    else:
        raise ValueError(f"mode={mode!r} not understood. Must be 'raise', 'wrap', or 'clip'")
    a, *choices = _s.broadcast_arrays(a, *choices)
    stacked = _s.stack(util.promote_dtypes("choose", *choices))
    return _s.take_along_axis(stacked, a[None], axis=0)[0]


def _no_inplace(opname, inplace):
    if inplace:
        raise ValueError(f"jax.numpy.{opname} cannot modify arrays in-place, because JAX arrays are immutable. "
                         "Pass inplace=False to instead return an updated array.")


def place(arr, mask, vals, *, inplace=True):
    """arr with the positions where mask is true set to vals in order (repeated as needed)."""
    _no_inplace("place", inplace)
    data, m = util.asarray_arg("place", arr), util.asarray_arg("place", mask)
    vals = _s.ravel(util.asarray_arg("place", vals))
    if data.size != m.size:
        raise ValueError("place: arr and mask must be the same size")
    if not vals.size:
        raise ValueError("Cannot place values from an empty array")
    if not data.size:
        return data
    idx = _s.nonzero(_s.ravel(m), size=m.size, fill_value=m.size)[0]
    return _s.ravel(data).at[idx].set(_tile_to_size(vals, idx.shape[0]).astype(data.dtype),
                                      mode="drop").reshape(data.shape)


def put(a, ind, v, mode=None, *, inplace=True):
    """a with its flat positions ind set to v (repeated as needed); mode 'clip' clamps positions into
    range, 'wrap' wraps them, None treats them as unravel_index does."""
    _no_inplace("put", inplace)
    arr, ind = util.asarray_arg("put", a), _s.ravel(util.asarray_arg("put", ind))
    v = _s.ravel(util.asarray_arg("put", v))
    if not arr.size or not ind.size or not v.size:
        return arr
    v = _tile_to_size(v, ind.shape[0]).astype(arr.dtype)
    if mode == "clip":
        ind = _u.clip(ind, 0, arr.size - 1)
    elif mode == "wrap":
        ind = ind % arr.size
    elif mode == "raise":
        raise NotImplementedError("The 'raise' mode to jnp.put is not supported.")
    elif mode is not None:
        raise ValueError(f"mode should be one of 'wrap' or 'clip'; got mode={mode!r}")
    # mode None goes through unravel_index, as JAX: past the end clamps to the last element, negative
    # positions count from the end
    return arr.at[unravel_index(ind, arr.shape)].set(v, mode="drop")


def put_along_axis(arr, indices, values, axis, inplace=True, *, mode=None):
    """arr with arr[..., indices, ...] (indices as in take_along_axis) set to values."""
    _no_inplace("put_along_axis", inplace)
    arr, idx = util.asarray_arg("put_along_axis", arr), util.asarray_arg("put_along_axis", indices)
    values = util.asarray_arg("put_along_axis", values)
    shape = arr.shape
    if axis is None:
        arr, axis = _s.ravel(arr), 0
    if arr.ndim != idx.ndim:
        raise ValueError(f"put_along_axis arguments 'arr' and 'indices' must have same ndim. Got arr.ndim="
                         f"{arr.ndim} and indices.ndim={idx.ndim}.")
    ax = util.canonicalize_axis(axis, arr.ndim, "put_along_axis")
    values = _s.broadcast_to(values, idx.shape).astype(arr.dtype)
    index = tuple(idx if d == ax else lax.broadcasted_iota(np.int32, idx.shape, d)
                  for d in builtins.range(arr.ndim))
    return arr.at[index].set(values, mode=mode).reshape(shape)


def rollaxis(a, axis, start=0):
    """a with axis moved to lie before position start (NumPy's older form of moveaxis)."""
    a = util.asarray_arg("rollaxis", a)
    start = _static_int(start, "'start' argument of jnp.rollaxis()")
    axis = util.canonicalize_axis(axis, a.ndim, "rollaxis")
    if not -a.ndim <= start <= a.ndim:
        raise ValueError(f"start={start} must satisfy {-a.ndim}<=start<={a.ndim}")
    start = start + a.ndim if start < 0 else start
    return _s.moveaxis(a, axis, start - 1 if start > axis else start)


def unstack(x, /, *, axis=0):
    """The slices of x along axis, as a tuple."""
    return lax.unstack(util.asarray_arg("unstack", x), axis)


def packbits(a, axis=None, bitorder="big"):
    """The nonzero-ness of a's elements packed 8 to a uint8 along axis (flattened by default)."""
    a = util.asarray_arg("packbits", a)
    if not (util.is_int_dtype(a.dtype) or util.is_bool_dtype(a.dtype)):
        raise TypeError("Expected an input array of integer or boolean data type")
    if bitorder not in ("little", "big"):
        raise ValueError("'order' must be either 'little' or 'big'")
    bits = (a != 0).astype(np.uint8)
    if axis is None:
        bits, axis = _s.ravel(bits), 0
    bits = _s.swapaxes(bits, axis, -1)
    rem = bits.shape[-1] % 8
    if rem:
        bits = lax.pad(bits, np.uint8(0), [(0, 0, 0)] * (bits.ndim - 1) + [(0, 8 - rem, 0)])
    bits = bits.reshape(bits.shape[:-1] + (bits.shape[-1] // 8, 8))
    shifts = np.arange(8, dtype=np.uint8)
    shifts = _c.asarray(shifts[::-1] if bitorder == "big" else shifts)
    packed = _r.sum(lax.shift_left(bits, lax.broadcast_in_dim(shifts, bits.shape, (bits.ndim - 1,))),
                    axis=-1).astype(np.uint8)
    return _s.swapaxes(packed, axis, -1)


def unpackbits(a, axis=None, count=None, bitorder="big"):
    """The bits of uint8 a as uint8 0/1 values along axis (flattened by default), count of them kept."""
    a = util.asarray_arg("unpackbits", a)
    if a.dtype != np.uint8:
        raise TypeError("Expected an input array of unsigned byte data type")
    if bitorder not in ("little", "big"):
        raise ValueError("'order' must be either 'little' or 'big'")
    bits = (np.uint8(1) << np.arange(8, dtype=np.uint8))
    bits = _c.asarray(bits[::-1] if bitorder == "big" else bits)
    if axis is None:
        a, axis = _s.ravel(a), 0
    a = _s.swapaxes(a, axis, -1)
    out = ((a[..., None] & bits) > 0).astype(np.uint8)
    out = out.reshape(out.shape[:-2] + (-1,))
    if count is not None:
        count = _static_int(count, "unpackbits: count")
        out = _s.pad(out, [(0, 0)] * (out.ndim - 1) + [(0, count - out.shape[-1])]) if count > out.shape[-1] \
            else out[..., :count]
    return _s.swapaxes(out, axis, -1)


def matvec(x1, x2, /):
    """The matrix-vector products x1 (..., m, n) @ x2 (..., n) -> (..., m), batch dims broadcast."""
    x1, x2 = util.asarray_arg("matvec", x1), util.asarray_arg("matvec", x2)
    return _la.matmul(x1, x2[..., None])[..., 0]


def vecmat(x1, x2, /):
    """The vector-matrix products conj(x1) (..., m) @ x2 (..., m, n) -> (..., n), batch dims broadcast."""
    x1, x2 = util.asarray_arg("vecmat", x1), util.asarray_arg("vecmat", x2)
    if util.is_complex_dtype(x1.dtype):
        x1 = _u.conj(x1)
    return _la.matmul(x1[..., None, :], x2)[..., 0, :]


def astype(x, dtype, /, *, copy=False, device=None):
    """x converted to dtype (the default float when None); complex to bool tests for nonzero."""
    x = util.asarray_arg("astype", x)
    dt = np.dtype(dtypes.default_float_dtype()) if dtype is None else util.dtype_arg(dtype)
    if util.is_complex_dtype(x.dtype) and dt == np.bool_:
        return x != 0
    return lax.convert_element_type(x, dt)


def broadcast_shapes(*shapes):
    """The shape the given shapes broadcast to (ValueError if they do not)."""
    return util.broadcast_shapes(*(tuple(s) if isinstance(s, (tuple, list)) else (s,) for s in shapes),
                                 opname="broadcast_shapes")


def fromfunction(function, shape, *, dtype=float, **kwargs):
    """function applied to the index grids of shape (one coordinate array per dimension, by vmap)."""
    from kiln._src.batching import vmap
    shape = util.canonicalize_shape(shape, "fromfunction")
    for i in builtins.range(len(shape)):
        in_axes = [0 if i == j else None for j in builtins.range(len(shape))]
        function = vmap(function, in_axes=tuple(in_axes[::-1]))
    return function(*(_c.arange(s, dtype=dtype) for s in shape), **kwargs)


# ---------------------------------------------------------------------------------------------------------
# Index tricks: r_, c_, mgrid, ogrid (s_ and index_exp are NumPy's)

s_ = np.s_
index_exp = np.index_exp


def _grid_axis(s, opname):
    """The 1-D points of a slice as mgrid reads it (a complex step: that many points, end included)."""
    start = 0 if s.start is None else s.start
    step = 1 if s.step is None else s.step
    if isinstance(step, complex) or (hasattr(step, "imag") and np.iscomplexobj(step)):
        return _c.linspace(start, s.stop, int(abs(step)), endpoint=True)
    return _c.arange(start, s.stop, step)


class _Grid:
    def __init__(self, sparse, name):
        self.sparse, self.name = sparse, name

    def __getitem__(self, key):
        if isinstance(key, builtins.slice):
            return _grid_axis(key, self.name)
        axes = [_grid_axis(k, self.name) for k in key]
        if not axes:
            return _c.zeros((0,)) if not self.sparse else []
        dt = dtypes.result_type(*axes)
        axes = [a.astype(dt) for a in axes]
        grids = _c.meshgrid(*axes, indexing="ij", sparse=self.sparse)
        return list(grids) if self.sparse else _s.stack(grids, 0)


mgrid = _Grid(False, "mgrid")
ogrid = _Grid(True, "ogrid")


class _Concatenator:
    """r_/c_: slices become ranges (a complex step: linspace), scalars and arrays are joined along axis;
    a leading string 'r', 'c' or 'axis[,ndmin[,trans1d]]' sets the joining."""

    def __init__(self, axis, ndmin, trans1d, name):
        self.axis, self.ndmin, self.trans1d, self.name = axis, ndmin, trans1d, name

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        axis, ndmin, trans1d, matrix = self.axis, self.ndmin, self.trans1d, None
        parts = []
        for i, item in enumerate(key):
            if isinstance(item, str):
                if i != 0:
                    raise ValueError(f"{self.name}: a string directive must come first, got {item!r}")
                if item in ("r", "c"):
                    matrix = item
                    continue
                vals = [int(v) for v in item.split(",")]
                axis = vals[0]
                ndmin = vals[1] if len(vals) > 1 else ndmin
                trans1d = vals[2] if len(vals) > 2 else trans1d
                continue
            if isinstance(item, builtins.slice):
                arr = _grid_axis(item, self.name)
            else:  # (lists are items here, as in JAX's r_/c_)
                arr = util.asarray_arg(self.name, core.asarray(item) if type(item) in (list, tuple) else item)
            if arr.ndim < ndmin:
                k2 = ndmin - arr.ndim  # NumPy's rule: the new leading 1s move to trans1d
                arr = arr.reshape((1,) * k2 + arr.shape)
                if trans1d != -1:
                    k1 = trans1d + k2 + 1 if trans1d < 0 else trans1d
                    order = list(builtins.range(ndmin))
                    arr = _s.transpose(arr, order[:k1] + order[k2:] + order[k1:k2])
            parts.append(arr)
        if not parts:
            return _c.zeros((0,))
        out = _s.concatenate(util.promote_dtypes(self.name, *parts), axis=axis)
        if matrix is not None:
            out = _s.atleast_2d(out)
            if matrix == "c":
                out = out.T
        return out

    def __len__(self):
        return 0


r_ = _Concatenator(0, 1, -1, "r_")
c_ = _Concatenator(-1, 2, 0, "c_")


# ---------------------------------------------------------------------------------------------------------
# vectorize, ufunc, frompyfunc

_DIM = r"\w+"
_CORE = rf"\((?:{_DIM}(?:,{_DIM})*)?\)"
_SIGNATURE = rf"^{_CORE}(?:,{_CORE})*->{_CORE}(?:,{_CORE})*$"


def _parse_signature(signature):
    if not re.match(_SIGNATURE, signature.replace(" ", "")):
        raise ValueError(f"not a valid gufunc signature: {signature}")
    ins, outs = ([tuple(re.findall(_DIM, arg)) for arg in re.findall(_CORE, side)]
                 for side in signature.replace(" ", "").split("->"))
    return ins, outs


def vectorize(pyfunc, *, excluded=frozenset(), signature=None):
    """pyfunc mapped over the leading (broadcast) dimensions of its array arguments by vmap; signature
    ('(m,n),(n)->(m)') names the core dimensions each call sees; excluded: positions or names of
    arguments passed through unmapped."""
    from kiln._src.batching import vmap
    if any(not isinstance(e, (str, int)) for e in excluded):
        raise TypeError(f"jax.numpy.vectorize can only exclude integer or string arguments, but "
                        f"excluded={excluded!r}")
    if any(isinstance(e, int) and e < 0 for e in excluded):
        raise ValueError(f"excluded={excluded!r} contains negative numbers")

    @functools.wraps(pyfunc)
    def wrapped(*args, **kwargs):
        fixed = {i: a for i, a in enumerate(args) if i in excluded or a is None}
        fixed_kw = {k: v for k, v in kwargs.items() if k in excluded}
        dyn_kw = {k: v for k, v in kwargs.items() if k not in excluded}
        dyn = [util.asarray_arg(getattr(pyfunc, "__name__", "vectorize"), a)
               for i, a in enumerate(args) if i not in fixed]
        kw_names = list(dyn_kw)
        dyn += [util.asarray_arg("vectorize", v) for v in dyn_kw.values()]
        if signature is not None:
            core_in, core_out = _parse_signature(signature)
            if len(core_in) != len(dyn):
                raise TypeError(f"wrong number of positional arguments: expected {len(core_in)}, got {len(dyn)}")
        else:
            core_in, core_out = [()] * len(dyn), None
        sizes = {}
        for a, dims in zip(dyn, core_in):
            if a.ndim < len(dims):
                raise ValueError(f"input with shape {a.shape} does not have enough dimensions for all core "
                                 f"dimensions {dims}")
            for name, n in zip(dims, a.shape[a.ndim - len(dims):]):
                if sizes.setdefault(name, n) != n:
                    raise ValueError(f"inconsistent size for core dimension {name!r}: {n} vs {sizes[name]}")
        loops = [a.shape[:a.ndim - len(dims)] for a, dims in zip(dyn, core_in)]
        shape = util.broadcast_shapes(*loops, opname="vectorize")

        def call(*xs):
            full = list(xs[:len(xs) - len(kw_names)])
            for i in sorted(fixed):
                full.insert(i, fixed[i])
            out = pyfunc(*full, **dict(zip(kw_names, xs[len(xs) - len(kw_names):])), **fixed_kw)
            if core_out is not None:
                outs = out if isinstance(out, tuple) else (out,)
                if len(outs) != len(core_out):
                    raise TypeError(f"wrong number of output arguments: expected {len(core_out)}, got {len(outs)}")
                for o, dims in zip(outs, core_out):
                    if np.ndim(o) != len(dims):
                        raise ValueError(f"output shape {np.shape(o)} does not match core dimensions {dims}")
            return out

        squeezed, rev_shapes = [], []
        for a, loop in zip(dyn, loops):
            filled = (1,) * (len(shape) - len(loop)) + loop
            rev_shapes.append(filled[::-1])
            squeezed.append(lax.squeeze(a, tuple(i for i, n in enumerate(loop) if n == 1)))
        fn, expand = call, []
        for neg, dim_sizes in enumerate(zip(*rev_shapes)):
            in_axes = tuple(None if n == 1 else 0 for n in dim_sizes)
            if all(ax is None for ax in in_axes):
                expand.append(len(shape) - 1 - neg)
            else:
                fn = vmap(fn, in_axes)
        result = fn(*squeezed)
        if not expand:
            return result
        if isinstance(result, tuple):
            return tuple(_s.expand_dims(r, expand) for r in result)
        return _s.expand_dims(result, expand)

    return wrapped


class ufunc:
    """A NumPy-style universal function from an elementwise Python function of nin arrays: calls broadcast
    (by vectorize), and binary ones have reduce, accumulate, reduceat, outer and at (by loops over the
    axis, as JAX)."""

    def __init__(self, func, /, nin, nout, *, name=None, nargs=None, identity=None, call=None, reduce=None,
                 accumulate=None, at=None, reduceat=None):
        self._func = func
        self.__name__ = name or getattr(func, "__name__", "ufunc")
        self.__doc__ = func.__doc__
        self.nin, self.nout = operator.index(nin), operator.index(nout)
        self.nargs = operator.index(nargs or nin)
        self.identity = identity
        self._custom = {"call": call, "reduce": reduce, "accumulate": accumulate, "at": at, "reduceat": reduceat}

    def __repr__(self):
        return f"<jnp.ufunc '{self.__name__}'>"

    def __hash__(self):
        return hash((self._func, self.__name__, self.identity, self.nin, self.nout, self.nargs))

    def __eq__(self, other):
        return isinstance(other, ufunc) and (self._func, self.__name__, self.identity, self.nin, self.nout,
                                             self.nargs) == (other._func, other.__name__, other.identity,
                                                             other.nin, other.nout, other.nargs)

    def __call__(self, *args, out=None, where=None):
        if out is not None:
            raise NotImplementedError(f"out argument of {self}")
        if where is not None:
            raise NotImplementedError(f"where argument of {self}")
        return (self._custom["call"] or vectorize(self._func))(*args)

    def _binary(self, what):
        if self.nin != 2:
            raise ValueError(f"{what} only supported for binary ufuncs")
        if self.nout != 1:
            raise ValueError(f"{what} only supported for functions returning a single value")

    def _result_dtype(self, a):
        from kiln._src.api import eval_shape
        one = lax.full((), 1, a.dtype)
        return eval_shape(self._func, one, one).dtype

    def reduce(self, a, axis=0, dtype=None, out=None, keepdims=False, initial=None, where=None):
        self._binary("reduce")
        util.check_no_out(f"{self.__name__}.reduce", out)
        if self._custom["reduce"] is not None:
            return self._custom["reduce"](a, axis=axis, dtype=dtype, keepdims=keepdims, initial=initial,
                                          where=where)
        a = util.asarray_arg(f"{self.__name__}.reduce", a)
        initial = self.identity if initial is None else initial
        if where is not None:
            if initial is None:
                raise ValueError(f"reduction operation {self.__name__!r} does not have an identity, so to use a "
                                 "where mask one has to specify 'initial'.")
            where = _s.broadcast_to(util.asarray_arg(f"{self.__name__}.reduce", where), a.shape)
            if where.dtype != np.bool_:
                raise ValueError(f"where argument must have dtype=bool; got dtype={where.dtype}")
        dt = self._result_dtype(a) if dtype is None else util.dtype_arg(dtype)
        if isinstance(axis, tuple):
            raise NotImplementedError("tuple of axes")
        if axis is None:
            final = (1,) * a.ndim if keepdims else ()
            a, where, axis = _s.ravel(a), None if where is None else _s.ravel(where), 0
        else:
            axis = util.canonicalize_axis(axis, a.ndim, f"{self.__name__}.reduce")
            final = a.shape[:axis] + ((1,) if keepdims else ()) + a.shape[axis + 1:]
        a = _s.moveaxis(a, axis, 0)
        where = None if where is None else _s.moveaxis(where, axis, 0)
        if a.shape[0] == 0:
            if initial is None:
                raise ValueError(f"zero-size array to reduction operation {self.__name__} which has no identity")
            return lax.full(final, initial, dt)

        def step(i, acc):
            new = self(acc, a[i].astype(dt))
            return new if where is None else _u.where(where[i], new, acc)
        start = a[0] if initial is None else lax.full(a.shape[1:], initial, dt)
        out = lax.fori_loop(1 if initial is None else 0, a.shape[0], step, _s.broadcast_to(start.astype(dt),
                                                                                            a.shape[1:]))
        return out.reshape(final)

    def accumulate(self, a, axis=0, dtype=None, out=None):
        self._binary("accumulate")
        util.check_no_out(f"{self.__name__}.accumulate", out)
        if self._custom["accumulate"] is not None:
            return self._custom["accumulate"](a, axis=axis, dtype=dtype)
        a = util.asarray_arg(f"{self.__name__}.accumulate", a)
        dt = self._result_dtype(a) if dtype is None else util.dtype_arg(dtype)
        if axis is None or isinstance(axis, tuple):
            raise ValueError("accumulate does not allow multiple axes")
        axis = util.canonicalize_axis(axis, a.ndim, f"{self.__name__}.accumulate")
        if a.size == 0:
            return lax.full(a.shape, 0, dt)
        a = _s.moveaxis(a, axis, 0).astype(dt)

        def step(acc, x):
            y = self(acc, x)
            return y, y
        _, rest = lax.scan(step, a[0], a[1:])
        return _s.moveaxis(_s.concatenate([a[:1], rest.astype(dt)]), 0, axis)

    def at(self, a, indices, b=None, /, *, inplace=True):
        if inplace:
            raise NotImplementedError("jax.numpy.ufunc.at cannot modify arrays in-place, because JAX arrays are "
                                      "immutable. Pass inplace=False to instead return an updated array.")
        if self._custom["at"] is not None:
            return self._custom["at"](a, indices) if b is None else self._custom["at"](a, indices, b)
        a = util.asarray_arg(f"{self.__name__}.at", a)
        extra = () if b is None else (util.asarray_arg(f"{self.__name__}.at", b),)
        from kiln._src.api import eval_shape
        dt = eval_shape(self._func, lax.full((), 1, a.dtype), *(lax.full((), 1, e.dtype) for e in extra)).dtype
        a = a.astype(dt)
        extra = tuple(e.astype(dt) for e in extra)
        idx = indices if isinstance(indices, tuple) else (indices,)
        arrays = [util.asarray_arg(f"{self.__name__}.at", i) for i in idx if not isinstance(i, builtins.slice)]
        shape = util.broadcast_shapes(*(i.shape for i in arrays), opname=f"{self.__name__}.at") if arrays else ()
        if not shape:
            return a.at[idx].set(self(a.at[idx].get(), *extra))
        n = math.prod(shape)
        idx = [i if isinstance(i, builtins.slice) else _s.ravel(_s.broadcast_to(util.asarray_arg("at", i), shape))
               for i in idx]
        if extra:
            e = extra[0]
            extra = (_s.broadcast_to(e, shape + e.shape[len(shape):]).reshape((n,) + e.shape[len(shape):]),)

        def step(k, acc):
            where = tuple(i if isinstance(i, builtins.slice) else i[k] for i in idx)
            return acc.at[where].set(self(acc.at[where].get(), *(e[k] for e in extra)))
        return lax.fori_loop(0, n, step, a)

    def reduceat(self, a, indices, axis=0, dtype=None, out=None):
        self._binary("reduceat")
        util.check_no_out(f"{self.__name__}.reduceat", out)
        if self._custom["reduceat"] is not None:
            return self._custom["reduceat"](a, indices, axis=axis, dtype=dtype)
        a, indices = util.asarray_arg("reduceat", a), util.asarray_arg("reduceat", indices)
        if a.ndim == 0:
            raise ValueError(f"reduceat: a must have 1 or more dimension, got a.shape={a.shape}")
        if indices.ndim != 1:
            raise ValueError(f"reduceat: indices must be one-dimensional, got indices.shape={indices.shape}")
        if axis is None or isinstance(axis, (tuple, list)):
            raise ValueError("reduceat requires a single integer axis.")
        axis = util.canonicalize_axis(axis, a.ndim, "reduceat")
        out = _s.take(a, indices, axis=axis)
        ends = _s.concatenate([indices, _c.asarray([a.shape[axis]], dtype=indices.dtype)])
        bshape = tuple(-1 if d == axis else 1 for d in builtins.range(out.ndim))
        lo, hi = ends[:-1].reshape(bshape), ends[1:].reshape(bshape)

        def step(i, acc):
            piece = _s.take(a, lax.reshape(_c.asarray(i), (1,)), axis=axis)
            return _u.where((i > lo) & (i < hi), self(acc, piece), acc)
        return lax.fori_loop(0, a.shape[axis], step, out)

    def outer(self, A, B, /):
        from kiln._src.batching import vmap
        self._binary("outer")
        A, B = util.asarray_arg("outer", A), util.asarray_arg("outer", B)
        res = vmap(vmap(self, (None, 0)), (0, None))(_s.ravel(A), _s.ravel(B))
        return res.reshape(A.shape + B.shape)


def frompyfunc(func, /, nin, nout, *, identity=None):
    """A ufunc of the elementwise Python function func (which must be traceable by kiln)."""
    return ufunc(func, nin, nout, identity=identity)


# ---------------------------------------------------------------------------------------------------------
# NumPy-compatible helpers on shapes, dtypes, printing and files

def einsum_path(subscripts, *operands, optimize="auto"):
    """NumPy's contraction order for an einsum (operands may be arrays or shapes' stand-ins)."""
    stand_ins = [np.broadcast_to(np.zeros((), np.float32), np.shape(o)) for o in operands]
    return np.einsum_path(subscripts, *stand_ins, optimize="greedy" if optimize == "auto" else optimize)


def _dtype_of(x):
    if isinstance(x, (core.Array, np.ndarray, np.generic)):
        return np.dtype(x.dtype)
    try:
        return np.dtype(x)
    except TypeError:
        return np.dtype(x.dtype)  # kiln's scalar types


def can_cast(from_, to, casting="safe"):
    """Whether NumPy's casting rule allows from_ (a dtype or array) to become `to`."""
    return np.can_cast(_dtype_of(from_), _dtype_of(to), casting)


_KINDS = {"bool": lambda d: d.kind == "b", "signed integer": lambda d: d.kind == "i",
          "unsigned integer": lambda d: d.kind == "u", "integral": lambda d: d.kind in "iu",
          "real floating": lambda d: util.is_float_dtype(d), "complex floating": lambda d: d.kind == "c",
          "numeric": lambda d: d.kind in "iufc" or util.is_float_dtype(d)}


def isdtype(dtype, kind):
    """The array API's dtype test: kind a dtype, a kind name ('bool', 'integral', 'real floating', ...)
    or a tuple of them."""
    dt = _dtype_of(dtype)
    for k in (kind if isinstance(kind, tuple) else (kind,)):
        if isinstance(k, str):
            if k not in _KINDS:
                raise ValueError(f"name {k!r} is not a valid dtype kind")
            if _KINDS[k](dt):
                return True
        elif _dtype_of(k) == dt:
            return True
    return False


def iterable(y):
    """Whether iter(y) works."""
    return np.iterable(y)


def array_repr(arr, max_line_width=None, precision=None, suppress_small=None):
    """NumPy's repr of the array's values."""
    return np.array_repr(np.asarray(arr), max_line_width, precision, suppress_small)


def array_str(a, max_line_width=None, precision=None, suppress_small=None):
    """NumPy's str of the array's values."""
    return np.array_str(np.asarray(a), max_line_width, precision, suppress_small)


get_printoptions = np.get_printoptions
set_printoptions = np.set_printoptions
printoptions = np.printoptions
save = np.save
savez = np.savez


def load(file, *args, **kwargs):
    """np.load, arrays converted to kiln arrays (archives of several arrays are returned as NumPy's)."""
    out = np.load(file, *args, **kwargs)
    return _c.asarray(out) if isinstance(out, np.ndarray) and out.dtype != object else out


def frombuffer(buffer, dtype=float, count=-1, offset=0):
    """A 1-D array of the values in a bytes-like buffer."""
    return _c.asarray(np.frombuffer(buffer, dtype=dtype, count=count, offset=offset))


def fromstring(string, dtype=float, count=-1, *, sep):
    """A 1-D array of the numbers in a string separated by sep."""
    return _c.asarray(np.fromstring(string, dtype=dtype, count=count, sep=sep))


def fromfile(*args, **kwargs):
    raise NotImplementedError("jnp.fromfile() is not implemented because it may be non-pure and thus unsafe "
                              "for use with JIT and other JAX transformations. Consider using "
                              "jnp.asarray(np.fromfile(...)) instead.")


def fromiter(*args, **kwargs):
    raise NotImplementedError("jnp.fromiter() is not implemented because it may be non-pure and thus unsafe "
                              "for use with JIT and other JAX transformations. Consider using "
                              "jnp.asarray(np.fromiter(...)) instead.")


def from_dlpack(x, /, *, device=None, copy=None):
    """An array from an object with __dlpack__ (as kiln.dlpack.from_dlpack)."""
    from kiln import dlpack
    return dlpack.from_dlpack(x)


ComplexWarning = np.exceptions.ComplexWarning
double = dtypes.float64
single = dtypes.float32
character = np.character
flexible = np.flexible
object_ = np.object_


class _UnsupportedScalarMeta(type):
    def __call__(cls, *args, **kwargs):
        raise NotImplementedError(f"kiln.numpy.{cls.__name__}: kiln has no {cls.__name__} arrays (its dtypes are "
                                  "bool, (u)int8..64, float16/32/64, bfloat16 and complex64/128)")

    def __repr__(cls):
        return f"<class 'kiln.numpy.{cls.__name__}'>"


def _unsupported_scalar(name):
    import ml_dtypes
    return _UnsupportedScalarMeta(name, (object,), {"dtype": np.dtype(getattr(ml_dtypes, name)),
                                                    "__module__": "kiln.numpy"})


float8_e3m4 = _unsupported_scalar("float8_e3m4")
float8_e4m3 = _unsupported_scalar("float8_e4m3")
float8_e4m3b11fnuz = _unsupported_scalar("float8_e4m3b11fnuz")
float8_e4m3fn = _unsupported_scalar("float8_e4m3fn")
float8_e4m3fnuz = _unsupported_scalar("float8_e4m3fnuz")
float8_e5m2 = _unsupported_scalar("float8_e5m2")
float8_e5m2fnuz = _unsupported_scalar("float8_e5m2fnuz")
float8_e8m0fnu = _unsupported_scalar("float8_e8m0fnu")
float4_e2m1fn = _unsupported_scalar("float4_e2m1fn")
float6_e2m3fn = _unsupported_scalar("float6_e2m3fn")
float6_e3m2fn = _unsupported_scalar("float6_e3m2fn")
int1 = _unsupported_scalar("int1")
int2 = _unsupported_scalar("int2")
int4 = _unsupported_scalar("int4")
uint1 = _unsupported_scalar("uint1")
uint2 = _unsupported_scalar("uint2")
uint4 = _unsupported_scalar("uint4")
