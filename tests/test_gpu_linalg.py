"""Linear algebra on the GPU through cuSOLVER and cuBLAS (runtime/cusolver.c): cholesky, lu, qr,
eigh, svd and triangular_solve (and solve/inv/det/slogdet, built from them) run on the device with
no host step, single and batched (the batched routines for small matrices, loops of the
single-matrix ones for large), float32/float64/complex64, against NumPy in float64; gradients
against finite differences; NaN where the host routine gives NaN (cholesky of a matrix that is not
positive definite); KILN_CUSOLVER=0 keeps the host routine. Tests marked `gpu` need an NVIDIA GPU
and are skipped elsewhere."""
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.lax import linalg as lax_linalg

HAS_GPU = kiln.default_backend() == "gpu"
_needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU")


def gpu(test):
    """Marks a test `gpu` (select them with `pytest -m gpu`) and skips it without a GPU."""
    return pytest.mark.gpu(_needs_gpu(test))


DTYPES = [np.float32, np.float64, np.complex64]
# single and batched; 32x32 batches take the batched routines (potrfBatched, getrfBatched,
# syevjBatched, gesvdjBatched), 300x300 the single-matrix ones in a loop
SQUARE = [(32, 32), (64, 32, 32), (300, 300), (3, 300, 300)]
RECT = [(40, 24), (24, 40), (16, 20, 12), (16, 12, 20), (300, 200), (2, 200, 300)]


@pytest.fixture
def x64_on():
    old = kiln.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", True)
    yield
    kiln.config.update("jax_enable_x64", old)


def _rand(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.normal(size=shape)
    return a.astype(dtype)


def _ct(a):
    return np.conj(np.swapaxes(a, -1, -2))


def _spd(shape, dtype, seed=0):
    a = _rand(shape, np.complex128 if np.dtype(dtype).kind == "c" else np.float64, seed)
    n = shape[-1]
    return (a @ _ct(a) / n + np.eye(n)).astype(dtype)


def _herm(shape, dtype, seed=0):
    a = _rand(shape, dtype, seed).astype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64)
    return ((a + _ct(a)) / 2).astype(dtype)


def _wide(a):
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)


def _tol(dtype, n=32):
    """Error allowed relative to the scale of the result: a few thousand ulps at these sizes."""
    eps = np.finfo(np.dtype(dtype)).eps
    return 20 * n * eps if eps > 1e-10 else 1e-9


def _close(got, exp, dtype, n=32):
    got, exp = np.asarray(got), np.asarray(exp)
    assert got.shape == exp.shape, (got.shape, exp.shape)
    scale = max(1.0, float(np.max(np.abs(exp)))) if exp.size else 1.0
    err = float(np.max(np.abs(got - exp))) if exp.size else 0.0
    assert err <= _tol(dtype, n) * scale, f"max error {err:.3g} > {_tol(dtype, n) * scale:.3g}"


def _eye_like(q):
    k = q.shape[-1]
    return np.broadcast_to(np.eye(k), q.shape[:-2] + (k, k))


def _on_device(jf):
    """The jitted function's one executable ran every step on the GPU (no host round trip)."""
    (entry,) = jf._cache.values()
    exe = entry.exe
    assert exe.device == 1
    assert exe.host_steps == [], exe.host_steps


def _run(fn, *args):
    jf = kiln.jit(fn)
    out = jf(*args)
    _on_device(jf)
    return out


def _needs_x64(dtype, request):
    if np.dtype(dtype) in (np.float64, np.complex128):
        request.getfixturevalue("x64_on")


# ---- code generation (no GPU needed) ----

@pytest.mark.parametrize("op", ["cholesky", "qr", "eigh", "svd", "lu", "solve"])
def test_linalg_steps_compile_for_the_gpu_without_kernels_of_their_own(op):
    # a cuSOLVER step is a library step: the PTX compile of a program holding one succeeds
    a = _spd((4, 8, 8), np.float32)
    fns = {"cholesky": jnp.linalg.cholesky, "qr": jnp.linalg.qr, "eigh": jnp.linalg.eigh, "svd": jnp.linalg.svd,
           "lu": lax_linalg.lu, "solve": lambda a: jnp.linalg.solve(a, a[..., :1])}
    ptx = kiln.make_jaxpr(fns[op])(a)._traced.builder.gpu_ptx(90)
    assert isinstance(ptx, str)


# ---- on the device ----

@gpu
@pytest.mark.parametrize("shape", SQUARE)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky(shape, dtype, request):
    _needs_x64(dtype, request)
    a = _spd(shape, dtype)
    l = np.asarray(_run(jnp.linalg.cholesky, a))
    assert l.dtype == dtype
    assert np.all(np.triu(l, 1) == 0)  # exact zeros above the diagonal, as LAPACK's caller leaves them
    _close(l, np.linalg.cholesky(_wide(a)), dtype, shape[-1])
    _close(l @ _ct(l), a, dtype, shape[-1])


