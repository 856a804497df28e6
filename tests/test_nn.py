"""kiln.nn activations, softmax family, one_hot and standardize, and kiln.scipy.special, against closed
forms evaluated in float64 with NumPy and the math module (no SciPy) on fresh random inputs."""

import math

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.scipy.special as special


# (the x64 fixture is in conftest.py)


def _dtype(request, name):
    if name == "float64":
        request.getfixturevalue("x64")
    return np.dtype(name)


def _check(got, want, dtype, rtol=None, atol=None):
    got = np.asarray(got)
    assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    single = np.dtype(dtype) == np.float32
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol or (2e-5 if single else 1e-12),
                               atol=atol if atol is not None else (1e-6 if single else 1e-13))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softplus(x):
    return np.logaddexp(x, 0.0)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946
_erf = np.vectorize(math.erf)
_erfc = np.vectorize(math.erfc)
_lgamma = np.vectorize(math.lgamma)
_gamma = np.vectorize(math.gamma)


def _elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


ACTIVATIONS = [
    ("relu", lambda x: np.maximum(x, 0)),
    ("relu6", lambda x: np.clip(x, 0, 6)),
    ("sigmoid", _sigmoid),
    ("softplus", _softplus),
    ("log_sigmoid", lambda x: -_softplus(-x)),
    ("silu", lambda x: x * _sigmoid(x)),
    ("swish", lambda x: x * _sigmoid(x)),
    ("gelu", lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    ("elu", _elu),
    ("celu", _elu),
    ("selu", lambda x: _SELU_SCALE * _elu(x, _SELU_ALPHA)),
    ("leaky_relu", lambda x: np.where(x >= 0, x, 0.01 * x)),
    ("hard_tanh", lambda x: np.clip(x, -1, 1)),
    ("hard_sigmoid", lambda x: np.clip(x + 3, 0, 6) / 6),
    ("hard_silu", lambda x: x * np.clip(x + 3, 0, 6) / 6),
    ("soft_sign", lambda x: x / (np.abs(x) + 1)),
    ("mish", lambda x: x * np.tanh(_softplus(x))),
]


@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
@pytest.mark.parametrize("name,ref", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_activation_matches_closed_form(request, name, ref, dtype_name):
    dtype = _dtype(request, dtype_name)
    rng = np.random.default_rng(len(name) * 7)
    x = (rng.normal(size=(4, 9)) * 4).astype(dtype)
    x[0, :3] = [0.0, 6.5, -30.0]
    _check(getattr(nn, name)(x), ref(x.astype(np.float64)), dtype)


def test_gelu_exact():
    x = np.random.default_rng(1).normal(size=20).astype(np.float32) * 3
    _check(nn.gelu(x, approximate=False), 0.5 * x * (1 + _erf(x / math.sqrt(2))), np.float32)


def test_activations_on_integers_and_nan():
    xi = np.random.default_rng(2).integers(-5, 5, 10).astype(np.int32)
    got = nn.relu(xi)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), np.maximum(xi, 0))
    with pytest.raises(TypeError, match="logistic"):  # as JAX 0.10.2: lax.logistic takes no integers
        nn.sigmoid(xi)
    _check(nn.sigmoid(xi.astype(np.float32)), _sigmoid(xi.astype(np.float64)), np.float32)
    nan = np.array([np.nan], np.float32)
    for name in ("relu", "relu6", "hard_tanh", "sigmoid", "elu", "leaky_relu"):
        assert np.isnan(np.asarray(getattr(nn, name)(nan))[0]), name


def test_relu_gradient_at_zero_is_zero():
    if not hasattr(kiln, "grad"):
        pytest.skip("kiln.grad is not available yet")
    g = kiln.grad(lambda x: nn.relu(x))(0.0)
    assert float(g) == 0.0
    assert float(kiln.grad(lambda x: nn.relu(x))(2.0)) == 1.0


def test_glu():
    x = np.random.default_rng(3).normal(size=(3, 8)).astype(np.float32)
    _check(nn.glu(x), x[:, :4] * _sigmoid(x[:, 4:].astype(np.float64)), np.float32)
    _check(nn.glu(x.T, axis=0), (x[:, :4] * _sigmoid(x[:, 4:].astype(np.float64))).T, np.float32)
    with pytest.raises(ValueError, match="even"):
        nn.glu(x[:, :3])


