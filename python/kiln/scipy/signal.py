"""kiln.scipy.signal: jax.scipy.signal's functions (convolutions, detrending, STFT and Welch
spectra) with JAX's semantics and signatures, built on lax.conv_general_dilated, kiln.numpy.fft
and jnp. Windows named as SciPy names them are computed here in NumPy (they are static)."""

import warnings

import numpy as np

from kiln import lax
from kiln import numpy as jnp
from kiln._src import dtypes
from kiln._src.numpy import util

__all__ = ["convolve", "convolve2d", "correlate", "correlate2d", "csd", "detrend", "fftconvolve", "istft", "stft",
           "welch"]

_MODES = ("full", "same", "valid")


def _check_mode(name, mode):
    if mode not in _MODES:
        raise ValueError(f"scipy.signal.{name}: mode must be one of {list(_MODES)}, got {mode!r}")


def _swap_needed(name, mode, shape1, shape2):
    """Whether the operands must be exchanged (in2 is the larger in every dimension)."""
    if all(s1 >= s2 for s1, s2 in zip(shape1, shape2)):
        return False
    if all(s1 <= s2 for s1, s2 in zip(shape1, shape2)):
        return True
    raise ValueError(f"scipy.signal.{name}: for mode={mode!r} one input must be at least as large as the other in "
                     f"every dimension, got shapes {tuple(shape1)} and {tuple(shape2)}")


def _output_window(mode, n1, n2):
    """(start, length) of the mode's output inside the full convolution of lengths n1 and n2; 'same'
    is centred on in1 (as SciPy), 'valid' keeps the points where the inputs overlap fully."""
    full = n1 + n2 - 1
    if mode == "full":
        return 0, full
    if mode == "same":
        return (n2 - 1) // 2, n1
    return min(n1, n2) - 1, abs(n1 - n2) + 1


# ---- convolutions ----------------------------------------------------------------------------------

def fftconvolve(in1, in2, mode="full", axes=None):
    """The n-D convolution of in1 and in2 through the FFT, over `axes` (default all); the other axes
    must match in size and are convolved independently, as JAX's."""
    in1, in2 = util.promote_dtypes_inexact("scipy.signal.fftconvolve", in1, in2)
    if in1.ndim != in2.ndim:
        raise ValueError(f"scipy.signal.fftconvolve: in1 and in2 should have the same dimensionality, got "
                         f"{in1.ndim} and {in2.ndim}")
    _check_mode("fftconvolve", mode)
    if axes is None:
        axes = tuple(range(in1.ndim))
    else:
        axes = (axes,) if not isinstance(axes, (tuple, list)) else tuple(axes)
        axes = tuple(util.canonicalize_axis(a, in1.ndim, "scipy.signal.fftconvolve") for a in axes)
        if len(set(axes)) != len(axes):
            raise ValueError(f"scipy.signal.fftconvolve: repeated axes {axes}")
    mapped = [i for i in range(in1.ndim) if i not in axes]
    if any(in1.shape[i] != in2.shape[i] for i in mapped):
        raise ValueError(f"scipy.signal.fftconvolve: mapped axes must have the same shape; got {in1.shape}, "
                         f"{in2.shape} with axes={axes}")
    shape1 = [in1.shape[a] for a in axes]
    shape2 = [in2.shape[a] for a in axes]
    if mode == "valid" and _swap_needed("fftconvolve", mode, shape1, shape2):
        in1, in2, shape1, shape2 = in2, in1, shape2, shape1
    full = [s1 + s2 - 1 for s1, s2 in zip(shape1, shape2)]
    if all(s1 == 1 or s2 == 1 for s1, s2 in zip(shape1, shape2)):
        conv = in1 * in2  # a product of length-1 sides: broadcasting is the whole convolution
    elif in1.dtype.kind == "c":
        conv = jnp.fft.ifftn(jnp.fft.fftn(in1, full, axes) * jnp.fft.fftn(in2, full, axes), full, axes)
    else:
        conv = jnp.fft.irfftn(jnp.fft.rfftn(in1, full, axes) * jnp.fft.rfftn(in2, full, axes), full, axes)
    for a, s1, s2 in zip(axes, shape1, shape2):
        # in 'same' mode the output takes the original in1's size (no swap happens outside 'valid')
        start, length = _output_window(mode, s1, s2)
        conv = lax.slice_in_dim(conv, start, start + length, axis=a)
    return conv


