"""kiln.numpy.fft and lax.fft against numpy.fft (complex128/float64 references), with gradients
against finite differences (JAX's convention for complex inputs: df/dx - i df/dy), vmap against
loops, jit against eager."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln._src.config import config

rng = np.random.default_rng()


@pytest.fixture
def x64():
    old = config.jax_enable_x64
    config.update("jax_enable_x64", True)
    yield
    config.update("jax_enable_x64", old)


def _c(shape, dtype=np.complex64):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def _r(shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def _close(got, want, tol=2e-5):
    got = np.asarray(got)
    scale = max(1.0, float(np.abs(want).max()) if np.size(want) else 1.0)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 12, 17, 64, 97, 100, 128, 1000, 1009])
def test_fft_ifft_1d_lengths(n):
    x = _c((3, n))
    _close(jnp.fft.fft(x), np.fft.fft(x.astype(np.complex128)))
    _close(jnp.fft.ifft(x), np.fft.ifft(x.astype(np.complex128)))
    assert jnp.fft.fft(x).dtype == np.complex64


@pytest.mark.parametrize("n", [1, 2, 3, 6, 7, 16, 31, 100, 257])
def test_rfft_irfft_1d_lengths(n):
    x = _r((2, n))
    _close(jnp.fft.rfft(x), np.fft.rfft(x.astype(np.float64)))
    s = np.fft.rfft(x.astype(np.float64)).astype(np.complex64)
    _close(jnp.fft.irfft(s, n), np.fft.irfft(s.astype(np.complex128), n))
    if s.shape[-1] > 1:
        _close(jnp.fft.irfft(s), np.fft.irfft(s.astype(np.complex128)))
    else:  # the default length 2 * (1 - 1) has no points, as numpy says
        with pytest.raises(ValueError, match="number of data points"):
            jnp.fft.irfft(s)
    assert jnp.fft.rfft(x).dtype == np.complex64 and jnp.fft.irfft(s, n).dtype == np.float32


def test_n_pads_and_cuts_and_axis():
    x = _c((4, 6, 5))
    for n in (3, 5, 9):
        for axis in (0, 1, -1):
            _close(jnp.fft.fft(x, n, axis), np.fft.fft(x.astype(np.complex128), n, axis))
            _close(jnp.fft.ifft(x, n, axis), np.fft.ifft(x.astype(np.complex128), n, axis))
    r = _r((5, 8))
    _close(jnp.fft.rfft(r, 11, axis=0), np.fft.rfft(r.astype(np.float64), 11, axis=0))
    s = _c((5, 4))
    _close(jnp.fft.irfft(s, 6, axis=0), np.fft.irfft(s.astype(np.complex128), 6, axis=0))
    _close(jnp.fft.irfft(s, 3, axis=1), np.fft.irfft(s.astype(np.complex128), 3, axis=1))


@pytest.mark.parametrize("norm", [None, "backward", "ortho", "forward"])
def test_norms(norm):
    x, r = _c((3, 10)), _r((3, 10))
    for f in ("fft", "ifft"):
        _close(getattr(jnp.fft, f)(x, norm=norm), getattr(np.fft, f)(x.astype(np.complex128), norm=norm))
    _close(jnp.fft.rfft(r, norm=norm), np.fft.rfft(r.astype(np.float64), norm=norm))
    s = _c((3, 6))
    _close(jnp.fft.irfft(s, 10, norm=norm), np.fft.irfft(s.astype(np.complex128), 10, norm=norm))
    _close(jnp.fft.hfft(s, 10, norm=norm), np.fft.hfft(s.astype(np.complex128), 10, norm=norm))
    _close(jnp.fft.ihfft(r, norm=norm), np.fft.ihfft(r.astype(np.float64), norm=norm))
    _close(jnp.fft.fftn(x.reshape(3, 2, 5), norm=norm), np.fft.fftn(x.reshape(3, 2, 5).astype(np.complex128), norm=norm))


def test_multi_dimensional():
    x = _c((2, 6, 5, 4))
    xd = x.astype(np.complex128)
    _close(jnp.fft.fft2(x), np.fft.fft2(xd))
    _close(jnp.fft.ifft2(x, axes=(0, 2)), np.fft.ifft2(xd, axes=(0, 2)))
    _close(jnp.fft.fftn(x), np.fft.fftn(xd))  # four axes: chunks of three
    _close(jnp.fft.ifftn(x, axes=(1, 3)), np.fft.ifftn(xd, axes=(1, 3)))
    _close(jnp.fft.fftn(x, s=(4, 7), axes=(2, 0)), np.fft.fftn(xd, s=(4, 7), axes=(2, 0)))
    r = _r((3, 4, 6, 8))
    rd = r.astype(np.float64)
    _close(jnp.fft.rfft2(r), np.fft.rfft2(rd))
    _close(jnp.fft.rfftn(r), np.fft.rfftn(rd))
    _close(jnp.fft.rfftn(r, axes=(0, 2)), np.fft.rfftn(rd, axes=(0, 2)))
    s = np.fft.rfftn(rd).astype(np.complex64)
    _close(jnp.fft.irfftn(s, r.shape), np.fft.irfftn(s.astype(np.complex128), r.shape, axes=(0, 1, 2, 3)))
    s2 = np.fft.rfft2(rd).astype(np.complex64)
    _close(jnp.fft.irfft2(s2, (6, 8)), np.fft.irfft2(s2.astype(np.complex128), (6, 8)))
    _close(jnp.fft.irfft2(s2), np.fft.irfft2(s2.astype(np.complex128)))


def test_real_and_int_inputs_promote():
    r = _r((7,))
    _close(jnp.fft.fft(r), np.fft.fft(r.astype(np.float64)))
    i = rng.integers(-5, 5, 9).astype(np.int32)
    out = jnp.fft.fft(i)
    assert out.dtype == np.complex64
    _close(out, np.fft.fft(i))
    _close(jnp.fft.rfft(i), np.fft.rfft(i))


def test_complex128_under_x64(x64):
    x = _c((3, 33), np.complex128)
    out = jnp.fft.fft(x)
    assert out.dtype == np.complex128
    np.testing.assert_allclose(np.asarray(out), np.fft.fft(x), rtol=1e-12, atol=1e-11)
    r = rng.standard_normal((4, 50))
    np.testing.assert_allclose(np.asarray(jnp.fft.irfft(jnp.fft.rfft(r), 50)), r, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(jnp.fft.rfft2(r)), np.fft.rfft2(r), rtol=1e-12, atol=1e-11)


def test_lax_fft_types_and_errors():
    x = _c((2, 4, 8))
    _close(lax.fft(x, lax.FftType.FFT, (4, 8)), np.fft.fftn(x.astype(np.complex128), axes=(1, 2)))
    _close(lax.fft(x, "ifft", (8,)), np.fft.ifft(x.astype(np.complex128)))
    r = _r((2, 4, 8))
    _close(lax.fft(r, "rfft", (2, 4, 8)), np.fft.rfftn(r.astype(np.float64)))
    with pytest.raises(ValueError, match="fft_lengths"):
        lax.fft(x, "fft", (5,))
    with pytest.raises(TypeError, match="complex"):
        lax.fft(r, "fft", (8,))
    with pytest.raises(TypeError, match="real"):
        jnp.fft.rfft(x)
    with pytest.raises(ValueError, match="norm"):
        jnp.fft.fft(x, norm="bogus")
    with pytest.raises(ValueError, match="fft_type"):
        lax.fft(x, "dct", (8,))
    _close(jnp.fft.fft(x), np.fft.fft(x.astype(np.complex128)))  # still works after the errors


def test_freqs_and_shifts():
    for n in (1, 6, 7):
        for d in (1.0, 0.25):
            _close(jnp.fft.fftfreq(n, d), np.fft.fftfreq(n, d))
            _close(jnp.fft.rfftfreq(n, d), np.fft.rfftfreq(n, d))
    x = _r((5, 6))
    np.testing.assert_array_equal(np.asarray(jnp.fft.fftshift(x)), np.fft.fftshift(x))
    np.testing.assert_array_equal(np.asarray(jnp.fft.ifftshift(x)), np.fft.ifftshift(x))
    np.testing.assert_array_equal(np.asarray(jnp.fft.fftshift(x, axes=1)), np.fft.fftshift(x, axes=1))
    np.testing.assert_array_equal(np.asarray(jnp.fft.ifftshift(x, axes=(0,))), np.fft.ifftshift(x, axes=(0,)))


def test_jit_vmap():
    x = _c((4, 3, 12))
    f = lambda z: jnp.fft.ifft(jnp.fft.fft(z) * 2.0)  # noqa: E731
    _close(kiln.jit(f)(x), 2 * x)
    g = lambda z: jnp.fft.fft2(z)  # noqa: E731
    out = kiln.vmap(g)(x)
    _close(out, np.stack([np.fft.fft2(x[i].astype(np.complex128)) for i in range(4)]))
    r = _r((3, 10))
    _close(kiln.vmap(jnp.fft.rfft, in_axes=1, out_axes=1)(r.T.copy()),
           np.stack([np.fft.rfft(r[i].astype(np.float64)) for i in range(3)], axis=1))


def _fd_grad_real(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = eps
        g[idx] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


def test_gradients_against_finite_differences(x64):
    r = rng.standard_normal((2, 6))
    w = rng.standard_normal((2, 4)) + 1j * rng.standard_normal((2, 4))

    def loss_r(x):  # real -> rfft -> real loss
        s = jnp.fft.rfft(x)
        return jnp.sum(jnp.real(s * w) + jnp.abs(s) ** 2 * 0.1)

    def loss_r_np(x):
        s = np.fft.rfft(x)
        return np.sum(np.real(s * w) + np.abs(s) ** 2 * 0.1)
    np.testing.assert_allclose(np.asarray(kiln.grad(loss_r)(r)), _fd_grad_real(loss_r_np, r), rtol=1e-6, atol=1e-6)

    sp = rng.standard_normal((2, 4)) + 1j * rng.standard_normal((2, 4))
    v = rng.standard_normal((2, 6))

    def loss_i(s):  # complex half spectrum -> irfft -> real loss; JAX's convention df/dx - i df/dy
        return jnp.sum(jnp.fft.irfft(s, 6) * v) + jnp.sum(jnp.fft.irfft(s, 6) ** 2)

    def loss_i_np(s):
        y = np.fft.irfft(s, 6)
        return np.sum(y * v) + np.sum(y ** 2)
    g = np.asarray(kiln.grad(loss_i)(sp))
    gx = _fd_grad_real(lambda a: loss_i_np(a + 1j * sp.imag), sp.real)
    gy = _fd_grad_real(lambda b: loss_i_np(sp.real + 1j * b), sp.imag)
    np.testing.assert_allclose(g, gx - 1j * gy, rtol=1e-6, atol=1e-6)

    z = rng.standard_normal((3, 5)) + 1j * rng.standard_normal((3, 5))
    u = rng.standard_normal((3, 5)) + 1j * rng.standard_normal((3, 5))

    def loss_c(z):
        return jnp.sum(jnp.abs(jnp.fft.fft2(z) - u) ** 2) + jnp.sum(jnp.real(jnp.fft.ifft(z, axis=0) * u))

    def loss_c_np(z):
        return np.sum(np.abs(np.fft.fft2(z) - u) ** 2) + np.sum(np.real(np.fft.ifft(z, axis=0) * u))
    g = np.asarray(kiln.grad(loss_c)(z))
    gx = _fd_grad_real(lambda a: loss_c_np(a + 1j * z.imag), z.real)
    gy = _fd_grad_real(lambda b: loss_c_np(z.real + 1j * b), z.imag)
    np.testing.assert_allclose(g, gx - 1j * gy, rtol=1e-6, atol=1e-6)


def test_jvp_is_the_fft_of_the_tangent():
    x, t = _c((8,)), _c((8,))
    y, ty = kiln.jvp(jnp.fft.fft, (x,), (t,))
    _close(ty, np.fft.fft(t.astype(np.complex128)))
    r, tr = _r((9,)), _r((9,))
    _, ty = kiln.jvp(jnp.fft.rfft, (r,), (tr,))
    _close(ty, np.fft.rfft(tr.astype(np.float64)))


def test_long_axes_not_last_and_large_lengths():
    # a 20,000-point axis that is not the last one (the four-step split over strided lines) and a
    # prime length over the Bluestein threshold
    x = _r((20000, 3))
    _close(jnp.fft.fft(x, axis=0), np.fft.fft(x.astype(np.float64), axis=0), 5e-5)
    _close(jnp.fft.rfft(x, axis=0), np.fft.rfft(x.astype(np.float64), axis=0), 5e-5)
    z = _c((2, 65537))
    _close(jnp.fft.ifft(z), np.fft.ifft(z.astype(np.complex128)), 5e-5)


def test_transforms_over_zero_length_axes_are_empty():
    # bug (issue 32): FFTs over a zero-length axis raised "fft_lengths must be positive" (and irfft of an
    # empty last axis "invalid number of data points -2"); JAX returns empty arrays of the result's shape
    cases = [(jnp.fft.fft, (0,), {}, (0,), np.complex64), (jnp.fft.ifft, (3, 0), {}, (3, 0), np.complex64),
             (jnp.fft.irfft, (0,), {}, (0,), np.float32), (jnp.fft.hfft, (3, 0), {}, (3, 0), np.float32),
             (jnp.fft.fft2, (0, 3), {}, (0, 3), np.complex64), (jnp.fft.rfft2, (2, 0, 4), {}, (2, 0, 3), np.complex64),
             (jnp.fft.irfftn, (2, 0, 4), {}, (2, 0, 6), np.float32), (jnp.fft.fft, (0, 3), {"axis": 0}, (0, 3), np.complex64)]
    for fn, shape, kw, want_shape, want_dtype in cases:
        got = fn(jnp.zeros(shape), **kw)
        assert got.shape == want_shape and got.dtype == want_dtype, (fn.__name__, shape, got.shape, got.dtype)
    got = kiln.lax.fft(jnp.zeros((2, 0), np.complex64), "fft", (0,))
    assert got.shape == (2, 0) and got.dtype == np.complex64
    assert np.asarray(jnp.fft.irfft(jnp.zeros((0,)), n=4)).tolist() == [0.0] * 4
    with pytest.raises(ValueError):  # as JAX: an explicit length must be positive
        jnp.fft.fft(jnp.ones(3), n=0)
    with pytest.raises(ValueError, match="2 axes"):
        jnp.fft.fft2(jnp.zeros((3, 4)), axes=(0,))
