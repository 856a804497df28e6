"""kiln.scipy.stats.t: Student's t distribution with df degrees of freedom, as jax.scipy.stats.t."""

import math

from kiln import numpy as jnp
from kiln.scipy import special
from kiln.scipy.stats._common import exp_of, promote


def logpdf(x, df, loc=0, scale=1):
    """gammaln((df+1)/2) - gammaln(df/2) - log(pi df scale^2)/2 - (df+1)/2 log1p(z^2 / df)."""
    x, df, loc, scale = promote("t.logpdf", x, df, loc, scale)
    z = (x - loc) / scale
    half_df = df / 2.0
    normalizer = special.gammaln(half_df) + jnp.log(scale * scale * math.pi * df) / 2.0 - special.gammaln(half_df + 0.5)
    return -(normalizer + (half_df + 0.5) * jnp.log1p(z * z / df))


pdf = exp_of(logpdf, "pdf")
