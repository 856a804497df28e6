"""kiln.scipy.stats.gamma: the gamma distribution with shape a, as jax.scipy.stats.gamma."""

import numpy as np

from kiln import numpy as jnp
from kiln.scipy import special
from kiln.scipy.stats._common import exp_of, promote


def logpdf(x, a, loc=0, scale=1):
    """(a - 1) log y - y - gammaln(a) - log(scale), y = (x - loc) / scale; -inf below loc."""
    x, a, loc, scale = promote("gamma.logpdf", x, a, loc, scale)
    ok = x >= loc
    y = jnp.where(ok, (x - loc) / scale, 1.0)
    log_probs = special.xlogy(a - 1.0, y) - y - (special.gammaln(a) + jnp.log(scale))
    return jnp.where(ok, log_probs, -np.inf)


pdf = exp_of(logpdf, "pdf")


def cdf(x, a, loc=0, scale=1):
    """gammainc(a, (x - loc) / scale), clipped at 0."""
    x, a, loc, scale = promote("gamma.cdf", x, a, loc, scale)
    return special.gammainc(a, jnp.clip((x - loc) / scale, 0.0, np.inf))


def logcdf(x, a, loc=0, scale=1):
    """log(cdf)."""
    return jnp.log(cdf(x, a, loc, scale))


def sf(x, a, loc=0, scale=1):
    """gammaincc(a, (x - loc) / scale); 1 below loc."""
    x, a, loc, scale = promote("gamma.sf", x, a, loc, scale)
    y = (x - loc) / scale
    return jnp.where(y < 0, 1.0, special.gammaincc(a, jnp.maximum(y, 0.0)))


def logsf(x, a, loc=0, scale=1):
    """log(sf)."""
    return jnp.log(sf(x, a, loc, scale))
