"""kiln.scipy.optimize: jax.scipy.optimize's minimize (BFGS, and JAX's experimental L-BFGS) with
JAX 0.10.2's algorithms, defaults, stopping tests and status codes, so the iterates agree with JAX's
to rounding (numpyro imports it). Every loop is a lax.while_loop: it runs eagerly and under jit.
Depends on kiln.numpy, kiln.lax and kiln's value_and_grad only."""

from typing import Any, NamedTuple

import numpy as np

from kiln import lax
from kiln import numpy as jnp
from kiln._src.ad import value_and_grad
from kiln._src.numpy import util

__all__ = ["OptimizeResults", "minimize"]

_HIGHEST = lax.Precision.HIGHEST
_LBFGS_NAME = "l-bfgs-experimental-do-not-rely-on-this"


class OptimizeResults(NamedTuple):
    """What minimize returns (JAX's fields). status: 0 converged, 1 maxiter reached; for BFGS
    2 + the last line search's status (3 its zoom failed, 5 it ran out of iterations), -1 undefined;
    for L-BFGS 2 maxfun, 3 maxgrad, 4 too little progress (ftol), 5 line search failed."""
    x: Any
    success: Any
    status: Any
    fun: Any
    jac: Any
    hess_inv: Any
    nfev: Any
    njev: Any
    nit: Any


def _dot(a, b):
    return jnp.dot(a, b, precision=_HIGHEST)


def _as_float(x, dtype):
    return jnp.asarray(x, dtype=dtype)


def _choose(pred, new, old):
    """Fields of `old` (a NamedTuple) replaced by those of the dict `new` where pred holds."""
    return old._replace(**{k: jnp.where(pred, v, getattr(old, k)) for k, v in new.items()})


# ---- the strong-Wolfe line search (Nocedal & Wright, algorithms 3.5 and 3.6) ----

class _Interval(NamedTuple):
    """The zoom's bracket [lo, hi], the point it last discarded (rec, for the cubic step) and the
    accepted step (star); done once a step meets both Wolfe conditions."""
    done: Any
    failed: Any
    j: Any
    a_lo: Any
    phi_lo: Any
    dphi_lo: Any
    a_hi: Any
    phi_hi: Any
    dphi_hi: Any
    a_rec: Any
    phi_rec: Any
    a_star: Any
    phi_star: Any
    dphi_star: Any
    g_star: Any
    nfev: Any


def _cubic_step(a, fa, fpa, b, fb, c, fc):
    """The minimiser of the cubic through (a, fa) with slope fpa at a, (b, fb) and (c, fc);
    NaN when it has none (the caller's bounds test then rejects it)."""
    db, dc = b - a, c - a
    denom = (db * dc) ** 2 * (db - dc)
    rb = fb - fa - fpa * db
    rc = fc - fa - fpa * dc
    cu = (dc ** 2 * rb + (-(db ** 2)) * rc) / denom
    sq = ((-(dc ** 3)) * rb + db ** 3 * rc) / denom
    return a + (-sq + jnp.sqrt(sq * sq - 3. * cu * fpa)) / (3. * cu)


def _quadratic_step(a, fa, fpa, b, fb):
    """The minimiser of the parabola through (a, fa) with slope fpa at a and through (b, fb)."""
    db = b - a
    curv = (fb - fa - fpa * db) / (db ** 2)
    return a - fpa / (2. * curv)


