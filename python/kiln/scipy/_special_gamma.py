"""The gamma family of kiln.scipy.special: gammasgn, gamma and loggamma (real and complex), beta and betaln,
factorial, comb, poch, multigammaln, the Hurwitz zeta function, polygamma of any order, and the Bernoulli
numbers. Built on kiln.lax and kiln.numpy; the public names are re-exported by kiln.scipy.special.
"""

import math
from fractions import Fraction

import numpy as np

from kiln import lax
from kiln import numpy as jnp
from kiln._src import core, dtypes
from kiln._src.ad import jvp
from kiln._src.api import jit
from kiln._src.custom import custom_jvp
from kiln._src.numpy.util import concrete_int, promote_args_inexact, is_complex_dtype
from kiln.scipy._special_common import eps, iterate, real_args, safe


def _bernoulli_exact(count):
    """B_0 .. B_{count-1} as Fractions (B_1 = -1/2), by the recurrence sum_k C(m+1, k) B_k = 0."""
    b = []
    for m in range(count):
        b.append(Fraction(1) if m == 0 else -sum(math.comb(m + 1, k) * b[k] for k in range(m)) / (m + 1))
    return b


_B = _bernoulli_exact(26)
# (2k)! / B_{2k} for k = 1..12: the Euler-Maclaurin tail of the Hurwitz zeta sum (Cephes' table A).
_ZETA_TAIL = [float(math.factorial(2 * k) / _B[2 * k]) for k in range(1, 13)]


# ---------------------------------------------------------------------------------------------------------
# gamma, its sign and logarithm

def gammasgn(x):
    """The sign of the gamma function: nan at the poles (non-positive integers) and for nan, -1 where
    gamma is negative (and at -0.0, where it is -inf), 1 elsewhere."""
    x, = real_args("gammasgn", x)
    floor_x = lax.floor(x)
    negative = x < 0
    odd_floor = jnp.fmod(floor_x, 2.0) != 0
    minus = (negative & odd_floor) | ((x == 0) & jnp.signbit(x))
    out = jnp.where(minus, -1.0, 1.0).astype(x.dtype)
    return jnp.where((negative & (x == floor_x)) | jnp.isnan(x), np.nan, out)


_LANCZOS_G = 7.0
_LANCZOS = [0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
            12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7]


def _lanczos_loggamma(z):
    """log gamma(z) for Re z >= 1/2 by Lanczos' approximation (g = 7, 9 terms)."""
    zz = z - 1.0
    ag = lax.full_like(zz, _LANCZOS[0])
    for k, c in enumerate(_LANCZOS[1:], start=1):
        ag = ag + c / (zz + float(k))
    t = zz + (_LANCZOS_G + 0.5)
    return 0.5 * math.log(2 * math.pi) + (zz + 0.5) * jnp.log(t) - t + jnp.log(ag)


def _complex_poles(z):
    return ((jnp.imag(z) == 0) & (jnp.real(z) == jnp.floor(jnp.real(z))) & (jnp.real(z) <= 0)) | jnp.isnan(z)


def _complex_gamma(z):
    """gamma(z) for complex z: Lanczos, with the reflection formula where Re z < 1/2."""
    bad = _complex_poles(z)
    z = jnp.where(bad, 1.0, z)
    reflect = jnp.real(z) < 0.5
    w = jnp.where(reflect, 1.0 - z, z)
    lg = _lanczos_loggamma(w)
    reflected = math.log(math.pi) - jnp.log(jnp.sin(math.pi * jnp.where(reflect, z, 0.5))) - lg
    out = jnp.exp(jnp.where(reflect, reflected, lg))
    return jnp.where(bad, complex(np.nan, np.nan), out)


