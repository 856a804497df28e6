"""kiln.scipy.linalg against SciPy in float64 (issue 13, item 4): solve_triangular, cholesky,
cho_factor/cho_solve, lu, lu_factor/lu_solve, qr, svd, eigh, inv, det, solve, expm, block_diag,
toeplitz; gradients against finite differences, vmap against loops, jit against eager."""
import numpy as np
import pytest
import scipy.linalg as sl

import kiln
import kiln.numpy as jnp
import kiln.scipy.linalg as kl


def _rng(seed):
    return np.random.default_rng(seed)


def _spd(rng, n):
    a = rng.standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


def _close(got, want, tol=1e-10):
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol)


def _fd_grad(f, a, eps=1e-6):
    g = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        d = np.zeros_like(a)
        d[idx] = eps
        g[idx] = (f(a + d) - f(a - d)) / (2 * eps)
    return g


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("trans", [0, 1, "T"])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular(x64, lower, trans, unit):
    rng = _rng(1)
    a = rng.standard_normal((6, 6)) + 4 * np.eye(6)
    a = np.tril(a) if lower else np.triu(a)
    b = rng.standard_normal((6, 3))
    _close(kl.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit),
           sl.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit))
    _close(kl.solve_triangular(a, b[:, 0], trans=trans, lower=lower, unit_diagonal=unit),
           sl.solve_triangular(a, b[:, 0], trans=trans, lower=lower, unit_diagonal=unit))


def test_factorizations_and_solves(x64):
    rng = _rng(2)
    a, b, spd = rng.standard_normal((5, 5)), rng.standard_normal((5, 2)), _spd(rng, 5)
    for lower in (False, True):
        _close(kl.cholesky(spd, lower=lower), sl.cholesky(spd, lower=lower))
        c, low = kl.cho_factor(spd, lower=lower)
        assert low == lower
        _close(kl.cho_solve((c, low), b), sl.cho_solve(sl.cho_factor(spd, lower=lower), b))
    for got, want in zip(kl.lu(a), sl.lu(a)):
        _close(got, want)
    for got, want in zip(kl.lu(a, permute_l=True), sl.lu(a, permute_l=True)):
        _close(got, want)
    for got, want in zip(kl.lu(a[:, :3]), sl.lu(a[:, :3])):  # a tall one
        _close(got, want)
    lu_, piv = kl.lu_factor(a)
    LU, PIV = sl.lu_factor(a)
    _close(lu_, LU)
    np.testing.assert_array_equal(np.asarray(piv), PIV)
    for trans in (0, 1):
        _close(kl.lu_solve((lu_, piv), b, trans=trans), sl.lu_solve((LU, PIV), b, trans=trans))
        _close(kl.lu_solve((lu_, piv), b[:, 1], trans=trans), sl.lu_solve((LU, PIV), b[:, 1], trans=trans))
    q, r = kl.qr(a[:, :3])
    _close(np.asarray(q) @ np.asarray(r), a[:, :3])
    assert q.shape == (5, 5) and kl.qr(a[:, :3], mode="economic")[0].shape == (5, 3)
    _close(np.abs(kl.qr(a, mode="r")[0]), np.abs(sl.qr(a, mode="r")[0]))
    _close(kl.svd(a, compute_uv=False), sl.svd(a, compute_uv=False))
    _close(kl.eigh(spd, eigvals_only=True), sl.eigh(spd, eigvals_only=True))
    w, v = kl.eigh(spd)
    _close(np.asarray(v) @ np.diag(np.asarray(w)) @ np.asarray(v).T, spd, 1e-9)
    _close(kl.inv(a), sl.inv(a), 1e-9)
    _close(kl.det(a), sl.det(a), 1e-9)
    for assume in ("gen", "sym", "pos"):
        m = spd if assume != "gen" else a
        _close(kl.solve(m, b, assume_a=assume), sl.solve(m, b, assume_a=assume), 1e-9)


@pytest.mark.parametrize("scale", [0.01, 1.0, 30.0])
def test_expm(x64, scale):
    a = _rng(3).standard_normal((6, 6)) * scale / 2
    want = sl.expm(a)
    np.testing.assert_allclose(np.asarray(kl.expm(a)), want, rtol=1e-12 if scale < 10 else 1e-9,
                               atol=1e-12 * np.abs(want).max())
    np.testing.assert_allclose(np.asarray(kiln.jit(kl.expm)(a)), want, rtol=1e-9, atol=1e-12 * np.abs(want).max())
    _close(kl.expm(np.zeros((3, 3))), np.eye(3))


