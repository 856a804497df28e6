"""kiln.numpy's numerical extras with JAX's semantics: interpolation, histograms and binning, convolution
and correlation, covariance, finite differences, window functions, polynomials, set operations (size= for
static shapes) and the float-bit ufuncs (frexp, ldexp, nextafter, spacing, modf). Built on kiln.lax and
the other kiln._src.numpy modules; the indexing and NumPy-compatibility names live in more2.py, whose
public names this module re-exports (kiln.numpy star-imports this module alone).
"""

import builtins
import math
from typing import NamedTuple

import numpy as np

from kiln import lax
from kiln._src import core, dtypes
from kiln._src.numpy import creation as _c
from kiln._src.numpy import linalg as _la
from kiln._src.numpy import reductions as _r
from kiln._src.numpy import shape_ops as _s
from kiln._src.numpy import ufuncs as _u
from kiln._src.numpy import util
from kiln._src.numpy.more2 import *  # noqa: F401,F403
from kiln._src.numpy.more2 import __all__ as _more2_all
from kiln._src.numpy.more2 import _default_int, bincount, ravel_multi_index, ix_, trim_zeros

__all__ = [
    "interp", "histogram_bin_edges", "histogram", "histogram2d", "histogramdd", "digitize",
    "convolve", "correlate", "cov", "corrcoef", "gradient", "trapezoid", "unwrap", "vander",
    "bartlett", "blackman", "hamming", "hanning", "kaiser", "i0",
    "poly", "polyadd", "polysub", "polymul", "polydiv", "polyder", "polyint", "polyval", "polyfit", "roots",
    "frexp", "ldexp", "nextafter", "spacing", "modf", "bitwise_count", "sort_complex",
    "setdiff1d", "intersect1d", "union1d", "setxor1d", "isin", "unique_all", "unique_counts", "unique_inverse",
    "unique_values",
] + list(_more2_all)


def _scalar(x, value):
    return lax.full((), value, x.dtype)


def _static_int(x, what):
    return util.concrete_int(x, what)


# ---------------------------------------------------------------------------------------------------------
# Interpolation and binning

def interp(x, xp, fp, left=None, right=None, period=None):
    """Piecewise-linear interpolation of the points (xp, fp) (xp increasing) at x. left/right: the values
    below xp[0] / above xp[-1] (fp's ends by default; 'extrapolate' continues the end segments); period:
    xp and x are taken modulo it."""
    x, xp, fp = (util.asarray_arg("interp", v) for v in (x, xp, fp))
    if xp.shape != fp.shape or xp.ndim != 1:
        raise ValueError("xp and fp must be one-dimensional arrays of equal size")
    x, xp = util.promote_dtypes_inexact("interp", x, xp)
    fp, = util.promote_dtypes_inexact("interp", fp)
    if util.is_complex_dtype(x.dtype):
        raise ValueError("jnp.interp: complex x values not supported.")
    extrapolate = {}
    for side, value in (("left", left), ("right", right)):
        if isinstance(value, str) and value != "extrapolate":
            raise ValueError(f"the only valid string value of `{side}` is 'extrapolate', but got: {value!r}")
        extrapolate[side] = isinstance(value, str)
    if period is not None:
        if np.ndim(period) != 0:
            raise ValueError(f"period must be a scalar; got {period}")
        period = _u.abs(period)
        x, xp = _u.mod(x, period), _u.mod(xp, period)
        xp, fp = lax.sort_key_val(xp, fp)
        xp = _s.concatenate([xp[-1:] - period, xp, xp[:1] + period])
        fp = _s.concatenate([fp[-1:], fp, fp[:1]])
    n = xp.shape[0]
    i = _u.clip(_s.searchsorted(xp, x, side="right"), 1, n - 1)
    x_lo, x_hi, f_lo, f_hi = xp[i - 1], xp[i], fp[i - 1], fp[i]
    dx = x_hi - x_lo
    flat = _u.abs(dx) <= np.spacing(dtypes.finfo(xp.dtype).eps)  # a zero-width segment: no NaN, no NaN gradient
    f = _u.where(flat, f_lo, f_lo + ((x - x_lo) / _u.where(flat, 1, dx)) * (f_hi - f_lo))
    if period is None:
        if not extrapolate["left"]:
            f = _u.where(x < xp[0], fp[0] if left is None else left, f)
        if not extrapolate["right"]:
            f = _u.where(x > xp[-1], fp[-1] if right is None else right, f)
    return f


def histogram_bin_edges(a, bins=10, range=None, weights=None):
    """The bin edges histogram uses: bins itself when it is 1-D, else bins + 1 evenly spaced edges over
    range (a's min and max by default; widened by 0.5 each way when they are equal)."""
    if isinstance(bins, str):
        raise NotImplementedError("histogram_bin_edges: string values for `bins` are not implemented.")
    a = util.asarray_arg("histogram_bin_edges", a)
    dtype = util.to_inexact_dtype(a.dtype)
    if np.ndim(bins) == 1:
        return _c.asarray(bins, dtype=dtype)
    nbins = _static_int(bins, "histogram_bin_edges: bins")
    lo, hi = (_r.min(a), _r.max(a)) if range is None else range
    lo, hi = _c.asarray(lo, dtype=dtype), _c.asarray(hi, dtype=dtype)
    if lo.shape != () or hi.shape != ():
        raise ValueError(f"`range` must be either None or a sequence of scalars, got {range}")
    same = lo == hi
    return _c.linspace(_u.where(same, lo - 0.5, lo), _u.where(same, hi + 0.5, hi), nbins + 1, dtype=dtype)


def _weights_like(opname, a, weights, shape):
    if weights is None:
        a, = util.promote_dtypes_inexact(opname, a)
        return a, _c.ones_like(a) if shape is None else _c.ones(shape, a.dtype)
    w = util.asarray_arg(opname, weights)
    if w.shape != (a.shape if shape is None else shape):
        raise ValueError(f"{opname}: weights of shape {w.shape} must match the samples ({a.shape})")
    return util.promote_dtypes_inexact(opname, a, w)


