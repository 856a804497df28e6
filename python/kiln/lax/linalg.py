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
