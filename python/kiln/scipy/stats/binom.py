"""kiln.scipy.stats.binom: the binomial distribution, as jax.scipy.stats.binom."""

import numpy as np

from kiln import numpy as jnp
from kiln.scipy import special
from kiln.scipy.stats._common import exp_of, promote


def logpmf(k, n, p, loc=0):
    """log C(n, y) + y log p + (n - y) log(1 - p), y = k - loc; -inf outside 0 <= y <= n."""
    k, n, p, loc = promote("binom.logpmf", k, n, p, loc)
    y = k - loc
    comb_term = special.gammaln(n + 1.0) - (special.gammaln(y + 1.0) + special.gammaln(n - y + 1.0))
    log_linear = special.xlogy(y, p) + special.xlog1py(n - y, -p)
    log_probs = jnp.where(((y == 0) & (n == 0)) | (log_linear == 0), 0.0, comb_term + log_linear)
    return jnp.where((k >= loc) & (k < loc + n + 1.0), log_probs, -np.inf)


pmf = exp_of(logpmf, "pmf")