def _convolve_direct(name, in1, in2, mode, precision):
    """The n-D convolution as one lax.conv_general_dilated: the smaller operand, flipped, is the
    kernel; padding selects the mode's window of the full result."""
    _check_mode(name, mode)
    in1, in2 = util.promote_dtypes_inexact(f"scipy.signal.{name}", in1, in2)
    if in1.ndim != in2.ndim:
        raise ValueError(f"scipy.signal.{name}: in1 and in2 must have the same number of dimensions, got "
                         f"{in1.ndim} and {in2.ndim}")
    if in1.size == 0 or in2.size == 0:
        raise ValueError(f"scipy.signal.{name}: zero-size arrays are not supported in convolutions, got shapes "
                         f"{in1.shape} and {in2.shape}")
    if in1.ndim == 0:
        return in1 * in2
    swap = _swap_needed(name, mode, in1.shape, in2.shape)  # the larger operand is the image, as in 'valid'
    image, kernel = (in2, in1) if swap else (in1, in2)
    padding = []
    for n1, n2, k in zip(in1.shape, in2.shape, kernel.shape):
        start, length = _output_window(mode, n1, n2)
        full = n1 + n2 - 1
        padding.append((k - 1 - start, k - 1 - (full - start - length)))
    out = lax.conv_general_dilated(image[None, None], jnp.flip(kernel)[None, None], (1,) * in1.ndim, padding,
                                   precision=precision)
    return out[0, 0]


def convolve(in1, in2, mode="full", method="auto", precision=None):
    """The n-D convolution of in1 and in2; method 'auto' and 'direct' use lax.conv_general_dilated,
    'fft' uses fftconvolve."""
    if method == "fft":
        return fftconvolve(in1, in2, mode=mode)
    if method in ("auto", "direct"):
        return _convolve_direct("convolve", in1, in2, mode, precision)
    raise ValueError(f"scipy.signal.convolve: got method={method!r}; expected 'auto', 'fft' or 'direct'")


def _check_2d(name, in1, in2, boundary, fillvalue):
    if boundary != "fill" or fillvalue != 0:
        raise NotImplementedError(f"scipy.signal.{name}: only boundary='fill' with fillvalue=0 is supported (as "
                                  f"in JAX)")
    if np.ndim(in1) != 2 or np.ndim(in2) != 2:
        raise ValueError(f"scipy.signal.{name}: only 2-dimensional inputs are supported, got {np.ndim(in1)}-d "
                         f"and {np.ndim(in2)}-d")


def convolve2d(in1, in2, mode="full", boundary="fill", fillvalue=0, precision=None):
    """The 2-D convolution of in1 and in2 (zero fill outside the inputs only)."""
    _check_2d("convolve2d", in1, in2, boundary, fillvalue)
    return _convolve_direct("convolve2d", in1, in2, mode, precision)


def _conj(x):
    return jnp.conj(x) if x.dtype.kind == "c" else x


def correlate(in1, in2, mode="full", method="auto", precision=None):
    """The n-D cross-correlation: the convolution of in1 with in2 flipped and conjugated (SciPy's)."""
    in1, in2 = util.promote_dtypes_inexact("scipy.signal.correlate", in1, in2)
    return convolve(in1, jnp.flip(_conj(in2)), mode, method=method, precision=precision)


