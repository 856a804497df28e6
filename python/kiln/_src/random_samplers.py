"""kiln.random's samplers that loop or factor a matrix: gamma (Marsaglia-Tsang rejection, one
while loop per value, as JAX vmaps it) and what is built on it, poisson (Knuth / Hormann's
transformed rejection), binomial (inversion / BTRS), multinomial, multivariate_normal and
orthogonal. Each follows JAX's steps and key splits exactly, so the same keys give JAX's numbers.

Depends on kiln.random for keys, bits and the basic draws; re-exported from there."""

import functools
import math

import numpy as np

from kiln import lax
from kiln import numpy as jnp
from kiln import random as _r
from kiln._src import api, custom, batching, dtypes


def _c(x, v):
    """v as a scalar of x's dtype (jax.lax._const)."""
    return np.array(v, x.dtype)


def _inexact(x):
    """x as an array, integer/bool promoted to the default float (promote_dtypes_inexact)."""
    x = jnp.asarray(x)
    return x if dtypes.is_float_dtype(x.dtype) or x.dtype.kind == "c" else x.astype(dtypes.to_inexact_dtype(x.dtype))


# ---------------------------------------------------------------------------
# Gamma and the samplers built on it

def _gamma_one(key, alpha, log_space):
    """One Gamma(alpha) value (Marsaglia and Tsang): normal proposals x with v = (1 + c x)^3 > 0,
    accepted by the squeeze or the log test; alpha < 1 is boosted to alpha + 1 and scaled back by
    u^(1/alpha) (in log space for loggamma)."""
    dtype = alpha.dtype
    zero, one, minus_one = _c(alpha, 0), _c(alpha, 1), _c(alpha, -1)
    one_over_two, one_over_three, squeeze = _c(alpha, 0.5), _c(alpha, 1.0 / 3.0), _c(alpha, 0.0331)
    boost_mask = lax.ge(alpha, one)
    alpha_orig = alpha
    alpha = lax.select(boost_mask, alpha, lax.add(alpha, one))
    d = lax.sub(alpha, one_over_three)
    c = lax.div(one_over_three, lax.sqrt(d))

    def cond_fn(kXVU):
        _, X, V, U = kXVU
        return lax.bitwise_and(
            lax.ge(U, lax.sub(one, lax.mul(squeeze, lax.mul(X, X)))),
            lax.ge(lax.log(U), lax.add(lax.mul(X, one_over_two), lax.mul(d, lax.add(lax.sub(one, V), lax.log(V))))))

    def next_kxv(kxv):
        k = _r._split(kxv[0])
        x = _r._normal_real(k[1], (), dtype)
        return k[0], x, lax.add(one, lax.mul(x, c))

    def body_fn(kXVU):
        k = _r._split(kXVU[0], (3,))
        _, x, v = lax.while_loop(lambda kxv: lax.le(kxv[2], zero), next_kxv, (k[1], zero, minus_one))
        X = lax.mul(x, x)
        V = lax.mul(lax.mul(v, v), v)
        U = _r._uniform(k[2], (), dtype, 0.0, 1.0)
        return k[0], X, V, U

    k = _r._split(key)
    init = (k[0], lax.full((), 0, dtype), lax.full((), 1, dtype), lax.full((), 2, dtype))  # cond holds at first
    V = lax.while_loop(cond_fn, body_fn, init)[2]
    if log_space:
        u = _r._uniform(k[1], (), dtype, 0.0, 1.0)
        log_samples = lax.neg(lax.neg(lax.log1p(lax.neg(u))))  # -exponential
        log_boost = lax.select(lax.bitwise_or(boost_mask, lax.eq(log_samples, zero)), lax.full((), 0, dtype),
                               lax.mul(log_samples, lax.div(one, alpha_orig)))
        return lax.add(lax.add(lax.log(d), lax.log(V)), log_boost)
    samples = lax.sub(one, _r._uniform(k[1], (), dtype, 0.0, 1.0))
    boost = lax.select(boost_mask, lax.full((), 1, dtype), lax.pow(samples, lax.div(one, alpha_orig)))
    return lax.mul(lax.mul(d, V), boost)


