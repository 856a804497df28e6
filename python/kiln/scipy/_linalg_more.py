"""More of jax.scipy.linalg, split from linalg.py to keep each file one sitting long: special
matrix constructors, reductions built in jnp (hessenberg, rsf2csf), and solvers and functions
built on the Schur form (solve_sylvester, funm). Depends on linalg.py's helpers, not the reverse."""

import math

import numpy as np

from kiln._src import dtypes as _dtypes  # finfo that knows bfloat16 on every NumPy (ml_dtypes.finfo)

from kiln import lax
from kiln import numpy as jnp
from kiln.lax import linalg as lax_linalg
from kiln.scipy import linalg as _la

_arr, _float, _square, _mT, _mH = _la._arr, _la._float, _la._square, _la._mT, _la._mH


def _default_float():
    return jnp.result_type(float)


def _inexact(x):
    x = _arr(x)
    return x.astype(_default_float()) if x.dtype.kind in "biu" else x


# ----------------------------------------------------------------------------
# Special matrices. Sizes are static, so the integer-valued ones are computed exactly on the
# host (JAX's pascal goes through exp(lgamma) and is inexact in float32; kiln's is not).

def hankel(c, r=None):
    """The Hankel matrix of first column c and last row r (r[0] ignored); r=None: zeros."""
    c = jnp.ravel(_arr(c))
    r = jnp.zeros_like(c) if r is None else jnp.ravel(_arr(r))
    dt = jnp.result_type(c, r)
    if c.shape[0] == 0 or r.shape[0] == 0:
        return jnp.zeros((c.shape[0], r.shape[0]), dt)
    vals = jnp.concatenate([c, r[1:]]).astype(dt)  # index i + j
    return vals[np.arange(c.shape[0])[:, None] + np.arange(r.shape[0])[None, :]]


def circulant(c):
    """The circulant matrix of first column c."""
    c = jnp.atleast_1d(_arr(c))
    n = c.shape[-1]
    return c[..., (np.arange(n)[:, None] - np.arange(n)[None, :]) % n]


def leslie(f, s):
    """The Leslie matrix: fecundities f in the first row, survival rates s on the subdiagonal."""
    f, s = jnp.atleast_1d(_arr(f)), jnp.atleast_1d(_arr(s))
    if f.ndim != 1 or s.ndim != 1:
        raise ValueError("scipy.linalg.leslie: f and s must be 1-dimensional")
    if f.shape[0] < 2:
        raise ValueError(f"scipy.linalg.leslie: f must have length at least 2, got {f.shape[0]}")
    if s.shape[0] != f.shape[0] - 1:
        raise ValueError(f"scipy.linalg.leslie: s must be one shorter than f, got {s.shape[0]} and {f.shape[0]}")
    dt = jnp.result_type(f, s)
    return jnp.diag(s.astype(dt), k=-1).at[0].set(f.astype(dt))


def companion(a):
    """The companion matrix of the polynomial with coefficients a (highest degree first)."""
    a = _inexact(jnp.atleast_1d(_arr(a)))
    if a.ndim != 1 or a.shape[0] < 2:
        raise ValueError(f"scipy.linalg.companion: a must be 1-dimensional of length >= 2, got shape {a.shape}")
    m = a.shape[0] - 1
    return jnp.eye(m, m, k=-1, dtype=a.dtype).at[0].set(-a[1:] / a[0])


def fiedler(a):
    """The symmetric Fiedler matrix |a[i] - a[j]|."""
    a = jnp.atleast_1d(_arr(a))
    return jnp.abs(a[..., :, None] - a[..., None, :])