def test_expm_in_float32_and_batched():
    a = (_rng(4).standard_normal((3, 4, 4)) * 0.7).astype(np.float32)
    got = kiln.vmap(kl.expm)(a)
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), np.stack([sl.expm(m.astype(np.float64)) for m in a]), rtol=2e-5,
                               atol=2e-5)
    np.testing.assert_allclose(np.asarray(kl.expm(a)), np.asarray(got), rtol=1e-5, atol=1e-6)


def test_gradients_against_finite_differences(x64):
    rng = _rng(5)
    a = rng.standard_normal((4, 4)) + 3 * np.eye(4)
    b = rng.standard_normal((4, 2))
    m = rng.standard_normal((4, 4)) * 0.6
    lower = np.tril(np.ones((4, 4)))  # solve_triangular reads only a's lower triangle
    cases = [  # (kiln function, the same in SciPy, the point, which entries count)
        (lambda a: kl.expm(a).sum(), lambda a: sl.expm(a).sum(), m, 1.0),
        (lambda a: (kl.solve_triangular(a, b, lower=True) ** 2).sum(),
         lambda a: (sl.solve_triangular(np.tril(a), b, lower=True) ** 2).sum(), np.tril(a), lower),
        (lambda s: (kl.cho_solve(kl.cho_factor(s @ s.T + 4 * jnp.eye(4)), b) ** 2).sum(),
         lambda s: (sl.cho_solve(sl.cho_factor(s @ s.T + 4 * np.eye(4)), b) ** 2).sum(), a, 1.0),
        (lambda a: (kl.lu_solve(kl.lu_factor(a), b) ** 2).sum(), lambda a: (sl.solve(a, b) ** 2).sum(), a, 1.0),
        (lambda a: kl.det(a), lambda a: sl.det(a), a, 1.0),
    ]
    for f, ref, x, mask in cases:
        g = np.asarray(kiln.grad(f)(x)) * mask
        num = _fd_grad(ref, x) * mask
        np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-6 * max(1.0, np.abs(num).max()))


def test_vmap_matches_a_loop(x64):
    rng = _rng(6)
    a = np.tril(rng.standard_normal((3, 5, 5))) + 3 * np.eye(5)
    b = rng.standard_normal((3, 5, 2))
    got = kiln.vmap(lambda a, b: kl.solve_triangular(a, b, lower=True))(a, b)
    _close(got, np.stack([sl.solve_triangular(a[i], b[i], lower=True) for i in range(3)]))
    spd = np.stack([_spd(rng, 4) for _ in range(3)])
    got = kiln.vmap(lambda s: kl.cho_solve(kl.cho_factor(s), jnp.ones(4)))(spd)
    _close(got, np.stack([sl.cho_solve(sl.cho_factor(s), np.ones(4)) for s in spd]), 1e-9)


def test_block_diag_and_toeplitz():
    _close(kl.block_diag(np.ones((2, 2)), [3, 4], 5, np.arange(6).reshape(3, 2)),
           sl.block_diag(np.ones((2, 2)), [3, 4], 5, np.arange(6).reshape(3, 2)))
    _close(kl.toeplitz([1, 2, 3], [1, 4, 5, 6]), sl.toeplitz([1, 2, 3], [1, 4, 5, 6]))
    _close(kl.toeplitz([1.5, 2.0, -3.0]), sl.toeplitz([1.5, 2.0, -3.0]))
    assert kl.block_diag().shape == (1, 0)


def test_errors_name_the_function_and_the_fix():
    with pytest.raises(ValueError, match="solve_triangular: expected a square matrix"):
        kl.solve_triangular(np.ones((2, 3)), np.ones(2))
    with pytest.raises(ValueError, match="trans must be"):
        kl.solve_triangular(np.eye(2), np.ones(2), trans=5)
    with pytest.raises(ValueError, match="schur: output"):
        kl.schur(np.eye(2), output="upper")
    with pytest.raises(NotImplementedError, match="blocked"):
        kl.sqrtm(np.eye(2), blocksize=2)
    with pytest.raises(NotImplementedError, match="schur"):
        kiln.grad(lambda a: jnp.sum(kl.schur(a)[0]))(np.eye(2))
    with pytest.raises(NotImplementedError, match="generalized"):
        kl.eigh(np.eye(2), np.eye(2))
    with pytest.raises(ValueError, match="assume_a"):
        kl.solve(np.eye(2), np.ones(2), assume_a="banded")


