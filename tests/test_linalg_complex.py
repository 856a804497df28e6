"""numpy.linalg on complex64/complex128 matrices (LAPACK's c/z routines) against NumPy in
complex128: factorizations by their defining identities, solves and spectra by value; grad of the
factorizations is refused (NotImplementedError) until their complex rules exist."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln._src.config import config

rng = np.random.default_rng()


@pytest.fixture(params=["c64", "c128"])
def cdt(request):
    if request.param == "c64":
        yield np.complex64, 2e-4
        return
    old = config.jax_enable_x64
    config.update("jax_enable_x64", True)
    yield np.complex128, 1e-10
    config.update("jax_enable_x64", old)


def _c(shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def _h(x):
    return np.conj(np.swapaxes(x, -1, -2))


def _close(got, want, tol):
    got = np.asarray(got).astype(np.complex128)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max())))


def test_solve_inv_det(cdt):
    dt, tol = cdt
    a, b = _c((3, 5, 5)), _c((3, 5, 2))
    a = a + 3 * np.eye(5)  # well conditioned
    A, B = a.astype(dt), b.astype(dt)
    _close(jnp.linalg.solve(A, B), np.linalg.solve(a, b), tol)
    _close(jnp.linalg.solve(A[0], B[0, :, 0]), np.linalg.solve(a[0], b[0, :, 0]), tol)
    _close(jnp.linalg.inv(A), np.linalg.inv(a), tol)
    _close(jnp.linalg.det(A), np.linalg.det(a), tol)
    sign, logabs = jnp.linalg.slogdet(A)
    s2, l2 = np.linalg.slogdet(a)
    _close(sign, s2, tol)
    _close(logabs, l2, tol)
    assert np.asarray(logabs).dtype.kind == "f"


def test_factorizations(cdt):
    dt, tol = cdt
    a = _c((2, 6, 4))
    A = a.astype(dt)
    q, r = (np.asarray(t).astype(np.complex128) for t in jnp.linalg.qr(A))
    _close(q @ r, a, tol)
    _close(_h(q) @ q, np.broadcast_to(np.eye(4), (2, 4, 4)), tol)
    u, s, vh = (np.asarray(t) for t in jnp.linalg.svd(A, full_matrices=False))
    assert s.dtype.kind == "f"
    _close((u * s[:, None, :]) @ vh, a, tol)
    _close(s, np.linalg.svd(a, compute_uv=False), tol)
    h = a @ _h(a) + 0.5 * np.eye(6)
    H = h.astype(dt)
    low = np.asarray(jnp.linalg.cholesky(H)).astype(np.complex128)
    _close(low @ _h(low), h, tol)
    _close(low, np.linalg.cholesky(h), tol)
    _close(jnp.linalg.cholesky(H, upper=True), _h(np.linalg.cholesky(h)), tol)
    w, v = (np.asarray(t) for t in jnp.linalg.eigh(H))
    assert w.dtype.kind == "f"
    _close(w, np.linalg.eigvalsh(h), tol)
    _close(h @ v, v * w[:, None, :], tol * 10)
    _close(jnp.linalg.eigvalsh(H), np.linalg.eigvalsh(h), tol)


def test_least_squares_and_spectral(cdt):
    dt, tol = cdt
    a, b = _c((7, 4)), _c((7, 2))
    A, B = a.astype(dt), b.astype(dt)
    _close(jnp.linalg.lstsq(A, B)[0], np.linalg.lstsq(a, b, rcond=None)[0], tol * 10)
    _close(jnp.linalg.pinv(A), np.linalg.pinv(a), tol * 10)
    _close(jnp.linalg.norm(A, 2), np.linalg.norm(a, 2), tol)
    _close(jnp.linalg.norm(A, "nuc"), np.linalg.norm(a, "nuc"), tol)
    _close(jnp.linalg.norm(A), np.linalg.norm(a), tol)
    _close(jnp.linalg.cond(A[:4]), np.linalg.cond(a[:4]), tol * 10)
    assert int(jnp.linalg.matrix_rank(A)) == 4


def test_jit_and_vmap_of_complex_solve():
    a, b = (_c((4, 3, 3)) + 3 * np.eye(3)).astype(np.complex64), _c((4, 3)).astype(np.complex64)
    want = np.linalg.solve(a.astype(np.complex128), b.astype(np.complex128)[..., None])[..., 0]
    _close(kiln.jit(jnp.linalg.solve)(a[0], b[0]), want[0], 2e-4)
    _close(kiln.vmap(jnp.linalg.solve)(a, b), want, 2e-4)


def _fd(loss, z, eps=1e-6):
    """JAX's convention for a real loss of complex z: dL/dx - i dL/dy, by central differences."""
    g = np.zeros(z.shape, np.complex128)
    for idx in np.ndindex(z.shape):
        for part, unit in ((0, 1.0), (1, 1j)):
            e = np.zeros(z.shape, np.complex128)
            e[idx] = eps * unit
            d = (loss(z + e) - loss(z - e)) / (2 * eps)
            g[idx] += d if part == 0 else -1j * d
    return g


def test_gradients_of_complex_solve_and_det(x64):
    a = _c((3, 3)) + 2 * np.eye(3)
    b = _c((3,))
    w = _c((3,))
    loss_k = lambda a: jnp.real(jnp.sum(jnp.linalg.solve(a, b) * w)) + jnp.abs(jnp.linalg.det(a)) ** 2  # noqa: E731
    loss_n = lambda a: np.real(np.sum(np.linalg.solve(a, b) * w)) + np.abs(np.linalg.det(a)) ** 2  # noqa: E731
    np.testing.assert_allclose(np.asarray(kiln.grad(loss_k)(a)), _fd(loss_n, a), rtol=1e-6, atol=1e-6)
    loss_k2 = lambda a: jnp.sum(jnp.abs(jnp.linalg.inv(a)) ** 2)  # noqa: E731
    loss_n2 = lambda a: np.sum(np.abs(np.linalg.inv(a)) ** 2)  # noqa: E731
    np.testing.assert_allclose(np.asarray(kiln.grad(loss_k2)(a)), _fd(loss_n2, a), rtol=1e-6, atol=1e-6)


@pytest.fixture
def x64():
    old = config.jax_enable_x64
    config.update("jax_enable_x64", True)
    yield
    config.update("jax_enable_x64", old)


def test_complex_factorization_gradients_are_refused():
    h = (lambda a: a @ _h(a) + np.eye(3))(_c((3, 3))).astype(np.complex64)
    for f in (lambda x: jnp.linalg.cholesky(x), lambda x: jnp.linalg.eigh(x).eigenvalues,
              lambda x: jnp.linalg.svd(x, compute_uv=False), lambda x: jnp.linalg.qr(x)[1]):
        with pytest.raises(NotImplementedError, match="complex"):
            kiln.grad(lambda x: jnp.sum(jnp.abs(f(x))))(h)
    _close(jnp.linalg.det(h), np.linalg.det(h.astype(np.complex128)), 2e-4)  # still works