def fiedler_companion(a):
    """The Fiedler companion matrix (pentadiagonal, with a's polynomial's roots as eigenvalues)."""
    a = _inexact(jnp.atleast_1d(_arr(a)))
    if a.ndim != 1 or a.shape[0] == 0:
        raise ValueError(f"scipy.linalg.fiedler_companion: a must be nonempty and 1-dimensional, got {a.shape}")
    n = a.shape[0] - 1
    if n == 0:
        return jnp.zeros((0, 0), a.dtype)
    a = a / a[0]
    if n == 1:
        return -a[1:].reshape(1, 1)
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    even, odd = i % 2 == 0, i % 2 == 1
    one, zero = jnp.ones((), a.dtype), jnp.zeros((), a.dtype)
    conditions = [(i == 0) & (j == 0), (i == 1) & (j == 0), (j == i + 1) & even, (j == i + 2) & even,
                  (j == i - 1) & even & (i >= 2), (j == i - 2) & odd & (i >= 3)]
    choices = [-a[1], one, -a[np.minimum(i + 2, n)], one, -a[np.minimum(i + 1, n)], one]
    return jnp.select([jnp.asarray(c) for c in conditions], choices, default=zero)


def convolution_matrix(a, n, mode="full"):
    """The Toeplitz matrix whose product with a length-n vector v is convolve(a, v, mode)."""
    n = int(n)
    if n <= 0:
        raise ValueError(f"scipy.linalg.convolution_matrix: n must be a positive integer, got {n}")
    a = _arr(a)
    if a.ndim != 1 or a.shape[0] < 1:
        raise ValueError(f"scipy.linalg.convolution_matrix: a must be nonempty and 1-dimensional, got {a.shape}")
    if mode not in ("full", "valid", "same"):
        raise ValueError(f"scipy.linalg.convolution_matrix: mode must be 'full', 'valid' or 'same', got {mode!r}")
    m = a.shape[0]
    length = m + n - 1
    if mode == "same":
        trim = min(n, m) - 1
        tb, te = trim // 2, trim - trim // 2
    elif mode == "valid":
        tb = te = min(n, m) - 1
    else:
        tb = te = 0
    az = jnp.pad(a, (0, n - 1))
    raz = jnp.pad(jnp.flip(a), (0, n - 1))
    return _la.toeplitz(az[tb:length - te], raz[length - n - tb:length - tb])


def hilbert(n):
    """The n x n Hilbert matrix 1 / (i + j + 1)."""
    i = np.arange(n, dtype=np.float64)
    return jnp.asarray(1.0 / (i[:, None] + i[None, :] + 1.0), _default_float())


def invhilbert(n):
    """The exact inverse of hilbert(n) (integers, as floats)."""
    c = math.comb
    out = [[(-1) ** (i + j) * (i + j + 1) * c(n + i, n - j - 1) * c(n + j, n - i - 1) * c(i + j, i) ** 2
            for j in range(n)] for i in range(n)]
    return jnp.asarray(np.array(out, dtype=np.float64).reshape(n, n), _default_float())


def _pascal_kind(kind, opname):
    kind = "symmetric" if kind is None else kind
    if kind not in ("symmetric", "lower", "upper"):
        raise ValueError(f"scipy.linalg.{opname}: kind must be 'symmetric', 'lower' or 'upper', got {kind!r}")
    return kind


def _pascal_lower(n, sign):
    """binom(i, j) (times (-1)^(i-j) when sign) as float64, exactly where float64 can hold it."""
    return np.array([[(-1) ** (i - j) * math.comb(i, j) if sign else math.comb(i, j) for j in range(n)]
                     for i in range(n)], dtype=np.float64).reshape(n, n)


def pascal(n, kind=None):
    """The Pascal matrix: binom(i + j, i) (symmetric), binom(i, j) (lower) or its transpose."""
    kind = _pascal_kind(kind, "pascal")
    low = _pascal_lower(n, False)
    out = {"lower": low, "upper": low.T}.get(kind)
    if out is None:
        out = np.array([[math.comb(i + j, i) for j in range(n)] for i in range(n)], np.float64).reshape(n, n)
    return jnp.asarray(out, _default_float())


def invpascal(n, kind=None):
    """The exact inverse of pascal(n, kind)."""
    kind = _pascal_kind(kind, "invpascal")
    low = _pascal_lower(n, True)
    out = {"lower": low, "upper": low.T}.get(kind)
    return jnp.asarray(low.T @ low if out is None else out, _default_float())


