"""kiln.scipy.stats.beta: the beta distribution on [loc, loc + scale], as jax.scipy.stats.beta."""

import numpy as np

from kiln import numpy as jnp
from kiln.scipy import special
from kiln.scipy.stats._common import exp_of, promote


def logpdf(x, a, b, loc=0, scale=1):
    """(a-1) log y + (b-1) log(1-y) - betaln(a, b) - log(scale), y = (x - loc) / scale; -inf outside the
    support, nan for a, b or scale <= 0."""
    x, a, b, loc, scale = promote("beta.logpdf", x, a, b, loc, scale)
    y = (x - loc) / scale
    log_probs = -special.betaln(a, b) + special.xlogy(a - 1.0, y) + special.xlog1py(b - 1.0, -y) - jnp.log(scale)
    out = jnp.where((x > loc + scale) | (x < loc), -np.inf, log_probs)
    return jnp.where((a <= 0) | (b <= 0) | (scale <= 0), np.nan, out)


pdf = exp_of(logpdf, "pdf")


def cdf(x, a, b, loc=0, scale=1):
    """betainc(a, b, y), y clipped to [0, 1]."""
    x, a, b, loc, scale = promote("beta.cdf", x, a, b, loc, scale)
    return special.betainc(a, b, jnp.clip((x - loc) / scale, 0.0, 1.0))


def logcdf(x, a, b, loc=0, scale=1):
    """log(cdf)."""
    return jnp.log(cdf(x, a, b, loc, scale))


def sf(x, a, b, loc=0, scale=1):
    """betainc(b, a, 1 - y), y clipped to [0, 1]."""
    x, a, b, loc, scale = promote("beta.sf", x, a, b, loc, scale)
    return special.betainc(b, a, 1.0 - jnp.clip((x - loc) / scale, 0.0, 1.0))


def logsf(x, a, b, loc=0, scale=1):
    """log(sf)."""
    return jnp.log(sf(x, a, b, loc, scale))
