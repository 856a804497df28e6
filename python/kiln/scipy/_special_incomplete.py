"""The regularized incomplete gamma and beta functions of kiln.scipy.special (gammainc, gammaincc, betainc)
and their derivatives, by the series and continued fractions XLA uses for JAX's igamma, igammac and
regularized_incomplete_beta. Built on kiln.lax and kiln.numpy; re-exported by kiln.scipy.special.
"""

import numpy as np

from kiln._src import dtypes as _dtypes  # finfo that knows bfloat16 on every NumPy (ml_dtypes.finfo)

from kiln import lax
from kiln import numpy as jnp
from kiln._src.ad import jvp
from kiln._src.api import jit
from kiln._src.custom import custom_jvp
from kiln.scipy._special_common import eps, iterate, real_args, safe

_MAX_STEPS = 2000  # the continued fraction's cap in XLA; the series stops on convergence alone (capped here too)


# ---------------------------------------------------------------------------------------------------------
# incomplete gamma: a series for x < max(1, a), a continued fraction above. Both carry d/da along, so
# one loop gives the value or the derivative in a; `derivative` picks which one decides convergence.

def _series(ax, x, a, active, derivative):
    """P(a, x) = ax / a * sum_k x^k / ((a+1) ... (a+k)), ax = x^a e^-x / gamma(a); or its derivative in a."""
    e = eps(x)

    def step(state):
        r, c, total, dc_da, dtotal_da = state
        r = r + 1.0
        dc_da = dc_da * (x / r) - c * x / (r * r)
        dtotal_da = dtotal_da + dc_da
        c = c * (x / r)
        total = total + c
        more = jnp.abs(dc_da / dtotal_da) > e if derivative else c / total > e
        return (r, c, total, dc_da, dtotal_da), more

    one, zero = jnp.ones_like(a), jnp.zeros_like(a)
    _, _, total, _, dtotal_da = iterate(step, (a, one, one, zero, zero), active, _MAX_STEPS)
    if not derivative:
        return total * ax / a
    dlogax_da = jnp.log(x) - lax.digamma(a + 1.0)
    return ax * (total * dlogax_da + dtotal_da) / a


def _continued_fraction(ax, x, a, active, derivative):
    """Q(a, x) = ax * (Legendre's continued fraction), ax = x^a e^-x / gamma(a); or its derivative in a."""
    e = eps(x)

    def step(state):
        ans, y, z, c, pkm1, qkm1, pkm2, qkm2, dpkm2, dqkm2, dpkm1, dqkm1, dans = state
        c = c + 1.0
        y = y + 1.0
        z = z + 2.0
        yc = y * c
        pk = pkm1 * z - pkm2 * yc
        qk = qkm1 * z - qkm2 * yc
        nonzero = qk != 0
        r = pk / safe(nonzero, qk, 1.0)
        t = jnp.where(nonzero, jnp.abs((ans - r) / r), 1.0)
        ans = jnp.where(nonzero, r, ans)
        dpk = dpkm1 * z - pkm1 - dpkm2 * yc + pkm2 * c
        dqk = dqkm1 * z - qkm1 - dqkm2 * yc + qkm2 * c
        dans_new = jnp.where(nonzero, (dpk - ans * dqk) / safe(nonzero, qk, 1.0), dans)
        dchange = jnp.where(nonzero, jnp.abs(dans_new - dans), 1.0)
        # the convergents grow without bound: rescale all eight recurrences together
        scale = jnp.where(jnp.abs(pk) > 1.0 / e, e, 1.0)
        new = (ans, y, z, c, pk * scale, qk * scale, pkm1 * scale, qkm1 * scale, dpkm1 * scale, dqkm1 * scale,
               dpk * scale, dqk * scale, dans_new)
        return new, (dchange > e) if derivative else (t > e)

    y = 1.0 - a
    z = x + y + 1.0
    pkm1, qkm1 = x + 1.0, z * x
    ans = pkm1 / qkm1
    zero = jnp.zeros_like(x)
    dqkm1 = -x
    dans = -ans * dqkm1 / qkm1
    init = (ans, y, z, zero, pkm1, qkm1, jnp.ones_like(x), x, zero, zero, zero, dqkm1, dans)
    final = iterate(step, init, active, _MAX_STEPS)
    ans, dans = final[0], final[12]
    if not derivative:
        return ans * ax
    return ax * (ans * (jnp.log(x) - lax.digamma(a)) + dans)


