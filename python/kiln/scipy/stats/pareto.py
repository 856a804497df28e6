"""kiln.scipy.stats.pareto: the Pareto distribution with shape b, as jax.scipy.stats.pareto."""

import numpy as np

from kiln import numpy as jnp
from kiln.scipy.stats._common import exp_of, promote


def logpdf(x, b, loc=0, scale=1):
    """log(b / scale) - (b + 1) log y, y = (x - loc) / scale; -inf below loc + scale."""
    x, b, loc, scale = promote("pareto.logpdf", x, b, loc, scale)
    y = (x - loc) / scale
    return jnp.where(x < loc + scale, -np.inf, -(jnp.log(scale / b) + (b + 1.0) * jnp.log(y)))


pdf = exp_of(logpdf, "pdf")


def cdf(x, b, loc=0, scale=1):
    """1 - y^-b; 0 below loc + scale."""
    x, b, loc, scale = promote("pareto.cdf", x, b, loc, scale)
    return jnp.where(x < loc + scale, 0.0, 1.0 - ((x - loc) / scale) ** -b)


def logcdf(x, b, loc=0, scale=1):
    """log1p(-y^-b); -inf below loc + scale."""
    x, b, loc, scale = promote("pareto.logcdf", x, b, loc, scale)
    return jnp.where(x < loc + scale, -np.inf, jnp.log1p(-(((x - loc) / scale) ** -b)))


def logsf(x, b, loc=0, scale=1):
    """-b log y; 0 below loc + scale."""
    x, b, loc, scale = promote("pareto.logsf", x, b, loc, scale)
    return jnp.where(x < loc + scale, 0.0, -b * jnp.log((x - loc) / scale))


sf = exp_of(logsf, "sf")


def ppf(q, b, loc=0, scale=1):
    """loc + scale (1 - q)^(-1/b) for q in [0, 1], nan outside."""
    q, b, loc, scale = promote("pareto.ppf", q, b, loc, scale)
    return jnp.where(jnp.isnan(q) | (q < 0) | (q > 1), np.nan, loc + scale * (1.0 - q) ** (-1.0 / b))
