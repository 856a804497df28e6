"""kiln.numpy reductions (sum, mean, var, max, argmax, quantile...), cumulative ops and differences,
with JAX's dtype rules, built on kiln.lax only.
"""

import builtins

import numpy as np

from kiln import lax
from kiln._src import dtypes
from kiln._src.numpy import util
from kiln._src.numpy.util import (full_like_scalar as _c, is_bool_dtype, is_inexact_dtype,
                                  is_complex_dtype)
from kiln._src.numpy import ufuncs

__all__ = [
    "sum", "prod", "product", "mean", "var", "std", "max", "min", "amax", "amin", "argmax", "argmin",
    "all", "any", "alltrue", "sometrue", "ptp", "median", "quantile", "percentile",
    "nanmedian", "nanquantile", "nanpercentile",
    "nansum", "nanprod", "nanmean", "nanmax", "nanmin", "nanvar", "nanstd", "nanargmax", "nanargmin",
    "count_nonzero", "average", "cumsum", "cumprod", "cumulative_sum", "cumulative_prod",
    "nancumsum", "nancumprod", "diff", "ediff1d",
]


# ---------------------------------------------------------------------------------------------------------
# Shared pieces

def _default_int():
    return np.dtype(dtypes.default_int_dtype())


def _default_uint():
    return np.dtype(dtypes.canonicalize_dtype(np.uint64))


def _sum_dtype(dtype):
    """JAX's accumulation dtype for sum/prod: bool and narrow ints widen to the default (u)int."""
    dtype = np.dtype(dtype)
    if is_bool_dtype(dtype):
        return _default_int()
    if dtype.kind == "i" and dtype.itemsize < _default_int().itemsize:
        return _default_int()
    if dtype.kind == "u" and dtype.itemsize < _default_uint().itemsize:
        return _default_uint()
    return dtype


def _compute_float(dtype, user_dtype=None):
    """float16/bfloat16 are accumulated in float32 and cast back, unless the caller named the dtype:
    JAX's sum, prod and mean upcast only when dtype=None (upcast_f16_for_computation), so
    prod(x, dtype=float16) multiplies, and differentiates, in float16 (bug, issue 32: its gradient
    was finite where JAX's overflows to inf)."""
    dtype = np.dtype(dtype)
    if user_dtype is None and is_inexact_dtype(dtype) and dtype.itemsize < 4:
        return np.dtype(np.float32)
    return dtype


def _cast(x, dtype):
    """x as a strong-typed `dtype`: JAX's reductions convert to their result dtype with weak_type=False, so
    sum(int8 array * 1.5) is a float32 that a float16 then promotes to float32, not to float16."""
    dtype = np.dtype(dtype)
    return x if x.dtype == dtype and not x.weak_type else lax.convert_element_type(x, dtype)


def _reduced_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _keep(x, axes, keepdims, in_shape):
    """Re-inserts reduced axes as size-1 axes when keepdims."""
    if not keepdims:
        return x
    return lax.reshape(x, _reduced_shape(in_shape, axes, True))


def _where_arg(opname, where, shape):
    if where is None:
        return None
    w = util.asarray_arg(opname, where)
    if not is_bool_dtype(w.dtype):
        w = lax.ne(w, _c(w, 0))
    return util.broadcast_to_shape(w, shape, f"{opname} (where=)")


def _count(opname, shape, axes, where, keepdims, dtype):
    """Number of elements (or of where=True elements) reduced into each output position."""
    if where is None:
        n = 1
        for a in axes:
            n *= shape[a]
        return lax.full(_reduced_shape(shape, axes, keepdims), n, dtype)
    total = lax.reduce_sum(lax.convert_element_type(where, dtype), axes)
    return _keep(total, axes, keepdims, shape)


def _identity_for(opname, dtype):
    dtype = np.dtype(dtype)
    if opname in ("max", "argmax"):
        if is_bool_dtype(dtype):
            return False
        return -np.inf if is_inexact_dtype(dtype) else int(np.iinfo(dtype).min)
    if is_bool_dtype(dtype):
        return True
    return np.inf if is_inexact_dtype(dtype) else int(np.iinfo(dtype).max)


