"""kiln.scipy.stats.gumbel_l: the left-skewed Gumbel distribution, the mirror image of gumbel_r
(its density at x is gumbel_r's at -x with loc negated), as jax.scipy.stats.gumbel_l."""

import numpy as np

from kiln import numpy as jnp
from kiln.scipy.stats import gumbel_r
from kiln.scipy.stats._common import exp_of, promote


def logpdf(x, loc=0, scale=1):
    """-log(scale) + z - exp(z), z = (x - loc) / scale."""
    x, loc, scale = promote("gumbel_l.logpdf", x, loc, scale)
    return gumbel_r.logpdf(-x, -loc, scale)


pdf = exp_of(logpdf, "pdf")


def logcdf(x, loc=0, scale=1):
    """log(1 - exp(-exp(z)))."""
    x, loc, scale = promote("gumbel_l.logcdf", x, loc, scale)
    return gumbel_r.logsf(-x, -loc, scale)


def cdf(x, loc=0, scale=1):
    """1 - exp(-exp(z))."""
    x, loc, scale = promote("gumbel_l.cdf", x, loc, scale)
    return gumbel_r.sf(-x, -loc, scale)


def logsf(x, loc=0, scale=1):
    """-exp(z)."""
    x, loc, scale = promote("gumbel_l.logsf", x, loc, scale)
    return gumbel_r.logcdf(-x, -loc, scale)


sf = exp_of(logsf, "sf")


def ppf(p, loc=0, scale=1):
    """loc + scale log(-log(1 - p)) for 0 < p < 1, nan elsewhere."""
    p, loc, scale = promote("gumbel_l.ppf", p, loc, scale)
    return jnp.where((p > 0) & (p < 1), loc + scale * jnp.log(-jnp.log1p(-p)), np.nan)