def histogram(a, bins=10, range=None, weights=None, density=None):
    """(counts, bin_edges): how many of a's elements (or how much weight) fall in each bin [edge_i,
    edge_i+1), the last bin closed; density: normalized to integrate to 1 over the range."""
    a = util.asarray_arg("histogram", a)
    a, w = _weights_like("histogram", a, weights, None)
    edges = histogram_bin_edges(a, bins, range)
    idx = _s.searchsorted(edges, a, side="right")
    idx = _u.where(a == edges[-1], edges.shape[0] - 1, idx)
    counts = _c.zeros(edges.shape[0], w.dtype).at[_s.ravel(idx)].add(_s.ravel(w))[1:]
    if density:
        counts = counts / _r.diff(edges) / counts.sum()
    return counts, edges


def histogramdd(sample, bins=10, range=None, weights=None, density=None):
    """(hist, edges): the D-dimensional histogram of sample (N points, shape (N, D)), bins per dimension as
    in histogram (an int for all, or one entry per dimension); values on the last edge count in the last
    bin."""
    sample = util.asarray_arg("histogramdd", sample)
    if sample.ndim != 2:
        raise ValueError(f"histogramdd: sample must have shape (N, D), got {sample.shape}")
    n, d = sample.shape
    sample, w = _weights_like("histogramdd", sample, weights, (n,))
    if range is not None and (len(range) != d or any(r is not None and np.shape(r)[0] != 2 for r in range)):
        raise ValueError(f"For sample.shape={(n, d)}, range must be a sequence of {d} pairs or Nones; got "
                         f"range={range}")
    try:
        per_dim = list(bins)
    except TypeError:
        per_dim = [bins] * d
    else:
        if len(per_dim) != d:
            raise ValueError("should be a bin for each dimension.")
    idx, edges = [], []
    for i in builtins.range(d):
        col = sample[:, i]
        e = histogram_bin_edges(col, per_dim[i], None if range is None else range[i])
        k = _s.searchsorted(e, col, side="right")
        idx.append(_u.where(col == e[-1], k - 1, k))
        edges.append(e)
    nbins = tuple(e.shape[0] + 1 for e in edges)  # with one overflow bin each side
    flat = ravel_multi_index(tuple(idx), nbins, mode="clip")
    # no weights: integer counts, as JAX (histogram's counts stay floats, as JAX's do)
    hist = bincount(flat, None if weights is None else w, length=math.prod(nbins)).reshape(nbins)
    hist = hist[(builtins.slice(1, -1),) * d]
    if density:
        hist = hist / hist.sum()
        for width in ix_(*(_r.diff(e) for e in edges)):
            hist = hist / width
    return hist, edges


def histogram2d(x, y, bins=10, range=None, weights=None, density=None):
    """(hist, x_edges, y_edges): histogramdd of the points (x[i], y[i])."""
    x, y = util.asarray_arg("histogram2d", x), util.asarray_arg("histogram2d", y)
    try:
        n = len(bins)
    except TypeError:
        n = 1
    if n != 1 and n != 2:
        bins = [_c.asarray(bins)] * 2
    hist, edges = histogramdd(_s.stack([x, y], axis=1), bins, range, weights, density)
    return hist, edges[0], edges[1]


def digitize(x, bins, right=False, *, method=None):
    """The index of the bin of bins (increasing or decreasing) each element of x falls in: i with
    bins[i-1] <= x < bins[i] (increasing; right=True puts the equality on the right)."""
    x, b = util.asarray_arg("digitize", x), util.asarray_arg("digitize", bins)
    right = bool(core.concrete_or_error(right, "digitize: right") if isinstance(right, core.Array) else right)
    if b.ndim != 1:
        raise ValueError(f"digitize: bins must be a 1-dimensional array; got bins={bins}")
    if b.shape[0] == 0:
        return _c.zeros_like(x, dtype=np.int32)
    side = "left" if right else "right"
    return _u.where(b[-1] >= b[0], _s.searchsorted(b, x, side=side),
                    b.shape[0] - _s.searchsorted(b[::-1], x, side=side))


# ---------------------------------------------------------------------------------------------------------
# Convolution, correlation, covariance, differences