def helmert(n, full=False):
    """The Helmert matrix ((n - 1) x n, or n x n with the constant first row when full)."""
    if n < 1:
        raise ValueError(f"scipy.linalg.helmert: n must be a positive integer, got {n}")
    i, j = np.arange(n - 1)[:, None], np.arange(n)[None, :]
    k = (i + 1).astype(np.float64)
    denom = np.sqrt(k * (k + 1))
    h = np.where(j <= i, 1.0 / denom, np.where(j == i + 1, -k / denom, 0.0))
    if full:
        h = np.concatenate([np.full((1, n), 1.0 / np.sqrt(n)), h], axis=0)
    return jnp.asarray(h, _default_float())


def hadamard(n, dtype=int):
    """The Sylvester-construction Hadamard matrix of order n, a power of 2."""
    if n < 1 or not math.log2(n).is_integer():
        raise ValueError(f"scipy.linalg.hadamard: n must be a positive power of 2, got {n}")
    h = np.ones((1, 1))
    for _ in range(int(math.log2(n))):
        h = np.block([[h, h], [h, -h]])
    return jnp.asarray(h, jnp.dtype(dtype) if dtype is not int else jnp.result_type(int))


def dft(n, scale=None, *, dtype=None):
    """The n x n discrete Fourier transform matrix exp(-2 pi i jk / n), scaled by 1/sqrt(n) or 1/n."""
    if scale not in (None, "sqrtn", "n"):
        raise ValueError(f"scipy.linalg.dft: scale must be None, 'sqrtn' or 'n', got {scale!r}")
    dtype = jnp.result_type(complex) if dtype is None else jnp.dtype(dtype)
    if dtype.kind != "c":
        raise ValueError(f"scipy.linalg.dft: dtype must be complex, got {dtype}")
    k = np.arange(n)
    w = np.exp(-2j * np.pi * (np.outer(k, k) % max(n, 1)) / max(n, 1))
    w = w / {None: 1.0, "sqrtn": np.sqrt(n), "n": float(n)}[scale]
    return jnp.asarray(w, dtype)


# ----------------------------------------------------------------------------
# Tridiagonal eigenproblem, Hessenberg form, QR products.

def eigh_tridiagonal(d, e, *, eigvals_only=False, select="a", select_range=None, tol=None, key=None):
    """Eigenvalues (ascending; and eigenvectors) of the Hermitian tridiagonal matrix with diagonal
    d and subdiagonal e, through eigh of the assembled matrix (JAX bisects; the results agree)."""
    d, e = _arr(d), _arr(e)
    if d.dtype != e.dtype:
        raise TypeError(f"scipy.linalg.eigh_tridiagonal: d and e must have one dtype, got {d.dtype} and {e.dtype}")
    if d.dtype.kind not in "fc":
        raise TypeError(f"scipy.linalg.eigh_tridiagonal: only float and complex inputs are supported, got {d.dtype}")
    n = d.shape[0]
    if select == "a":
        lo, hi = 0, n - 1
    elif select == "i":
        if select_range is None:
            raise ValueError("scipy.linalg.eigh_tridiagonal: select='i' needs select_range")
        lo, hi = int(select_range[0]), int(select_range[1])
        if lo > hi:
            raise ValueError("scipy.linalg.eigh_tridiagonal: empty index range in select_range")
    elif select == "v":
        raise NotImplementedError("scipy.linalg.eigh_tridiagonal(select='v') is not supported, as in JAX (its "
                                  "output shape depends on the values)")
    else:
        raise ValueError(f"scipy.linalg.eigh_tridiagonal: select must be 'a', 'i' or 'v', got {select!r}")
    t = jnp.diag(d) + jnp.diag(e, -1) + jnp.diag(jnp.conj(e), 1)
    v, w = lax_linalg.eigh(t, lower=True)
    w, v = w[lo:hi + 1], v[:, lo:hi + 1]
    return w if eigvals_only else (w, v)


