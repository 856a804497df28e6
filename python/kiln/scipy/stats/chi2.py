"""kiln.scipy.stats.chi2: the chi-squared distribution with df degrees of freedom, as jax.scipy.stats.chi2."""

import math

import numpy as np

from kiln import numpy as jnp
from kiln.scipy import special
from kiln.scipy.stats._common import exp_of, promote


def logpdf(x, df, loc=0, scale=1):
    """(df/2 - 1) log y - y/2 - gammaln(df/2) - (df/2) log 2 - log(scale), y = (x - loc) / scale."""
    x, df, loc, scale = promote("chi2.logpdf", x, df, loc, scale)
    y = (x - loc) / scale
    half_df = df / 2.0
    kernel = (half_df - 1.0) * jnp.log(y) - y / 2.0
    normalizer = -(special.gammaln(half_df) + math.log(2.0) * half_df)
    return jnp.where(x < loc, -np.inf, normalizer - jnp.log(scale) + kernel)


pdf = exp_of(logpdf, "pdf")


def cdf(x, df, loc=0, scale=1):
    """gammainc(df/2, (x - loc) / (2 scale)), clipped at 0."""
    x, df, loc, scale = promote("chi2.cdf", x, df, loc, scale)
    return special.gammainc(df / 2.0, jnp.clip((x - loc) / (2.0 * scale), 0.0, np.inf))


def logcdf(x, df, loc=0, scale=1):
    """log(cdf)."""
    return jnp.log(cdf(x, df, loc, scale))


def sf(x, df, loc=0, scale=1):
    """gammaincc(df/2, (x - loc) / (2 scale)), clipped at 0."""
    x, df, loc, scale = promote("chi2.sf", x, df, loc, scale)
    return special.gammaincc(df / 2.0, jnp.clip((x - loc) / (2.0 * scale), 0.0, np.inf))


def logsf(x, df, loc=0, scale=1):
    """log(sf)."""
    return jnp.log(sf(x, df, loc, scale))
