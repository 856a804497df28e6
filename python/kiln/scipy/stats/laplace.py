"""kiln.scipy.stats.laplace: the Laplace (double exponential) distribution, as jax.scipy.stats.laplace."""

from kiln import numpy as jnp
from kiln.scipy.stats._common import exp_of, promote


def logpdf(x, loc=0, scale=1):
    """-|x - loc| / scale - log(2 scale)."""
    x, loc, scale = promote("laplace.logpdf", x, loc, scale)
    return -(jnp.abs(x - loc) / scale + jnp.log(2.0 * scale))


pdf = exp_of(logpdf, "pdf")


def cdf(x, loc=0, scale=1):
    """exp(z) / 2 for z = (x - loc) / scale <= 0, 1 - exp(-z) / 2 above."""
    x, loc, scale = promote("laplace.cdf", x, loc, scale)
    z = (x - loc) / scale
    return jnp.where(z <= 0, 0.5 * jnp.exp(jnp.minimum(z, 0.0)), 1.0 - 0.5 * jnp.exp(-jnp.maximum(z, 0.0)))
