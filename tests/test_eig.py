"""jnp.linalg.eig / eigvals (LAPACK geev): eigenpairs satisfy a v = v w, eigenvalues match
NumPy's, eigenvectors have unit norm; batching, jit, vmap, and the errors of what is missing."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp

rng = np.random.default_rng()


@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-4), (np.float64, 2e-4)])
def test_eig_pairs(dtype, tol):
    a = rng.standard_normal((3, 6, 6)).astype(dtype)
    w, v = jnp.linalg.eig(a)
    want_dt = np.complex64 if np.dtype(dtype) == np.float32 or not kiln.config.jax_enable_x64 else np.complex128
    assert w.dtype == want_dt and v.dtype == want_dt and w.shape == (3, 6) and v.shape == (3, 6, 6)
    w, v = np.asarray(w).astype(np.complex128), np.asarray(v).astype(np.complex128)
    ad = a.astype(np.float64)
    np.testing.assert_allclose(ad @ v, v * w[:, None, :], atol=tol * 10)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1, rtol=tol)
    wn = np.linalg.eigvals(ad)
    for i in range(3):  # the same spectrum (LAPACK's order may differ between builds: compare sorted)
        key = lambda z: (np.round(z.real, 3), np.round(z.imag, 3))  # noqa: E731
        np.testing.assert_allclose(sorted(w[i], key=key), sorted(wn[i], key=key), rtol=tol, atol=tol)


def test_eigvals_jit_vmap_and_special_matrices():
    a = rng.standard_normal((4, 5, 5)).astype(np.float32)
    w = np.asarray(jnp.linalg.eigvals(a))
    np.testing.assert_allclose(np.asarray(kiln.jit(jnp.linalg.eigvals)(a)), w, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.vmap(jnp.linalg.eigvals)(a)), w, rtol=1e-6, atol=1e-6)
    rot = np.array([[0.0, -1.0], [1.0, 0.0]], np.float32)  # eigenvalues +-i
    np.testing.assert_allclose(sorted(np.asarray(jnp.linalg.eigvals(rot)), key=lambda z: z.imag), [-1j, 1j], atol=1e-6)
    d = np.diag(np.array([3.0, -1.0, 2.0], np.float32))
    np.testing.assert_allclose(sorted(np.asarray(jnp.linalg.eigvals(d)).real), [-1, 2, 3], atol=1e-6)
    # the eigenvalues of a real matrix come in conjugate pairs, and so do its eigenvectors
    w, v = (np.asarray(t) for t in jnp.linalg.eig(rot))
    np.testing.assert_allclose(v[:, 0], np.conj(v[:, 1]), atol=1e-6)


def test_eig_of_complex_matrices():
    a = (rng.standard_normal((2, 5, 5)) + 1j * rng.standard_normal((2, 5, 5))).astype(np.complex64)
    w, v = (np.asarray(t).astype(np.complex128) for t in jnp.linalg.eig(a))
    np.testing.assert_allclose(a.astype(np.complex128) @ v, v * w[:, None, :], atol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1, rtol=1e-5)
    wn = np.linalg.eigvals(a.astype(np.complex128))
    for i in range(2):
        np.testing.assert_allclose(np.sort_complex(w[i]), np.sort_complex(wn[i]), rtol=1e-4, atol=1e-4)


def test_eig_errors():
    with pytest.raises(ValueError, match="square"):
        jnp.linalg.eig(np.ones((2, 3), np.float32))
    with pytest.raises(NotImplementedError, match="eigenvectors"):
        kiln.grad(lambda a: jnp.sum(jnp.abs(jnp.linalg.eig(a)[1])))(np.eye(3, dtype=np.float32))
    np.testing.assert_allclose(np.asarray(jnp.linalg.eigvals(np.eye(2, dtype=np.float32))), [1, 1])


def test_eigvals_gradient_against_finite_differences(x64):
    a = rng.standard_normal((4, 4))

    def loss_np(a):
        w = np.linalg.eigvals(a)
        return np.sum(w.real + w.imag ** 2)

    g = np.asarray(kiln.grad(lambda a: jnp.sum(jnp.real(jnp.linalg.eigvals(a)) + jnp.imag(jnp.linalg.eigvals(a)) ** 2))(a))
    fd = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        e = np.zeros_like(a)
        e[idx] = 1e-6
        fd[idx] = (loss_np(a + e) - loss_np(a - e)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6)
    # jvp: dw = diag(v^-1 da v)
    t = rng.standard_normal((4, 4))
    _, tw = kiln.jvp(jnp.linalg.eigvals, (a,), (t,))
    w, v = np.linalg.eig(a)
    want = np.diag(np.linalg.solve(v, t) @ v)
    got = np.asarray(tw)
    for z in want:  # the same values, in the primal's order (match by position of the eigenvalue)
        assert np.abs(got - z).min() < 1e-8