def hessenberg(a, *, calc_q=False, overwrite_a=False, check_finite=True):
    """h (and q) with a = q @ h @ q^H, h zero below its subdiagonal: Householder reflectors
    I - tau v v^H chosen as LAPACK's gehrd chooses them (a real subdiagonal, so h agrees with
    SciPy's), one per column (the last one too for complex a) in a fori_loop of masked updates."""
    a = _square(a, "hessenberg")
    n = a.shape[-1]
    rows = np.arange(n)
    eye = jnp.eye(n, dtype=a.dtype)

    def reflect(k, hq):
        h, q = hq
        onehot = jnp.asarray(rows == k).astype(a.dtype)
        col = jnp.sum(h * onehot, axis=-1)  # column k
        alpha = jnp.sum(col * jnp.asarray(rows == k + 1).astype(a.dtype), axis=-1, keepdims=True)
        tail = jnp.where(jnp.asarray(rows > k + 1), col, jnp.zeros_like(col))
        tail_norm = jnp.sqrt(jnp.sum(jnp.abs(tail) ** 2, axis=-1, keepdims=True))
        norm = jnp.sqrt(tail_norm ** 2 + jnp.abs(alpha) ** 2)
        ar = jnp.real(alpha)
        beta = jnp.where(ar >= 0, -norm, norm).astype(a.dtype)  # -sign(Re alpha) ||x||
        trivial = (tail_norm == 0) & (jnp.imag(alpha) == 0 if a.dtype.kind == "c" else tail_norm == 0)
        safe_beta = jnp.where(trivial, jnp.ones_like(beta), beta)
        tau = jnp.where(trivial, jnp.zeros_like(beta), (beta - alpha) / safe_beta)
        scale = jnp.where(trivial, jnp.ones_like(alpha), alpha - beta)
        v = jnp.where(jnp.asarray(rows == k + 1), jnp.ones_like(col), tail / scale)
        hh = eye - tau[..., None] * v[..., :, None] * jnp.conj(v)[..., None, :]  # H = I - tau v v^H
        return _mH(hh) @ h @ hh, q @ hh

    h, q = lax.fori_loop(0, max(n - 1, 0), reflect, (a, jnp.broadcast_to(eye, a.shape)))
    h = jnp.triu(h, -1)
    return (h, q) if calc_q else h


def qr_multiply(a, c, mode="right", pivoting=False, conjugate=False, overwrite_a=False, overwrite_c=False):
    """(q @ c, r) (mode='left') or (c @ q, r) (mode='right', the default), q of a's QR with
    min(m, n) columns; conj(q) when conjugate. Through an explicit q (kiln has no ormqr)."""
    if pivoting:
        raise NotImplementedError("scipy.linalg.qr_multiply(pivoting=True) is not supported by kiln (qr does not "
                                  "pivot)")
    if mode not in ("right", "left"):
        raise ValueError(f"scipy.linalg.qr_multiply: mode must be 'right' or 'left', got {mode!r}")
    a, c = _float(a, "qr_multiply"), _float(c, "qr_multiply")
    dt = jnp.result_type(a.dtype, c.dtype)
    a, c = a.astype(dt), c.astype(dt)
    onedim = c.ndim == 1
    if onedim:
        c = c[:, None] if mode == "left" else c[None, :]
    m, n = a.shape[-2:]
    k = min(m, n)
    q, r = lax_linalg.qr(a, full_matrices=False)
    if conjugate:
        q = jnp.conj(q)
    if mode == "left":
        if c.shape[-2] != k:
            raise ValueError(f"scipy.linalg.qr_multiply: q @ c needs c with {k} rows, got shape {c.shape}")
        out = q @ c
    else:
        if c.shape[-1] != m:
            raise ValueError(f"scipy.linalg.qr_multiply: c @ q needs c with {m} columns, got shape {c.shape}")
        out = c @ q
    return (jnp.ravel(out) if onedim else out), jnp.triu(r[..., :k, :])


# ----------------------------------------------------------------------------
# On the Schur form.

