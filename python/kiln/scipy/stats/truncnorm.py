"""kiln.scipy.stats.truncnorm: the normal distribution truncated to [a, b] (in standard units: the
support is [loc + a scale, loc + b scale]), as jax.scipy.stats.truncnorm."""

import numpy as np

from kiln import numpy as jnp
from kiln.scipy import special
from kiln.scipy.stats import norm
from kiln.scipy.stats._common import exp_of, promote


def _log_diff(x, y):
    """log(exp(x) - exp(y)) for x >= y."""
    return x + jnp.log1p(-jnp.exp(y - x))


def _log_gauss_mass(a, b):
    """log(ndtr(b) - ndtr(a)): from the tail the interval lies in (mirrored into the lower tail), or
    log1p(-ndtr(a) - ndtr(-b)) when it straddles 0."""
    a, b = jnp.broadcast_arrays(a, b)
    left = b <= 0
    right = a > 0
    central = ~(left | right)
    a_tail = jnp.where(right, -b, a)
    b_tail = jnp.where(right, -a, b)
    tail = _log_diff(special.log_ndtr(b_tail), special.log_ndtr(a_tail))
    return jnp.where(central, jnp.log1p(-special.ndtr(a) - special.ndtr(-b)), tail)


def logpdf(x, a, b, loc=0, scale=1):
    """norm.logpdf(x, loc, scale) - log(mass of [a, b]); -inf outside, nan where a >= b."""
    x, a, b, loc, scale = promote("truncnorm.logpdf", x, a, b, loc, scale)
    val = norm.logpdf(x, loc, scale) - _log_gauss_mass(a, b)
    z = (x - loc) / scale
    val = jnp.where((z < a) | (z > b), -np.inf, val)
    return jnp.where(a >= b, np.nan, val)


pdf = exp_of(logpdf, "pdf")


def logcdf(x, a, b, loc=0, scale=1):
    """log(mass of [a, z]) - log(mass of [a, b]), from the upper side's mass where the result is near 0."""
    x, a, b, loc, scale = promote("truncnorm.logcdf", x, a, b, loc, scale)
    z = (x - loc) / scale
    mass = _log_gauss_mass(a, b)
    lower = _log_gauss_mass(a, jnp.clip(z, a, b)) - mass
    upper = _log_gauss_mass(jnp.clip(z, a, b), b) - mass
    out = jnp.select([z >= b, z <= a, lower > -0.1, z > a], [0.0, -np.inf, jnp.log1p(-jnp.exp(upper)), lower])
    return jnp.where(a >= b, np.nan, out)


cdf = exp_of(logcdf, "cdf")


def logsf(x, a, b, loc=0, scale=1):
    """logcdf of the mirrored distribution, logcdf(-x, -b, -a, -loc, scale)."""
    x, a, b, loc, scale = promote("truncnorm.logsf", x, a, b, loc, scale)
    return logcdf(-x, -b, -a, -loc, scale)


sf = exp_of(logsf, "sf")
