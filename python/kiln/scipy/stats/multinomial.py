"""kiln.scipy.stats.multinomial: the multinomial distribution, as jax.scipy.stats.multinomial."""

import numpy as np

from kiln import numpy as jnp
from kiln._src.numpy.util import promote_args_inexact, promote_dtypes
from kiln.scipy import special
from kiln.scipy.stats._common import exp_of


def logpmf(x, n, p):
    """gammaln(n + 1) + sum_i (x_i log p_i - gammaln(x_i + 1)) over the last axis; -inf where the counts
    do not sum to n. x and n must be integers."""
    p, = promote_args_inexact("multinomial.logpmf", p)
    x, n = promote_dtypes("multinomial.logpmf", x, n)
    if not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"x and n must be of integer type; got x.dtype={x.dtype}, n.dtype={n.dtype}")
    x, n = x.astype(p.dtype), n.astype(p.dtype)
    log_probs = special.gammaln(n + 1.0) + jnp.sum(special.xlogy(x, p) - special.gammaln(x + 1.0), axis=-1)
    return jnp.where(jnp.sum(x, axis=-1) == n, log_probs, -np.inf)  # JAX sums all of x (one sample)


pmf = exp_of(logpmf, "pmf")
