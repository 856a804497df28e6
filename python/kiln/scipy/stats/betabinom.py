"""kiln.scipy.stats.betabinom: the beta-binomial distribution, as jax.scipy.stats.betabinom."""

import numpy as np

from kiln import numpy as jnp
from kiln.scipy import special
from kiln.scipy.stats._common import exp_of, promote


def logpmf(k, n, a, b, loc=0):
    """-log(n + 1) - betaln(n - y + 1, y + 1) + betaln(y + a, n - y + b) - betaln(a, b), y = floor(k) - loc;
    -inf outside the support, nan for n < 0 or a, b <= 0."""
    k, n, a, b, loc = promote("betabinom.logpmf", k, n, a, b, loc)
    y = jnp.floor(k) - loc
    combiln = -(jnp.log1p(n) + special.betaln(n - y + 1.0, y + 1.0))
    log_probs = combiln + special.betaln(y + a, n - y + b) - special.betaln(a, b)
    log_probs = jnp.where((y == 0) & (n == 0), 0.0, log_probs)
    # outside 0 <= y <= n (JAX tests y < -loc, which lets in y < 0 whenever loc > 0)
    log_probs = jnp.where((y < 0) | (y > n) | (y + a <= 0), -np.inf, log_probs)
    return jnp.where((n < 0) | (a <= 0) | (b <= 0), np.nan, log_probs)


pmf = exp_of(logpmf, "pmf")