def _prefactor(a, x):
    """x^a e^-x / gamma(a) and whether it underflows (then the loops are skipped: the result is 0 or 1)."""
    log_ax = a * jnp.log(x) - x - lax.lgamma(a)
    return jnp.exp(log_ax), log_ax < -np.log(_dtypes.finfo(x.dtype).max)


def _igamma(a, x, upper):
    """P(a, x) (upper=False) or Q(a, x) = 1 - P (upper=True), as XLA's igamma and igammac, except that
    a == 0 gives P = 1 (as SciPy) for every x > 0."""
    nan = jnp.isnan(a) | jnp.isnan(x)
    x_inf = x == np.inf
    x_zero = x == 0
    a_zero = a == 0
    domain_error = (x < 0) | (a < 0) | (a_zero & x_zero) | nan
    xs, as_ = safe(~(x_zero | domain_error | x_inf), x, 1.0), safe(~(a_zero | domain_error), a, 1.0)
    ax, underflow = _prefactor(as_, xs)
    live = ~(x_zero | domain_error | underflow | x_inf | a_zero)
    use_fraction = (xs >= 1) & (xs > as_)
    q_frac = _continued_fraction(ax, xs, as_, live & use_fraction, False)
    p_series = _series(ax, xs, as_, live & ~use_fraction, False)
    # an underflowed prefactor makes both loops return 0: P = 0 below the transition, 1 above
    p = jnp.where(use_fraction, 1.0 - q_frac, p_series)
    p = jnp.where(x_zero, 0.0, jnp.where(x_inf | a_zero, 1.0, p))
    out = 1.0 - p if upper else p
    if upper:  # Q from the fraction directly, not as 1 - (1 - Q)
        out = jnp.where(use_fraction & ~x_zero & ~x_inf & ~a_zero, q_frac, out)
    return jnp.where(domain_error, np.nan, out)


@jit
def _igamma_grad_a(a, x):
    """d/da P(a, x), as XLA's igamma_grad_a."""
    nan = jnp.isnan(a) | jnp.isnan(x)
    x_zero = x == 0
    domain_error = (x < 0) | (a <= 0)
    xs, as_ = safe(~(x_zero | domain_error), x, 1.0), safe(~domain_error, a, 1.0)
    ax, underflow = _prefactor(as_, xs)
    live = ~(x_zero | domain_error | underflow | nan)
    use_fraction = (xs > 1) & (xs > as_)
    out = jnp.where(use_fraction, -_continued_fraction(ax, xs, as_, live & use_fraction, True),
                    _series(ax, xs, as_, live & ~use_fraction, True))
    out = jnp.where(x_zero, 0.0, out)
    return jnp.where(domain_error | nan, np.nan, out)


_gammainc_jit = jit(lambda a, x: _igamma(a, x, False))
_gammaincc_jit = jit(lambda a, x: _igamma(a, x, True))


def _dp_dx(a, x):
    """d/dx P(a, x) = x^(a-1) e^-x / gamma(a)."""
    return jnp.exp(-x + (a - 1.0) * jnp.log(x) - lax.lgamma(a))


@custom_jvp
def _gammainc(a, x):
    return _gammainc_jit(a, x)


@custom_jvp
def _gammaincc(a, x):
    return _gammaincc_jit(a, x)


_gammainc.defjvps(lambda ta, out, a, x: _igamma_grad_a(a, x) * ta, lambda tx, out, a, x: _dp_dx(a, x) * tx)
_gammaincc.defjvps(lambda ta, out, a, x: -_igamma_grad_a(a, x) * ta, lambda tx, out, a, x: -_dp_dx(a, x) * tx)


def gammainc(a, x):
    """The regularized lower incomplete gamma function P(a, x) = gamma(a, x) / gamma(a) (a >= 0, x >= 0,
    else nan); differentiable in a and x."""
    a, x = real_args("gammainc", a, x)
    return _gammainc(a, x)


def gammaincc(a, x):
    """The regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x); differentiable in a and x."""
    a, x = real_args("gammaincc", a, x)
    return _gammaincc(a, x)


