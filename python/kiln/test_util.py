"""jax.test_util: derivatives checked against central finite differences, in one random direction
(check_grads, check_jvp, check_vjp), with JAX's step and per-dtype tolerances."""
import functools

import numpy as np

from kiln._src import dtypes as _dtypes
from kiln._src.tree_util import tree_leaves, tree_map

__all__ = ["check_grads", "check_jvp", "check_vjp"]

EPS = 1e-4

# the tolerances JAX's checks use: values compared exactly for integers, and for derivatives
# these, per dtype (both atol and rtol, scaled by the array's size when compared)
_VALUE_TOL = {np.dtype(np.bool_): 0, np.dtype(_dtypes.bfloat16): 1e-2, np.dtype(np.float16): 1e-3,
              np.dtype(np.float32): 1e-6, np.dtype(np.float64): 1e-15, np.dtype(np.complex64): 1e-6,
              np.dtype(np.complex128): 1e-15}
_GRAD_TOL = {np.dtype(_dtypes.bfloat16): 1e-1, np.dtype(np.float16): 1e-2, np.dtype(np.float32): 2e-3,
             np.dtype(np.float64): 1e-5, np.dtype(np.complex64): 1e-3, np.dtype(np.complex128): 1e-5}


def _is_py_scalar(x):
    return isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic)


def _dtype(x):
    if hasattr(x, "dtype"):
        return np.dtype(x.dtype)
    if _is_py_scalar(x):
        return np.dtype({bool: np.bool_, int: np.int64, float: np.float64, complex: np.complex128}[type(x)])
    return np.asarray(x).dtype


def _tol(dtype, tol):
    if tol is not None and not isinstance(tol, dict):
        return tol
    dtype = np.dtype(_dtypes.canonicalize_dtype(dtype))
    table = {**_GRAD_TOL, **{np.dtype(k): v for k, v in (tol or {}).items()}}
    if dtype in table:
        return table[dtype]
    return _VALUE_TOL.get(dtype, 0)


def _merged(tol):
    """tol as the checks take it: None (the gradient table), a number, or the table updated."""
    if tol is None or not isinstance(tol, dict):
        return tol
    return {**_GRAD_TOL, **{np.dtype(k): v for k, v in tol.items()}}


def _host(x):
    a = np.asarray(x)
    if a.dtype == np.dtype(_dtypes.bfloat16):
        a = a.astype(np.float32)
    return a


def _close(xs, ys, atol, rtol, what):
    def one(x, y):
        a, b = _host(x), _host(y)
        assert a.shape == b.shape, f"{what}: shapes differ, {a.shape} and {b.shape}"
        at = max(_tol(_dtype(x), atol), _tol(_dtype(y), atol))
        rt = max(_tol(_dtype(x), rtol), _tol(_dtype(y), rtol))
        kw = {}
        if at:
            kw["atol"] = at * a.size
        if rt:
            kw["rtol"] = rt * b.size
        with np.errstate(invalid="ignore"):
            np.testing.assert_allclose(a, b, err_msg=what, **kw)
    tree_map(one, xs, ys)


def _same_dtypes(xs, ys, what):
    from kiln._src.config import config

    def one(x, y):
        a, b = _dtype(x), _dtype(y)
        if not config.jax_enable_x64:
            a, b = _dtypes.canonicalize_dtype(a), _dtypes.canonicalize_dtype(b)
        assert a == b, f"{what}: dtypes differ, {a} and {b}"
    tree_map(one, xs, ys)


def _random_like(rng, x):
    dt, shape = _dtype(x), np.shape(x)
    r = np.asarray(rng.randn(*shape), dtype=dt)
    if np.issubdtype(dt, np.complexfloating):
        r = r + dt.type(1j) * np.asarray(rng.randn(*shape), dtype=dt)
    return r.item() if _is_py_scalar(x) else r


def _scaled(xs, c):
    def one(x):
        dt = _dtype(x)
        r = np.multiply(np.asarray(x), np.array(c, dtype=dt), dtype=dt)
        return r.item() if _is_py_scalar(x) else r
    return tree_map(one, xs)


def _combine(op, xs, ys):
    def one(x, y):
        r = np.array(op(np.asarray(x), np.asarray(y)), dtype=_dtype(x))
        return r.item() if _is_py_scalar(x) and _is_py_scalar(y) else r
    return tree_map(one, xs, ys)


