"""kiln.lax.linalg: matrix factorizations as primitives (LAPACK on the CPU)."""

from kiln._src import core
from kiln._src.core import Array, bind, bind1
from kiln import lax


def _arr(x):
    return x if isinstance(x, Array) else core.asarray(x)


def _symmetrize(x):
    """(x + x^H) / 2: the symmetric (Hermitian, for complex x) part that the routines read."""
    xt = _mT(x)
    if x.dtype.kind == "c":
        xt = lax.conj(xt)
    return lax.div(lax.add(x, xt), lax._to_array(2, x))


def _mT(x):
    perm = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
    return lax.transpose(x, perm)


def cholesky(x, symmetrize_input=True):
    x = _arr(x)
    if symmetrize_input and x.ndim >= 2:
        x = _symmetrize(x)
    return bind1("cholesky", [x])


def qr(x, full_matrices=True, pivoting=False):
    if pivoting:
        raise NotImplementedError("lax.linalg.qr(pivoting=True) is not supported yet by kiln")
    return bind("qr", [_arr(x)], {"full_matrices": int(bool(full_matrices))})


def svd(x, full_matrices=True, compute_uv=True, subset_by_index=None):
    if subset_by_index is not None:
        raise NotImplementedError("lax.linalg.svd(subset_by_index=...) is not supported yet by kiln")
    outs = bind("svd", [_arr(x)], {"full_matrices": int(bool(full_matrices)), "compute_uv": int(bool(compute_uv))})
    return tuple(outs) if compute_uv else outs[0]


def eigh(x, lower=True, symmetrize_input=True, sort_eigenvalues=True, subset_by_index=None):
    if subset_by_index is not None:
        raise NotImplementedError("lax.linalg.eigh(subset_by_index=...) is not supported yet by kiln")
    x = _arr(x)
    if symmetrize_input and x.ndim >= 2:
        x = _symmetrize(x)
    v, w = bind("eigh", [x], {"lower": int(bool(lower))})
    return v, w


def eig(x, compute_left_eigenvectors=True, compute_right_eigenvectors=True, use_magma=None):
    """Eigenvalues (complex) and, as asked, right eigenvectors of general real square matrices
    (LAPACK geev on the host; on the GPU too, over copies). Left eigenvectors are not supported yet."""
    del use_magma
    if compute_left_eigenvectors:
        raise NotImplementedError("lax.linalg.eig(compute_left_eigenvectors=True) is not supported yet by kiln; "
                                  "pass compute_left_eigenvectors=False")
    x = _arr(x)
    outs = bind("eig", [x], {"vectors": int(bool(compute_right_eigenvectors))})
    return list(outs)


def schur(x, compute_schur_vectors=True, sort_eig_vals=False, select_callable=None):
    """(t, vs): the Schur form (upper triangular for complex x, quasi-triangular for real x) and the
    unitary Schur vectors, x = vs t vs^H (LAPACK gees on the host). Not differentiable."""
    if sort_eig_vals or select_callable is not None:
        raise NotImplementedError("lax.linalg.schur: sorting the eigenvalues is not supported yet by kiln")
    t, vs = bind("schur", [_arr(x)])
    return (t, vs) if compute_schur_vectors else (t,)


def lu(x):
    lu_, piv, perm = bind("lu", [_arr(x)])
    return lu_, piv, perm


def triangular_solve(a, b, left_side=False, lower=False, transpose_a=False, conjugate_a=False,
                     unit_diagonal=False):
    a, b = _arr(a), _arr(b)
    if conjugate_a and a.dtype.kind == "c":  # the primitive takes no conjugation: conj(a) is a itself
        a = lax.conj(a)
    flags = (1 if lower else 0) | (2 if transpose_a else 0) | (4 if unit_diagonal else 0)
    return bind1("triangular_solve", [a, b], {"left_side": int(bool(left_side)), "flags": flags})


# ---------------------------------------------------------------------------------------------------
# Householder form (LAPACK's geqrf / ormqr / orgqr conventions): R on and above the diagonal of
# geqrf's result, the reflectors' vectors below it (each with an implicit 1 on the diagonal), and
# Q = H_0 H_1 ... H_{k-1}, H_i = I - taus[i] v_i v_i^H. Written as a loop over the k reflectors on
# whole (batched) matrices: the small systems lineax's QR solver meets, not a blocked LAPACK.

