"""Regression tests for the disagreements with JAX found by the fuzz campaign of issue 32 (seeds
40000-46095): each test names the bug it guards; expected values are JAX 0.10.2's, hard-coded, or
NumPy float64 formulas."""
import numpy as np
import pytest

import kiln
import kiln.lax as lax
import kiln.numpy as jnp

nan, inf = np.nan, np.inf
rng = np.random.default_rng()


# ---- scans: the identity padding of recursive doubling took part in the tangent ------------------

def test_cummax_grad_nan_first_keeps_its_tangent():
    # cummax([nan, 3, 2])[0] is x[0] itself: JAX [1, 0, 0], kiln gave [0, 0, 0] (nan == nan failed)
    w = np.array([1, 1.25, 1.5], np.float32)
    g = kiln.grad(lambda x: jnp.sum(lax.cummax(x, axis=0) * w))(np.array([nan, 3.0, 2.0], np.float32))
    np.testing.assert_array_equal(np.asarray(g), [1, 0, 0])


@pytest.mark.parametrize("dtype", [np.float32, "bfloat16"])
def test_cummax_grad_minus_inf_does_not_tie_with_the_padding(dtype):
    # -inf tied max's -inf fill and lost half its tangent; JAX 0.10.2 [1.625, 0.625, 3.25, 0]
    import ml_dtypes
    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    w = np.array([1, 1.25, 1.5, 1.75], dt)
    x = np.array([-inf, -inf, 0.5, 0.25], dt)
    g = kiln.jit(kiln.grad(lambda x: jnp.sum(lax.cummax(x, axis=0) * w)))(x)
    np.testing.assert_array_equal(np.asarray(g).astype(np.float32), [1.625, 0.625, 3.25, 0])


def test_cummin_reverse_and_cumprod_with_inf():
    g = kiln.grad(lambda x: jnp.sum(lax.cummin(x, axis=0, reverse=True) * np.array([1, 1.25, 1.5, 1.75], np.float32)))(
        np.array([0.5, 2.0, inf, inf], np.float32))
    np.testing.assert_array_equal(np.asarray(g), [1, 1.25, 0.75, 2.5])       # JAX 0.10.2
    g = kiln.grad(lambda x: jnp.sum(lax.cumprod(x, axis=0)))(np.array([inf, 2.0, 3.0], np.float32))
    np.testing.assert_array_equal(np.asarray(g), [9, inf, inf])              # was [nan, ...]: 0 * inf


# ---- x.at[i].multiply(v, mode='drop'): a dropped update's derivative was 0 * operand --------------

@pytest.mark.parametrize("transform", ["grad", "jit"])
def test_at_multiply_dropped_update_has_zero_derivative_over_nan(transform):
    v = rng.standard_normal((2, 2)).astype(np.float32)
    v[1, 0] = nan   # the (clamped) position a dropped update would have read
    v[0, 1] = inf
    u = rng.standard_normal(2).astype(np.float32)
    w = rng.standard_normal((2, 2)).astype(np.float32)

    def row(v, u):       # one traced index, whole rows: the scatter path
        return jnp.sum(v.at[np.int32(5)].multiply(u, mode="drop") * w)

    def elem(v, u, i, j):   # traced indices of a box: the dynamic_update_slice path
        return jnp.sum(v.at[i, j].multiply(u[0], mode="drop") * w)

    g_row = kiln.grad(row, argnums=(0, 1))
    g_elem = kiln.grad(elem, argnums=(0, 1))
    if transform == "jit":
        g_row, g_elem = kiln.jit(g_row), kiln.jit(g_elem)
    gv, gu = g_row(v, u)
    np.testing.assert_array_equal(np.asarray(gv), w)
    np.testing.assert_array_equal(np.asarray(gu), [0, 0])   # JAX 0.10.2; kiln gave [0, nan]
    gv, gu = g_elem(v, u, np.int32(-4), np.int32(0))
    np.testing.assert_array_equal(np.asarray(gv), w)
    np.testing.assert_array_equal(np.asarray(gu), [0, 0])


# ---- reverse mode through while_loop with a complex carry under jit -------------------------------