def _zoom(phi, sufficient_decrease_fails, curvature_holds, lo, hi, g0, skip):
    """Algorithm 3.6: shrink the bracket (lo, hi) (each an (a, phi, dphi) triple) by cubic, then
    quadratic interpolation, else bisection, until a step meets the strong Wolfe conditions.
    Fails when the bracket is narrower than 1e-5 (1e-10 in 64 bits) or after 30 steps; JAX's
    bracket width is hi - lo with its sign, so a bracket given high end first fails at once.
    skip: run no step (the line search did not need a zoom)."""
    a_lo, phi_lo, dphi_lo = lo
    a_hi, phi_hi, dphi_hi = hi
    bits = jnp.finfo(a_lo.dtype).bits
    too_narrow = 1e-5 if bits < 64 else 1e-10
    no, zero = jnp.asarray(False), jnp.asarray(0)
    start = _Interval(done=no, failed=no, j=zero, a_lo=a_lo, phi_lo=phi_lo, dphi_lo=dphi_lo,
                      a_hi=a_hi, phi_hi=phi_hi, dphi_hi=dphi_hi,
                      a_rec=(a_lo + a_hi) / 2., phi_rec=(phi_lo + phi_hi) / 2.,
                      a_star=_as_float(1., a_lo.dtype), phi_star=phi_lo, dphi_star=dphi_lo, g_star=g0,
                      nfev=zero)

    def step(s):
        width = s.a_hi - s.a_lo
        left, right = jnp.minimum(s.a_hi, s.a_lo), jnp.maximum(s.a_hi, s.a_lo)
        failed = s.failed | (width <= too_narrow)
        cubic = _cubic_step(s.a_lo, s.phi_lo, s.dphi_lo, s.a_hi, s.phi_hi, s.a_rec, s.phi_rec)
        cubic_margin, quad_margin = 0.2 * width, 0.1 * width
        take_cubic = (s.j > 0) & (cubic > left + cubic_margin) & (cubic < right - cubic_margin)
        quad = _quadratic_step(s.a_lo, s.phi_lo, s.dphi_lo, s.a_hi, s.phi_hi)
        take_quad = ~take_cubic & (quad > left + quad_margin) & (quad < right - quad_margin)
        a_j = jnp.where(take_cubic, cubic, jnp.where(take_quad, quad, (s.a_lo + s.a_hi) / 2.))
        phi_j, dphi_j, g_j = phi(a_j)
        phi_j = phi_j.astype(s.phi_lo.dtype)
        dphi_j = dphi_j.astype(s.dphi_lo.dtype)
        g_j = g_j.astype(s.g_star.dtype)

        # exactly one of: j becomes hi; j is accepted; j becomes lo (and hi the old lo, when the
        # slope at j points back across the bracket)
        to_hi = sufficient_decrease_fails(a_j, phi_j) | (phi_j >= s.phi_lo)
        accept = curvature_holds(dphi_j) & ~to_hi
        to_lo = ~to_hi & ~accept
        flip = to_lo & (dphi_j * (s.a_hi - s.a_lo) >= 0.)
        t = s._replace(done=s.done | accept, failed=failed, j=s.j + 1, nfev=s.nfev + 1)
        t = _choose(to_hi, dict(a_hi=a_j, phi_hi=phi_j, dphi_hi=dphi_j, a_rec=s.a_hi, phi_rec=s.phi_hi), t)
        t = _choose(accept, dict(a_star=a_j, phi_star=phi_j, dphi_star=dphi_j, g_star=g_j), t)
        t = _choose(flip, dict(a_hi=s.a_lo, phi_hi=s.phi_lo, dphi_hi=s.dphi_lo, a_rec=s.a_hi,
                               phi_rec=s.phi_hi), t)
        t = _choose(to_lo & ~flip, dict(a_rec=s.a_lo, phi_rec=s.phi_lo), t)
        t = _choose(to_lo, dict(a_lo=a_j, phi_lo=phi_j, dphi_lo=dphi_j), t)
        # a higher cap than SciPy's, as JAX
        return t._replace(failed=t.failed | (t.j >= 30))

    return lax.while_loop(lambda s: ~s.done & ~skip & ~s.failed, step, start)


class _Search(NamedTuple):
    """The line search's state: step i, the previous trial step (a_prev, phi_prev, dphi_prev) and
    the accepted one (star)."""
    done: Any
    failed: Any
    i: Any
    a_prev: Any
    phi_prev: Any
    dphi_prev: Any
    nfev: Any
    a_star: Any
    phi_star: Any
    dphi_star: Any
    g_star: Any


class _LineSearchResults(NamedTuple):
    failed: Any
    nit: Any
    nfev: Any
    ngev: Any
    k: Any
    a_k: Any
    f_k: Any
    g_k: Any
    status: Any


