"""kiln.scipy.stats.norm: the normal distribution, as jax.scipy.stats.norm."""

import math

from kiln import numpy as jnp
from kiln.scipy import special
from kiln.scipy.stats._common import exp_of, promote


def logpdf(x, loc=0, scale=1):
    """The log of the normal density with mean loc and standard deviation scale."""
    x, loc, scale = promote("norm.logpdf", x, loc, scale)
    scale_sq = scale * scale
    return (jnp.log(2 * math.pi * scale_sq) + (x - loc) ** 2 / scale_sq) / -2.0


pdf = exp_of(logpdf, "pdf")


def cdf(x, loc=0, scale=1):
    """The normal CDF, ndtr((x - loc) / scale)."""
    x, loc, scale = promote("norm.cdf", x, loc, scale)
    return special.ndtr((x - loc) / scale)


def logcdf(x, loc=0, scale=1):
    """log of the normal CDF, log_ndtr((x - loc) / scale), accurate far into the lower tail."""
    x, loc, scale = promote("norm.logcdf", x, loc, scale)
    return special.log_ndtr((x - loc) / scale)


def sf(x, loc=0, scale=1):
    """The survival function 1 - cdf, as cdf(-x, -loc, scale)."""
    x, loc, scale = promote("norm.sf", x, loc, scale)
    return cdf(-x, -loc, scale)


def logsf(x, loc=0, scale=1):
    """log of the survival function, as logcdf(-x, -loc, scale)."""
    x, loc, scale = promote("norm.logsf", x, loc, scale)
    return logcdf(-x, -loc, scale)


def ppf(q, loc=0, scale=1):
    """The quantile function (inverse CDF), ndtri(q) * scale + loc."""
    q, loc, scale = promote("norm.ppf", q, loc, scale)
    return special.ndtri(q) * scale + loc


def isf(q, loc=0, scale=1):
    """The inverse survival function, -ndtri(q) * scale + loc (JAX's ppf(1 - q) loses small q's digits)."""
    q, loc, scale = promote("norm.isf", q, loc, scale)
    return loc - special.ndtri(q) * scale