@pytest.mark.parametrize("jit", [False, True])
def test_while_loop_complex_carry_reverse_mode(jit):
    # while_lin's shape rule counted only float carries (complex ones have tangents too):
    # "while_lin: 4 operands, expected 3" under jit(grad) and vmap(grad)
    z = (rng.standard_normal(2) + 1j * rng.standard_normal(2)).astype(np.complex64)
    y = rng.standard_normal(2).astype(np.float32)
    a, c = 0.5 + 0.25j, 1 - 2j

    def f(z, y, n):
        def body(s):
            i, p, q = s
            return i + 1, p * a + q, q * y
        return jnp.sum(jnp.real(lax.while_loop(lambda s: s[0] < n, body, (0, z, y.astype(jnp.complex64)))[1] * c))

    g = kiln.grad(f, argnums=(0, 1))
    if jit:
        g = kiln.jit(g)
    gz, gy = g(z, y, np.int32(3))
    # after 3 trips p = a^3 z + (a^2 + a + 1) y... with q_k = y^(k+1): p = a^3 z + a^2 y + a y^2 + y^3
    # grad of Re(c p) for complex z is c a^3 in JAX's convention (0.375+0.109375j); d/dy is real
    np.testing.assert_allclose(np.asarray(gz), np.full(2, c * a ** 3), rtol=1e-6)
    dy = np.real(c * (a ** 2 + 2 * a * y + 3 * y.astype(np.float64) ** 2))
    np.testing.assert_allclose(np.asarray(gy), dy, rtol=1e-5)
    gv = kiln.jit(kiln.vmap(kiln.grad(f, argnums=(0, 1)), in_axes=(0, 0, None)))(z[None], y[None], np.int32(3))
    np.testing.assert_allclose(np.asarray(gv[0])[0], np.asarray(gz), rtol=1e-6)


# ---- jax.nn activations of bool and integer inputs: dtype and weak type of JAX's expressions -----

@pytest.mark.parametrize("name, bool_weak, int_weak", [
    ("softplus", True, False), ("soft_sign", True, False), ("mish", True, False),
    ("elu", True, True), ("celu", True, True), ("selu", True, True), ("relu6", True, True),
    ("hard_sigmoid", True, True), ("hard_swish", True, True), ("sparse_plus", True, True)])
def test_activation_of_bool_and_int_weak_type(name, bool_weak, int_weak):
    # JAX 0.10.2: softplus(bool) is logaddexp(x, 0), a weak float32 (kiln gave a strong one)
    fn = getattr(kiln.nn, name)
    b = fn(jnp.asarray(np.array([True, False])))
    i = fn(jnp.asarray(np.array([1, -2], np.int16)))
    f = fn(jnp.asarray(np.array([1, -2], np.float16)))
    assert (b.dtype, bool(b.weak_type)) == (np.float32, bool_weak)
    assert (i.dtype, bool(i.weak_type)) == (np.float32, int_weak)
    assert (f.dtype, bool(f.weak_type)) == (np.float16, False)


def test_softplus_bool_value():
    np.testing.assert_allclose(np.asarray(kiln.nn.softplus(jnp.asarray(np.array([[False, True]])))),
                               [[np.log(2), np.log1p(np.e)]], rtol=1e-6)


@pytest.mark.parametrize("name", ["sigmoid", "silu", "swish", "glu"])
@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.bool_])
def test_logistic_activations_reject_integers(name, dtype):
    # JAX: "logistic does not accept dtype int16" (TypeError); kiln computed a float32
    with pytest.raises(TypeError, match="logistic"):
        getattr(kiln.nn, name)(jnp.asarray(np.array([1, 0], dtype)))


# ---- reductions with an explicit float16 dtype compute in it (JAX upcasts only for dtype=None) ----

def test_prod_with_float16_dtype_differentiates_in_float16():
    # JAX 0.10.2: [800, 600, inf, inf] (300 * 400 overflows float16); kiln gave 120000, 240000
    x = np.array([300.0, 400.0, 2.0, 1.0], np.float32)
    g = kiln.grad(lambda x: jnp.prod(x, dtype=jnp.float16).astype(jnp.float32))(x)
    np.testing.assert_array_equal(np.asarray(g), [800, 600, inf, inf])
    z = np.array([[1.5 - 2j, -40 + 1j], [30 + 0.5j, 2 - 1j]], np.complex64)
    gz = kiln.grad(lambda z: jnp.sum(jnp.prod(z, axis=0, dtype=jnp.float16)).astype(jnp.float32))(z)
    np.testing.assert_array_equal(np.asarray(gz), [[30, 2], [1.5, -40]])
    # dtype=None still accumulates float16 in float32 (as JAX): 1 + ... + 1 (4096 of them) is 4096
    assert float(jnp.sum(np.ones(4096, np.float16))) == 4096


def test_nan_to_num_bfloat16_does_not_ask_numpy_finfo(monkeypatch):
    # kiln called np.finfo(bfloat16), which some NumPy/ml_dtypes versions reject ("data type
    # dtype(bfloat16) not compatible with finfo"); limits come from ml_dtypes.finfo
    import ml_dtypes
    real_finfo = np.finfo

    def strict_finfo(dt):
        if np.dtype(dt) == np.dtype(ml_dtypes.bfloat16):
            raise ValueError("data type dtype(bfloat16) not compatible with finfo")
        return real_finfo(dt)
    monkeypatch.setattr(np, "finfo", strict_finfo)
    x = np.array([nan, inf, -inf, rng.standard_normal()], ml_dtypes.bfloat16)
    big = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    np.testing.assert_array_equal(np.asarray(jnp.nan_to_num(x)).astype(np.float64), [0, big, -big, float(x[3])])


