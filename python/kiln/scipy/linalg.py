"""kiln.scipy.linalg: jax.scipy.linalg's functions, on kiln's factorization primitives
(kiln.lax.linalg: LAPACK on the CPU) and jnp, for real and complex matrices; differentiable
wherever those are (schur is not, as in JAX)."""

import numpy as np

from kiln import lax
from kiln import numpy as jnp
from kiln._src import core
from kiln._src.core import Array
from kiln.lax import linalg as lax_linalg

__all__ = ["block_diag", "cho_factor", "cho_solve", "cholesky", "det", "eigh", "expm", "expm_frechet", "inv", "lu",
           "lu_factor", "lu_solve", "polar", "qr", "schur", "solve", "solve_triangular", "sqrtm", "svd", "toeplitz"]


def _arr(x):
    return x if isinstance(x, Array) else core.asarray(x)


def _float(x, opname):
    x = _arr(x)
    if x.dtype.kind in "biu":  # integers and bools: the default float, as JAX
        x = x.astype(jnp.result_type(float))
    if x.dtype.kind not in "fc":
        raise TypeError(f"scipy.linalg.{opname}: {x.dtype.name} inputs are not supported; pass a float or complex array")
    return x


def _square(x, opname):
    x = _float(x, opname)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"scipy.linalg.{opname}: expected a square matrix (or a stack of them), got shape {x.shape}")
    return x


def _mT(x):
    return jnp.swapaxes(x, -1, -2)


def _mH(x):
    """The conjugate transpose (the transpose of a real x)."""
    return jnp.conj(_mT(x)) if x.dtype.kind == "c" else _mT(x)


def _trans(trans, opname):
    """0: a, 1: a^T, 2: a^H (the same as 1 for a real a)."""
    if trans in (0, "N"):
        return 0
    if trans in (1, "T"):
        return 1
    if trans in (2, "C"):
        return 2
    raise ValueError(f"scipy.linalg.{opname}: trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False, debug=None,
                     check_finite=True):
    """x with a @ x = b (trans=0) or a.T @ x = b (trans=1/'T'), a triangular."""
    a = _square(a, "solve_triangular")
    b = _float(b, "solve_triangular")
    if b.ndim == 1 or (a.ndim == b.ndim + 1 and a.shape[-1] == b.shape[-1]):  # vectors (JAX's rule)
        return solve_triangular(a, b[..., None], trans, lower, unit_diagonal)[..., 0]
    if b.ndim < 2 or b.shape[-2] != a.shape[-1]:
        raise ValueError(f"scipy.linalg.solve_triangular: a of shape {a.shape} and b of shape {b.shape} do not match")
    try:  # the batch dimensions broadcast, as jnp.vectorize's over (n,n),(n,k)->(n,k)
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"scipy.linalg.solve_triangular: the batch dimensions of a {a.shape} and b {b.shape} "
                         f"do not broadcast") from None
    a = jnp.broadcast_to(a, batch + a.shape[-2:])
    b = jnp.broadcast_to(b, batch + b.shape[-2:])
    dt = jnp.result_type(a.dtype, b.dtype)
    t = _trans(trans, "solve_triangular")
    a = a.astype(dt)
    if t == 2 and a.dtype.kind == "c":  # a^H x = b is conj(a)^T x = b
        a = jnp.conj(a)
    return lax_linalg.triangular_solve(a, b.astype(dt), left_side=True, lower=lower, transpose_a=t != 0,
                                       unit_diagonal=unit_diagonal)


def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """The Cholesky factor: lower (l @ l^H = a) or upper (u^H @ u = a, the default, as SciPy)."""
    c = lax_linalg.cholesky(_square(a, "cholesky"))
    return c if lower else _mH(c)


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """(c, lower) for cho_solve; c holds the factor in its lower or upper triangle, zeros in the other."""
    return cholesky(a, lower=lower), lower


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """x with a @ x = b, from cho_factor(a)."""
    c, lower = c_and_lower
    c = _square(c, "cho_solve")
    b = _float(b, "cho_solve")
    vec = b.ndim == c.ndim - 1
    if vec:
        b = b[..., None]
    if lower:
        y = solve_triangular(c, b, lower=True)
        x = solve_triangular(c, y, trans=2, lower=True)
    else:
        y = solve_triangular(c, b, trans=2, lower=False)
        x = solve_triangular(c, y, lower=False)
    return x[..., 0] if vec else x