def _line_search(f, xk, pk, old_fval=None, old_old_fval=None, gfk=None, c1=1e-4, c2=0.9, maxiter=20):
    """Algorithm 3.5 as JAX 0.10.2 runs it: trial steps start at min(1, 1.01 * 2 * (f - f_old) /
    slope) (1 without old_old_fval) and double until one meets the strong Wolfe conditions
    (c1, c2) or brackets one, which _zoom then finds. status: 0 found, 1 zoom failed, 3 maxiter.
    Below 64 bits the step is at least 1e-8 in magnitude (smaller ones stall the minimisers)."""
    xk, pk = util.promote_dtypes_inexact("line_search", xk, pk)

    def phi(t):
        x = xk + jnp.asarray(t, dtype=pk.dtype) * pk
        value, grad = value_and_grad(f)(x)
        return value, jnp.real(_dot(grad, pk)), grad

    given = old_fval is not None and gfk is not None
    if given:
        phi0, gfk = jnp.asarray(old_fval), jnp.asarray(gfk)
        dphi0 = jnp.real(_dot(gfk, pk))
    else:
        phi0, dphi0, gfk = phi(0)
    a_dtype = jnp.result_type(phi0, dphi0)
    if old_old_fval is not None:
        guess = 1.01 * 2 * (phi0 - old_old_fval) / dphi0
        first = jnp.where(guess > 1, 1.0, guess).astype(a_dtype)
    else:
        first = _as_float(1., a_dtype)

    def sufficient_decrease_fails(a, phi_a):
        return phi_a > phi0 + c1 * a * dphi0

    def curvature_holds(dphi_a):
        return jnp.abs(dphi_a) <= -c2 * dphi0

    no = jnp.asarray(False)
    zero_a = _as_float(0., a_dtype)
    start = _Search(done=no, failed=no, i=jnp.asarray(1), a_prev=zero_a, phi_prev=phi0, dphi_prev=dphi0,
                    nfev=jnp.asarray(0 if given else 1), a_star=zero_a, phi_star=phi0, dphi_star=dphi0,
                    g_star=gfk)

    def trial(s):
        a_i = jnp.where(s.i == 1, first, s.a_prev * 2.)
        phi_i, dphi_i, g_i = phi(a_i)
        bracket_left = sufficient_decrease_fails(a_i, phi_i) | ((phi_i >= s.phi_prev) & (s.i > 1))
        accept = curvature_holds(dphi_i) & ~bracket_left
        bracket_right = (dphi_i >= 0.) & ~bracket_left & ~accept
        # one zoom for both brackets: (prev, i) when the function rose, (i, prev) when the slope did
        here, there = (a_i, phi_i, dphi_i), (s.a_prev, s.phi_prev, s.dphi_prev)
        lo = tuple(jnp.where(bracket_left, p, q) for p, q in zip(there, here))
        hi = tuple(jnp.where(bracket_left, p, q) for p, q in zip(here, there))
        zoomed = _zoom(phi, sufficient_decrease_fails, curvature_holds, lo, hi, gfk,
                       ~(bracket_left | bracket_right))
        in_zoom = bracket_left | bracket_right
        t = s._replace(done=s.done | in_zoom | accept, failed=s.failed | (in_zoom & zoomed.failed),
                       nfev=s.nfev + 1 + zoomed.nfev, i=s.i + 1, a_prev=a_i, phi_prev=phi_i, dphi_prev=dphi_i)
        t = _choose(in_zoom, dict(a_star=zoomed.a_star, phi_star=zoomed.phi_star, dphi_star=zoomed.dphi_star,
                                  g_star=zoomed.g_star), t)
        return _choose(accept, dict(a_star=a_i, phi_star=phi_i, dphi_star=dphi_i, g_star=g_i), t)

    s = lax.while_loop(lambda s: ~s.done & (s.i <= maxiter) & ~s.failed, trial, start)
    status = jnp.where(s.failed, 1, jnp.where(s.i > maxiter, 3, 0))
    a_k = s.a_star
    if jnp.finfo(a_k.dtype).bits != 64:
        a_k = jnp.where(jnp.abs(a_k) < 1e-8, jnp.sign(a_k) * 1e-8, a_k)
    return _LineSearchResults(failed=s.failed | ~s.done, nit=s.i - 1, nfev=s.nfev, ngev=s.nfev, k=s.i,
                              a_k=a_k, f_k=s.phi_star, g_k=s.g_star, status=status)


# ---- BFGS (Nocedal & Wright, algorithm 6.1) ----

class _BFGSState(NamedTuple):
    converged: Any
    failed: Any
    k: Any
    nfev: Any
    x: Any
    f: Any
    g: Any
    H: Any
    f_before: Any
    ls_status: Any