@jit
def _complex_loggamma(z):
    """The principal branch of log gamma (scipy's loggamma): shifted right by n = ceil(1/2 - Re z) with
    loggamma(z) = loggamma(z + n) - sum_{k<n} log(z + k), then Lanczos."""
    bad = _complex_poles(z)
    z = jnp.where(bad, 1.0, z)
    n = jnp.maximum(jnp.ceil(0.5 - jnp.real(z)), 0.0)

    def step(state):
        k, acc = state
        return (k + 1.0, acc + jnp.log(z + k)), k + 1.0 < n

    zero_re = jnp.zeros_like(n)
    _, logs = iterate(step, (zero_re, jnp.zeros_like(z)), n > 0, 1 << 30)
    out = _lanczos_loggamma(z + n) - logs
    return jnp.where(bad, complex(np.nan, np.nan), out)


def gamma(x, /):
    """The gamma function, as jax.scipy.special.gamma: real inputs give gammasgn(x) * exp(gammaln(x)) (inf
    at 0, nan at negative integers); complex inputs use Lanczos' approximation with reflection."""
    x, = promote_args_inexact("gamma", x)
    if is_complex_dtype(x.dtype):
        return _complex_gamma(x)
    return gammasgn(x) * lax.exp(lax.lgamma(x))


def loggamma(x, /):
    """The principal branch of log gamma: gammaln(x) for x > 0 and nan for x <= 0 on reals (as JAX);
    for complex inputs the analytic continuation, as scipy.special.loggamma."""
    x, = promote_args_inexact("loggamma", x)
    if is_complex_dtype(x.dtype):
        return _complex_loggamma(x)
    return jnp.where(x > 0, lax.lgamma(x), np.nan)


def _algdiv(a, b):
    """log(gamma(b) / gamma(a + b)) for b >= 8 (TOMS 708's algdiv), accurate where the lgamma difference
    cancels."""
    h = a / b
    c = h / (1.0 + h)
    x = 1.0 / (1.0 + h)
    d = b + (a - 0.5)
    x2 = x * x
    s3 = 1.0 + (x + x2)
    s5 = 1.0 + (x + x2 * s3)
    s7 = 1.0 + (x + x2 * s5)
    s9 = 1.0 + (x + x2 * s7)
    s11 = 1.0 + (x + x2 * s9)
    t = (1.0 / b) ** 2
    w = (((((-0.00165322962780713 * s11 * t + 0.000837308034031215 * s9) * t - 0.00059520293135187 * s7) * t
           + 0.00079365066682539 * s5) * t - 0.00277777777760991 * s3) * t + 0.0833333333333333)
    w = w * (c / b)
    u = d * lax.log1p(a / b)
    v = a * (lax.log(b) - 1.0)
    return jnp.where(u <= v, (w - v) - u, (w - u) - v)


def betaln(a, b, /):
    """log|B(a, b)|: the lgamma sum while the larger argument is below 8, else lgamma(min) plus TOMS 708's
    algdiv, which keeps the digits the difference lgamma(b) - lgamma(a + b) would cancel."""
    a, b = promote_args_inexact("betaln", a, b)
    lo, hi = jnp.minimum(a, b), jnp.maximum(a, b)
    small = lax.lgamma(lo) + (lax.lgamma(hi) - lax.lgamma(lo + hi))
    large = lax.lgamma(lo) + _algdiv(lo, safe(hi >= 8, hi, 8.0))
    return jnp.where(hi < 8, small, large)


def beta(a, b, /):
    """The beta function B(a, b) = gamma(a) gamma(b) / gamma(a + b), with its sign."""
    a, b = real_args("beta", a, b)
    sign = gammasgn(a) * gammasgn(b) * gammasgn(a + b)
    return sign * lax.exp(betaln(a, b))


def factorial(n, exact=False):
    """n! = gamma(n + 1) as floats (0 for n < 0). exact=True (Python integers) is not supported, as in JAX."""
    if exact:
        raise NotImplementedError("factorial with exact=True")
    n, = promote_args_inexact("factorial", n)
    return jnp.where(n < 0, 0.0, lax.exp(lax.lgamma(n + 1.0)))


