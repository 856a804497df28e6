"""kiln.numpy.fft: NumPy's FFT API on kiln arrays, with JAX's semantics (lax.fft underneath).

Norms as NumPy: "backward" (the default: inverse transforms scaled by 1/n), "ortho" (both by
1/sqrt(n)), "forward" (forward transforms scaled by 1/n). Real inputs of the complex transforms
become complex; integer inputs are promoted to the default float first. Transforms over more than
three axes run as successive transforms of at most three.
"""
import math
import operator

import numpy as np

from kiln import lax
from kiln._src import core, dtypes
from kiln._src.numpy import util

__all__ = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn",
           "rfftn", "irfftn", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]

_FFT, _IFFT, _RFFT, _IRFFT = lax.FftType.FFT, lax.FftType.IFFT, lax.FftType.RFFT, lax.FftType.IRFFT
_NORMS = (None, "backward", "ortho", "forward")


def _check_norm(name, norm):
    if norm not in _NORMS:
        raise ValueError(f"{name}: invalid norm {norm!r}; use 'backward', 'ortho' or 'forward'")


def _as_input(name, a, real):
    x = util.asarray_arg(name, a)
    if real:
        if x.dtype.kind == "c":
            raise TypeError(f"{name}: the input must be real, got {x.dtype.name} (use fft/fftn for complex input)")
        target = dtypes.to_inexact_dtype(x.dtype)
        if target in (dtypes.float16, dtypes.bfloat16):
            target = np.dtype(np.float32)
    else:
        target = dtypes.to_inexact_dtype(x.dtype)
        if target.kind != "c":
            target = dtypes.complex_of(target)
    return x if x.dtype == target else lax.convert_element_type(x, target)


def _axes_and_sizes(name, x, s, axes, nd_default):
    """Normalized axes and output lengths (None: as the input)."""
    if axes is None:
        if s is None:
            axes = tuple(range(x.ndim - nd_default, x.ndim)) if nd_default is not None else tuple(range(x.ndim))
        else:
            axes = tuple(range(x.ndim - len(s), x.ndim))
    else:
        axes = tuple(operator.index(a) for a in axes)
    axes = tuple(util.canonicalize_axes(a, x.ndim, name)[0] for a in axes)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{name}: repeated axes {axes}")
    if s is not None:
        s = tuple(operator.index(n) for n in s)
        if len(s) != len(axes):
            raise ValueError(f"{name}: s {s} and axes {axes} must have the same length")
        if any(n < 1 for n in s):
            raise ValueError(f"{name}: invalid number of data points {s}; each must be at least 1")
    return axes, s


def _fit(x, axis, n):
    """x cut or zero-padded along axis to length n."""
    have = x.shape[axis]
    if n == have:
        return x
    if n < have:
        return lax.slice_in_dim(x, 0, n, axis=axis)
    cfg = [(0, 0, 0)] * x.ndim
    cfg[axis] = (0, n - have, 0)
    return lax.pad(x, lax.full((), 0, x.dtype), cfg)


def _scale(x, factor):
    return x if factor == 1 else lax.mul(x, lax.full((), factor, x.dtype))


def _norm_factor(norm, n, inverse):
    """What multiplies lax.fft's result (whose inverses already carry 1/n)."""
    if norm in (None, "backward"):
        return 1.0
    if norm == "ortho":
        return math.sqrt(n) if inverse else 1 / math.sqrt(n)
    return n if inverse else 1 / n  # forward


def _to_end(x, axes):
    """x with `axes` moved to the end, in order; and the permutation to undo it."""
    rest = [a for a in range(x.ndim) if a not in axes]
    perm = rest + list(axes)
    if perm == list(range(x.ndim)):
        return x, None
    inv = [0] * x.ndim
    for i, p in enumerate(perm):
        inv[p] = i
    return lax.transpose(x, perm), inv