def _gamma(key, a, shape, dtype, log_space):
    """One key per value (split(key, n)), each running its own rejection loop (vmapped, as JAX
    lowers random_gamma)."""
    shape = np.shape(a) if shape is None else shape
    a = lax.convert_element_type(jnp.asarray(a), dtype)
    if a.shape != shape:
        a = jnp.broadcast_to(a, shape)
    n = math.prod(shape)
    if n == 0:
        return jnp.zeros(shape, dtype)
    return _gamma_draws(key, jnp.reshape(a, (n,)), log_space).reshape(shape)


@functools.partial(api.jit, static_argnums=(2,))
def _gamma_draws(key, alphas, log_space):
    return _gamma_diff(key, alphas, log_space)


def _gamma_loop(key, alphas, log_space):
    keys = _r._split(key, alphas.shape)
    return batching.vmap(lambda k, al: _gamma_one(k, al, log_space))(keys, alphas)


# d sample / d alpha as JAX defines it (the sample held at its quantile: lax.random_gamma_grad), not
# the derivative of the rejection loop's arithmetic
_gamma_diff = custom.custom_jvp(_gamma_loop, nondiff_argnums=(2,))


@_gamma_diff.defjvp
def _gamma_diff_jvp(log_space, primals, tangents):
    from kiln.lax import more as lax_more
    key, alphas = primals
    _, dalphas = tangents
    out = _gamma_loop(key, alphas, log_space)
    x = lax.exp(out) if log_space else out
    dx = lax_more.random_gamma_grad(alphas, x)
    if log_space:
        dx = lax.div(dx, x)
    return out, lax.mul(dx, dalphas)


def gamma(key, a, shape=None, dtype=None):
    """Gamma(a) samples (unit scale)."""
    key = _r._check_key(key, "gamma")
    return _gamma(key, a, _r._opt_shape(shape, "gamma"), _r._float_dtype(dtype, "gamma"), False)


def loggamma(key, a, shape=None, dtype=None):
    """log of Gamma(a) samples, computed in log space (exp of it matches gamma's draw)."""
    key = _r._check_key(key, "loggamma")
    return _gamma(key, a, _r._opt_shape(shape, "loggamma"), _r._float_dtype(dtype, "loggamma"), True)


def beta(key, a, b, shape=None, dtype=None):
    """Beta(a, b) samples, from two log-gamma draws scaled by their max."""
    key = _r._check_key(key, "beta")
    dtype = _r._float_dtype(dtype, "beta")
    shape = _r._broadcast_shape("beta", shape, a, b)
    k = _r._split(key)
    a = jnp.broadcast_to(_r._in(a, dtype), shape)
    b = jnp.broadcast_to(_r._in(b, dtype), shape)
    log_gamma_a = _gamma(k[0], a, shape, dtype, True)
    log_gamma_b = _gamma(k[1], b, shape, dtype, True)
    log_max = lax.max(log_gamma_a, log_gamma_b)
    gamma_a = jnp.exp(log_gamma_a - log_max)
    gamma_b = jnp.exp(log_gamma_b - log_max)
    return gamma_a / (gamma_a + gamma_b)


def dirichlet(key, alpha, shape=None, dtype=None):
    """Dirichlet(alpha) samples: a softmax of log-gamma draws over alpha's last axis."""
    key = _r._check_key(key, "dirichlet")
    dtype = _r._float_dtype(dtype, "dirichlet")
    if np.ndim(alpha) < 1:
        raise ValueError(f"random.dirichlet requires alpha.ndim >= 1, got alpha.ndim == {np.ndim(alpha)}")
    batch = np.shape(alpha)[:-1]
    shape = batch if shape is None else _r._shape(shape, "dirichlet")
    alpha = _r._in(alpha, dtype)
    g = _gamma(key, jnp.broadcast_to(alpha, shape + alpha.shape[-1:]), shape + alpha.shape[-1:], dtype, True)
    unnormalized = jnp.exp(g - jnp.max(g, axis=-1, keepdims=True))
    return unnormalized / jnp.sum(unnormalized, axis=-1, keepdims=True)


def chisquare(key, df, shape=None, dtype=None):
    key = _r._check_key(key, "chisquare")
    dtype = _r._float_dtype(dtype, "chisquare")
    shape = _r._broadcast_shape("chisquare", shape, df)
    return _chisquare(key, df, shape, dtype)


