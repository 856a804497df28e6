"""kiln.scipy.linalg's constructors, hessenberg, qr_multiply, rsf2csf, solve_sylvester, funm and
eigh_tridiagonal, and numpy.linalg.tensorinv/tensorsolve, against scipy/numpy in float64."""

import numpy as np
import pytest
import scipy.linalg as sl

import kiln.numpy as jnp
import kiln.scipy.linalg as kl

pytestmark = pytest.mark.usefixtures("x64")  # conftest's: float64 defaults, restored afterwards


def close(x, y, tol=1e-9):
    np.testing.assert_allclose(np.asarray(x), y, rtol=tol, atol=tol)


@pytest.mark.parametrize("name,args,kwargs", [
    ("circulant", ([1., 2., 3., 4.],), {}), ("companion", ([2., -3., 1., 5.],), {}),
    ("fiedler", ([1., 4., 12., 45.],), {}), ("fiedler_companion", ([1., -2., 3., -4., 5.],), {}),
    ("fiedler_companion", ([2., 3.],), {}), ("hankel", ([1., 2., 3.],), {}),
    ("hankel", ([1., 2., 3.], [3., 7., 8., 9.]), {}), ("leslie", ([0.1, 2., 1., 0.1], [0.2, 0.8, 0.7]), {}),
    ("hilbert", (5,), {}), ("invhilbert", (6,), {}), ("pascal", (6,), {}), ("pascal", (5,), {"kind": "lower"}),
    ("pascal", (5,), {"kind": "upper"}), ("invpascal", (6,), {}), ("invpascal", (5,), {"kind": "upper"}),
    ("helmert", (5,), {}), ("helmert", (5,), {"full": True}), ("hadamard", (8,), {}), ("dft", (5,), {}),
    ("dft", (4,), {"scale": "sqrtn"}), ("dft", (6,), {"scale": "n"}),
    ("convolution_matrix", ([1., 2., 3.], 5), {}), ("convolution_matrix", ([1., 2., 3., 4.], 3), {"mode": "same"}),
    ("convolution_matrix", ([1., 2., 3., 4.], 6), {"mode": "valid"}),
    ("convolution_matrix", ([1., 2., 3., 4., 5.], 2), {"mode": "same"}),
])
def test_special_matrices_match_scipy(name, args, kwargs):
    close(getattr(kl, name)(*args, **kwargs), getattr(sl, name)(*args, **kwargs))


def test_hadamard_is_integer_and_rejects_non_powers_of_two():
    assert jnp.asarray(kl.hadamard(4)).dtype.kind == "i"
    with pytest.raises(ValueError):
        kl.hadamard(6)


@pytest.mark.parametrize("complex_", [False, True])
def test_hessenberg_matches_scipy(complex_):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 6)) + (1j * rng.standard_normal((6, 6)) if complex_ else 0)
    h, q = kl.hessenberg(a, calc_q=True)
    hs, qs = sl.hessenberg(a, calc_q=True)
    close(h, hs, 1e-8)
    close(q, qs, 1e-8)
    close(np.asarray(q) @ np.asarray(h) @ np.asarray(q).conj().T, a, 1e-9)
    close(kl.hessenberg(a), hs, 1e-8)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4)])
@pytest.mark.parametrize("mode,conjugate", [("left", False), ("right", False), ("right", True)])
def test_qr_multiply_matches_scipy(shape, mode, conjugate):
    rng = np.random.default_rng(1)
    a = rng.standard_normal(shape)
    k = min(shape)
    c = rng.standard_normal((k, 2) if mode == "left" else (2, shape[0]))
    out, r = kl.qr_multiply(a, c, mode=mode, conjugate=conjugate)
    outs, rs = sl.qr_multiply(a, c, mode=mode, conjugate=conjugate)
    close(out, outs)
    close(r, rs)
    vec = c[:, 0] if mode == "left" else c[0]
    close(kl.qr_multiply(a, vec, mode=mode)[0], sl.qr_multiply(a, vec, mode=mode)[0])


def test_rsf2csf_matches_scipy():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, 6))
    t, z = sl.schur(a)
    tc, zc = kl.rsf2csf(t, z)
    ts, zs = sl.rsf2csf(t, z)
    close(tc, ts, 1e-9)
    close(zc, zs, 1e-9)
    assert np.allclose(np.tril(np.asarray(tc), -1), 0)


@pytest.mark.parametrize("method", ["schur", "eigen"])
@pytest.mark.parametrize("complex_", [False, True])
def test_solve_sylvester_matches_scipy(method, complex_):
    rng = np.random.default_rng(3)
    cx = (lambda s: 1j * rng.standard_normal(s)) if complex_ else (lambda s: 0)
    a = rng.standard_normal((4, 4)) + cx((4, 4))
    b = rng.standard_normal((3, 3)) + cx((3, 3))
    c = rng.standard_normal((4, 3)) + cx((4, 3))
    x = kl.solve_sylvester(a, b, c, method=method)
    close(x, sl.solve_sylvester(a, b, c), 1e-8)
    assert np.iscomplexobj(np.asarray(x)) == complex_


def test_solve_sylvester_is_nan_without_a_unique_solution():
    a = np.diag([1., 2.])
    assert np.isnan(np.asarray(kl.solve_sylvester(a, -a, np.ones((2, 2))))).all()


@pytest.mark.parametrize("func,ref", [(jnp.exp, sl.expm), (jnp.sin, sl.sinm), (jnp.cos, sl.cosm)])
def test_funm_matches_scipy(func, ref):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((5, 5)) / 2
    close(kl.funm(a, func), ref(a), 1e-8)


def test_funm_rejects_disp_false():
    with pytest.raises(NotImplementedError):
        kl.funm(np.eye(2), jnp.exp, disp=False)


def test_eigh_tridiagonal_matches_scipy():
    rng = np.random.default_rng(5)
    d, e = rng.standard_normal(6), rng.standard_normal(5)
    close(kl.eigh_tridiagonal(d, e, eigvals_only=True), sl.eigh_tridiagonal(d, e, eigvals_only=True))
    w, v = kl.eigh_tridiagonal(d, e)
    t = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
    close(t @ np.asarray(v), np.asarray(v) * np.asarray(w), 1e-9)
    close(kl.eigh_tridiagonal(d, e, eigvals_only=True, select="i", select_range=(1, 3)),
          sl.eigh_tridiagonal(d, e, eigvals_only=True, select="i", select_range=(1, 3)))
    with pytest.raises(NotImplementedError):
        kl.eigh_tridiagonal(d, e, eigvals_only=True, select="v", select_range=(0., 1.))


def test_tensorinv_and_tensorsolve_match_numpy():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((4, 6, 8, 3))
    close(jnp.linalg.tensorinv(a, ind=2), np.linalg.tensorinv(a, ind=2))
    a, b = rng.standard_normal((2, 3, 6, 2, 3, 6)), rng.standard_normal((2, 3, 6))
    close(jnp.linalg.tensorsolve(a, b), np.linalg.tensorsolve(a, b), 1e-8)
    a = rng.standard_normal((6, 2, 3, 6, 2, 3))
    close(jnp.linalg.tensorsolve(a, b, axes=(0,)), np.linalg.tensorsolve(a, b, axes=(0,)), 1e-8)