def correlate2d(in1, in2, mode="full", boundary="fill", fillvalue=0, precision=None):
    """The 2-D cross-correlation, as SciPy's correlate2d computes it: 'same' is centred with the
    offset len(in2) // 2 (correlate's is (len(in2) - 1) // 2), and 'valid' with the larger in2
    gives the conjugate of correlate's result (complex inputs only see the difference)."""
    _check_2d("correlate2d", in1, in2, boundary, fillvalue)
    in1, in2 = util.promote_dtypes_inexact("scipy.signal.correlate2d", in1, in2)
    if mode == "valid" and _swap_needed("correlate2d", mode, in1.shape, in2.shape):
        return _convolve_direct("correlate2d", jnp.flip(in2), _conj(in1), mode, precision)
    # flipping a convolution of flipped in1 moves 'same''s centring from (n2 - 1) // 2 to n2 // 2
    return jnp.flip(_convolve_direct("correlate2d", jnp.flip(in1), _conj(in2), mode, precision))


# ---- detrending ------------------------------------------------------------------------------------

def _remove_line(seg):
    """seg minus its least-squares line along the last axis (its mean where there is one point)."""
    n = seg.shape[-1]
    centred = seg - seg.mean(axis=-1, keepdims=True)
    if n < 2:
        return centred
    t = np.arange(n) - (n - 1) / 2  # centred times: the line's slope is independent of its mean
    t_arr = jnp.asarray(t.astype(dtypes.real_of(seg.dtype)))
    slope = (seg * t_arr).sum(axis=-1, keepdims=True) / float(np.sum(t * t))
    return centred - slope * t_arr


def detrend(data, axis=-1, type="linear", bp=0, overwrite_data=None):
    """data minus its mean ('constant') or its least-squares line ('linear'), fitted separately
    between consecutive breakpoints bp (static) along axis."""
    if overwrite_data is not None:
        raise NotImplementedError("scipy.signal.detrend: the overwrite_data argument is not supported (as in "
                                  "JAX)")
    if type not in ("constant", "linear"):
        raise ValueError(f"scipy.signal.detrend: trend type must be 'linear' or 'constant', got {type!r}")
    (x,) = util.promote_dtypes_inexact("scipy.signal.detrend", data)
    axis = util.canonicalize_axis(axis, x.ndim, "scipy.signal.detrend")
    if type == "constant":
        return x - x.mean(axis=axis, keepdims=True)
    n = x.shape[axis]
    cuts = np.unique(np.concatenate([[0], np.ravel(np.asarray(bp)), [n]]).astype(np.int64))
    if cuts[0] < 0 or cuts[-1] > n:
        raise ValueError(f"scipy.signal.detrend: breakpoints must be non-negative and at most the length of the "
                         f"data along the axis ({n}), got bp={bp!r}")
    if n == 0:
        return x
    x = jnp.moveaxis(x, axis, -1)
    pieces = [_remove_line(lax.slice_in_dim(x, int(lo), int(hi), axis=-1)) for lo, hi in zip(cuts[:-1], cuts[1:])]
    out = pieces[0] if len(pieces) == 1 else jnp.concatenate(pieces, axis=-1)
    return jnp.moveaxis(out, -1, axis)


# ---- windows ---------------------------------------------------------------------------------------
# Symmetric windows of length m >= 2 as scipy.signal.windows defines them; the periodic window of
# length m (what the spectral functions use) is the symmetric one of length m + 1 less its last point.

def _general_cosine(m, a):
    fac = np.linspace(-np.pi, np.pi, m)
    return sum(c * np.cos(k * fac) for k, c in enumerate(a))


def _tukey(m, alpha=0.5):
    if alpha <= 0:
        return np.ones(m)
    if alpha >= 1:
        return _general_cosine(m, (0.5, 0.5))
    n = np.arange(m)
    width = int(np.floor(alpha * (m - 1) / 2))
    w = np.ones(m)
    lo, hi = n[:width + 1], n[m - width - 1:]
    w[:width + 1] = 0.5 * (1 + np.cos(np.pi * (-1 + 2 * lo / alpha / (m - 1))))
    w[m - width - 1:] = 0.5 * (1 + np.cos(np.pi * (-2 / alpha + 1 + 2 * hi / alpha / (m - 1))))
    return w


