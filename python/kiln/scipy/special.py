"""kiln.scipy.special: special functions as jax.scipy.special. This module holds the elementwise basics (on
kiln.lax and kiln.numpy's internal modules) and re-exports the families, which live in _special_*.py on
kiln.lax and kiln.numpy: gamma and zeta, incomplete gamma and beta, error functions, exponential integrals,
Bessel functions, hypergeometric functions. kiln.numpy imports nothing from here; kiln.nn does.
"""

import math

import numpy as np

from kiln import lax
from kiln._src.custom import custom_jvp
from kiln._src.numpy import util, reductions
from kiln._src.numpy.util import promote_args_inexact, full_like_scalar as _c
from kiln.scipy._special_common import real_args as _real_args
from kiln.scipy._special_gamma import (gammasgn, gamma, loggamma, betaln, beta, factorial, comb, poch,  # noqa: F401
                                       multigammaln, zeta, polygamma, bernoulli)
from kiln.scipy._special_incomplete import gammainc, gammaincc, betainc  # noqa: F401
from kiln.scipy._special_error import (ndtri, log_ndtr, erfcx, dawsn, wofz, fresnel, owens_t)  # noqa: F401
from kiln.scipy._special_expint import expi, exp1, expn, sici, spence  # noqa: F401
from kiln.scipy._special_bessel import i0, i0e, i1, i1e, bessel_jn, sph_harm_y  # noqa: F401
from kiln.scipy._special_hyper import hyp1f1, hyp2f1  # noqa: F401

__all__ = ["bernoulli", "bessel_jn", "beta", "betainc", "betaln", "boxcox", "boxcox1p", "comb", "dawsn", "digamma",
           "entr", "erf", "erfc", "erfcx", "erfinv", "exp1", "expi", "expit", "expn", "factorial", "fresnel", "gamma",
           "gammainc", "gammaincc", "gammaln", "gammasgn", "hyp1f1", "hyp2f1", "i0", "i0e", "i1", "i1e", "kl_div",
           "log_ndtr", "log_softmax", "loggamma", "logit", "logsumexp", "multigammaln", "ndtr", "ndtri", "owens_t",
           "poch", "polygamma", "rel_entr", "sici", "softmax", "spence", "sph_harm_y", "wofz", "xlog1py", "xlogy",
           "zeta"]


def _unary(name, rule):
    def fn(x, /):
        x, = promote_args_inexact(name, x)
        return rule(x)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{name} element-wise, as scipy.special.{name} (integer inputs give floats)."
    return fn


_SQRT1_2 = math.sqrt(0.5)

erf = _unary("erf", lax.erf)
erfc = _unary("erfc", lax.erfc)
erfinv = _unary("erfinv", lax.erf_inv)
gammaln = _unary("gammaln", lax.lgamma)
digamma = _unary("digamma", lax.digamma)
expit = _unary("expit", lax.logistic)
logit = _unary("logit", lambda x: lax.log(lax.div(x, lax.sub(_c(x, 1), x))))
ndtr = _unary("ndtr", lambda x: lax.mul(_c(x, 0.5), lax.erfc(lax.mul(x, _c(x, -_SQRT1_2)))))


def _x_log(name, log_rule, log_rule_derivative):
    """x * log_rule(y), JAX's way: 0 where x == 0 (even where the log is -inf) unless y is NaN (scipy's
    rule), and a custom JVP, tx log_rule(y) + ty x log_rule'(y), so that the derivative in x at x == 0 is
    log_rule(y) (the select alone would give 0)."""
    def value(x, y):
        keep = lax.or_(lax.ne(x, _c(x, 0)), lax.ne(y, y))
        return lax.select(keep, lax.mul(x, log_rule(y)), _c(x, 0))

    def jvp(primals, tangents):
        (x, y), (tx, ty) = primals, tangents
        return rule(x, y), lax.add(lax.mul(tx, log_rule(y)), lax.mul(ty, lax.mul(x, log_rule_derivative(y))))

    rule = custom_jvp(value)
    rule.defjvp(jvp)

    def fn(x, y, /):
        x, y = promote_args_inexact(name, x, y)
        return rule(x, y)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"x * {'log(y)' if log_rule is lax.log else 'log1p(y)'}, defined as 0 where x == 0 (NaN y kept)."
    return fn


xlogy = _x_log("xlogy", lax.log, lambda y: lax.div(_c(y, 1), y))
xlog1py = _x_log("xlog1py", lax.log1p, lambda y: lax.div(_c(y, 1), lax.add(_c(y, 1), y)))


_xlogx = custom_jvp(lambda x: xlogy(x, x))
_xlogx.defjvp(lambda primals, tangents: (_xlogx(primals[0]), lax.mul(
    tangents[0], lax.add(lax.log(primals[0]), _c(primals[0], 1)))))  # JAX's: log x + 1, inf at 0


