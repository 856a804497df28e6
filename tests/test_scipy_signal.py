"""kiln.scipy.signal against scipy.signal in float64 on random inputs: convolve/correlate (direct
and FFT, all modes, n-D, complex), convolve2d/correlate2d, fftconvolve over axes, detrend with
breakpoints, windows, welch/csd/stft/istft options; gradients against finite differences, jit
against SciPy, and the NotImplementedError cases JAX has."""
import warnings

import numpy as np
import pytest
import scipy.signal as ss

import kiln
import kiln.numpy as jnp
import kiln.scipy.signal as ks

# the public names of jax.scipy.signal (JAX 0.10)
JAX_SIGNAL_NAMES = ["convolve", "convolve2d", "correlate", "correlate2d", "csd", "detrend", "fftconvolve", "istft",
                    "stft", "welch"]


def _rand(rng, shape, complex_=False):
    x = rng.standard_normal(shape)
    return x + 1j * rng.standard_normal(shape) if complex_ else x


def _close(got, want, tol=1e-9):
    got = np.asarray(got)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def _fd_grad(f, a, eps=1e-6):
    g = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        d = np.zeros_like(a)
        d[idx] = eps
        g[idx] = (f(a + d) - f(a - d)) / (2 * eps)
    return g


def test_public_names_are_jax_signal_names():
    assert sorted(ks.__all__) == JAX_SIGNAL_NAMES
    assert all(callable(getattr(ks, n)) for n in JAX_SIGNAL_NAMES)
    import kiln.scipy
    assert kiln.scipy.signal is ks


# even and odd lengths, in2 larger than in1 (a swap in 'valid'), equal shapes, 1-D to 3-D
SHAPES = [((7,), (3,)), ((6,), (4,)), ((3,), (8,)), ((4,), (4,)), ((1,), (5,)), ((5, 6), (2, 3)), ((5, 6), (4, 2)),
          ((2, 3), (5, 6)), ((4, 5, 6), (2, 3, 2))]


@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_convolve_and_correlate_match_scipy(x64, shapes, complex_):
    rng = np.random.default_rng(0)
    a, b = _rand(rng, shapes[0], complex_), _rand(rng, shapes[1], complex_)
    for mode in ("full", "same", "valid"):
        for method in ("auto", "direct", "fft"):
            _close(ks.convolve(a, b, mode, method=method), ss.convolve(a, b, mode, method="direct"))
            # correlate conjugates in2 (SciPy's definition)
            _close(ks.correlate(a, b, mode, method=method), ss.correlate(a, b, mode, method="direct"))
        _close(ks.fftconvolve(a, b, mode), ss.fftconvolve(a, b, mode))
        if len(shapes[0]) == 2:
            _close(ks.convolve2d(a, b, mode), ss.convolve2d(a, b, mode))
            # correlate2d differs from correlate: 'same' with an even in2, 'valid' with a larger complex in2
            _close(ks.correlate2d(a, b, mode), ss.correlate2d(a, b, mode))


def test_convolve_integer_inputs_give_floats():
    out = ks.convolve(np.array([1, 2, 3, 2, 1]), np.array([1, 1, 1]), "same")
    assert out.dtype == np.float32
    _close(out, [3.0, 6.0, 7.0, 6.0, 3.0])


@pytest.mark.parametrize("axes,b_shape", [(1, (3, 4, 5)), ((1, 2), (3, 4, 2)), (-1, (3, 8, 2)),
                                          ((0, 1, 2), (2, 4, 3)), ((2, 0), (2, 8, 4))], ids=str)
def test_fftconvolve_over_axes(x64, axes, b_shape):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((3, 8, 5)), rng.standard_normal(b_shape)
    for mode in ("full", "same", "valid"):
        _close(ks.fftconvolve(a, b, mode, axes=axes), ss.fftconvolve(a, b, mode, axes=axes))


def test_fftconvolve_mapped_axes_must_match():
    with pytest.raises(ValueError, match="mapped axes"):
        ks.fftconvolve(np.ones((3, 5)), np.ones((2, 5)), axes=1)


@pytest.mark.parametrize("bp", [0, [10], [5, 17, 29], [0, 30]], ids=str)
def test_detrend_linear_with_breakpoints(x64, bp):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 30))
    _close(ks.detrend(x, bp=bp), ss.detrend(x, bp=bp))
    _close(ks.detrend(x.T, axis=0, bp=bp), ss.detrend(x.T, axis=0, bp=bp))
    z = _rand(rng, 30, complex_=True)
    _close(ks.detrend(z, bp=bp), ss.detrend(z, bp=bp))