def comb(N, k, *, repetition=False):
    """The number of combinations of N things taken k at a time, as floats from gammaln (0 outside
    0 <= k <= N); with repetition, comb(N + k - 1, k)."""
    N, k = promote_args_inexact("comb", N, k)
    if repetition:
        return jnp.where((k == 0) & (N >= 0), 1.0, comb(N + k - 1.0, k))
    ok = (k <= N) & (N >= 0) & (k >= 0)
    n_, k_ = safe(ok, N, 0.0), safe(ok, k, 0.0)
    out = lax.exp(lax.lgamma(n_ + 1.0) - lax.lgamma(k_ + 1.0) - lax.lgamma(n_ + 1.0 - k_))
    return jnp.where(ok, out, 0.0)


@custom_jvp
def poch(z, m, /):
    """The Pochhammer symbol (z)_m = gamma(z + m) / gamma(z) (1 where m == 0)."""
    z, m = real_args("poch", z, m)
    return jnp.where(m == 0.0, 1.0, gamma(z + m) / gamma(z)).astype(z.dtype)


poch.defjvps(lambda tz, out, z, m: (lax.digamma(z + m) - lax.digamma(z)) * poch(z, m) * tz,
             lambda tm, out, z, m: lax.digamma(z + m) * poch(z, m) * tm)


def multigammaln(a, d):
    """The log of the multivariate gamma function of dimension d (a Python int, known while tracing):
    sum_{j<d} gammaln(a - j/2) + d (d - 1) / 4 log(pi)."""
    d = concrete_int(d, "d argument of multigammaln")
    a, = promote_args_inexact("multigammaln", a)
    out = 0.25 * d * (d - 1) * math.log(math.pi) + jnp.zeros_like(a)
    for j in range(d):
        out = out + lax.lgamma(a - j / 2.0)
    return out


# ---------------------------------------------------------------------------------------------------------
# Hurwitz zeta and polygamma

def _zeta_value(x, q):
    """zeta(x, q) = sum_k (q + k)^-x by Cephes' method: terms are summed directly until q + k > 9 (at least
    9 of them, fewer where a term drops below eps of the sum), then 12 Euler-Maclaurin terms add the rest."""
    e = eps(x)
    domain_nan = (x < 1) | ((q <= 0) & (q != jnp.floor(q)) & (x != jnp.floor(x)))
    pole = (x == 1) | ((q <= 0) & (q == jnp.floor(q)))
    huge_q = q > 1e8
    ok = ~(domain_nan | pole | huge_q | jnp.isnan(x) | jnp.isnan(q))
    xs, qs = safe(ok, x, 2.0), safe(ok, q, 1.0)

    def step(state):
        i, a, b, s, done = state
        a = a + 1.0
        b = a ** -xs
        s = s + b
        converged = jnp.abs(b / s) < e
        return (i + 1.0, a, b, s, converged), ~converged & ((i + 1.0 < 9) | (a <= 9))

    zero = jnp.zeros_like(xs)
    _, a, b, s, done = iterate(step, (zero, qs, zero, qs ** -xs, jnp.zeros(xs.shape, bool)), ok, 1 << 30)
    w = a
    s = s + b * w / (xs - 1.0) - 0.5 * b
    fact, k = jnp.ones_like(xs), 0.0
    for coeff in _ZETA_TAIL:
        fact = fact * (xs + k)
        b = b / w
        t = fact * b / coeff
        s = jnp.where(done, s, s + t)
        done = done | (jnp.abs(t / s) < e)
        fact = fact * (xs + (k + 1.0))
        b = b / w
        k += 2.0
    asymptotic = (1.0 / (x - 1.0) + 1.0 / (2.0 * q)) * q ** (1.0 - x)  # Cephes, for q > 1e8
    out = jnp.where(huge_q, asymptotic, s)
    out = jnp.where(pole, np.inf, out)
    return jnp.where(domain_nan, np.nan, out)