def _reduction(opname, a, axis, keepdims, where, initial, *, reducer, combine, identity, dtype=None,
               out=None, has_identity=True):
    """Common driver: converts, masks with where= (identity fill), reduces, folds in initial=."""
    util.check_no_out(opname, out)
    a = util.asarray_arg(opname, a)
    if is_complex_dtype(a.dtype) and opname not in ("sum", "prod", "max", "min"):
        raise NotImplementedError(f"{opname}: complex inputs are not supported by kiln yet")
    axes = util.canonicalize_axes(axis, a.ndim, opname)
    if dtype is not None:
        a = _cast(a, dtype)
    empty = builtins.any(a.shape[i] == 0 for i in axes)
    if not has_identity and initial is None:
        if where is not None:
            raise ValueError(f"{opname}: reduction has no identity, so a where= mask needs initial= too")
        if empty:
            raise ValueError(f"{opname}: zero-size array to reduction operation {opname} which has no "
                             f"identity (shape {tuple(a.shape)}, axis {axis}); pass initial=")
    w = _where_arg(opname, where, a.shape)
    if w is not None:
        a = lax.select(w, a, _c(a, identity(a.dtype) if callable(identity) else identity))
    out_ = reducer(a, axes)
    if initial is not None:
        out_ = combine(out_, lax.full(out_.shape, initial, out_.dtype))
    return _keep(_cast(out_, out_.dtype), axes, keepdims, a.shape)


def _bool_or(reducer_bool, reducer):
    return lambda a, axes: (reducer_bool if is_bool_dtype(a.dtype) else reducer)(a, axes)


# ---------------------------------------------------------------------------------------------------------
# sum / prod / max / min / all / any

def sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None, promote_integers=True):
    """Sum over `axis` (None: all). Bool and narrow integers accumulate in the default int, as JAX."""
    a = util.asarray_arg("sum", a)
    user = util.dtype_arg(dtype)
    dtype = user or (_sum_dtype(a.dtype) if promote_integers else a.dtype)
    comp = _compute_float(dtype, user)
    is_bool = is_bool_dtype(comp)  # dtype=bool: a logical or, as JAX's bool sum
    r = _reduction("sum", a, axis, keepdims, where, initial, reducer=lax.reduce_or if is_bool else lax.reduce_sum,
                   combine=lax.or_ if is_bool else lax.add, identity=0, dtype=comp, out=out)
    return _cast(r, dtype)


def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None, promote_integers=True):
    """Product over `axis` (None: all); same dtype rules as sum."""
    a = util.asarray_arg("prod", a)
    user = util.dtype_arg(dtype)
    dtype = user or (_sum_dtype(a.dtype) if promote_integers else a.dtype)
    comp = _compute_float(dtype, user)
    is_bool = is_bool_dtype(comp)  # dtype=bool: a logical and, as JAX's bool product
    r = _reduction("prod", a, axis, keepdims, where, initial, reducer=lax.reduce_and if is_bool else lax.reduce_prod,
                   combine=lax.and_ if is_bool else lax.mul, identity=1, dtype=comp, out=out)
    return _cast(r, dtype)


product = prod


def _minmax(opname, reducer, reducer_bool, combine, combine_bool):
    def fn(a, axis=None, out=None, keepdims=False, initial=None, where=None):
        a = util.asarray_arg(opname, a)
        is_bool = is_bool_dtype(a.dtype)
        return _reduction(opname, a, axis, keepdims, where, initial,
                          reducer=reducer_bool if is_bool else reducer,
                          combine=combine_bool if is_bool else combine,
                          identity=lambda dt: _identity_for(opname, dt), out=out, has_identity=False)
    fn.__name__ = fn.__qualname__ = opname
    fn.__doc__ = (f"{opname} over `axis` (nan propagates). An empty reduction or a where= mask "
                  f"needs initial=.")
    return fn


max = amax = _minmax("max", lax.reduce_max, lax.reduce_or, lax.max, lax.or_)
min = amin = _minmax("min", lax.reduce_min, lax.reduce_and, lax.min, lax.and_)