def _givens_rsf2csf(t, z):
    """SciPy's rsf2csf loop for one matrix pair (complex): from the bottom, each 2x2 block with a
    nonzero subdiagonal is triangularized by the rotation that maps its eigenvector (eigenvalue
    with positive imaginary part first, as LAPACK orders them) onto e1."""
    n = t.shape[-1]
    eps = float(_dtypes.finfo(t.dtype).eps)
    idx = np.arange(n)

    def step(i, tz):
        t, z = tz
        m = n - i
        e0, e1 = jnp.asarray(idx == m - 1).astype(t.dtype), jnp.asarray(idx == m).astype(t.dtype)
        a_, b_ = e0 @ t @ e0, e0 @ t @ e1
        c_, d_ = e1 @ t @ e0, e1 @ t @ e1
        half = (a_ - d_) / 2
        mu = half + jnp.sqrt(half * half + b_ * c_)  # the eigenvalue minus d_
        r = jnp.sqrt(jnp.abs(mu) ** 2 + jnp.abs(c_) ** 2).astype(t.dtype)
        active = jnp.abs(c_) > eps * (jnp.abs(a_) + jnp.abs(d_))
        r = jnp.where(active, r, jnp.ones_like(r))
        cs, sn = mu / r, c_ / r
        # G acts on rows m-1, m: [[conj(c), s], [-s, c]], embedded in the identity
        g = (jnp.eye(n, dtype=t.dtype) - jnp.outer(e0, e0) - jnp.outer(e1, e1) + jnp.conj(cs) * jnp.outer(e0, e0)
             + sn * jnp.outer(e0, e1) - sn * jnp.outer(e1, e0) + cs * jnp.outer(e1, e1))
        gh = _mH(g)
        t_new, z_new = g @ t @ gh, z @ gh
        t = jnp.where(active, t_new, t)
        z = jnp.where(active, z_new, z)
        t = jnp.where(jnp.asarray((idx[:, None] == m) & (idx[None, :] == m - 1)), jnp.zeros_like(t), t)
        return t, z

    return lax.fori_loop(1, n, step, (t, z)) if n > 1 else (t, z)


def rsf2csf(T, Z, check_finite=True):
    """(t, z) complex Schur form from the real one (schur(a) -> rsf2csf), by Givens rotations."""
    T, Z = _square(T, "rsf2csf"), _square(Z, "rsf2csf")
    if T.shape[-1] != Z.shape[-1]:
        raise ValueError(f"scipy.linalg.rsf2csf: T {T.shape} and Z {Z.shape} must have one size")
    ct = jnp.result_type(T.dtype, Z.dtype, jnp.complex64)
    T, Z = T.astype(ct), Z.astype(ct)
    if T.ndim > 2 or Z.ndim > 2:
        return jnp.vectorize(_givens_rsf2csf, signature="(n,n),(n,n)->(n,n),(n,n)")(T, Z)
    return _givens_rsf2csf(T, Z)


def _sylvester_schur(a, b, c):
    """X with a X + X b = c (one matrix each) by Bartels-Stewart: r = u^H a u, s = v^H b^H v upper
    triangular; r Y + Y s^H = u^H c v is solved a column at a time from the last, since s^H is
    lower triangular: (r + conj(s[j, j])) Y[:, j] = F[:, j] - sum_{k>j} Y[:, k] conj(s[j, k])."""
    r, u = _la.schur(a, output="complex")
    s, v = _la.schur(_mH(b), output="complex")
    f = _mH(u) @ c.astype(r.dtype) @ v
    low = _mH(s)
    m, n = f.shape
    cols = np.arange(n)
    eye = jnp.eye(m, dtype=r.dtype)

    def column(i, y):
        j = n - 1 - i
        onehot = jnp.asarray(cols == j).astype(r.dtype)
        coupling = jnp.where(jnp.asarray(cols > j), low @ onehot, jnp.zeros_like(onehot))  # low[k, j], k > j
        rhs = f @ onehot - y @ coupling
        ljj = onehot @ low @ onehot
        yj = lax_linalg.triangular_solve(r + ljj * eye, rhs[:, None], left_side=True, lower=False)[:, 0]
        return y + yj[:, None] * onehot[None, :]

    y = lax.fori_loop(0, n, column, jnp.zeros_like(f))
    eig_a = jnp.diagonal(r)
    eig_b = jnp.conj(jnp.diagonal(s))
    return u @ y @ _mH(v), eig_a, eig_b


