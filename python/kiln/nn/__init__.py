"""kiln.nn: activation functions and friends, as jax.nn, built on kiln.lax and kiln.numpy's internal
modules. Piecewise activations use select (not max/min) so that gradients at the kinks match JAX's
(relu'(0) = 0) and nan propagates.
"""

import math

import numpy as np

from kiln import lax
from kiln._src import dtypes
from kiln._src.numpy import util, ufuncs, reductions
from kiln._src.numpy.util import promote_args_inexact, full_like_scalar as _c
from kiln.scipy.special import logsumexp

__all__ = ["relu", "relu6", "sigmoid", "softplus", "silu", "swish", "gelu", "elu", "leaky_relu",
           "hard_tanh", "hard_sigmoid", "hard_silu", "hard_swish", "log_sigmoid", "softmax", "log_softmax",
           "logsumexp", "one_hot", "standardize", "celu", "selu", "glu", "soft_sign", "mish"]


def _as_array(name, x):
    return util.asarray_arg(name, x)


def _float(name, x):
    x, = promote_args_inexact(name, x)
    return x


def relu(x):
    """max(x, 0), with gradient 0 at 0 and nan passed through."""
    x = _as_array("relu", x)
    return lax.select(lax.le(x, _c(x, 0)), _c(x, 0), x)


def relu6(x):
    """min(max(x, 0), 6)."""
    x = _as_array("relu6", x)
    return lax.select(lax.le(x, _c(x, 0)), _c(x, 0), lax.select(lax.ge(x, _c(x, 6)), _c(x, 6), x))


def sigmoid(x):
    """1 / (1 + exp(-x))."""
    return lax.logistic(_float("sigmoid", x))


def softplus(x):
    """log(1 + exp(x)), stably."""
    x = _float("softplus", x)
    return ufuncs.logaddexp(x, _c(x, 0))


def log_sigmoid(x):
    """log(sigmoid(x)) = -softplus(-x)."""
    x = _float("log_sigmoid", x)
    return lax.neg(softplus(lax.neg(x)))


def silu(x):
    """x * sigmoid(x)."""
    x = _float("silu", x)
    return lax.mul(x, lax.logistic(x))


swish = silu


def gelu(x, approximate=True):
    """Gaussian error linear unit; the tanh approximation by default, erf-exact with approximate=False."""
    x = _float("gelu", x)
    if approximate:
        inner = lax.mul(_c(x, math.sqrt(2 / math.pi)),
                        lax.add(x, lax.mul(_c(x, 0.044715), lax.integer_pow(x, 3))))
        return lax.mul(lax.mul(x, _c(x, 0.5)), lax.add(_c(x, 1), lax.tanh(inner)))
    return lax.mul(lax.mul(x, _c(x, 0.5)), lax.erfc(lax.mul(x, _c(x, -math.sqrt(0.5)))))


def elu(x, alpha=1.0):
    """x for x > 0, alpha * (exp(x) - 1) otherwise."""
    x = _float("elu", x)
    zero = _c(x, 0)
    neg = lax.mul(_c(x, alpha), lax.expm1(lax.select(lax.gt(x, zero), zero, x)))
    return lax.select(lax.gt(x, zero), x, neg)


def celu(x, alpha=1.0):
    """max(x, 0) + alpha * min(exp(x / alpha) - 1, 0)."""
    x = _float("celu", x)
    zero = _c(x, 0)
    neg = lax.mul(_c(x, alpha), lax.expm1(lax.div(lax.select(lax.gt(x, zero), zero, x), _c(x, alpha))))
    return lax.select(lax.gt(x, zero), x, neg)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(x):
    """scale * elu(x, alpha) with the self-normalising constants."""
    x = _float("selu", x)
    return lax.mul(_c(x, _SELU_SCALE), elu(x, _SELU_ALPHA))


def leaky_relu(x, negative_slope=0.01):
    """x for x >= 0, negative_slope * x otherwise."""
    x = _float("leaky_relu", x)
    return lax.select(lax.ge(x, _c(x, 0)), x, lax.mul(x, _c(x, negative_slope)))


def hard_tanh(x):
    """x clipped to [-1, 1]."""
    x = _as_array("hard_tanh", x)
    return lax.select(lax.gt(x, _c(x, 1)), _c(x, 1), lax.select(lax.lt(x, _c(x, -1)), _c(x, -1), x))


def hard_sigmoid(x):
    """relu6(x + 3) / 6."""
    x = _float("hard_sigmoid", x)
    return lax.div(relu6(lax.add(x, _c(x, 3))), _c(x, 6))


