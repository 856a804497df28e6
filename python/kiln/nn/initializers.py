"""kiln.nn.initializers: jax.nn.initializers, weight initializers called as init(key, shape, dtype).

Each builder returns an Initializer; the random ones draw from kiln.random, so their values are
JAX's bit for bit exactly where kiln.random's sampler is. kiln has no shardings: out_sharding must be
None. Depends on kiln.random and kiln.numpy only.
"""

import math
import operator
import typing

import numpy as np

from kiln import numpy as jnp
from kiln import random
from kiln._src import dtypes
from kiln._src.numpy import util

__all__ = ["Initializer", "zeros", "ones", "constant", "uniform", "normal", "truncated_normal",
           "variance_scaling", "glorot_uniform", "glorot_normal", "xavier_uniform", "xavier_normal",
           "lecun_uniform", "lecun_normal", "he_uniform", "he_normal", "kaiming_uniform", "kaiming_normal",
           "orthogonal", "delta_orthogonal"]


@typing.runtime_checkable
class Initializer(typing.Protocol):
    """What every jax.nn.initializers builder returns: a function of (key, shape, dtype, out_sharding)."""

    def __call__(self, key, shape, dtype=None, out_sharding=None):
        raise NotImplementedError


def _dtype(dtype):
    """The requested dtype, the default float one when None, canonical (float64 -> float32 without x64)."""
    return dtypes.canonicalize_dtype(np.dtype(dtypes.default_float_dtype()) if dtype is None
                                     else util.dtype_arg(dtype))


def _shape(shape, name):
    try:
        return tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"nn.initializers.{name}: shape must be a sequence of integers, got {shape!r}") from None


def _no_sharding(out_sharding, name):
    if out_sharding is not None:
        raise NotImplementedError(f"nn.initializers.{name}: kiln has no shardings; out_sharding must be None")


def zeros(key, shape, dtype=None, out_sharding=None):
    """An array of zeros (the key is ignored)."""
    _no_sharding(out_sharding, "zeros")
    return jnp.zeros(_shape(shape, "zeros"), _dtype(dtype))


def ones(key, shape, dtype=None, out_sharding=None):
    """An array of ones (the key is ignored)."""
    _no_sharding(out_sharding, "ones")
    return jnp.ones(_shape(shape, "ones"), _dtype(dtype))


def constant(value, dtype=None):
    """An initializer filling arrays with `value` (the key is ignored); dtype is its default dtype."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        _no_sharding(out_sharding, "constant")
        return jnp.full(_shape(shape, "constant"), value, dtype=_dtype(dtype))
    return init


def uniform(scale=1e-2, dtype=None):
    """An initializer drawing uniformly from [0, scale)."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        _no_sharding(out_sharding, "uniform")
        dtype = _dtype(dtype)
        return random.uniform(key, _shape(shape, "uniform"), dtype) * jnp.asarray(scale, dtype)
    return init


def normal(stddev=1e-2, dtype=None):
    """An initializer drawing from a normal distribution with mean 0 and standard deviation stddev."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        _no_sharding(out_sharding, "normal")
        dtype = _dtype(dtype)
        return random.normal(key, _shape(shape, "normal"), dtype) * jnp.asarray(stddev, dtype)
    return init


def truncated_normal(stddev=1e-2, dtype=None, lower=-2.0, upper=2.0):
    """An initializer drawing stddev * (a standard normal truncated to (lower, upper)). stddev is the
    untruncated one: unlike variance_scaling, no correction for the truncation is made."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        _no_sharding(out_sharding, "truncated_normal")
        dtype = _dtype(dtype)
        sample = random.truncated_normal(key, lower, upper, _shape(shape, "truncated_normal"), dtype)
        return sample * jnp.asarray(stddev, dtype)
    return init


def _size(shape, axis):
    return shape[axis] if isinstance(axis, int) else math.prod(shape[a] for a in axis)