# ---- top_k ranks by IEEE total order; bitcast of bfloat16 keeps a NaN's sign ----------------------

def test_top_k_total_order_of_nan_signs_and_zeros():
    # JAX 0.10.2 (XLA TopK): +NaN > +inf > ... > +0 > -0 > ... > -inf > -NaN; kiln put every NaN first
    x = np.array([0.7, -np.float32(nan), 1.1, nan, -inf, inf], np.float32)
    vals, idx = lax.top_k(x, 6)
    np.testing.assert_array_equal(np.asarray(idx), [3, 5, 2, 0, 4, 1])
    assert np.signbit(np.asarray(vals)[5]) and not np.signbit(np.asarray(vals)[0])
    vals, idx = kiln.jit(lambda x: lax.top_k(x, 3))(np.array([-0.0, 0.0, -0.0], np.float32))
    np.testing.assert_array_equal(np.asarray(idx), [1, 0, 2])
    import ml_dtypes
    _, idx = lax.top_k(np.array([1, -np.nan, -inf], ml_dtypes.bfloat16), 3)
    np.testing.assert_array_equal(np.asarray(idx), [0, 2, 1])
    # random finite rows agree with a stable descending argsort
    r = rng.standard_normal((3, 7)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(lax.top_k(r, 4)[1]), np.argsort(-r, axis=-1, kind="stable")[:, :4])


def test_top_k_indices_take_the_operand_weak_type():
    # JAX 0.10.2: top_k(weak float)[1] is a weak int32 (its abstract eval updates the operand's aval)
    weak = lax.convert_element_type(np.array([0.5, 2.0, 1.0], np.float32), np.float32, True)
    assert lax.top_k(weak, 2)[1].weak_type and lax.top_k(weak, 2)[0].weak_type
    assert not lax.top_k(np.array([0.5, 2.0], np.float32), 1)[1].weak_type


@pytest.mark.parametrize("jit", [False, True])
def test_bitcast_bfloat16_keeps_nan_sign(jit):
    import ml_dtypes
    x = np.array([1, -nan, -inf, nan, -0.0, rng.standard_normal()], ml_dtypes.bfloat16)
    f = (lambda a: lax.bitcast_convert_type(a, jnp.uint16))
    got = (kiln.jit(f) if jit else f)(jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(got), x.view(np.uint16))   # -NaN is 0xffc0, as JAX


# ---- exception classes as JAX's ----------------------------------------------------------------

@pytest.mark.parametrize("fn", ["hypot", "signbit"])
def test_complex_hypot_and_signbit_raise_value_error(fn):
    # JAX 0.10.2: "jnp.hypot is not well defined for complex-valued inputs" (ValueError); kiln TypeError
    z = jnp.asarray(rng.standard_normal(2) + 1j)
    args = (z, np.int32(3)) if fn == "hypot" else (z,)
    with pytest.raises(ValueError, match="complex"):
        getattr(jnp, fn)(*args)
    with pytest.raises(TypeError, match="complex"):   # the other real-only ops keep JAX's TypeError
        jnp.copysign(z, 1.0)


@pytest.mark.parametrize("args", [(1,), (0, 3), (2,)])
def test_arange_bool_raises_type_error(args):
    # JAX 0.10.2: "iota does not accept dtype bool"; kiln computed a bool range
    with pytest.raises(TypeError, match="iota does not accept dtype bool"):
        jnp.arange(*args, dtype=jnp.bool_)


def test_var_gradient_overflows_as_jax():
    # JAX squares the centered values with lax.square, whose derivative 2x * t overflows to inf near
    # the float max; kiln's x * x gave the finite -3.755e37 (JAX 0.10.2: [-inf, nan, -inf, -inf])
    import ml_dtypes
    x = np.array([0.5, 3.00406e38, -1.29688, -0.800781], ml_dtypes.bfloat16)
    g = kiln.grad(lambda x: jnp.var(x).astype(jnp.float32))(x)
    np.testing.assert_array_equal(np.asarray(g).astype(np.float32), [-inf, nan, -inf, -inf])
    r = rng.standard_normal(5)
    # (atol: float32's r - mean carries ~1e-7 absolute error, large beside an element near the mean)
    np.testing.assert_allclose(np.asarray(kiln.grad(jnp.var)(r.astype(np.float32))), 2 * (r - r.mean()) / 5,
                               rtol=1e-5, atol=1e-6)


