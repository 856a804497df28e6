"""kiln.scipy.special: special functions as jax.scipy.special, built on kiln.lax and kiln.numpy's
internal modules (never on the public kiln.numpy namespace, which imports nothing from here).
"""

import math

import numpy as np

from kiln import lax
from kiln._src.numpy import util, reductions
from kiln._src.numpy.util import promote_args_inexact, full_like_scalar as _c

__all__ = ["logsumexp", "erf", "erfc", "erfinv", "gammaln", "gamma", "betaln", "digamma", "expit",
           "logit", "xlogy", "xlog1py", "ndtr", "ndtri", "entr", "polygamma"]


def _unary(name, rule):
    def fn(x, /):
        x, = promote_args_inexact(name, x)
        return rule(x)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{name} element-wise, as scipy.special.{name} (integer inputs give floats)."
    return fn


_SQRT1_2 = math.sqrt(0.5)
_SQRT2 = math.sqrt(2.0)

erf = _unary("erf", lax.erf)
erfc = _unary("erfc", lax.erfc)
erfinv = _unary("erfinv", lax.erf_inv)
gammaln = _unary("gammaln", lax.lgamma)
digamma = _unary("digamma", lax.digamma)
expit = _unary("expit", lax.logistic)
logit = _unary("logit", lambda x: lax.log(lax.div(x, lax.sub(_c(x, 1), x))))
ndtr = _unary("ndtr", lambda x: lax.mul(_c(x, 0.5), lax.erfc(lax.mul(x, _c(x, -_SQRT1_2)))))
ndtri = _unary("ndtri", lambda p: lax.mul(_c(p, _SQRT2),
                                          lax.erf_inv(lax.sub(lax.mul(p, _c(p, 2)), _c(p, 1)))))


def polygamma(n, x):
    """The n-th derivative of digamma (polygamma(0, x) = digamma(x)), as jax.scipy.special.polygamma.
    n: a non-negative integer known while tracing (a Python int or a concrete integer scalar).
    Computed as the n-th derivative of kiln's digamma, whose derivative rule is a trigamma accurate to
    about 1e-15 (relative) for n = 1; each further order differentiates that series."""
    from kiln._src import ad, core
    if isinstance(n, core.Tracer) and n._cval is None:
        raise NotImplementedError("polygamma: a traced order n is not supported yet by kiln; pass n as a Python int")
    n_arr = np.asarray(n)
    if n_arr.dtype.kind not in "iu":
        raise ValueError(f"Argument `n` to polygamma must be of integer type. Got dtype {n_arr.dtype}.")
    if n_arr.ndim:
        raise NotImplementedError(f"polygamma: an array of orders (shape {n_arr.shape}) is not supported yet by "
                                  "kiln; call it once per order with a Python int")
    order = int(n_arr)
    if order < 0:
        raise ValueError(f"polygamma: the order n must be non-negative, got {order}")
    x, = promote_args_inexact("polygamma", x)
    f = lax.digamma
    for _ in range(order):
        f = (lambda g: lambda v: ad.jvp(g, (v,), (lax.full_like(v, 1),))[1])(f)
    return f(x)


def _gamma(x):
    zero = _c(x, 0)
    floor_x = lax.floor(x)
    odd_floor = lax.ne(lax.sub(floor_x, lax.mul(lax.floor(lax.mul(floor_x, _c(x, 0.5))), _c(x, 2))), zero)
    negative = lax.and_(lax.lt(x, zero), odd_floor)
    magnitude = lax.exp(lax.lgamma(x))
    out = lax.select(negative, lax.neg(magnitude), magnitude)
    pole = lax.and_(lax.le(x, zero), lax.eq(x, floor_x))
    return lax.select(pole, _c(x, np.nan), out)


gamma = _unary("gamma", _gamma)


def betaln(a, b, /):
    """log|B(a, b)| = gammaln(a) + gammaln(b) - gammaln(a + b)."""
    a, b = promote_args_inexact("betaln", a, b)
    return lax.sub(lax.add(lax.lgamma(a), lax.lgamma(b)), lax.lgamma(lax.add(a, b)))


def _x_log(name, log_rule):
    def fn(x, y, /):
        x, y = promote_args_inexact(name, x, y)
        zero = _c(x, 0)
        x_zero = lax.eq(x, zero)
        # x == 0 gives 0 even where log(y) is -inf; y is made safe there so gradients stay finite.
        safe_y = lax.select(x_zero, _c(y, 1) if log_rule is lax.log else zero, y)
        return lax.select(x_zero, zero, lax.mul(x, log_rule(safe_y)))
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"x * {'log(y)' if log_rule is lax.log else 'log1p(y)'}, defined as 0 where x == 0."
    return fn


xlogy = _x_log("xlogy", lax.log)
xlog1py = _x_log("xlog1py", lax.log1p)


def entr(x, /):
    """-x log x for x > 0, 0 at 0, -inf for x < 0."""
    x, = promote_args_inexact("entr", x)
    zero = _c(x, 0)
    safe = lax.select(lax.gt(x, zero), x, _c(x, 1))
    val = lax.neg(lax.mul(x, lax.log(safe)))
    return lax.select(lax.lt(x, zero), _c(x, -np.inf), lax.select(lax.eq(x, zero), zero, val))


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, where=None):
    """log(sum(b * exp(a))) over `axis`, computed stably (the max is factored out).

    With return_sign, returns (log|sum|, sign(sum)); otherwise a negative sum gives nan.
    """
    if b is None:
        a, = promote_args_inexact("logsumexp", a)
    else:
        a, b = promote_args_inexact("logsumexp", a, b)
    axes = util.canonicalize_axes(axis, a.ndim, "logsumexp")
    amax = reductions.max(a, axes, keepdims=True, where=where, initial=-np.inf)
    amax = lax.stop_gradient(lax.select(lax.is_finite(amax), amax, _c(amax, 0)))
    amax_b = util.broadcast_to_shape(amax, a.shape, "logsumexp")
    exp_a = lax.exp(lax.sub(a, amax_b))
    if b is not None:
        exp_a = lax.mul(exp_a, b)
    total = reductions.sum(exp_a, axes, keepdims=keepdims, where=where)
    sign = lax.sign(total)
    if b is not None or return_sign:
        total = lax.abs(total)
    shift = amax if keepdims else lax.reshape(amax, tuple(total.shape))
    out = lax.add(lax.log(total), shift)
    if return_sign:
        return out, sign
    if b is not None:
        out = lax.select(lax.lt(sign, _c(sign, 0)), _c(out, np.nan), out)
    return out