_zeta_jit = jit(_zeta_value)


@custom_jvp
def _zeta(x, q):
    return _zeta_jit(x, q)


def _zeta_jvp(primals, tangents):
    x, q = primals
    tx, tq = tangents
    out = _zeta(x, q)
    # d/dq is -x zeta(x + 1, q) exactly; d/dx differentiates the summation (forward mode through the loop)
    d_dx = jvp(lambda s: _zeta_jit(s, q), (x,), (jnp.ones_like(x),))[1]
    return out, d_dx * tx - x * _zeta(x + 1.0, q) * tq


_zeta.defjvp(_zeta_jvp)


def zeta(x, q=None):
    """The Hurwitz zeta function sum_{k>=0} (q + k)^-x (x > 1; nan for x < 1, inf at x == 1 and at
    non-positive integer q). As in JAX, the Riemann zeta function (q=None) is not implemented."""
    if q is None:
        raise NotImplementedError("Riemann zeta function not implemented; pass q != None to compute the "
                                  "Hurwitz Zeta function.")
    x, q = real_args("zeta", x, q)
    return _zeta(x, q)


def polygamma(n, x):
    """The n-th derivative of digamma, as jax.scipy.special.polygamma: digamma for n == 0, else
    (-1)^(n+1) n! zeta(n + 1, x); n an integer array (traced or not) broadcast against x, nan where n < 0.
    Its derivative in x is polygamma(n + 1, x)."""
    n_dtype = n.dtype if isinstance(n, core.Array) else np.asarray(n).dtype
    if not dtypes.issubdtype(n_dtype, np.integer):
        raise ValueError(f"Argument `n` to polygamma must be of integer type. Got dtype {np.dtype(n_dtype)}.")
    # x alone sets the dtype (kiln's rule before this module; JAX also lets an int32 n make it float32)
    x, = real_args("polygamma", x)
    n = lax.stop_gradient(jnp.asarray(n).astype(x.dtype))
    n, x = jnp.broadcast_arrays(n, x)
    order = jnp.where(n >= 1, n, 1.0)
    sign = jnp.where(jnp.fmod(order, 2.0) == 0, -1.0, 1.0)
    higher = sign * lax.exp(lax.lgamma(order + 1.0)) * _zeta(order + 1.0, x)
    out = jnp.where(n == 0, lax.digamma(x), higher)
    return jnp.where(n < 0, np.nan, out)


def bernoulli(n):
    """The Bernoulli numbers B_0 .. B_n (B_1 = -1/2) as an array of the default float dtype; n a Python int.
    Even ones from B_2j = (-1)^(j+1) 2 (2j)! zeta(2j) / (2 pi)^(2j), as JAX computes them, with zeta(2j)'s
    sum closed by Euler-Maclaurin terms (JAX stops at 49 terms, which leaves B_4 off by 3e-6)."""
    n = concrete_int(n, "Argument n of bernoulli")
    if n < 0:
        raise ValueError("n must be a non-negative integer.")
    out = np.zeros(n + 1)
    out[:3] = [1.0, -0.5, 1.0 / 6.0][:n + 1]
    if n >= 4:
        m = np.arange(4, n + 1, 2, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            scale = np.cumprod(-(m - 1) * m / (4 * np.pi ** 2)) / np.pi ** 2
            big = 50.0
            zeta_m = (np.sum(np.arange(1, big, dtype=np.float64)[:, None] ** -m[None, :], axis=0)
                      + big ** (1 - m) / (m - 1) + 0.5 * big ** -m + m * big ** (-m - 1) / 12
                      - m * (m + 1) * (m + 2) * big ** (-m - 3) / 720)
        out[4::2] = scale * zeta_m
    return jnp.asarray(out, dtype=dtypes.canonicalize_dtype(np.float64))
