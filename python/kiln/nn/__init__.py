"""kiln.nn: activation functions and friends, as jax.nn, built on kiln.lax and kiln.numpy's internal
modules. Piecewise activations use select (not max/min) so that gradients at the kinks match JAX's
(relu'(0) = 0) and nan propagates. Attention lives in attention.py, the block-scaled matmuls in
scaled.py, and the weight initializers in initializers.py (kiln.nn.initializers).
"""

import math

import numpy as np

from kiln import lax
from kiln._src import dtypes
from kiln._src.custom import custom_jvp
from kiln._src.numpy import util, ufuncs, reductions
from kiln._src.numpy.ufuncs import tanh
from kiln._src.numpy.util import promote_args_inexact, full_like_scalar as _c
from kiln.scipy.special import logsumexp
from kiln.nn import initializers
from kiln.nn.attention import dot_product_attention
from kiln.nn.scaled import get_scaled_dot_general_config, scaled_dot_general, scaled_matmul

__all__ = ["relu", "relu6", "sigmoid", "softplus", "silu", "swish", "gelu", "elu", "leaky_relu",
           "hard_tanh", "hard_sigmoid", "hard_silu", "hard_swish", "log_sigmoid", "softmax", "log_softmax",
           "logsumexp", "logmeanexp", "one_hot", "standardize", "celu", "selu", "glu", "soft_sign", "mish",
           "identity", "tanh", "squareplus", "sparse_plus", "sparse_sigmoid", "log1mexp",
           "dot_product_attention", "scaled_matmul", "scaled_dot_general", "get_scaled_dot_general_config",
           "initializers"]


def _as_array(name, x):
    return util.asarray_arg(name, x)


def _float(name, x):
    x, = promote_args_inexact(name, x)
    return x


# JAX's activations are jnp expressions, so a bool or integer input takes the dtype and weak type
# of that expression: softplus is logaddexp(x, 0) (a bool gives a weak float32 through the Python
# int, an int16 a float32), elu is where(x > 0, x, alpha * expm1(...)) with Python floats (every
# integer gives a weak float32), sigmoid is lax.logistic(x) (no integers at all). Each helper is
# one of those rules; a float input is kept as it is by all of them (bug, issue 32: softplus(bool)
# was a strong float32, sigmoid(int16) computed where JAX raises TypeError).

def _float_with(name, x, partner):
    """x in the dtype jnp promotes x and the Python scalar `partner` to (then inexact)."""
    return util.promote_dtypes_inexact(name, x, partner)[0]


def _weak_as(x, out):
    """out with x's weak type: the activation's jnp expression keeps the promoted input's."""
    return out if bool(out.weak_type) == bool(x.weak_type) else lax.convert_element_type(out, out.dtype, x.weak_type)


def _no_bool(name, x, prim):
    """x, which must not be bool: JAX's expression applies lax `prim` to it, which takes no bool."""
    x = _as_array(name, x)
    if util.is_bool_dtype(x.dtype):
        raise TypeError(f"{name}: {prim} does not accept dtype bool (convert the input first, e.g. "
                        f"x.astype(jnp.float32))")
    return x


def _float_only(name, x):
    """x, which must be inexact: lax.logistic's TypeError otherwise, as JAX."""
    x = _as_array(name, x)
    if not util.is_inexact_dtype(x.dtype):
        raise TypeError(f"{name}: logistic does not accept dtype {x.dtype}; accepted dtypes are floating and "
                        f"complex types (convert the input first, e.g. x.astype(jnp.float32))")
    return x


def identity(x):
    """x itself, as an array."""
    return _as_array("identity", x)


def _zero_outside(inside):
    """A JVP rule passing the tangent where inside(x) holds, 0 elsewhere: at the kinks and for nan too
    (JAX's rules for relu and relu6; a select on x alone would pass nan's tangent through)."""
    return lambda g, ans, x: lax.select(inside(x), g, lax.full(g.shape, 0, g.dtype))


@custom_jvp
def relu(x):
    """max(x, 0); nan passes through, its derivative (and at 0) is 0."""
    x = util.promote_dtypes("relu", x, 0)[0]  # jnp.maximum(x, 0): a bool gives a weak int32
    return _weak_as(x, lax.select(ufuncs.order_le(x, _c(x, 0)), _c(x, 0), x))


