"""The confluent and Gauss hypergeometric functions of kiln.scipy.special, hyp1f1 and hyp2f1: JAX's series,
asymptotic expansion and digamma transformation, plus the Kummer, Pfaff and 1 - x transformations where
JAX's direct series cancels or diverges (x < 0, and x in (0.9, 1)). Built on kiln.lax and kiln.numpy;
re-exported by kiln.scipy.special.
"""

import numpy as np

from kiln import lax
from kiln import numpy as jnp
from kiln._src.ad import jvp
from kiln._src.api import jit
from kiln._src.custom import custom_jvp
from kiln.scipy._special_common import eps, iterate, real_args, safe
from kiln.scipy._special_gamma import gamma

_SERIES_STEPS = 1000
_ASYMPTOTIC_STEPS = 250


def _gamma_ratio_safe(*args):
    """1 / prod(gamma(args)), 0 where any argument is a pole (a non-positive integer)."""
    out = 1.0
    pole = False
    for v in args:
        is_pole = (v <= 0) & (v == jnp.floor(v))
        pole = is_pole | pole
        out = out / gamma(safe(~is_pole, v, 1.0))
    return jnp.where(pole, 0.0, out)


def _partials(fn, args):
    """d fn / d args[i] for each i, by forward mode through fn (its loops included)."""
    out = []
    for i in range(len(args)):
        def one(v, i=i):
            return fn(*args[:i], v, *args[i + 1:])
        out.append(jvp(one, (args[i],), (jnp.ones_like(args[i]),))[1])
    return out


# ---------------------------------------------------------------------------------------------------------
# hyp1f1

def _hyp1f1_series(a, b, x, active):
    """sum_k (a)_k / (b)_k x^k / k!."""
    e = eps(x)

    def step(state):
        total, k, term = state
        total = total + term
        term = term * (a + k) / (b + k) * x / (k + 1.0)
        return (total, k + 1.0, term), jnp.abs(term) / jnp.abs(total) > e

    return iterate(step, (jnp.ones_like(x), jnp.ones_like(x), a / b * x), active, _SERIES_STEPS)[0]


def _hyp1f1_asymptotic(a, b, x, active):
    """gamma(b) / gamma(a) e^x x^(a-b) sum_k (b-a)_k (1-a)_k / k! x^-k, for large positive x."""
    e = eps(x)

    def step(state):
        total, k, term = state
        total = total + term
        term = term * (b - a + k) * (1.0 - a + k) / (k + 1.0) / x
        return (total, k + 1.0, term), jnp.abs(term) / jnp.abs(total) > e

    total = iterate(step, (jnp.ones_like(x), jnp.ones_like(x), (b - a) * (1.0 - a) / x), active,
                    _ASYMPTOTIC_STEPS)[0]
    return gamma(b) * _gamma_ratio_safe(a) * jnp.exp(x) * x ** (a - b) * total


def _hyp1f1_impl(a, b, x):
    # Kummer: 1F1(a; b; x) = e^x 1F1(b - a; b; -x), so the series and expansion only see x >= 0
    negative = x < 0
    a2 = jnp.where(negative, b - a, a)
    y = jnp.abs(x)
    near = y < 100
    value = jnp.where(near, _hyp1f1_series(a2, b, safe(near, y, 1.0), near),
                      _hyp1f1_asymptotic(a2, b, safe(~near, y, 100.0), ~near))
    value = jnp.where(negative, jnp.exp(x) * value, value)
    # a terminating series whose Kummer partner does not terminate: sum it directly
    poly = (a <= 0) & (a == jnp.floor(a)) & negative & ~((a2 <= 0) & (a2 == jnp.floor(a2)))
    value = jnp.where(poly, _hyp1f1_series(a, b, x, poly), value)
    value = jnp.where(a == 0, 1.0, value)
    value = jnp.where((a == b) & (a != 0), jnp.exp(x), value)
    return jnp.where((b == 0) & (a != 0), np.inf, value)


_hyp1f1_jit = jit(_hyp1f1_impl)


@custom_jvp
def _hyp1f1(a, b, x):
    return _hyp1f1_jit(a, b, x)


def _hyp1f1_jvp(primals, tangents):
    a, b, x = primals
    ta, tb, tx = tangents
    d_da, d_db = _partials(_hyp1f1_jit, (a, b, x))[:2]
    return _hyp1f1(a, b, x), d_da * ta + d_db * tb + a / b * _hyp1f1(a + 1.0, b + 1.0, x) * tx


