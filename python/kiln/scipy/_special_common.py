"""Helpers shared by kiln.scipy.special's modules: argument checks, polynomial and Chebyshev evaluation,
and the masked elementwise loop that series and continued fractions run in. Built on kiln.lax and
kiln.numpy only; nothing here is public API.
"""

import numpy as np

from kiln._src import dtypes as _dtypes  # finfo that knows bfloat16 on every NumPy (ml_dtypes.finfo)

from kiln import lax
from kiln import numpy as jnp
from kiln._src.numpy.util import promote_args_inexact, is_complex_dtype


def real_args(name, *args):
    """promote_args_inexact, refusing complex inputs as JAX does for the real-only functions."""
    args = promote_args_inexact(name, *args)
    if args and is_complex_dtype(args[0].dtype):
        raise ValueError(f"{name} does not support complex-valued inputs.")
    return args


def float_only(name, x):
    """x as an Array whose dtype must already be float32 or float64 (ndtr, ndtri, log_ndtr, spence: as JAX,
    integer inputs are refused rather than promoted)."""
    x = jnp.asarray(x)
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"{name}: x.dtype={x.dtype} is not supported, see docstring for supported types.")
    return x


def eps(x):
    return float(_dtypes.finfo(x.dtype).eps)


def horner(coeffs, x):
    """sum(coeffs[i] * x**(n-1-i)): np.polyval's order, highest degree first; coeffs are Python floats."""
    acc = lax.full_like(x, coeffs[0])
    for c in coeffs[1:]:
        acc = acc * x + c
    return acc


def chebyshev(coeffs, x):
    """Cephes' chbevl: a Chebyshev series in x (x in [-2, 2]), coefficients highest degree first, the
    constant term halved."""
    b0, b1, b2 = lax.full_like(x, coeffs[0]), lax.full_like(x, 0), lax.full_like(x, 0)
    for c in coeffs[1:]:
        b2, b1 = b1, b0
        b0 = x * b1 - b2 + c
    return (b0 - b2) * 0.5


def iterate(step, state, active, max_iter):
    """Runs `state, more = step(state)` elementwise while any element is active and fewer than max_iter
    steps have run. An active element takes each step's new state; it stops being active once its `more`
    is False (the step that converged is kept). Inactive elements never change, so callers can start some
    elements inactive (another branch computes them) and their garbage never reaches the result.
    state: a tuple of arrays of active's shape. Returns the final state tuple."""
    def cond(carry):
        i, act, _ = carry
        return lax.bitwise_and(lax.lt(i, np.int32(max_iter)), jnp.any(act))

    def body(carry):
        i, act, st = carry
        new, more = step(st)
        st = tuple(jnp.where(act, n, o) for n, o in zip(new, st))
        return i + np.int32(1), lax.bitwise_and(act, more), st

    return lax.while_loop(cond, body, (np.int32(0), active, tuple(state)))[2]


def safe(cond, x, fill):
    """x where cond holds, else `fill`: the input of a branch that only cond's elements use, kept in the
    branch's domain elsewhere so no nan or inf is computed (and none reaches a gradient)."""
    return jnp.where(cond, x, lax.full_like(x, fill))