def entr(x, /):
    """-x log x for x > 0, 0 at 0, -inf for x < 0 (derivative -(log x + 1) through JAX's xlogx rule)."""
    x, = promote_args_inexact("entr", x)
    if util.is_complex_dtype(x.dtype):
        raise ValueError("entr does not support complex-valued inputs.")
    return lax.select(lax.lt(x, _c(x, 0)), _c(x, -np.inf), lax.neg(_xlogx(x)))


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, where=None):
    """log(sum(b * exp(a))) over `axis`, computed stably (the max is factored out).

    With return_sign, returns (log|sum|, sign(sum)); otherwise a negative sum gives nan.
    """
    if b is None:
        a, = promote_args_inexact("logsumexp", a)
    else:
        a, b = promote_args_inexact("logsumexp", a, b)
    axes = util.canonicalize_axes(axis, a.ndim, "logsumexp")
    is_complex = a.dtype.kind == "c"
    # complex a: the real parts' maximum is factored out, and the sum's log keeps its phase (as JAX)
    amax = reductions.max(lax.real(a) if is_complex else a, axes, keepdims=True, where=where, initial=-np.inf)
    amax = lax.stop_gradient(lax.select(lax.is_finite(amax), amax, _c(amax, 0)))
    amax_b = util.broadcast_to_shape(amax, a.shape, "logsumexp")
    if is_complex:
        amax_b = lax.convert_element_type(amax_b, a.dtype)
    exp_a = lax.exp(lax.sub(a, amax_b))
    if b is not None:
        exp_a = lax.mul(exp_a, b)
    total = reductions.sum(exp_a, axes, keepdims=keepdims, where=where)
    sign = lax.sign(total)
    if return_sign or (b is not None and not is_complex):
        total = lax.abs(total)
    shift = amax if keepdims else lax.reshape(amax, tuple(total.shape))
    if total.dtype != shift.dtype:
        shift = lax.convert_element_type(shift, total.dtype)
    out = lax.add(lax.log(total), shift)
    if return_sign:
        return out, sign
    if b is not None and not is_complex:
        out = lax.select(lax.lt(sign, _c(sign, 0)), _c(out, np.nan), out)
    return out


def rel_entr(p, q, /):
    """p log(p / q) for p, q > 0; 0 where p == 0 and q >= 0; inf elsewhere (as scipy.special.rel_entr)."""
    p, q = _real_args("rel_entr", p, q)
    zero = _c(p, 0)
    both_positive = lax.bitwise_and(lax.gt(p, zero), lax.gt(q, zero))
    p_zero = lax.bitwise_and(lax.eq(p, zero), lax.ge(q, zero))
    safe_p = lax.select(both_positive, p, _c(p, 1))
    safe_q = lax.select(both_positive, q, _c(q, 1))
    value = lax.mul(safe_p, lax.log(lax.div(safe_p, safe_q)))  # JAX's log p - log q cancels where p ~ q
    return lax.select(both_positive, value, lax.select(p_zero, zero, _c(p, np.inf)))


def kl_div(p, q, /):
    """The elementwise Kullback-Leibler term p log(p / q) - p + q (rel_entr(p, q) - p + q)."""
    p, q = _real_args("kl_div", p, q)
    return lax.add(lax.sub(rel_entr(p, q), p), q)


def _box_cox(name, log_rule):
    def fn(x, lmbda, /):
        x, lmbda = promote_args_inexact(name, x, lmbda)
        is_zero = lax.eq(lmbda, _c(lmbda, 0))
        safe_lmbda = lax.select(is_zero, _c(lmbda, 1), lmbda)
        log_x = log_rule(x)
        return lax.select(is_zero, log_x, lax.div(lax.expm1(lax.mul(safe_lmbda, log_x)), safe_lmbda))
    fn.__name__ = fn.__qualname__ = name
    what = "x" if log_rule is lax.log else "1 + x"
    fn.__doc__ = f"The Box-Cox transformation of {what}: (({what})**lmbda - 1) / lmbda, log({what}) where lmbda == 0."
    return fn


boxcox = _box_cox("boxcox", lax.log)
boxcox1p = _box_cox("boxcox1p", lax.log1p)


def softmax(x, /, *, axis=None):
    """exp(x) / sum(exp(x)) over `axis` (all axes by default), as kiln.nn.softmax."""
    from kiln import nn  # kiln.nn imports this module
    return nn.softmax(x, axis=axis)


def log_softmax(x, /, *, axis=None):
    """x - logsumexp(x) over `axis` (all axes by default), as kiln.nn.log_softmax."""
    from kiln import nn
    return nn.log_softmax(x, axis=axis)
