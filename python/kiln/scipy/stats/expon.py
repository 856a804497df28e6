"""kiln.scipy.stats.expon: the exponential distribution, as jax.scipy.stats.expon."""

import numpy as np

from kiln import numpy as jnp
from kiln.scipy.stats._common import exp_of, promote


def logpdf(x, loc=0, scale=1):
    """-(x - loc) / scale - log(scale) for x >= loc, -inf below."""
    x, loc, scale = promote("expon.logpdf", x, loc, scale)
    return jnp.where(x < loc, -np.inf, -((x - loc) / scale + jnp.log(scale)))


pdf = exp_of(logpdf, "pdf")


def logsf(x, loc=0, scale=1):
    """-(x - loc) / scale for x >= loc, 0 below."""
    x, loc, scale = promote("expon.logsf", x, loc, scale)
    return jnp.where(x < loc, 0.0, (loc - x) / scale)


sf = exp_of(logsf, "sf")


def cdf(x, loc=0, scale=1):
    """1 - exp(-(x - loc) / scale) (by expm1) for x >= loc, 0 below."""
    x, loc, scale = promote("expon.cdf", x, loc, scale)
    return jnp.where(x < loc, 0.0, -jnp.expm1((loc - x) / scale))


def logcdf(x, loc=0, scale=1):
    """log(1 - sf(x))."""
    return jnp.log1p(-sf(x, loc, scale))


def ppf(q, loc=0, scale=1):
    """loc - scale log(1 - q) for q in [0, 1], nan outside."""
    q, loc, scale = promote("expon.ppf", q, loc, scale)
    return jnp.where(jnp.isnan(q) | (q < 0) | (q > 1), np.nan, loc - scale * jnp.log1p(-q))