def test_detrend_constant(x64):
    x = np.random.default_rng(3).standard_normal((5, 7))
    _close(ks.detrend(x, axis=0, type="constant"), ss.detrend(x, axis=0, type="constant"))


WINDOWS = ["hann", "hamming", "blackman", "bartlett", "boxcar", "triang", "blackmanharris", "nuttall", "flattop",
           "barthann", "cosine", "lanczos", "parzen", "bohman", "tukey", ("tukey", 0.3), ("tukey", 1.0),
           "exponential", ("exponential", None, 2.0), ("kaiser", 8.0), ("gaussian", 3.0),
           ("general_gaussian", 1.5, 4.0), ("general_hamming", 0.6), ("general_cosine", [0.5, 0.3, 0.2])]


@pytest.mark.parametrize("window", WINDOWS, ids=str)
def test_windows_match_get_window(window):
    for n in (1, 2, 7, 8, 16):
        _close(ks._window_values(window, n), ss.get_window(window, n), tol=1e-12)


WELCH_CASES = [dict(), dict(nperseg=64), dict(nperseg=64, noverlap=10), dict(nperseg=50, nfft=80),
               dict(nperseg=33, nfft=40), dict(nperseg=64, detrend="linear"), dict(nperseg=64, detrend=False),
               dict(nperseg=64, return_onesided=False), dict(nperseg=64, scaling="spectrum"),
               dict(nperseg=64, average="median"), dict(window="hamming", nperseg=40),
               dict(window=("kaiser", 5.0), nperseg=40), dict(window=np.hanning(30)), dict(fs=100.0, nperseg=64)]