def _parzen(m):
    n = np.abs(np.arange(m) - (m - 1) / 2)
    a = n / (m / 2)
    return np.where(n <= (m - 1) / 4, 1 - 6 * a ** 2 + 6 * a ** 3, 2 * (1 - a) ** 3)


def _bohman(m):
    fac = np.abs(np.linspace(-1, 1, m))
    w = (1 - fac) * np.cos(np.pi * fac) + np.sin(np.pi * fac) / np.pi
    w[0] = w[-1] = 0.0
    return w


def _exponential(m, center=None, tau=1.0):
    center = (m - 1) / 2 if center is None else center
    return np.exp(-np.abs(np.arange(m) - center) / tau)


_WINDOWS = {  # name: symmetric window of length m (given the window's parameters), its aliases
    "boxcar": (lambda m: np.ones(m), ("box", "ones", "rect", "rectangular")),
    "triang": (lambda m: 1 - np.abs(2 * np.arange(m) - (m - 1)) / (m + m % 2), ("triangle", "tri")),
    "bartlett": (lambda m: 1 - np.abs(2 * np.arange(m) / (m - 1) - 1), ("bart", "brt")),
    "hann": (lambda m: _general_cosine(m, (0.5, 0.5)), ("han",)),
    "hamming": (lambda m: _general_cosine(m, (0.54, 0.46)), ("hamm", "ham")),
    "blackman": (lambda m: _general_cosine(m, (0.42, 0.50, 0.08)), ("black", "blk")),
    "blackmanharris": (lambda m: _general_cosine(m, (0.35875, 0.48829, 0.14128, 0.01168)), ("blackharr", "bkh")),
    "nuttall": (lambda m: _general_cosine(m, (0.3635819, 0.4891775, 0.1365995, 0.0106411)), ("nutl", "nut")),
    "flattop": (lambda m: _general_cosine(m, (0.21557895, 0.41663158, 0.277263158, 0.083578947, 0.006947368)),
                ("flat", "flt")),
    "barthann": (lambda m: (lambda f: 0.62 - 0.48 * f + 0.38 * np.cos(2 * np.pi * f))(
        np.abs(np.arange(m) / (m - 1) - 0.5)), ("brthan", "bth")),
    "cosine": (lambda m: np.sin(np.pi / m * (np.arange(m) + 0.5)), ("halfcosine",)),
    "lanczos": (lambda m: np.sinc(2 * np.arange(m) / (m - 1) - 1), ("sinc",)),
    "parzen": (_parzen, ("parz", "par")),
    "bohman": (_bohman, ("bman", "bmn")),
    "tukey": (_tukey, ("tuk",)),
    "exponential": (_exponential, ("poisson",)),
    "kaiser": (lambda m, beta: np.i0(beta * np.sqrt(1 - (2 * np.arange(m) / (m - 1) - 1) ** 2)) / np.i0(beta),
               ("ksr",)),
    "gaussian": (lambda m, std: np.exp(-((np.arange(m) - (m - 1) / 2) ** 2) / (2 * std ** 2)), ("gauss", "gss")),
    "general_gaussian": (lambda m, p, sig: np.exp(-0.5 * np.abs((np.arange(m) - (m - 1) / 2) / sig) ** (2 * p)),
                         ("general gaussian", "general gauss", "general_gauss", "ggs")),
    "general_hamming": (lambda m, alpha: _general_cosine(m, (alpha, 1 - alpha)), ("general hamming",)),
    "general_cosine": (lambda m, a: _general_cosine(m, a), ("general cosine",)),
}
_WINDOW_NAMES = {alias: name for name, (_, aliases) in _WINDOWS.items() for alias in (name,) + aliases}