def lu(a, permute_l=False, overwrite_a=False, check_finite=True):
    """(p, l, u) with a = p @ l @ u, or (p @ l, u) with permute_l."""
    a = _float(a, "lu")
    if a.ndim < 2:
        raise ValueError(f"scipy.linalg.lu: expected a matrix, got shape {a.shape}")
    m, n = a.shape[-2:]
    k = min(m, n)
    lu_, _, perm = lax_linalg.lu(a)
    l = jnp.tril(lu_[..., :, :k], -1) + jnp.eye(m, k, dtype=a.dtype)
    u = jnp.triu(lu_[..., :k, :])
    # row i of a is row perm[i] of l @ u: p[perm[i], i] = 1 gives a = p.T ... as SciPy, a = p @ l @ u
    p = _mT(jnp.eye(m, dtype=a.dtype)[perm])  # a[perm] = l @ u, so a = eye[perm].T @ l @ u
    if permute_l:
        return p @ l, u
    return p, l, u


def lu_factor(a, overwrite_a=False, check_finite=True):
    """(lu, piv): LAPACK's packed factors and pivots (row i was swapped with row piv[i])."""
    a = _square(a, "lu_factor")
    lu_, piv, _ = lax_linalg.lu(a)
    return lu_, piv


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """x with a @ x = b (trans=0) or a.T @ x = b (trans=1), from lu_factor(a)."""
    lu_, piv = lu_and_piv
    lu_ = _square(lu_, "lu_solve")
    b = _float(b, "lu_solve")
    if lu_.ndim != 2:
        raise NotImplementedError("scipy.linalg.lu_solve: stacks of factorizations are not supported yet by kiln")
    vec = b.ndim == 1
    if vec:
        b = b[:, None]
    n = lu_.shape[0]
    perm = _perm_of(piv, n)
    t = _trans(trans, "lu_solve")
    if not t:  # a = p.T l u with b[perm]: l u x = b[perm]
        y = solve_triangular(lu_, b[perm], lower=True, unit_diagonal=True)
        x = solve_triangular(lu_, y, lower=False)
    else:  # a.T x = b: u.T l.T (p x) = b (a^H: the conjugate transposes)
        y = solve_triangular(lu_, b, trans=t, lower=False)
        z = solve_triangular(lu_, y, trans=t, lower=True, unit_diagonal=True)
        x = jnp.zeros_like(z).at[perm].set(z)
    return x[:, 0] if vec else x


def _perm_of(piv, n):
    """The row permutation LAPACK's pivots make: row i swapped with row piv[i], in order (one
    loop, not n traced swaps)."""
    piv = _arr(piv).astype(jnp.int32)

    def swap(i, perm):
        j = piv[i]
        pi, pj = perm[i], perm[j]
        return perm.at[i].set(pj).at[j].set(pi)

    return lax.fori_loop(0, min(n, piv.shape[-1]), swap, jnp.arange(n, dtype=jnp.int32))


def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    """mode 'full' (q m x m), 'economic' (q m x k), 'r' (r alone, as a 1-tuple)."""
    if pivoting:
        raise NotImplementedError("scipy.linalg.qr(pivoting=True) is not supported yet by kiln")
    if mode not in ("full", "economic", "r"):
        raise NotImplementedError(f"scipy.linalg.qr(mode={mode!r}) is not supported by kiln (use 'full', 'economic' "
                                  "or 'r')")
    q, r = lax_linalg.qr(_float(a, "qr"), full_matrices=mode == "full")
    return (r,) if mode == "r" else (q, r)


def svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True, lapack_driver="gesdd"):
    return jnp.linalg.svd(_float(a, "svd"), full_matrices=full_matrices, compute_uv=compute_uv)


def eigh(a, b=None, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False, turbo=True, eigvals=None,
         type=1, check_finite=True):
    """Eigenvalues (ascending) and eigenvectors of a symmetric matrix."""
    if b is not None:
        raise NotImplementedError("scipy.linalg.eigh: the generalized problem (b=...) is not supported by kiln, as in "
                                  "JAX")
    if eigvals is not None:
        raise NotImplementedError("scipy.linalg.eigh(eigvals=...) is not supported by kiln, as in JAX")
    v, w = lax_linalg.eigh(_square(a, "eigh"), lower=lower)
    return w if eigvals_only else (w, v)