# ---------------------------------------------------------------------------------------------------------
# softmax family

def _np_softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [-1, 0, (0, 1)], ids=str)
@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
def test_softmax_and_log_softmax(request, axis, dtype_name):
    dtype = _dtype(request, dtype_name)
    x = (np.random.default_rng(4).normal(size=(3, 4, 5)) * 10).astype(dtype)
    x[0, 0, 0] = 500.0  # overflow in a naive exp
    want = _np_softmax(x.astype(np.float64), axis)
    _check(nn.softmax(x, axis=axis), want, dtype)
    with np.errstate(divide="ignore"):
        log_want = np.log(want)
    _check(nn.log_softmax(x, axis=axis), log_want, dtype, rtol=2e-5, atol=1e-4 if dtype == np.float32 else 1e-10)


def test_softmax_where_mask():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(3, 6)).astype(np.float32)
    mask = rng.random((3, 6)) < 0.6
    mask[:, 0] = True
    masked = np.where(mask, x.astype(np.float64), -np.inf)
    want = np.where(mask, _np_softmax(masked, -1), 0.0)
    _check(nn.softmax(x, where=mask), want, np.float32)
    log_got = np.asarray(nn.log_softmax(x, where=mask))
    np.testing.assert_allclose(log_got[mask], np.log(want[mask]), rtol=2e-5, atol=1e-5)
    assert np.all(np.isneginf(log_got[~mask]))


@pytest.mark.parametrize("module", [nn, special], ids=["nn", "special"])
@pytest.mark.parametrize("axis,keepdims", [(None, False), (1, False), (0, True), ((0, 1), False)], ids=str)
def test_logsumexp(module, axis, keepdims):
    rng = np.random.default_rng(6)
    a = (rng.normal(size=(4, 5)) * 20).astype(np.float32)
    a64 = a.astype(np.float64)
    m = a64.max(axis=axis, keepdims=True)
    want = np.log(np.sum(np.exp(a64 - m), axis=axis, keepdims=True)) + m
    want = want if keepdims else np.squeeze(want, axis=axis)
    _check(module.logsumexp(a, axis=axis, keepdims=keepdims), want, np.float32)


def test_logsumexp_b_return_sign_and_infinities():
    rng = np.random.default_rng(7)
    a = rng.normal(size=(3, 4)).astype(np.float32)
    b = rng.normal(size=(3, 4)).astype(np.float32)
    s = np.sum(b.astype(np.float64) * np.exp(a.astype(np.float64)), axis=1)
    out, sign = special.logsumexp(a, axis=1, b=b, return_sign=True)
    _check(out, np.log(np.abs(s)), np.float32)
    np.testing.assert_array_equal(np.asarray(sign), np.sign(s))
    plain = np.asarray(special.logsumexp(a, axis=1, b=b))
    assert np.array_equal(np.isnan(plain), s < 0)
    ninf = np.full((2, 3), -np.inf, np.float32)
    np.testing.assert_array_equal(np.asarray(special.logsumexp(ninf, axis=1)), [-np.inf, -np.inf])
    np.testing.assert_array_equal(np.asarray(special.logsumexp(np.array([1.0, np.inf], np.float32))), np.inf)


def test_logsumexp_bad_axis():
    with pytest.raises(ValueError, match="axis"):
        special.logsumexp(np.ones((2, 2), np.float32), axis=3)


# ---------------------------------------------------------------------------------------------------------
# one_hot, standardize

@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(axis):
    rng = np.random.default_rng(8)
    x = rng.integers(-1, 6, (3, 4)).astype(np.int32)  # -1 and 5 are outside 5 classes: all-zero rows
    got = nn.one_hot(x, 5, axis=axis)
    want = np.moveaxis((x[..., None] == np.arange(5)).astype(np.float32), -1, axis)
    _check(got, want, np.float32, rtol=0, atol=0)
    assert nn.one_hot(x, 5, dtype=np.int32).dtype == np.int32


def test_one_hot_needs_static_num_classes():
    with pytest.raises(kiln.errors.ConcretizationTypeError):
        kiln.jit(lambda n: nn.one_hot(np.arange(3, dtype=np.int32), n))(4)