def _householder_step(a, j, rows):
    """Reflector j of a (..., m, n) mid-factorization: (alpha, beta, tau, v) as LAPACK's larfg."""
    from kiln import numpy as jnp
    col = lax.dynamic_index_in_dim(a, j, axis=a.ndim - 1, keepdims=False)  # (..., m)
    at_j, below = rows == j, rows > j
    alpha = jnp.sum(jnp.where(at_j, col, 0), axis=-1)
    x = jnp.where(below, col, 0)
    xnorm = jnp.sqrt(jnp.sum(jnp.real(x * jnp.conj(x)), axis=-1))
    norm = jnp.sqrt(xnorm * xnorm + jnp.real(alpha * jnp.conj(alpha)))
    beta = jnp.where(jnp.real(alpha) >= 0, -norm, norm).astype(a.dtype)  # -sign(Re alpha) ||x||
    trivial = (xnorm == 0) & (jnp.imag(alpha) == 0) if a.dtype.kind == "c" else xnorm == 0
    safe = jnp.where(trivial, 1, beta)
    tau = jnp.where(trivial, 0, (beta - alpha) / safe).astype(a.dtype)
    scale = jnp.where(trivial, 1, alpha - beta)
    v = jnp.where(at_j, 1, jnp.where(below, col / scale[..., None], 0)).astype(a.dtype)
    return col, jnp.where(trivial, alpha, beta), tau, v


def geqrf(a):
    """(h, taus): a's QR in LAPACK's geqrf form (as jax.lax.linalg.geqrf): R on and above h's
    diagonal, the Householder vectors below it, taus their scales; a is (..., m, n)."""
    from kiln import numpy as jnp
    a = _arr(a)
    if a.ndim < 2 or a.dtype.kind not in "fc":
        raise TypeError(f"lax.linalg.geqrf: expects a floating or complex array of at least 2 dimensions, got "
                        f"{a.dtype.name}{list(a.shape)}")
    m, n = a.shape[-2:]
    k = min(m, n)
    rows, cols, ks = jnp.arange(m), jnp.arange(n), jnp.arange(k)

    def step(j, state):
        h, taus = state
        col, diag, tau, v = _householder_step(h, j, rows)
        vh_h = jnp.sum(jnp.conj(v)[..., :, None] * h, axis=-2)  # v^H h, (..., n)
        updated = h - jnp.conj(tau)[..., None, None] * v[..., :, None] * vh_h[..., None, :]  # H^H h
        newcol = jnp.where(rows == j, diag[..., None], jnp.where(rows > j, v, col))
        h = jnp.where(cols > j, updated, jnp.where(cols == j, newcol[..., :, None], h))
        taus = jnp.where(ks == j, tau[..., None], taus)
        return h, taus
    taus = jnp.zeros(a.shape[:-2] + (k,), a.dtype)
    return lax.fori_loop(0, k, step, (a, taus))


def ormqr(a, taus, c, *, left=True, transpose=False):
    """Q @ c (left) or c @ Q (right) for the Q of geqrf's (a, taus), without forming Q; Q^H in
    place of Q when transpose (as jax.lax.linalg.ormqr)."""
    from kiln import numpy as jnp
    a, taus, c = _arr(a), _arr(taus), _arr(c)
    m, k = a.shape[-2], taus.shape[-1]
    if (c.shape[-2] if left else c.shape[-1]) != m:
        raise ValueError(f"lax.linalg.ormqr: c of shape {tuple(c.shape)} does not match the {m} rows of the reflectors "
                         f"(left={left})")
    dt = jnp.result_type(a.dtype, c.dtype)
    a, taus, c = a.astype(dt), taus.astype(dt), c.astype(dt)
    rows = jnp.arange(m)
    backward = left != transpose  # Q c and c Q^H apply the last reflector first

    def step(i, c):
        j = k - 1 - i if backward else i
        col = lax.dynamic_index_in_dim(a, j, axis=a.ndim - 1, keepdims=False)
        v = jnp.where(rows == j, 1, jnp.where(rows > j, col, 0)).astype(dt)
        tau = lax.dynamic_index_in_dim(taus, j, axis=taus.ndim - 1, keepdims=False)
        if transpose:
            tau = jnp.conj(tau)
        if left:  # H c = c - tau v (v^H c)
            w = jnp.sum(jnp.conj(v)[..., :, None] * c, axis=-2)
            return c - tau[..., None, None] * v[..., :, None] * w[..., None, :]
        w = jnp.sum(c * v[..., None, :], axis=-1)  # c H = c - tau (c v) v^H
        return c - tau[..., None, None] * w[..., :, None] * jnp.conj(v)[..., None, :]
    return lax.fori_loop(0, k, step, c)


def householder_product(a, taus):
    """The first n columns of Q for geqrf's (a, taus), a (..., m, n) (as LAPACK's orgqr)."""
    from kiln import numpy as jnp
    a = _arr(a)
    m, n = a.shape[-2:]
    if m < n:
        raise ValueError(f"lax.linalg.householder_product: the first argument must have at least as many rows as "
                         f"columns, got shape {tuple(a.shape)}")
    eye = jnp.broadcast_to(jnp.eye(m, n, dtype=a.dtype), a.shape)
    return ormqr(a, taus, eye, left=True, transpose=False)
