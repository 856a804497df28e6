"""kiln.scipy.stats.logistic: the logistic distribution, as jax.scipy.stats.logistic."""

from kiln import numpy as jnp
from kiln.scipy import special
from kiln.scipy.stats._common import exp_of, promote


def logpdf(x, loc=0, scale=1):
    """-2 logaddexp(z/2, -z/2) - log(scale), z = (x - loc) / scale."""
    x, loc, scale = promote("logistic.logpdf", x, loc, scale)
    half = (x - loc) / scale / 2.0
    return -2.0 * jnp.logaddexp(half, -half) - jnp.log(scale)


pdf = exp_of(logpdf, "pdf")


def cdf(x, loc=0, scale=1):
    """expit((x - loc) / scale)."""
    x, loc, scale = promote("logistic.cdf", x, loc, scale)
    return special.expit((x - loc) / scale)


def sf(x, loc=0, scale=1):
    """expit(-(x - loc) / scale)."""
    x, loc, scale = promote("logistic.sf", x, loc, scale)
    return special.expit((loc - x) / scale)


def ppf(x, loc=0, scale=1):
    """logit(q) scale + loc (the argument is named x, as in JAX)."""
    x, loc, scale = promote("logistic.ppf", x, loc, scale)
    return special.logit(x) * scale + loc


def isf(x, loc=0, scale=1):
    """-logit(q) scale + loc (the argument is named x, as in JAX)."""
    x, loc, scale = promote("logistic.isf", x, loc, scale)
    return loc - special.logit(x) * scale