# ---------------------------------------------------------------------------------------------------------
# incomplete beta: the continued fraction of DLMF 8.17.22 by the modified Lentz method (XLA's algorithm)

def _betainc_value(a, b, x):
    """I_x(a, b); the fraction is evaluated at x < (a + 1) / (a + b + 2) and reflected (1 - I_{1-x}(b, a))
    above, where it converges fastest."""
    dt = x.dtype
    tiny = float(_dtypes.finfo(dt).eps / 2)
    steps = 600 if dt == np.float64 else 200
    a_zero = (a == 0) | (b == np.inf)
    b_zero = (b == 0) | (a == np.inf)
    x_zero, x_one = x == 0, x == 1
    nan = jnp.isnan(a) | jnp.isnan(b) | jnp.isnan(x)
    is_zero = (b_zero & ~x_one) | (a_zero & x_zero)
    is_one = (a_zero & ~x_zero) | (b_zero & x_one)
    is_nan = (a < 0) | (b < 0) | (x < 0) | (x > 1) | (a_zero & b_zero) | nan
    special = is_zero | is_one | is_nan
    a, b, x = safe(~special, a, 1.0), safe(~special, b, 1.0), safe(~special, x, 0.5)
    direct = x < (a + 1.0) / (a + b + 2.0)
    a, b, x = jnp.where(direct, a, b), jnp.where(direct, b, a), jnp.where(direct, x, 1.0 - x)

    def numerator(k):  # the k-th partial numerator d_k (k >= 1); d_1 = 1
        m = jnp.floor((k - 1.0) / 2.0)
        even = -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0))
        odd = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m))
        d = jnp.where(jnp.fmod(k, 2.0) == 0, even, odd)
        return jnp.where(k == 1, 1.0, d)

    def clamp(v):
        return jnp.where(jnp.abs(v) < tiny, tiny, v)

    def cond(state):
        k, unconverged, _, _, _ = state
        return lax.bitwise_and(k < steps, unconverged)

    def body(state):
        k, _, c, d, h = state
        num = numerator(k + jnp.zeros_like(x))
        c = clamp(1.0 + num / c)
        d = 1.0 / clamp(1.0 + num * d)
        delta = c * d
        return k + 1.0, jnp.any(jnp.abs(delta - 1.0) >= tiny), c, d, h * delta

    h0 = lax.full_like(x, tiny)
    _, _, _, _, fraction = lax.while_loop(cond, body, (1.0, np.bool_(True), h0, jnp.zeros_like(x), h0))
    lbeta = lax.lgamma(a) + lax.lgamma(b) - lax.lgamma(a + b)
    factor = jnp.exp(jnp.log(x) * a + jnp.log1p(-x) * b - lbeta) / a
    out = fraction * factor
    out = jnp.where(direct, out, 1.0 - out)
    return jnp.where(is_nan, np.nan, jnp.where(is_one, 1.0, jnp.where(is_zero, 0.0, out)))


_betainc_jit = jit(_betainc_value)


@custom_jvp
def _betainc(a, b, x):
    return _betainc_jit(a, b, x)


def _betainc_jvp(primals, tangents):
    a, b, x = primals
    ta, tb, tx = tangents
    out = _betainc(a, b, x)
    lbeta = lax.lgamma(a) + lax.lgamma(b) - lax.lgamma(a + b)
    d_dx = jnp.exp((b - 1.0) * jnp.log1p(-x) + (a - 1.0) * jnp.log(x) - lbeta)
    # JAX raises for a and b; kiln differentiates the continued fraction in forward mode instead
    d_da = jvp(lambda v: _betainc_jit(v, b, x), (a,), (jnp.ones_like(a),))[1]
    d_db = jvp(lambda v: _betainc_jit(a, v, x), (b,), (jnp.ones_like(b),))[1]
    return out, d_da * ta + d_db * tb + d_dx * tx


_betainc.defjvp(_betainc_jvp)


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b) (a, b >= 0, 0 <= x <= 1, else nan).
    Differentiable in x as in JAX, and also in a and b (where JAX raises), through the continued fraction."""
    a, b, x = real_args("betainc", a, b, x)
    return _betainc(a, b, x)
