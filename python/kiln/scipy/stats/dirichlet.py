"""kiln.scipy.stats.dirichlet: the Dirichlet distribution, as jax.scipy.stats.dirichlet."""

import numpy as np

from kiln import numpy as jnp
from kiln._src.numpy.util import promote_dtypes_inexact
from kiln.scipy import special
from kiln.scipy.stats._common import exp_of


def logpdf(x, alpha):
    """sum_i (alpha_i - 1) log x_i - (sum gammaln(alpha) - gammaln(sum alpha)) for x on the simplex (axis 0
    of x indexes the components, which may be one fewer than alpha's: the last is 1 - sum); -inf off it."""
    x, alpha = promote_dtypes_inexact("dirichlet.logpdf", x, alpha)
    if alpha.ndim != 1:
        raise ValueError(f"`alpha` must be one-dimensional; got alpha.shape={alpha.shape}")
    if x.ndim == 0 or x.shape[0] not in (alpha.shape[0], alpha.shape[0] - 1):
        raise ValueError("`x` must have either the same number of entries as `alpha` or one entry fewer; "
                         f"got x.shape={x.shape}, alpha.shape={alpha.shape}")
    if x.shape[0] != alpha.shape[0]:
        x = jnp.concatenate([x, 1.0 - jnp.sum(x, axis=0, keepdims=True)], axis=0)
    normalizer = jnp.sum(special.gammaln(alpha)) - special.gammaln(jnp.sum(alpha))
    alpha = alpha.reshape(alpha.shape + (1,) * (x.ndim - 1))
    log_probs = jnp.sum(special.xlogy(alpha - 1.0, x), axis=0) - normalizer
    on_simplex = jnp.all(x > 0, axis=0) & (jnp.abs(jnp.sum(x, axis=0) - 1.0) < 1e-6)
    return jnp.where(on_simplex, log_probs, -np.inf)


pdf = exp_of(logpdf, "pdf")
