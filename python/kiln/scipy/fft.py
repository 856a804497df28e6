"""kiln.scipy.fft: jax.scipy.fft's discrete cosine transforms (type 2, as JAX implements), computed
through one FFT of the reordered input (Makhoul's algorithm)."""
import math

import numpy as np

__all__ = ["dct", "dctn", "idct", "idctn"]


def _check(name, type, norm):
    if type != 2:
        raise NotImplementedError(f"kiln.scipy.fft.{name}: only DCT type 2 is implemented (as in JAX), got type={type}")
    if norm is not None and norm not in ("backward", "ortho"):
        raise ValueError(f"kiln.scipy.fft.{name}: norm={norm!r} is not implemented; use None, 'backward' or 'ortho'")


def _resize(x, n, axis):
    import kiln.numpy as jnp
    size = x.shape[axis]
    if n is None or n == size:
        return x
    if n < size:
        return jnp.take(x, jnp.arange(n), axis=axis)
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, n - size)
    return jnp.pad(x, pad)


def _twiddle(N, sign, ndim, axis, dtype):
    import kiln.numpy as jnp
    k = np.arange(N)
    w = np.exp(sign * 1j * np.pi * k / (2 * N)).astype(dtype)
    shape = [1] * ndim
    shape[axis] = N
    return jnp.asarray(w.reshape(shape))


def _ortho_scale(N, ndim, axis, dtype):
    import kiln.numpy as jnp
    s = np.full(N, math.sqrt(1.0 / (2 * N)))
    s[0] = math.sqrt(1.0 / (4 * N))
    shape = [1] * ndim
    shape[axis] = N
    return jnp.asarray(s.reshape(shape).astype(dtype))


def dct(x, type=2, n=None, axis=-1, norm=None):
    """The type-2 discrete cosine transform along `axis` (scipy's scaling: 2 sum x_n cos(pi k (2n+1) / 2N);
    norm='ortho' makes it orthonormal)."""
    import kiln.numpy as jnp
    _check("dct", type, norm)
    x = jnp.asarray(x)
    if jnp.iscomplexobj(x):
        return dct(x.real, type, n, axis, norm) + 1j * dct(x.imag, type, n, axis, norm)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        x = x.astype(jnp.result_type(x.dtype, 1.0))
    axis = axis % x.ndim
    x = _resize(x, n, axis)
    N = x.shape[axis]
    idx = np.concatenate([np.arange(0, N, 2), np.arange(N - 1 if N % 2 == 0 else N - 2, 0, -2)])
    v = jnp.take(x, jnp.asarray(idx), axis=axis)
    cdt = jnp.result_type(x.dtype, 1j)
    V = jnp.fft.fft(v, axis=axis)
    out = 2 * jnp.real(V * _twiddle(N, -1, x.ndim, axis, cdt)).astype(x.dtype)
    if norm == "ortho":
        out = out * _ortho_scale(N, x.ndim, axis, x.dtype)
    return out


def idct(x, type=2, n=None, axis=-1, norm=None):
    """The inverse of dct (type 2) along `axis`: idct(dct(x)) == x, for either norm."""
    import kiln.numpy as jnp
    _check("idct", type, norm)
    x = jnp.asarray(x)
    if jnp.iscomplexobj(x):
        return idct(x.real, type, n, axis, norm) + 1j * idct(x.imag, type, n, axis, norm)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        x = x.astype(jnp.result_type(x.dtype, 1.0))
    axis = axis % x.ndim
    x = _resize(x, n, axis)
    N = x.shape[axis]
    if norm == "ortho":
        x = x / _ortho_scale(N, x.ndim, axis, x.dtype)
    # y_k and y_(N-k) (y_N = 0) give the FFT of the reordered signal: V_k = (y_k - i y_(N-k)) / 2 e^(i pi k / 2N)
    rev = jnp.take(x, jnp.asarray(np.concatenate([[0], np.arange(N - 1, 0, -1)])), axis=axis)
    mask = np.ones(N)
    mask[0] = 0
    shape = [1] * x.ndim
    shape[axis] = N
    rev = rev * jnp.asarray(mask.reshape(shape).astype(x.dtype))
    cdt = jnp.result_type(x.dtype, 1j)
    V = (x - 1j * rev).astype(cdt) * 0.5 * _twiddle(N, 1, x.ndim, axis, cdt)
    v = jnp.real(jnp.fft.ifft(V, axis=axis)).astype(x.dtype)
    # undo the reordering: x[2m] = v[m], x[2m+1] = v[N-1-m]
    order = np.empty(N, dtype=np.int64)
    order[0::2] = np.arange((N + 1) // 2)
    order[1::2] = np.arange(N - 1, (N + 1) // 2 - 1, -1)
    return jnp.take(v, jnp.asarray(order), axis=axis)


def _axes(x, s, axes, name):
    if axes is None:
        axes = tuple(range(x.ndim)) if s is None else tuple(range(x.ndim - len(s), x.ndim))
    axes = tuple(a % x.ndim for a in axes)
    if s is not None and len(s) != len(axes):
        raise ValueError(f"kiln.scipy.fft.{name}: s and axes must have the same length, got {len(s)} and {len(axes)}")
    return axes


def dctn(x, type=2, s=None, axes=None, norm=None):
    """dct over several axes in turn."""
    return _over_axes("dctn", dct, x, type, s, axes, norm)


def idctn(x, type=2, s=None, axes=None, norm=None):
    """idct over several axes in turn."""
    return _over_axes("idctn", idct, x, type, s, axes, norm)


def _over_axes(name, one, x, type, s, axes, norm):
    import kiln.numpy as jnp
    _check(name, type, norm)
    x = jnp.asarray(x)
    for i, a in enumerate(_axes(x, s, axes, name)):
        x = one(x, n=None if s is None else s[i], axis=a, norm=norm)
    return x