def _core(name, kind, a, s, axes, norm, nd_default):
    _check_norm(name, norm)
    x = _as_input(name, a, kind == _RFFT)
    axes, s = _axes_and_sizes(name, x, s, axes, nd_default)
    if nd_default == 2 and len(axes) != 2:  # as JAX's fft2 family
        raise ValueError(f"{name} only supports 2 axes, got axes={axes}")
    if not axes:
        return x
    if kind == _IRFFT:
        empty = s is None and x.shape[axes[-1]] == 0  # an empty result, as JAX's
        if s is None:
            s = tuple(x.shape[a] for a in axes[:-1]) + (0 if empty else 2 * (x.shape[axes[-1]] - 1),)
        if s[-1] < 1 and not empty:
            raise ValueError(f"{name}: invalid number of data points {s[-1]} for the last axis")
        for a, n in zip(axes[:-1], s[:-1]):
            x = _fit(x, a, n)
        x = _fit(x, axes[-1], s[-1] // 2 + 1)
    elif s is not None:
        for a, n in zip(axes, s):
            x = _fit(x, a, n)
    lengths = s if s is not None else tuple(x.shape[a] for a in axes)
    x, inv = _to_end(x, axes)
    k = len(axes)
    if k <= 3:
        y = lax.fft(x, kind, lengths)
    elif kind in (_FFT, _IFFT):  # separable: chunks of three, innermost first
        y = x
        for lo in _chunks(k):
            y = _fft_on(y, kind, lengths, lo, k)
    elif kind == _RFFT:
        y = lax.fft(x, _RFFT, lengths[-1:])
        for lo in _chunks(k - 1):
            y = _fft_on(y, _FFT, lengths[:-1], lo, k - 1, extra=1)
    else:  # IRFFT: the complex inverse over the leading axes, then the real one over the last
        y = x
        for lo in _chunks(k - 1):
            y = _fft_on(y, _IFFT, lengths[:-1], lo, k - 1, extra=1)
        y = lax.fft(y, _IRFFT, lengths[-1:])
    y = _scale(y, _norm_factor(norm, math.prod(lengths), kind in (_IFFT, _IRFFT)))
    return lax.transpose(y, inv) if inv is not None else y


def _chunks(k):
    """Starting positions of chunks of at most three of k trailing axes."""
    return list(range(0, k, 3))


def _fft_on(y, kind, lengths, lo, k, extra=0):
    """The complex fft of y over its axes lo..lo+3 of the k transformed ones (followed by `extra`
    axes left alone), moving them to the end and back."""
    hi = min(lo + 3, k)
    base = y.ndim - k - extra
    axes = tuple(range(base + lo, base + hi))
    z, inv = _to_end(y, axes)
    z = lax.fft(z, kind, lengths[lo:hi])
    return lax.transpose(z, inv) if inv is not None else z


def _one(name, kind, a, n, axis, norm):
    return _core(name, kind, a, None if n is None else (n,), (axis,), norm, None)


def fft(a, n=None, axis=-1, norm=None):
    """The one-dimensional discrete Fourier transform along `axis` (cut or zero-padded to n)."""
    return _one("fft", _FFT, a, n, axis, norm)


def ifft(a, n=None, axis=-1, norm=None):
    """The one-dimensional inverse discrete Fourier transform."""
    return _one("ifft", _IFFT, a, n, axis, norm)


def rfft(a, n=None, axis=-1, norm=None):
    """The one-dimensional transform of a real signal: the n // 2 + 1 non-negative frequencies."""
    return _one("rfft", _RFFT, a, n, axis, norm)


def irfft(a, n=None, axis=-1, norm=None):
    """The inverse of rfft: n real points (default 2 * (m - 1) for m input frequencies)."""
    return _one("irfft", _IRFFT, a, n, axis, norm)


_SWAP = {None: "forward", "backward": "forward", "ortho": "ortho", "forward": "backward"}


def hfft(a, n=None, axis=-1, norm=None):
    """The transform of a signal with Hermitian symmetry given by its first half: n real points."""
    _check_norm("hfft", norm)
    x = util.asarray_arg("hfft", a)
    return irfft(conj_(x), n, axis, _SWAP[norm])


def ihfft(a, n=None, axis=-1, norm=None):
    """The inverse of hfft: the first n // 2 + 1 points of a Hermitian signal from n real ones."""
    _check_norm("ihfft", norm)
    return conj_(rfft(a, n, axis, _SWAP[norm]))


def conj_(x):
    return lax.conj(x) if x.dtype.kind == "c" else x


def fft2(a, s=None, axes=(-2, -1), norm=None):
    """The two-dimensional transform over `axes`."""
    return _core("fft2", _FFT, a, s, axes, norm, 2)


def ifft2(a, s=None, axes=(-2, -1), norm=None):
    """The two-dimensional inverse transform over `axes`."""
    return _core("ifft2", _IFFT, a, s, axes, norm, 2)


def rfft2(a, s=None, axes=(-2, -1), norm=None):
    """The two-dimensional transform of a real signal (half spectrum along the last axis)."""
    return _core("rfft2", _RFFT, a, s, axes, norm, 2)


def irfft2(a, s=None, axes=(-2, -1), norm=None):
    """The inverse of rfft2."""
    return _core("irfft2", _IRFFT, a, s, axes, norm, 2)


def fftn(a, s=None, axes=None, norm=None):
    """The n-dimensional transform over `axes` (default: all, or the last len(s))."""
    return _core("fftn", _FFT, a, s, axes, norm, None)


def ifftn(a, s=None, axes=None, norm=None):
    """The n-dimensional inverse transform."""
    return _core("ifftn", _IFFT, a, s, axes, norm, None)


def rfftn(a, s=None, axes=None, norm=None):
    """The n-dimensional transform of a real signal (half spectrum along the last axis)."""
    return _core("rfftn", _RFFT, a, s, axes, norm, None)


def irfftn(a, s=None, axes=None, norm=None):
    """The inverse of rfftn."""
    return _core("irfftn", _IRFFT, a, s, axes, norm, None)


def _freq_dtype(dtype):
    return dtypes.canonicalize_dtype(dtype) if dtype is not None else dtypes.default_float_dtype()


def fftfreq(n, d=1.0, *, dtype=None, device=None):
    """The sample frequencies of an n-point transform with spacing d: [0, 1, ..., -1] / (d n)."""
    del device
    n = operator.index(n)
    dt = _freq_dtype(dtype)
    k = np.concatenate([np.arange(0, (n - 1) // 2 + 1), np.arange(-(n // 2), 0)]) if n else np.zeros(0)
    return lax.div(core.asarray(k.astype(dt)), lax.full((), n * d, dt)) if n else core.asarray(k.astype(dt))


def rfftfreq(n, d=1.0, *, dtype=None, device=None):
    """The sample frequencies of rfft's output: [0, 1, ..., n // 2] / (d n)."""
    del device
    n = operator.index(n)
    dt = _freq_dtype(dtype)
    k = np.arange(0, n // 2 + 1).astype(dt)
    return lax.div(core.asarray(k), lax.full((), n * d, dt))


def _shift(name, x, axes, sign):
    from kiln import numpy as jnp
    x = util.asarray_arg(name, x)
    if axes is None:
        axes = tuple(range(x.ndim))
    elif isinstance(axes, int):
        axes = (axes,)
    shifts = tuple(sign * (x.shape[a] // 2) for a in axes)
    return jnp.roll(x, shifts, axes)


def fftshift(x, axes=None):
    """The zero frequency moved to the center (numpy.fft.fftshift)."""
    return _shift("fftshift", x, axes, 1)


def ifftshift(x, axes=None):
    """The inverse of fftshift."""
    return _shift("ifftshift", x, axes, -1)
