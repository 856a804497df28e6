"""kiln.scipy.stats.vonmises: the von Mises distribution on the circle (standardized, as in JAX)."""

import math

import numpy as np

from kiln import numpy as jnp
from kiln.scipy import special
from kiln.scipy.stats._common import exp_of, promote


def logpdf(x, kappa):
    """kappa (cos x - 1) - log(2 pi i0e(kappa)) (the exponentially scaled Bessel keeps large kappa finite);
    nan for kappa <= 0."""
    x, kappa = promote("vonmises.logpdf", x, kappa)
    return jnp.where(kappa > 0, kappa * (jnp.cos(x) - 1.0) - jnp.log(2 * math.pi * special.i0e(kappa)), np.nan)


pdf = exp_of(logpdf, "pdf")