def _compute_fans(shape, in_axis=-2, out_axis=-1, batch_axis=()):
    """(fan_in, fan_out) of a weight of `shape`: the in/out axes' sizes times the receptive field, the
    product of every axis that is neither in, out nor batch (a convolution kernel's spatial axes)."""
    if isinstance(in_axis, int) and in_axis == -2 and len(shape) <= 1:
        raise ValueError(f"Can't compute input and output sizes of a {len(shape)}-dimensional weights tensor "
                         "with default in_axis. Must be at least 2D or specify in_axis explicitly.")
    in_size, out_size = _size(shape, in_axis), _size(shape, out_axis)
    receptive_field = math.prod(shape) / in_size / out_size / _size(shape, batch_axis)
    return in_size * receptive_field, out_size * receptive_field


# Standard deviations of a unit normal truncated at modulus 2: real (to (-2, 2)) and complex (JAX's value).
_TRUNCATED_REAL_STD = 0.87962566103423978
_TRUNCATED_COMPLEX_STD = 0.95311164380491208


def _polar(key, radius_of_uniform, shape, dtype):
    """Complex samples radius(u1) * exp(2 pi i u2) from two independent uniforms: any radial law with a
    uniformly random phase."""
    key_r, key_theta = random.split(key)
    real = dtypes.real_of(dtype)
    radius = radius_of_uniform(random.uniform(key_r, shape, real)).astype(dtype)
    theta = (2 * np.pi) * random.uniform(key_theta, shape, real).astype(dtype)
    return radius * jnp.exp(1j * theta)


def _complex_uniform(key, shape, dtype):
    """Uniform on the disk of radius sqrt(2) (so mean 0, E|z|^2 = 1): radius sqrt(2 u)."""
    return _polar(key, lambda u: jnp.sqrt(2 * u), shape, dtype)


def _complex_truncated_normal(key, upper, shape, dtype):
    """A complex normal with E|z|^2 = 1 conditioned on |z| < upper: |z|^2 is exponential, so invert
    its CDF on u scaled into [0, 1 - exp(-upper^2))."""
    real = dtypes.real_of(dtype)
    mass = 1 - math.exp(-upper ** 2)
    return _polar(key, lambda u: jnp.sqrt(-jnp.log1p(-(jnp.asarray(mass, real) * u))), shape, dtype)


_DENOMINATORS = {
    "fan_in": lambda fan_in, fan_out: fan_in,
    "fan_out": lambda fan_in, fan_out: fan_out,
    "fan_avg": lambda fan_in, fan_out: (fan_in + fan_out) / 2,
    "fan_geo_avg": lambda fan_in, fan_out: (fan_in * fan_out) ** 0.5,
}


