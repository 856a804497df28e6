"""kiln.scipy.stats.gumbel_r: the right-skewed Gumbel (extreme value type I) distribution, as
jax.scipy.stats.gumbel_r. Every function is nan where scale <= 0."""

import math

import numpy as np

from kiln import numpy as jnp
from kiln.scipy.stats._common import exp_of, promote


def _log1mexp(y):
    """log(1 - exp(-y)) for y > 0, by whichever of expm1 and log1p keeps the digits."""
    small = y < math.log(2.0)
    return jnp.where(small, jnp.log(-jnp.expm1(-jnp.where(small, y, 1.0))), jnp.log1p(-jnp.exp(-y)))


def logpdf(x, loc=0, scale=1):
    """-log(scale) - z - exp(-z), z = (x - loc) / scale."""
    x, loc, scale = promote("gumbel_r.logpdf", x, loc, scale)
    z = (x - loc) / scale
    return jnp.where(scale > 0, -jnp.log(scale) - (z + jnp.exp(-z)), np.nan)


pdf = exp_of(logpdf, "pdf")


def logcdf(x, loc=0, scale=1):
    """-exp(-z)."""
    x, loc, scale = promote("gumbel_r.logcdf", x, loc, scale)
    return jnp.where(scale > 0, -jnp.exp((loc - x) / scale), np.nan)


cdf = exp_of(logcdf, "cdf")


def logsf(x, loc=0, scale=1):
    """log(1 - exp(-exp(-z)))."""
    x, loc, scale = promote("gumbel_r.logsf", x, loc, scale)
    return jnp.where(scale > 0, _log1mexp(jnp.exp((loc - x) / scale)), np.nan)


def sf(x, loc=0, scale=1):
    """1 - exp(-exp(-z)), by expm1."""
    x, loc, scale = promote("gumbel_r.sf", x, loc, scale)
    return jnp.where(scale > 0, -jnp.expm1(-jnp.exp((loc - x) / scale)), np.nan)


def ppf(p, loc=0, scale=1):
    """loc - scale log(-log p) for 0 < p < 1, nan elsewhere."""
    p, loc, scale = promote("gumbel_r.ppf", p, loc, scale)
    return jnp.where((p > 0) & (p < 1), loc - scale * jnp.log(-jnp.log(p)), np.nan)
