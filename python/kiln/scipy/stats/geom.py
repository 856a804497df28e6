"""kiln.scipy.stats.geom: the geometric distribution (trials up to the first success), as
jax.scipy.stats.geom."""

import numpy as np

from kiln import numpy as jnp
from kiln.scipy import special
from kiln.scipy.stats._common import exp_of, promote


def logpmf(k, p, loc=0):
    """(y - 1) log(1 - p) + log p, y = k - loc; -inf for y <= 0."""
    k, p, loc = promote("geom.logpmf", k, p, loc)
    x = k - loc
    return jnp.where(x <= 0, -np.inf, special.xlog1py(x - 1.0, -p) + jnp.log(p))


pmf = exp_of(logpmf, "pmf")
