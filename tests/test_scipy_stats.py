"""kiln.scipy.stats against scipy.stats in float64 (issue 14, item 5): every function of every distribution
module on random inputs in its domain, the summary statistics (mode, rankdata, sem), gaussian_kde;
gradients against finite differences; jit and vmap against eager; the names and signatures as JAX's."""
import inspect
import math

import numpy as np
import pytest
import scipy.stats as sst

import kiln
import kiln.scipy.stats as ks

N = 40


@pytest.fixture(autouse=True)
def _float64_everywhere(x64):
    """Every comparison here runs in 64-bit mode (x64 fixture: conftest.py)."""


def _close(got, want, rtol=1e-12, atol=1e-14):
    np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=atol, equal_nan=True)


def _u(lo, hi):
    return lambda rng: rng.uniform(lo, hi, N)


def _k(lo, hi):
    return lambda rng: rng.integers(lo, hi, N).astype(float)


def _const(v):
    return lambda rng: np.full(N, float(v))


X, LOC, SCALE, Q = _u(-5, 5), _u(-1, 1), _u(0.5, 2), _u(0.01, 0.99)
CONTINUOUS = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]

# (module, functions, samplers of the arguments after the first, sampler of the first argument)
TABLE = [
    ("norm", CONTINUOUS, [LOC, SCALE], X),
    ("norm", ["ppf", "isf"], [LOC, SCALE], Q),
    ("gamma", CONTINUOUS, [_u(0.5, 5), LOC, SCALE], _u(-1, 15)),
    ("beta", CONTINUOUS, [_u(0.5, 5), _u(0.5, 5), _const(0), _const(1)], _u(0, 1)),
    ("beta", ["logpdf", "cdf", "sf"], [_u(0.5, 5), _u(0.5, 5), _u(-0.5, 0), _u(1, 2)], _u(-0.2, 1.8)),
    ("chi2", CONTINUOUS, [_u(1, 10), LOC, SCALE], _u(0, 20)),
    ("t", ["logpdf", "pdf"], [_u(1, 10), LOC, SCALE], X),
    ("cauchy", CONTINUOUS, [LOC, SCALE], X),
    ("cauchy", ["ppf", "isf"], [LOC, SCALE], Q),
    ("logistic", ["logpdf", "pdf", "cdf", "sf"], [LOC, SCALE], X),
    ("logistic", ["ppf", "isf"], [LOC, SCALE], Q),
    ("uniform", ["logpdf", "pdf", "cdf"], [_u(-1, 0), _u(1, 2)], _u(-1.5, 2.5)),
    ("uniform", ["ppf"], [_u(-1, 0), _u(1, 2)], _u(-0.2, 1.2)),
    ("expon", CONTINUOUS, [LOC, SCALE], _u(-1, 10)),
    ("expon", ["ppf"], [LOC, SCALE], Q),
    ("laplace", ["logpdf", "pdf", "cdf"], [LOC, SCALE], X),
    ("pareto", CONTINUOUS, [_u(0.5, 4), _u(-0.5, 0), _u(0.5, 1)], _u(0, 10)),
    ("pareto", ["ppf"], [_u(0.5, 4), _u(-0.5, 0), _u(0.5, 1)], Q),
    ("gennorm", ["logpdf", "pdf", "cdf"], [_u(0.5, 4)], X),
    ("vonmises", ["logpdf", "pdf"], [_u(0.1, 50)], _u(-math.pi, math.pi)),
    ("wrapcauchy", ["logpdf", "pdf"], [_u(0.05, 0.95)], _u(0, 2 * math.pi)),
    ("gumbel_r", CONTINUOUS, [LOC, SCALE], X),
    ("gumbel_l", CONTINUOUS, [LOC, SCALE], X),
    ("gumbel_r", ["ppf"], [LOC, SCALE], Q),
    ("gumbel_l", ["ppf"], [LOC, SCALE], Q),
    ("truncnorm", CONTINUOUS, [_u(-3, 0), _u(0.5, 3), LOC, SCALE], _u(-4, 4)),
    ("truncnorm", CONTINUOUS, [_u(5, 6), _u(7, 9), _const(0), _const(1)], _u(5, 9)),  # the far upper tail
    ("truncnorm", CONTINUOUS, [_u(-9, -7), _u(-6, -5), _const(0), _const(1)], _u(-9, -5)),  # the far lower tail
    ("poisson", ["logpmf", "pmf", "cdf"], [_u(0.5, 15), _k(-2, 3)], _k(-1, 25)),
    ("bernoulli", ["logpmf", "pmf"], [_u(0.05, 0.95), _k(0, 2)], _k(0, 3)),
    ("bernoulli", ["cdf"], [_u(0.05, 0.95)], _u(-1, 2)),
    ("bernoulli", ["ppf"], [_u(0.05, 0.95)], Q),
    ("binom", ["logpmf", "pmf"], [_k(1, 30), _u(0.05, 0.95), _k(-2, 3)], _k(-3, 30)),
    ("nbinom", ["logpmf", "pmf"], [_u(0.5, 10), _u(0.05, 0.95), _k(-2, 3)], _k(-3, 30)),
    ("geom", ["logpmf", "pmf"], [_u(0.05, 0.95), _k(-2, 3)], _k(-2, 20)),
    ("betabinom", ["logpmf", "pmf"], [_k(1, 30), _u(0.5, 5), _u(0.5, 5), _k(-2, 3)], _k(-3, 30)),
]
CASES = [(m, f, rest, first) for m, fs, rest, first in TABLE for f in fs]