def inv(a, overwrite_a=False, check_finite=True):
    return jnp.linalg.inv(_square(a, "inv"))


def det(a, overwrite_a=False, check_finite=True):
    return jnp.linalg.det(_square(a, "det"))


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, debug=False, check_finite=True, assume_a="gen"):
    """x with a @ x = b; assume_a='pos' solves through a Cholesky factorization."""
    a = _square(a, "solve")
    if assume_a == "pos":
        return cho_solve(cho_factor(a, lower=lower), b)
    if assume_a not in ("gen", "sym", "her"):
        raise ValueError(f"scipy.linalg.solve: assume_a must be 'gen', 'sym', 'her' or 'pos', got {assume_a!r}")
    return jnp.linalg.solve(a, b)


# Padé coefficients of degree 13 for exp (Higham 2005, "The scaling and squaring method for the
# matrix exponential revisited"): b_k = (26 - k)! 13! / ((26)! k! (13 - k)!)
_PADE13 = [64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800., 129060195264000.,
           10559470521600., 670442572800., 33522128640., 1323241920., 40840800., 960960., 16380., 182., 1.]
_THETA13 = 5.371920351148152


def expm(A, *, upper_triangular=False, max_squarings=16):
    """The matrix exponential: Padé approximant of degree 13 of A / 2^s, squared s times, s from
    A's 1-norm (Higham 2005; s capped at max_squarings). Differentiable (through jnp)."""
    A = _square(A, "expm")
    n = A.shape[-1]
    norm = jnp.max(jnp.sum(jnp.abs(A), axis=-2), axis=-1)  # the 1-norm, per matrix
    tiny = 1e-300 if A.dtype in (np.float64, np.complex128) else 1e-30
    s = jnp.clip(jnp.ceil(jnp.log2(jnp.maximum(norm, tiny) / _THETA13)),
                 0, max_squarings)
    A = A / (2.0 ** s)[..., None, None].astype(A.dtype)
    b = [jnp.asarray(c, A.dtype) for c in _PADE13]
    eye = jnp.broadcast_to(jnp.eye(n, dtype=A.dtype), A.shape)
    A2 = A @ A
    A4 = A2 @ A2
    A6 = A4 @ A2
    U = A @ (A6 @ (b[13] * A6 + b[11] * A4 + b[9] * A2) + b[7] * A6 + b[5] * A4 + b[3] * A2 + b[1] * eye)
    V = A6 @ (b[12] * A6 + b[10] * A4 + b[8] * A2) + b[6] * A6 + b[4] * A4 + b[2] * A2 + b[0] * eye
    R = jnp.linalg.solve(V - U, V + U)
    si = s.astype(jnp.int32)

    def square(i, r):
        return jnp.where((i < si)[..., None, None], r @ r, r)

    return lax.fori_loop(0, max_squarings, square, R)


def expm_frechet(A, E, *, method=None, compute_expm=True):
    """The Fréchet derivative of expm at A in direction E (and expm(A)): the upper-right block of
    expm([[A, E], [0, A]])."""
    if method not in (None, "SPS", "blockEnlarge"):
        raise ValueError(f"scipy.linalg.expm_frechet: unknown method {method!r}")
    A, E = _square(A, "expm_frechet"), _square(E, "expm_frechet")
    if A.shape != E.shape:
        raise ValueError(f"scipy.linalg.expm_frechet: A {A.shape} and E {E.shape} must have one shape")
    n = A.shape[-1]
    big = jnp.concatenate([jnp.concatenate([A, E], -1), jnp.concatenate([jnp.zeros_like(A), A], -1)], -2)
    f = expm(big)
    L = f[..., :n, n:]
    return (f[..., :n, :n], L) if compute_expm else L


def polar(a, side="right", *, method="svd", eps=None, max_iterations=None):
    """(u, p) with a = u @ p (side='right', p symmetric positive semidefinite) or a = p @ u
    (side='left'), through the SVD."""
    if side not in ("right", "left"):
        raise ValueError(f"scipy.linalg.polar: side must be 'right' or 'left', got {side!r}")
    if method != "svd":
        raise NotImplementedError(f"scipy.linalg.polar(method={method!r}) is not supported by kiln (use 'svd')")
    a = _float(a, "polar")
    w, s, vt = jnp.linalg.svd(a, full_matrices=False)
    u = w @ vt
    s = s.astype(a.dtype)
    p = (_mH(vt) * s[..., None, :]) @ vt if side == "right" else (w * s[..., None, :]) @ _mH(w)
    return u, p


