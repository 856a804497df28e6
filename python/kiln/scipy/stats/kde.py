"""kiln.scipy.stats.gaussian_kde: Gaussian kernel density estimation, as jax.scipy.stats.gaussian_kde (a
pytree, so it passes through jit and vmap). resample draws with kiln.random.choice and
multivariate_normal, and works where those do."""

import math

import numpy as np

from kiln import numpy as jnp
from kiln._src import tree_util
from kiln._src.numpy.util import promote_dtypes_inexact
from kiln.scipy import linalg, special


@tree_util.register_pytree_node_class
class gaussian_kde:
    """A Gaussian KDE of `dataset` (shape (d, n), or (n,) for one dimension) with weights (default equal)
    and bandwidth factor bw_method ('scott' (default), 'silverman', a scalar, or a callable of the KDE)."""

    __slots__ = ("neff", "dataset", "weights", "covariance", "inv_cov")

    def __init__(self, dataset, bw_method=None, weights=None):
        dataset = jnp.atleast_2d(jnp.asarray(dataset))
        if jnp.iscomplexobj(dataset):
            raise NotImplementedError("gaussian_kde does not support complex data")
        if not dataset.size > 1:
            raise ValueError("`dataset` input should have multiple elements.")
        d, n = dataset.shape
        if weights is not None:
            dataset, weights = promote_dtypes_inexact("gaussian_kde", dataset, weights)
            weights = jnp.atleast_1d(weights)
            weights = weights / jnp.sum(weights)
            if weights.ndim != 1:
                raise ValueError("`weights` input should be one-dimensional.")
            if len(weights) != n:
                raise ValueError("`weights` input should be of length n")
        else:
            dataset, = promote_dtypes_inexact("gaussian_kde", dataset)
            weights = jnp.full(n, 1.0 / n, dtype=dataset.dtype)
        self._set("dataset", dataset)
        self._set("weights", weights)
        neff = self._set("neff", 1 / jnp.sum(weights ** 2))
        bw_method = "scott" if bw_method is None else bw_method
        if isinstance(bw_method, str) and bw_method == "scott":
            factor = jnp.power(neff, -1.0 / (d + 4))
        elif isinstance(bw_method, str) and bw_method == "silverman":
            factor = jnp.power(neff * (d + 2) / 4.0, -1.0 / (d + 4))
        elif jnp.isscalar(bw_method) and not isinstance(bw_method, str):
            factor = bw_method
        elif callable(bw_method):
            factor = bw_method(self)
        else:
            raise ValueError("`bw_method` should be 'scott', 'silverman', a scalar, or a callable.")
        # the weighted covariance with NumPy's unbiased aweights correction 1 - sum(w^2)
        mean = jnp.sum(dataset * weights, axis=1, keepdims=True)
        centered = dataset - mean
        data_cov = jnp.atleast_2d((centered * weights) @ centered.T / (1.0 - jnp.sum(weights ** 2)))
        self._set("covariance", data_cov * factor ** 2)
        self._set("inv_cov", jnp.linalg.inv(data_cov) / factor ** 2)

    def _set(self, name, value):
        object.__setattr__(self, name, value)
        return value

    def tree_flatten(self):
        return (self.neff, self.dataset, self.weights, self.covariance, self.inv_cov), None

    @classmethod
    def tree_unflatten(cls, aux_data, children):
        kde = cls.__new__(cls)
        for name, value in zip(cls.__slots__, children):
            kde._set(name, value)
        return kde

    @property
    def d(self):
        return self.dataset.shape[0]

    @property
    def n(self):
        return self.dataset.shape[1]

    def evaluate(self, points):
        """The density at `points` (shape (d, m), or (m,) when d == 1)."""
        return _kernel_sum(False, self.dataset.T, self.weights, self._reshape_points(points).T, self.inv_cov)

    __call__ = pdf = evaluate

    def logpdf(self, x):
        """The log density at `x`, by a logsumexp over the kernels."""
        return _kernel_sum(True, self.dataset.T, self.weights, self._reshape_points(x).T, self.inv_cov)

    def integrate_gaussian(self, mean, cov):
        """The integral of the KDE times a Gaussian with this mean and covariance."""
        mean = jnp.atleast_1d(jnp.squeeze(jnp.asarray(mean)))
        cov = jnp.atleast_2d(jnp.asarray(cov))
        if mean.shape != (self.d,):
            raise ValueError(f"mean does not have dimension {self.d}")
        if cov.shape != (self.d, self.d):
            raise ValueError(f"covariance does not have dimension {self.d}")
        chol = linalg.cho_factor(self.covariance + cov)
        norm = 1.0 / (math.sqrt(2 * math.pi) ** self.d * jnp.prod(jnp.diag(chol[0])))
        return _convolve(chol, norm, self.dataset, self.weights, mean)

    def integrate_box_1d(self, low, high):
        """The integral of a one-dimensional KDE over [low, high] (scalars)."""
        if self.d != 1:
            raise ValueError("integrate_box_1d() only handles 1D pdfs")
        if np.ndim(low) != 0 or np.ndim(high) != 0:
            raise ValueError("the limits of integration in integrate_box_1d must be scalars")
        sigma = jnp.squeeze(jnp.sqrt(self.covariance))
        low = jnp.squeeze((low - self.dataset) / sigma)
        high = jnp.squeeze((high - self.dataset) / sigma)
        return jnp.sum(self.weights * (special.ndtr(high) - special.ndtr(low)))

    def integrate_kde(self, other):
        """The integral of the product of two KDEs of one dimensionality."""
        if other.d != self.d:
            raise ValueError("KDEs are not the same dimensionality")
        chol = linalg.cho_factor(self.covariance + other.covariance)
        norm = 1.0 / (math.sqrt(2 * math.pi) ** self.d * jnp.prod(jnp.diag(chol[0])))
        small, large = (self, other) if self.n < other.n else (other, self)
        total = 0.0
        for i in range(small.n):  # one convolution per point of the smaller KDE
            total = total + small.weights[i] * _convolve(chol, norm, large.dataset, large.weights,
                                                         small.dataset[:, i])
        return total

    def resample(self, key, shape=()):
        """Draws `shape` samples (returned as (d,) + shape) from the KDE."""
        from kiln import random
        ind_key, eps_key = random.split(key)
        ind = random.choice(ind_key, self.n, shape=shape, p=self.weights)
        eps = random.multivariate_normal(eps_key, jnp.zeros(self.d, self.covariance.dtype), self.covariance,
                                         shape=shape, dtype=self.dataset.dtype).T
        return self.dataset[:, ind] + eps

    def integrate_box(self, low_bounds, high_bounds, maxpts=None):
        """Not supported (as in JAX): use integrate_box_1d."""
        raise NotImplementedError("only 1D box integrations are supported; use `integrate_box_1d`")

    def set_bandwidth(self, bw_method=None):
        """Not supported (as in JAX): the KDE is immutable."""
        raise NotImplementedError("dynamically changing the bandwidth method is not supported")

    def _reshape_points(self, points):
        points = jnp.asarray(points)
        if jnp.iscomplexobj(points):
            raise NotImplementedError("gaussian_kde does not support complex coordinates")
        points = jnp.atleast_2d(points)
        d, m = points.shape
        if d != self.d:
            if d == 1 and m == self.d:
                return jnp.reshape(points, (self.d, 1))
            raise ValueError(f"points have dimension {d}, dataset has dimension {self.d}")
        return points


