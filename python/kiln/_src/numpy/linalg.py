# kiln.numpy products (dot, matmul, einsum, ...) and kiln.numpy.linalg.
# Built only from kiln.lax (dot_general and kiln.lax.linalg's lu/qr/svd/eigh/
# cholesky/triangular_solve), core, dtypes and shape_ops' helpers.
# Complex inputs are not supported: kiln.lax has no conj/real/imag.
import builtins
import collections

import numpy as np

from kiln import lax
from kiln.lax import linalg as lax_linalg
from kiln._src import core, dtypes
from kiln._src.numpy import shape_ops as _s

# Names star-imported into kiln.numpy; the linalg-only names are re-exported
# by kiln/numpy/linalg.py.
__all__ = ["dot", "matmul", "vdot", "vecdot", "inner", "outer", "tensordot", "einsum",
           "kron", "cross"]

LINALG_ALL = ["norm", "vector_norm", "matrix_norm", "solve", "inv", "det", "slogdet",
              "cholesky", "qr", "svd", "svdvals", "eigh", "eigvalsh", "lstsq", "pinv",
              "matrix_rank", "cond", "matrix_power", "multi_dot", "matmul", "outer",
              "tensordot", "cross", "vecdot", "diagonal", "trace", "matrix_transpose",
              "LinAlgError", "SVDResult", "EighResult", "QRResult", "SlogdetResult", "eig", "eigvals",
              "EigResult", "tensorinv", "tensorsolve"]

SVDResult = collections.namedtuple("SVDResult", ["U", "S", "Vh"])
EighResult = collections.namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
EigResult = collections.namedtuple("EigResult", ["eigenvalues", "eigenvectors"])
QRResult = collections.namedtuple("QRResult", ["Q", "R"])
SlogdetResult = collections.namedtuple("SlogdetResult", ["sign", "logabsdet"])


class LinAlgError(ValueError):
    """Raised for linear-algebra argument errors (a ValueError, like numpy's spirit)."""


# ----------------------------------------------------------------------------
# Elementwise helpers (with NumPy broadcasting) used below.

def _bin(fn, x, y):
    x, y = _s.broadcast_arrays(x, y)
    if x.dtype != y.dtype:  # real singular values scaling complex vectors
        dt = np.promote_types(x.dtype, y.dtype)
        x, y = (v if v.dtype == dt else lax.convert_element_type(v, dt) for v in (x, y))
    return fn(x, y)


def _mul(x, y):
    return _bin(lax.mul, x, y)


def _pet(preferred_element_type):
    return None if preferred_element_type is None else np.dtype(
        dtypes.canonicalize_dtype(preferred_element_type))


def _dg(a, b, contract, batch, precision, pet):
    dn = ((tuple(contract[0]), tuple(contract[1])), (tuple(batch[0]), tuple(batch[1])))
    if a.ndim == 0 or b.ndim == 0:  # a scaling: no dims to contract (kiln's dot_general
        if pet is not None and a.dtype != b.dtype:  # gave wrong shapes for 0-d operands); operands
            a, b = _s._convert(a, pet), _s._convert(b, pet)  # of two dtypes go to pet, as dot_general's
        return _finish(_mul(a, b), pet)
    if pet is None:
        return lax.dot_general(a, b, dn, precision=precision)
    return lax.dot_general(a, b, dn, precision=precision, preferred_element_type=pet)


def _operands(opname, a, b, pet):
    """The operands of a contraction, as JAX: promoted to one dtype; but given a preferred_element_type,
    operands of two dtypes are each converted to it (JAX passes them as they are to dot_general, whose
    XLA upcasting does that: float32 [-1.7] . uint32 [3] as int32 is -3, not int32(-5.1))."""
    if pet is not None:
        xs = [x if isinstance(x, core.Array) else _s._promote(opname, x)[0] for x in (a, b)]
        if xs[0].dtype != xs[1].dtype:
            return tuple(_s._convert(x, pet) for x in xs)
    return _s._promote(opname, a, b)


def _finish(x, pet):
    return x if pet is None else _s._convert(x, pet)


# ----------------------------------------------------------------------------
# Products.

def dot(a, b, *, precision=None, preferred_element_type=None):
    pet = _pet(preferred_element_type)
    a, b = _operands("dot", a, b, pet)
    if a.ndim == 0 or b.ndim == 0:
        return _finish(_mul(a, b), pet)
    bax = 0 if b.ndim == 1 else b.ndim - 2
    if a.shape[-1] != b.shape[bax]:
        raise ValueError(f"dot: shapes {a.shape} and {b.shape} not aligned: {a.shape[-1]} "
                         f"(dim {a.ndim - 1}) != {b.shape[bax]} (dim {bax})")
    return _dg(a, b, ((a.ndim - 1,), (bax,)), ((), ()), precision, pet)


