"""kiln.scipy.stats.poisson: the Poisson distribution, as jax.scipy.stats.poisson."""

import math

import numpy as np

from kiln import numpy as jnp
from kiln._src.numpy.util import promote_dtypes_inexact
from kiln.scipy import special
from kiln.scipy.stats._common import exp_of, promote


def logpmf(k, mu, loc=0):
    """x log mu - gammaln(x + 1) - mu, x = k - loc; -inf for x < 0 or non-integer k."""
    k, mu, loc = promote("poisson.logpmf", k, mu, loc)
    x = k - loc
    log_probs = special.xlogy(x, mu) - special.gammaln(x + 1.0) - mu
    return jnp.where((x < 0) | (jnp.round(k) != k), -np.inf, log_probs)


pmf = exp_of(logpmf, "pmf")


def cdf(k, mu, loc=0):
    """gammaincc(floor(x) + 1, mu), x = k - loc; 0 below 0."""
    k, mu, loc = promote("poisson.cdf", k, mu, loc)
    x = k - loc
    return jnp.where(x < 0, 0.0, special.gammaincc(jnp.floor(1.0 + jnp.maximum(x, 0.0)), mu))


def _entropy_by_sum(mu, terms, upper):
    """-sum p log p over k < min(terms, upper(mu))."""
    k = jnp.arange(terms, dtype=mu.dtype)[:, None]
    probs = pmf(k, mu[None, :], 0)
    probs = jnp.where(k < jnp.ceil(upper(mu))[None, :], probs, 0.0)
    return jnp.sum(special.entr(probs), axis=0)


def entropy(mu, loc=0):
    """The entropy of Poisson(mu): the pmf summed for mu < 100 (35 terms below 10, 250 below 100), the
    asymptotic 1/2 log(2 pi e mu) - 1/(12 mu) above; 0 at mu == 0. loc only broadcasts the shape."""
    mu, loc = promote_dtypes_inexact("poisson.entropy", mu, loc)
    flat = jnp.ravel(mu)
    small = _entropy_by_sum(flat, 35, lambda m: m + 20.0)
    medium = _entropy_by_sum(flat, 250, lambda m: m + 10.0 * jnp.sqrt(m) + 20.0)
    big = jnp.maximum(flat, 1.0)
    large = 0.5 * jnp.log(2 * math.pi * math.e * big) - 1.0 / (12.0 * big)
    out = jnp.where(flat == 0, 0.0, jnp.where(flat < 10, small, jnp.where(flat < 100, medium, large)))
    return jnp.broadcast_to(out.reshape(mu.shape), np.broadcast_shapes(mu.shape, loc.shape))