def _chisquare(key, df, shape, dtype):
    df = _r._in(df, dtype)
    two = _c(df, 2)
    log_g = _gamma(key, lax.div(df, jnp.broadcast_to(two, df.shape)), shape, dtype, True)
    return lax.mul(jnp.exp(log_g), jnp.broadcast_to(two, shape))


def f(key, dfnum, dfden, shape=None, dtype=None):
    """F(dfnum, dfden) samples, a ratio of scaled chi-square draws."""
    key = _r._check_key(key, "f")
    dtype = _r._float_dtype(dtype, "f")
    shape = _r._broadcast_shape("f", shape, dfnum, dfden)
    dfden, dfnum = _r._in(dfden, dtype), _r._in(dfnum, dtype)
    k = _r._split(key)  # (key_dfd, key_dfn)
    chi2_dfn = _chisquare(k[1], dfnum, shape, dtype)
    chi2_dfd = _chisquare(k[0], dfden, shape, dtype)
    return (chi2_dfn / dfnum) / (chi2_dfd / dfden)


def t(key, df, shape=None, dtype=None):
    """Student's t samples: normal * sqrt((df/2) / Gamma(df/2))."""
    key = _r._check_key(key, "t")
    dtype = _r._float_dtype(dtype, "t")
    shape = _r._broadcast_shape("t", shape, df)
    df = _r._in(df, dtype)
    k = _r._split(key)
    n = _r._normal_real(k[0], shape, dtype)
    half_df = df / _c(df, 2)
    g = _gamma(k[1], half_df, shape, dtype, False)
    return n * jnp.sqrt(half_df / g)


def generalized_normal(key, p, shape=(), dtype=None):
    """Generalized normal samples with shape parameter p: a random sign times Gamma(1/p)^(1/p)."""
    key = _r._check_key(key, "generalized_normal")
    dtype = _r._float_dtype(dtype, "generalized_normal")
    return _generalized_normal(key, p, _r._shape(shape, "generalized_normal"), dtype)


def _generalized_normal(key, p, shape, dtype):
    k = _r._split(key)
    g = _gamma(k[0], 1 / p, shape, dtype, False)
    r = _r.rademacher(k[1], shape, dtype)
    return r * g ** (1 / p)


def ball(key, d, p=2, shape=(), dtype=None):
    """Points uniform in the d-dimensional unit p-norm ball."""
    key = _r._check_key(key, "ball")
    dtype = _r._float_dtype(dtype, "ball")
    shape = _r._shape(shape, "ball")
    d = int(d)
    k = _r._split(key)
    g = _generalized_normal(k[0], p, (*shape, d), dtype)
    e = _r.exponential(k[1], shape, dtype)
    return g / (((jnp.abs(g) ** p).sum(-1) + e) ** (1 / p))[..., None]


# ---------------------------------------------------------------------------
# Poisson

def _poisson_knuth(key, lam, shape, dtype, max_iters):
    """Knuth: count uniforms until their product drops below exp(-lam), all values at once."""
    def body_fn(carry):
        i, k, rng, log_prod = carry
        ks = _r._split(rng)
        k = lax.select(log_prod > -lam, k + 1, k)
        u = _r._uniform(ks[1], shape, np.dtype(np.float32), 0.0, 1.0)
        return i + 1, k, ks[0], log_prod + jnp.log(u)

    def cond_fn(carry):
        i, log_prod = carry[0], carry[3]
        return jnp.any(log_prod > -lam) & (i < max_iters)

    init = (np.int32(0), jnp.zeros(shape, dtype), key, jnp.zeros(shape, np.float32))
    k = lax.while_loop(cond_fn, body_fn, init)[1]
    return (k - 1).astype(dtype)