_hyp1f1.defjvp(_hyp1f1_jvp)


def hyp1f1(a, b, x):
    """Kummer's confluent hypergeometric function 1F1(a; b; x) for real arguments: the power series for
    |x| < 100 and the asymptotic expansion beyond (as JAX), on x >= 0 after Kummer's transformation (JAX
    sums the cancelling series for x < 0). Differentiable in a, b and x."""
    a, b, x = real_args("hyp1f1", a, b, x)
    return _hyp1f1(a, b, x)


# ---------------------------------------------------------------------------------------------------------
# hyp2f1

def _hyp2f1_series(a, b, c, x, active):
    """sum_k (a)_k (b)_k / (c)_k x^k / k! (terminates by itself where a or b is a non-positive integer)."""
    e = eps(x)

    def step(state):
        total, k, term = state
        total = total + term
        term = term * (a + k - 1.0) * (b + k - 1.0) / (c + k - 1.0) / k * x
        return (total, k + 1.0, term), jnp.abs(term) > e * jnp.abs(total)

    one = jnp.ones_like(x)
    return iterate(step, (jnp.zeros_like(x), one, one), active, _SERIES_STEPS)[0]


def _hyp2f1_digamma(a, b, c, x, active):
    """2F1 near x = 1 where d = c - a - b is an integer (DLMF 15.8.10 and 15.8.8, Cephes' hys2f1 path)."""
    digamma = lax.digamma
    rtol = eps(x)
    d = c - a - b
    s = 1.0 - x
    rd = jnp.round(d)
    up = rd >= 0
    e = jnp.where(up, d, -d)
    d1 = jnp.where(up, d, 0.0)
    d2 = jnp.where(up, 0.0, d)
    ard = jnp.abs(rd)
    ax = jnp.log(s)
    y = (digamma(jnp.ones_like(x)) + digamma(1.0 + e) - digamma(a + d1) - digamma(b + d1) - ax) / gamma(e + 1.0)
    p = (a + d1) * (b + d1) * s / gamma(e + 2.0)

    def log_step(state):
        p, q, t, y = state
        r = digamma(1.0 + t) + digamma(1.0 + t + e) - digamma(a + t + d1) - digamma(b + t + d1) - ax
        q = p * r
        y = y + q
        p = p * s * (a + t + d1) / (t + 1.0) * (b + t + d1) / (t + 1.0 + e)
        t = t + 1.0
        return (p, q, t, y), (t < 250) & (jnp.abs(q) >= rtol * jnp.abs(y))

    p, q, t, y = iterate(log_step, (p, y, jnp.ones_like(x), y), active, 250)

    def finite_step(state):
        i, p, t, y1 = state
        p = p * s * (a + t + d2) * (b + t + d2) / (1.0 - e + t)
        t = t + 1.0
        p = p / t
        return (i + 1.0, p, t, y1 + p), i + 1.0 < ard

    one = jnp.ones_like(x)
    _, _, _, y1 = iterate(finite_step, (one, one, jnp.zeros_like(x), one), active & (ard > 1), 1 << 30)
    gc = gamma(c)
    y1 = y1 * gamma(safe(e != 0, e, 1.0)) * gc * _gamma_ratio_safe(a + d1, b + d1)
    ys = y * gc * _gamma_ratio_safe(a + d2, b + d2)
    ys = jnp.where(jnp.fmod(ard, 2.0) == 1, -ys, ys)
    q = s ** rd
    summed = jnp.where(rd > 0, ys * q + y1, ys + y1 * q)
    return jnp.where(rd == 0, y * gc * _gamma_ratio_safe(a, b), summed)


def _hyp2f1_one_minus_x(a, b, c, x, active):
    """2F1 near x = 1 for non-integer d = c - a - b, by DLMF 15.8.4: two series in 1 - x."""
    d = c - a - b
    s = 1.0 - x
    first = gamma(c) * gamma(d) * _gamma_ratio_safe(c - a, c - b) * _hyp2f1_series(a, b, 1.0 - d, s, active)
    second = (s ** d * gamma(c) * gamma(-d) * _gamma_ratio_safe(a, b)
              * _hyp2f1_series(c - a, c - b, d + 1.0, s, active))
    return first + second