@gpu
@pytest.mark.parametrize("batch", [(), (5,), (40,)])
def test_cholesky_of_a_matrix_that_is_not_positive_definite_is_nan(batch):
    # the host routine (and JAX) answer NaN for the whole factor; cuSOLVER's devInfo becomes that
    # NaN on the device, the other matrices of the batch untouched
    a = _spd(batch + (6, 6), np.float32, seed=1)
    bad = a.copy()
    if batch:
        bad[1] = -np.eye(6, dtype=np.float32)
    else:
        bad = -np.eye(6, dtype=np.float32)
    l = np.asarray(_run(jnp.linalg.cholesky, bad))
    if batch:
        assert np.isnan(l[1]).all()
        keep = np.arange(batch[0]) != 1
        _close(l[keep], np.linalg.cholesky(_wide(a[keep])), np.float32, 6)
    else:
        assert np.isnan(l).all()


def _lu_reference(a):
    """Partial pivoting as LAPACK's getrf: the largest |a| in the column, the first one on ties."""
    a = a.astype(np.float64).copy()
    m, n = a.shape
    piv, perm = [], list(range(m))
    for j in range(min(m, n)):
        p = j + int(np.argmax(np.abs(a[j:, j])))
        piv.append(p)
        a[[j, p]] = a[[p, j]]
        perm[j], perm[p] = perm[p], perm[j]
        if a[j, j] != 0:
            a[j + 1:, j] /= a[j, j]
            a[j + 1:, j + 1:] -= np.outer(a[j + 1:, j], a[j, j + 1:])
    return a, np.array(piv, np.int32), np.array(perm, np.int32)


@gpu
@pytest.mark.parametrize("shape", SQUARE + RECT)
@pytest.mark.parametrize("dtype", DTYPES)
def test_lu(shape, dtype, request):
    _needs_x64(dtype, request)
    a = _rand(shape, dtype)
    lu, piv, perm = (np.asarray(t) for t in _run(lax_linalg.lu, a))
    m, n = shape[-2:]
    k = min(m, n)
    assert lu.shape == a.shape and piv.shape == shape[:-2] + (k,) and perm.shape == shape[:-2] + (m,)
    assert piv.dtype == np.int32 and perm.dtype == np.int32
    low = np.tril(lu, -1)[..., :, :k] + np.eye(m, k)
    up = np.triu(lu)[..., :k, :]
    rows = np.take_along_axis(_wide(a), perm[..., :, None].astype(np.int64), axis=-2)
    _close(low @ up, rows, dtype, max(m, n))
    # partial pivoting (complex: LAPACK compares |re| + |im|, so |l| reaches sqrt(2))
    assert np.all(np.abs(low) <= (np.sqrt(2) if a.dtype.kind == "c" else 1) + 1e-5)
    assert np.all(np.sort(perm, axis=-1) == np.arange(m))
    if dtype == np.float64:  # the same pivots as LAPACK's choice
        for i in np.ndindex(*shape[:-2]):
            ref_lu, ref_piv, ref_perm = _lu_reference(a[i])
            np.testing.assert_array_equal(piv[i], ref_piv)
            np.testing.assert_array_equal(perm[i], ref_perm)
            _close(lu[i], ref_lu, dtype, max(m, n))


@gpu
@pytest.mark.parametrize("shape", SQUARE + RECT)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr(shape, dtype, mode, request):
    _needs_x64(dtype, request)
    if mode == "complete" and shape[-2] > 250:
        pytest.skip("complete Q of a tall 300-row matrix: covered by the smaller shapes")
    a = _rand(shape, dtype)
    q, r = (np.asarray(t) for t in _run(lambda x: jnp.linalg.qr(x, mode=mode), a))
    eq, er = np.linalg.qr(_wide(a), mode=mode)
    assert q.shape == eq.shape and r.shape == er.shape and q.dtype == dtype
    n = max(shape[-2:])
    assert np.all(np.tril(r, -1) == 0)
    _close(q @ r, a, dtype, n)
    _close(_ct(q) @ q, _eye_like(q), dtype, n)
    _close(np.abs(np.diagonal(r, axis1=-2, axis2=-1)), np.abs(np.diagonal(er, axis1=-2, axis2=-1)), dtype, n)