def _poisson_rejection(key, lam, shape, dtype, max_iters):
    """Hormann's transformed rejection (PTRS), all values at once until every one is accepted."""
    log_lam = lax.log(lam)
    b = 0.931 + 2.53 * lax.sqrt(lam)
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    v_r = 0.9277 - 3.6224 / (b - 2)

    def body_fn(carry):
        i, k_out, accepted, key = carry
        ks = _r._split(key, (3,))
        u = _r._uniform(ks[1], shape, lam.dtype, 0.0, 1.0) - 0.5
        v = _r._uniform(ks[2], shape, lam.dtype, 0.0, 1.0)
        u_shifted = 0.5 - abs(u)
        k = lax.floor((2 * a / u_shifted + b) * u + lam + 0.43)
        s = lax.log(v * inv_alpha / (a / (u_shifted * u_shifted) + b))
        t = -lam + k * log_lam - lax.lgamma(k + 1)
        accept1 = (u_shifted >= 0.07) & (v <= v_r)
        reject = (k < 0) | ((u_shifted < 0.013) & (v > u_shifted))
        accept = accept1 | (~reject & (s <= t))
        return i + 1, lax.select(accept, k, k_out), accepted | accept, ks[0]

    def cond_fn(carry):
        i, _, accepted, _ = carry
        return jnp.any(~accepted) & (i < max_iters)

    init = (np.int32(0), jnp.full(shape, -1, lam.dtype), jnp.full(shape, False), key)
    return lax.while_loop(cond_fn, body_fn, init)[1].astype(dtype)


def poisson(key, lam, shape=None, dtype=None):
    """Poisson(lam) counts, lam taken as float32 (as JAX): Knuth's method where lam < 10, the
    transformed rejection elsewhere; both loops run over every value with the same key."""
    key = _r._check_key(key, "poisson")
    dtype = _r._int_dtype(dtype, "poisson")
    shape = np.shape(lam) if shape is None else _r._shape(shape, "poisson")
    lam = lax.convert_element_type(jnp.broadcast_to(jnp.asarray(lam), shape), np.float32)
    use_knuth = jnp.isnan(lam) | (lam < 10)
    lam_knuth = lax.select(use_knuth, lam, jnp.zeros_like(lam))
    lam_rejection = lax.select(use_knuth, jnp.full_like(lam, 1e5), lam)
    max_iters = dtype.type(dtypes.iinfo(dtype).max)
    result = lax.select(use_knuth, _poisson_knuth(key, lam_knuth, shape, dtype, max_iters),
                        _poisson_rejection(key, lam_rejection, shape, dtype, max_iters))
    return lax.select(lam == 0, jnp.zeros_like(result), result)


# ---------------------------------------------------------------------------
# Binomial and multinomial

_STIRLING_TAIL = (0.0810614667953272, 0.0413406959554092, 0.0276779256849983, 0.02079067210376509,
                  0.0166446911898211, 0.0138761288230707, 0.0118967099458917, 0.0104112652619720,
                  0.00925546218271273, 0.00833056343336287)


def _stirling_approx_tail(k):
    """log k! minus Stirling's approximation: tabulated for k <= 9, else the series (which JAX
    evaluates at k clamped to 9: kept, for the same numbers)."""
    table = jnp.asarray(np.array(_STIRLING_TAIL, k.dtype))
    use_table = k <= 9
    k = lax.clamp(_c(k, 0.0), k, _c(k, 9.0))
    kp1sq = (k + 1) * (k + 1)
    approx = (1.0 / 12 - (1.0 / 360 - 1.0 / 1260 / kp1sq) / kp1sq) / (k + 1)
    return lax.select(use_table, jnp.take(table, jnp.floor(k).astype(np.int32)), approx)


def _binomial_inversion(key, count, prob, shape, dtype, max_iters):
    """Sum geometric gaps until they pass count, all values at once."""
    log1minusprob = jnp.log1p(-prob)

    def body_fn(carry):
        i, num_geom, geom_sum, key = carry
        ks = _r._split(key)  # (subkey, key)
        num_geom_out = lax.select(geom_sum <= count, num_geom + 1, num_geom)
        u = _r._uniform(ks[0], shape, prob.dtype, 0.0, 1.0)
        geom = jnp.ceil(jnp.log(u) / log1minusprob)
        return i + 1, num_geom_out, geom_sum + geom, ks[1]

    def cond_fn(carry):
        i, geom_sum = carry[0], carry[2]
        return jnp.any(geom_sum <= count) & (i < max_iters)

    init = (np.int32(0), jnp.zeros(shape, prob.dtype), jnp.zeros(shape, prob.dtype), key)
    k = lax.while_loop(cond_fn, body_fn, init)[1]
    return (k - 1).astype(dtype)