def _logical(opname, reducer, identity):
    def fn(a, axis=None, out=None, keepdims=False, *, where=None):
        a = util.asarray_arg(opname, a)
        if is_complex_dtype(a.dtype):  # as JAX: converted to bool, which takes the real part (any(1j) is False)
            a = lax.real(a)
        b = a if is_bool_dtype(a.dtype) else lax.ne(a, _c(a, 0))
        return _reduction(opname, b, axis, keepdims, where, None, reducer=reducer, combine=None,
                          identity=identity, out=out)
    fn.__name__ = fn.__qualname__ = opname
    fn.__doc__ = f"Logical {opname} over `axis`; nonzero counts as True."
    return fn


all = alltrue = _logical("all", lax.reduce_and, True)
any = sometrue = _logical("any", lax.reduce_or, False)


def ptp(a, axis=None, out=None, keepdims=False):
    """max - min over `axis`."""
    return ufuncs.subtract(max(a, axis, out, keepdims), min(a, axis, None, keepdims))


def count_nonzero(a, axis=None, keepdims=False):
    """Number of nonzero elements over `axis`, in the default int dtype."""
    a = util.asarray_arg("count_nonzero", a)
    nz = a if is_bool_dtype(a.dtype) else lax.ne(a, _c(a, 0))
    return sum(nz, axis=axis, dtype=_default_int(), keepdims=keepdims)


# ---------------------------------------------------------------------------------------------------------
# mean / var / std

def _mean_dtype(opname, a, dtype):
    if dtype is not None:
        return util.dtype_arg(dtype)
    return util.to_inexact_dtype(a.dtype)


def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    """Arithmetic mean over `axis`; integer inputs give the default float."""
    a = util.asarray_arg("mean", a)
    user = dtype
    dtype = _mean_dtype("mean", a, dtype)
    comp = _compute_float(dtype, user)
    axes = util.canonicalize_axes(axis, a.ndim, "mean")
    total = sum(_cast(a, comp), axis, comp, out, keepdims, where=where)
    w = _where_arg("mean", where, a.shape)
    count = _count("mean", a.shape, axes, w, keepdims, comp)
    return _cast(lax.div(total, count), dtype)


def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, correction=None):
    """Variance over `axis` with `ddof` (or `correction`) delta degrees of freedom."""
    if correction is not None:
        if ddof != 0:
            raise ValueError("var: pass either ddof or correction, not both")
        ddof = correction
    util.check_no_out("var", out)
    a = util.asarray_arg("var", a)
    dtype = _mean_dtype("var", a, dtype)
    comp = _compute_float(dtype)
    x = _cast(a, comp)
    axes = util.canonicalize_axes(axis, a.ndim, "var")
    centered = lax.sub(x, util.broadcast_to_shape(mean(x, axes, comp, keepdims=True, where=where), x.shape))
    if is_complex_dtype(comp):  # |x - mean|^2: a real variance, as numpy and JAX
        re, im = lax.real(centered), lax.imag(centered)
        squares = lax.add(lax.mul(re, re), lax.mul(im, im))
        comp, dtype = dtypes.real_of(comp), dtypes.real_of(dtype)
    else:  # square, as JAX: its derivative 2x * t overflows where JAX's does (x * t + t * x did not)
        squares = lax.square(centered)
    total = sum(squares, axes, comp, keepdims=keepdims, where=where)
    w = _where_arg("var", where, a.shape)
    count = _count("var", a.shape, axes, w, keepdims, comp)
    dof = lax.max(lax.sub(count, _c(count, ddof)), _c(count, 0))
    return _cast(lax.div(total, dof), dtype)


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, correction=None):
    """Standard deviation: sqrt(var(...))."""
    return lax.sqrt(var(a, axis, dtype, out, ddof, keepdims, where=where, correction=correction))


# ---------------------------------------------------------------------------------------------------------
# argmax / argmin

def _flatten(a):
    return lax.reshape(a, (a.size,))


