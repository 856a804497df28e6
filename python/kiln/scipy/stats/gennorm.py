"""kiln.scipy.stats.gennorm: the generalized normal distribution with shape beta (standardized: no loc or
scale, as in JAX)."""

from kiln import lax
from kiln import numpy as jnp
from kiln.scipy import special
from kiln.scipy.stats._common import exp_of, promote


def logpdf(x, beta):
    """log(beta / 2) - gammaln(1 / beta) - |x|^beta."""
    x, beta = promote("gennorm.logpdf", x, beta)
    return jnp.log(0.5 * beta) - lax.lgamma(1.0 / beta) - jnp.abs(x) ** beta


pdf = exp_of(logpdf, "pdf")


def cdf(x, beta):
    """(1 + sign(x) gammainc(1 / beta, |x|^beta)) / 2."""
    x, beta = promote("gennorm.cdf", x, beta)
    return 0.5 * (1.0 + jnp.sign(x) * special.gammainc(1.0 / beta, jnp.abs(x) ** beta))