@pytest.mark.parametrize("module,fn,rest,first", CASES, ids=[f"{c[0]}.{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_distribution_matches_scipy(module, fn, rest, first):
    rng = np.random.default_rng(len(module) * 31 + len(fn))
    args = [first(rng)] + [s(rng) for s in rest]
    with np.errstate(all="ignore"):
        want = getattr(getattr(sst, module), fn)(*args)
    rtol = 1e-9 if module in ("truncnorm", "betabinom") else 1e-11
    _close(getattr(getattr(ks, module), fn)(*args), want, rtol=rtol, atol=1e-13)


def test_poisson_entropy():
    mu = np.concatenate([np.random.default_rng(1).uniform(0, 150, N - 2), [0.0, 5.0]])
    _close(ks.poisson.entropy(mu), sst.poisson.entropy(mu), rtol=1e-6, atol=1e-12)  # JAX's 1/(12 mu) above 100
    assert ks.poisson.entropy(np.ones((2, 3)), np.zeros((4, 1, 1))).shape == (4, 2, 3)


def test_multivariate_distributions():
    rng = np.random.default_rng(2)
    alpha = rng.uniform(0.5, 4, 5)
    x = rng.dirichlet(alpha, 10).T  # components on axis 0
    _close(ks.dirichlet.logpdf(x, alpha), sst.dirichlet.logpdf(x, alpha), 1e-12)
    _close(ks.dirichlet.pdf(x[:-1], alpha), sst.dirichlet.pdf(x, alpha), 1e-12)
    assert np.isneginf(np.asarray(ks.dirichlet.logpdf(x[:, 0] * 2, alpha)))
    p = rng.dirichlet(np.ones(5))
    counts = rng.multinomial(12, p)
    _close(ks.multinomial.logpmf(counts, 12, p), sst.multinomial.logpmf(counts, 12, p), 1e-12)
    _close(ks.multinomial.pmf(counts, 11, p), 0.0)
    mean, a = rng.standard_normal(3), rng.standard_normal((3, 3))
    cov = a @ a.T + 3 * np.eye(3)
    xs = rng.standard_normal((10, 3))
    _close(ks.multivariate_normal.logpdf(xs, mean, cov), sst.multivariate_normal.logpdf(xs, mean, cov), 1e-12)
    _close(ks.multivariate_normal.pdf(xs, mean, cov), sst.multivariate_normal.pdf(xs, mean, cov), 1e-12)
    _close(ks.multivariate_normal.logpdf(xs, mean, 2.0), sst.multivariate_normal.logpdf(xs, mean, 2.0), 1e-12)
    _close(ks.multivariate_normal.logpdf(xs[:, 0], 0.5, 2.0), sst.norm.logpdf(xs[:, 0], 0.5, math.sqrt(2.0)), 1e-12)
    with pytest.raises(NotImplementedError, match="allow_singular"):
        ks.multivariate_normal.logpdf(xs, mean, cov, allow_singular=True)


def test_mode_rankdata_sem():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 5, (6, 7)).astype(float)
    for axis in (0, None):
        got, want = ks.mode(a, axis=axis), sst.mode(a, axis=axis)
        _close(got.mode, want.mode, 0)
        _close(got.count, want.count, 0)
    assert ks.mode(a, axis=1, keepdims=True).mode.shape == (6, 1)
    for method in ("average", "min", "max", "dense", "ordinal"):
        _close(ks.rankdata(a, method), sst.rankdata(a, method), 0)
    _close(ks.rankdata(a, "min", axis=1), sst.rankdata(a, "min", axis=1), 0)
    with_nan = a.copy()
    with_nan[2, 3] = np.nan
    _close(ks.rankdata(with_nan, axis=1), sst.rankdata(with_nan, axis=1), 0)
    b = rng.standard_normal((6, 7))
    _close(ks.sem(b), sst.sem(b), 1e-13)
    _close(ks.sem(b, axis=None, ddof=0), sst.sem(b, axis=None, ddof=0), 1e-13)
    b[1, 1] = np.nan
    _close(ks.sem(b, axis=1, nan_policy="omit"), sst.sem(b, axis=1, nan_policy="omit"), 1e-13)
    with pytest.raises(NotImplementedError):
        ks.mode(a, nan_policy="omit")
    with pytest.raises(ValueError, match="unknown method"):
        ks.rankdata(a, "first")


def test_gaussian_kde():
    rng = np.random.default_rng(4)
    data, weights = rng.standard_normal((2, 30)), rng.uniform(0.5, 2, 30)
    points = rng.standard_normal((2, 10))
    for kwargs in ({"bw_method": "silverman"}, {"bw_method": 0.4, "weights": weights}):
        got, want = ks.gaussian_kde(data, **kwargs), sst.gaussian_kde(data, **kwargs)
        _close(got.covariance, want.covariance, 1e-12)
        _close(got.evaluate(points), want.evaluate(points), 1e-12)
        _close(got.logpdf(points), want.logpdf(points), 1e-12)
        _close(got.integrate_gaussian(np.zeros(2), np.eye(2)), want.integrate_gaussian(np.zeros(2), np.eye(2)), 1e-12)
    other = rng.standard_normal((2, 20)) + 1
    _close(ks.gaussian_kde(data).integrate_kde(ks.gaussian_kde(other)),
           sst.gaussian_kde(data).integrate_kde(sst.gaussian_kde(other)), 1e-12)
    one = ks.gaussian_kde(data[0])
    _close(one.integrate_box_1d(-0.5, 1.0), sst.gaussian_kde(data[0]).integrate_box_1d(-0.5, 1.0), 1e-12)
    _close(one(points[0]), sst.gaussian_kde(data[0])(points[0]), 1e-12)
    # a pytree: it goes through jit as an argument
    _close(kiln.jit(lambda k, p: k.evaluate(p))(ks.gaussian_kde(data), points),
           sst.gaussian_kde(data).evaluate(points), 1e-12)
    with pytest.raises(NotImplementedError):
        one.integrate_box([0], [1])
    try:
        draws = ks.gaussian_kde(data).resample(kiln.random.PRNGKey(0), (500,))
    except NotImplementedError:  # kiln.random.choice / multivariate_normal not there yet
        return
    assert draws.shape == (2, 500)
    _close(np.mean(np.asarray(draws), axis=1), data.mean(axis=1), 0, 0.2)


def _fd(f, v, eps=1e-6):
    return (f(v + eps) - f(v - eps)) / (2 * eps)


def test_gradients_against_finite_differences():
    rng = np.random.default_rng(5)
    x, loc, scale = X(rng), LOC(rng), SCALE(rng)
    gx, gl, gs = kiln.vmap(kiln.grad(ks.norm.logpdf, (0, 1, 2)))(x, loc, scale)
    _close(gx, _fd(lambda v: sst.norm.logpdf(v, loc, scale), x), 1e-7, 1e-9)
    _close(gl, _fd(lambda v: sst.norm.logpdf(x, v, scale), loc), 1e-7, 1e-9)
    _close(gs, _fd(lambda v: sst.norm.logpdf(x, loc, v), scale), 1e-7, 1e-9)
    _close(kiln.vmap(kiln.grad(ks.norm.logcdf))(3 * x), _fd(sst.norm.logcdf, 3 * x), 1e-6, 1e-9)
    y, a = rng.uniform(0.1, 10, N), rng.uniform(0.5, 5, N)
    gy, ga = kiln.vmap(kiln.grad(ks.gamma.cdf, (0, 1)))(y, a)
    _close(gy, _fd(lambda v: sst.gamma.cdf(v, a), y), 1e-6, 1e-10)
    _close(ga, _fd(lambda v: sst.gamma.cdf(y, v), a), 1e-6, 1e-10)
    t, b = rng.uniform(0.05, 0.95, N), rng.uniform(0.5, 5, N)
    _close(kiln.vmap(kiln.grad(ks.beta.cdf))(t, a, b), _fd(lambda v: sst.beta.cdf(v, a, b), t), 1e-6, 1e-10)
    df = rng.uniform(1, 10, N)
    _close(kiln.vmap(kiln.grad(ks.t.logpdf, 1))(x, df), _fd(lambda v: sst.t.logpdf(x, v), df), 1e-6, 1e-10)


def test_jit_and_vmap_match_eager():
    rng = np.random.default_rng(6)
    x = rng.uniform(-40, 5, (4, 10))
    _close(kiln.jit(ks.norm.logcdf)(x), sst.norm.logcdf(x), 1e-10)  # JAX's 3-term series below -20
    means = rng.standard_normal((4, 3))
    xs = rng.standard_normal((10, 3))
    got = kiln.vmap(ks.multivariate_normal.logpdf, (None, 0, None))(xs, means, np.eye(3))
    _close(got, np.stack([sst.multivariate_normal.logpdf(xs, m, np.eye(3)) for m in means]), 1e-12)
    k, mu = rng.integers(0, 20, (4, 10)).astype(float), rng.uniform(1, 10, (4, 10))
    _close(kiln.jit(kiln.vmap(ks.poisson.cdf))(k, mu), sst.poisson.cdf(k, mu), 1e-11)


# jax.scipy.stats' modules and their functions (JAX 0.10.2), so the suite checks the API without JAX
JAX_STATS = {
    "bernoulli": ["cdf", "logpmf", "pmf", "ppf"], "beta": CONTINUOUS, "betabinom": ["logpmf", "pmf"],
    "binom": ["logpmf", "pmf"], "cauchy": CONTINUOUS + ["isf", "ppf"], "chi2": CONTINUOUS,
    "dirichlet": ["logpdf", "pdf"], "expon": CONTINUOUS + ["ppf"], "gamma": CONTINUOUS,
    "gennorm": ["cdf", "logpdf", "pdf"], "geom": ["logpmf", "pmf"], "gumbel_l": CONTINUOUS + ["ppf"],
    "gumbel_r": CONTINUOUS + ["ppf"], "laplace": ["cdf", "logpdf", "pdf"],
    "logistic": ["cdf", "isf", "logpdf", "pdf", "ppf", "sf"], "multinomial": ["logpmf", "pmf"],
    "multivariate_normal": ["logpdf", "pdf"], "nbinom": ["logpmf", "pmf"], "norm": CONTINUOUS + ["isf", "ppf"],
    "pareto": CONTINUOUS + ["ppf"], "poisson": ["cdf", "entropy", "logpmf", "pmf"], "t": ["logpdf", "pdf"],
    "truncnorm": CONTINUOUS, "uniform": ["cdf", "logpdf", "pdf", "ppf"], "vonmises": ["logpdf", "pdf"],
    "wrapcauchy": ["logpdf", "pdf"]}


def test_modules_functions_and_defaults_as_jax():
    for module, fns in JAX_STATS.items():
        for fn in fns:
            params = inspect.signature(getattr(getattr(ks, module), fn)).parameters
            defaults = {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}
            if "loc" in params:
                assert defaults.get("loc") == 0, (module, fn)
            if "scale" in params:
                assert defaults.get("scale") == 1, (module, fn)
    for name in ("mode", "rankdata", "sem", "gaussian_kde"):
        assert callable(getattr(ks, name))
    assert list(inspect.signature(ks.norm.pdf).parameters) == ["x", "loc", "scale"]
    assert list(inspect.signature(ks.gamma.logpdf).parameters) == ["x", "a", "loc", "scale"]
    assert list(inspect.signature(ks.betabinom.pmf).parameters) == ["k", "n", "a", "b", "loc"]