def _difference(xs, ys):
    """x - y with inf - inf taken as 0 (an infinite value that does not move has no slope)."""
    def one(x, y):
        x, y, dt = _host(x), _host(y), _dtype(x)
        with np.errstate(invalid="ignore"):
            return np.where(np.equal(x, y), np.array(0, dt), np.subtract(x, y, dtype=dt))
    return tree_map(one, xs, ys)


def _numerical_jvp(f, primals, tangents, eps):
    step = _scaled(tangents, eps)
    hi = f(*_combine(np.add, primals, step))
    lo = f(*_combine(np.subtract, primals, step))
    return _scaled(_difference(hi, lo), 0.5 / eps)


def _inner(xs, ys):
    return sum(np.real(np.dot(np.conj(_host(x)).reshape(-1), _host(y).reshape(-1)))
               for x, y in zip(tree_leaves(xs), tree_leaves(ys)))


def _conj(xs):
    return tree_map(lambda x: np.conj(x) if not _is_py_scalar(x) else complex(x).conjugate()
                    if isinstance(x, complex) else x, xs)


def check_jvp(f, f_jvp, args, atol=None, rtol=None, eps=EPS, err_msg=""):
    """Checks f_jvp(args, tangents) (typically functools.partial(jax.jvp, f)) against central
    differences of f in one random direction; AssertionError when they differ."""
    atol, rtol = _merged(atol), _merged(rtol)
    rng = np.random.RandomState(0)
    tangent = tree_map(functools.partial(_random_like, rng), args)
    out, t_out = f_jvp(args, tangent)
    _same_dtypes(out, t_out, f"{err_msg} tangent dtype".strip())
    expected = f(*args)
    _same_dtypes(out, expected, f"{err_msg} primal dtype".strip())
    _close(out, expected, atol, rtol, f"{err_msg} primal".strip())
    _close(t_out, _numerical_jvp(f, args, tangent, eps), atol, rtol, f"{err_msg} tangent".strip())


def check_vjp(f, f_vjp, args, atol=None, rtol=None, eps=EPS, err_msg=""):
    """Checks f_vjp(*args) (typically functools.partial(jax.vjp, f)): <t, vjp(c)> against
    <jvp(t), c> with the JVP from central differences, for random t and c."""
    atol, rtol = _merged(atol), _merged(rtol)
    rng = np.random.RandomState(0)
    out, vjp_fn = f_vjp(*args)
    _close(out, f(*args), atol, rtol, f"{err_msg} primal".strip())
    tangent = tree_map(functools.partial(_random_like, rng), args)
    t_out = _numerical_jvp(f, args, tangent, eps)
    cotangent = tree_map(functools.partial(_random_like, rng), out)
    ct_in = _conj(vjp_fn(_conj(cotangent)))
    _close(_inner(tangent, ct_in), _inner(t_out, cotangent), atol, rtol,
           f"{err_msg} cotangent projection".strip())


def check_grads(f, args, order, modes=("fwd", "rev"), atol=None, rtol=None, eps=None):
    """Checks f's derivatives up to `order` in the given modes ('fwd': jvp, 'rev': vjp, 'lin':
    linearize) against finite differences, as jax.test_util.check_grads."""
    from kiln._src.ad import jvp, linearize, vjp
    args, eps = tuple(args), eps or EPS

    def lin(g, primals, tangents):
        out, g_lin = linearize(g, *primals)
        return out, g_lin(*tangents)

    def check(g, a, k, msg):
        if "fwd" in modes:
            m = f"JVP of {msg}" if msg else "JVP"
            check_jvp(g, functools.partial(jvp, g), a, atol, rtol, eps, m)
            if k > 1:
                check(functools.partial(jvp, g), (a, a), k - 1, m)
        if "rev" in modes:
            m = f"VJP of {msg}" if msg else "VJP"
            check_vjp(g, functools.partial(vjp, g), a, atol, rtol, eps, m)
            if k > 1:
                def g_vjp(*xs):
                    out, back = vjp(g, *xs)
                    return back(out)
                check(g_vjp, a, k - 1, m)
        if "lin" in modes:
            m = f"LIN of {msg}" if msg else "LIN"
            check_jvp(g, functools.partial(lin, g), a, atol, rtol, eps, m)
            if k > 1:
                check(functools.partial(lin, g), (a, a), k - 1, m)
    check(f, args, order, "")