def block_diag(*arrs):
    """The arrays (scalars, vectors as rows, matrices) along the diagonal of one matrix."""
    if not arrs:
        return jnp.zeros((1, 0))
    mats = [jnp.atleast_2d(_arr(a)) for a in arrs]
    if any(m.ndim != 2 for m in mats):
        raise ValueError("scipy.linalg.block_diag: arguments must have 2 or fewer dimensions")
    dt = jnp.result_type(*mats)
    cols = sum(m.shape[1] for m in mats)
    rows, at = [], 0
    for m in mats:
        rows.append(jnp.pad(m.astype(dt), ((0, 0), (at, cols - at - m.shape[1]))))
        at += m.shape[1]
    return jnp.concatenate(rows, axis=0)


def toeplitz(c, r=None):
    """The Toeplitz matrix of first column c and first row r (r[0] ignored); r=None: symmetric."""
    c = jnp.ravel(_arr(c))
    r = c if r is None else jnp.ravel(_arr(r))
    dt = jnp.result_type(c, r)
    vals = jnp.concatenate([r[1:][::-1], c]).astype(dt)  # index len(r) - 1 + i - j
    i = np.arange(c.shape[0])[:, None]
    j = np.arange(r.shape[0])[None, :]
    return vals[r.shape[0] - 1 + i - j]


def schur(a, output="real"):
    """(t, z) with a = z @ t @ z^H, z unitary: t upper triangular (output='complex'), or, for a real
    a with output='real', quasi-triangular with 2x2 blocks for complex conjugate eigenvalue pairs
    (LAPACK gees, on the host). Not differentiable, as in JAX."""
    if output not in ("real", "complex"):
        raise ValueError(f"scipy.linalg.schur: output must be 'real' or 'complex', got {output!r}")
    a = _square(a, "schur")
    if output == "complex" and a.dtype.kind != "c":
        a = a.astype(jnp.result_type(a.dtype, jnp.complex64))
    t, z = lax_linalg.schur(a)
    return t, z


def _sqrtm_triu(t):
    """The principal square root r of an upper triangular t (r @ r = t), a superdiagonal at a time:
    r[i, i+k] = (t[i, i+k] - sum_{i<m<i+k} r[i, m] r[m, i+k]) / (r[i, i] + r[i+k, i+k]) (Björck and
    Hammarling's Schur method), as one loop of n - 1 products of the strictly upper part."""
    n = t.shape[-1]
    d = jnp.sqrt(jnp.diagonal(t, axis1=-2, axis2=-1))
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    eye = jnp.asarray(i == j)
    r = jnp.where(eye, d[..., :, None], jnp.zeros_like(t))
    denom = d[..., :, None] + d[..., None, :]
    upper = jnp.asarray(j > i)

    def superdiagonal(k, r):
        rs = jnp.where(upper, r, jnp.zeros_like(r))
        return jnp.where(jnp.asarray(j - i) == k, (t - rs @ rs) / denom, r)

    return lax.fori_loop(1, n, superdiagonal, r) if n > 1 else r


def sqrtm(A, blocksize=1):
    """The principal matrix square root (r @ r = A): complex, through the complex Schur form, as
    JAX's (which is also CPU-only in JAX; kiln's runs the Schur step on the host on a GPU too)."""
    if blocksize > 1:
        raise NotImplementedError("scipy.linalg.sqrtm(blocksize > 1): the blocked version is not supported, as in "
                                  "JAX")
    A = _square(A, "sqrtm")
    t, z = schur(A, output="complex")
    r = _sqrtm_triu(t)
    return z @ r @ _mH(z)


from kiln.scipy._linalg_more import (  # noqa: E402  (it builds on the helpers above)
    circulant, companion, convolution_matrix, dft, eigh_tridiagonal, fiedler, fiedler_companion, funm, hadamard,
    hankel, helmert, hessenberg, hilbert, invhilbert, invpascal, leslie, pascal, qr_multiply, rsf2csf,
    solve_sylvester,
)

__all__ += ["circulant", "companion", "convolution_matrix", "dft", "eigh_tridiagonal", "fiedler", "fiedler_companion",
            "funm", "hadamard", "hankel", "helmert", "hessenberg", "hilbert", "invhilbert", "invpascal", "leslie",
            "pascal", "qr_multiply", "rsf2csf", "solve_sylvester"]
