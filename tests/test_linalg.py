"""kiln.numpy products (dot, matmul, einsum, ...) and kiln.numpy.linalg against NumPy in
float64 on fresh random inputs, batched where NumPy batches, with the errors for
wrong-rank, non-square and mismatched inputs."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp


# (the x64 fixture is in conftest.py)


def _check(got, exp, tol=1e-9):
    if isinstance(exp, (list, tuple)):
        assert len(got) == len(exp)
        for g, e in zip(got, exp):
            _check(g, e, tol)
        return
    g = np.asarray(got)
    assert g.shape == np.shape(exp), (g.shape, np.shape(exp))
    np.testing.assert_allclose(g, exp, rtol=tol, atol=tol)


def _r(*shape):
    return np.random.default_rng().normal(size=shape)


def _spd(*batch_n):
    a = _r(*batch_n, batch_n[-1])
    return a @ np.swapaxes(a, -1, -2) + batch_n[-1] * np.eye(batch_n[-1])


# (id, f(m, *arrays) for m in (kiln.numpy, numpy), input shapes)
PRODUCTS = [
    ("dot_vv", lambda m, a, b: m.dot(a, b), [(4,), (4,)]),
    ("dot_mv", lambda m, a, b: m.dot(a, b), [(2, 3, 4), (4,)]),
    ("dot_nd", lambda m, a, b: m.dot(a, b), [(2, 3, 4), (5, 4, 2)]),
    ("dot_scalar", lambda m, a, b: m.dot(a, b), [(), (2, 3)]),
    *[(f"matmul_{s1}_{s2}", lambda m, a, b: m.matmul(a, b), [s1, s2]) for s1, s2 in [
        ((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((5, 2, 3), (3, 4)), ((2, 3), (5, 3, 4)),
        ((6, 1, 2, 3), (5, 3, 4)), ((4,), (2, 4, 3)), ((2, 1, 3, 4), (4,))]],
    ("vdot", lambda m, a, b: m.vdot(a, b), [(2, 3), (6,)]),
    ("inner", lambda m, a, b: m.inner(a, b), [(2, 3, 4), (5, 4)]),
    ("outer", lambda m, a, b: m.outer(a, b), [(2, 3), (4,)]),
    ("tensordot_int", lambda m, a, b: m.tensordot(a, b), [(2, 3, 4), (3, 4, 5)]),
    ("tensordot_0", lambda m, a, b: m.tensordot(a, b, 0), [(2, 3), (4,)]),
    ("tensordot_pairs", lambda m, a, b: m.tensordot(a, b, ([0, 2], [2, 1])), [(2, 3, 4), (5, 4, 2)]),
    ("kron", lambda m, a, b: m.kron(a, b), [(2, 3), (4, 1, 2)]),
    ("cross3", lambda m, a, b: m.cross(a, b), [(5, 3), (5, 3)]),
    ("cross_axes", lambda m, a, b: m.cross(a, b, axisa=0, axisb=-1, axisc=0), [(3, 4), (4, 3)]),
    ("cross_bcast", lambda m, a, b: m.cross(a, b), [(2, 1, 3), (4, 3)]),
]

EINSUM = [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ii->i", [(3, 3)]), ("ii", [(3, 3)]), ("ij->", [(2, 3)]),
    ("ij", [(2, 3)]), ("ba", [(2, 3)]), ("bij,bjk->bik", [(5, 2, 3), (5, 3, 4)]),
    ("...ij,...jk", [(5, 2, 3), (3, 4)]), ("i,i", [(3,), (3,)]), ("i,j", [(3,), (4,)]),
    ("ijk,kl,lm->im", [(2, 3, 4), (4, 5), (5, 6)]), ("iij->j", [(3, 3, 4)]),
    ("ab,bc,cd,de->ae", [(2, 3), (3, 4), (4, 5), (5, 6)]), ("ij,ij->ij", [(2, 1), (2, 3)]),
    ("...i->...", [(2, 3, 4)]), ("ijij->ij", [(2, 3, 2, 3)]), ("i...->...", [(3, 2, 4)]),
    ("ij,kl->ijkl", [(2, 3), (4, 5)]), ("ij,jk,ki->", [(2, 3), (3, 4), (4, 2)]),
    (" i j , j k -> k i ", [(2, 3), (3, 4)]), ("a...b,b...->a...", [(2, 5, 3), (3, 5)]),
    ("bn,anm,bm->ba", [(4, 5), (3, 5, 6), (4, 6)]), ("i,->i", [(3,), ()]),
]


def _run(fn, shapes, tol=1e-9):
    args = [_r(*s) for s in shapes]
    _check(fn(jnp, *[jnp.asarray(a) for a in args]), fn(np, *args), tol)


@pytest.mark.parametrize("name,fn,shapes", PRODUCTS, ids=[c[0] for c in PRODUCTS])
def test_products(x64, name, fn, shapes):
    _run(fn, shapes)


@pytest.mark.parametrize("spec,shapes", EINSUM, ids=[e[0] for e in EINSUM])
def test_einsum(x64, spec, shapes):
    _run(lambda m, *ops: m.einsum(spec, *ops), shapes)


@pytest.mark.parametrize("spec,shapes", [
    ("mk,kn->mn", ((301, 96), (96, 200))),           # one product: row blocks on the CPU pool
    ("km,kn->mn", ((96, 301), (96, 200))),           # transposed left operand
    ("mk,nk->mn", ((301, 96), (200, 96))),           # transposed right operand
    ("km,nk->mn", ((64, 133), (150, 64))),
    ("mk,kn->mn", ((100, 96), (96, 300))),           # wider than tall: column blocks
    ("mk,nk->mn", ((100, 96), (300, 96))),
    ("km,kn->mn", ((96, 70), (96, 333))),
    ("bmk,bkn->bmn", ((3, 150, 64), (3, 64, 120))),  # batch elements on the pool
    ("bkm,bnk->bmn", ((2, 64, 150), (2, 120, 64))),
    ("mk,bkn->bmn", ((150, 64), (5, 64, 100))),      # a shared left operand
])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_medium_products_split_over_threads_match_numpy(x64, spec, shapes, dtype):
    # products of 2M to 512M multiply-adds run on kiln's CPU pool, a single-threaded BLAS per part
    rng = np.random.default_rng(11)
    ops = [rng.standard_normal(s).astype(dtype) for s in shapes]
    got = np.asarray(kiln.jit(lambda a, b: jnp.einsum(spec, a, b))(*ops))
    want = np.einsum(spec, *(o.astype(np.float64) for o in ops))
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_einsum_sublist_format_and_kwargs(x64):
    a, b = _r(3, 4), _r(4, 5)
    _check(jnp.einsum(jnp.asarray(a), [0, 1], jnp.asarray(b), [1, 2], [2, 0]),
           np.einsum(a, [0, 1], b, [1, 2], [2, 0]))
    out = jnp.einsum("ij,jk", jnp.asarray(a), jnp.asarray(b), optimize="greedy",
                     precision=kiln.lax.Precision.HIGHEST)
    _check(out, a @ b)


def test_preferred_element_type():
    a = jnp.asarray(np.arange(6, dtype=np.int8).reshape(2, 3))
    b = jnp.asarray(np.arange(6, dtype=np.int8).reshape(3, 2))
    for out in (jnp.matmul(a, b, preferred_element_type=np.int32),
                jnp.dot(a, b, preferred_element_type=np.int32),
                jnp.einsum("ij,jk->ik", a, b, preferred_element_type=np.int32)):
        assert out.dtype == np.int32
        np.testing.assert_array_equal(np.asarray(out), np.asarray(a).astype(np.int32) @ np.asarray(b))


def test_product_dtypes():
    a = jnp.asarray(np.ones((2, 3), np.float32))
    b = jnp.asarray(np.ones((3,), np.int32))
    assert jnp.matmul(a, b).dtype == np.float32
    assert jnp.dot(b, b).dtype == np.int32
    assert jnp.einsum("i,i", b, b).dtype == np.int32


LA = jnp.linalg
LINALG = [
    ("solve_vec", lambda L, a, b: L.solve(a, b), [(4, 4), (4,)]),
    ("solve_mat", lambda L, a, b: L.solve(a, b), [(4, 4), (4, 2)]),
    ("solve_batched", lambda L, a, b: L.solve(a, b), [(3, 4, 4), (3, 4, 2)]),
    ("solve_bcast", lambda L, a, b: L.solve(a, b), [(2, 1, 4, 4), (3, 4, 1)]),
    ("solve_batched_vec", lambda L, a, b: L.solve(a, b), [(3, 4, 4), (4,)]),
    ("inv", lambda L, a: L.inv(a), [(2, 3, 5, 5)]),
    ("det", lambda L, a: L.det(a), [(3, 4, 4)]),
    ("det_1x1", lambda L, a: L.det(a), [(1, 1)]),
    ("slogdet", lambda L, a: tuple(L.slogdet(a)), [(3, 5, 5)]),
    ("svdvals", lambda L, a: L.svd(a, compute_uv=False), [(2, 5, 3)]),
    ("eigvalsh", lambda L, a: L.eigvalsh(a + np.swapaxes(a, -1, -2)), [(2, 4, 4)]),
    ("pinv", lambda L, a: L.pinv(a), [(2, 5, 3)]),
    ("pinv_wide", lambda L, a: L.pinv(a), [(3, 6)]),
    ("matrix_rank", lambda L, a: L.matrix_rank(a), [(2, 5, 3)]),
    ("cond", lambda L, a: L.cond(a), [(3, 4, 4)]),
    ("cond_fro", lambda L, a: L.cond(a, "fro"), [(4, 4)]),
    ("cond_inf", lambda L, a: L.cond(a, np.inf), [(4, 4)]),
    ("matrix_power_3", lambda L, a: L.matrix_power(a, 3), [(2, 3, 3)]),
    ("matrix_power_0", lambda L, a: L.matrix_power(a, 0), [(3, 3)]),
    ("matrix_power_-2", lambda L, a: L.matrix_power(a, -2), [(3, 3)]),
    ("multi_dot", lambda L, a, b, c: L.multi_dot([a, b, c]), [(3,), (3, 4), (4, 2)]),
    *[(f"vnorm_{o}", (lambda o: lambda L, x: L.norm(x, o, axis=-1))(o), [(3, 5)])
      for o in (None, 1, 2, np.inf, -np.inf, 0, 3, -1.5, 0.5)],
    *[(f"vnorm1d_{o}", (lambda o: lambda L, x: L.norm(x, o))(o), [(5,)])
      for o in (None, 1, 2, np.inf, -np.inf)],
    *[(f"mnorm_{o}", (lambda o: lambda L, x: L.norm(x, o, axis=(2, 0)))(o), [(3, 4, 5)])
      for o in (None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf)],
    *[(f"mnorm_keep_{o}", (lambda o: lambda L, x: L.norm(x, o, axis=(0, 1), keepdims=True))(o),
       [(3, 4, 2)]) for o in ("fro", "nuc", 1, np.inf, -2)],
    ("norm_all", lambda L, x: L.norm(x), [(2, 3, 4)]),
    ("norm_all_keep", lambda L, x: L.norm(x, keepdims=True), [(2, 3)]),
    ("norm_mat_default", lambda L, x: L.norm(x, 1), [(3, 4)]),
]


@pytest.mark.parametrize("name,fn,shapes", LINALG, ids=[c[0] for c in LINALG])
def test_linalg(x64, name, fn, shapes):
    args = [_r(*s) for s in shapes]
    _check(fn(LA, *[jnp.asarray(a) for a in args]), fn(np.linalg, *args), 1e-8)


def test_matrix_rank_deficient(x64):
    a = _r(6, 2) @ _r(2, 5)
    assert int(LA.matrix_rank(jnp.asarray(a))) == 2
    assert int(LA.matrix_rank(jnp.asarray(np.zeros(3)))) == 0


def test_det_singular_and_sign(x64):
    a = _r(4, 4)
    a[3] = a[0] + a[1]
    assert abs(float(LA.det(jnp.asarray(a)))) < 1e-10
    p = np.eye(4)[[1, 0, 3, 2, ]][[0, 2, 1, 3]]  # odd permutation: det -1
    _check(LA.det(jnp.asarray(p)), np.linalg.det(p))
    sign, logdet = LA.slogdet(jnp.asarray(np.diag([2.0, -3.0, 0.5])))
    _check((sign, logdet), (-1.0, np.log(3.0)))


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(x64, upper):
    a = _spd(2, 4)
    _check(LA.cholesky(jnp.asarray(a), upper=upper), np.linalg.cholesky(a, upper=upper))


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr(x64, shape, mode):
    a = _r(*shape)
    got = LA.qr(jnp.asarray(a), mode=mode)
    exp = np.linalg.qr(a, mode=mode)
    if mode == "r":
        _check(np.abs(np.asarray(got)), np.abs(exp))
        return
    q, r = (np.asarray(t) for t in got)
    assert q.shape == exp[0].shape and r.shape == exp[1].shape
    _check(q @ r, a)
    _check(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(q.shape[-1]), q.shape[:-2] + (q.shape[-1],) * 2))
    _check(np.abs(r), np.abs(exp[1]))


@pytest.mark.parametrize("full", [True, False])
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
def test_svd(x64, shape, full):
    a = _r(*shape)
    u, s, vh = (np.asarray(t) for t in LA.svd(jnp.asarray(a), full_matrices=full))
    eu, es, evh = np.linalg.svd(a, full_matrices=full)
    assert (u.shape, s.shape, vh.shape) == (eu.shape, es.shape, evh.shape)
    _check(s, es)
    k = s.shape[-1]
    _check((u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :], a)


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh(x64, uplo):
    a = _r(2, 5, 5)
    a = a + np.swapaxes(a, -1, -2)
    w, v = LA.eigh(jnp.asarray(a), UPLO=uplo)
    ew, ev = np.linalg.eigh(a, UPLO=uplo)
    _check(w, ew)
    v = np.asarray(v)
    _check(np.abs(np.einsum("...ij,...ij->...j", v, ev)), np.ones((2, 5)))  # same vectors up to sign


@pytest.mark.parametrize("bshape", [(8,), (8, 3)])
def test_lstsq(x64, bshape):
    a, b = _r(8, 4), _r(*bshape)
    x, resid, rank, s = LA.lstsq(jnp.asarray(a), jnp.asarray(b))
    ex, eresid, erank, es = np.linalg.lstsq(a, b)
    _check((x, resid, s), (ex, eresid, es))
    assert int(rank) == erank
    x, resid, rank, s = LA.lstsq(jnp.asarray(a[:3]), jnp.asarray(b[:3]), numpy_resid=True)
    ex, eresid, erank, es = np.linalg.lstsq(a[:3], b[:3])
    _check((x, resid, s), (ex, eresid, es))


def test_linalg_float32_default():
    a = jnp.asarray(_spd(3).astype(np.float32))
    assert LA.inv(a).dtype == np.float32
    assert LA.det(jnp.asarray(np.eye(3, dtype=np.int32))).dtype == np.float32
    np.testing.assert_allclose(np.asarray(LA.inv(a)), np.linalg.inv(np.asarray(a)), rtol=1e-4, atol=1e-5)


ERRORS = [
    (lambda: jnp.matmul(jnp.asarray(1.0), jnp.asarray(np.ones(3))), ValueError, "dimensions"),
    (lambda: jnp.matmul(jnp.asarray(np.ones((2, 3))), jnp.asarray(np.ones((4, 2)))), TypeError, r"\(2, 3\).*\(4, 2\)"),
    (lambda: jnp.matmul(jnp.asarray(np.ones((2, 2, 3))), jnp.asarray(np.ones((3, 3, 2)))), ValueError, "broadcast"),
    (lambda: jnp.dot(jnp.asarray(np.ones((2, 3))), jnp.asarray(np.ones(4))), ValueError, "not aligned"),
    (lambda: jnp.tensordot(jnp.asarray(np.ones((2, 3))), jnp.asarray(np.ones((2, 3))), 1), ValueError, "mismatch"),
    (lambda: jnp.einsum("ij,jk->ik", jnp.asarray(np.ones((2, 3))), jnp.asarray(np.ones((4, 2)))), ValueError, "label 'j'"),
    (lambda: jnp.einsum("ij,jk", jnp.asarray(np.ones((2, 3)))), ValueError, "operands"),
    (lambda: jnp.einsum("ijk", jnp.asarray(np.ones((2, 3)))), ValueError, "'ijk'"),
    (lambda: jnp.einsum("ij->iz", jnp.asarray(np.ones((2, 3)))), ValueError, "'z'"),
    (lambda: jnp.einsum("i.j", jnp.asarray(np.ones((2, 3)))), ValueError, "invalid subscript"),
    (lambda: jnp.cross(jnp.asarray(np.ones(4)), jnp.asarray(np.ones(4))), ValueError, "2 or 3"),
    (lambda: LA.solve(jnp.asarray(np.ones((3, 4))), jnp.asarray(np.ones(3))), ValueError, r"square.*\(3, 4\)"),
    (lambda: LA.solve(jnp.asarray(np.eye(3)), jnp.asarray(np.ones(4))), ValueError, "does not match"),
    (lambda: LA.inv(jnp.asarray(np.ones(3))), ValueError, "two-dimensional"),
    (lambda: LA.det(jnp.asarray(np.ones((2, 3)))), ValueError, "square"),
    (lambda: LA.cholesky(jnp.asarray(np.ones((2, 3)))), ValueError, "square"),
    (lambda: LA.eigh(jnp.asarray(np.ones((3,)))), ValueError, "two-dimensional"),
    (lambda: LA.eigh(jnp.asarray(np.eye(3)), UPLO="X"), ValueError, "UPLO"),
    (lambda: LA.qr(jnp.asarray(np.eye(3)), mode="bad"), ValueError, "mode"),
    (lambda: LA.lstsq(jnp.asarray(np.ones((3, 2))), jnp.asarray(np.ones(4))), ValueError, r"\(3, 2\)"),
    (lambda: LA.norm(jnp.asarray(np.ones((2, 2, 2))), 2), ValueError, "number of axes"),
    (lambda: LA.norm(jnp.asarray(np.ones((2, 2))), "fro", axis=0), ValueError, "vectors"),
    (lambda: LA.norm(jnp.asarray(np.ones((2, 2))), 3), ValueError, "matrices"),
    (lambda: LA.matrix_power(jnp.asarray(np.ones((2, 3))), 2), ValueError, "square"),
]


@pytest.mark.parametrize("fn,exc,match", ERRORS)
def test_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()


@pytest.mark.parametrize("shape,dt", [((5, 3), np.float64), ((3, 5), np.float32), ((4, 4), np.complex128),
                                      ((2, 6, 4), np.float32)])
def test_qr_raw_ormqr_and_householder_product(shape, dt):
    """Issue 33 (lineax's QR solver): qr(mode='raw') is LAPACK's geqrf form as NumPy gives it
    (h transposed, taus), and lax.linalg.ormqr / householder_product apply and form its Q."""
    rng = np.random.default_rng()
    a = rng.standard_normal(shape)
    if np.dtype(dt).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    a = a.astype(dt)
    h, taus = jnp.linalg.qr(a, mode="raw")
    single = h.dtype in (np.float32, np.complex64)  # (float64 is float32 unless x64 is on)
    tol = dict(rtol=2e-4, atol=2e-5) if single else dict(rtol=1e-10, atol=1e-12)
    dt = h.dtype
    for idx in np.ndindex(shape[:-2]):
        want_h, want_t = np.linalg.qr(a[idx].astype(np.complex128 if np.dtype(dt).kind == "c" else np.float64),
                                      mode="raw")
        np.testing.assert_allclose(np.asarray(h)[idx], want_h, **tol)
        np.testing.assert_allclose(np.asarray(taus)[idx], want_t, **tol)
    from kiln.lax import linalg as ll
    hf = jnp.swapaxes(h, -1, -2)  # LAPACK's order
    m, n = shape[-2:]
    q_full = np.asarray(ll.ormqr(hf, taus, jnp.broadcast_to(jnp.eye(m, dtype=dt), shape[:-2] + (m, m))))
    k = min(m, n)
    r = np.triu(np.asarray(hf))[..., :k, :]
    np.testing.assert_allclose(q_full[..., :, :k] @ r, a, **tol)  # Q R = A
    eye = np.broadcast_to(np.eye(m), shape[:-2] + (m, m))
    np.testing.assert_allclose(np.conj(np.swapaxes(q_full, -1, -2)) @ q_full, eye, **tol)  # unitary
    c = rng.standard_normal(shape[:-2] + (m, 3)).astype(dt)
    np.testing.assert_allclose(np.asarray(ll.ormqr(hf, taus, c, left=True, transpose=True)),
                               np.conj(np.swapaxes(q_full, -1, -2)) @ c, **tol)
    ct = np.swapaxes(c, -1, -2)
    np.testing.assert_allclose(np.asarray(ll.ormqr(hf, taus, ct, left=False)), ct @ q_full, **tol)
    if m >= n:
        np.testing.assert_allclose(np.asarray(ll.householder_product(hf, taus)), q_full[..., :, :n], **tol)
    else:
        with pytest.raises(ValueError, match="at least as many rows"):
            ll.householder_product(hf, taus)
