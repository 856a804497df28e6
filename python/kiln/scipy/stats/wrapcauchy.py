"""kiln.scipy.stats.wrapcauchy: the wrapped Cauchy distribution on [0, 2 pi] (standardized, as in JAX)."""

import math

import numpy as np

from kiln import numpy as jnp
from kiln.scipy.stats._common import exp_of, promote


def logpdf(x, c):
    """log(1 - c^2) - log(2 pi) - log(1 + c^2 - 2 c cos x) on [0, 2 pi] (-inf outside); nan unless 0 < c < 1."""
    x, c = promote("wrapcauchy.logpdf", x, c)
    inside = jnp.log(1.0 - c * c) - math.log(2 * math.pi) - jnp.log(1.0 + c * c - 2.0 * c * jnp.cos(x))
    out = jnp.where((x >= 0) & (x <= 2 * math.pi), inside, -np.inf)
    return jnp.where((c > 0) & (c < 1), out, np.nan)


pdf = exp_of(logpdf, "pdf")