def test_logical_ops_of_a_weak_scalar_are_weak():
    # JAX 0.10.2 compares with lax._const(x, 0), a weak Python scalar when x is a weak 0-d array:
    # logical_and(0.5, int32 scalar) is a weak bool, with an int32 vector a strong one
    s = jnp.asarray(np.array(int(rng.integers(1, 9)), np.int32))
    v = jnp.asarray(rng.integers(0, 2, 3).astype(np.int32))
    assert jnp.logical_and(0.5, s).weak_type and jnp.logical_or(s, 0.5).weak_type
    assert not jnp.logical_and(0.5, v).weak_type
    assert not jnp.logical_xor(s, 2).weak_type          # int32 scalar and a weak int: int32, strong
    assert bool(jnp.logical_and(0.5, s)) is True


def test_activations_of_bool_as_jax():
    # JAX 0.10.2: relu/hard_tanh of bool are jnp.maximum/where with Python ints (weak int32);
    # log_sigmoid (neg) and softmax/log_softmax (sub) reject bool with TypeError
    b = jnp.asarray(rng.random(4) < 0.5)
    for name in ("relu", "hard_tanh"):
        out = getattr(kiln.nn, name)(b)
        assert (out.dtype, bool(out.weak_type)) == (np.int32, True)
        np.testing.assert_array_equal(np.asarray(out), np.asarray(b).astype(np.int32))
    for name in ("log_sigmoid", "softmax", "log_softmax"):
        with pytest.raises(TypeError, match="bool"):
            getattr(kiln.nn, name)(b)
    i = jnp.asarray(np.array([3, -2], np.int16))
    assert kiln.nn.relu(i).dtype == np.int16 and not kiln.nn.relu(i).weak_type


def test_clz_and_population_count_keep_a_weak_type():
    # fuzzer seed 100817 (JAX 0.10.2): clz(bool * 7) is weak int32, as every unary primitive keeps it
    b = jnp.asarray(rng.random(5) < 0.5)
    v = jnp.multiply(b, 7)
    for fn in (kiln.lax.clz, kiln.lax.population_count, kiln.jit(kiln.lax.clz)):
        out = fn(v)
        assert (out.dtype, bool(out.weak_type)) == (np.int32, True)
    bits = np.asarray(b).astype(np.int32) * 7
    np.testing.assert_array_equal(kiln.lax.clz(v), np.where(bits == 0, 32, 29))
    np.testing.assert_array_equal(kiln.lax.population_count(v), np.where(bits == 0, 0, 3))
    assert not kiln.lax.clz(jnp.asarray(np.array([1, 2], np.int32))).weak_type


@pytest.mark.parametrize("x64", [False, True])
def test_bfloat16_kept_store_compiles(x64):
    # fuzzer seed 103551: grad(jit(sinc)) on bfloat16 stored with a `keep` select on bf16, which x86
    # lowers through __truncsfbf2 (not in the process): "Failed to materialize symbols"
    import ml_dtypes
    old = kiln.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", x64)
    try:
        x = (rng.uniform(0.5, 2, 5) * rng.choice([-1, 1], 5)).astype(ml_dtypes.bfloat16)  # (no cancellation)
        g = kiln.vmap(kiln.grad(lambda v: jnp.sinc(kiln.jit(lambda u: u)(v))))(jnp.asarray(x))
        xs = x.astype(np.float64)
        want = (np.cos(np.pi * xs) * np.pi * xs - np.sin(np.pi * xs)) / (np.pi * xs * xs)
        np.testing.assert_allclose(np.asarray(g, np.float64), want, rtol=0.05, atol=0.02)
        g1 = kiln.grad(lambda v: jnp.sum(kiln.jit(jnp.sinc)(v)))(jnp.asarray(x[:1].reshape(())))
        assert g1.dtype == ml_dtypes.bfloat16
    finally:
        kiln.config.update("jax_enable_x64", old)


def test_bool_add_update_of_an_empty_index_returns_the_array():
    # fuzzer seed 101168 (JAX 0.10.2): x.at[empty].add(False) on bools returns x; a non-empty one raises
    x = jnp.asarray(rng.random(3) < 0.5)
    empty = np.zeros((0, 3), np.int8)
    np.testing.assert_array_equal(x.at[empty].add(False, mode="promise_in_bounds"), np.asarray(x))
    np.testing.assert_array_equal(kiln.jit(lambda a, i: a.at[i].add(False))(x, empty), np.asarray(x))
    with pytest.raises(TypeError, match="bool"):
        x.at[np.array([0])].add(True)