def _window_values(window, m):
    """The periodic window (NumPy float64) named by `window` (a name or a (name, *params) tuple), as
    scipy.signal.get_window(window, m); names kiln lacks go to SciPy when it is installed, as JAX."""
    name, params = (window[0], tuple(window[1:])) if isinstance(window, tuple) else (window, ())
    if name not in _WINDOW_NAMES:
        try:
            from scipy.signal import get_window
        except ImportError:
            raise ValueError(f"scipy.signal: unknown window {window!r}; kiln computes "
                             f"{sorted(_WINDOWS)} itself, and others need SciPy installed") from None
        return np.asarray(get_window(window, m), dtype=np.float64)
    if m <= 1:
        return np.ones(m)
    fn = _WINDOWS[_WINDOW_NAMES[name]][0]
    try:
        return np.asarray(fn(m + 1, *params), dtype=np.float64)[:-1]
    except TypeError:
        raise ValueError(f"scipy.signal: wrong parameters {params!r} for the {name!r} window") from None


def _triage_window(window, nperseg, input_length, dtype):
    """(window array, nperseg): a named window gets length nperseg (default 256, at most the input's
    length); an array window sets nperseg."""
    if isinstance(window, (str, tuple)):
        n = 256 if nperseg is None else nperseg
        if n > input_length:
            warnings.warn(f"nperseg = {n} is greater than input length = {input_length}, using nperseg = "
                          f"{input_length}")
            n = input_length
        return jnp.asarray(_window_values(window, n).astype(dtypes.real_of(dtype))), n
    win = jnp.asarray(window)
    win = win.astype(dtypes.complex_of(dtype) if win.dtype.kind == "c" else dtypes.real_of(dtype))
    if win.ndim != 1:
        raise ValueError(f"scipy.signal: window must be 1-D, got shape {win.shape}")
    if input_length < win.size:
        raise ValueError(f"scipy.signal: window (length {win.size}) is longer than the input signal "
                         f"({input_length})")
    if nperseg is not None and nperseg != win.size:
        raise ValueError(f"scipy.signal: nperseg = {nperseg} differs from the window's length {win.size}")
    return win, win.size


# ---- short-time spectra ----------------------------------------------------------------------------

def _static_int(x, what):
    return None if x is None else util.concrete_int(x, f"scipy.signal: {what}")


def _odd_extension(x, n):
    """x extended by n points at each end of its last axis, reflected through the end points."""
    if n > x.shape[-1] - 1:
        raise ValueError(f"scipy.signal: the extension length n ({n}) is too big; it must not exceed "
                         f"x.shape[axis] - 1 = {x.shape[-1] - 1}")
    first, last = x[..., :1], x[..., -1:]
    return jnp.concatenate([2 * first - jnp.flip(x[..., 1:n + 1], -1), x,
                            2 * last - jnp.flip(x[..., -n - 1:-1], -1)], axis=-1)


def _extend(x, n, boundary):
    if n < 1:
        return x
    if boundary == "odd":
        return _odd_extension(x, n)
    pads = [(0, 0)] * (x.ndim - 1) + [(n, n)]
    return jnp.pad(x, pads, mode={"even": "reflect", "constant": "edge", "zeros": "constant"}[boundary])


_BOUNDARIES = ("even", "odd", "constant", "zeros", None)


def _segment_spectra(x, win, detrend_func, nperseg, noverlap, nfft, onesided):
    """The windowed FFT of each segment of x's last axis: shape (..., segments, frequencies)."""
    starts = np.arange(0, x.shape[-1] - nperseg + 1, nperseg - noverlap)
    segs = x[..., starts[:, None] + np.arange(nperseg)]  # static gather
    segs = detrend_func(segs) * win
    return jnp.fft.rfft(jnp.real(segs), n=nfft) if onesided else jnp.fft.fft(segs, n=nfft)


def _detrend_function(detrend_type):
    """The detrending of segments (..., segments, nperseg). A callable gets them with time last
    whatever `axis` is, as SciPy's welch and csd call it (its legacy stft moves time back to
    `axis`; JAX's moves `axis` to the end, which misplaces time for axis != -1)."""
    if isinstance(detrend_type, str):
        return lambda d: detrend(d, axis=-1, type=detrend_type)
    if callable(detrend_type):
        return detrend_type
    if not detrend_type:
        return lambda d: d
    raise ValueError(f"scipy.signal: unsupported detrend type {detrend_type!r}")