@pytest.mark.parametrize("kw", WELCH_CASES, ids=str)
def test_welch_and_csd_match_scipy(x64, kw):
    rng = np.random.default_rng(4)
    x, y, x2 = rng.standard_normal(300), rng.standard_normal(300), rng.standard_normal((3, 260))
    for got, want in ((ks.welch(x, **kw), ss.welch(x, **kw)), (ks.csd(x, y, **kw), ss.csd(x, y, **kw)),
                      (ks.welch(x2.T, axis=0, **kw), ss.welch(x2.T, axis=0, **kw))):
        _close(got[0], want[0])
        _close(got[1], want[1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # complex input: two-sided
        _close(ks.csd(x + 1j * y, y, **kw)[1], ss.csd(x + 1j * y, y, **kw)[1])


def test_welch_default_nperseg_is_256(x64):
    # regression guard: JAX 0.10's welch/csd use the whole signal as one segment when nperseg is
    # None, against SciPy and JAX's own docs (256); kiln keeps 256
    x = np.random.default_rng(5).standard_normal(1000)
    f, p = ks.welch(x)
    assert p.shape == (129,)
    _close(p, ss.welch(x)[1])


def test_callable_detrend_sees_time_last(x64):
    x = np.random.default_rng(6).standard_normal((200, 3))
    seen = []

    def remove_mean(d):
        seen.append(d.shape)
        return d - d.mean(-1, keepdims=True)

    _close(ks.welch(x, axis=0, nperseg=64, detrend=remove_mean)[1],
           ss.welch(x, axis=0, nperseg=64, detrend=remove_mean)[1])
    assert seen[0][-1] == 64


STFT_CASES = [dict(nperseg=64), dict(nperseg=64, noverlap=48), dict(nperseg=50, nfft=64), dict(nperseg=33),
              dict(nperseg=64, boundary=None), dict(nperseg=64, boundary="even"), dict(nperseg=64, boundary="odd"),
              dict(nperseg=64, boundary="constant"), dict(nperseg=64, padded=False),
              dict(nperseg=64, return_onesided=False), dict(nperseg=64, detrend="linear"),
              dict(window="hamming", nperseg=32), dict(fs=8.0, nperseg=16)]


@pytest.mark.parametrize("kw", STFT_CASES, ids=str)
def test_stft_and_istft_match_scipy(x64, kw):
    rng = np.random.default_rng(7)
    x, x2 = rng.standard_normal(300), rng.standard_normal((3, 200))
    got, want = ks.stft(x, **kw), ss.stft(x, **kw)
    for g, w in zip(got, want):
        _close(g, w)
    _close(ks.stft(x2.T, axis=0, **kw)[2], ss.stft(x2.T, axis=0, **kw)[2])
    if kw.get("boundary", "zeros") is None or not kw.get("padded", True):
        return
    inv = {k: v for k, v in kw.items() if k in ("nperseg", "noverlap", "nfft", "window", "fs")}
    inv["input_onesided"] = kw.get("return_onesided", True)
    z = ss.stft(x2, **{k: v for k, v in kw.items() if k != "detrend"})[2]
    for g, w in zip(ks.istft(z, **inv), ss.istft(z, **inv)):
        _close(g, w)
    zt = np.moveaxis(z, -1, 0)  # time first, frequency last
    _close(ks.istft(zt, time_axis=0, freq_axis=-1, **inv)[1], ss.istft(zt, time_axis=0, freq_axis=-1, **inv)[1])


def test_stft_of_complex_input_is_two_sided(x64):
    rng = np.random.default_rng(8)
    z = _rand(rng, 100, complex_=True)
    with pytest.warns(UserWarning, match="complex"):
        f, t, zxx = ks.stft(z, nperseg=32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = ss.stft(z, nperseg=32)
    _close(f, want[0])
    _close(zxx, want[2])
    back = ks.istft(zxx, input_onesided=False)[1]
    _close(back, ss.istft(want[2], input_onesided=False)[1])
    _close(back[:100], z)  # stft zero-pads the end to whole segments


@pytest.mark.parametrize("fn", ["convolve", "fftconvolve", "correlate_fft"])
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_convolution_gradients_match_finite_differences(x64, fn, mode):
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((5, 4)), rng.standard_normal((3, 2))
    conv = {"convolve": lambda x, y: ks.convolve(x, y, mode),
            "fftconvolve": lambda x, y: ks.fftconvolve(x, y, mode),
            "correlate_fft": lambda x, y: ks.correlate(x, y, mode, method="fft")}[fn]
    w = rng.standard_normal(np.shape(conv(a, b)))

    def loss(x, y):
        return (conv(x, y) * w).sum()

    ga, gb = kiln.grad(loss, argnums=(0, 1))(a, b)
    _close(ga, _fd_grad(lambda x: float(loss(x, b)), a), tol=1e-6)
    _close(gb, _fd_grad(lambda y: float(loss(a, y)), b), tol=1e-6)


def test_spectral_gradients_match_finite_differences(x64):
    x = np.random.default_rng(10).standard_normal(64)

    def loss(v):
        zxx = ks.stft(v, nperseg=16)[2]
        return ks.welch(v, nperseg=16, detrend="linear")[1].sum() + (jnp.abs(zxx) ** 2).sum() + \
            ks.istft(zxx)[1].sum()

    _close(kiln.grad(loss)(x), _fd_grad(lambda v: float(loss(v)), x), tol=1e-6)


def test_jit_matches_scipy(x64):
    rng = np.random.default_rng(11)
    a, b, x = rng.standard_normal((6, 5)), rng.standard_normal((3, 2)), rng.standard_normal(128)
    _close(kiln.jit(lambda u, v: ks.convolve(u, v, "same"))(a, b), ss.convolve(a, b, "same"))
    _close(kiln.jit(lambda u: ks.stft(u, nperseg=32)[2])(x), ss.stft(x, nperseg=32)[2])
    _close(kiln.jit(lambda u, fs: ks.welch(u, fs, nperseg=32, average="median")[1])(x, 10.0),
           ss.welch(x, 10.0, nperseg=32, average="median")[1])


def test_float32_dtypes():
    x = np.ones(40, np.float32)
    assert ks.welch(x, nperseg=8)[1].dtype == np.float32
    assert ks.csd(x, x, nperseg=8)[1].dtype == np.complex64
    zxx = ks.stft(x, nperseg=8)[2]
    assert zxx.dtype == np.complex64
    assert ks.istft(zxx)[1].dtype == np.float32


def test_not_implemented_as_in_jax():
    a = np.ones((3, 3))
    with pytest.raises(NotImplementedError, match="boundary"):
        ks.convolve2d(a, a, boundary="wrap")
    with pytest.raises(NotImplementedError, match="boundary"):
        ks.correlate2d(a, a, fillvalue=1.0)
    with pytest.raises(NotImplementedError, match="overwrite_data"):
        ks.detrend(a, overwrite_data=True)


def test_argument_errors():
    with pytest.raises(ValueError, match="mode"):
        ks.convolve(np.ones(3), np.ones(2), "bad")
    with pytest.raises(ValueError, match="method"):
        ks.convolve(np.ones(3), np.ones(2), method="bad")
    with pytest.raises(ValueError, match="at least as large"):
        ks.convolve(np.ones((3, 2)), np.ones((2, 3)), "valid")
    with pytest.raises(ValueError, match="2-dimensional"):
        ks.convolve2d(np.ones(3), np.ones(2))
    with pytest.raises(ValueError, match="noverlap"):
        ks.welch(np.ones(64), nperseg=16, noverlap=16)
    with pytest.raises(ValueError, match="boundary"):
        ks.stft(np.ones(64), nperseg=16, boundary="wrap")
    with pytest.raises(ValueError, match="average"):
        ks.welch(np.ones(64), nperseg=16, average="mode")