def _check_x0(x0, method):
    x0 = jnp.asarray(x0)
    if x0.ndim != 1:
        raise ValueError(f"jax.scipy.optimize.minimize(method={method!r}): x0 must be a 1-D array of shape (n,), "
                         f"got shape {tuple(x0.shape)}; flatten it (jax.flatten_util.ravel_pytree) and "
                         "unflatten inside fun")
    return x0


def _minimize_bfgs(fun, x0, maxiter=None, norm=np.inf, gtol=1e-5, line_search_maxiter=10):
    """BFGS with the inverse-Hessian update, starting from the identity; stops when the gradient's
    `norm` is below gtol, after maxiter (200 per variable) steps, or when a line search fails."""
    if maxiter is None:
        maxiter = np.size(x0) * 200
    n = x0.shape[0]
    f0, g0 = value_and_grad(fun)(x0)
    zero = jnp.asarray(0)
    start = _BFGSState(converged=jnp.linalg.norm(g0, ord=norm) < gtol, failed=jnp.asarray(False), k=zero,
                       nfev=jnp.asarray(1), x=x0, f=f0, g=g0, H=jnp.eye(n, dtype=x0.dtype),
                       f_before=f0 + jnp.linalg.norm(g0) / 2, ls_status=zero)

    def step(s):
        p = -_dot(s.H, s.g)
        ls = _line_search(fun, s.x, p, old_fval=s.f, old_old_fval=s.f_before, gfk=s.g,
                          maxiter=line_search_maxiter)
        dx = ls.a_k * p
        dg = ls.g_k - s.g
        rho = jnp.reciprocal(_dot(dg, dx))
        # H <- (I - rho s y^T) H (I - rho y s^T) + rho s s^T, kept when s.y is 0 (rho not finite)
        w = jnp.eye(n, dtype=rho.dtype) - rho * (dx[:, None] * dg[None, :])
        H = _dot(_dot(w, s.H), w.T) + rho * dx[:, None] * dx[None, :]
        return _BFGSState(converged=jnp.linalg.norm(ls.g_k, ord=norm) < gtol, failed=ls.failed, k=s.k + 1,
                          nfev=s.nfev + ls.nfev, x=s.x + dx, f=ls.f_k, g=ls.g_k,
                          H=jnp.where(jnp.isfinite(rho), H, s.H), f_before=s.f, ls_status=ls.status)

    s = lax.while_loop(lambda s: ~s.converged & ~s.failed & (s.k < maxiter), step, start)
    status = jnp.where(s.converged, 0, jnp.where(s.k == maxiter, 1, jnp.where(s.failed, 2 + s.ls_status, -1)))
    return OptimizeResults(x=s.x, success=s.converged & ~s.failed, status=status, fun=s.f, jac=s.g,
                           hess_inv=s.H, nfev=s.nfev, njev=s.nfev, nit=s.k)


# ---- L-BFGS (Nocedal & Wright, algorithm 7.5; complex x as Sorber et al. 2012) ----

class _LBFGSState(NamedTuple):
    converged: Any
    failed: Any
    k: Any
    nfev: Any
    x: Any
    f: Any
    g: Any
    s_hist: Any  # the last maxcor steps, oldest first (rows of zeros until there are maxcor)
    y_hist: Any  # their gradient changes
    rho_hist: Any  # 1 / Re(y.s)
    gamma: Any  # the initial inverse-Hessian scale, Re(y.s) / |y|^2 of the last step
    status: Any


def _direction(s):
    """The two-loop recursion: -H g with H the L-BFGS inverse-Hessian estimate of the last
    min(k, maxcor) steps (the newest ones are the history's last rows)."""
    m = s.rho_hist.shape[0]
    used = jnp.minimum(s.k, m)
    real = s.rho_hist.dtype

    def newest_first(j, carry):
        q, alphas = carry
        r = m - 1 - j
        a = s.rho_hist[r] * _dot(jnp.conj(s.s_hist[r]), q).real.astype(real)
        return q - a * jnp.conj(s.y_hist[r]), alphas.at[r].set(a)

    q, alphas = lax.fori_loop(0, used, newest_first, (-jnp.conj(s.g), jnp.zeros_like(s.rho_hist)))

    def oldest_first(j, q):
        r = m - used + j
        b = s.rho_hist[r] * _dot(s.y_hist[r], q).real.astype(real)
        return q + (alphas[r] - b) * s.s_hist[r]

    return lax.fori_loop(0, used, oldest_first, s.gamma * q)