def _sylvester_eigen(a, b, c):
    """X through the eigendecompositions of a and b (fast, and as accurate as they are diagonalizable)."""
    ra, ua = jnp.linalg.eig(a)
    rb, ub = jnp.linalg.eig(b)
    f = jnp.linalg.solve(ua, c.astype(ra.dtype) @ ub)
    y = f / (ra[:, None] + rb[None, :])
    return ua @ y @ jnp.linalg.inv(ub), ra, rb


def solve_sylvester(A, B, C, *, method="schur", tol=1e-8):
    """X with A @ X + X @ B = C; NaNs where some eigenvalues of A and -B are within tol (no unique X), as JAX."""
    if method not in ("schur", "eigen"):
        raise ValueError(f"scipy.linalg.solve_sylvester: method must be 'schur' or 'eigen', got {method!r}")
    A, B, C = _square(A, "solve_sylvester"), _square(B, "solve_sylvester"), _float(C, "solve_sylvester")
    dt = jnp.result_type(A.dtype, B.dtype, C.dtype)
    A, B, C = A.astype(dt), B.astype(dt), C.astype(dt)
    m, n = C.shape[-2:]
    if A.shape[-2:] != (m, m) or B.shape[-2:] != (n, n):
        raise ValueError(f"scipy.linalg.solve_sylvester: incompatible shapes A {A.shape}, B {B.shape}, C {C.shape}")

    def one(a, b, c):
        x, ea, eb = (_sylvester_schur if method == "schur" else _sylvester_eigen)(a, b, c)
        if dt.kind != "c":
            x = jnp.real(x)
        singular = jnp.any(jnp.abs(ea[:, None] + eb[None, :]) < tol)
        return jnp.where(singular, jnp.full_like(x, np.nan), x)

    if A.ndim > 2 or B.ndim > 2 or C.ndim > 2:
        return jnp.vectorize(one, signature="(m,m),(n,n),(m,n)->(m,n)")(A, B, C)
    return one(A, B, C)


def _parlett(t, fdiag):
    """f(t) for an upper triangular t with distinct diagonal, from f on the diagonal: Parlett's
    recurrence (from t f = f t) a superdiagonal at a time, f[i, j] = (t[i, j] (f[j, j] - f[i, i])
    + sum_{i<k<j} (t[i, k] f[k, j] - f[i, k] t[k, j])) / (t[j, j] - t[i, i])."""
    n = t.shape[-1]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    upper = jnp.asarray(j > i)
    f = jnp.where(jnp.asarray(i == j), fdiag[..., :, None], jnp.zeros_like(t))
    td = jnp.diagonal(t, axis1=-2, axis2=-1)
    dt = td[..., None, :] - td[..., :, None]
    dt = jnp.where(upper, dt, jnp.ones_like(dt))
    fd = fdiag[..., None, :] - fdiag[..., :, None]
    tu = jnp.where(upper, t, jnp.zeros_like(t))

    def superdiagonal(k, f):
        fu = jnp.where(upper, f, jnp.zeros_like(f))
        new = (t * fd + tu @ fu - fu @ tu) / dt
        return jnp.where(jnp.asarray(j - i) == k, new, f)

    return lax.fori_loop(1, n, superdiagonal, f) if n > 1 else f


def funm(A, func, disp=True):
    """func of the matrix A, func applied elementwise to an array: z f(t) z^H from the complex
    Schur form a = z t z^H and Parlett's recurrence (inaccurate for close eigenvalues, as SciPy's).
    The result is complex, as JAX's (SciPy returns a real one when its imaginary part is tiny)."""
    if not disp:
        raise NotImplementedError("scipy.linalg.funm(disp=False): the error estimate is not supported by kiln")
    A = _square(A, "funm")
    t, z = _la.schur(A, output="complex")
    f = _parlett(t, func(jnp.diagonal(t, axis1=-2, axis2=-1)))
    return z @ f @ _mH(z)