@gpu
@pytest.mark.parametrize("shape", SQUARE + [(512, 8, 8)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower", [True, False])
def test_eigh(shape, dtype, lower, request):
    _needs_x64(dtype, request)
    h = _herm(shape, dtype)
    # garbage in the triangle that must not be read
    junk = _rand(shape, dtype, seed=3)
    a = np.where(np.tril(np.ones(shape[-2:], bool)) if lower else np.triu(np.ones(shape[-2:], bool)), h, junk)
    v, w = (np.asarray(t) for t in _run(lambda x: lax_linalg.eigh(x, lower=lower, symmetrize_input=False), a))
    ew = np.linalg.eigvalsh(_wide(h))
    assert w.dtype == np.finfo(dtype).dtype and v.dtype == dtype
    n = shape[-1]
    _close(w, ew, dtype, n)  # ascending, as LAPACK
    _close(_ct(v) @ v, _eye_like(v), dtype, n)
    _close(h @ v, v * w[..., None, :], dtype, n)


@gpu
@pytest.mark.parametrize("shape", SQUARE + RECT)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("full", [False, True])
def test_svd(shape, dtype, full, request):
    _needs_x64(dtype, request)
    a = _rand(shape, dtype)
    u, s, vh = (np.asarray(t) for t in _run(lambda x: jnp.linalg.svd(x, full_matrices=full), a))
    eu, es, evh = np.linalg.svd(_wide(a), full_matrices=full)
    assert (u.shape, s.shape, vh.shape) == (eu.shape, es.shape, evh.shape)
    assert s.dtype == np.finfo(dtype).dtype and u.dtype == dtype
    n = max(shape[-2:])
    _close(s, es, dtype, n)  # descending
    k = s.shape[-1]
    _close((u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :], a, dtype, n)
    _close(_ct(u) @ u, _eye_like(u), dtype, n)
    _close(vh @ _ct(vh), _eye_like(_ct(vh)), dtype, n)


@gpu
@pytest.mark.parametrize("shape", [(64, 32, 32), (300, 200), (20, 30)])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_svd_values_only(shape, dtype):
    a = _rand(shape, dtype)
    s = np.asarray(_run(lambda x: jnp.linalg.svd(x, compute_uv=False), a))
    _close(s, np.linalg.svd(_wide(a), compute_uv=False), dtype, max(shape[-2:]))


@gpu
@pytest.mark.parametrize("batch", [(), (8,)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("left_side", [True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("unit_diagonal", [False, True])
def test_triangular_solve(batch, dtype, left_side, lower, transpose_a, unit_diagonal, request):
    _needs_x64(dtype, request)
    m, n = 24, 10
    s = m if left_side else n
    a = _rand(batch + (s, s), dtype) + 4 * np.eye(s, dtype=dtype)
    b = _rand(batch + (m, n), dtype, seed=5)
    x = np.asarray(_run(lambda a, b: lax_linalg.triangular_solve(a, b, left_side=left_side, lower=lower,
                                                                 transpose_a=transpose_a,
                                                                 unit_diagonal=unit_diagonal), a, b))
    t = np.tril(_wide(a)) if lower else np.triu(_wide(a))
    if unit_diagonal:
        t = t - np.diagonal(t, axis1=-2, axis2=-1)[..., None] * np.eye(s) + np.eye(s)
    op = np.swapaxes(t, -1, -2) if transpose_a else t
    ref = np.linalg.solve(op, _wide(b)) if left_side else np.swapaxes(
        np.linalg.solve(np.swapaxes(op, -1, -2), np.swapaxes(_wide(b), -1, -2)), -1, -2)
    _close(x, ref, dtype, s)


@gpu
@pytest.mark.parametrize("shape", [(32, 32), (64, 32, 32), (300, 300)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_inv_det_slogdet(shape, dtype, request):
    _needs_x64(dtype, request)
    a = _rand(shape, dtype) + np.sqrt(shape[-1]) * np.eye(shape[-1], dtype=dtype)
    b = _rand(shape[:-1] + (3,), dtype, seed=7)
    n = shape[-1]
    _close(_run(jnp.linalg.solve, a, b), np.linalg.solve(_wide(a), _wide(b)), dtype, n)
    _close(_run(jnp.linalg.inv, a), np.linalg.inv(_wide(a)), dtype, n)
    sign, logdet = (np.asarray(t) for t in _run(jnp.linalg.slogdet, a))
    esign, elogdet = np.linalg.slogdet(_wide(a))
    _close(sign, esign, dtype, n)
    _close(logdet, elogdet, dtype, n)
    if n <= 32:  # the determinant itself overflows float32 for the large ones
        d = np.asarray(_run(jnp.linalg.det, a))
        ed = np.linalg.det(_wide(a))
        np.testing.assert_allclose(d, ed, rtol=_tol(dtype, n) * 10)


@gpu
def test_eager_linalg_runs_on_the_device():
    # un-jitted calls take the same compiled steps
    a = _spd((16, 32, 32), np.float32)
    _close(jnp.linalg.cholesky(a), np.linalg.cholesky(_wide(a)), np.float32)
    _close(jnp.linalg.eigvalsh(a), np.linalg.eigvalsh(_wide(a)), np.float32)


# gradients: kiln.grad through the factorizations against central differences, in float64
def _grad_cases():
    def chol(a):
        s = a @ a.T + 4 * jnp.eye(a.shape[-1], dtype=a.dtype)
        return jnp.sum(jnp.linalg.cholesky(s) * jnp.arange(a.size, dtype=a.dtype).reshape(a.shape))

    def eigh(a):
        w, v = jnp.linalg.eigh(a + a.T)
        return jnp.sum(w * jnp.arange(w.size, dtype=a.dtype)) + jnp.sum(jnp.abs(v[..., 0]))

    def svd(a):
        return jnp.sum(jnp.linalg.svd(a, compute_uv=False) ** 2 * jnp.arange(1.0, 1.0 + min(a.shape), dtype=a.dtype))

    def qr(a):
        q, r = jnp.linalg.qr(a)
        return jnp.sum(jnp.abs(jnp.diagonal(r))) + jnp.sum(q[:, 0] ** 2 * jnp.arange(a.shape[0], dtype=a.dtype))

    def solve(a):
        return jnp.sum(jnp.linalg.solve(a + 6 * jnp.eye(a.shape[-1], dtype=a.dtype), jnp.ones((a.shape[-1], 2), a.dtype)))

    def slogdet(a):
        return jnp.linalg.slogdet(a + 6 * jnp.eye(a.shape[-1], dtype=a.dtype))[1]

    def tri(a):
        return jnp.sum(lax_linalg.triangular_solve(a + 6 * jnp.eye(a.shape[-1], dtype=a.dtype), jnp.ones((3, 6), a.dtype),
                                                   left_side=False, lower=True) ** 2)

    return {"cholesky": (chol, (6, 6)), "eigh": (eigh, (6, 6)), "svd": (svd, (7, 5)), "qr": (qr, (7, 5)),
            "solve": (solve, (6, 6)), "slogdet": (slogdet, (6, 6)), "triangular_solve": (tri, (6, 6))}


GRAD_CASES = _grad_cases()


@gpu
@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_grads_match_finite_differences(name, x64_on):
    f, shape = GRAD_CASES[name]
    a = _rand(shape, np.float64, seed=11)
    jg = kiln.jit(kiln.grad(f))
    g = np.asarray(jg(a))
    _on_device(jg)
    jf = kiln.jit(f)
    d = _rand(shape, np.float64, seed=12)
    eps = 1e-6
    fd = (float(jf(a + eps * d)) - float(jf(a - eps * d))) / (2 * eps)
    np.testing.assert_allclose(np.sum(g * d), fd, rtol=1e-5, atol=1e-7)


@gpu
def test_cholesky_in_a_scan_is_captured_with_the_loop():
    # a step met first inside a captured loop body (work area made under capture, kept)
    a = _spd((12, 20, 20), np.float32, seed=4)

    def body(c, x):
        l = jnp.linalg.cholesky(x)
        return c + jnp.sum(l), l

    tot, ls = _run(lambda a: kiln.lax.scan(body, jnp.float32(0), a), a)
    ref = np.linalg.cholesky(_wide(a))
    _close(ls, ref, np.float32, 20)
    np.testing.assert_allclose(float(tot), ref.sum(), rtol=1e-4)


@gpu
def test_kiln_cusolver_0_keeps_the_host_routine(monkeypatch):
    monkeypatch.setenv("KILN_CUSOLVER", "0")
    a = _spd((3, 7, 7), np.float32, seed=9)
    jf = kiln.jit(lambda x: jnp.linalg.cholesky(x) * 1.5)
    l = np.asarray(jf(a))
    (entry,) = jf._cache.values()
    assert any(s.startswith("cholesky") for s in entry.exe.host_steps), entry.exe.host_steps
    _close(l, 1.5 * np.linalg.cholesky(_wide(a)), np.float32, 7)


@gpu
def test_log_compiles_names_the_library_routine():
    code = ("import numpy as np, kiln, kiln.numpy as jnp\n"
            "a = np.eye(8, dtype=np.float32) * 2 + np.zeros((4, 8, 8), np.float32)\n"
            "print(np.asarray(kiln.jit(jnp.linalg.cholesky)(a))[0, 0, 0])\n")
    env = dict(os.environ, KILN_LOG_COMPILES="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "cholesky: cuSOLVER potrfBatched" in r.stderr, r.stderr
    assert "host round trips" not in r.stderr
