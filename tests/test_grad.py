"""kiln's autodiff (grad, value_and_grad, jvp, vjp, linearize, jacfwd, jacrev, hessian) against
central finite differences in float64 on fresh random inputs.

The core check (`check`) takes f(*args) -> array of any shape and verifies, along random
directions v: jvp(f)(v) against (f(x + h v) - f(x - h v)) / 2h elementwise, and the reverse
mode gradient of sum(f(x) * w) (w a random cotangent, so every transpose rule is exercised on a
non-trivial cotangent) against the same finite difference contracted with w. Finite
differences run through jit(f), so each case compiles once. Inputs keep away from kinks
(abs, max, floor...) so the finite differences are meaningful. Shapes are shared on purpose:
every new (primitive, shape, dtype) compiles a kernel."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax

H = 1e-6


@pytest.fixture(autouse=True)
def _float64_everywhere(x64):
    """Every gradient check here runs in 64-bit mode (x64 fixture: conftest.py)."""
    yield


def rng():
    return np.random.default_rng()


def normal(*shape):
    return rng().normal(size=shape)


def uniform(lo, hi, *shape):
    return rng().uniform(lo, hi, size=shape)


def away_from(x, points, gap=0.05):
    """x with entries closer than gap to any of `points` pushed away (for kinks)."""
    x = np.array(x, dtype=np.float64)
    for p in points:
        near = np.abs(x - p) < gap
        x[near] = p + np.where(x[near] >= p, gap, -gap)
    return x


def assert_close(got, want, rtol=1e-5, atol=1e-6, what=""):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


def fd(f, args, dirs):
    """Central finite difference of f along dirs (one direction per argument)."""
    plus = [a + H * d for a, d in zip(args, dirs)]
    minus = [a - H * d for a, d in zip(args, dirs)]
    return (np.asarray(f(*plus)) - np.asarray(f(*minus))) / (2 * H)


def check(f, *args, diff=None, rtol=1e-5, atol=1e-6, modes=("fwd", "rev")):
    """Checks jvp and grad of f at args (numpy float64 arrays) against finite differences.
    diff: indices of the arguments to differentiate (default: all)."""
    args = [np.asarray(a, dtype=np.float64) for a in args]
    diff = tuple(range(len(args))) if diff is None else tuple(diff)
    jf = kiln.jit(f)
    y = np.asarray(jf(*args))
    assert_close(np.asarray(f(*[jnp.asarray(a) for a in args])), y, rtol=1e-12, atol=1e-12, what="eager vs jit")
    dirs = [normal(*a.shape) if i in diff else np.zeros(a.shape) for i, a in enumerate(args)]
    want = fd(jf, args, dirs)
    if "fwd" in modes:
        tangents = tuple(jnp.asarray(d) for d in dirs)
        y2, t = kiln.jvp(f, tuple(jnp.asarray(a) for a in args), tangents)
        assert_close(y2, y, rtol=1e-12, atol=1e-12, what="jvp primal")
        assert_close(t, want, rtol, atol, what="jvp tangent")
    if "rev" in modes:
        w = normal(*y.shape)

        def loss(*xs):
            return jnp.sum(f(*xs) * w)
        g = kiln.grad(loss, argnums=diff)(*args)
        assert len(g) == len(diff)
        got = sum(float(np.sum(np.asarray(gi) * dirs[i])) for gi, i in zip(g, diff))
        for gi, i in zip(g, diff):
            assert gi.shape == args[i].shape and gi.dtype == np.float64
        assert_close(got, np.sum(want * w), rtol, atol, what="grad . v")


S = (3, 4)  # the elementwise shape used everywhere

# ---------------------------------------------------------------------------
# Elementwise unary primitives: (name, function, input sampler)

UNARY = [
    ("neg", lax.neg, lambda: normal(*S)),
    ("exp", lax.exp, lambda: normal(*S)),
    ("exp2", lax.exp2, lambda: normal(*S)),
    ("log", lax.log, lambda: uniform(0.5, 3, *S)),
    ("log1p", lax.log1p, lambda: uniform(-0.5, 3, *S)),
    ("expm1", lax.expm1, lambda: normal(*S)),
    ("tanh", lax.tanh, lambda: normal(*S)),
    ("logistic", lax.logistic, lambda: normal(*S)),
    ("sin", lax.sin, lambda: normal(*S)),
    ("cos", lax.cos, lambda: normal(*S)),
    ("tan", lax.tan, lambda: uniform(-1.2, 1.2, *S)),
    ("asin", lax.asin, lambda: uniform(-0.9, 0.9, *S)),
    ("acos", lax.acos, lambda: uniform(-0.9, 0.9, *S)),
    ("atan", lax.atan, lambda: normal(*S)),
    ("sinh", lax.sinh, lambda: normal(*S)),
    ("cosh", lax.cosh, lambda: normal(*S)),
    ("asinh", lax.asinh, lambda: normal(*S)),
    ("acosh", lax.acosh, lambda: uniform(1.2, 4, *S)),
    ("atanh", lax.atanh, lambda: uniform(-0.9, 0.9, *S)),
    ("sqrt", lax.sqrt, lambda: uniform(0.3, 4, *S)),
    ("rsqrt", lax.rsqrt, lambda: uniform(0.3, 4, *S)),
    ("cbrt", lax.cbrt, lambda: away_from(normal(*S), [0], 0.3)),
    ("abs", lax.abs, lambda: away_from(normal(*S), [0])),
    ("erf", lax.erf, lambda: normal(*S)),
    ("erfc", lax.erfc, lambda: normal(*S)),
    ("erf_inv", lax.erf_inv, lambda: uniform(-0.9, 0.9, *S)),
    ("lgamma", lax.lgamma, lambda: uniform(0.3, 5, *S)),
    ("square", lax.square, lambda: normal(*S)),
    ("integer_pow2", lambda x: lax.integer_pow(x, 2), lambda: normal(*S)),
    ("integer_pow3", lambda x: lax.integer_pow(x, 3), lambda: normal(*S)),
    ("integer_pow-2", lambda x: lax.integer_pow(x, -2), lambda: uniform(0.5, 2, *S)),
    ("integer_pow1", lambda x: lax.integer_pow(x, 1), lambda: normal(*S)),
    ("integer_pow0", lambda x: lax.integer_pow(x, 0), lambda: normal(*S)),
    ("reciprocal", lax.reciprocal, lambda: uniform(0.5, 2, *S)),
    ("floor_plus_x", lambda x: lax.floor(x) + x, lambda: away_from(normal(*S), [-2, -1, 0, 1, 2])),
    ("ceil_round_sign", lambda x: lax.ceil(x) * x + lax.round(x) + lax.sign(x) * x,
     lambda: away_from(normal(*S), [-2.5, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 2.5])),
]


@pytest.mark.parametrize("name,f,sample", UNARY, ids=[u[0] for u in UNARY])
def test_unary_primitive(name, f, sample):
    check(f, sample())


def test_stop_gradient_blocks_the_gradient():
    x = normal(*S)
    g = kiln.grad(lambda x: jnp.sum(lax.stop_gradient(x) * x))(x)
    assert_close(g, x)


def test_lgamma_gradient_is_digamma():
    x = uniform(0.5, 5, *S)
    from kiln.scipy import special
    assert_close(kiln.grad(lambda x: jnp.sum(lax.lgamma(x)))(x), special.digamma(x), rtol=1e-10)


def test_digamma_gradient_is_trigamma():
    from kiln.scipy.special import polygamma
    # reference values: JAX 0.10.2 polygamma(1, x) in float64, and the poles (inf, as JAX)
    x = jnp.asarray([-0.5, -1.5, 0.1, 1.0, 3.7, 50.0, 1e-3, -2.0, 0.0])
    want = [8.93480220e+00, 9.37924664e+00, 1.01433299e+02, 1.64493407e+00, 3.10037858e-01, 2.02013332e-02,
            1.00000164e+06, np.inf, np.inf]
    assert_close(kiln.vmap(kiln.grad(lax.digamma))(x), want, rtol=1e-8)
    assert_close(polygamma(1, x), want, rtol=1e-8)
    check(lambda x: lax.digamma(x), uniform(0.2, 6, *S))
    check(lambda x: lax.digamma(x), uniform(-0.9, -0.1, *S))
    assert float(kiln.grad(kiln.grad(lax.digamma))(0.7)) == pytest.approx(-6.434992874190915, rel=1e-10)


def test_polygamma_orders():
    from kiln.scipy.special import polygamma, digamma
    x = jnp.asarray([0.3, 2.0, -0.5, -1.3])
    assert_close(polygamma(0, x), digamma(x), rtol=1e-14)
    assert_close(polygamma(2, x), [-75.27253659, -0.40411381, -0.82879664, 68.54941347], rtol=1e-7)  # JAX
    assert_close(polygamma(3, x[:2]), [7.43141765e+02, 4.93939402e-01], rtol=1e-7)
    assert_close(kiln.jit(lambda v: polygamma(1, v))(jnp.asarray([3.7])), [0.310037858], rtol=1e-8)
    assert float(polygamma(np.int32(1), 3)) == pytest.approx(np.pi ** 2 / 6 - 1 - 0.25, rel=1e-12)
    with pytest.raises(ValueError, match="integer"):
        polygamma(1.0, x)
    # a traced order, as JAX
    assert_close(kiln.jit(lambda n, v: polygamma(n, v))(2, x), [-75.27253659, -0.40411381, -0.82879664, 68.54941347],
                 rtol=1e-7)


@pytest.mark.parametrize("shape", [(3, 3), (4, 3), (3, 5), (2, 4, 3), (2, 3, 4)])
def test_lu_gradient_square_and_rectangular(shape):
    check(lambda a: lax.linalg.lu(a)[0], normal(*shape))  # the packed L\U factors, as JAX differentiates them


# ---------------------------------------------------------------------------
# Elementwise binary primitives

BINARY = [
    ("add", lax.add, lambda: (normal(*S), normal(*S))),
    ("sub", lax.sub, lambda: (normal(*S), normal(*S))),
    ("mul", lax.mul, lambda: (normal(*S), normal(*S))),
    ("div", lax.div, lambda: (normal(*S), uniform(0.5, 2, *S) * rng().choice([-1, 1], S))),
    ("pow", lax.pow, lambda: (uniform(0.5, 2, *S), normal(*S))),
    ("atan2", lax.atan2, lambda: (normal(*S), normal(*S))),
    ("rem", lax.rem, lambda: (uniform(0.1, 5, *S) * rng().choice([-1, 1], S), uniform(0.7, 1.3, *S))),
    ("max", lax.max, lambda: (normal(*S), normal(*S))),
    ("min", lax.min, lambda: (normal(*S), normal(*S))),
]


@pytest.mark.parametrize("name,f,sample", BINARY, ids=[b[0] for b in BINARY])
def test_binary_primitive(name, f, sample):
    x, y = sample()
    if name == "rem":  # keep x / y away from integers (the kinks of rem)
        q = x / y
        x = y * away_from(q, np.arange(-10, 11), 0.1)
    check(f, x, y)


def test_binary_with_scalar_operand():
    check(lambda x: x * 2.5 + 1.0 - x / 3.0, normal(*S))
    check(lambda x: 2.0 ** x + 1.0 / x, uniform(0.5, 2, *S))


def test_max_min_ties_split_the_gradient_evenly():
    x = np.array([1.0, 2.0, 3.0])
    y = np.array([1.0, 1.0, 4.0])
    gx, gy = kiln.grad(lambda a, b: jnp.sum(lax.max(a, b)), argnums=(0, 1))(x, y)
    assert_close(gx, [0.5, 1.0, 0.0])
    assert_close(gy, [0.5, 0.0, 1.0])
    gx, gy = kiln.grad(lambda a, b: jnp.sum(lax.min(a, b)), argnums=(0, 1))(x, y)
    assert_close(gx, [0.5, 0.0, 1.0])
    assert_close(gy, [0.5, 1.0, 0.0])
    # jnp.maximum with a scalar: relu at 0 gets 0.5 as in JAX
    assert_close(kiln.grad(lambda a: jnp.sum(jnp.maximum(a, 0.0)))(np.array([-1.0, 0.0, 2.0])), [0.0, 0.5, 1.0])


def test_pow_edge_cases():
    # as JAX: d/dx x^0 at x = 0 is 0 * 0^-1 = nan (a float exponent has no special case, issue 32);
    # d/dy 0^y = log(1) 0^y = 0; d/dx x^2 at 0 = 0
    g = kiln.grad(lambda x, y: lax.pow(x, y), argnums=(0, 1))
    gx, gy = g(0.0, 0.0)
    assert np.isnan(float(gx)) and float(gy) == 0.0
    gx, gy = g(0.0, 2.0)
    assert float(gx) == 0.0 and float(gy) == 0.0
    gx, gy = g(2.0, 3.0)
    assert_close(gx, 12.0)
    assert_close(gy, 8.0 * np.log(2.0))
    # x ** 3 goes through integer_pow
    x = normal(*S)
    assert_close(kiln.grad(lambda x: jnp.sum(x ** 3))(x), 3 * x ** 2, rtol=1e-12)


def test_integer_pow_one_and_zero_emit_no_power():
    text = str(kiln.make_jaxpr(kiln.grad(lambda x: jnp.sum(lax.integer_pow(x, 2))))(np.ones(S)))
    assert "integer_pow[y=1]" not in text.replace(" ", "") and "y=1]" not in text
    x = normal(*S)
    assert_close(kiln.grad(lambda x: jnp.sum(lax.integer_pow(x, 2)))(x), 2 * x, rtol=1e-12)
    assert_close(kiln.grad(lambda x: jnp.sum(lax.integer_pow(x, 0)))(x), np.zeros(S))


# ---------------------------------------------------------------------------
# select, convert, clamp

def test_select_and_where():
    p = normal(*S) > 0
    check(lambda a, b: lax.select(p, a, b), normal(*S), normal(*S))
    check(lambda a, b: jnp.where(a > b, a * b, jnp.sin(b)), normal(*S), normal(*S))
    check(lambda a: jnp.where(a > 0, a, 0.0), away_from(normal(*S), [0]))
    which = rng().integers(0, 3, S).astype(np.int32)
    check(lambda a, b, c: lax.select_n(which, a, b, c), normal(*S), normal(*S), normal(*S))


def test_where_gradient_has_no_nan_from_the_untaken_branch():
    # the classic safe-log pattern: the untaken branch must not poison the gradient
    x = np.array([0.0, 1.0, 2.0])

    def f(x):
        safe = jnp.where(x > 0, x, 1.0)
        return jnp.sum(jnp.where(x > 0, jnp.log(safe), 0.0))
    assert_close(kiln.grad(f)(x), [0.0, 1.0, 0.5])


def test_convert_element_type():
    x = normal(*S)
    g = kiln.grad(lambda x: jnp.sum(lax.convert_element_type(x, np.float32) * 2).astype(np.float64))(x)
    assert g.dtype == np.float64
    assert_close(g, np.full(S, 2.0))
    _, t = kiln.jvp(lambda x: lax.convert_element_type(x, np.float32), (x,), (x,))
    assert t.dtype == np.float32
    assert_close(t, x.astype(np.float32), rtol=1e-6)
    # float -> int -> float carries no gradient
    g = kiln.grad(lambda x: jnp.sum(x.astype(np.int32).astype(np.float64) + x))(normal(*S))
    assert_close(g, np.ones(S))


def test_float32_gradient_keeps_dtype():
    x = normal(*S).astype(np.float32)
    g = kiln.grad(lambda x: jnp.sum(jnp.sin(x) * x))(x)
    assert g.dtype == np.float32
    assert_close(g, np.cos(x) * x + np.sin(x), rtol=1e-5, atol=1e-5)


def test_clamp():
    check(lambda x: lax.clamp(-0.5, x, 0.7), away_from(normal(*S), [-0.5, 0.7]))
    check(lambda x: jnp.clip(x, -0.5, 0.7) * x, away_from(normal(*S), [-0.5, 0.7]))


# ---------------------------------------------------------------------------
# Structural primitives

def test_broadcast_in_dim():
    check(lambda x: lax.broadcast_in_dim(x, (2, 3, 5, 4), (1, 3)), normal(*S))
    check(lambda x: lax.broadcast_in_dim(x, (3, 4), (0, 1)) * 2, normal(3, 1))
    check(lambda x: lax.broadcast_in_dim(x, (3, 4), ()), normal())
    check(lambda x: lax.broadcast(x, (2,)), normal(*S))
    check(lambda x, y: x + y, normal(*S), normal(4))  # numpy broadcasting on both sides
    check(lambda x, y: x * y, normal(3, 1), normal(1, 4))


def test_reshape_transpose_rev_squeeze():
    check(lambda x: lax.reshape(x, (2, 6)), normal(*S))
    check(lambda x: lax.reshape(x, (4, 3), dimensions=(1, 0)), normal(*S))
    check(lambda x: lax.transpose(x, (2, 0, 1)), normal(2, 3, 4))
    check(lambda x: lax.rev(x, (0, 2)), normal(2, 3, 4))
    check(lambda x: lax.squeeze(x, (1,)) * 3, normal(3, 1, 4))
    check(lambda x: lax.expand_dims(x, (0, 2)), normal(*S))
    check(lambda x: x.T @ x, normal(*S))


def test_slice_with_strides():
    check(lambda x: lax.slice(x, (0, 1), (3, 4)), normal(*S))
    check(lambda x: lax.slice(x, (0, 1), (3, 4), (2, 2)), normal(*S))
    check(lambda x: lax.slice(x, (1, 0, 0), (6, 5, 4), (3, 2, 3)), normal(7, 5, 4))
    check(lambda x: x[::2, 1::3], normal(*S))
    check(lambda x: x[::-1, 2], normal(*S))


@pytest.mark.parametrize("config", [
    [(1, 2, 0), (0, 1, 0)],
    [(-1, 2, 0), (1, -2, 0)],
    [(0, 0, 1), (2, 1, 2)],
    [(-1, -1, 2), (1, -1, 1)],
])
def test_pad(config):
    check(lambda x, v: lax.pad(x, v, config), normal(*S), normal())
    check(lambda x: lax.pad(x, 0.0, config), normal(*S))


def test_jnp_pad():
    check(lambda x: jnp.pad(x, ((1, 2), (0, 1))), normal(*S))
    check(lambda x: jnp.pad(x, 1, mode="constant", constant_values=2.0) * x.sum(), normal(*S))


def test_concatenate():
    check(lambda a, b, c: lax.concatenate([a, b, c], 1), normal(3, 2), normal(3, 4), normal(3, 1))
    check(lambda a, b: jnp.concatenate([a, b, a], axis=0), normal(*S), normal(2, 4))
    check(lambda a, b: jnp.stack([a, b * a]), normal(*S), normal(*S))


# ---------------------------------------------------------------------------
# Reductions and cumulative ops

def test_reduce_sum():
    check(lambda x: lax.reduce_sum(x, (1,)), normal(2, 3, 4))
    check(lambda x: lax.reduce_sum(x, (0, 2)), normal(2, 3, 4))
    check(lambda x: lax.reduce_sum(x, ()), normal(*S))
    check(lambda x: jnp.sum(x), normal(2, 3, 4))
    check(lambda x: jnp.sum(x, axis=1, keepdims=True), normal(2, 3, 4))


def test_reduce_max_min():
    check(lambda x: lax.reduce_max(x, (1,)), normal(2, 3, 4))
    check(lambda x: lax.reduce_min(x, (0, 2)), normal(2, 3, 4))
    check(lambda x: jnp.max(x) + jnp.min(x, axis=0).sum(), normal(*S))


def test_reduce_max_ties_share_the_gradient():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, -1.0]])
    assert_close(kiln.grad(lambda x: jnp.sum(jnp.max(x, axis=1)))(x), [[0, 0.5, 0.5], [1, 0, 0]])
    assert_close(kiln.grad(lambda x: jnp.max(x))(x), [[0, 0.5, 0.5], [0, 0, 0]])


def test_reduce_prod():
    check(lambda x: lax.reduce_prod(x, (1,)), normal(2, 3, 4))
    check(lambda x: lax.reduce_prod(x, (0, 2)), normal(2, 3, 4))
    check(lambda x: jnp.prod(x), normal(*S))


def test_reduce_prod_with_zeros():
    x = np.array([[2.0, 0.0, 3.0, 4.0], [0.0, 0.0, 5.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    want = np.array([[0.0, 24.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [24.0, 12.0, 8.0, 6.0]])
    assert_close(kiln.grad(lambda x: jnp.sum(jnp.prod(x, axis=1)))(x), want, rtol=1e-12)
    # all axes, one zero
    x = np.array([[2.0, 0.0], [3.0, 4.0]])
    assert_close(kiln.grad(lambda x: jnp.prod(x))(x), [[0.0, 24.0], [0.0, 0.0]], rtol=1e-12)
    # jvp with a zero
    _, t = kiln.jvp(lambda x: jnp.prod(x, axis=1), (x,), (np.ones_like(x),))
    assert_close(t, [2.0, 7.0], rtol=1e-12)


def test_cumsum():
    check(lambda x: lax.cumsum(x, 1), normal(*S))
    check(lambda x: lax.cumsum(x, 0, reverse=True), normal(*S))
    check(lambda x: jnp.cumsum(x), normal(*S))


def test_cumprod_cummax_cummin():
    check(lambda x: lax.cumprod(x, 1), normal(*S))
    check(lambda x: lax.cumprod(x, 0, reverse=True), normal(*S))
    check(lambda x: lax.cummax(x, 1), normal(*S))
    check(lambda x: lax.cummin(x, 0, reverse=True), normal(*S))


def test_cumprod_with_zeros():
    x = np.array([[2.0, 0.0, 3.0, 4.0], [1.0, 2.0, 0.0, 0.0]])
    w = normal(2, 4)
    g = kiln.grad(lambda x: jnp.sum(lax.cumprod(x, 1) * w))(x)
    # closed form: d/dx_j sum_i w_i prod_{k<=i} x_k = sum_{i>=j} w_i prod_{k<=i, k!=j} x_k
    want = np.zeros_like(x)
    for r in range(2):
        for j in range(4):
            for i in range(j, 4):
                want[r, j] += w[r, i] * np.prod([x[r, k] for k in range(i + 1) if k != j])
    assert_close(g, want, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------
# dot_general

DOTS = [
    ("matmul", (3, 4), (4, 5), (((1,), (0,)), ((), ()))),
    ("lhs_transposed", (4, 3), (4, 5), (((0,), (0,)), ((), ()))),
    ("batch", (2, 3, 4), (2, 4, 5), (((2,), (1,)), ((0,), (0,)))),
    ("batch_not_leading", (3, 2, 4), (4, 5, 2), (((2,), (0,)), ((1,), (2,)))),
    ("two_contracting", (2, 3, 4), (4, 5, 3), (((1, 2), (2, 0)), ((), ()))),
    ("batch_and_two_contracting", (2, 3, 4, 5), (4, 2, 3, 6), (((1, 2), (2, 0)), ((0,), (1,)))),
    ("outer", (3,), (4,), (((), ()), ((), ()))),
    ("inner", (4,), (4,), (((0,), (0,)), ((), ()))),
]


@pytest.mark.parametrize("name,ls,rs,dn", DOTS, ids=[d[0] for d in DOTS])
def test_dot_general(name, ls, rs, dn):
    check(lambda a, b: lax.dot_general(a, b, dn), normal(*ls), normal(*rs))


def test_dot_general_preferred_element_type():
    # guards a bug: the transposed dot mixed the wide cotangent with the narrow operand
    a, b = normal(3, 4), normal(4, 2)
    dn = (((1,), (0,)), ((), ()))
    for dt, wide in ((jnp.bfloat16, np.float32), (np.float32, np.float64)):
        ga, gb = kiln.grad(lambda a, b: jnp.sum(lax.dot_general(a, b, dn, preferred_element_type=wide)),
                           argnums=(0, 1))(jnp.asarray(a, dtype=dt), jnp.asarray(b, dtype=dt))
        assert ga.dtype == np.dtype(dt) and gb.dtype == np.dtype(dt)
        bq = np.asarray(jnp.asarray(b, dtype=dt), np.float64)
        assert_close(np.asarray(ga, np.float64), np.broadcast_to(bq.sum(1), (3, 4)), rtol=1e-2, atol=1e-2)


def test_dot_general_one_side_and_same_operand():
    b = normal(4, 5)
    check(lambda a: lax.dot_general(a, b, (((1,), (0,)), ((), ()))), normal(*S))
    check(lambda a: a @ a.T, normal(*S))
    check(lambda a: jnp.dot(a, a.T) @ a, normal(*S))


# ---------------------------------------------------------------------------
# Indexing: dynamic_slice, dynamic_update_slice, take, scatter

def test_dynamic_slice():
    check(lambda x: lax.dynamic_slice(x, (1, 2), (2, 2)), normal(*S))
    # clamped start
    check(lambda x: lax.dynamic_slice(x, (2, 3), (2, 3)), normal(*S))
    check(lambda x, i: lax.dynamic_slice(x, (i.astype(np.int32), np.int32(1)), (2, 2)), normal(*S), np.array(1.0), diff=(0,))


def test_dynamic_slice_traced_start():
    x = normal(*S)

    @kiln.jit
    def g(x, i):
        return kiln.grad(lambda x: jnp.sum(lax.dynamic_slice(x, (i, 0), (2, 4)) ** 2))(x)
    want = np.zeros(S)
    want[1:3] = 2 * x[1:3]
    want0 = np.zeros(S)
    want0[0:2] = 2 * x[0:2]
    assert_close(g(x, 5), want)  # clamped to start 3 - 2 = 1
    assert_close(g(x, 0), want0)


def test_dynamic_update_slice():
    check(lambda x, u: lax.dynamic_update_slice(x, u, (1, 1)), normal(*S), normal(2, 2))
    check(lambda x, u: lax.dynamic_update_slice(x, u * x[0, 0], (2, 3)), normal(*S), normal(2, 2))


def test_take_indexing():
    idx = np.array([2, 0, 2, 1], dtype=np.int32)
    check(lambda x: x[idx], normal(*S))
    check(lambda x: x[:, idx], normal(*S))
    check(lambda x: lax._take(x, idx.reshape(2, 2), 1), normal(*S))
    check(lambda x: x[idx, 1:3], normal(*S))
    check(lambda x: jnp.take(x, idx, axis=1), normal(*S))
    # repeated indices accumulate
    g = kiln.grad(lambda x: jnp.sum(x[idx]))(normal(3))
    assert_close(g, [1.0, 1.0, 2.0])


def test_scatter_set_and_add():
    idx = np.array([2, 0], dtype=np.int32)
    check(lambda x, u: x.at[idx].set(u), normal(*S), normal(2, 4))
    check(lambda x, u: x.at[idx].add(u * x[idx]), normal(*S), normal(2, 4))
    check(lambda x, u: x.at[1].set(u), normal(*S), normal(4))
    check(lambda x, u: x.at[:, 1:3].add(u), normal(*S), normal(3, 2))
    check(lambda x, u: lax._scatter(x, np.array([1, 3], np.int32), u, 1, "set"), normal(*S), normal(3, 2))


def test_scatter_set_duplicate_and_dropped_indices():
    # out-of-bounds updates are dropped: no gradient for them
    x = normal(4)
    u = normal(2)
    idx = np.array([1, 7], dtype=np.int32)
    gx, gu = kiln.grad(lambda x, u: jnp.sum(lax._scatter(x, idx, u, 0, "set") * np.arange(1.0, 5.0)),
                       argnums=(0, 1))(x, u)
    assert_close(gx, [1.0, 0.0, 3.0, 4.0])
    assert_close(gu, [2.0, 0.0])


def test_scatter_mul_min_max():
    idx = np.array([2, 0], dtype=np.int32)
    check(lambda x, u: x.at[idx].multiply(u), normal(*S), normal(2, 4))
    check(lambda x, u: x.at[idx].max(u), normal(*S), normal(2, 4))
    check(lambda x, u: x.at[idx].min(u), normal(*S), normal(2, 4))


# ---------------------------------------------------------------------------
# Sort and linalg

def test_sort():
    check(lambda x: lax.sort(x, 1), normal(*S))
    check(lambda x: jnp.sort(x, axis=0), normal(*S))
    check(lambda x, y: lax.sort((x, y), 1, num_keys=1)[1], normal(*S), normal(*S))
    check(lambda x: jnp.median(x, axis=1), normal(3, 5))


def test_cholesky():
    def f(a):
        return lax.linalg.cholesky(a @ a.T + 4 * jnp.eye(4))
    check(f, normal(4, 4))


def test_triangular_solve():
    def tri(a):
        return jnp.tril(a) + 4 * jnp.eye(4)
    for left, lower, ta in [(True, True, False), (False, False, True), (True, False, True), (False, True, False)]:
        bshape = (4, 3) if left else (3, 4)

        def f(a, b):
            t = tri(a) if lower else tri(a).T
            return lax.linalg.triangular_solve(t, b, left_side=left, lower=lower, transpose_a=ta)
        check(f, normal(4, 4), normal(*bshape))


def test_linalg_through_numpy():
    def spd(a):
        return a @ a.T + 4 * jnp.eye(4)
    check(lambda a, b: jnp.linalg.solve(spd(a), b), normal(4, 4), normal(4, 2))
    check(lambda a: jnp.linalg.inv(spd(a)), normal(4, 4))
    check(lambda a: jnp.linalg.slogdet(spd(a))[1], normal(4, 4))
    check(lambda a: jnp.linalg.det(a), normal(4, 4))


def test_batched_linalg_and_scans():
    spd = lambda a: a @ jnp.swapaxes(a, -1, -2) + 4 * jnp.eye(3)
    check(lambda a: lax.linalg.cholesky(spd(a)), normal(2, 3, 3))
    check(lambda a, b: jnp.linalg.solve(spd(a), b), normal(2, 3, 3), normal(2, 3, 2))
    check(lambda a: jnp.linalg.det(a), normal(2, 3, 3))
    check(lambda a: jnp.linalg.eigh(a + jnp.swapaxes(a, -1, -2))[0], normal(2, 3, 3))
    check(lambda a: jnp.linalg.qr(a)[1], normal(2, 4, 3))
    check(lambda a: jnp.linalg.svd(a, compute_uv=False), normal(2, 4, 3))
    check(lambda x: lax.sort(x, 0), normal(3, 4, 2))
    check(lambda x: lax.cumprod(x, 1, reverse=True), normal(3, 5, 2))
    check(lambda x: lax.reduce_prod(x, (0, 2)), normal(3, 5, 2))
    check(lambda x: lax.cummin(x, 2), normal(3, 5, 2))


def test_eigh_qr_svd():
    def sym(a):
        return a + a.T
    check(lambda a: jnp.linalg.eigh(sym(a))[0], normal(4, 4))
    check(lambda a: jnp.abs(jnp.linalg.eigh(sym(a))[1]), normal(4, 4), rtol=1e-4)
    check(lambda a: jnp.linalg.qr(a)[1], normal(4, 3))
    check(lambda a: jnp.linalg.qr(a)[0] * jnp.sign(jnp.diag(jnp.linalg.qr(a)[1])), normal(4, 3))
    check(lambda a: jnp.linalg.svd(a, compute_uv=False), normal(4, 3))
    check(lambda a: jnp.linalg.svd(a, compute_uv=False), normal(3, 4))

    def svd_parts(a):  # sign-invariant functions of U and V
        u, s, vt = jnp.linalg.svd(a, full_matrices=False)
        return jnp.concatenate([(u * s @ vt).ravel(), jnp.outer(u[:, 0], vt[0]).ravel(),
                                jnp.outer(u[:, -1], vt[-1]).ravel() * 2])
    check(svd_parts, normal(4, 3), rtol=1e-4, atol=1e-5)
    check(svd_parts, normal(3, 4), rtol=1e-4, atol=1e-5)
    check(svd_parts, normal(4, 4), rtol=1e-4, atol=1e-5)
    check(lambda a: jnp.linalg.pinv(a), normal(4, 3), rtol=1e-4, atol=1e-5)
    check(lambda a: lax.linalg.eigh(a, lower=False, symmetrize_input=False)[1], normal(4, 4))
    check(lambda a: lax.linalg.cholesky(a @ a.T + 4 * jnp.eye(4) + jnp.triu(a, 1), symmetrize_input=False),
          normal(4, 4))
    check(lambda a: jnp.linalg.norm(a, ord=2), normal(4, 3))


# ---------------------------------------------------------------------------
# Through kiln.numpy / kiln.nn functions

def test_numpy_functions():
    import kiln.nn
    from kiln.scipy.special import logsumexp
    check(lambda x: kiln.nn.softmax(x, axis=-1), normal(*S))
    check(lambda x: kiln.nn.log_softmax(x), normal(*S))
    check(lambda x: logsumexp(x, axis=1), normal(*S))
    check(lambda x: logsumexp(x), normal(*S))
    check(lambda x: jnp.mean(x, axis=0) + jnp.var(x), normal(*S))
    check(lambda x: jnp.std(x, axis=1), normal(*S))
    check(lambda a, b: jnp.matmul(a, b), normal(2, 3, 4), normal(4, 5))
    check(lambda a, b: jnp.einsum("ij,jk->ik", a, b), normal(*S), normal(4, 5))
    check(lambda a, b: jnp.einsum("bij,bjk->bik", a, b), normal(2, 3, 4), normal(2, 4, 5))
    check(lambda a, b: jnp.einsum("ij,ij->", a, b), normal(*S), normal(*S))
    check(lambda x: jnp.linalg.norm(x), normal(*S))
    check(lambda x: jnp.linalg.norm(x, axis=1), normal(*S))
    check(lambda x: jnp.sqrt(jnp.abs(x)) + x ** 3, away_from(normal(*S), [0], 0.2))
    check(lambda x: kiln.nn.relu(x) + kiln.nn.gelu(x) + kiln.nn.sigmoid(x) + kiln.nn.softplus(x),
          away_from(normal(*S), [0]))
    check(lambda x: jnp.tanh(x) @ jnp.ones((4, 2)), normal(*S))
    check(lambda x: jnp.outer(x, x) + jnp.trace(jnp.outer(x, x)), normal(4))
    check(lambda x: jnp.tril(x) + jnp.diag(jnp.diag(x[:, :3])).sum(), normal(*S))
    check(lambda x: jnp.roll(x, 1, axis=1) * jnp.flip(x, 0) + jnp.tile(x[:1], (3, 1)), normal(*S))


def test_closed_forms():
    x = normal(5)
    assert_close(kiln.grad(lambda x: jnp.sum(x ** 2))(x), 2 * x, rtol=1e-12)
    s = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    from kiln.scipy.special import logsumexp
    assert_close(kiln.grad(logsumexp)(x), s, rtol=1e-12)
    assert_close(kiln.grad(lambda x: jnp.linalg.norm(x))(x), x / np.linalg.norm(x), rtol=1e-12)
    assert_close(kiln.grad(lambda x: jnp.mean(x))(x), np.full(5, 0.2), rtol=1e-12)
    assert_close(kiln.grad(lambda x: jnp.sum(jnp.sin(x)))(x), np.cos(x), rtol=1e-12)


# ---------------------------------------------------------------------------
# API: grad, value_and_grad, jvp, vjp, linearize

def test_grad_of_python_scalar_and_int_argnums():
    assert_close(kiln.grad(lambda x: x ** 2 * 3.0)(2.0), 12.0)
    g = kiln.grad(lambda x, y: x * y + y, argnums=1)(3.0, 4.0)
    assert_close(g, 4.0)
    gx, gy = kiln.grad(lambda x, y: x * y + y, argnums=(0, 1))(3.0, 4.0)
    assert_close(gx, 4.0)
    assert_close(gy, 4.0)
    (gy,) = kiln.grad(lambda x, y: x * y, argnums=(1,))(3.0, 4.0)
    assert_close(gy, 3.0)
    assert_close(kiln.grad(lambda x, y: x * y, argnums=-1)(3.0, 5.0), 3.0)


def test_value_and_grad():
    x = normal(*S)
    v, g = kiln.value_and_grad(lambda x: jnp.sum(jnp.sin(x)))(x)
    assert_close(v, np.sum(np.sin(x)), rtol=1e-12)
    assert_close(g, np.cos(x), rtol=1e-12)
    v, (g0, g1) = kiln.value_and_grad(lambda a, b: jnp.sum(a * b), argnums=(0, 1))(x, 2 * x)
    assert_close(v, 2 * np.sum(x * x), rtol=1e-12)
    assert_close(g0, 2 * x)
    assert_close(g1, x)


def test_has_aux():
    x = normal(*S)

    def f(x):
        return jnp.sum(x ** 2), {"mean": jnp.mean(x), "n": 3}
    (v, aux), g = kiln.value_and_grad(f, has_aux=True)(x)
    assert_close(v, np.sum(x ** 2), rtol=1e-12)
    assert_close(aux["mean"], x.mean(), rtol=1e-12)
    assert int(aux["n"]) == 3
    assert_close(g, 2 * x)
    g, aux = kiln.grad(f, has_aux=True)(x)
    assert_close(g, 2 * x)
    assert_close(aux["mean"], x.mean(), rtol=1e-12)


def test_pytree_arguments():
    params = {"w": normal(*S), "b": [normal(4), normal()]}

    def f(p, x):
        return jnp.sum(jnp.tanh(x @ p["w"] + p["b"][0]) * p["b"][1])
    x = normal(2, 3)
    g = kiln.grad(f)(params, x)
    assert set(g) == {"w", "b"} and isinstance(g["b"], list) and len(g["b"]) == 2
    v = {"w": normal(*S), "b": [normal(4), normal()]}
    plus = {"w": params["w"] + H * v["w"], "b": [params["b"][0] + H * v["b"][0], params["b"][1] + H * v["b"][1]]}
    minus = {"w": params["w"] - H * v["w"], "b": [params["b"][0] - H * v["b"][0], params["b"][1] - H * v["b"][1]]}
    want = (float(f(plus, x)) - float(f(minus, x))) / (2 * H)
    got = float(np.sum(g["w"] * v["w"]) + np.sum(g["b"][0] * v["b"][0]) + np.sum(g["b"][1] * v["b"][1]))
    assert_close(got, want)


def test_allow_int():
    with pytest.raises(TypeError, match="int32|integer|allow_int"):
        kiln.grad(lambda x, n: x * n, argnums=1)(2.0, np.int32(3))
    with pytest.raises(TypeError):
        kiln.grad(lambda n: (n * 2).astype(np.float64))(np.arange(3, dtype=np.int32).sum())
    g = kiln.grad(lambda x, n: x * n, argnums=(0, 1), allow_int=True)(2.0, np.int32(3))
    assert_close(g[0], 3.0)
    assert np.all(np.asarray(g[1]) == 0)
    # an int argument that is not differentiated is fine
    assert_close(kiln.grad(lambda x, n: x * n)(2.0, np.int32(3)), 3.0)


def test_grad_of_non_scalar_output_is_a_type_error():
    with pytest.raises(TypeError, match="scalar"):
        kiln.grad(lambda x: x * 2)(normal(3))
    with pytest.raises(TypeError):
        kiln.grad(lambda x: (x.sum(), x.sum()))(normal(3))
    with pytest.raises(TypeError, match="float|real"):
        kiln.grad(lambda x: jnp.sum(x > 0))(normal(3))


def test_jvp_api():
    x, v = normal(*S), normal(*S)
    y, t = kiln.jvp(jnp.sin, (x,), (v,))
    assert_close(y, np.sin(x), rtol=1e-12)
    assert_close(t, np.cos(x) * v, rtol=1e-12)
    # pytree primals and outputs
    y, t = kiln.jvp(lambda p: {"a": p[0] * p[1], "b": p[0]}, ((x, 2 * x),), ((v, v),))
    assert_close(t["a"], v * 2 * x + x * v, rtol=1e-12)
    assert_close(t["b"], v)
    # has_aux
    y, t, aux = kiln.jvp(lambda x: (x * x, x + 1), (x,), (v,), has_aux=True)
    assert_close(t, 2 * x * v, rtol=1e-12)
    assert_close(aux, x + 1)
    with pytest.raises(ValueError):
        kiln.jvp(jnp.sin, (x,), (normal(2),))
    with pytest.raises((TypeError, ValueError)):
        kiln.jvp(jnp.sin, (x,), [v, v])


def test_vjp_api():
    x, y = normal(*S), normal(4)

    def f(a, b):
        return {"p": a * b, "s": jnp.sum(a, axis=1)}
    out, f_vjp = kiln.vjp(f, x, y)
    assert_close(out["p"], x * y, rtol=1e-12)
    ct = {"p": normal(*S), "s": normal(3)}
    ga, gb = f_vjp(ct)
    assert_close(ga, ct["p"] * y + ct["s"][:, None], rtol=1e-12)
    assert_close(gb, np.sum(ct["p"] * x, axis=0), rtol=1e-12)
    # called twice with other cotangents
    ct2 = {"p": normal(*S), "s": normal(3)}
    ga2, _ = f_vjp(ct2)
    assert_close(ga2, ct2["p"] * y + ct2["s"][:, None], rtol=1e-12)
    # pytree primal
    out, f_vjp = kiln.vjp(lambda p: p["u"] * p["v"][0], {"u": x, "v": [y]})
    (g,) = f_vjp(np.ones(S))
    assert_close(g["u"], np.broadcast_to(y, S))
    assert_close(g["v"][0], x.sum(0), rtol=1e-12)
    # has_aux
    out, f_vjp, aux = kiln.vjp(lambda a: (a * 2, a.sum()), x, has_aux=True)
    assert_close(aux, x.sum(), rtol=1e-12)
    assert_close(f_vjp(np.ones(S))[0], 2 * np.ones(S))
    with pytest.raises(ValueError):
        f_vjp(np.ones(3))


def test_linearize():
    x, v = normal(*S), normal(*S)
    y, f_jvp = kiln.linearize(jnp.sin, x)
    assert_close(y, np.sin(x), rtol=1e-12)
    assert_close(f_jvp(v), np.cos(x) * v, rtol=1e-12)


# ---------------------------------------------------------------------------
# Jacobians and Hessians

def test_jacfwd_jacrev_against_each_other_and_fd():
    def f(x):
        return jnp.sin(x) * jnp.sum(x ** 2) + x[::-1]
    x = normal(4)
    jf, jr = kiln.jacfwd(f)(x), kiln.jacrev(f)(x)
    assert jf.shape == (4, 4) and jr.shape == (4, 4)
    assert_close(jf, jr, rtol=1e-12, atol=1e-12)
    want = np.stack([fd(kiln.jit(f), [x], [np.eye(4)[i]]) for i in range(4)], axis=1)
    assert_close(jr, want)
    # matrix in, vector out, two arguments
    g = lambda a, b: a @ b + jnp.sum(a ** 2)
    a, b = normal(2, 3), normal(3)
    ja, jb = kiln.jacrev(g, argnums=(0, 1))(a, b)
    fa, fb = kiln.jacfwd(g, argnums=(0, 1))(a, b)
    assert ja.shape == (2, 2, 3) and jb.shape == (2, 3)
    assert_close(ja, fa, rtol=1e-12, atol=1e-12)
    assert_close(jb, fb, rtol=1e-12, atol=1e-12)
    assert_close(jb, a, rtol=1e-12)
    assert kiln.jacobian(jnp.sin)(x).shape == (4, 4)


def test_hessian_of_quadratic_form():
    A = normal(4, 4)
    x = normal(4)
    h = kiln.hessian(lambda x: x @ A @ x)(x)
    assert_close(h, A + A.T, rtol=1e-12, atol=1e-12)
    h2 = kiln.jacfwd(kiln.jacrev(lambda x: x @ A @ x))(x)
    assert_close(h2, A + A.T, rtol=1e-12, atol=1e-12)
    h3 = kiln.jacrev(kiln.jacrev(lambda x: x @ A @ x))(x)
    assert_close(h3, A + A.T, rtol=1e-12, atol=1e-12)


def test_hessian_nonquadratic():
    x = normal(3)
    f = lambda x: jnp.sum(jnp.exp(x) * x[0])
    h = kiln.hessian(f)(x)
    want = np.diag(np.exp(x) * x[0])
    want[0, :] += np.exp(x)
    want[:, 0] += np.exp(x)
    assert_close(h, want, rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------
# Composition

def test_higher_order_grad():
    f = lambda x: jnp.sin(x) * x
    d1 = kiln.grad(f)
    d2 = kiln.grad(d1)
    d3 = kiln.grad(d2)
    x = 0.7
    assert_close(d1(x), np.cos(x) * x + np.sin(x), rtol=1e-12)
    assert_close(d2(x), -np.sin(x) * x + 2 * np.cos(x), rtol=1e-12)
    assert_close(d3(x), -np.cos(x) * x - 3 * np.sin(x), rtol=1e-12)
    assert_close(kiln.grad(kiln.grad(kiln.grad(lambda x: x ** 4)))(2.0), 48.0, rtol=1e-12)


def test_jit_of_grad_and_grad_of_jit():
    f = lambda x: jnp.sum(jnp.tanh(x) ** 2)
    x = normal(*S)
    want = 2 * np.tanh(x) * (1 - np.tanh(x) ** 2)
    assert_close(kiln.jit(kiln.grad(f))(x), want, rtol=1e-12)
    assert_close(kiln.grad(kiln.jit(f))(x), want, rtol=1e-12)
    assert_close(kiln.jit(kiln.grad(kiln.jit(f)))(x), want, rtol=1e-12)
    # jit(grad) reused on a new value
    x2 = normal(*S)
    assert_close(kiln.jit(kiln.grad(f))(x2), 2 * np.tanh(x2) * (1 - np.tanh(x2) ** 2), rtol=1e-12)


def test_jvp_of_grad_and_grad_of_jvp():
    f = lambda x: jnp.sum(jnp.sin(x) * x)
    x, v = normal(4), normal(4)
    _, t = kiln.jvp(kiln.grad(f), (x,), (v,))
    hess_diag = -np.sin(x) * x + 2 * np.cos(x)
    assert_close(t, hess_diag * v, rtol=1e-12)
    g = kiln.grad(lambda x: jnp.sum(kiln.jvp(jnp.sin, (x,), (v,))[1]))(x)
    assert_close(g, -np.sin(x) * v, rtol=1e-12)


def test_closure_over_outer_traced_value():
    def f(x):
        return kiln.grad(lambda y: x * y ** 2)(x)  # = 2 x^2
    assert_close(f(3.0), 18.0)
    assert_close(kiln.grad(f)(3.0), 12.0)  # d/dx 2x^2 = 4x
    assert_close(kiln.jit(f)(3.0), 18.0)
    assert_close(kiln.jit(kiln.grad(f))(3.0), 12.0)

    def g(x):  # inner grad must not differentiate the outer x (no perturbation confusion)
        return kiln.grad(lambda y: jnp.sin(x) * y)(1.0) * x
    assert_close(kiln.grad(g)(0.5), np.cos(0.5) * 0.5 + np.sin(0.5), rtol=1e-12)


def test_newton_method_with_hessian():
    A = normal(3, 3)
    A = A @ A.T + 3 * np.eye(3)
    b = normal(3)

    def f(x):
        return 0.5 * x @ A @ x - b @ x + 0.1 * jnp.sum(x ** 4)
    x = np.zeros(3)
    step = kiln.jit(lambda x: x - jnp.linalg.solve(kiln.hessian(f)(x), kiln.grad(f)(x)))
    for _ in range(12):
        x = step(x)
    assert np.linalg.norm(np.asarray(kiln.grad(f)(x))) < 1e-10


def test_mlp_training_loss_decreases():
    r = rng()
    X = r.normal(size=(32, 3)).astype(np.float32)
    Y = (np.sin(X[:, :1]) + X[:, 1:2] * X[:, 2:3]).astype(np.float32)
    params = {"w1": (r.normal(size=(3, 16)) * 0.5).astype(np.float32), "b1": np.zeros(16, np.float32),
              "w2": (r.normal(size=(16, 1)) * 0.5).astype(np.float32), "b2": np.zeros(1, np.float32)}

    def loss(p, x, y):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)

    @kiln.jit
    def update(p, x, y):
        l, g = kiln.value_and_grad(loss)(p, x, y)
        return {k: p[k] - 0.1 * g[k] for k in p}, l
    losses = []
    for _ in range(60):
        params, l = update(params, X, Y)
        losses.append(float(l))
    assert params["w1"].dtype == np.float32
    assert losses[-1] < 0.5 * losses[0], losses


# ---------------------------------------------------------------------------
# Errors: a missing rule is NotImplementedError naming the primitive, never a wrong answer

MISSING = [  # the cases JAX does not differentiate either
    ("qr", lambda x: jnp.sum(lax.linalg.qr(x.T, full_matrices=True)[0])),  # tall, full
    ("qr", lambda x: jnp.sum(lax.linalg.qr(x, full_matrices=False)[1])),  # wide
    ("svd", lambda x: jnp.sum(lax.linalg.svd(x, full_matrices=True)[0])),  # non-square, full
]


@pytest.mark.parametrize("name,f", MISSING, ids=[f"{m[0]}{i}" for i, m in enumerate(MISSING)])
def test_missing_rules_raise(name, f):
    x = uniform(0.5, 2, *S)
    with pytest.raises(NotImplementedError, match=name):
        kiln.grad(f)(x)
    with pytest.raises(NotImplementedError, match=name):
        kiln.jvp(f, (x,), (x,))
    with pytest.raises(NotImplementedError, match=name):
        kiln.jit(kiln.grad(f))(x)


def test_int_primitives_have_zero_gradient():
    x = normal(*S)
    f = lambda x: jnp.sum(x * jnp.argmax(x, axis=1)[:, None].astype(np.float64))
    g = kiln.grad(f)(x)
    assert_close(g, np.broadcast_to(np.argmax(x, axis=1)[:, None], S).astype(np.float64))


# ---------------------------------------------------------------------------
# Regressions and edge cases

def test_grad_sees_a_changed_closure_value():
    # guards a bug: grad cached its executable per input shapes, so a function whose trace
    # depends on a changed Python value returned the stale gradient
    scale = [2.0]
    g = kiln.grad(lambda x: x * scale[0])
    assert_close(g(1.0), 2.0)
    scale[0] = 5.0
    assert_close(g(1.0), 5.0)
    _, f_jvp = kiln.linearize(lambda x: x * scale[0], 1.0)
    assert_close(f_jvp(1.0), 5.0)


def test_take_gradient_goes_to_the_clamped_position():
    # guards a bug: take clamps out-of-range indices, but its transpose scatter dropped them
    x = normal(3)
    g = kiln.grad(lambda x: jnp.sum(lax._take(x, np.array([5, 0], np.int32), 0)))(x)
    assert_close(g, [1.0, 0.0, 1.0])


def test_scatter_duplicate_indices():
    idx = np.array([1, 1, 2], np.int32)
    w = np.array([1.0, 2.0, 3.0])
    u = np.array([2.0, 3.0, 5.0])
    # set: exactly one of the duplicates wins; only it receives the cotangent
    g = kiln.grad(lambda u: jnp.sum(jnp.zeros(3).at[idx].set(u) * w))(u)
    assert sorted(np.asarray(g)[:2].tolist()) == [0.0, 2.0] and float(g[2]) == 3.0
    y = np.asarray(jnp.zeros(3).at[idx].set(u))
    assert y[1] == (u[0] if float(g[0]) else u[1])
    # add and multiply: every duplicate contributes
    assert_close(kiln.grad(lambda u: jnp.sum(jnp.zeros(3).at[idx].add(u) * w))(u), [2.0, 2.0, 3.0])
    assert_close(kiln.grad(lambda u: jnp.sum(jnp.ones(3).at[idx].multiply(u) * w))(u), [6.0, 4.0, 3.0])
    # min/max: the winner, and ties split
    g = kiln.grad(lambda u: jnp.sum(jnp.zeros(3).at[idx].max(u) * w))(np.array([4.0, 4.0, -1.0]))
    assert_close(g, [1.0, 1.0, 0.0])
    check(lambda x, u: x.at[idx].max(u) + x.at[idx].multiply(u), normal(3), normal(3))


def test_scatter_add_drops_out_of_bounds_updates():
    idx = np.array([0, 9], np.int32)
    g = kiln.grad(lambda u: jnp.sum(lax._scatter(jnp.zeros(3), idx, u, 0, "add") * 2.0))(np.ones(2))
    assert_close(g, [2.0, 0.0])


def test_cummax_ties_conserve_the_tangent():
    x = np.array([1.0, 3.0, 2.0, 3.0])
    g = np.asarray(kiln.grad(lambda x: jnp.sum(lax.cummax(x)))(x))
    assert g[0] == 1.0 and g[2] == 0.0 and abs(g[1] + g[3] - 3.0) < 1e-12


def test_sort_with_integer_keys_and_argsort():
    x = np.array([0.5, 1.5, -2.0])
    k = np.array([2, 0, 1], np.int32)
    w = np.array([1.0, 2.0, 3.0])
    g = kiln.grad(lambda x: jnp.sum(lax.sort((k, x), num_keys=1)[1] * w))(x)
    assert_close(g, [3.0, 1.0, 2.0])
    g = kiln.grad(lambda x: jnp.sum(x[jnp.argsort(x)] * w))(x)
    assert_close(g, [2.0, 3.0, 1.0])


def test_jacobians_of_pytrees():
    p = {"a": normal(2), "b": normal(2)}

    def f(p):
        return {"s": jnp.sum(p["a"] ** 2 * p["b"]), "v": p["a"] * 3}
    jr, jf = kiln.jacrev(f)(p), kiln.jacfwd(f)(p)
    for out in ("s", "v"):
        for inp in ("a", "b"):
            assert_close(jr[out][inp], jf[out][inp], rtol=1e-12, atol=1e-12)
    assert_close(jr["s"]["a"], 2 * p["a"] * p["b"], rtol=1e-12)
    assert_close(jr["v"]["a"], 3 * np.eye(2))
    assert_close(jr["v"]["b"], np.zeros((2, 2)))
    h = kiln.hessian(lambda p: jnp.sum(p["a"] ** 2 * p["b"]))(p)
    assert_close(h["a"]["a"], np.diag(2 * p["b"]), rtol=1e-12, atol=1e-12)
    assert_close(h["a"]["b"], np.diag(2 * p["a"]), rtol=1e-12, atol=1e-12)
    assert_close(h["b"]["b"], np.zeros((2, 2)))
    (ja, jb), aux = kiln.jacrev(lambda x, y: (x * y, 7.0), argnums=(0, 1), has_aux=True)(p["a"], p["b"])
    assert_close(ja, np.diag(p["b"]))
    assert_close(jb, np.diag(p["a"]))
    assert float(aux) == 7.0
    with pytest.raises(TypeError):
        kiln.jacfwd(lambda n: n * 2)(np.arange(3))


def test_jacfwd_traces_once():
    calls = []

    def f(x):
        calls.append(1)
        return jnp.sin(x)
    kiln.jacfwd(f)(normal(5))
    assert len(calls) == 1


def test_jacobians_are_one_vmapped_pass_not_a_loop_over_the_basis():
    # as in JAX: jacrev = vmap(vjp) over the output basis, jacfwd = vmap(jvp) over the input
    # basis, so the traced program does not grow with the number of rows/columns
    def counts(jac, n):
        return kiln.make_jaxpr(jac(lambda x: jnp.sin(x) * jnp.sum(x ** 2)))(jnp.ones(n)).num_eqns
    for jac in (kiln.jacrev, kiln.jacfwd):
        assert counts(jac, 3) == counts(jac, 40)
    x = normal(4)
    want = np.diag(np.cos(x) * np.sum(x ** 2)) + np.outer(np.sin(x), 2 * x)
    f = lambda x: jnp.sin(x) * jnp.sum(x ** 2)
    for jac in (kiln.jacrev(f), kiln.jacfwd(f), kiln.jit(kiln.jacrev(f)), kiln.jit(kiln.jacfwd(f))):
        assert_close(jac(x), want, rtol=1e-12)


def test_jacobians_of_mixed_shapes_argnums_aux_and_empty_arrays():
    a, b = normal(2, 3), normal(3)

    def f(a, b):
        return (a @ b, jnp.sum(a) * b[0]), {"aux": a.shape[0]}
    for jac in (kiln.jacrev, kiln.jacfwd):
        (j_ab, j_s), aux = jac(f, argnums=(0, 1), has_aux=True)(a, b)
        assert aux == {"aux": 2}
        assert j_ab[0].shape == (2, 2, 3) and j_ab[1].shape == (2, 3)
        assert j_s[0].shape == (2, 3) and j_s[1].shape == (3,)
        want_a = np.einsum("ij,k->ijk", np.eye(2), b)
        assert_close(j_ab[0], want_a, rtol=1e-12)
        assert_close(j_ab[1], a, rtol=1e-12)
        assert_close(j_s[0], np.full((2, 3), b[0]), rtol=1e-12)
        assert_close(j_s[1], [np.sum(a), 0.0, 0.0], rtol=1e-12)
        assert jac(lambda x: x * 2)(jnp.zeros((0,))).shape == (0, 0)
        assert jac(lambda x: jnp.sum(x))(jnp.zeros((0, 2))).shape == (0, 2)


def test_low_precision_gradients_keep_their_dtype():
    for dt in (jnp.bfloat16, np.float16):
        x = jnp.asarray(np.array([0.5, 1.5, -2.0]), dtype=dt)
        g = kiln.grad(lambda x: jnp.sum(jnp.sin(x) * x))(x)
        assert g.dtype == np.dtype(dt)
        xf = np.asarray(x, np.float64)
        assert_close(np.asarray(g, np.float64), np.cos(xf) * xf + np.sin(xf), rtol=2e-2, atol=2e-2)


def test_arguments_not_differentiated_reach_the_function_as_they_are():
    # as JAX: grad traces only argnums; a Python int stays an int (range, shapes), also under jit
    # with the int static, and keyword arguments pass through
    f = lambda x, n, scale=1.0: sum(x * i for i in range(n)) * scale  # noqa: E731
    assert float(kiln.grad(f)(2.0, 4)) == 6.0
    assert float(kiln.jit(kiln.grad(f), static_argnums=1)(2.0, 4)) == 6.0
    assert float(kiln.grad(f)(2.0, 4, scale=0.5)) == 3.0
    g = kiln.grad(lambda x, w: jnp.sum(jnp.zeros(x.shape[0]) + w * x), argnums=1)
    assert float(g(np.arange(3.0), 2.0)) == 3.0


# ---- issue 32: wrong gradients (expected values pinned from JAX 0.10.2) ----

def test_min_max_gradient_of_a_nan_result_is_zero_for_both_operands():
    # guards issue 32: a NaN result equals neither operand, so JAX gives neither a tangent;
    # kiln gave the whole tangent to one of them
    nan = np.nan
    for f in (jnp.minimum, jnp.maximum, lax.min, lax.max):
        for a, b, want in [(3.0, nan, (0.0, 0.0)), (nan, 3.0, (0.0, 0.0)), (nan, nan, (0.0, 0.0)),
                           (2.0, 2.0, (0.5, 0.5)), (np.inf, np.inf, (0.5, 0.5))]:
            got = kiln.grad(f, argnums=(0, 1))(a, b)
            assert_close(np.array(got), want, what=f"{f.__name__}({a}, {b})")
    # cummax/cummin use the same rule over their running result
    g = kiln.grad(lambda x: jnp.sum(lax.cummax(x)))(np.array([1.0, nan, 2.0, 3.0, 3.0]))
    assert_close(g, [1.0, 0.0, 0.0, 0.0, 0.0])


def test_scatter_min_max_gradient_at_nan_positions():
    # guards issue 32: x.at[i].min(v)'s gradient was NaN (0/0) at positions no update touches
    # whose value is NaN, and at touched positions where a NaN won
    x = np.array([3.0, np.nan, 2.0, np.nan])
    for op, want in [("min", [0.0, 1.0, 1.0, 1.0]), ("max", [1.0, 1.0, 0.0, 1.0])]:
        g = kiln.grad(lambda x: jnp.sum(getattr(x.at[jnp.array([0, 2])], op)(jnp.array([1.0, 5.0]))))(x)
        assert_close(g, want, what=op)
        g = kiln.jit(kiln.grad(lambda x: jnp.sum(getattr(x.at[0], op)(x[1]))))(x)  # a NaN update wins
        assert_close(g, [0.0, 1.0, 1.0, 1.0], what=op)
        g = kiln.grad(lambda v: jnp.sum(getattr(jnp.array([3.0, np.nan, 2.0, 0.0]).at[jnp.array([0, 3])], op)(v)))(
            np.array([3.0, np.nan]))
        assert_close(g, [0.5, 0.0], what=op)


LOOP_X = np.array([2.0, np.inf, -1.0])
_LOOP_CASES = {
    # name: (f, JAX's gradient at LOOP_X)
    "scan result unused": (lambda x: (lax.scan(lambda c, y: (c * y, c), 1.0, x), jnp.sum(x))[1], [1.0, 1.0, 1.0]),
    "scan ys unused": (lambda x: lax.scan(lambda c, y: (c * y, c * y), 1.0, x)[0] + jnp.sum(x),
                       [-np.inf, -1.0, np.inf]),
    "scan carry unused": (lambda x: jnp.sum(lax.scan(lambda c, y: (c * y, y * 2.0), 1.0, x)[1]), [2.0, 2.0, 2.0]),
    "scan one of the ys unused": (lambda x: jnp.sum(lax.scan(lambda c, y: (c, (y * 2.0, c * y)), 1.0, x)[1][0]),
                                  [2.0, 2.0, 2.0]),
    "fori result unused": (lambda x: (lax.fori_loop(0, 3, lambda i, c: c * x[i], 1.0), jnp.sum(x))[1],
                           [1.0, 1.0, 1.0]),
    "fori one carry unused": (lambda x: lax.fori_loop(0, 3, lambda i, c: (c[0] * x[i], c[1] + x[i]), (1.0, 0.0))[1],
                              [1.0, 1.0, 1.0]),
    "cond result unused": (lambda x: (lax.cond(True, lambda x: x * x[1], lambda x: x, x), jnp.sum(x))[1],
                           [1.0, 1.0, 1.0]),
    "cond one result unused": (lambda x: jnp.sum(lax.cond(True, lambda x: (x * x[1], x * 2.0), lambda x: (x, x), x)[1]),
                               [2.0, 2.0, 2.0]),
}


@pytest.mark.parametrize("name", list(_LOOP_CASES))
def test_loop_outputs_without_cotangent_do_not_poison_the_gradient(name):
    # guards issue 32: the zero cotangents of unused loop outputs were materialized and
    # multiplied into the residuals (0 * inf = NaN); they are symbolic zeros now, and carries that
    # feed only such outputs are left out of the transposed loop (JAX's scan DCE)
    f, want = _LOOP_CASES[name]
    assert_close(kiln.grad(f)(LOOP_X), want, what=name)
    assert_close(kiln.jit(kiln.grad(f))(LOOP_X), want, what=f"jit {name}")


def test_floor_divide_has_zero_gradient():
    # guards issue 32: grad(x // 0.) was inf (the x2 == 0 branch's x1 / x2 leaked its tangent) and
    # grad wrt a tiny divisor NaN; floor_divide is piecewise constant: 0 everywhere, as JAX
    for a, b in [(1.0, 0.0), (1.0, -0.0), (0.0, 0.0), (3.0, 2.0), (-2.5, 1e-30), (7.0, np.nan)]:
        g = kiln.grad(jnp.floor_divide, argnums=(0, 1))(a, b)
        assert [float(v) for v in g] == [0.0, 0.0], (a, b, g)
    assert float(kiln.grad(lambda x: x // 0.0)(1.0)) == 0.0
    assert float(kiln.jit(kiln.grad(lambda x: jnp.divmod(x, 0.0)[0]))(1.0)) == 0.0


def test_ldexp_and_frexp_gradients():
    # guards issue 32: frexp's bit manipulation had no derivative, so grad of ldexp and of frexp's
    # mantissa was 0; JAX's frexp rule gives the mantissa 2 ** -exponent (and ldexp 2 ** e through it)
    x = np.array([1.5, -3.0, 0.0, 1e-30, np.inf, -0.3])
    g = kiln.vmap(kiln.grad(lambda v: jnp.frexp(v)[0]))(x)
    assert_close(g, [0.5, 0.25, 1.0, 2.0 ** 99, 1.0, 2.0], rtol=1e-12)
    for e, scale in [(3, 8.0), (-2, 0.25)]:
        g = kiln.vmap(kiln.grad(lambda v: jnp.ldexp(v, e)))(x)
        assert_close(g, [scale, scale, 1.0, scale, 1.0, scale], rtol=1e-12)
    assert float(kiln.grad(lambda x: jnp.ldexp(x, 3))(1.5)) == 8.0


def test_gradients_at_kinks_and_nan_as_jax():
    # guards issue 32 (siblings of the min/max NaN case, found by sweeping grad against JAX 0.10.2 at
    # 0, +-inf and NaN): abs's JVP is JAX's select(x >= 0, t, -t) (sign(0) stopped the tangent); fmax/fmin
    # are JAX's selects (a tie gives x2 the gradient); relu/relu6 pass no tangent at NaN; xlogy/xlog1py's
    # derivative in x at x == 0 is log(y); logaddexp/logaddexp2 (softplus) have JAX's custom JVP; hypot and
    # the max-based norms follow JAX's formulas at 0
    from kiln.scipy import special
    g = kiln.vmap(kiln.grad(jnp.abs))(np.array([0.0, -0.0, np.nan, -2.0]))
    assert_close(g, [1.0, 1.0, -1.0, -1.0])
    assert_close(kiln.grad(jnp.fmax, argnums=(0, 1))(0.0, 0.0), [0.0, 1.0])
    assert_close(kiln.grad(jnp.fmin, argnums=(0, 1))(1.0, 1.0), [0.0, 1.0])
    assert_close(kiln.grad(jnp.fmax, argnums=(0, 1))(np.nan, 1.0), [0.0, 1.0])
    for f in (kiln.nn.relu, kiln.nn.relu6, kiln.nn.hard_sigmoid):
        assert float(kiln.grad(f)(np.nan)) == 0.0, f.__name__
    assert float(kiln.grad(kiln.nn.relu)(2.0)) == 1.0 and float(kiln.grad(kiln.nn.relu)(0.0)) == 0.0
    assert_close(kiln.grad(special.xlogy, argnums=(0, 1))(0.0, 2.0), [np.log(2.0), 0.0])
    assert_close(kiln.grad(special.xlog1py)(0.0, 2.0), np.log(3.0))
    assert np.isnan(float(special.xlogy(0.0, np.nan)))  # NaN y propagates (scipy's rule)
    g = kiln.vmap(kiln.grad(special.entr))(np.array([0.0, 0.5, -1.0]))
    assert float(g[0]) == np.inf and abs(float(g[1]) + np.log(0.5) + 1) < 1e-12 and np.isnan(float(g[2]))
    for f in (jnp.logaddexp, lambda x: jnp.logaddexp2(x, 0.0), kiln.nn.softplus):
        f2 = (lambda x: jnp.logaddexp(x, 0.0)) if f is jnp.logaddexp else f
        assert_close(kiln.grad(f2)(0.0), 0.5)
    assert_close(kiln.grad(jnp.hypot, argnums=(0, 1))(0.0, 0.0), [0.5, 0.5])
    assert_close(kiln.grad(lambda x: jnp.linalg.norm(x, np.inf))(np.zeros(3)), [1 / 6] * 3)


def test_pow_gradient_has_jax_nans_at_zero():
    # bug (issue 32, fuzzer): pow's JVP zeroed d/dx where y == 0 and d/dy where x == 0, hiding JAX's
    # NaN of 0 * inf; JAX: d/dx = y x^(y-1), d/dy = log(x, 1 at 0) x^y (values pinned from JAX 0.10.2)
    a = np.array([0.0, -0.0, 0.0, 2.0, -2.0, 0.0], np.float32)
    b = np.array([0.0, -7.0, 2.5, 0.0, 3.0, -1.0], np.float32)
    ga, gb = kiln.grad(lambda a, b: jnp.sum(jnp.power(a, b)), argnums=(0, 1))(a, b)
    np.testing.assert_array_equal(np.asarray(ga), np.array([np.nan, -np.inf, 0, 0, 12, -np.inf], np.float32))
    np.testing.assert_allclose(np.asarray(gb), np.array([0, np.nan, 0, 0.6931472, np.nan, np.nan], np.float32),
                               rtol=1e-6)
    # an integer exponent (lax.pow accepts one, as JAX): derivative 0 where y == 0, also at x == 0
    y = np.array([0, -1, 3, 0], np.int32)
    x = np.array([0.0, 2.0, -2.0, np.nan], np.float32)
    assert np.asarray(kiln.grad(lambda x: lax.pow(x, y).sum())(x)).tolist() == [0.0, -0.25, 12.0, 0.0]
    np.testing.assert_array_equal(np.asarray(lax.pow(x, y)), np.array([1, 0.5, -8, 1], np.float32))


def test_has_aux_passes_untraced_aux_leaves_through():
    """Issue 33 (equinox's filter_vjp, optimistix's linearize): with has_aux, aux leaves that are
    not traced values (strings, objects, NumPy arrays, Python numbers) come back as they were, as
    JAX's; traced ones as arrays. linearize takes has_aux."""
    import kiln
    rng = np.random.default_rng()
    x0 = float(rng.uniform(0.5, 2))
    tag, host = object(), np.arange(3.0)

    def f(x):
        return x ** 2, {"s": "hello", "o": tag, "h": host, "n": 3.0, "t": x * 3}
    (v, aux), g = kiln.value_and_grad(f, has_aux=True)(x0)
    assert aux["s"] == "hello" and aux["o"] is tag and aux["h"] is host and aux["n"] == 3.0
    np.testing.assert_allclose([v, g, aux["t"]], [x0 ** 2, 2 * x0, 3 * x0], rtol=1e-6)
    _, f_vjp, aux = kiln.vjp(f, x0, has_aux=True)
    assert aux["o"] is tag and float(f_vjp(1.0)[0]) == pytest.approx(2 * x0, rel=1e-6)
    _, t, aux = kiln.jvp(f, (x0,), (1.0,), has_aux=True)
    assert aux["s"] == "hello" and float(t) == pytest.approx(2 * x0, rel=1e-6)
    y, lin, aux = kiln.linearize(f, x0, has_aux=True)
    assert aux["o"] is tag and float(lin(2.0)) == pytest.approx(4 * x0, rel=1e-6) and float(y) == pytest.approx(x0 ** 2)
    jac, aux = kiln.jacrev(f, has_aux=True)(x0)
    assert aux["s"] == "hello" and float(jac) == pytest.approx(2 * x0, rel=1e-6)
    jac, aux = kiln.jacfwd(f, has_aux=True)(x0)
    assert aux["h"] is host and float(jac) == pytest.approx(2 * x0, rel=1e-6)
    with pytest.raises(TypeError, match="pair"):
        kiln.grad(lambda x: x, has_aux=True)(x0)