def _arg(opname, lax_fn, nan_fill=None):
    def fn(a, axis=None, out=None, keepdims=None):
        util.check_no_out(opname, out)
        a = util.asarray_arg(opname, a)
        if is_complex_dtype(a.dtype):
            raise TypeError(f"{opname}: complex inputs have no order; use abs(a) or the real part instead")
        in_shape = a.shape
        if axis is None:
            a, ax = _flatten(a), 0
        else:
            ax = util.canonicalize_axis(axis, a.ndim, opname)
        if a.shape[ax] == 0:
            raise ValueError(f"{opname}: attempt to get {opname} of an empty sequence (shape {tuple(in_shape)})")
        all_nan = None
        if nan_fill is not None and is_inexact_dtype(a.dtype):
            nan = lax.ne(a, a)
            all_nan = lax.reduce_and(nan, (ax,))
            a = lax.select(nan, _c(a, nan_fill), a)
        if is_bool_dtype(a.dtype):
            a = lax.convert_element_type(a, np.int32)
        r = lax_fn(a, ax, _default_int())
        if all_nan is not None:
            r = lax.select(all_nan, _c(r, -1), r)
        if keepdims:
            r = lax.reshape(r, tuple(1 for _ in in_shape) if axis is None else
                            tuple(1 if i == ax else d for i, d in enumerate(in_shape)))
        return r
    fn.__name__ = fn.__qualname__ = opname
    fn.__doc__ = (f"Index of the {opname.replace('nanarg', '').replace('arg', '')} along `axis` (None: "
                  f"flattened){' ignoring nan (-1 where all are nan)' if nan_fill is not None else ''}.")
    return fn


argmax = _arg("argmax", lax.argmax)
argmin = _arg("argmin", lax.argmin)
nanargmax = _arg("nanargmax", lax.argmax, nan_fill=-np.inf)
nanargmin = _arg("nanargmin", lax.argmin, nan_fill=np.inf)


# ---------------------------------------------------------------------------------------------------------
# nan-ignoring reductions

def _nan_filled(opname, a, fill):
    a = util.asarray_arg(opname, a)
    if not is_inexact_dtype(a.dtype):
        return a, None
    nan = lax.ne(a, a)
    return lax.select(nan, _c(a, fill), a), nan


def nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """sum treating nan as 0."""
    a, _ = _nan_filled("nansum", a, 0)
    return sum(a, axis, dtype, out, keepdims, initial, where)


def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """prod treating nan as 1."""
    a, _ = _nan_filled("nanprod", a, 1)
    return prod(a, axis, dtype, out, keepdims, initial, where)


def _not_nan_mask(nan, where, shape, opname):
    keep = lax.not_(nan)
    w = _where_arg(opname, where, shape)
    return keep if w is None else lax.and_(keep, w)


def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    """mean over the non-nan elements (nan where all are nan)."""
    filled, nan = _nan_filled("nanmean", a, 0)
    if nan is None:
        return mean(filled, axis, dtype, out, keepdims, where=where)
    return mean(filled, axis, dtype, out, keepdims, where=_not_nan_mask(nan, where, filled.shape, "nanmean"))


def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None):
    """var over the non-nan elements."""
    filled, nan = _nan_filled("nanvar", a, 0)
    if nan is None:
        return var(filled, axis, dtype, out, ddof, keepdims, where=where)
    return var(filled, axis, dtype, out, ddof, keepdims,
               where=_not_nan_mask(nan, where, filled.shape, "nanvar"))


def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None):
    """std over the non-nan elements."""
    return lax.sqrt(nanvar(a, axis, dtype, out, ddof, keepdims, where=where))


def _nan_minmax(opname, base, fill):
    def fn(a, axis=None, out=None, keepdims=False, initial=None, where=None):
        filled, nan = _nan_filled(opname, a, fill)
        r = base(filled, axis, out, keepdims, initial, where)
        if nan is None:
            return r
        all_nan = all(nan, axis, keepdims=keepdims)
        return lax.select(all_nan, _c(r, np.nan), r)
    fn.__name__ = fn.__qualname__ = opname
    fn.__doc__ = f"{base.__name__} ignoring nan (nan where every element is nan)."
    return fn


nanmax = _nan_minmax("nanmax", max, -np.inf)
nanmin = _nan_minmax("nanmin", min, np.inf)


# ---------------------------------------------------------------------------------------------------------
# median / quantile / percentile

