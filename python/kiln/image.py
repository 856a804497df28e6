"""kiln.image: jax.image's resize and scale_and_translate (issue 13, item 3). Linear, cubic and
Lanczos resizing are separable: per resized dimension a weight matrix (input x output positions)
from the method's kernel, widened when downsampling with antialias, each column normalized, then
one contraction of the image with all of them (jnp.einsum); nearest gathers. Differentiable and
batchable through those."""

import enum

import numpy as np

from kiln import numpy as jnp
from kiln._src import core, dtypes

__all__ = ["ResizeMethod", "resize", "scale_and_translate"]


class ResizeMethod(enum.Enum):
    NEAREST = 0
    LINEAR = 1
    LANCZOS3 = 2
    LANCZOS5 = 3
    CUBIC = 4

    @staticmethod
    def from_string(s):
        names = {"nearest": ResizeMethod.NEAREST, "linear": ResizeMethod.LINEAR, "bilinear": ResizeMethod.LINEAR,
                 "trilinear": ResizeMethod.LINEAR, "triangle": ResizeMethod.LINEAR, "lanczos3": ResizeMethod.LANCZOS3,
                 "lanczos5": ResizeMethod.LANCZOS5, "cubic": ResizeMethod.CUBIC, "bicubic": ResizeMethod.CUBIC,
                 "tricubic": ResizeMethod.CUBIC}
        if s not in names:
            raise ValueError(f"image.resize: unknown method {s!r}; one of {sorted(names)}")
        return names[s]


def _triangle(x):
    return jnp.maximum(0.0, 1.0 - jnp.abs(x))


def _keys_cubic(x):  # Keys' cubic convolution kernel, a = -0.5
    out = ((1.5 * x - 2.5) * x) * x + 1.0
    out = jnp.where(x >= 1.0, ((-0.5 * x + 2.5) * x - 4.0) * x + 2.0, out)
    return jnp.where(x >= 2.0, 0.0, out)


def _lanczos(radius):
    def kernel(x):
        y = radius * jnp.sin(np.pi * x) * jnp.sin(np.pi * x / radius)
        out = jnp.where(x > 1e-3, y / jnp.where(x != 0, np.pi ** 2 * x ** 2, 1.0), 1.0)
        return jnp.where(x > radius, 0.0, out)
    return kernel


_KERNELS = {ResizeMethod.LINEAR: _triangle, ResizeMethod.CUBIC: _keys_cubic, ResizeMethod.LANCZOS3: _lanczos(3.0),
            ResizeMethod.LANCZOS5: _lanczos(5.0)}


def _weights(in_size, out_size, scale, translation, kernel, antialias, dtype):
    """(in_size, out_size): column j holds the weights of output sample j over the input."""
    inv = 1.0 / scale
    kscale = jnp.maximum(inv, 1.0) if antialias else 1.0
    sample = (jnp.arange(out_size, dtype=dtype) + 0.5) * inv - translation * inv - 0.5
    x = jnp.abs(sample[None, :] - jnp.arange(in_size, dtype=dtype)[:, None]) / kscale
    w = kernel(x)
    total = jnp.sum(w, axis=0, keepdims=True)
    w = jnp.where(jnp.abs(total) > 1000.0 * float(np.finfo(np.float32).eps), w / jnp.where(total != 0, total, 1.0), 0.0)
    inside = (sample >= -0.5) & (sample <= in_size - 0.5)  # a sample outside the input gets nothing
    return jnp.where(inside[None, :], w, 0.0)


def _method(method):
    if isinstance(method, ResizeMethod):
        return method
    if isinstance(method, str):
        return ResizeMethod.from_string(method.lower())
    raise TypeError(f"image.resize: method must be a string or a ResizeMethod, got {method!r}")


def _as_float(image):
    image = core.asarray(image)
    if not dtypes.issubdtype(image.dtype, np.inexact):  # (bfloat16's numpy kind is "V")
        image = image.astype(jnp.result_type(image.dtype, jnp.float32))
    return image


def scale_and_translate(image, shape, spatial_dims, scale, translation, method, antialias=True,
                        precision=None):
    """Each dimension of spatial_dims scaled by scale[i] and moved by translation[i] (output
    coordinate = input coordinate * scale + translation), sampled with the method's kernel."""
    m = _method(method)
    if m == ResizeMethod.NEAREST:
        raise ValueError("image.scale_and_translate: 'nearest' is not supported (as in JAX); use resize")
    image = _as_float(image)
    shape = tuple(int(s) for s in shape)
    if len(shape) != image.ndim:
        raise ValueError(f"image.scale_and_translate: shape {shape} needs one entry per dimension of the image "
                         f"{image.shape}")
    dims = [d % image.ndim for d in spatial_dims]
    if not dims:
        return image
    dtype = np.dtype(image.dtype.name)
    operands, out_idx = [image, list(range(image.ndim))], list(range(image.ndim))
    for i, d in enumerate(dims):
        w = _weights(image.shape[d], shape[d], scale[i], translation[i], _KERNELS[m], antialias, dtype)
        operands += [w.astype(image.dtype), [d, image.ndim + i]]
        out_idx[d] = image.ndim + i
    return jnp.einsum(*operands, out_idx, precision=precision or "highest")


def _resize_nearest(x, shape):
    for d in range(x.ndim):
        m, n = x.shape[d], shape[d]
        if m == n:
            continue
        idx = np.floor((np.arange(n, dtype=np.float32) + 0.5) * np.float32(m) / np.float32(n)).astype(np.int32)
        x = jnp.take(x, idx, axis=d)
    return x


def resize(image, shape, method, antialias=True, precision=None):
    """image resized to shape (every dimension may change): 'nearest', 'linear' (bilinear,
    trilinear), 'cubic' (Keys), 'lanczos3', 'lanczos5'; antialias widens the kernel when
    downsampling, as JAX does."""
    m = _method(method)
    shape = tuple(int(s) for s in shape)
    image = core.asarray(image)
    if len(shape) != image.ndim:
        raise ValueError(f"image.resize: shape {shape} needs one entry per dimension of the image {image.shape}")
    if m == ResizeMethod.NEAREST:
        return _resize_nearest(image, shape)
    dims = [d for d in range(image.ndim) if image.shape[d] != shape[d]]
    scale = [shape[d] / image.shape[d] for d in dims]
    return scale_and_translate(image, shape, dims, scale, [0.0] * len(dims), m, antialias, precision)
