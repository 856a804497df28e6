"""kiln.scipy.stats.bernoulli: the Bernoulli distribution, as jax.scipy.stats.bernoulli."""

import numpy as np

from kiln import numpy as jnp
from kiln.scipy import special
from kiln.scipy.stats._common import exp_of, promote


def logpmf(k, p, loc=0):
    """k log p + (1 - k) log(1 - p) for k - loc in {0, 1} (as floats: intermediate k interpolates, as JAX);
    -inf outside [0, 1]."""
    k, p, loc = promote("bernoulli.logpmf", k, p, loc)
    x = k - loc
    log_probs = special.xlogy(x, p) + special.xlog1py(1.0 - x, -p)
    return jnp.where((x < 0) | (x > 1), -np.inf, log_probs)


pmf = exp_of(logpmf, "pmf")


def cdf(k, p):
    """0 below 0, 1 - p on [0, 1), 1 from 1; nan for nan inputs or p outside [0, 1]."""
    k, p = promote("bernoulli.cdf", k, p)
    bad = jnp.isnan(k) | jnp.isnan(p) | (p < 0) | (p > 1)
    return jnp.select([bad, k < 0, (k >= 0) & (k < 1), k >= 1], [np.nan, 0.0, 1.0 - p, 1.0])


def ppf(q, p):
    """0 for q <= 1 - p, else 1; nan for q or p outside [0, 1]."""
    q, p = promote("bernoulli.ppf", q, p)
    bad = jnp.isnan(q) | jnp.isnan(p) | (p < 0) | (p > 1) | (q < 0) | (q > 1)
    return jnp.where(bad, np.nan, jnp.where(q <= 1.0 - p, 0.0, 1.0))