def _move_axes_last(a, axes):
    """Transposes `axes` to the end and merges them into one trailing axis."""
    rest = [i for i in range(a.ndim) if i not in axes]
    perm = tuple(rest) + tuple(axes)
    if perm != tuple(range(a.ndim)):
        a = lax.transpose(a, perm)
    kept = tuple(a.shape[: len(rest)])
    merged = 1
    for d in a.shape[len(rest):]:
        merged *= d
    return lax.reshape(a, kept + (merged,)), kept


_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(opname, a, q, axis, method, keepdims, ignore_nan, scale=1.0):
    if method not in _METHODS:
        raise ValueError(f"{opname}: method must be one of {_METHODS}, got {method!r}")
    a = util.asarray_arg(opname, a)
    if is_complex_dtype(a.dtype):  # (JAX raises ValueError too)
        raise ValueError(f"{opname}: complex inputs are not supported, as the operation is poorly defined; "
                         "apply it to the real and imaginary parts (real, imag) or to abs")
    q = util.asarray_arg(opname, q)
    axes = util.canonicalize_axes(axis, a.ndim, opname)
    in_shape = a.shape
    dtype = util.to_inexact_dtype(a.dtype)
    x = _cast(a, dtype)
    q = _cast(q, dtype)
    if scale != 1.0:
        q = lax.div(q, _c(q, scale))
    x, kept = _move_axes_last(x, axes)
    n = x.shape[-1]
    if n == 0:
        raise ValueError(f"{opname}: cannot take a quantile of an empty reduction (shape {tuple(in_shape)})")
    x = lax.sort(x, dimension=x.ndim - 1)  # nan sorts last
    nan_mask = lax.ne(x, x)
    if ignore_nan:
        count = lax.reduce_sum(lax.convert_element_type(lax.not_(nan_mask), dtype), (x.ndim - 1,))
    else:
        count = lax.full(kept, n, dtype)
    # broadcast: result dims are q.shape + kept; work in shape q.shape + kept + (n,)
    qshape = tuple(q.shape)
    full = qshape + kept + (n,)
    xb = lax.broadcast_in_dim(x, full, tuple(range(len(qshape), len(full))))
    qb = lax.broadcast_in_dim(q, qshape + kept, tuple(range(len(qshape))))
    cb = lax.broadcast_in_dim(count, qshape + kept, tuple(range(len(qshape), len(qshape) + len(kept))))
    pos = lax.mul(qb, lax.sub(cb, _c(cb, 1)))
    lo = lax.floor(pos)
    hi = lax.min(lax.ceil(pos), lax.max(lax.sub(cb, _c(cb, 1)), _c(cb, 0)))
    iota = lax.broadcasted_iota(dtype, full, len(full) - 1)

    def pick(idx):
        mask = lax.eq(iota, lax.broadcast_in_dim(idx, full, tuple(range(len(full) - 1))))
        return lax.reduce_sum(lax.select(mask, xb, _c(xb, 0)), (len(full) - 1,))

    if method == "lower":
        r = pick(lo)
    elif method == "higher":
        r = pick(hi)
    elif method == "nearest":
        r = pick(lax.round(pos, 1))
    else:
        lo_v, hi_v = pick(lo), pick(hi)
        if method == "midpoint":
            r = lax.mul(lax.add(lo_v, hi_v), _c(lo_v, 0.5))
        else:
            t = lax.sub(pos, lo)
            r = lax.add(lo_v, lax.mul(lax.sub(hi_v, lo_v), t))
    # Any nan in a row makes the plain quantile nan; an all-nan row makes the nan-version nan.
    if ignore_nan:
        bad = lax.eq(cb, _c(cb, 0))
    else:
        bad = lax.broadcast_in_dim(lax.reduce_or(nan_mask, (x.ndim - 1,)), qshape + kept,
                                   tuple(range(len(qshape), len(qshape) + len(kept))))
    r = lax.select(bad, _c(r, np.nan), r)
    if keepdims:
        r = lax.reshape(r, qshape + _reduced_shape(in_shape, axes, True))
    return r


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
             interpolation=None):
    """q-th quantile(s) along `axis` (q in [0, 1]); q's shape leads the result's."""
    util.check_no_out("quantile", out)
    return _quantile("quantile", a, q, axis, interpolation or method, keepdims, ignore_nan=False)