def _btrs(key, count, prob, shape, dtype, max_iters):
    """Hormann's BTRS transformed rejection, all values at once until every one is accepted."""
    stddev = jnp.sqrt(count * prob * (1 - prob))
    b = 1.15 + 2.53 * stddev
    a = -0.0873 + 0.0248 * b + 0.01 * prob
    c = count * prob + 0.5
    v_r = 0.92 - 4.2 / b
    r = prob / (1 - prob)
    alpha = (2.83 + 5.1 / b) * stddev
    m = jnp.floor((count + 1) * prob)
    st = _stirling_approx_tail

    def body_fn(carry):
        i, k_out, accepted, key = carry
        ks = _r._split(key, (3,))
        u = _r._uniform(ks[1], shape, prob.dtype, 0.0, 1.0)
        v = _r._uniform(ks[2], shape, prob.dtype, 0.0, 1.0)
        u = u - 0.5
        us = 0.5 - jnp.abs(u)
        accept1 = (us >= 0.07) & (v <= v_r)
        k = jnp.floor((2 * a / us + b) * u + c)
        reject = (k < 0) | (k > count)
        v = jnp.log(v * alpha / (a / (us * us) + b))
        ub = ((m + 0.5) * jnp.log((m + 1) / (r * (count - m + 1)))
              + (count + 1) * jnp.log((count - m + 1) / (count - k + 1))
              + (k + 0.5) * jnp.log(r * (count - k + 1) / (k + 1))
              + st(m) + st(count - m) - st(k) - st(count - k))
        accept = accept1 | (~reject & (v <= ub))
        return i + 1, lax.select(accept, k, k_out), accepted | accept, ks[0]

    def cond_fn(carry):
        i, accepted = carry[0], carry[2]
        return jnp.any(~accepted) & (i < max_iters)

    init = (np.int32(0), jnp.full(shape, -1, prob.dtype), jnp.full(shape, False), key)
    return lax.while_loop(cond_fn, body_fn, init)[1].astype(dtype)


def _binomial(key, count, prob, shape, dtype):
    shape = tuple(np.broadcast_shapes(np.shape(count), np.shape(prob))) if shape is None else shape
    prob = _inexact(prob)
    count = jnp.broadcast_to(lax.convert_element_type(jnp.asarray(count), prob.dtype), shape)
    prob = jnp.broadcast_to(prob, shape)
    p_lt_half = prob < 0.5
    q = lax.select(p_lt_half, prob, 1.0 - prob)
    count_nan_or_neg = jnp.isnan(count) | (count < 0.0)
    count_inf = jnp.isinf(count)
    q_is_nan = jnp.isnan(q)
    q_l_0 = q < 0.0
    q = lax.select(q_is_nan | q_l_0, jnp.full_like(q, 0.01), q)
    use_inversion = count_nan_or_neg | (count * q <= 10.0)
    count = jnp.floor(count)
    count_inv = lax.select(use_inversion, count, jnp.full_like(count, 0.0))
    count_btrs = lax.select(use_inversion, jnp.full_like(count, 1e4), count)
    q_btrs = lax.select(use_inversion, jnp.full_like(q, 0.5), q)
    max_iters = dtype.type(dtypes.finfo(dtype).max)
    samples = lax.select(use_inversion, _binomial_inversion(key, count_inv, q, shape, dtype, max_iters),
                         _btrs(key, count_btrs, q_btrs, shape, dtype, max_iters))
    invalid = q_l_0 | q_is_nan | count_nan_or_neg
    samples = lax.select(invalid, jnp.full_like(samples, np.nan), samples)
    samples = lax.select(count_inf & ~invalid, jnp.full_like(samples, np.inf), samples)
    return lax.select(p_lt_half | count_nan_or_neg | q_is_nan | count_inf, samples, count.astype(dtype) - samples)


def binomial(key, n, p, shape=None, dtype=None):
    """Binomial(n, p) counts as floats: inversion where n min(p, 1-p) <= 10, else BTRS."""
    key = _r._check_key(key, "binomial")
    dtype = _r._float_dtype(dtype, "binomial")
    return _binomial(key, n, p, _r._opt_shape(shape, "binomial"), dtype)