def matmul(a, b, *, precision=None, preferred_element_type=None):
    pet = _pet(preferred_element_type)
    a, b = _operands("matmul", a, b, pet)
    for k, x in enumerate((a, b)):
        if x.ndim == 0:
            raise ValueError(f"matmul: input operand {k} does not have enough dimensions "
                             f"(has 0, needs at least 1); shapes {a.shape} and {b.shape}")
    a_vec, b_vec = a.ndim == 1, b.ndim == 1
    a2 = lax.reshape(a, (1,) + a.shape) if a_vec else a
    b2 = lax.reshape(b, b.shape + (1,)) if b_vec else b
    if a2.shape[-1] != b2.shape[-2]:
        raise TypeError(f"matmul: input operand 1 has a mismatch in its core dimension 0 "
                         f"(size {b2.shape[-2]} is different from {a2.shape[-1]}); shapes "
                         f"{a.shape} and {b.shape}")
    if b2.ndim == 2:
        out = _dg(a2, b2, ((a2.ndim - 1,), (0,)), ((), ()), precision, pet)
    else:
        batch = _s._broadcast_shapes("matmul", a2.shape[:-2], b2.shape[:-2])
        a2 = _s.broadcast_to(a2, batch + a2.shape[-2:])
        b2 = _s.broadcast_to(b2, batch + b2.shape[-2:])
        nb = len(batch)
        out = _dg(a2, b2, ((nb + 1,), (nb,)), (range(nb), range(nb)), precision, pet)
    if a_vec:
        out = _s.squeeze(out, out.ndim - 2)
    if b_vec:
        out = _s.squeeze(out, out.ndim - 1)
    return out


def vdot(a, b, *, precision=None, preferred_element_type=None):
    a, b = _s.ravel(a), _s.ravel(b)
    if a.shape != b.shape:
        raise ValueError(f"vdot: arrays of sizes {a.shape[0]} and {b.shape[0]} differ")
    if np.dtype(a.dtype).kind == "c":  # the first argument conjugated, as numpy
        a = lax.conj(a)
    return dot(a, b, precision=precision, preferred_element_type=preferred_element_type)


def vecdot(x1, x2, /, *, axis=-1, precision=None, preferred_element_type=None):
    x1, x2 = _s._promote("vecdot", x1, x2)
    if np.dtype(x1.dtype).kind == "c":  # conj(x1) . x2, as numpy and JAX
        x1 = lax.conj(x1)
    x1, x2 = _s.broadcast_arrays(x1, x2)
    ax = _s._axis(axis, x1.ndim, "vecdot")
    return einsum("...i,...i->...", _s.moveaxis(x1, ax, -1), _s.moveaxis(x2, ax, -1),
                  precision=precision, preferred_element_type=preferred_element_type)


def inner(a, b, *, precision=None, preferred_element_type=None):
    pet = _pet(preferred_element_type)
    a, b = _operands("inner", a, b, pet)
    if a.ndim == 0 or b.ndim == 0:
        return _finish(_mul(a, b), pet)
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"inner: shapes {a.shape} and {b.shape} have different last "
                         f"dimensions ({a.shape[-1]} != {b.shape[-1]})")
    return _dg(a, b, ((a.ndim - 1,), (b.ndim - 1,)), ((), ()), precision, pet)


def outer(a, b, out=None):
    a, b = _s._promote("outer", _s.ravel(a), _s.ravel(b))
    shape = (a.shape[0], b.shape[0])
    times = lax.and_ if a.dtype == np.bool_ else lax.mul  # bools multiply as jnp.multiply does: and
    return times(_s._bcast_dims(a, shape, (0,)), _s._bcast_dims(b, shape, (1,)))


def tensordot(a, b, axes=2, *, precision=None, preferred_element_type=None):
    a, b = _operands("tensordot", a, b, _pet(preferred_element_type))
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        if n < 0 or n > builtins.min(a.ndim, b.ndim):
            raise ValueError(f"tensordot: axes={n} is invalid for shapes {a.shape} and {b.shape}")
        ax_a, ax_b = tuple(range(a.ndim - n, a.ndim)), tuple(range(n))
    else:
        try:
            ax_a, ax_b = axes
        except (TypeError, ValueError):
            raise TypeError("tensordot: axes must be an int or a pair of axis sequences, "
                            f"got {axes!r}") from None
        ax_a = _s._axes(ax_a, a.ndim, "tensordot")
        ax_b = _s._axes(ax_b, b.ndim, "tensordot")
        if len(ax_a) != len(ax_b):
            raise ValueError(f"tensordot: axes {axes} must name as many axes of each operand")
    for i, j in zip(ax_a, ax_b):
        if a.shape[i] != b.shape[j]:
            raise ValueError(f"tensordot: shape mismatch for sum: axis {i} of {a.shape} has "
                             f"size {a.shape[i]} but axis {j} of {b.shape} has size {b.shape[j]}")
    return _dg(a, b, (ax_a, ax_b), ((), ()), precision, _pet(preferred_element_type))