def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
                interpolation=None):
    """quantile ignoring nan."""
    util.check_no_out("nanquantile", out)
    return _quantile("nanquantile", a, q, axis, interpolation or method, keepdims, ignore_nan=True)


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
               interpolation=None):
    """q-th percentile(s) (q in [0, 100])."""
    util.check_no_out("percentile", out)
    return _quantile("percentile", a, q, axis, interpolation or method, keepdims, False, scale=100.0)


def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
                  interpolation=None):
    """percentile ignoring nan."""
    util.check_no_out("nanpercentile", out)
    return _quantile("nanpercentile", a, q, axis, interpolation or method, keepdims, True, scale=100.0)


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """Median along `axis` (nan if any element is nan)."""
    util.check_no_out("median", out)
    return _quantile("median", a, 0.5, axis, "midpoint", keepdims, ignore_nan=False)


def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """Median ignoring nan."""
    util.check_no_out("nanmedian", out)
    return _quantile("nanmedian", a, 0.5, axis, "midpoint", keepdims, ignore_nan=True)


# ---------------------------------------------------------------------------------------------------------
# average

def average(a, axis=None, weights=None, returned=False, keepdims=False):
    """Weighted mean; 1-D weights must match the length of a single `axis`."""
    a = util.asarray_arg("average", a)
    if weights is None:
        avg = mean(a, axis, keepdims=keepdims)
        axes = util.canonicalize_axes(axis, a.ndim, "average")
        count = _count("average", a.shape, axes, None, keepdims, avg.dtype)
        return (avg, count) if returned else avg
    a, w = util.promote_dtypes_inexact("average", a, weights)
    axes = util.canonicalize_axes(axis, a.ndim, "average")
    if tuple(w.shape) != tuple(a.shape):
        if axis is None or isinstance(axis, (tuple, list)):
            raise ValueError(f"average: weights of shape {tuple(w.shape)} differ from a's shape "
                             f"{tuple(a.shape)}; pass a single axis for 1-D weights")
        if w.ndim != 1 or w.shape[0] != a.shape[axes[0]]:
            raise ValueError(f"average: 1-D weights of shape {tuple(w.shape)} must have the length of axis "
                             f"{axis} of a (shape {tuple(a.shape)})")
        w = lax.broadcast_in_dim(w, a.shape, (axes[0],))
    wsum = sum(w, axes, keepdims=keepdims)
    total = sum(lax.mul(a, w), axes, keepdims=keepdims)
    avg = lax.div(total, wsum)
    return (avg, wsum) if returned else avg


# ---------------------------------------------------------------------------------------------------------
# Cumulative ops

def _cumulative(opname, lax_fn, nan_fill=None):
    def fn(a, axis=None, dtype=None, out=None):
        util.check_no_out(opname, out)
        a = util.asarray_arg(opname, a)
        if nan_fill is not None and is_inexact_dtype(a.dtype):
            a = lax.select(lax.ne(a, a), _c(a, nan_fill), a)
        if axis is None:
            a, ax = _flatten(a), 0
        else:
            ax = util.canonicalize_axis(axis, a.ndim, opname)
        dt = util.dtype_arg(dtype)
        if dt is None:
            dt = _default_int() if is_bool_dtype(a.dtype) else a.dtype
        comp = _compute_float(dt)
        fn_ = _BOOL_CUMULATIVE.get(lax_fn, lax_fn) if is_bool_dtype(comp) else lax_fn
        return _cast(fn_(_cast(a, comp), axis=ax), dt)
    fn.__name__ = fn.__qualname__ = opname
    fn.__doc__ = f"Cumulative {opname} along `axis` (None: over the flattened array)."
    return fn


# dtype=bool: a running or (sum) or and (product), as JAX's
_BOOL_CUMULATIVE = {lax.cumsum: lax.cummax, lax.cumprod: lax.cummin}
cumsum = _cumulative("cumsum", lax.cumsum)
cumprod = _cumulative("cumprod", lax.cumprod)
nancumsum = _cumulative("nancumsum", lax.cumsum, nan_fill=0)
nancumprod = _cumulative("nancumprod", lax.cumprod, nan_fill=1)