def _hyp2f1_unit(a, b, c, x, active):
    """2F1 for 0 <= x < 1 and non-terminating a, b: the series up to 0.9, a 1 - x transformation above."""
    e50 = eps(x) * 50
    d = c - a - b
    near_one = x > 0.9
    int_d = jnp.abs(d - jnp.round(d)) < e50
    xs = safe(near_one, x, 0.95)
    return jnp.where(near_one,
                     jnp.where(int_d, _hyp2f1_digamma(a, b, c, xs, active & near_one & int_d),
                               _hyp2f1_one_minus_x(a, b, c, xs, active & near_one & ~int_d)),
                     _hyp2f1_series(a, b, c, safe(~near_one, x, 0.5), active & ~near_one))


def _hyp2f1_below_one(a, b, c, x, active):
    """2F1 for x < 1: a polynomial where a or b is a non-positive integer; else, for x < 0, Pfaff's
    transformation 2F1(a, b; c; x) = (1 - x)^-a 2F1(a, c - b; c; x / (x - 1)) onto [0, 1)."""
    e50 = eps(x) * 50
    neg_int_a = (a <= 0) & (jnp.abs(a - jnp.round(a)) < e50)
    neg_int_b = (b <= 0) & (jnp.abs(b - jnp.round(b)) < e50)
    terminating = neg_int_a | neg_int_b
    poly = _hyp2f1_series(jnp.where(neg_int_a, jnp.round(a), a), jnp.where(neg_int_a, b, jnp.round(b)), c, x,
                          active & terminating)
    negative = x < 0
    w = jnp.where(negative, x / (x - 1.0), x)
    b2 = jnp.where(negative, c - b, b)
    pfaff = _hyp2f1_unit(a, b2, c, w, active & ~terminating)
    pfaff = jnp.where(negative, (1.0 - x) ** -a * pfaff, pfaff)
    return jnp.where(terminating, poly, pfaff)


def _hyp2f1_impl(a, b, c, x):
    e50 = eps(x) * 50
    d = c - a - b
    s = 1.0 - x
    ca, cb = c - a, c - b
    int_d = jnp.abs(d - jnp.round(d)) < e50
    c_pole = (c == 0) | ((c < 0) & (jnp.fmod(c, 1.0) == 0))
    euler = (d <= -1) & ~(~int_d & (s < 0)) & (x < 1)
    xs = safe(x < 1, x, 0.0)
    direct = _hyp2f1_below_one(a, b, c, xs, (x < 1) & ~euler)
    # Euler's transformation 2F1(a, b; c; x) = (1 - x)^d 2F1(c - a, c - b; c; x), where d <= -1
    transformed = s ** d * _hyp2f1_below_one(ca, cb, c, xs, euler)
    at_one = gamma(c) * gamma(safe(d > 0, d, 1.0)) * _gamma_ratio_safe(ca, cb)
    cases = [
        ((x == 0) | (((a == 0) | (b == 0)) & (c != 0)), 1.0),
        (c_pole, np.inf),
        (euler, transformed),
        ((d <= 0) & (x == 1), np.inf),
        ((x < 1) & (b == c), s ** -a),
        ((x < 1) & (a == c), s ** -b),
        (x > 1, np.inf),
        (x == 1, at_one),
    ]
    out = direct
    for cond, value in reversed(cases):  # the first case that holds wins
        out = jnp.where(cond, value, out)
    return out


_hyp2f1_jit = jit(_hyp2f1_impl)


@custom_jvp
def _hyp2f1(a, b, c, x):
    return _hyp2f1_jit(a, b, c, x)


def _hyp2f1_jvp(primals, tangents):
    a, b, c, x = primals
    ta, tb, tc, tx = tangents
    d_da, d_db, d_dc = _partials(_hyp2f1_jit, (a, b, c, x))[:3]
    d_dx = a * b / c * _hyp2f1(a + 1.0, b + 1.0, c + 1.0, x)
    return _hyp2f1(a, b, c, x), d_da * ta + d_db * tb + d_dc * tc + d_dx * tx


_hyp2f1.defjvp(_hyp2f1_jvp)


def hyp2f1(a, b, c, x):
    """The Gauss hypergeometric function 2F1(a, b; c; x) for real arguments and x <= 1 (inf beyond, as JAX):
    JAX's series, Euler transformation, terminating polynomials and digamma transformation near x = 1, plus
    Pfaff's transformation for x < 0 and DLMF 15.8.4 near 1 for non-integer c - a - b (JAX's series
    diverges below -1 and converges slowly near 1 there). Differentiable in all four arguments."""
    a, b, c, x = real_args("hyp2f1", a, b, c, x)
    return _hyp2f1(a, b, c, x)

