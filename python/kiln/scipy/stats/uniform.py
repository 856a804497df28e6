"""kiln.scipy.stats.uniform: the uniform distribution on [loc, loc + scale], as jax.scipy.stats.uniform."""

import numpy as np

from kiln import numpy as jnp
from kiln.scipy.stats._common import exp_of, promote


def logpdf(x, loc=0, scale=1):
    """-log(scale) on [loc, loc + scale], -inf outside."""
    x, loc, scale = promote("uniform.logpdf", x, loc, scale)
    return jnp.where((x > loc + scale) | (x < loc), -np.inf, -jnp.log(scale))


pdf = exp_of(logpdf, "pdf")


def cdf(x, loc=0, scale=1):
    """(x - loc) / scale clipped to [0, 1]."""
    x, loc, scale = promote("uniform.cdf", x, loc, scale)
    return jnp.select([x < loc, x > loc + scale, (x >= loc) & (x <= loc + scale)], [0.0, 1.0, (x - loc) / scale])


def ppf(q, loc=0, scale=1):
    """loc + scale q for q in [0, 1], nan outside."""
    q, loc, scale = promote("uniform.ppf", q, loc, scale)
    return jnp.where(jnp.isnan(q) | (q < 0) | (q > 1), np.nan, loc + scale * q)
