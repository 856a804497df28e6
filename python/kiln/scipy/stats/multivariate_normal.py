"""kiln.scipy.stats.multivariate_normal: the multivariate normal distribution, as
jax.scipy.stats.multivariate_normal (a Cholesky factor whitens x - mean)."""

import math

import numpy as np

from kiln import numpy as jnp
from kiln._src.numpy.util import promote_dtypes_inexact
from kiln.lax import linalg as lax_linalg


def logpdf(x, mean, cov, allow_singular=None):
    """The log density over the last axis of x; mean of shape (n,) (or a scalar: a univariate normal), cov
    a scalar (cov * identity) or an (n, n) matrix (batches broadcast). allow_singular is not supported."""
    if allow_singular is not None:
        raise NotImplementedError("allow_singular argument of multivariate_normal.logpdf")
    x, mean, cov = promote_dtypes_inexact("multivariate_normal.logpdf", x, mean, cov)
    if not mean.shape:
        return -0.5 * jnp.square(x - mean) / cov - 0.5 * (math.log(2 * math.pi) + jnp.log(cov))
    n = mean.shape[-1]
    if not cov.shape:
        y = x - mean
        return -0.5 * jnp.sum(y * y, axis=-1) / cov - n / 2 * (math.log(2 * math.pi) + jnp.log(cov))
    if cov.ndim < 2 or cov.shape[-2:] != (n, n):
        raise ValueError("multivariate_normal.logpdf got incompatible shapes")
    chol = lax_linalg.cholesky(cov)
    y = x - mean
    shape = np.broadcast_shapes(chol.shape[:-2], y.shape[:-1])
    chol = jnp.broadcast_to(chol, shape + (n, n))
    y = jnp.broadcast_to(y, shape + (n,))[..., None]
    z = lax_linalg.triangular_solve(chol, y, left_side=True, lower=True)[..., 0]
    log_det = jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)), axis=-1)
    return -0.5 * jnp.sum(z * z, axis=-1) - n / 2 * math.log(2 * math.pi) - log_det


def pdf(x, mean, cov):
    """exp(logpdf(x, mean, cov))."""
    return jnp.exp(logpdf(x, mean, cov))