def multinomial(key, n, p, *, shape=None, dtype=None, unroll=1):
    """Multinomial(n, p) counts (outcomes on p's last axis): a scan of conditional binomials."""
    key = _r._check_key(key, "multinomial")
    dtype = _r._float_dtype(dtype, "multinomial")
    n, p = _inexact(n), _inexact(p)
    common = dtypes.promote_types(n.dtype, p.dtype)
    n, p = n.astype(common), p.astype(common)
    shape = p.shape if shape is None else _r._shape(shape, "multinomial")
    n = jnp.broadcast_to(n, shape[:-1])
    p = jnp.moveaxis(jnp.broadcast_to(p, shape), -1, 0)
    remaining = lax.cumsum(p, 0, reverse=True)
    ratios = p / jnp.where(remaining == 0, 1, remaining)
    keys = _r._split(key, (ratios.shape[0],))

    def step(remainder, ratio_key):
        ratio, k = ratio_key
        count = _binomial(k, remainder, ratio.clip(0, 1), None, remainder.dtype)
        return remainder - count, count

    _, counts = lax.scan(step, n, (ratios, keys), unroll=unroll)
    return jnp.moveaxis(counts, 0, -1).astype(dtype)


# ---------------------------------------------------------------------------
# Linear algebra

def multivariate_normal(key, mean, cov, shape=None, dtype=None, method="cholesky"):
    """mean + factor @ z for standard normal z, factor from cov by cholesky, eigh or svd."""
    key = _r._check_key(key, "multivariate_normal")
    if method not in ("svd", "eigh", "cholesky"):
        raise ValueError("random.multivariate_normal: method must be one of {'svd', 'eigh', 'cholesky'}")
    mean, cov = _inexact(mean), _inexact(cov)
    common = dtypes.promote_types(mean.dtype, cov.dtype)
    mean, cov = mean.astype(common), cov.astype(common)
    dtype = mean.dtype if dtype is None else _r._float_dtype(dtype, "multivariate_normal")
    if mean.ndim < 1:
        raise ValueError(f"random.multivariate_normal requires mean.ndim >= 1, got mean.ndim == {mean.ndim}")
    if cov.ndim < 2:
        raise ValueError(f"random.multivariate_normal requires cov.ndim >= 2, got cov.ndim == {cov.ndim}")
    n = mean.shape[-1]
    if cov.shape[-2:] != (n, n):
        raise ValueError(f"random.multivariate_normal requires cov.shape == (..., n, n) for n={n}, but got "
                         f"cov.shape == {cov.shape}.")
    shape = _r._broadcast_shape("multivariate_normal", shape, np.empty(mean.shape[:-1]), np.empty(cov.shape[:-2]))
    if method == "svd":
        u, s, _ = jnp.linalg.svd(cov)
        factor = u * jnp.sqrt(s[..., None, :])
    elif method == "eigh":
        w, v = jnp.linalg.eigh(cov)
        factor = v * jnp.sqrt(w[..., None, :])
    else:
        factor = jnp.linalg.cholesky(cov)
    z = _r._normal_real(key, shape + mean.shape[-1:], dtype)
    out = jnp.einsum("...ij,...j->...i", factor, z)
    return jnp.broadcast_to(mean, out.shape) + out  # (explicit: also under jax_numpy_rank_promotion='raise')


def orthogonal(key, n, shape=(), dtype=None, m=None):
    """Haar-random n x m matrices with orthonormal columns (or rows): the QR factor of a normal
    matrix, signs fixed by R's diagonal."""
    key = _r._check_key(key, "orthogonal")
    dtype = _r._float_dtype(dtype, "orthogonal")
    shape = _r._shape(shape, "orthogonal")
    n = int(n)
    m = n if m is None else int(m)
    z = _r._normal_real(key, (*shape, max(n, m), min(n, m)), dtype)
    q, r = jnp.linalg.qr(z)
    d = jnp.diagonal(r, axis1=-2, axis2=-1)
    x = q * jnp.expand_dims(jnp.sign(d), -2)
    return jnp.swapaxes(x, -1, -2) if n < m else x