def kron(a, b):
    a, b = _s._promote("kron", a, b)
    nd = builtins.max(a.ndim, b.ndim)
    sa = (1,) * (nd - a.ndim) + a.shape
    sb = (1,) * (nd - b.ndim) + b.shape
    inter = tuple(v for p in zip(sa, sb) for v in p)
    A = _s._bcast_dims(lax.reshape(a, sa), inter, range(0, 2 * nd, 2))
    B = _s._bcast_dims(lax.reshape(b, sb), inter, range(1, 2 * nd, 2))
    return lax.reshape(lax.mul(A, B), tuple(x * y for x, y in zip(sa, sb)))


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = _s._promote("cross", a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("cross: inputs must be arrays of vectors (at least 1-d)")
    a = _s.moveaxis(a, _s._axis(axisa, a.ndim, "cross"), -1)
    b = _s.moveaxis(b, _s._axis(axisb, b.ndim, "cross"), -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise ValueError(f"cross: incompatible dimensions for cross product (dimension must "
                         f"be 2 or 3); got vectors of sizes {a.shape[-1]} and {b.shape[-1]}")

    def comp(x, i):
        if i >= x.shape[-1]:
            return None
        return _s.squeeze(_s._slice_axis(x, i, i + 1, x.ndim - 1), x.ndim - 1)

    def term(x, y, u, v):  # x*y - u*v with missing (z=0) components dropped
        p = None if x is None or y is None else _mul(x, y)
        q = None if u is None or v is None else _mul(u, v)
        if q is None:
            return p if p is not None else _mul(_mul(comp(a, 0), comp(b, 0)), 0)
        if p is None:
            return lax.neg(q)
        return _bin(lax.sub, p, q)

    a0, a1, a2 = (comp(a, i) for i in range(3))
    b0, b1, b2 = (comp(b, i) for i in range(3))
    z = term(a0, b1, a1, b0)
    if a.shape[-1] == 2 and b.shape[-1] == 2:
        return z
    c = _s.broadcast_arrays(term(a1, b2, a2, b1), term(a2, b0, a0, b2), z)
    out = _s.stack(c, axis=_s._axis(axisc, c[0].ndim + 1, "cross"))
    return lax.convert_element_type(out, out.dtype, weak_type=False)  # JAX builds it with array(): strong


def _no_complex(opname, *xs):
    for x in xs:
        if dtypes.issubdtype(np.dtype(x.dtype), np.complexfloating):
            raise NotImplementedError(f"{opname}: complex inputs are not supported yet")


# ----------------------------------------------------------------------------
# einsum

def _interleaved_to_str(args):
    ops, subs = list(args[0::2]), list(args[1::2])
    out = None
    if len(ops) > len(subs):  # trailing output sublist
        out = ops.pop()
    if len(ops) != len(subs):
        raise ValueError("einsum: interleaved operands and sublists do not pair up")
    letters = {}

    def conv(sub):
        s = ""
        for v in sub:
            if v is Ellipsis:
                s += "..."
            else:
                v = int(v)
                if v not in letters:
                    if len(letters) >= 52:
                        raise ValueError("einsum: too many distinct sublist labels (max 52)")
                    letters[v] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[len(letters)]
                s += letters[v]
        return s

    spec = ",".join(conv(s) for s in subs)
    if out is not None:
        spec += "->" + conv(out)
    return spec, ops


def einsum(subscripts, /, *operands, out=None, optimize="auto", precision=None,
           preferred_element_type=None, _dot_general=None):
    if not isinstance(subscripts, str):
        subscripts, operands = _interleaved_to_str((subscripts,) + operands)
    if not operands:
        raise ValueError("einsum: at least one operand is required")
    # As JAX's einsum: the operands keep their dtypes; every contraction is a dot_general with the
    # result type (preferred_element_type, else the operands' promotion), which converts operands of
    # other dtypes to it; a sum over one operand's axis converts only when that type is wider; the
    # result is converted to the result type at the end (bug, issue 32: the operands were promoted
    # first, so a float32 . float16 einsum as int32 computed in float32 and truncated only the sum)
    ops = [_s._asarray(x) for x in operands]
    if preferred_element_type is None:
        pet, weak = dtypes.result_type(*ops, return_weak_type_flag=True)
        pet = np.dtype(pet)
    else:
        pet, weak = _pet(preferred_element_type), False
    spec = subscripts.replace(" ", "")
    if spec.count("->") > 1:
        raise ValueError(f"einsum: subscripts {subscripts!r} contain more than one '->'")
    lhs, out_spec = spec.split("->") if "->" in spec else (spec, None)
    terms = lhs.split(",")
    if len(terms) != len(ops):
        raise ValueError(f"einsum: subscripts {subscripts!r} name {len(terms)} operands but "
                         f"{len(ops)} were given")

    def letters(term, where):
        if term.count("...") > 1:
            raise ValueError(f"einsum: {where} {term!r} has more than one ellipsis")
        bad = [c for c in term.replace("...", "") if c in ".->"]  # JAX takes any other character
        if bad:
            raise ValueError(f"einsum: invalid subscript {bad[0]!r} in {where} {term!r}")
        return term

    n_ell = []
    for term, op in zip(terms, ops):
        letters(term, "operand subscripts")
        named = len(term.replace("...", ""))
        if "..." in term:
            if named > op.ndim:
                raise ValueError(f"einsum: operand of shape {op.shape} has fewer dimensions "
                                 f"than subscripts {term!r}")
            n_ell.append(op.ndim - named)
        else:
            if named != op.ndim:
                raise ValueError(f"einsum: operand subscripts {term!r} name {named} dimensions "
                                 f"but the operand has shape {op.shape}")
            n_ell.append(0)
    m = builtins.max(n_ell)
    ell = [chr(0xE000 + i) for i in range(m)]  # private-use labels for ellipsis dims
    labels = []
    for term, k in zip(terms, n_ell):
        pre, _, post = term.partition("...")
        labels.append(list(pre) + ell[m - k:] + list(post) if "..." in term else list(term))
    counts = collections.Counter(c for ls in labels for c in ls)
    if out_spec is None:
        out_labels = ell + sorted(c for c, n in counts.items() if n == 1 and c not in ell)
    else:
        letters(out_spec, "output subscripts")
        pre, _, post = out_spec.partition("...")
        out_labels = list(pre) + (ell if "..." in out_spec else []) + list(post)
        for c in out_labels:
            if c not in counts:
                raise ValueError(f"einsum: output subscript {c!r} does not appear in the inputs")
        if len(set(out_labels)) != len(out_labels):
            raise ValueError(f"einsum: output subscripts {out_spec!r} repeat a label")
    # Sizes; a size-1 dim broadcasts against the label's other size.
    sizes = {}
    for ls, op in zip(labels, ops):
        for c, d in zip(ls, op.shape):
            if sizes.get(c, 1) == 1:
                sizes[c] = d
            elif d not in (1, sizes[c]):
                name = "ellipsis dimension" if c in ell else f"label {c!r}"
                raise ValueError(f"einsum: size of {name} is {d} in one operand and "
                                 f"{sizes[c]} in another (operand shapes "
                                 f"{[o.shape for o in ops]})")
    terms_ = []
    for ls, op in zip(labels, ops):
        drop = [i for i, c in enumerate(ls) if op.shape[i] == 1 and sizes[c] != 1]
        if drop:
            op = _s.squeeze(op, drop)
            ls = [c for i, c in enumerate(ls) if i not in drop]
        while len(set(ls)) != len(ls):  # repeated label: take the diagonal
            c = next(c for c in ls if ls.count(c) > 1)
            i = ls.index(c)
            j = ls.index(c, i + 1)
            op = _s.diagonal(op, 0, i, j)
            ls = [x for k, x in enumerate(ls) if k not in (i, j)] + [c]
        terms_.append([op, ls])

    def needed(k, extra=()):
        return set(out_labels).union(*[set(t[1]) for i, t in enumerate(terms_)
                                       if i != k and i not in extra])

    def sum_axes(op, axes):
        if axes and np.dtype(dtypes.result_type(op, pet)) != op.dtype:
            op = lax.convert_element_type(op, pet)
        return _s._reduce("sum", op, axes)

    def sum_unneeded(k):
        op, ls = terms_[k]
        keep = needed(k)
        axes = [i for i, c in enumerate(ls) if c not in keep]
        if axes:
            terms_[k] = [sum_axes(op, axes), [c for c in ls if c in keep]]

    for k in range(len(terms_)):
        sum_unneeded(k)
    while len(terms_) > 1:
        best = None
        for i in range(len(terms_)):
            for j in range(i + 1, len(terms_)):
                keep = needed(i, (j,))
                res = [c for c in dict.fromkeys(terms_[i][1] + terms_[j][1]) if c in keep]
                cost = int(np.prod([sizes[c] for c in res], dtype=np.float64))
                shared = len(set(terms_[i][1]) & set(terms_[j][1]))
                key = (cost, -shared)
                if best is None or key < best[0]:
                    best = (key, i, j)
        _, i, j = best
        (a, la), (b, lb) = terms_[i], terms_[j]
        keep = needed(i, (j,))
        both = [c for c in la if c in lb]
        batch = [c for c in both if c in keep]
        contract = [c for c in both if c not in keep]
        res = _dg(a, b, ([la.index(c) for c in contract], [lb.index(c) for c in contract]),
                           ([la.index(c) for c in batch], [lb.index(c) for c in batch]),
                           precision, None if a.dtype == b.dtype == pet else pet)
        rl = batch + [c for c in la if c not in lb] + [c for c in lb if c not in la]
        terms_ = [t for k, t in enumerate(terms_) if k not in (i, j)] + [[res, rl]]
        sum_unneeded(len(terms_) - 1)
    op, ls = terms_[0]
    axes = [i for i, c in enumerate(ls) if c not in out_labels]
    if axes:
        op = sum_axes(op, axes)
        ls = [c for c in ls if c in out_labels]
    for c in out_labels:  # labels only seen with size 1 everywhere were squeezed away
        if c not in ls:
            op = lax.reshape(op, op.shape + (1,))
            ls = ls + [c]
    op = _s.transpose(op, [ls.index(c) for c in out_labels])
    return lax.convert_element_type(op, pet, weak_type=weak)


# ----------------------------------------------------------------------------
# linalg

def _eps(dt):
    return float(dtypes.finfo(np.dtype(dt)).eps)


def _matrix(opname, a, square=False):
    (a,) = _s._promote_inexact(opname, a)
    if a.ndim < 2:
        raise LinAlgError(f"{opname}: {a.ndim}-dimensional array given; array must be at "
                          f"least two-dimensional (got shape {a.shape})")
    if square and a.shape[-1] != a.shape[-2]:
        raise LinAlgError(f"{opname}: last 2 dimensions of the array must be square, got "
                          f"shape {a.shape}")
    return a


def _mT(x):
    return _s.swapaxes(x, -1, -2)


def _mH(x):
    """The conjugate transpose (the transpose of a real x)."""
    t = _mT(x)
    return lax.conj(t) if np.dtype(t.dtype).kind == "c" else t


def _eye_like(a):
    n = a.shape[-1]
    shape = a.shape[:-2] + (n, n)
    eq = lax.eq(lax.broadcasted_iota(np.int32, shape, len(shape) - 2),
                lax.broadcasted_iota(np.int32, shape, len(shape) - 1))
    return lax.convert_element_type(eq, a.dtype)


def _abs(x):
    return lax.abs(x)


def _sum(x, axis, keepdims=False):
    axes = _s._axes(axis, x.ndim, "sum")
    out = _s._reduce("sum", x, axes)
    return _s.expand_dims(out, axes) if keepdims and axes else out


def _max(x, axis, keepdims=False, kind="max", initial=None):
    """max (or min) over axis; `initial` folds in one more value, as JAX's max(..., initial=0) of its norms
    (which also halves the gradient of an all-zero input's tie with it)."""
    axes = _s._axes(axis, x.ndim, kind)
    out = _s._reduce(kind, x, axes)
    if initial is not None:
        out = lax.max(out, lax.full(out.shape, initial, out.dtype))
    return _s.expand_dims(out, axes) if keepdims and axes else out


def solve(a, b):
    a, b = _s._promote_inexact("linalg.solve", a, b)
    a = _matrix("linalg.solve", a, square=True)
    m = a.shape[-1]
    vector = b.ndim == 1
    if vector:
        b = lax.reshape(b, (b.shape[0], 1))
    if b.ndim < 2 or b.shape[-2] != m:
        raise LinAlgError(f"linalg.solve: b of shape {b.shape if not vector else (b.shape[0],)} "
                          f"does not match a of shape {a.shape}; b must be (M,) or (..., M, K) "
                          f"with M = {m}")
    batch = _s._broadcast_shapes("linalg.solve", a.shape[:-2], b.shape[:-2])
    a = _s.broadcast_to(a, batch + a.shape[-2:])
    b = _s.broadcast_to(b, batch + b.shape[-2:])
    lu, _, perm = lax_linalg.lu(a)
    perm = lax.reshape(perm, perm.shape + (1,))
    bp = _s.take_along_axis(b, perm, axis=-2, mode="clip")
    y = lax_linalg.triangular_solve(lu, bp, left_side=True, lower=True, unit_diagonal=True)
    x = lax_linalg.triangular_solve(lu, y, left_side=True, lower=False)
    return _s.squeeze(x, x.ndim - 1) if vector else x


def inv(a):
    a = _matrix("linalg.inv", a, square=True)
    return solve(a, _eye_like(a))


def tensorinv(a, ind=2):
    """The inverse of a as a linear map from its first ind axes' space to its last axes' space:
    tensordot(tensorinv(a, ind), a, ind) is the identity (numpy.linalg.tensorinv)."""
    (a,) = _s._promote_inexact("linalg.tensorinv", a)
    if ind <= 0:
        raise ValueError(f"linalg.tensorinv: ind must be a positive integer, got {ind}")
    rows, cols = a.shape[:ind], a.shape[ind:]
    n = int(np.prod(rows))
    if int(np.prod(cols)) != n:
        raise LinAlgError(f"linalg.tensorinv: a of shape {a.shape} is not square over its first {ind} axes "
                          f"({rows}) and the rest ({cols})")
    return lax.reshape(inv(lax.reshape(a, (n, n))), cols + rows)


def tensorsolve(a, b, axes=None):
    """x with tensordot(a, x, x.ndim) = b, x of shape a.shape[b.ndim:] (numpy.linalg.tensorsolve);
    axes: a's axes moved to the end first."""
    a, b = _s._promote_inexact("linalg.tensorsolve", a, b)
    if axes is not None:
        a = _s.moveaxis(a, axes, tuple(range(a.ndim - len(axes), a.ndim)))
    xshape = a.shape[b.ndim:]
    n = int(np.prod(xshape))
    if int(np.prod(a.shape)) != n * n or int(np.prod(b.shape)) != n:
        raise LinAlgError(f"linalg.tensorsolve: a of shape {a.shape} does not match b of shape {b.shape} "
                          "(a must hold prod(x.shape)**2 elements and b prod(x.shape), x.shape = a.shape[b.ndim:])")
    return lax.reshape(solve(lax.reshape(a, (n, n)), lax.reshape(b, (n,))), xshape)


def _lu_det_parts(opname, a):
    a = _matrix(opname, a, square=True)
    lu, piv, _ = lax_linalg.lu(a)
    d = _s.diagonal(lu, 0, -2, -1)
    moved = lax.ne(piv, lax.broadcasted_iota(piv.dtype, piv.shape, piv.ndim - 1))
    swaps = _s._reduce("sum", _s._convert(moved, np.int32), (piv.ndim - 1,))
    odd = lax.eq(lax.rem(swaps, np.int32(2)), np.int32(1))
    sign = lax.select(odd, lax.full(odd.shape, -1, a.dtype), lax.full(odd.shape, 1, a.dtype))
    return d, sign


def det(a):
    d, sign = _lu_det_parts("linalg.det", a)
    return lax.mul(sign, _s._reduce("prod", d, (d.ndim - 1,)))


def slogdet(a, *, method=None):
    d, sign = _lu_det_parts("linalg.slogdet", a)
    last = (d.ndim - 1,)
    sign = lax.mul(sign, _s._reduce("prod", lax.sign(d), last))
    logabs = _s._reduce("sum", lax.log(lax.abs(d)), last)
    return SlogdetResult(sign, logabs)


def cholesky(a, *, upper=False, symmetrize_input=True):
    a = _matrix("linalg.cholesky", a, square=True)
    low = lax_linalg.cholesky(a)
    return _mH(low) if upper else low


def qr(a, mode="reduced"):
    a = _matrix("linalg.qr", a)
    if mode == "raw":  # LAPACK's form, h in NumPy's (Fortran) order: the reflectors along its rows
        h, taus = lax_linalg.geqrf(a)
        return _mT(h), taus
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"linalg.qr: unsupported mode {mode!r}; expected 'reduced', "
                         "'complete' or 'r'")
    q, r = lax_linalg.qr(a, full_matrices=(mode == "complete"))
    return r if mode == "r" else QRResult(q, r)


def svd(a, full_matrices=True, compute_uv=True, hermitian=False, subset_by_index=None):
    a = _matrix("linalg.svd", a)
    if subset_by_index is not None:
        raise NotImplementedError("linalg.svd: subset_by_index is not supported")
    if not compute_uv:
        return lax_linalg.svd(a, full_matrices=False, compute_uv=False)
    u, s, vh = lax_linalg.svd(a, full_matrices=full_matrices, compute_uv=True)
    return SVDResult(u, s, vh)


def svdvals(x):
    return svd(x, compute_uv=False)


def _uplo(opname, UPLO):
    if UPLO in (None, "L"):
        return True
    if UPLO == "U":
        return False
    raise ValueError(f"{opname}: UPLO must be 'L' or 'U', got {UPLO!r}")


def eigh(a, UPLO=None, symmetrize_input=True):
    a = _matrix("linalg.eigh", a, square=True)
    lower = _uplo("linalg.eigh", UPLO)
    if symmetrize_input:
        a = lax.mul(lax.add(a, _mH(a)), lax.full((), 0.5, a.dtype))
    v, w = lax_linalg.eigh(a, lower=lower)
    return EighResult(w, v)


def eig(a):
    """Eigenvalues w and right eigenvectors v (columns, unit norm) of general square matrices:
    a @ v = v * w. Complex results; LAPACK geev on the host (over copies on the GPU)."""
    a = _matrix("linalg.eig", a, square=True)
    w, v = lax_linalg.eig(a, compute_left_eigenvectors=False)
    return EigResult(w, v)


def eigvals(a):
    """Eigenvalues of general square matrices (complex)."""
    a = _matrix("linalg.eigvals", a, square=True)
    (w,) = lax_linalg.eig(a, compute_left_eigenvectors=False, compute_right_eigenvectors=False)
    return w


def eigvalsh(a, UPLO="L", *, symmetrize_input=True):
    return eigh(a, UPLO, symmetrize_input).eigenvalues


def lstsq(a, b, rcond=None, *, numpy_resid=False):
    a, b = _s._promote_inexact("linalg.lstsq", a, b)
    if a.ndim != 2:
        raise LinAlgError(f"linalg.lstsq: a must be two-dimensional, got shape {a.shape}")
    if b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
        raise LinAlgError(f"linalg.lstsq: b must have shape ({a.shape[0]},) or "
                          f"({a.shape[0]}, K) to match a of shape {a.shape}; got {b.shape}")
    vector = b.ndim == 1
    if vector:
        b = lax.reshape(b, (b.shape[0], 1))
    m, n = a.shape
    u, s, vh = lax_linalg.svd(a, full_matrices=False, compute_uv=True)
    if rcond is None:
        rcond = _eps(a.dtype) * builtins.max(m, n)
    elif not isinstance(rcond, core.Array) and rcond < 0:
        rcond = _eps(a.dtype)
    smax = _max(s, -1, keepdims=True) if s.shape[-1] else s
    cutoff = lax.mul(smax, _s._convert(rcond, s.dtype))
    mask = lax.and_(lax.gt(s, lax.full(s.shape, 0, s.dtype)), lax.ge(s, _s.broadcast_to(cutoff, s.shape)))
    safe = lax.select(mask, s, lax.full(s.shape, 1, s.dtype))
    s_inv = lax.select(mask, lax.div(lax.full(s.shape, 1, s.dtype), safe), lax.full(s.shape, 0, s.dtype))
    hi = lax.Precision.HIGHEST
    uTb = matmul(_mH(u), b, precision=hi)
    x = matmul(_mH(vh), _mul(lax.reshape(s_inv, s_inv.shape + (1,)), uTb), precision=hi)
    rank = _s._reduce("sum", _s._convert(mask, _s._default_int()), (0,))
    resid_full = None
    if numpy_resid:
        r = int(core.concrete_or_error(rank, "linalg.lstsq(numpy_resid=True): rank"))
        if r < n or m <= n:
            resid_full = lax.full((0,), 0, a.dtype)
    if resid_full is None:
        err = lax.sub(b, matmul(a, x, precision=hi))
        resid_full = _s._reduce("sum", lax.mul(err, err), (0,))
    if vector:
        x = _s.ravel(x)
    return x, resid_full, rank, s


def pinv(a, rtol=None, hermitian=False, *, rcond=None):
    a = _matrix("linalg.pinv", a)
    if rcond is not None:
        rtol = rcond
    m, n = a.shape[-2:]
    if rtol is None:
        rtol = 10 * builtins.max(m, n) * _eps(a.dtype)
    u, s, vh = lax_linalg.svd(a, full_matrices=False, compute_uv=True)
    if s.shape[-1] == 0:
        return _mT(lax.full(a.shape, 0, a.dtype))
    cutoff = _mul(_s._convert(rtol, s.dtype), _max(s, -1, keepdims=True))
    cutoff = _s.broadcast_to(cutoff, s.shape)
    keep = lax.gt(s, cutoff)
    safe = lax.select(keep, s, lax.full(s.shape, 1, s.dtype))
    s_inv = lax.select(keep, lax.div(lax.full(s.shape, 1, s.dtype), safe), lax.full(s.shape, 0, s.dtype))
    scaled = _mul(lax.reshape(s_inv, s_inv.shape + (1,)), _mH(u))
    return matmul(_mH(vh), scaled, precision=lax.Precision.HIGHEST)


def matrix_rank(M, rtol=None, *, hermitian=False, tol=None):
    (M,) = _s._promote_inexact("linalg.matrix_rank", M)
    if M.ndim < 2:
        nz = _s._reduce("or", _s._nonzero_mask(M), tuple(range(M.ndim)))
        return _s._convert(nz, _s._default_int())
    s = svd(M, compute_uv=False)
    if tol is not None:
        thresh = _s._convert(tol, s.dtype)
        if thresh.ndim:
            thresh = lax.reshape(thresh, thresh.shape + (1,))
    else:
        if rtol is None:
            rtol = builtins.max(M.shape[-2:]) * _eps(s.dtype)
        r = _s._convert(rtol, s.dtype)
        if r.ndim:
            r = lax.reshape(r, r.shape + (1,))
        thresh = _mul(r, _max(s, -1, keepdims=True))
    big = _bin(lax.gt, s, thresh)
    return _s._reduce("sum", _s._convert(big, _s._default_int()), (s.ndim - 1,))


def cond(x, p=None):
    x = _matrix("linalg.cond", x)
    if p in (None, 2, -2):
        s = svd(x, compute_uv=False)
        hi, lo = _max(s, -1), _max(s, -1, kind="min")
        return lax.div(hi, lo) if p != -2 else lax.div(lo, hi)
    if x.shape[-1] != x.shape[-2]:
        raise LinAlgError(f"linalg.cond: p={p!r} needs square matrices, got shape {x.shape}")
    return lax.mul(norm(x, p, axis=(-2, -1)), norm(inv(x), p, axis=(-2, -1)))


def matrix_power(a, n):
    a = _s._asarray(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise LinAlgError(f"linalg.matrix_power: a must be a (batch of) square matrices, got "
                          f"shape {a.shape}")
    n = _s._static_int(n, "linalg.matrix_power: n")
    if n == 0:
        return _s._convert(_eye_like(a), a.dtype)
    if n < 0:
        a, n = inv(a), -n
    result, base = None, a
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result


def multi_dot(arrays, *, precision=None):
    arrays = list(arrays)
    if len(arrays) < 2:
        raise ValueError("linalg.multi_dot: expecting at least two arrays")
    out = arrays[0]
    for b in arrays[1:]:
        out = matmul(out, b, precision=precision)
    return out


def diagonal(x, /, *, offset=0):
    return _s.diagonal(x, offset, -2, -1)


def trace(x, /, *, offset=0, dtype=None):
    return _s.trace(x, offset, -2, -1, dtype=dtype)


def matrix_transpose(x, /):
    return _s.matrix_transpose(x)


def _vector_norm(x, ord, axes, keepdims):
    ax = axes
    ab = _abs(x)
    if ord is None or ord == 2:
        out = lax.sqrt(_sum(lax.mul(x, x), ax, keepdims))
    elif ord == np.inf:
        out = _max(ab, ax, keepdims, initial=0)
    elif ord == -np.inf:
        out = _max(ab, ax, keepdims, kind="min")
    elif ord == 0:
        out = _sum(_s._convert(_s._nonzero_mask(x), x.dtype), ax, keepdims)
    elif ord == 1:
        out = _sum(ab, ax, keepdims)
    elif isinstance(ord, str):
        raise ValueError(f"linalg.norm: invalid norm order {ord!r} for vectors")
    else:
        p = float(ord)
        powed = lax.pow(ab, lax.full(ab.shape, p, x.dtype))
        out = _sum(powed, ax, keepdims)
        out = lax.pow(out, lax.full(out.shape, 1.0 / p, x.dtype))
    return out


def _matrix_norm(x, ord, axes, keepdims):
    r, c = axes
    if ord is None or ord in ("fro", "f"):
        return lax.sqrt(_sum(lax.mul(x, x), axes, keepdims))
    if ord in (1, -1, np.inf, -np.inf):
        inner_ax, outer_ax = (r, c) if ord in (1, -1) else (c, r)
        kind = "max" if ord in (1, np.inf) else "min"
        s = _sum(_abs(x), inner_ax, keepdims=True)
        out = _max(s, outer_ax, keepdims=True, kind=kind, initial=0 if kind == "max" else None)
        return out if keepdims else _s.squeeze(out, axes)
    if ord in ("nuc", 2, -2):
        y = svd(_s.moveaxis(x, axes, (-2, -1)), compute_uv=False)
        if ord == "nuc":
            y = _sum(y, -1)
        else:
            y = _max(y, -1, kind="max", initial=0) if ord == 2 else _max(y, -1, kind="min")
        return _s.expand_dims(y, axes) if keepdims else y
    raise ValueError(f"linalg.norm: invalid norm order {ord!r} for matrices")


def norm(x, ord=None, axis=None, keepdims=False):
    (x,) = _s._promote_inexact("linalg.norm", x)
    if np.dtype(x.dtype).kind == "c":  # every norm but the spectral ones reads |x| alone
        nd = x.ndim if axis is None else (1 if isinstance(axis, int) else len(axis))
        if not (nd == 2 and ord in ("nuc", 2, -2)):
            x = lax.abs(x)
    if axis is None:
        if ord is None:
            out = lax.sqrt(_s._reduce("sum", lax.mul(x, x), tuple(range(x.ndim))))
            return lax.reshape(out, (1,) * x.ndim) if keepdims else out
        axes = tuple(range(x.ndim))
    else:
        axes = _s._axes(axis, x.ndim, "linalg.norm")
    if len(axes) == 1:
        return _vector_norm(x, ord, axes, keepdims)
    if len(axes) == 2:
        return _matrix_norm(x, ord, axes, keepdims)
    raise ValueError(f"linalg.norm: improper number of axes {axis} for an array of shape "
                     f"{x.shape}; pass one axis for a vector norm or two for a matrix norm")


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    (x,) = _s._promote_inexact("linalg.vector_norm", x)
    if np.dtype(x.dtype).kind == "c":
        x = lax.abs(x)
    if axis is None:
        flat = _s.ravel(x)
        out = _vector_norm(flat, ord, (0,), False)
        return lax.reshape(out, (1,) * x.ndim) if keepdims else out
    return _vector_norm(x, ord, _s._axes(axis, x.ndim, "linalg.vector_norm"), keepdims)


def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    x = _matrix("linalg.matrix_norm", x)
    return _matrix_norm(x, ord, (x.ndim - 2, x.ndim - 1), keepdims)
