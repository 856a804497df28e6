"""kiln.scipy.stats' summary statistics: mode, rankdata and sem, as jax.scipy.stats (sort-based, so they
trace and compile for any input of known shape)."""

from typing import NamedTuple

import numpy as np

from kiln import lax
from kiln import numpy as jnp
from kiln._src import dtypes
from kiln._src.numpy.util import canonicalize_axis, promote_args_inexact


class ModeResult(NamedTuple):
    mode: object
    count: object


def _check_nan_policy(name, nan_policy):
    if nan_policy not in ("propagate", "omit", "raise"):
        raise ValueError(f"Illegal nan_policy value {nan_policy!r}; expected one of {{'propagate', 'omit', 'raise'}}")
    if nan_policy == "omit":
        raise NotImplementedError(f"Logic for `nan_policy` of {nan_policy} is not implemented")
    if nan_policy == "raise":
        raise NotImplementedError(f"In order to best JIT compile `{name}`, we cannot know whether `x` contains nans. "
                                  f"Please check if nans exist in `x` outside of the `{name}` function.")


def _runs(sorted_rows):
    """For rows sorted along the last axis: each position's run of equal values as (first, last) indices."""
    n = sorted_rows.shape[-1]
    idx = jnp.broadcast_to(jnp.arange(n), sorted_rows.shape)
    starts = jnp.concatenate([jnp.ones(sorted_rows.shape[:-1] + (1,), bool),
                              sorted_rows[..., 1:] != sorted_rows[..., :-1]], axis=-1)
    ends = jnp.concatenate([starts[..., 1:], jnp.ones(sorted_rows.shape[:-1] + (1,), bool)], axis=-1)
    first = lax.cummax(jnp.where(starts, idx, 0), axis=sorted_rows.ndim - 1)
    last = lax.cummin(jnp.where(ends, idx, n - 1), axis=sorted_rows.ndim - 1, reverse=True)
    return first, last, starts


def mode(a, axis=0, nan_policy="propagate", keepdims=False):
    """The most common value along `axis` (the smallest of equally common ones) and its count, as a
    ModeResult (mode, count); axis=None flattens. Counts have the input's dtype, as in JAX."""
    _check_nan_policy("mode", nan_policy)
    x = jnp.atleast_1d(jnp.asarray(a))
    if axis is None:
        x = jnp.ravel(x)
        out_shape = (1,) * jnp.ndim(a) if keepdims else ()
        axis = 0
    else:
        axis = canonicalize_axis(axis, x.ndim, "mode")
        out_shape = tuple(1 if i == axis else s for i, s in enumerate(x.shape)) if keepdims else \
            tuple(s for i, s in enumerate(x.shape) if i != axis)
    if x.shape[axis] == 0:
        float_dtype = dtypes.canonicalize_dtype(np.float64)
        return ModeResult(jnp.full(out_shape, np.nan, float_dtype), jnp.zeros(out_shape, float_dtype))
    rows = jnp.sort(jnp.moveaxis(x, axis, -1), axis=-1)
    first, last, _ = _runs(rows)
    counts = last - first + 1
    best = jnp.argmax(counts, axis=-1)[..., None]  # the first maximum: the smallest value
    value = jnp.take_along_axis(rows, best, axis=-1)[..., 0]
    count = jnp.take_along_axis(counts, best, axis=-1)[..., 0]
    return ModeResult(value.reshape(out_shape), count.astype(x.dtype).reshape(out_shape))


_RANK_METHODS = ("average", "min", "max", "dense", "ordinal")


def rankdata(a, method="average", *, axis=None, nan_policy="propagate"):
    """Ranks from 1 of the data (flattened, or along `axis`), ties resolved by `method` ('average', 'min',
    'max', 'dense' or 'ordinal'), as floats of the default dtype; all nan where a slice holds a nan."""
    _check_nan_policy("rankdata", nan_policy)
    if method not in _RANK_METHODS:
        raise ValueError(f"unknown method '{method}'")
    a = jnp.asarray(a)
    if axis is None:
        rows, axis_ = jnp.ravel(a), None
    else:
        axis_ = canonicalize_axis(axis, a.ndim, "rankdata")
        rows = jnp.moveaxis(a, axis_, -1)
    out_dtype = dtypes.canonicalize_dtype(np.float64)
    n = rows.shape[-1]
    order = jnp.argsort(rows, axis=-1, stable=True)
    inverse = jnp.argsort(order, axis=-1, stable=True)
    if method == "ordinal":
        ranks = (inverse + 1).astype(out_dtype)
    else:
        first, last, starts = _runs(jnp.take_along_axis(rows, order, axis=-1))
        if method == "dense":
            per_sorted = jnp.cumsum(starts, axis=-1)
        else:
            per_sorted = {"min": first + 1, "max": last + 1}.get(method)
            if per_sorted is None:
                per_sorted = 0.5 * (first + last) + 1.0
        ranks = jnp.take_along_axis(per_sorted, inverse, axis=-1).astype(out_dtype)
    if n:
        has_nan = jnp.any(jnp.isnan(rows), axis=-1, keepdims=True) if jnp.issubdtype(rows.dtype, jnp.inexact) \
            else jnp.zeros(rows.shape[:-1] + (1,), bool)
        ranks = jnp.where(has_nan, np.nan, ranks)
    return ranks if axis_ is None else jnp.moveaxis(ranks, -1, axis_)


def sem(a, axis=0, ddof=1, nan_policy="propagate", *, keepdims=False):
    """The standard error of the mean, std(a, ddof) / sqrt(n), along `axis` (None: all); nan_policy 'omit'
    ignores nans."""
    b, = promote_args_inexact("sem", a)
    if nan_policy == "propagate":
        size = b.size if axis is None else b.shape[axis]
        return b.std(axis, ddof=ddof, keepdims=keepdims) / jnp.sqrt(size).astype(b.dtype)
    if nan_policy == "omit":
        count = (~jnp.isnan(b)).sum(axis, keepdims=keepdims)
        return jnp.nanstd(b, axis, ddof=ddof, keepdims=keepdims) / jnp.sqrt(count).astype(b.dtype)
    raise ValueError(f"{nan_policy} is not supported")