def test_expm_frechet_and_polar(x64):
    rng = _rng(7)
    a, e = rng.standard_normal((4, 4)) * 0.5, rng.standard_normal((4, 4))
    got_e, got_l = kl.expm_frechet(a, e)
    want_e, want_l = sl.expm_frechet(a, e)
    _close(got_e, want_e, 1e-10)
    _close(got_l, want_l, 1e-9)
    for side in ("right", "left"):
        u, p = kl.polar(a, side)
        U, P = sl.polar(a, side)
        _close(u, U, 1e-10)
        _close(p, P, 1e-10)
    u, p = kl.polar(rng.standard_normal((5, 3)))  # a tall one
    U, P = sl.polar(np.asarray(rng.standard_normal((5, 3))))
    assert u.shape == U.shape and p.shape == P.shape


def _cplx(rng, shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def test_schur_real_and_complex(x64):
    rng = np.random.default_rng()
    a = rng.standard_normal((5, 5))
    t, z = (np.asarray(v) for v in kl.schur(a))
    assert t.dtype == np.float64 and z.dtype == np.float64
    _close(z @ t @ z.T, a, 1e-10)
    _close(z.T @ z, np.eye(5), 1e-10)
    assert np.all(np.abs(np.tril(t, -2)) < 1e-12)  # quasi-triangular: 2x2 blocks at most
    tc, zc = (np.asarray(v) for v in kl.schur(a, output="complex"))
    assert tc.dtype == np.complex128
    _close(zc @ tc @ zc.conj().T, a, 1e-10)
    assert np.all(np.abs(np.tril(tc, -1)) < 1e-12)
    got, want = np.diag(tc), np.linalg.eigvals(a)
    assert max(np.abs(want - g).min() for g in got) < 1e-9  # the same spectrum (order aside)
    c = _cplx(rng, (3, 4, 4))
    tb, zb = (np.asarray(v) for v in kiln.vmap(kl.schur)(c))
    _close(zb @ tb @ np.conj(np.swapaxes(zb, -1, -2)), c, 1e-10)


def test_sqrtm(x64):
    rng = np.random.default_rng()
    a = rng.standard_normal((6, 6))
    while any(abs(w.imag) < 1e-8 and w.real < 0 for w in np.linalg.eigvals(a)):
        # a negative real eigenvalue sits on the principal root's branch cut: its root's sign
        # follows the rounding of the Schur form's zero imaginary part (either library may flip)
        a = rng.standard_normal((6, 6))
    r = np.asarray(kl.sqrtm(a))
    assert r.dtype == np.complex128  # always complex, as JAX
    _close(r @ r, a, 1e-8)
    _close(r, sl.sqrtm(a.astype(np.complex128)), 1e-8)
    spd = _spd(rng, 4)
    _close(np.asarray(kl.sqrtm(spd)).real, sl.sqrtm(spd).real, 1e-9)
    c = _cplx(rng, (5, 5))
    rc = np.asarray(kiln.jit(kl.sqrtm)(c))
    _close(rc @ rc, c, 1e-8)
    _close(np.asarray(kl.sqrtm(np.array([[4.0]]))), [[2.0]])


def test_complex_solvers(x64):
    rng = np.random.default_rng()
    a = _cplx(rng, (4, 4)) + 3 * np.eye(4)
    b = _cplx(rng, (4, 2))
    h = a @ a.conj().T + np.eye(4)
    for trans in (0, 1, 2):
        _close(kl.solve_triangular(np.triu(a), b, trans=trans),
               sl.solve_triangular(np.triu(a), b, trans=trans), 1e-10)
    _close(kl.cholesky(h), sl.cholesky(h), 1e-10)
    _close(kl.cholesky(h, lower=True), sl.cholesky(h, lower=True), 1e-10)
    for lower in (False, True):
        _close(kl.cho_solve(kl.cho_factor(h, lower=lower), b), sl.cho_solve(sl.cho_factor(h, lower=lower), b), 1e-9)
    lu_piv = kl.lu_factor(a)
    for trans in (0, 1, 2):
        _close(kl.lu_solve(lu_piv, b, trans=trans), sl.lu_solve(sl.lu_factor(a), b, trans=trans), 1e-9)
    _close(kl.solve(a, b), sl.solve(a, b), 1e-10)
    _close(kl.solve(h, b, assume_a="pos"), sl.solve(h, b, assume_a="pos"), 1e-9)
    _close(kl.expm(a * 0.3), sl.expm(a * 0.3), 1e-9)
    u, p = kl.polar(a)
    u2, p2 = sl.polar(a)
    _close(u, u2, 1e-9)
    _close(p, p2, 1e-9)
    w, v = kl.eigh(h)
    _close(w, sl.eigh(h)[0], 1e-9)
    _close(kl.det(a), sl.det(a), 1e-9)
    _close(kl.inv(a), sl.inv(a), 1e-9)