def test_power_of_a_python_float_to_an_integer_array_is_strong():
    # fuzzer seed 102734 (JAX 0.10.2): JAX's _power is lax.pow(x1, x2) for an inexact base and an
    # integer exponent, weak only when both are
    e = jnp.asarray(rng.integers(0, 5, 3).astype(np.uint32))
    for base in (1 + 2j, 2.0):
        out = jnp.power(base, e)
        assert not out.weak_type
        np.testing.assert_allclose(out, np.power(base, np.asarray(e).astype(np.float64)), rtol=1e-5)
    assert jnp.power(2.0, 3).weak_type and jnp.power(2.0, 1.5).weak_type
    assert not jnp.power(2, e).weak_type


def test_python_bool_operands_take_the_result_weak_type():
    # fuzzer seed 104335 (JAX 0.10.2): where(c, -1, False) is weak int32: every operand is converted
    # to the promoted dtype with its weak flag, the Python bool too
    c = jnp.asarray(rng.random(3) < 0.5)
    out = jnp.where(c, -1, False)
    assert (out.dtype, bool(out.weak_type)) == (np.int32, True)
    np.testing.assert_array_equal(out, np.where(np.asarray(c), -1, 0))
    assert jnp.add(True, 1).weak_type and not jnp.add(c, True).weak_type
    i8 = jnp.asarray(np.array([1, 2], np.int8))
    assert jnp.where(c[:2], i8, True).dtype == np.int8 and not jnp.where(c[:2], i8, True).weak_type


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_cumlogsumexp_gradient_at_ties(dtype):
    # fuzzer seed 104542: with -0.0 and 0.0 along the axis the derivative of log(e^a + e^b) is 1/2 for
    # each (JAX: jnp.logaddexp's softmax weights); kiln gave the tie to one side
    x = np.array([[-0.0, 0.5], [0.0, 0.2]], dtype)
    w = rng.uniform(0.5, 2.0, (2, 2)).astype(dtype)
    g = kiln.grad(lambda v: jnp.sum(kiln.lax.cumlogsumexp(v, axis=0) * w))(jnp.asarray(x))
    xs = x.astype(np.float64)
    soft = np.exp(xs[0] - np.logaddexp(xs[0], xs[1]))
    want = np.stack([w[0] + w[1] * soft, w[1] * (1 - soft)]).astype(np.float64)
    np.testing.assert_allclose(np.asarray(g, np.float64), want, rtol=2e-3 if dtype == np.float16 else 1e-6)


# ---- campaign 6 (seeds 105196-108127) -------------------------------------------------------------