def _conv(opname, x, y, mode, precision, preferred_element_type):
    x, y = util.asarray_arg(opname, x), util.asarray_arg(opname, y)
    if x.ndim != 1 or y.ndim != 1:
        raise ValueError(f"{opname}() only support 1-dimensional inputs.")
    if preferred_element_type is None:
        x, y = util.promote_dtypes_inexact(opname, x, y)
    else:
        x, y = util.promote_dtypes(opname, x, y)
    if x.shape[0] == 0 or y.shape[0] == 0:
        raise ValueError(f"{opname}: inputs cannot be empty, got shapes {x.shape} and {y.shape}.")
    reverse_out = False
    if opname == "correlate":
        y = _u.conj(y) if util.is_complex_dtype(y.dtype) else y
        if x.shape[0] < y.shape[0]:
            x, y, reverse_out = y, x, True
    else:
        if x.shape[0] < y.shape[0]:
            x, y = y, x
        y = y[::-1]
    m = y.shape[0]
    pads = {"valid": (0, 0), "same": (m // 2, m - m // 2 - 1), "full": (m - 1, m - 1)}
    if mode not in pads:
        raise ValueError("mode must be one of ['full', 'same', 'valid']")
    out = lax.conv_general_dilated(x[None, None, :], y[None, None, :], (1,), [pads[mode]], precision=precision,
                                   preferred_element_type=preferred_element_type)[0, 0]
    return out[::-1] if reverse_out else out


def convolve(a, v, mode="full", *, precision=None, preferred_element_type=None):
    """The discrete linear convolution of 1-D a and v; mode 'full', 'same' (a's length, centred on the
    longer input) or 'valid' (where they overlap fully)."""
    return _conv("convolve", a, v, mode, precision, preferred_element_type)


def correlate(a, v, mode="valid", *, precision=None, preferred_element_type=None):
    """The cross-correlation sum_n a[n + k] * conj(v[n]) of 1-D a and v, modes as convolve ('valid' by
    default), as numpy.correlate."""
    return _conv("correlate", a, v, mode, precision, preferred_element_type)


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, dtype=None):
    """The covariance matrix of the variables in m (rows, or columns when rowvar=False) and y, with
    integer frequency weights and/or observation weights, as numpy.cov."""
    if y is not None:
        m, y = util.promote_args_inexact("cov", m, y) if np.shape(m) == np.shape(y) else \
            util.promote_dtypes_inexact("cov", m, y)
        if y.ndim > 2:
            raise ValueError("y has more than 2 dimensions")
    else:
        m, = util.promote_dtypes_inexact("cov", m)
    if m.ndim > 2:
        raise ValueError("m has more than 2 dimensions")
    if dtype is not None and not dtypes.issubdtype(dtype, np.inexact):
        raise ValueError(f"cov: dtype must be a subclass of float or complex; got dtype={dtype}")
    X = _s.atleast_2d(m)
    if not rowvar and m.ndim != 1:
        X = X.T
    if X.shape[0] == 0:
        return _c.zeros((0, 0), X.dtype)
    if y is not None:
        Y = _s.atleast_2d(y)
        if not rowvar and Y.shape[0] != 1:
            Y = Y.T
        X = _s.concatenate([X, Y], axis=0)
    if X.shape[1] == 0:
        return _c.full(() if X.shape[0] == 1 else (X.shape[0],) * 2, np.nan, X.dtype)
    if ddof is None:
        ddof = 0 if bias else 1
    w = None
    if fweights is not None:
        fw = util.asarray_arg("cov", fweights)
        if fw.ndim > 1:
            raise RuntimeError("cannot handle multidimensional fweights")
        if fw.shape[0] != X.shape[1]:
            raise RuntimeError("incompatible numbers of samples and fweights")
        if not util.is_int_dtype(fw.dtype):
            raise TypeError("fweights must be integer.")
        w = _u.abs(fw)
    if aweights is not None:
        aw = util.asarray_arg("cov", aweights)
        if aw.ndim > 1:
            raise RuntimeError("cannot handle multidimensional aweights")
        if aw.shape[0] != X.shape[1]:
            raise RuntimeError("incompatible numbers of samples and aweights")
        aweights = _u.abs(aw)
        w = aweights if w is None else w * aweights
    if dtype is not None:
        X = X.astype(dtype)
        w = None if w is None else w.astype(dtype)
    avg, w_sum = _r.average(X, axis=1, weights=w, returned=True)
    w_sum = w_sum[0]
    if w is None:
        f = X.shape[1] - ddof
    elif ddof == 0:
        f = w_sum
    elif aweights is None:
        f = w_sum - ddof
    else:
        f = w_sum - ddof * _r.sum(w * aweights) / w_sum
    X = X - avg[:, None]
    Xw = X if w is None else X * w
    c = _la.dot(X, _u.conj(Xw.T) if util.is_complex_dtype(X.dtype) else Xw.T) / f
    return _s.squeeze(c)


def corrcoef(x, y=None, rowvar=True, dtype=None):
    """Pearson correlation coefficients: cov normalized by the standard deviations (clipped to [-1, 1])."""
    if dtype is not None and not dtypes.issubdtype(dtype, np.inexact):
        raise ValueError(f"corrcoef: dtype must be a subclass of float or complex; got dtype={dtype}")
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return c / c
    std = _u.sqrt(_u.real(_s.diagonal(c))).astype(c.dtype)
    c = c / std[:, None] / std[None, :]
    if util.is_complex_dtype(c.dtype):
        return lax.complex(_u.clip(_u.real(c), -1, 1), _u.clip(_u.imag(c), -1, 1))
    return _u.clip(c, -1, 1)


def gradient(f, *varargs, axis=None, edge_order=None):
    """The gradient of f sampled on a grid: central differences inside, one-sided at the edges; varargs
    the spacing (one scalar, or one scalar or coordinate array per axis). One array per axis (a list
    when there are several)."""
    if edge_order is not None:
        raise NotImplementedError("The 'edge_order' argument to jnp.gradient is not supported.")
    a, *spacing = util.promote_dtypes_inexact("gradient", f, *varargs)
    axes = util.canonicalize_axes(axis, a.ndim, "gradient")
    if not axes:
        return []
    if builtins.min(a.shape[i] for i in axes) < 2:
        raise ValueError("Shape of array too small to calculate a numerical gradient, at least 2 elements are "
                         "required.")
    if not spacing:
        spacing = [1.0] * len(axes)
    elif len(spacing) == 1:
        spacing = spacing * len(axes)
    elif len(spacing) != len(axes):
        raise TypeError(f"Invalid number of spacing arguments {len(spacing)} for axis={axis}")

    def along(h, ax):
        def part(v, lo, hi):
            return lax.slice_in_dim(v, lo, hi, axis=ax)
        n = a.shape[ax]
        first, last = part(a, 1, 2) - part(a, 0, 1), part(a, n - 1, n) - part(a, n - 2, n - 1)
        h = util.asarray_arg("gradient", h)
        if h.ndim == 0:
            inner = (part(a, 2, n) - part(a, 0, n - 2)) * 0.5 / h
            first, last = first / h, last / h
        elif h.ndim == 1:
            if h.shape[0] != n:
                raise ValueError("Spacing arrays must have the same length as the dimension along which the "
                                 "gradient is calculated.")
            h = lax.broadcast_in_dim(h, tuple(n if i == ax else 1 for i in builtins.range(a.ndim)), (ax,))
            first = first / (part(h, 1, 2) - part(h, 0, 1))
            last = last / (part(h, n - 1, n) - part(h, n - 2, n - 1))
            d1, d2 = part(h, 1, n - 1) - part(h, 0, n - 2), part(h, 2, n) - part(h, 1, n - 1)
            inner = (-d2 / (d1 * (d1 + d2)) * part(a, 0, n - 2) + (d2 - d1) / (d1 * d2) * part(a, 1, n - 1)
                     + d1 / (d2 * (d1 + d2)) * part(a, 2, n))
        else:
            raise ValueError("Spacing arrays must be 1D arrays or scalars.")
        return _s.concatenate([first, inner, last], axis=ax)

    out = [along(h, ax) for ax, h in zip(axes, spacing)]
    return out[0] if len(out) == 1 else out


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """The integral of y along axis by the trapezoidal rule, on sample points x or with spacing dx."""
    if x is None:
        y, = util.promote_dtypes_inexact("trapezoid", y)
        d = util.asarray_arg("trapezoid", dx)
        if d.ndim > 0:
            d = _s.moveaxis(lax.expand_dims(d, tuple(builtins.range(y.ndim - d.ndim))), axis, -1)
    else:
        y, x = util.promote_dtypes_inexact("trapezoid", y, x)
        d = _r.diff(x) if x.ndim == 1 else _s.moveaxis(_r.diff(x, axis=axis), axis, -1)
    y = _s.moveaxis(y, axis, -1)
    if d.ndim == 0 or d.shape[-1] == 1:
        d = d if d.ndim == 0 else d[..., 0]
        return d * (y.sum(-1) - 0.5 * (y[..., 0] + y[..., -1]))
    return 0.5 * (d * (y[..., 1:] + y[..., :-1])).sum(-1)


def unwrap(p, discont=None, axis=-1, period=2 * np.pi):
    """p with jumps between neighbours along axis larger than discont (period / 2 by default) replaced
    by their complement modulo period."""
    p, period = util.promote_dtypes("unwrap", p, period)
    if util.is_complex_dtype(p.dtype):
        raise ValueError("jnp.unwrap does not support complex inputs.")
    ax = util.canonicalize_axis(axis, p.ndim, "unwrap")
    if p.shape[ax] == 0:
        return p
    half = period // 2 if util.is_int_dtype(p.dtype) else period / 2
    discont = half if discont is None else discont
    dd = _r.diff(p, axis=ax)
    ddmod = _u.mod(dd + half, period) - half
    ddmod = _u.where((ddmod == -half) & (dd > 0), half, ddmod)
    correct = _u.where(_u.abs(dd) < discont, 0, ddmod - dd)
    rest = lax.slice_in_dim(p, 1, None, axis=ax) + _r.cumsum(correct, axis=ax)
    return _s.concatenate([lax.slice_in_dim(p, 0, 1, axis=ax), rest.astype(p.dtype)], axis=ax)


def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of 1-D x: columns x ** (N - 1), ..., x ** 0 (reversed when increasing)."""
    x = util.asarray_arg("vander", x)
    if x.ndim != 1:
        raise ValueError("x must be a one-dimensional array")
    N = x.shape[0] if N is None else _static_int(N, "vander: N")
    if N < 0:
        raise ValueError("N must be nonnegative")
    powers = np.arange(N) if increasing else np.arange(N - 1, -1, -1)
    return _u.power(x[:, None], _c.asarray(powers.astype(np.int32))[None, :].astype(x.dtype))


# ---------------------------------------------------------------------------------------------------------
# Window functions and i0

def _window(opname, M, rule):
    M = _static_int(M, f"M argument of jnp.{opname}")
    dt = dtypes.default_float_dtype()
    if M <= 1:
        return lax.full((builtins.max(M, 0),), 1, dt)
    return rule(lax.iota(dt, M), M)


def bartlett(M):
    """The triangular (Bartlett) window of M points."""
    return _window("bartlett", M, lambda n, M: 1 - _u.abs(2 * n + 1 - M) / (M - 1))


def blackman(M):
    """The Blackman window of M points."""
    return _window("blackman", M, lambda n, M: 0.42 - 0.5 * _u.cos(2 * np.pi * n / (M - 1))
                   + 0.08 * _u.cos(4 * np.pi * n / (M - 1)))


def hamming(M):
    """The Hamming window of M points."""
    return _window("hamming", M, lambda n, M: 0.54 - 0.46 * _u.cos(2 * np.pi * n / (M - 1)))


def hanning(M):
    """The Hann window of M points."""
    return _window("hanning", M, lambda n, M: 0.5 * (1 - _u.cos(2 * np.pi * n / (M - 1))))


def kaiser(M, beta):
    """The Kaiser window of M points with shape parameter beta."""
    def rule(n, M):
        alpha = 0.5 * (M - 1)
        return i0(beta * _u.sqrt(1 - ((n - alpha) / alpha) ** 2)) / i0(beta)
    return _window("kaiser", M, rule)


def _i0_value(x):
    ax = lax.abs(x)
    return lax.mul(lax.exp(ax), lax.bessel_i0e(ax))


def _i0_jvp(primals, tangents):
    x, = primals
    t, = tangents
    ax = lax.abs(x)
    d = lax.mul(lax.mul(lax.exp(ax), lax.bessel_i1e(ax)), lax.sign(x))  # I0' = I1, odd
    return _i0_value(x), lax.mul(d, t)


_i0 = None


def i0(x):
    """The modified Bessel function of the first kind of order 0."""
    global _i0
    x, = util.promote_args_inexact("i0", x)
    if not util.is_float_dtype(x.dtype):
        raise ValueError(f"Unsupported input type to jax.numpy.i0: {x.dtype}")
    if _i0 is None:
        from kiln._src.custom import custom_jvp
        _i0 = custom_jvp(_i0_value)
        _i0.defjvp(_i0_jvp)
    return _i0(x)


# ---------------------------------------------------------------------------------------------------------
# Polynomials (coefficients from the highest power down, as numpy.poly*)

def poly(seq_of_zeros):
    """The coefficients of the monic polynomial with the given roots (or a square matrix's eigenvalues)."""
    z, = util.promote_dtypes_inexact("poly", seq_of_zeros)
    z = _s.atleast_1d(z)
    if z.ndim == 2 and z.shape[0] == z.shape[1] and z.shape[0] != 0:
        z = _la.eigvals(z)
    if z.ndim != 1:
        raise ValueError("input must be 1d or non-empty square 2d array.")
    if z.shape[0] == 0:
        return _c.ones((), z.dtype)
    a = _c.ones((1,), z.dtype)
    for k in builtins.range(z.shape[0]):
        a = convolve(a, _s.stack([_c.ones((), z.dtype), -z[k]]), mode="full")
    return a


def polyadd(a1, a2):
    """The sum of two polynomials."""
    a1, a2 = util.promote_dtypes("polyadd", a1, a2)
    if a2.shape[0] > a1.shape[0]:
        a1, a2 = a2, a1
    return a1.at[a1.shape[0] - a2.shape[0]:].add(a2)


def polysub(a1, a2):
    """The difference of two polynomials."""
    a1, a2 = util.promote_dtypes("polysub", a1, a2)
    return polyadd(a1, -a2)


def polymul(a1, a2, *, trim_leading_zeros=False):
    """The product of two polynomials."""
    a1, a2 = util.promote_dtypes_inexact("polymul", a1, a2)
    if trim_leading_zeros and (a1.shape[0] > 1 or a2.shape[0] > 1):
        a1, a2 = trim_zeros(a1, trim="f"), trim_zeros(a2, trim="f")
    if a1.shape[0] == 0:
        a1 = _c.zeros(1, a2.dtype)
    if a2.shape[0] == 0:
        a2 = _c.zeros(1, a1.dtype)
    return convolve(a1, a2, mode="full")


def polydiv(u, v, *, trim_leading_zeros=False):
    """(quotient, remainder) of polynomial division u / v (the remainder keeps u's length unless
    trim_leading_zeros)."""
    u, v = util.promote_dtypes_inexact("polydiv", u, v)
    m, n = u.shape[0] - 1, v.shape[0] - 1
    scale = 1.0 / v[0]
    q = _c.zeros(builtins.max(m - n + 1, 1), u.dtype)
    for k in builtins.range(m - n + 1):
        d = scale * u[k]
        q = q.at[k].set(d)
        u = u.at[k:k + n + 1].add(-d * v)
    if trim_leading_zeros:
        tol = math.sqrt(float(dtypes.finfo(u.dtype).eps))
        keep = np.nonzero(np.abs(np.asarray(core.concrete_or_error(u, "polydiv: trim_leading_zeros"))) > tol)[0]
        u = u[int(keep[0]):] if keep.size else u[u.shape[0]:]
    return q, u


def polyder(p, m=1):
    """The m-th derivative of a polynomial."""
    p, = util.promote_dtypes_inexact("polyder", p)
    m = _static_int(m, "'m' argument of jnp.polyder")
    if m < 0:
        raise ValueError("Order of derivative must be positive")
    if m == 0:
        return p
    n = p.shape[0]
    coeff = np.prod(np.arange(m, n)[None, :] - np.arange(m)[:, None], axis=0)[::-1] if n > m else np.zeros(0)
    return p[:n - m] * _c.asarray(coeff.astype(np.float64)).astype(p.dtype)


def polyint(p, m=1, k=None):
    """The m-th antiderivative of a polynomial, with integration constants k (a scalar or m of them)."""
    m = _static_int(m, "'m' argument of jnp.polyint")
    p, k = util.promote_dtypes_inexact("polyint", p, 0 if k is None else k)
    if m < 0:
        raise ValueError("Order of integral must be positive (see polyder)")
    k = _s.atleast_1d(k)
    if k.shape[0] == 1:
        k = _c.full((m,), k[0])
    if k.shape != (m,):
        raise ValueError("k must be a scalar or a rank-1 array of length 1 or m.")
    if m == 0:
        return p
    grid = np.arange(p.shape[0] + m)[None, :] - np.arange(m)[:, None]
    coeff = np.prod(np.maximum(1, grid), axis=0)[::-1].astype(np.float64)
    return _s.concatenate([p, k]) / _c.asarray(coeff).astype(p.dtype)


def polyval(p, x, *, unroll=16):
    """The polynomial p (coefficients along its first axis) evaluated at x by Horner's rule."""
    p, x = util.promote_dtypes("polyval", p, x)
    shape = util.broadcast_shapes(p.shape[1:], x.shape, opname="polyval")
    y = lax.full(shape, 0, x.dtype)
    y, _ = lax.scan(lambda acc, c: (acc * x + c, None), y, p, unroll=unroll)
    return y


def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """The least-squares polynomial of degree deg through (x, y) (y: one or several columns), as
    numpy.polyfit: the coefficients; with full, also residuals, rank, singular values and rcond; with
    cov, the coefficients' covariance (scaled by the residual variance unless cov='unscaled')."""
    x, y = util.asarray_arg("polyfit", x), util.asarray_arg("polyfit", y)
    deg = _static_int(deg, "polyfit: deg")
    order = deg + 1
    if deg < 0:
        raise ValueError("expected deg >= 0")
    if x.ndim != 1:
        raise TypeError("expected 1D vector for x")
    if x.shape[0] == 0:
        raise TypeError("expected non-empty vector for x")
    if y.ndim < 1 or y.ndim > 2:
        raise TypeError("expected 1D or 2D array for y")
    if x.shape[0] != y.shape[0]:
        raise TypeError("expected x and y to have same length")
    x, y = util.promote_dtypes_inexact("polyfit", x, y)
    if rcond is None:
        rcond = x.shape[0] * float(dtypes.finfo(x.dtype).eps)
    lhs, rhs = vander(x, order), y
    if w is not None:
        w, = util.promote_dtypes_inexact("polyfit", w)
        if w.ndim != 1:
            raise TypeError("expected a 1-d array for weights")
        if w.shape[0] != y.shape[0]:
            raise TypeError("expected w and y to have the same length")
        lhs = lhs * w[:, None]
        rhs = rhs * (w[:, None] if rhs.ndim == 2 else w)
    scale = _u.sqrt((lhs * lhs).sum(axis=0))
    lhs = lhs / scale[None, :]
    c, resids, rank, s = _la.lstsq(lhs, rhs, rcond)
    c = (c.T / scale[None, :]).T if c.ndim > 1 else c / scale
    if full:
        return c, resids, rank, s, _c.asarray(rcond)
    if cov:
        base = _la.inv(_la.dot(lhs.T, lhs)) / _la.outer(scale, scale)
        if cov == "unscaled":
            fac = _c.asarray(1.0, dtype=base.dtype)
        else:
            if x.shape[0] <= order:
                raise ValueError("the number of data points must exceed order to scale the covariance matrix")
            fac = resids / (x.shape[0] - order)
        if y.ndim == 1:
            return c, base * _s.atleast_1d(fac)[None]
        return c, base[:, :, None] * _s.atleast_1d(fac)[None, None, :]
    return c


def roots(p, *, strip_zeros=True):
    """The roots of a polynomial (complex), as the eigenvalues of its companion matrix; leading zeros are
    stripped (they need p's values: under jit pass strip_zeros=False, which turns them into NaN roots)."""
    p, = util.promote_dtypes_inexact("roots", p)
    p = _s.atleast_1d(p)
    if p.ndim != 1:
        raise ValueError("Input must be a rank-1 array.")
    cdt = dtypes.complex_of(p.dtype) if not util.is_complex_dtype(p.dtype) else p.dtype
    if p.shape[0] < 2:
        return _c.zeros((0,), cdt)
    nonzero = p != 0
    lead = _u.where(_r.any(nonzero), _r.argmax(nonzero), p.shape[0])
    if strip_zeros:
        lead = int(core.concrete_or_error(lead, "The error occurred in the jnp.roots() function. To use this "
                                                "within a JIT-compiled context, pass strip_zeros=False, but be "
                                                "aware that leading zeros will result in some returned roots being "
                                                "set to NaN."))
        return _companion_roots(p[lead:], cdt)
    q = _u.where(lead == p.shape[0], 1.0, p)  # all zero: avoid a singular companion matrix
    r = _companion_roots(_s.roll(q, -lead), cdt)
    r = lax.sort_key_val(r == 0, r)[1]  # the zero roots (from the rolled-in zeros) last
    return _u.where(lax.iota(np.int32, r.shape[0]) < r.shape[0] - lead, r, complex(np.nan, np.nan))


def _companion_roots(p, cdt):
    n = p.shape[0]
    if n < 2:
        return _c.zeros((0,), cdt)
    A = _s.diag(_c.ones((n - 2,), p.dtype), -1)
    A = A.at[0, :].set(-p[1:] / p[0])
    return _la.eigvals(A).astype(cdt)


# ---------------------------------------------------------------------------------------------------------
# Set operations (size= gives static shapes, padded with fill_value, as JAX)

def _flat_pair(opname, a, b):
    a, b = util.promote_dtypes(opname, a, b)
    return _s.ravel(a), _s.ravel(b)


def _in1d(a, b, invert, method="auto"):
    a, b = _flat_pair("isin", a, b)
    if a.shape[0] == 0 or b.shape[0] == 0:
        return lax.full(a.shape, bool(invert), np.bool_)
    if method in ("auto", "compare_all"):
        eq = a[:, None] == b[None, :]
        return ~_r.any(eq, -1) if invert else _r.any(eq, -1)
    if method == "binary_search" or method == "sort":
        bs = lax.sort(b)
        hit = a == bs[_u.clip(_s.searchsorted(bs, a), 0, bs.shape[0] - 1)]
        return ~hit if invert else hit
    raise ValueError(f"method={method!r} is not implemented; options are 'compare_all', 'binary_search', 'sort', "
                     "and 'auto'")


def isin(element, test_elements, assume_unique=False, invert=False, *, method="auto"):
    """Whether each element of `element` occurs in test_elements (element's shape)."""
    element = util.asarray_arg("isin", element)
    return _in1d(element, test_elements, invert, method).reshape(element.shape)


def _fill_after(vals, count, fill_value):
    """vals with positions from count on set to fill_value (None: the smallest of the kept values)."""
    keep = lax.iota(np.int32, vals.shape[0]) < count
    if fill_value is None:
        big = _u.where(keep, vals, _r.max(vals))
        return _u.where(keep, vals, _r.min(big))
    return _u.where(keep, vals, _c.asarray(fill_value, dtype=vals.dtype))


def setdiff1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    """The unique values of ar1 not in ar2, sorted; size= pads (or cuts) to a static length."""
    a1, a2 = util.asarray_arg("setdiff1d", ar1), util.asarray_arg("setdiff1d", ar2)
    a1, a2 = _s.ravel(a1), _s.ravel(a2)
    fill = lax.full((), 0 if fill_value is None else fill_value, a1.dtype)
    if size is not None:
        size = _static_int(size, "The error arose in setdiff1d()")
    if a1.shape[0] == 0:
        return lax.full((size or 0,), fill, a1.dtype)
    if not assume_unique:
        a1 = _s.unique(a1, size=None if size is None else a1.shape[0])
    mask = _in1d(a1, a2, invert=True)
    if size is None:
        return a1[np.asarray(core.concrete_or_error(mask, "setdiff1d: pass size= under jit"))]
    if not assume_unique:  # the unique() padding repeats a1[0]: not part of the result
        n_unique = a1.shape[0] + 1 - _r.sum(a1 == a1[0])
        mask = _u.where(lax.iota(np.int32, a1.shape[0]) < n_unique, mask, False)
    picked = a1[_s.nonzero(mask, size=size)[0]]
    return _u.where(lax.iota(np.int32, size) < _r.sum(mask), picked, fill)


def union1d(ar1, ar2, *, size=None, fill_value=None):
    """The sorted unique values in either array."""
    a1, a2 = util.asarray_arg("union1d", ar1), util.asarray_arg("union1d", ar2)
    if size is not None:
        size = _static_int(size, "The error arose in union1d()")
    return _s.unique(_s.concatenate([_s.ravel(a1), _s.ravel(a2)]), size=size, fill_value=fill_value)


def _unique_padded(x):
    """(sorted unique values of 1-D x at the front, their first indices in x, how many there are), padded
    to x's length with 0 values and indices."""
    n = x.shape[0]
    vals, perm = lax.sort((x, lax.iota(np.int32, n)), num_keys=1)
    first = _s.concatenate([_c.ones((1,), bool), vals[1:] != vals[:-1]])
    count = _r.sum(first.astype(np.int32))
    slot = _u.where(first, _r.cumsum(first.astype(np.int32)) - 1, n)
    out = lax.full((n,), 0, x.dtype).at[slot].set(vals, mode="drop")
    idx = lax.full((n,), 0, np.int32).at[slot].set(perm, mode="drop")
    return out, idx, count


def setxor1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    """The sorted values in exactly one of the two arrays."""
    a1, a2 = _flat_pair("setxor1d", ar1, ar2)
    if size is None:
        if not assume_unique:
            a1, a2 = _s.unique(a1), _s.unique(a2)
        aux = _s.concatenate([a1, a2])
        if aux.shape[0] == 0:
            return aux
        aux = lax.sort(aux)
        flag = np.concatenate([[True], np.asarray(aux[1:] != aux[:-1]), [True]])
        return aux[flag[1:] & flag[:-1]]
    size = _static_int(size, "setxor1d: size")
    if assume_unique:
        arr, valid = _s.concatenate([a1, a2]), None
    else:
        u1, _, n1 = _unique_padded(a1)
        u2, _, n2 = _unique_padded(a2)
        arr = lax.dynamic_update_slice(_s.concatenate([u1, u2]), u2, (n1,))
        valid = lax.iota(np.int32, arr.shape[0]) < n1 + n2
    if arr.shape[0] == 0:
        return lax.full((size,), 0 if fill_value is None else fill_value, arr.dtype)
    if valid is None:
        aux = lax.sort(arr)
        n = arr.shape[0]
    else:
        _, aux = lax.sort((~valid, arr), num_keys=2)
        n = n1 + n2
    pos = lax.iota(np.int32, aux.shape[0])
    differs_prev = _s.concatenate([_c.ones((1,), bool), aux[1:] != aux[:-1]])
    differs_next = _s.concatenate([aux[1:] != aux[:-1], _c.ones((1,), bool)])
    differs_next = differs_next | (pos == n - 1)
    single = differs_prev & differs_next & (pos < n)
    idx = _s.nonzero(single, size=size, fill_value=aux.shape[0])[0]
    vals = aux.at[idx].get(mode="fill", fill_value=0)
    return _fill_after(vals, _r.sum(single.astype(np.int32)), fill_value)


def intersect1d(ar1, ar2, assume_unique=False, return_indices=False, *, size=None, fill_value=None):
    """The sorted values in both arrays; return_indices adds where they first occur in each."""
    a1, a2 = _flat_pair("intersect1d", ar1, ar2)
    n_1 = a1.shape[0]
    if size is None:
        ind1 = ind2 = None
        if not assume_unique:
            if return_indices:
                a1, ind1 = _s.unique(a1, return_index=True)
                a2, ind2 = _s.unique(a2, return_index=True)
            else:
                a1, a2 = _s.unique(a1), _s.unique(a2)
        aux, order = lax.sort((_s.concatenate([a1, a2]), lax.iota(np.int32, a1.shape[0] + a2.shape[0])), num_keys=1)
        mask = np.asarray(core.concrete_or_error(aux[1:] == aux[:-1], "intersect1d: pass size= under jit"))
        out = aux[:-1][mask]
        if not return_indices:
            return out
        i1, i2 = order[:-1][mask], order[1:][mask] - a1.shape[0]
        if ind1 is not None:
            i1, i2 = ind1[i1], ind2[i2]
        return out, i1.astype(_default_int()), i2.astype(_default_int())
    size = _static_int(size, "intersect1d: size")
    n_2 = a2.shape[0]
    if assume_unique:
        ind1, nu1, ind2 = lax.iota(np.int32, n_1), n_1, lax.iota(np.int32, n_2)
        arr = _s.concatenate([a1, a2])
        aux, order = lax.sort((arr, lax.iota(np.int32, arr.shape[0])), num_keys=1)
        valid = _c.ones(arr.shape[0], bool)
    else:
        u1, ind1, nu1 = _unique_padded(a1)
        u2, ind2, nu2 = _unique_padded(a2)
        arr = lax.dynamic_update_slice(_s.concatenate([u1, _c.zeros_like(u2)]), u2, (nu1,))
        valid = lax.iota(np.int32, arr.shape[0]) < nu1 + nu2
        _, aux, order = lax.sort((~valid, arr, lax.iota(np.int32, arr.shape[0])), num_keys=2)
    both = (aux[1:] == aux[:-1]) & valid[1:]
    count = _r.sum(both.astype(np.int32))
    pick = _s.nonzero(both, size=size, fill_value=aux.shape[0])[0]
    vals = _fill_after(aux.at[pick].get(mode="fill", fill_value=0), count, fill_value)
    if not return_indices:
        return vals
    in_result = lax.iota(np.int32, size) < count
    i1 = _u.where(in_result, order.at[pick].get(mode="fill", fill_value=n_1), n_1)
    i2 = _u.where(in_result, order.at[pick + 1].get(mode="fill", fill_value=n_2) - nu1, n_2)
    i1 = ind1.at[i1].get(mode="fill", fill_value=n_1)
    i2 = ind2.at[i2].get(mode="fill", fill_value=n_2)
    return vals, i1.astype(_default_int()), i2.astype(_default_int())


class _UniqueAllResult(NamedTuple):
    values: object
    indices: object
    inverse_indices: object
    counts: object


class _UniqueCountsResult(NamedTuple):
    values: object
    counts: object


class _UniqueInverseResult(NamedTuple):
    values: object
    inverse_indices: object


def _unique(opname, x, size, fill_value, **returns):
    x = util.asarray_arg(opname, x)
    if size is not None and fill_value is None and x.size:
        fill_value = lax.sort(_s.ravel(x))[0]  # as JAX: padding repeats the first sorted value
    return x, _s.unique(x, equal_nan=False, size=size, fill_value=fill_value, **returns)


def unique_all(x, /, *, size=None, fill_value=None):
    """(values, indices, inverse_indices, counts) of the unique values of x (NaNs distinct), array API."""
    x, (v, i, inv, c) = _unique("unique_all", x, size, fill_value, return_index=True, return_inverse=True,
                                return_counts=True)
    return _UniqueAllResult(v, i, inv.reshape(x.shape), c)


def unique_counts(x, /, *, size=None, fill_value=None):
    """(values, counts) of the unique values of x."""
    return _UniqueCountsResult(*_unique("unique_counts", x, size, fill_value, return_counts=True)[1])


def unique_inverse(x, /, *, size=None, fill_value=None):
    """(values, inverse_indices): the unique values and, for each element of x, its value's index."""
    x, (v, inv) = _unique("unique_inverse", x, size, fill_value, return_inverse=True)
    return _UniqueInverseResult(v, inv.reshape(x.shape))


def unique_values(x, /, *, size=None, fill_value=None):
    """The sorted unique values of x."""
    return _unique("unique_values", x, size, fill_value)[1]


# ---------------------------------------------------------------------------------------------------------
# Float bits: frexp, ldexp, nextafter, spacing, modf; bitwise_count, sort_complex

def _frexp_value(x):
    info = dtypes.finfo(x.dtype)
    nmant, nexp = int(info.nmant), int(info.nexp)
    it = np.dtype(f"int{x.dtype.itemsize * 8}")
    bias = (1 << (nexp - 1)) - 1
    sub = _u.abs(x) < float(info.tiny)  # subnormal: scale into the normal range first
    xn = _u.where(sub, x * float(2.0 ** nmant), x)
    bits = lax.bitcast_convert_type(xn, it)
    field_mask = lax.full((), (1 << nexp) - 1, it)
    e = lax.sub(lax.and_(lax.shift_right_logical(bits, lax.full((), nmant, it)), field_mask),
                lax.full((), bias - 1, it))
    e = e - _u.where(sub, nmant, 0).astype(it)
    mant_bits = lax.or_(lax.and_(bits, lax.full((), ~(((1 << nexp) - 1) << nmant), it)),
                        lax.full((), (bias - 1) << nmant, it))
    mant = lax.bitcast_convert_type(mant_bits, x.dtype)
    keep = _u.isinf(x) | _u.isnan(x) | (x == 0)
    return _u.where(keep, x, mant), _u.where(keep, 0, e).astype(np.int32)


def _frexp_jvp(primals, tangents):
    """The mantissa's derivative is 2 ** -exponent (JAX's rule; the bit twiddling has none)."""
    x, = primals
    t, = tangents
    m, e = _frexp_value(x)
    return (m, e), (t * _u.exp2(-e.astype(t.dtype)), lax.full(e.shape, 0, e.dtype))


_frexp = None


def frexp(x, /):
    """(mantissa, exponent): x = mantissa * 2 ** exponent with |mantissa| in [0.5, 1) (0, inf, NaN kept
    with exponent 0); the exponent is int32. The mantissa is differentiable (so is ldexp, built on it)."""
    global _frexp
    x, = util.promote_dtypes_inexact("frexp", x)
    if util.is_complex_dtype(x.dtype):
        raise TypeError("frexp does not support complex-valued inputs")
    if _frexp is None:
        from kiln._src.custom import custom_jvp
        _frexp = custom_jvp(_frexp_value)
        _frexp.defjvp(_frexp_jvp)
    return _frexp(x)


def ldexp(x1, x2, /):
    """x1 * 2 ** x2 (x2 integer), without overflow in the intermediate power."""
    x1, x2 = util.asarray_arg("ldexp", x1), util.asarray_arg("ldexp", x2)
    if util.is_complex_dtype(x1.dtype) or util.is_inexact_dtype(x2.dtype):
        raise ValueError(f"ldexp not supported for input types {(x1.dtype, x2.dtype)}")
    x1, = util.promote_dtypes_inexact("ldexp", x1)
    x2 = lax.convert_element_type(x2, x1.dtype)  # as JAX: a bool exponent counts 1, not `or`
    m, e = frexp(x1)
    e = e.astype(x2.dtype) + x2
    m = _u.where(e > 0, m * 2, m)  # an exponent one past the range may still give a finite result
    e = _u.where(e > 0, e - 1, e)
    out = m * _u.exp2(e)
    return _u.where(_u.isinf(x1) | (x1 == 0), x1, out)


def nextafter(x1, x2, /):
    """The next representable float after x1 towards x2, element-wise."""
    x1, x2 = util.promote_args_inexact("nextafter", x1, x2)
    if util.is_complex_dtype(x1.dtype):
        raise TypeError("nextafter does not accept complex inputs")
    return lax.nextafter(x1, x2)


def spacing(x, /):
    """The distance from x to the next float away from zero (towards +inf for float16, as NumPy)."""
    x, = util.promote_args_inexact("spacing", x)
    if util.is_complex_dtype(x.dtype):
        raise ValueError("jnp.spacing is not defined for complex inputs.")
    inf = _scalar(x, np.inf)
    if x.dtype == np.float16:
        return lax.nextafter(x, lax.broadcast_in_dim(inf, x.shape, ())) - x
    out = lax.nextafter(x, _u.copysign(inf, x)) - x
    return _u.where(out == 0, _u.copysign(_scalar(x, float(dtypes.finfo(x.dtype).smallest_subnormal)), x), out)


def modf(x, /, out=None):
    """(fractional part, integral part), both with x's sign."""
    util.check_no_out("modf", out)
    x, = util.promote_dtypes_inexact("modf", x)
    whole = _u.where(x >= 0, _u.floor(x), _u.ceil(x))
    return x - whole, whole


def bitwise_count(x, /):
    """The number of set bits of |x| element-wise (uint8), as numpy.bitwise_count."""
    x = util.asarray_arg("bitwise_count", x)
    if not (util.is_int_dtype(x.dtype) or util.is_bool_dtype(x.dtype)):
        raise TypeError(f"bitwise_count: only integer and bool inputs are supported, got {x.dtype}")
    if util.is_bool_dtype(x.dtype):
        return x.astype(np.uint8)
    return lax.population_count(_u.abs(x)).astype(np.uint8)


def sort_complex(a):
    """a sorted (real part first, then imaginary) along its last axis, as a complex array."""
    a = util.asarray_arg("sort_complex", a)
    out = lax.sort(a)
    return out if util.is_complex_dtype(out.dtype) else out.astype(dtypes.complex_of(util.to_inexact_dtype(a.dtype)))