def _push(history, row):
    return jnp.roll(history, -1, axis=0).at[-1].set(row)


def _minimize_lbfgs(fun, x0, maxiter=None, norm=np.inf, maxcor=10, ftol=2.220446049250313e-09, gtol=1e-05,
                    maxfun=None, maxgrad=None, maxls=20):
    """JAX's experimental L-BFGS: always takes a first step; stops when the gradient's `norm` is
    below gtol, or (status 1..5, failed) when step k >= maxiter (200 per variable when no limit is
    given) or nfev >= maxfun or the gradient count >= maxgrad was reached before the step, when
    the step lowered f by less than ftol, or when its line search failed."""
    n = x0.shape[0]
    dtype = x0.dtype
    if maxiter is None and maxfun is None and maxgrad is None:
        maxiter = n * 200
    f0, g0 = value_and_grad(fun)(x0)
    no = jnp.asarray(False)
    start = _LBFGSState(converged=no, failed=no, k=jnp.asarray(0), nfev=jnp.asarray(1), x=x0, f=f0, g=g0,
                        s_hist=jnp.zeros((maxcor, n), dtype), y_hist=jnp.zeros((maxcor, n), dtype),
                        rho_hist=jnp.zeros((maxcor,), dtype), gamma=jnp.asarray(1., dtype=g0.dtype),
                        status=jnp.asarray(0))

    def step(s):
        p = _direction(s)
        ls = _line_search(fun, s.x, p, old_fval=s.f, gfk=s.g, maxiter=maxls)
        dx = jnp.asarray(ls.a_k).astype(p.dtype) * p
        dg = ls.g_k - s.g
        ys = jnp.real(_dot(dg, dx))
        rho = jnp.reciprocal(ys).astype(dg.dtype)
        gamma = ys / jnp.real(_dot(jnp.conj(dg), dg))
        # the last test that holds names the reason (line search failure first)
        status = jnp.where(s.f - ls.f_k < ftol, 4, 0)
        for limit, count, code in ((maxgrad, s.nfev, 3), (maxfun, s.nfev, 2), (maxiter, s.k, 1)):
            if limit is not None:
                status = jnp.where(count >= limit, code, status)
        status = jnp.where(ls.failed, 5, status)
        converged = jnp.linalg.norm(ls.g_k, ord=norm) < gtol
        return _LBFGSState(converged=converged, failed=(status > 0) & ~converged, k=s.k + 1,
                           nfev=s.nfev + ls.nfev, x=(s.x + dx).astype(s.x.dtype), f=ls.f_k.astype(s.f.dtype),
                           g=ls.g_k.astype(s.g.dtype), s_hist=_push(s.s_hist, dx), y_hist=_push(s.y_hist, dg),
                           rho_hist=_push(s.rho_hist, rho), gamma=gamma.astype(s.g.dtype),
                           status=jnp.where(converged, 0, status))

    s = lax.while_loop(lambda s: ~s.converged & ~s.failed, step, start)
    return OptimizeResults(x=s.x, success=s.converged & ~s.failed, status=s.status, fun=s.f, jac=s.g,
                           hess_inv=None, nfev=s.nfev, njev=s.nfev, nit=s.k)


def minimize(fun, x0, args=(), *, method, tol=None, options=None):
    """Minimise fun(x, *args) over a 1-D x from x0, as jax.scipy.optimize.minimize: method "BFGS"
    (options maxiter, norm, gtol, line_search_maxiter) or JAX's "l-bfgs-experimental-do-not-rely-
    on-this" (options maxiter, norm, maxcor, ftol, gtol, maxfun, maxgrad, maxls); gradients by
    value_and_grad. tol is accepted and, as in JAX, unused (set gtol in options)."""
    options = {} if options is None else options
    if not isinstance(args, tuple):
        raise TypeError(f"args argument to jax.scipy.optimize.minimize must be a tuple, got {args}")

    def objective(x):
        return fun(x, *args)

    kind = method.lower()
    if kind == "bfgs":
        return _minimize_bfgs(objective, _check_x0(x0, method), **options)
    if kind == _LBFGS_NAME:
        return _minimize_lbfgs(objective, _check_x0(x0, method), **options)
    raise ValueError(f"Method {method} not recognized")