def hard_silu(x):
    """x * hard_sigmoid(x)."""
    x = _float("hard_silu", x)
    return lax.mul(x, hard_sigmoid(x))


hard_swish = hard_silu


def soft_sign(x):
    """x / (|x| + 1)."""
    x = _float("soft_sign", x)
    return lax.div(x, lax.add(lax.abs(x), _c(x, 1)))


def mish(x):
    """x * tanh(softplus(x))."""
    x = _float("mish", x)
    return lax.mul(x, lax.tanh(softplus(x)))


def glu(x, axis=-1):
    """Gated linear unit: first half * sigmoid(second half) along `axis` (whose size must be even)."""
    x = _float("glu", x)
    ax = util.canonicalize_axis(axis, x.ndim, "glu")
    n = x.shape[ax]
    if n % 2:
        raise ValueError(f"glu: axis {axis} of shape {tuple(x.shape)} must have an even size, got {n}")
    first = lax.slice_in_dim(x, 0, n // 2, axis=ax)
    second = lax.slice_in_dim(x, n // 2, n, axis=ax)
    return lax.mul(first, lax.logistic(second))


def _softmax_parts(name, x, axis, where):
    x = _float(name, x)
    axes = util.canonicalize_axes(axis, x.ndim, name)
    w = None if where is None else reductions._where_arg(name, where, x.shape)
    x_max = reductions.max(x, axes, keepdims=True, where=w, initial=-np.inf)
    x_max = lax.stop_gradient(util.broadcast_to_shape(x_max, x.shape, name))
    shifted = lax.sub(x, x_max)
    if w is not None:
        shifted = lax.select(w, shifted, _c(shifted, -np.inf))
    return shifted, axes, w


def softmax(x, axis=-1, where=None):
    """exp(x) / sum(exp(x)) along `axis`, stably; positions masked out by where= give 0."""
    shifted, axes, w = _softmax_parts("softmax", x, axis, where)
    unnormalized = lax.exp(shifted)
    total = reductions.sum(unnormalized, axes, keepdims=True, where=w)
    out = lax.div(unnormalized, util.broadcast_to_shape(total, unnormalized.shape, "softmax"))
    if w is not None:
        out = lax.select(w, out, _c(out, 0))
    return out


def log_softmax(x, axis=-1, where=None):
    """x - logsumexp(x) along `axis`, stably; positions masked out by where= give -inf."""
    shifted, axes, w = _softmax_parts("log_softmax", x, axis, where)
    total = reductions.sum(lax.exp(shifted), axes, keepdims=True, where=w)
    out = lax.sub(shifted, util.broadcast_to_shape(lax.log(total), shifted.shape, "log_softmax"))
    if w is not None:
        out = lax.select(w, out, _c(out, -np.inf))
    return out


def one_hot(x, num_classes, *, dtype=None, axis=-1):
    """One-hot encoding: a new axis of size num_classes at `axis`; out-of-range values give all zeros."""
    num_classes = util.concrete_int(num_classes, "one_hot: num_classes (must be static, e.g. a Python int)")
    if num_classes < 0:
        raise ValueError(f"one_hot: num_classes must be non-negative, got {num_classes}")
    x = _as_array("one_hot", x)
    dtype = util.dtype_arg(dtype) or np.dtype(dtypes.default_float_dtype())
    out_ndim = x.ndim + 1
    ax = util.canonicalize_axis(axis, out_ndim, "one_hot")
    out_shape = tuple(x.shape[:ax]) + (num_classes,) + tuple(x.shape[ax:])
    dims = tuple(i for i in range(out_ndim) if i != ax)
    lhs = lax.broadcast_in_dim(x, out_shape, dims)
    rhs = lax.broadcasted_iota(x.dtype if not util.is_bool_dtype(x.dtype) else np.int32, out_shape, ax)
    if util.is_bool_dtype(x.dtype):
        lhs = lax.convert_element_type(lhs, np.int32)
    return lax.convert_element_type(lax.eq(lhs, rhs), dtype)


def standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5, where=None):
    """(x - mean) / sqrt(variance + epsilon), with mean and variance taken over `axis` unless given."""
    x = _float("standardize", x)
    if mean is None:
        mean = reductions.mean(x, axis, keepdims=True, where=where)
    if variance is None:
        mean_sq = reductions.mean(lax.mul(x, x), axis, keepdims=True, where=where)
        mean_a = util.asarray_arg("standardize", mean)
        variance = ufuncs.subtract(mean_sq, lax.mul(mean_a, mean_a))
    centered = ufuncs.subtract(x, mean)
    scale = lax.rsqrt(ufuncs.add(variance, epsilon))
    return ufuncs.multiply(centered, scale)