@pytest.mark.parametrize("axis", [-1, 0, (0, 1)], ids=str)
def test_standardize(axis):
    x = np.random.default_rng(9).normal(size=(4, 6)).astype(np.float32) * 3 + 1
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axis, keepdims=True)
    var = (x64 ** 2).mean(axis=axis, keepdims=True) - mean ** 2
    _check(nn.standardize(x, axis=axis), (x64 - mean) / np.sqrt(var + 1e-5), np.float32, rtol=1e-4, atol=1e-5)
    _check(nn.standardize(x, axis=axis, mean=0.5, variance=2.0), (x64 - 0.5) / np.sqrt(2.0 + 1e-5), np.float32)


# ---------------------------------------------------------------------------------------------------------
# kiln.scipy.special

def _digamma(x):
    """psi(x) for x > 0 by the recurrence psi(x) = psi(x + 1) - 1/x and the asymptotic series."""
    x = np.array(x, np.float64)
    acc = np.zeros_like(x)
    while np.any(x < 8):
        small = x < 8
        acc -= np.where(small, 1.0 / x, 0.0)
        x = np.where(small, x + 1, x)
    inv2 = 1 / (x * x)
    series = np.log(x) - 0.5 / x - inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (1 / 240 - inv2 / 132))))
    return acc + series


SPECIAL = [
    ("erf", _erf, (-3, 3)), ("erfc", _erfc, (-2, 3)), ("gammaln", _lgamma, (0.1, 20)),
    ("gamma", _gamma, (0.2, 8)), ("digamma", _digamma, (0.2, 20)), ("expit", _sigmoid, (-10, 10)),
    ("logit", lambda p: np.log(p / (1 - p)), (0.01, 0.99)), ("ndtr", lambda x: 0.5 * _erfc(-x / math.sqrt(2)), (-4, 4)),
    ("entr", lambda x: -x * np.log(x), (0.01, 5)),
]


@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
@pytest.mark.parametrize("name,ref,domain", SPECIAL, ids=[s[0] for s in SPECIAL])
def test_special_functions(request, name, ref, domain, dtype_name):
    dtype = _dtype(request, dtype_name)
    x = np.random.default_rng(len(name)).uniform(*domain, size=25).astype(dtype)
    tight = dtype == np.float64
    _check(getattr(special, name)(x), ref(x.astype(np.float64)), dtype,
           rtol=1e-10 if tight else 1e-4, atol=1e-10 if tight else 1e-5)


def test_special_on_integers_gives_float():
    got = special.gammaln(np.array([1, 2, 5], np.int32))
    _check(got, _lgamma([1.0, 2.0, 5.0]), np.float32)


def test_gammaln_is_finite_up_to_its_overflow(x64):
    # lgamma(x) ~ x (log x - 1) stays below the largest double up to x ~ 2.559e305
    x = np.array([1e300, 2.55e305, 2.5592597824063074e305, 2.558e305], np.float64)
    got = np.asarray(kiln.jit(special.gammaln)(x))
    np.testing.assert_allclose(got, [math.lgamma(v) for v in x], rtol=1e-14)
    assert np.isinf(np.asarray(special.gammaln(np.array([2.6e305, np.inf]))).astype(np.float64)).all()


def test_erfinv_and_ndtri_invert():
    y = np.random.default_rng(10).uniform(-0.99, 0.99, 30).astype(np.float32)
    x = np.asarray(special.erfinv(y)).astype(np.float64)
    np.testing.assert_allclose(_erf(x), y, rtol=1e-5, atol=1e-6)
    p = (y + 1) / 2
    z = np.asarray(special.ndtri(p)).astype(np.float64)
    np.testing.assert_allclose(0.5 * _erfc(-z / math.sqrt(2)), p, rtol=1e-4, atol=1e-6)


def test_xlogy_xlog1py_betaln():
    rng = np.random.default_rng(11)
    x = rng.uniform(0, 3, 20).astype(np.float32)
    y = rng.uniform(0.1, 3, 20).astype(np.float32)
    x[:3] = 0.0
    _check(special.xlogy(x, y), x * np.log(y.astype(np.float64)), np.float32)
    _check(special.xlog1py(x, y), x * np.log1p(y.astype(np.float64)), np.float32)
    np.testing.assert_array_equal(np.asarray(special.xlogy(0.0, 0.0)), 0.0)
    _check(special.betaln(x + 1, y), _lgamma(x + 1.0) + _lgamma(y) - _lgamma(x + 1.0 + y), np.float32, rtol=1e-4,
           atol=1e-5)