def variance_scaling(scale, mode, distribution, in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """An initializer with variance scale / n, n from the weight's shape per `mode`: "fan_in",
    "fan_out", "fan_avg" (their mean) or "fan_geo_avg" (geometric mean); in_axis / out_axis /
    batch_axis name the axes (other axes are the receptive field).

    distribution: "truncated_normal" (cut at 2 standard deviations, rescaled so the variance after
    truncation is scale / n), "normal", or "uniform" (an interval, or for complex dtypes a disk).
    """
    def init(key, shape, dtype=dtype, out_sharding=None):
        _no_sharding(out_sharding, "variance_scaling")
        shape = _shape(shape, "variance_scaling")
        dtype = _dtype(dtype)
        fan_in, fan_out = _compute_fans(shape, in_axis, out_axis, batch_axis)
        if mode not in _DENOMINATORS:
            raise ValueError(f"invalid mode for variance scaling initializer: {mode}")
        variance = jnp.asarray(scale / _DENOMINATORS[mode](fan_in, fan_out), dtype=dtype)
        is_complex = dtypes.is_complex_dtype(dtype)
        if distribution == "truncated_normal":
            if is_complex:
                stddev = jnp.sqrt(variance) / jnp.asarray(_TRUNCATED_COMPLEX_STD, dtype)
                return _complex_truncated_normal(key, 2, shape, dtype) * stddev
            stddev = jnp.sqrt(variance) / jnp.asarray(_TRUNCATED_REAL_STD, dtype)
            return random.truncated_normal(key, -2, 2, shape, dtype) * stddev
        if distribution == "normal":
            return random.normal(key, shape, dtype) * jnp.sqrt(variance)
        if distribution == "uniform":
            if is_complex:
                return _complex_uniform(key, shape, dtype) * jnp.sqrt(variance)
            return random.uniform(key, shape, dtype, -1) * jnp.sqrt(3 * variance)
        raise ValueError(f"invalid distribution for variance scaling initializer: {distribution}")
    return init


def _variance_scaling_preset(scale, mode, distribution, doc):
    def builder(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
        return variance_scaling(scale, mode, distribution, in_axis=in_axis, out_axis=out_axis,
                                batch_axis=batch_axis, dtype=dtype)
    builder.__doc__ = f"{doc}: variance_scaling({scale}, {mode!r}, {distribution!r})."
    return builder


glorot_uniform = _variance_scaling_preset(1.0, "fan_avg", "uniform", "Glorot (Xavier) uniform")
glorot_normal = _variance_scaling_preset(1.0, "fan_avg", "truncated_normal", "Glorot (Xavier) normal")
lecun_uniform = _variance_scaling_preset(1.0, "fan_in", "uniform", "LeCun uniform")
lecun_normal = _variance_scaling_preset(1.0, "fan_in", "truncated_normal", "LeCun normal")
he_uniform = _variance_scaling_preset(2.0, "fan_in", "uniform", "He (Kaiming) uniform")
he_normal = _variance_scaling_preset(2.0, "fan_in", "truncated_normal", "He (Kaiming) normal")
for _name in ("glorot_uniform", "glorot_normal", "lecun_uniform", "lecun_normal", "he_uniform", "he_normal"):
    globals()[_name].__name__ = globals()[_name].__qualname__ = _name
del _name
xavier_uniform, xavier_normal = glorot_uniform, glorot_normal
kaiming_uniform, kaiming_normal = he_uniform, he_normal


def orthogonal(scale=1.0, column_axis=-1, dtype=None):
    """An initializer of Haar-random orthogonal weights times scale: flattened to (everything else,
    shape[column_axis]), the result has orthonormal columns or rows, whichever are fewer."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        _no_sharding(out_sharding, "orthogonal")
        shape = _shape(shape, "orthogonal")
        dtype = _dtype(dtype)
        if len(shape) < 2:
            raise ValueError("orthogonal initializer requires at least a 2D shape")
        if 0 in shape:
            return jnp.zeros(shape, dtype)
        axis = util.canonicalize_axis(column_axis, len(shape), "orthogonal")
        n_cols = shape[axis]
        rest = shape[:axis] + shape[axis + 1:]
        q = random.orthogonal(key, math.prod(rest), (), dtype, n_cols)
        q = jnp.moveaxis(jnp.reshape(q, rest + (n_cols,)), -1, axis)
        return jnp.asarray(scale, dtype) * q
    return init


def delta_orthogonal(scale=1.0, column_axis=-1, dtype=None):
    """An initializer of delta-orthogonal convolution kernels (Xiao et al. 2018): zero except for an
    orthogonal (in, out) matrix at the spatial centre. Shapes are 3-D, 4-D or 5-D with in <= out."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        _no_sharding(out_sharding, "delta_orthogonal")
        shape = _shape(shape, "delta_orthogonal")
        dtype = _dtype(dtype)
        if len(shape) not in (3, 4, 5):
            raise ValueError("Delta orthogonal initializer requires a 3D, 4D or 5D shape.")
        if shape[-1] < shape[-2]:
            raise ValueError("`fan_in` must be less or equal than `fan_out`. ")
        matrix = orthogonal(scale=scale, column_axis=column_axis, dtype=dtype)(key, shape[-2:])
        centre = tuple((k - 1) // 2 for k in shape[:-2])
        return jnp.zeros(shape, dtype).at[centre].set(matrix)
    return init