def _cumulative_with_initial(opname, base, identity, promote_integers=False):
    def fn(x, /, *, axis=None, dtype=None, include_initial=False):
        x = util.asarray_arg(opname, x)
        if axis is None:
            if x.ndim != 1:
                raise ValueError(f"{opname}: axis must be given for arrays of more than one dimension "
                                 f"(got shape {tuple(x.shape)})")
            axis = 0
        if dtype is None and promote_integers:  # as JAX: cumulative_sum widens small ints as sum does
            dtype = _sum_dtype(x.dtype)
        r = base(x, axis=axis, dtype=dtype)
        if not include_initial:
            return r
        ax = util.canonicalize_axis(axis, x.ndim, opname)
        pad = [(0, 0, 0)] * r.ndim
        pad[ax] = (1, 0, 0)
        return lax.pad(r, lax.full((), identity, r.dtype), pad)
    fn.__name__ = fn.__qualname__ = opname
    fn.__doc__ = f"Array-API {opname}: {base.__name__} with an optional leading identity element."
    return fn


cumulative_sum = _cumulative_with_initial("cumulative_sum", cumsum, 0, promote_integers=True)
cumulative_prod = _cumulative_with_initial("cumulative_prod", cumprod, 1)


# ---------------------------------------------------------------------------------------------------------
# diff / ediff1d

def _edge(opname, value, like, ax):
    """prepend/append value: a scalar becomes a length-1 slab along `ax`; arrays are used as given."""
    v = util.asarray_arg(opname, value)
    if v.ndim == 0:
        shape = tuple(1 if i == ax else d for i, d in enumerate(like.shape))
        v = util.broadcast_to_shape(v, shape, opname)
    return v


def diff(a, n=1, axis=-1, prepend=None, append=None):
    """n-th discrete difference along `axis`, optionally after prepending/appending values."""
    a = util.asarray_arg("diff", a)
    n = util.concrete_int(n, "diff: n")
    if n < 0:
        raise ValueError(f"diff: order must be non-negative but got {n}")
    if n == 0:
        return a
    if a.ndim == 0:
        raise ValueError("diff: requires input that is at least one dimensional")
    ax = util.canonicalize_axis(axis, a.ndim, "diff")
    parts = [a]
    if prepend is not None:
        parts.insert(0, _edge("diff", prepend, a, ax))
    if append is not None:
        parts.append(_edge("diff", append, a, ax))
    if len(parts) > 1:
        parts = util.promote_dtypes("diff", *parts)
        for p in parts:
            if p.ndim != a.ndim or builtins.any(p.shape[i] != a.shape[i] for i in range(a.ndim) if i != ax):
                raise ValueError(f"diff: prepend/append of shape {tuple(p.shape)} does not match a's shape "
                                 f"{tuple(a.shape)} outside axis {axis}")
        a = lax.concatenate(parts, ax)
    op = lax.ne if is_bool_dtype(a.dtype) else lax.sub
    for _ in range(n):
        length = a.shape[ax]
        if length == 0:
            break
        a = op(lax.slice_in_dim(a, 1, length, axis=ax), lax.slice_in_dim(a, 0, length - 1, axis=ax))
    return a


def ediff1d(ary, to_end=None, to_begin=None):
    """Differences of the flattened array, with optional values before and after."""
    a = util.asarray_arg("ediff1d", ary)
    flat = _flatten(a)
    d = lax.sub(lax.slice_in_dim(flat, 1, flat.shape[0], axis=0),
                lax.slice_in_dim(flat, 0, builtins.max(flat.shape[0] - 1, 0), axis=0)) \
        if flat.shape[0] > 0 else flat
    parts = []
    if to_begin is not None:
        parts.append(_flatten(_cast(util.asarray_arg("ediff1d", to_begin), d.dtype)))
    parts.append(d)
    if to_end is not None:
        parts.append(_flatten(_cast(util.asarray_arg("ediff1d", to_end), d.dtype)))
    return lax.concatenate(parts, 0) if len(parts) > 1 else d