relu.defjvps(_zero_outside(lambda x: ufuncs.order_gt(x, _c(x, 0))))  # (complex: JAX's order)


@custom_jvp
def relu6(x):
    """min(max(x, 0), 6), in a float dtype (JAX's compares with the float 6.); derivative 0 at both kinks
    and for nan."""
    x = _float_with("relu6", x, 0.0)
    return _weak_as(x, lax.select(ufuncs.order_le(x, _c(x, 0)), _c(x, 0), lax.select(ufuncs.order_ge(x, _c(x, 6)), _c(x, 6), x)))


relu6.defjvps(_zero_outside(lambda x: lax.and_(ufuncs.order_gt(x, _c(x, 0)), ufuncs.order_lt(x, _c(x, 6)))))


def sigmoid(x):
    """1 / (1 + exp(-x))."""
    return lax.logistic(_float_only("sigmoid", x))


def softplus(x):
    """log(1 + exp(x)), stably."""
    x = _float_with("softplus", x, 0)
    return _weak_as(x, ufuncs.logaddexp(x, _c(x, 0)))


def squareplus(x, b=4):
    """(x + sqrt(x^2 + b)) / 2, a smooth relu whose smoothness is set by b."""
    x = _as_array("squareplus", x)
    root = ufuncs.sqrt(ufuncs.add(ufuncs.square(x), b))
    return ufuncs.divide(ufuncs.add(x, root), 2)


def sparse_plus(x):
    """0 for x <= -1, (x + 1)^2 / 4 for -1 < x < 1, x for x >= 1: softplus's piecewise-quadratic twin."""
    x = _float_with("sparse_plus", x, 0.0)
    one = _c(x, 1)
    middle = lax.mul(lax.integer_pow(lax.add(x, one), 2), _c(x, 0.25))
    return _weak_as(x, lax.select(ufuncs.order_le(x, _c(x, -1)), _c(x, 0), lax.select(ufuncs.order_ge(x, one), x, middle)))


def sparse_sigmoid(x):
    """clip((x + 1) / 2, 0, 1): sigmoid's piecewise-linear twin, the derivative of sparse_plus."""
    x = _float("sparse_sigmoid", x)
    return lax.mul(_c(x, 0.5), ufuncs.clip(lax.add(x, _c(x, 1)), 0.0, 2.0))


@custom_jvp
def log1mexp(x):
    """log(1 - exp(-x)) for x >= 0, accurately: log(-expm1(-x)) below log 2, log1p(-exp(-x)) above
    (Maechler's split). nan for x < 0; the derivative is 1 / expm1(x)."""
    x = _float("log1mexp", x)
    small = lax.log(lax.neg(lax.expm1(lax.neg(x))))
    large = lax.log1p(lax.neg(lax.exp(lax.neg(x))))
    return lax.select(ufuncs.order_lt(x, _c(x, math.log(2))), small, large)


log1mexp.defjvps(lambda g, ans, x: ufuncs.divide(g, lax.expm1(_float("log1mexp", x))))


def log_sigmoid(x):
    """log(sigmoid(x)) = -softplus(-x)."""
    x = _float("log_sigmoid", _no_bool("log_sigmoid", x, "neg"))
    return lax.neg(softplus(lax.neg(x)))


def silu(x):
    """x * sigmoid(x)."""
    x = _float_only("silu", x)
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
    x = _float_with("elu", x, 0.0)
    positive = ufuncs.order_gt(x, _c(x, 0))
    neg = ufuncs.multiply(alpha, lax.expm1(lax.select(positive, _c(x, 0), x)))
    return _weak_as(x, ufuncs.where(positive, x, neg))


def celu(x, alpha=1.0):
    """max(x, 0) + alpha * min(exp(x / alpha) - 1, 0)."""
    x = _float_with("celu", x, 0.0)
    positive = ufuncs.order_gt(x, _c(x, 0))
    neg = ufuncs.multiply(alpha, lax.expm1(ufuncs.divide(lax.select(positive, _c(x, 0), x), alpha)))
    return _weak_as(x, ufuncs.where(positive, x, neg))


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(x):
    """scale * elu(x, alpha) with the self-normalising constants."""
    x = _float_with("selu", x, 0.0)
    return _weak_as(x, lax.mul(_c(x, _SELU_SCALE), elu(x, _SELU_ALPHA)))


