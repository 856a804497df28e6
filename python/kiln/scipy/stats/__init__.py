"""kiln.scipy.stats: jax.scipy.stats' distributions (one module each, with JAX's functions, argument
names and defaults) and summary statistics, on kiln.numpy and kiln.scipy.special."""

from kiln.scipy.stats import (bernoulli, beta, betabinom, binom, cauchy, chi2, dirichlet, expon,  # noqa: F401
                              gamma, gennorm, geom, gumbel_l, gumbel_r, laplace, logistic, multinomial,
                              multivariate_normal, nbinom, norm, pareto, poisson, t, truncnorm, uniform,
                              vonmises, wrapcauchy)
from kiln.scipy.stats._core import ModeResult, mode, rankdata, sem  # noqa: F401
from kiln.scipy.stats.kde import gaussian_kde  # noqa: F401
