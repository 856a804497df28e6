"""kiln.scipy.stats.cauchy: the Cauchy distribution, as jax.scipy.stats.cauchy."""

import math

from kiln import numpy as jnp
from kiln.scipy.stats._common import exp_of, promote


def logpdf(x, loc=0, scale=1):
    """-log(pi scale) - log1p(z^2), z = (x - loc) / scale."""
    x, loc, scale = promote("cauchy.logpdf", x, loc, scale)
    z = (x - loc) / scale
    return -(jnp.log(math.pi * scale) + jnp.log1p(z * z))


pdf = exp_of(logpdf, "pdf")


def cdf(x, loc=0, scale=1):
    """1/2 + arctan(z) / pi."""
    x, loc, scale = promote("cauchy.cdf", x, loc, scale)
    return 0.5 + jnp.arctan((x - loc) / scale) / math.pi


def logcdf(x, loc=0, scale=1):
    """log(cdf)."""
    return jnp.log(cdf(x, loc, scale))


def sf(x, loc=0, scale=1):
    """cdf(-x, -loc, scale)."""
    x, loc, scale = promote("cauchy.sf", x, loc, scale)
    return cdf(-x, -loc, scale)


def logsf(x, loc=0, scale=1):
    """log(sf), as logcdf(-x, -loc, scale)."""
    x, loc, scale = promote("cauchy.logsf", x, loc, scale)
    return logcdf(-x, -loc, scale)


def ppf(q, loc=0, scale=1):
    """tan(pi q - pi/2) scale + loc."""
    q, loc, scale = promote("cauchy.ppf", q, loc, scale)
    return jnp.tan(math.pi * q - math.pi / 2) * scale + loc


def isf(q, loc=0, scale=1):
    """tan(pi/2 - pi q) scale + loc."""
    q, loc, scale = promote("cauchy.isf", q, loc, scale)
    return jnp.tan(math.pi / 2 - math.pi * q) * scale + loc