def leaky_relu(x, negative_slope=0.01):
    """x for x >= 0, negative_slope * x otherwise."""
    x = _float_with("leaky_relu", x, 0.0)
    return ufuncs.where(ufuncs.order_ge(x, _c(x, 0)), x, ufuncs.multiply(negative_slope, x))


def hard_tanh(x):
    """x clipped to [-1, 1]."""
    x = util.promote_dtypes("hard_tanh", x, 0)[0]  # jnp.where(x > 1, 1, ...): a bool gives a weak int32
    return _weak_as(x, lax.select(ufuncs.order_gt(x, _c(x, 1)), _c(x, 1),
                                  lax.select(ufuncs.order_lt(x, _c(x, -1)), _c(x, -1), x)))


def hard_sigmoid(x):
    """relu6(x + 3) / 6."""
    x = _float_with("hard_sigmoid", x, 0.0)
    return _weak_as(x, lax.div(relu6(lax.add(x, _c(x, 3))), _c(x, 6)))


def hard_silu(x):
    """x * hard_sigmoid(x)."""
    x = _float_with("hard_silu", x, 0.0)
    return _weak_as(x, lax.mul(x, hard_sigmoid(x)))


hard_swish = hard_silu


def soft_sign(x):
    """x / (|x| + 1)."""
    x = _float_with("soft_sign", x, 0)
    return _weak_as(x, lax.div(x, lax.add(lax.abs(x), _c(x, 1))))


def mish(x):
    """x * tanh(softplus(x))."""
    x = _float_with("mish", x, 0)
    return _weak_as(x, lax.mul(x, lax.tanh(softplus(x))))


def glu(x, axis=-1):
    """Gated linear unit: first half * sigmoid(second half) along `axis` (whose size must be even)."""
    x = _float_only("glu", x)
    ax = util.canonicalize_axis(axis, x.ndim, "glu")
    n = x.shape[ax]
    if n % 2:
        raise ValueError(f"glu: axis {axis} of shape {tuple(x.shape)} must have an even size, got {n}")
    first = lax.slice_in_dim(x, 0, n // 2, axis=ax)
    second = lax.slice_in_dim(x, n // 2, n, axis=ax)
    return lax.mul(first, lax.logistic(second))


def _softmax_parts(name, x, axis, where):
    x = _float(name, _no_bool(name, x, "sub"))
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


def logmeanexp(x, axis=None, where=None, keepdims=False):
    """log(mean(exp(x))) over `axis` = logsumexp - log(count), counting only the elements where= keeps."""
    x = _float("logmeanexp", x)
    lse = logsumexp(x, axis=axis, keepdims=keepdims, where=where)
    axes = util.canonicalize_axes(axis, x.ndim, "logmeanexp")
    if where is None:
        count = _c(lse, math.prod(x.shape[a] for a in axes))
    else:
        w = reductions._where_arg("logmeanexp", where, x.shape)
        count = reductions.sum(lax.convert_element_type(w, lse.dtype), axes, keepdims=keepdims)
    return lax.sub(lse, lax.log(count))


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


def standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5, where=None, *, algorithm="fast"):
    """(x - mean) / sqrt(variance + epsilon), with mean and variance taken over `axis` unless given.

    algorithm="fast" takes the variance as mean(x^2) - mean^2 (one pass; clipped at 0, since
    cancellation can make it negative), "stable" as mean((x - mean)^2)."""
    if algorithm not in ("fast", "stable"):
        raise ValueError(f"standardize: unknown algorithm {algorithm!r}; expected 'fast' or 'stable'")
    x = _float("standardize", x)
    if mean is None:
        mean = reductions.mean(x, axis, keepdims=True, where=where)
    if variance is None:
        mean_a = util.asarray_arg("standardize", mean)
        if algorithm == "stable":
            variance = reductions.mean(ufuncs.square(ufuncs.subtract(x, mean_a)), axis, keepdims=True, where=where)
        else:
            mean_sq = reductions.mean(lax.mul(x, x), axis, keepdims=True, where=where)
            variance = ufuncs.maximum(ufuncs.subtract(mean_sq, ufuncs.square(mean_a)), 0)
    centered = ufuncs.subtract(x, mean)
    scale = lax.rsqrt(ufuncs.add(variance, epsilon))
    return ufuncs.multiply(centered, scale)
