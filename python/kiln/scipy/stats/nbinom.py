"""kiln.scipy.stats.nbinom: the negative binomial distribution, as jax.scipy.stats.nbinom."""

import numpy as np

from kiln import numpy as jnp
from kiln.scipy import special
from kiln.scipy.stats._common import exp_of, promote


def logpmf(k, n, p, loc=0):
    """gammaln(y + n) - gammaln(n) - gammaln(y + 1) + n log p + y log(1 - p), y = k - loc; -inf below loc."""
    k, n, p, loc = promote("nbinom.logpmf", k, n, p, loc)
    y = k - loc
    comb_term = special.gammaln(y + n) - special.gammaln(n) - special.gammaln(y + 1.0)
    log_linear = special.xlogy(n, p) + special.xlogy(y, 1.0 - p)
    return jnp.where(k < loc, -np.inf, comb_term + log_linear)


pmf = exp_of(logpmf, "pmf")