def _spectral_helper(name, x, y, fs, window, nperseg, noverlap, nfft, detrend_type, return_onesided, scaling,
                     axis, mode, boundary=None, padded=False):
    """(frequencies, segment times, per-segment spectra): the STFT of x (mode 'stft') or the
    per-segment cross spectra conj(X) Y (mode 'psd'; y None: x's own power), frequencies moved to
    `axis` and segments last."""
    if boundary not in _BOUNDARIES:
        raise ValueError(f"scipy.signal.{name}: unknown boundary option {boundary!r}; must be one of "
                         f"{list(_BOUNDARIES)}")
    opname = f"scipy.signal.{name}"
    if y is None:
        (x,) = util.promote_dtypes_inexact(opname, x)
    else:
        x, y = util.promote_dtypes_inexact(opname, x, y)
        if x.ndim != y.ndim:
            raise ValueError(f"{opname}: x and y must have the same rank, got {x.ndim} and {y.ndim}")
    axis = util.canonicalize_axis(_static_int(axis, "axis"), x.ndim, opname)
    outer = tuple(s for i, s in enumerate(x.shape) if i != axis)
    if y is not None:
        try:
            outer = jnp.broadcast_shapes(outer, tuple(s for i, s in enumerate(y.shape) if i != axis))
        except ValueError as e:
            raise ValueError(f"{opname}: x and y cannot be broadcast together") from e
    result_dtype = dtypes.complex_of(x.dtype)
    freq_dtype = dtypes.real_of(result_dtype)

    nperseg = _static_int(nperseg, "nperseg")
    if nperseg is not None and nperseg < 1:
        raise ValueError(f"{opname}: nperseg must be a positive integer, got {nperseg}")
    if x.size == 0 or (y is not None and y.size == 0):
        n = x.shape[axis] if y is None else min(x.shape[axis], y.shape[axis])
        shape = outer[:axis] + (n,) + outer[axis:]
        return jnp.zeros(shape, freq_dtype), jnp.zeros(shape, freq_dtype), jnp.zeros(shape, result_dtype)
    win, nperseg = _triage_window(window, nperseg, x.shape[axis], x.dtype)
    noverlap = nperseg // 2 if noverlap is None else _static_int(noverlap, "noverlap")
    nfft = nperseg if nfft is None else _static_int(nfft, "nfft")
    if nfft < nperseg:
        raise ValueError(f"{opname}: nfft ({nfft}) must be greater than or equal to nperseg ({nperseg})")
    if noverlap >= nperseg:
        raise ValueError(f"{opname}: noverlap ({noverlap}) must be less than nperseg ({nperseg})")
    step = nperseg - noverlap

    x = jnp.moveaxis(x, axis, -1)
    if y is not None:
        y = jnp.moveaxis(y, axis, -1)
        if x.shape[-1] != y.shape[-1]:  # the shorter is zero-padded at its end
            n = max(x.shape[-1], y.shape[-1])
            x, y = (jnp.pad(v, [(0, 0)] * (v.ndim - 1) + [(0, n - v.shape[-1])]) for v in (x, y))
    signals = [x] if y is None else [x, y]
    if boundary is not None:
        signals = [_extend(v, nperseg // 2, boundary) for v in signals]
    if padded:  # zero-padded to a whole number of segments
        extra = (-(signals[0].shape[-1] - nperseg) % step) % nperseg
        signals = [jnp.pad(v, [(0, 0)] * (v.ndim - 1) + [(0, extra)]) for v in signals]
    length = signals[0].shape[-1]

    if scaling == "density":
        scale = 1.0 / (fs * (win * win).sum())
    elif scaling == "spectrum":
        scale = 1.0 / win.sum() ** 2
    else:
        raise ValueError(f"{opname}: unknown scaling {scaling!r}; use 'density' or 'spectrum'")
    if mode == "stft":
        scale = jnp.sqrt(scale)

    onesided = bool(return_onesided)
    if onesided and any(v.dtype.kind == "c" for v in signals):
        onesided = False
        warnings.warn("Input data is complex, switching to return_onesided=False")
    k = np.arange(nfft // 2 + 1) if onesided else np.fft.fftfreq(nfft) * nfft
    freqs = jnp.asarray((k / nfft).astype(freq_dtype)) * fs

    detrend_func = _detrend_function(detrend_type)
    spectra = [_segment_spectra(v, win, detrend_func, nperseg, noverlap, nfft, onesided) for v in signals]
    if mode == "stft":
        result = spectra[0]
    else:
        result = jnp.conj(spectra[0]) * spectra[-1]
    result = result * scale
    if onesided and mode == "psd":  # the negative frequencies' power folded onto the positive ones
        double = np.full(nfft // 2 + 1, 2.0)
        double[0] = 1.0
        if nfft % 2 == 0:
            double[-1] = 1.0
        result = result * jnp.asarray(double.astype(freq_dtype))
    time = jnp.asarray((np.arange(nperseg / 2, length - nperseg / 2 + 1, step)
                        - (nperseg / 2 if boundary is not None else 0)).astype(freq_dtype)) / fs
    result = result.astype(result_dtype)
    if y is None and mode == "psd":
        result = jnp.real(result)
    return freqs, time, jnp.moveaxis(result, -1, axis)


def stft(x, fs=1.0, window="hann", nperseg=256, noverlap=None, nfft=None, detrend=False, return_onesided=True,
         boundary="zeros", padded=True, axis=-1):
    """(f, t, Zxx): the short-time Fourier transform of x along axis ('spectrum' scaling)."""
    return _spectral_helper("stft", x, None, fs, window, nperseg, noverlap, nfft, detrend, return_onesided,
                            "spectrum", axis, "stft", boundary=boundary, padded=padded)


def _median_bias(n):
    """The median of n periodograms over their mean (Allen et al. 2012, appendix B)."""
    ii = np.arange(2.0, n, 2)
    return 1 + np.sum(1.0 / (ii + 1) - 1.0 / ii)


def csd(x, y, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None, detrend="constant",
        return_onesided=True, scaling="density", axis=-1, average="mean"):
    """(f, Pxy): the cross power spectral density of x and y by Welch's method (y None: x's PSD)."""
    freqs, _, pxy = _spectral_helper("csd", x, y, fs, window, nperseg, noverlap, nfft, detrend,
                                     return_onesided, scaling, axis, "psd")
    if y is not None:
        pxy = pxy.astype(dtypes.complex_of(pxy.dtype))
    if pxy.ndim >= 2 and pxy.size > 0:
        if pxy.shape[-1] > 1:
            if average == "median":
                bias = _median_bias(pxy.shape[-1])
                if pxy.dtype.kind == "c":
                    pxy = lax.complex(jnp.median(jnp.real(pxy), axis=-1), jnp.median(jnp.imag(pxy), axis=-1))
                else:
                    pxy = jnp.median(pxy, axis=-1)
                pxy = pxy / bias
            elif average == "mean":
                pxy = pxy.mean(axis=-1)
            else:
                raise ValueError(f"scipy.signal.csd: average must be 'median' or 'mean', got {average!r}")
        else:
            pxy = pxy.reshape(pxy.shape[:-1])
    return freqs, pxy


def welch(x, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None, detrend="constant",
          return_onesided=True, scaling="density", axis=-1, average="mean"):
    """(f, Pxx): the power spectral density of x by Welch's method."""
    freqs, pxx = csd(x, None, fs=fs, window=window, nperseg=nperseg, noverlap=noverlap, nfft=nfft,
                     detrend=detrend, return_onesided=return_onesided, scaling=scaling, axis=axis,
                     average=average)
    return freqs, jnp.real(pxx)


def _overlap_add(frames, step):
    """Frames (..., n, length) summed into one signal, frame i starting at i * step: each frame is cut
    into chunks of `step` points, and chunk c of frame i lands on output block i + c."""
    *batch, n, length = frames.shape
    chunks = -(-length // step)
    frames = jnp.pad(frames, [(0, 0)] * len(batch) + [(0, 0), (0, chunks * step - length)])
    frames = frames.reshape(tuple(batch) + (n, chunks, step))
    blocks = None
    for c in range(chunks):
        shifted = jnp.pad(frames[..., c, :], [(0, 0)] * len(batch) + [(c, chunks - 1 - c), (0, 0)])
        blocks = shifted if blocks is None else blocks + shifted
    out = blocks.reshape(tuple(batch) + ((n + chunks - 1) * step,))
    return out[..., :step * (n - 1) + length]


def istft(Zxx, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None, input_onesided=True, boundary=True,
          time_axis=-1, freq_axis=-2):
    """(t, x): the inverse of stft, by windowed overlap-add."""
    z = util.asarray_arg("scipy.signal.istft", Zxx)
    if z.ndim < 2:
        raise ValueError(f"scipy.signal.istft: the STFT must be at least 2-D, got shape {z.shape}")
    freq_axis = util.canonicalize_axis(freq_axis, z.ndim, "scipy.signal.istft")
    time_axis = util.canonicalize_axis(time_axis, z.ndim, "scipy.signal.istft")
    if freq_axis == time_axis:
        raise ValueError("scipy.signal.istft: time and frequency axes must differ")
    z = z.astype(dtypes.complex_of(util.to_inexact_dtype(z.dtype)))
    n_default = 2 * (z.shape[freq_axis] - 1) if input_onesided else z.shape[freq_axis]
    nperseg = n_default if nperseg is None else _static_int(nperseg, "nperseg")
    if nperseg < 1:
        raise ValueError(f"scipy.signal.istft: nperseg must be a positive integer, got {nperseg}")
    if nfft is None:
        nfft = n_default + (1 if input_onesided and nperseg == n_default + 1 else 0)  # odd nperseg, no padding
    else:
        nfft = _static_int(nfft, "nfft")
    if nfft < nperseg:
        raise ValueError(f"scipy.signal.istft: FFT length ({nfft}) must be at least nperseg ({nperseg})")
    noverlap = nperseg // 2 if noverlap is None else _static_int(noverlap, "noverlap")
    if noverlap >= nperseg:
        raise ValueError(f"scipy.signal.istft: noverlap ({noverlap}) must be less than nperseg ({nperseg})")
    step = nperseg - noverlap

    outer = tuple(i for i in range(z.ndim) if i not in (time_axis, freq_axis))
    z = jnp.transpose(z, outer + (time_axis, freq_axis))  # (..., frames, frequencies)
    frames = (jnp.fft.irfft(z, n=nfft) if input_onesided else jnp.fft.ifft(z, n=nfft))[..., :nperseg]
    real_dtype = dtypes.real_of(frames.dtype)
    if isinstance(window, (str, tuple)):
        win = jnp.asarray(_window_values(window, nperseg).astype(real_dtype))
    else:
        win = jnp.asarray(window)
        if win.ndim != 1:
            raise ValueError(f"scipy.signal.istft: window must be 1-D, got shape {win.shape}")
        if win.shape[0] != nperseg:
            raise ValueError(f"scipy.signal.istft: window must have length {nperseg}, got {win.shape[0]}")
        win = win.astype(frames.dtype if win.dtype.kind == "c" else real_dtype)
    frames = frames * win.sum()  # undoes stft's 'spectrum' scaling
    x = _overlap_add(frames * win, step)
    norm = _overlap_add(jnp.broadcast_to(win * win, (frames.shape[-2], nperseg)), step)
    if boundary:
        x = x[..., nperseg // 2:x.shape[-1] - nperseg // 2]
        norm = norm[..., nperseg // 2:norm.shape[-1] - nperseg // 2]
    x = x / jnp.where(norm > 1e-10, norm, 1.0)
    if x.ndim > 1 and time_axis != z.ndim - 1:
        x = jnp.moveaxis(x, -1, time_axis - 1 if freq_axis < time_axis else time_axis)
    time = jnp.asarray(np.arange(x.shape[0]).astype(real_dtype)) / fs  # shape[0], as SciPy and JAX
    return time, x