def _convolve(chol, norm, target, weights, mean):
    diff = target - mean[:, None]
    alpha = linalg.cho_solve(chol, diff)
    return norm * jnp.sum(jnp.exp(-0.5 * jnp.sum(diff * alpha, axis=0)) * weights)


def _kernel_sum(in_log, points, weights, xi, precision):
    """sum_j w_j N(xi_i; points_j, precision^-1) for each row xi_i (or its log, by logsumexp)."""
    points, weights, xi, precision = promote_dtypes_inexact("gaussian_kde", points, weights, xi, precision)
    d = points.shape[1]
    if xi.shape[1] != d:
        raise ValueError("points and xi must have same trailing dim")
    if precision.shape != (d, d):
        raise ValueError("precision matrix must match data dims")
    whitening = linalg.cholesky(precision, lower=True)
    points, xi = points @ whitening, xi @ whitening
    log_norm = jnp.sum(jnp.log(jnp.diag(whitening))) - 0.5 * d * math.log(2 * math.pi)
    sq = jnp.sum((xi[:, None, :] - points[None, :, :]) ** 2, axis=-1)  # (m, n)
    arg = log_norm - 0.5 * sq
    if in_log:
        return special.logsumexp(arg + jnp.log(weights)[None, :], axis=1)
    return jnp.sum(weights[None, :] * jnp.exp(arg), axis=1)