@pytest.mark.parametrize("first", [0.0, -0.0])
def test_signed_zero_scalars_are_not_conflated_by_the_scalar_cache(first):
    # -0.0 == 0.0 and hash alike: after x // 0.0, x // -0.0 reused the +0.0 constant (-inf, not inf)
    x = jnp.asarray(-rng.uniform(0.1, 1.0, (2, 3)).astype(np.float32))
    xn = np.asarray(x)
    for z in (first, -first, first):
        with np.errstate(divide="ignore"):
            np.testing.assert_array_equal(np.asarray(x // z), np.floor_divide(xn, np.float32(z)))
        np.testing.assert_array_equal(np.signbit(np.asarray(x * z)), np.signbit(xn * np.float32(z)))
        np.testing.assert_array_equal(np.signbit(np.asarray(jnp.multiply(x, z))), np.signbit(xn * z))
    c = jnp.asarray(np.array([1 + 1j], np.complex64))
    np.testing.assert_array_equal(np.signbit(np.asarray(c * complex(first, -first)).imag),
                                  np.signbit((np.complex64(1 + 1j) * complex(first, -first)).imag))


def test_unsigned_literal_of_a_negative_python_int_under_jit_and_grad(x64):
    # logical_xor(uint64, -3) inside jit, differentiated: the uint64 literal's bits came back as the
    # int64 -3 and NumPy refused them (OverflowError); JAX wraps -3 to 2**64 - 3
    x0 = np.array([[5], [0]], np.uint64)
    f = lambda x: jnp.logical_xor(x, -3)
    np.testing.assert_array_equal(np.asarray(kiln.jit(f)(x0)), [[False], [True]])
    y = rng.standard_normal(3)
    g = kiln.grad(lambda x0, y: jnp.sum(y * y) + jnp.sum(kiln.jit(f)(x0) * 0.0), 1)(x0, y)
    np.testing.assert_allclose(np.asarray(g), 2 * y, rtol=1e-12)
    jaxpr = kiln.make_jaxpr(f)(x0)
    lits = [int(v.val) for e in jaxpr.jaxpr.eqns for v in e.invars if hasattr(v, "val")]
    assert 2**64 - 3 in lits and min(lits) >= 0


def test_dead_traced_while_loop_adds_no_nan_to_the_gradient():
    # a fori_loop with a traced trip count whose result is unused, under grad(jit): its transpose ran
    # with zero cotangents through a * a at a = nan-infj and gave nan (JAX: 0)
    x = np.array([complex(nan, -inf), 1 + 2j], np.complex64)
    y = rng.standard_normal(3).astype(np.float32)

    def f(x, y, n):
        lax.fori_loop(0, n, lambda i, a: a * a, x)
        return jnp.sum(y * y)
    for g in (kiln.grad(kiln.jit(f), (0, 1)), kiln.jit(kiln.grad(f, (0, 1)))):
        gx, gy = g(x, y, 2)
        np.testing.assert_array_equal(np.asarray(gx), [0, 0])
        np.testing.assert_allclose(np.asarray(gy), 2 * y, rtol=1e-6)


def test_dynamic_update_slice_is_strong_and_at_set_keeps_the_weak_type():
    # JAX: dynamic_update_slice's result is strong even from weak operands; x.at[...] keeps x's
    x = jnp.asarray(rng.integers(0, 2, (2, 3)).astype(bool)) | 2  # weak int32
    assert x.weak_type
    upd = jnp.asarray(rng.integers(-5, 5, (1, 2)).astype(np.int32))
    for f in (lambda x: lax.dynamic_update_slice(x, upd, (1, 0)),
              lambda x: lax.dynamic_update_slice(x, x[:1, :2], (1, 1)),
              lambda x: lax.dynamic_update_slice_in_dim(x, x[:, :1], 2, 1)):
        for g in (f, kiln.jit(f)):
            assert not g(x).weak_type
    for f in (lambda x: x.at[0, 1].set(3), lambda x: x.at[1, :2].add(upd[0]),
              lambda x, i=np.int32(1): x.at[0, i].set(7), lambda x, i=np.int32(1): x.at[i, 1:].set(7)):
        for g in (f, kiln.jit(f)):
            y = g(x)
            assert y.weak_type and y.dtype == np.int32
    ref = np.asarray(x).copy()
    ref[1, 0:2] = np.asarray(upd)[0]
    np.testing.assert_array_equal(np.asarray(lax.dynamic_update_slice(x, upd, (1, 0))), ref)


@pytest.mark.parametrize("jit", [False, True])
def test_heaviside_weak_type_follows_jax_constants(jit):
    # JAX's constants are Python scalars for a weak scalar x1 (weak result when x2 is weak too) and
    # strong arrays otherwise; kiln's result was never weak
    b = rng.integers(0, 2, 5).astype(bool)
    f32 = rng.standard_normal(5).astype(np.float32)
    cases = [((-1, b), True), ((1, b), True), ((0.5, b), True), ((-1, f32), False), ((f32, b), False),
             ((b, -1), False), ((jnp.asarray(2), b), True), ((0, 0.5), True), ((f32, 0.25), False)]
    for (a1, a2), weak in cases:
        fn = kiln.jit(jnp.heaviside) if jit and not isinstance(a1, (int, float)) else jnp.heaviside
        r = fn(a1, a2)
        assert r.dtype == np.float32 and r.weak_type == weak, (a1, a2)
        x1, x2 = np.asarray(a1, np.float64), np.asarray(a2, np.float64)
        np.testing.assert_array_equal(np.asarray(r), np.heaviside(x1, x2).astype(np.float32))


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_rsqrt_of_an_infinite_part_is_zero(dtype):
    # rsqrt(-inf + nan i) was nan (1 / sqrt): XLA's gives a zero, so arcsinh's derivative at
    # +-inf i (rsqrt(z^2 + 1)) was nan where JAX's is 0; expected values are JAX 0.10.2's
    z = np.array([complex(-inf, nan), complex(inf, nan), complex(nan, inf), complex(-inf, 1),
                  complex(1, inf), complex(-inf, inf)], dtype)
    r = np.asarray(lax.rsqrt(jnp.asarray(z)))
    np.testing.assert_array_equal(r, np.zeros(6))
    np.testing.assert_array_equal(np.signbit(r.real), [1, 0, 0, 1, 0, 1])
    np.testing.assert_array_equal(np.signbit(r.imag), [1, 1, 1, 1, 1, 1])
    w = rng.standard_normal(3).astype(np.float32)
    x = np.array([complex(0.1, 0.5), complex(-0.0, inf), complex(2.0, -inf)], dtype)
    g = np.asarray(kiln.grad(lambda x: jnp.sum(jnp.real(jnp.arcsinh(x) * w)))(x))
    np.testing.assert_array_equal(g[1:], [0, 0])
    np.testing.assert_allclose(g[0], w[0] / np.sqrt(x[0] ** 2 + 1), rtol=1e-5)  # (JAX: no conjugate)
    fin = (rng.standard_normal(4) + 1j * rng.standard_normal(4)).astype(dtype)
    np.testing.assert_allclose(np.asarray(lax.rsqrt(jnp.asarray(fin))), 1 / np.sqrt(fin.astype(np.complex128)),
                               rtol=1e-5)


def test_integer_power_uses_the_exponents_six_low_bits_as_jax(x64):
    # JAX's _pow_int_int: square-and-multiply over the exponent's 6 low bits, shifted logically; a
    # negative exponent is its two's-complement bits (kiln gave 0); values pinned from JAX 0.10.2
    b = np.array([0, 1, -1, 2, 3, 9, -7, 5], np.int32)
    e = np.array([0, -3, 65, 64, 63, -1, 31, 100], np.int32)
    want = [1, 1, -1, 1, 2111105451, -696207303, -265001655, 1530182129]
    np.testing.assert_array_equal(np.asarray(jnp.power(b, e)), want)
    np.testing.assert_array_equal(np.asarray(kiln.jit(jnp.power)(b, e)), want)
    np.testing.assert_array_equal(np.asarray(jnp.power(np.uint16([9, 5]), np.array([-3], np.int32))), [945842025, 1606239189])
    # small exponents agree with NumPy
    bb = rng.integers(-9, 10, 20).astype(np.int64)
    ee = rng.integers(0, 12, 20).astype(np.int64)
    np.testing.assert_array_equal(np.asarray(jnp.power(bb, ee)), bb ** ee)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_atanh_and_atan_at_infinite_and_nan_parts_as_jax(dtype, x64):
    # XLA's atanh: an infinite part gives +-0 +- i pi/2 (signs by x >= 0, y >= 0: false for NaN), a
    # NaN part nan +- i pi/2; kiln's inf / inf made arctan(0.5 + inf i) pi/2 + nan i. Pinned from JAX
    h = np.pi / 2
    z = np.array([complex(0.5, inf), complex(-0.5, inf), complex(inf, -3.3), complex(0.5, -inf),
                  complex(inf, inf), complex(nan, inf), complex(inf, nan), complex(nan, 1), complex(1, nan)], dtype)
    atanh = np.asarray(jnp.arctanh(z))
    np.testing.assert_allclose(atanh.imag, [h, h, -h, -h, h, h, -h, h, -h], rtol=1e-6)
    np.testing.assert_array_equal(atanh.real[:7], 0)
    assert np.isnan(atanh.real[7:]).all()
    atan = np.asarray(kiln.jit(jnp.arctan)(z[:7]))
    np.testing.assert_allclose(atan.real, [h, -h, h, h, h, -h, h], rtol=1e-6)
    np.testing.assert_array_equal(atan.imag, 0)
    fin = (rng.standard_normal(5) + 1j * rng.standard_normal(5)).astype(dtype)
    np.testing.assert_allclose(np.asarray(jnp.arctanh(fin)), np.arctanh(fin.astype(np.complex128)), rtol=1e-5)


def test_reduction_read_by_an_outer_product_is_not_absorbed_into_a_row_kernel():
    # jit(vmap(grad)) of dot(tanh(nansum(x)), y): the outer product (a small-contraction product,
    # computed inline) read tanh(sum) while the sum was absorbed into the select's row kernel, and
    # codegen raised "reduce_sum cannot be fused into a kernel"
    a = rng.standard_normal((3, 1, 1)).astype(np.float32)
    d = rng.standard_normal(1).astype(np.float32)

    def f(a, d):
        t = jnp.tanh(jnp.sum(a, axis=2))
        r = lax.dot_general(t, d, (((), ()), ((), ())))
        return r, lax.select(a != a, jnp.zeros_like(a), lax.broadcast_in_dim(1 - t * t, (3, 1, 1), (0, 1)))
    r, s = kiln.jit(f)(a, d)
    t = np.tanh(a.astype(np.float64).sum(2))
    np.testing.assert_allclose(np.asarray(r), t[:, :, None] * d, rtol=1e-5)
    # (1 - t*t near |t| = 1 cancels in float32: an absolute tolerance; a CI run missed 1.2e-5 relative)
    np.testing.assert_allclose(np.asarray(s), (1 - t * t)[:, :, None], rtol=1e-5, atol=1e-6)
    x0, x3 = rng.standard_normal((3, 1, 1)).astype(np.float32), rng.standard_normal((3, 1, 1)).astype(np.float32)
    loss = lambda x0, x3: jnp.sum(jnp.dot(lax.tanh(jnp.nansum(x0, axis=1)), x3))
    g0, g3 = kiln.jit(kiln.vmap(kiln.grad(loss, (0, 1))))(x0, x3)
    np.testing.assert_allclose(np.asarray(g0), (1 - np.tanh(x0) ** 2) * x3, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(g3), np.tanh(x0), rtol=1e-5)


def test_an_empty_cotangent_sends_no_nan_back():
    # grad through take(log_softmax(x), no indices): the empty cotangent was scattered into zeros and
    # multiplied by log_softmax's NaN derivative at x = nan (JAX: 0)
    x = np.array([nan, rng.standard_normal()], np.float32)
    idx = np.zeros((0, 1), np.int32)
    w = np.zeros((0, 1), np.float32)
    for mode in ("fill", "clip"):
        loss = lambda x: jnp.sum(jnp.take(kiln.nn.log_softmax(x), idx, axis=-1, mode=mode) * w)
        for g in (kiln.grad(loss), kiln.jit(kiln.grad(loss))):
            np.testing.assert_array_equal(np.asarray(g(x)), [0, 0])
    # a non-empty selection still differentiates
    y = rng.standard_normal(2).astype(np.float32)
    g = kiln.grad(lambda y: jnp.sum(jnp.take(jnp.sin(y), np.array([1]), axis=-1)))(y)
    np.testing.assert_allclose(np.asarray(g), [0, np.cos(y[1])], rtol=1e-6)


def test_scatter_set_gradient_selects_instead_of_multiplying_by_a_mask():
    # x.at[idx].set(1e6) in float16 (inf) then squared: the cotangent at the overwritten element is
    # inf, and the operand's coefficient 1 - hit (0 there) times inf gave NaN; JAX's scatter
    # transpose writes zeros
    x0 = np.array([[[-0.1]]], np.float16)
    idx = np.array([[5, 2], [-2, -1]], np.int32)
    f = lambda x: jnp.sum(x.at[idx].set(1e6) ** 2)
    for g in (kiln.grad(f), kiln.jit(kiln.grad(f))):
        np.testing.assert_array_equal(np.asarray(g(x0)), [[[0]]])
    # values and gradients elsewhere unchanged: duplicates (the last update wins), the rest kept
    x = rng.standard_normal(6).astype(np.float32)
    u = rng.standard_normal(4).astype(np.float32)
    i = np.array([1, 4, 1, 9], np.int32)  # 9 is dropped
    gx, gu = kiln.grad(lambda x, u: jnp.sum(x.at[i].set(u) ** 3), (0, 1))(x, u)
    y = x.copy()
    y[1], y[4] = u[2], u[1]
    np.testing.assert_allclose(np.asarray(gx), np.where(np.isin(np.arange(6), [1, 4]), 0, 3 * x ** 2), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(gu), [0, 3 * u[1] ** 2, 3 * u[2] ** 2, 0], rtol=1e-6)


def test_relu_gradient_of_complex_inputs_uses_jaxs_order():
    # relu's derivative compared x > 0 with lax.gt, which refuses complex (JAX orders complex
    # numbers lexicographically); values pinned from JAX 0.10.2
    x = np.array([complex(1.1, -2.7), complex(-1, 2), complex(0, 1), complex(7, 0)], np.complex64)
    w = np.array([1.0, 1.5, 2.0, 0.5], np.float32)
    g = kiln.grad(lambda x: jnp.sum(jnp.real(kiln.nn.relu(x) * w)))(x)
    np.testing.assert_array_equal(np.asarray(g), [1, 0, 2, 0.5])
    g6 = kiln.grad(lambda x: jnp.sum(jnp.real(kiln.nn.relu6(x) * w)))(x)
    np.testing.assert_array_equal(np.asarray(g6), [1, 0, 2, 0])


def test_reduce_precision_keeps_the_weak_type(x64):
    # maximum(uint64, int32) is a weak float64 (JAX's lattice); reduce_precision kept it strong
    v = jnp.maximum(jnp.asarray(np.array([2], np.uint64)), jnp.asarray(np.array([5], np.int32)))
    assert v.weak_type and v.dtype == np.float64
    r = lax.reduce_precision(v, 5, 10)
    assert r.weak_type and float(r[0]) == 5.0
    s = lax.reduce_precision(jnp.asarray(rng.standard_normal(3).astype(np.float32)), 5, 10)
    assert not s.weak_type


def test_triu_and_tril_keep_the_weak_type(x64):
    # add(int64, uint64) is a weak float64 (JAX's lattice); triu/tril filled with strong zeros
    # and lost it (GPU campaign, seed 208158)
    a = rng.integers(-5, 5, (3, 3))
    v = jnp.add(jnp.asarray(a.astype(np.int64)), jnp.asarray(np.abs(a).astype(np.uint64)))
    assert v.weak_type and v.dtype == np.float64
    for f, ref in ((jnp.triu, np.triu), (jnp.tril, np.tril)):
        r = f(v, 1)
        assert r.weak_type and r.dtype == np.float64
        np.testing.assert_array_equal(np.asarray(r), ref(a + np.abs(a), 1))
        assert not f(jnp.asarray(a.astype(np.float32))).weak_type
