"""kiln.numpy element-wise functions against NumPy (float64 references) on fresh random inputs, plus JAX's
dtype promotion rules and the errors users get for bad arguments."""

import math
import zlib

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp


# (the x64 fixture is in conftest.py)


def _dtype(request, name):
    if name == "float64":
        request.getfixturevalue("x64")
    return np.dtype(name)


def _default_float():
    return np.dtype(np.float64 if kiln.config.jax_enable_x64 else np.float32)


def _rand(rng, shape, dtype, low, high):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(int(math.ceil(low)), int(math.floor(high)) + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def _tol(dtype):
    return {"float32": 2e-5, "float64": 1e-12}.get(np.dtype(dtype).name, 0)


def _check(got, want, dtype, rtol=None, atol=0.0):
    got = np.asarray(got)
    assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    rtol = _tol(dtype) if rtol is None else rtol
    if np.dtype(dtype).kind in "fc":
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(got, np.asarray(want).astype(dtype))


# ---------------------------------------------------------------------------------------------------------
# Unary functions that give floats: (name, numpy reference, input range, atol for float32)

UNARY_INEXACT = [
    ("exp", np.exp, (-5, 5)), ("exp2", np.exp2, (-5, 5)), ("expm1", np.expm1, (-2, 2)),
    ("log", np.log, (0.1, 10)), ("log2", np.log2, (0.1, 10)), ("log10", np.log10, (0.1, 10)),
    ("log1p", np.log1p, (-0.5, 5)), ("sin", np.sin, (-4, 4)), ("cos", np.cos, (-4, 4)),
    ("tan", np.tan, (-1.2, 1.2)), ("arcsin", np.arcsin, (-0.95, 0.95)), ("arccos", np.arccos, (-0.95, 0.95)),
    ("arctan", np.arctan, (-5, 5)), ("sinh", np.sinh, (-3, 3)), ("cosh", np.cosh, (-3, 3)),
    ("tanh", np.tanh, (-3, 3)), ("arcsinh", np.arcsinh, (-5, 5)), ("arccosh", np.arccosh, (1.1, 5)),
    ("arctanh", np.arctanh, (-0.9, 0.9)), ("sqrt", np.sqrt, (0, 10)), ("cbrt", np.cbrt, (-10, 10)),
    ("reciprocal", lambda x: 1.0 / x, (0.5, 10)), ("deg2rad", np.deg2rad, (-360, 360)),
    ("radians", np.radians, (-360, 360)), ("rad2deg", np.rad2deg, (-6, 6)), ("degrees", np.degrees, (-6, 6)),
    ("rint", np.rint, (-10, 10)), ("fabs", np.fabs, (-10, 10)), ("sinc", np.sinc, (-3, 3)),
]

# absolute errors allowed where the function has a zero inside its range (relative error is meaningless)
_ATOL32 = {"sin": 1e-6, "tan": 1e-6, "sinc": 1e-6, "expm1": 1e-7, "log1p": 1e-7, "arcsin": 1e-7,
           "arctan": 1e-7, "sinh": 1e-6, "tanh": 1e-7, "arcsinh": 1e-7, "arctanh": 1e-7, "log": 1e-6,
           "log2": 1e-6, "log10": 1e-6, "cos": 1e-6, "arccos": 1e-6, "cbrt": 1e-6, "deg2rad": 1e-6,
           "radians": 1e-6, "rad2deg": 1e-4, "degrees": 1e-4}


@pytest.mark.parametrize("dtype_name", ["float32", "float64", "int32", "bool"])
@pytest.mark.parametrize("name,ref,domain", UNARY_INEXACT, ids=[u[0] for u in UNARY_INEXACT])
def test_unary_inexact_matches_numpy(request, name, ref, domain, dtype_name):
    dtype = _dtype(request, dtype_name)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    lo, hi = domain
    if dtype.kind in "iu":
        lo, hi = math.ceil(lo), math.floor(hi)
        if lo > hi:
            pytest.skip("no integers in the domain")
    if dtype.kind == "b" and not (lo <= 0 and 1 <= hi):
        pytest.skip("bool values outside the domain")
    x = _rand(rng, (3, 5), dtype, lo, hi)
    got = getattr(jnp, name)(jnp.asarray(x))
    want = ref(x.astype(np.float64))
    out_dtype = dtype if dtype.kind == "f" else _default_float()
    atol = _ATOL32.get(name, 0.0) if out_dtype == np.float32 else 1e-13
    if name == "rint" and out_dtype == np.float32:
        x32 = x.astype(np.float32)
        want = np.rint(x32)  # the float32 input is what gets rounded
    _check(got, want, out_dtype, atol=atol)


def test_unary_inexact_python_scalar_is_weak_float():
    got = jnp.sin(2)
    assert got.dtype == np.float32 and got.weak_type
    np.testing.assert_allclose(float(got), math.sin(2), rtol=1e-6)


# ---------------------------------------------------------------------------------------------------------
# Functions that keep the input dtype

KEEP_DTYPE = [
    ("negative", np.negative, ["float32", "float64", "int32"]),
    ("positive", lambda x: x.copy(), ["float32", "int32", "bool"]),
    ("absolute", np.absolute, ["float32", "float64", "int32", "bool"]),
    ("abs", np.abs, ["float32", "int32"]),
    ("square", np.square, ["float32", "float64", "int32"]),  # bool: int32, as JAX (test below)
    ("sign", np.sign, ["float32", "float64", "int32"]),
    ("floor", np.floor, ["float32", "float64", "int32", "bool"]),
    ("ceil", np.ceil, ["float32", "float64", "int32", "bool"]),
    ("trunc", np.trunc, ["float32", "float64", "int32"]),
    ("fix", np.fix, ["float32", "float64"]),
    ("round", np.round, ["float32", "float64", "int32"]),
    ("conj", np.conj, ["float32", "int32"]),
    ("real", np.real, ["float32", "int32"]),
    ("imag", np.imag, ["float32", "int32"]),
]


@pytest.mark.parametrize("name,ref,dtype_name",
                         [(n, r, d) for n, r, ds in KEEP_DTYPE for d in ds],
                         ids=[f"{n}-{d}" for n, _, ds in KEEP_DTYPE for d in ds])
def test_dtype_preserving_unary(request, name, ref, dtype_name):
    dtype = _dtype(request, dtype_name)
    rng = np.random.default_rng(7)
    x = _rand(rng, (4, 6), dtype, -20, 20)
    if dtype.kind == "f":
        x[0, :4] = np.array([0.5, 1.5, -2.5, 2.5], dtype)  # ties for round, signs for trunc/fix
    _check(getattr(jnp, name)(jnp.asarray(x)), ref(x).astype(dtype), dtype, rtol=0)


@pytest.mark.parametrize("decimals", [1, 2, -1, -2])
def test_round_decimals(decimals):
    rng = np.random.default_rng(3)
    xf = rng.uniform(-500, 500, size=20).astype(np.float32)
    np.testing.assert_allclose(np.asarray(jnp.round(xf, decimals)), np.round(xf.astype(np.float64), decimals),
                               rtol=1e-6, atol=1e-4)
    xi = rng.integers(-1000, 1000, size=50).astype(np.int32)
    xi[:4] = [25, 35, -25, 150]  # exact ties round half to even
    got = jnp.round(xi, decimals)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), np.round(xi, decimals))


def test_bool_arithmetic_errors():
    b = jnp.asarray(np.array([True, False]))
    with pytest.raises(TypeError, match="subtract"):
        jnp.subtract(b, b)
    with pytest.raises(TypeError, match="negative"):
        jnp.negative(b)
    with pytest.raises(TypeError, match="sign"):
        jnp.sign(b)


# ---------------------------------------------------------------------------------------------------------
# Binary functions: (name, numpy reference, x1 range, x2 range, dtypes)

_ALL = ["float32", "float64", "int32"]
_NONZERO_INT = ["float32", "float64", "int32"]
BINARY = [
    ("add", np.add, (-10, 10), (-10, 10), _ALL + ["bool"]),
    ("subtract", np.subtract, (-10, 10), (-10, 10), _ALL),
    ("multiply", np.multiply, (-10, 10), (-10, 10), _ALL + ["bool"]),
    ("divide", np.divide, (-10, 10), (1, 10), _ALL),
    ("true_divide", np.true_divide, (-10, 10), (-10, -1), _ALL),
    ("floor_divide", np.floor_divide, (-20, 20), (1, 7), _NONZERO_INT),
    ("floor_divide", np.floor_divide, (-20, 20), (-7, -1), _NONZERO_INT),
    ("mod", np.mod, (-20, 20), (1, 7), _NONZERO_INT),
    ("remainder", np.remainder, (-20, 20), (-7, -1), _NONZERO_INT),
    ("fmod", np.fmod, (-20, 20), (1, 7), _NONZERO_INT),
    ("fmod", np.fmod, (-20, 20), (-7, -1), _NONZERO_INT),
    ("power", np.power, (0.1, 4), (-3, 3), ["float32", "float64"]),
    ("power", np.power, (-5, 5), (0, 6), ["int32"]),
    ("float_power", np.float_power, (0.1, 4), (-3, 3), ["float32", "float64", "int32"]),
    ("arctan2", np.arctan2, (-5, 5), (-5, 5), _ALL),
    ("hypot", np.hypot, (-5, 5), (-5, 5), _ALL),
    ("minimum", np.minimum, (-10, 10), (-10, 10), _ALL + ["bool"]),
    ("maximum", np.maximum, (-10, 10), (-10, 10), _ALL + ["bool"]),
    ("fmin", np.fmin, (-10, 10), (-10, 10), _ALL),
    ("fmax", np.fmax, (-10, 10), (-10, 10), _ALL),
    ("copysign", np.copysign, (-10, 10), (-10, 10), ["float32", "float64", "int32"]),
    ("heaviside", np.heaviside, (-2, 2), (0, 1), ["float32", "float64", "int32"]),
    ("logaddexp", np.logaddexp, (-30, 30), (-30, 30), _ALL),
    ("logaddexp2", np.logaddexp2, (-30, 30), (-30, 30), _ALL),
    ("equal", np.equal, (-3, 3), (-3, 3), _ALL + ["bool"]),
    ("not_equal", np.not_equal, (-3, 3), (-3, 3), _ALL + ["bool"]),
    ("less", np.less, (-3, 3), (-3, 3), _ALL + ["bool"]),
    ("less_equal", np.less_equal, (-3, 3), (-3, 3), _ALL + ["bool"]),
    ("greater", np.greater, (-3, 3), (-3, 3), _ALL + ["bool"]),
    ("greater_equal", np.greater_equal, (-3, 3), (-3, 3), _ALL + ["bool"]),
    ("logical_and", np.logical_and, (-2, 2), (-2, 2), _ALL + ["bool"]),
    ("logical_or", np.logical_or, (-2, 2), (-2, 2), _ALL + ["bool"]),
    ("logical_xor", np.logical_xor, (-2, 2), (-2, 2), _ALL + ["bool"]),
    ("bitwise_and", np.bitwise_and, (-100, 100), (-100, 100), ["int32", "bool"]),
    ("bitwise_or", np.bitwise_or, (-100, 100), (-100, 100), ["int32", "bool"]),
    ("bitwise_xor", np.bitwise_xor, (-100, 100), (-100, 100), ["int32", "bool"]),
    ("left_shift", np.left_shift, (-100, 100), (0, 20), ["int32"]),
    ("right_shift", np.right_shift, (-100000, 100000), (0, 20), ["int32"]),
    ("gcd", np.gcd, (-1000, 1000), (-1000, 1000), ["int32"]),
    ("lcm", np.lcm, (-100, 100), (-100, 100), ["int32"]),
]


def _binary_out_dtype(name, ref, dtype):
    if name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
                "logical_and", "logical_or", "logical_xor"):
        return np.dtype(bool)
    if name in ("divide", "true_divide", "float_power", "arctan2", "hypot", "copysign", "heaviside",
                "logaddexp", "logaddexp2") and dtype.kind != "f":
        return _default_float()
    return dtype


_BINARY_CASES = [(n, r, a, b, d) for n, r, a, b, ds in BINARY for d in ds]


@pytest.mark.parametrize("name,ref,dom1,dom2,dtype_name", _BINARY_CASES,
                         ids=[f"{c[0]}-{c[2]}-{c[3]}-{c[4]}" for c in _BINARY_CASES])
def test_binary_matches_numpy(request, name, ref, dom1, dom2, dtype_name):
    dtype = _dtype(request, dtype_name)
    rng = np.random.default_rng(zlib.crc32(f"{name}{dom2}".encode()))
    x1 = _rand(rng, (4, 5), dtype, *dom1)
    x2 = _rand(rng, (5,), dtype, *dom2)  # broadcasts against x1
    if name in ("arctan2", "hypot") and dtype.kind == "f":
        x1[0, :2] = 0.0
    got = getattr(jnp, name)(jnp.asarray(x1), jnp.asarray(x2))
    want = ref(x1.astype(np.float64) if dtype.kind == "f" else x1, x2.astype(np.float64) if dtype.kind == "f" else x2)
    out = _binary_out_dtype(name, ref, dtype)
    if out.kind == "f" and dtype.kind != "f":
        want = ref(x1.astype(np.float64), x2.astype(np.float64))
    _check(got, want, out, atol=1e-6 if out == np.float32 else 0.0)


def test_float_floor_divide_and_mod_match_numpy_bit_for_bit():
    rng = np.random.default_rng(11)
    x1 = rng.uniform(-50, 50, 200).astype(np.float32)
    x2 = rng.uniform(-3, 3, 200).astype(np.float32)
    q, r = jnp.divmod(x1, x2)
    np.testing.assert_array_equal(np.asarray(q), np.floor_divide(x1, x2))
    np.testing.assert_allclose(np.asarray(r), np.mod(x1, x2), rtol=1e-5, atol=1e-5)


def test_int_power_negative_exponent_and_bool():
    base = jnp.asarray(np.array([-2, -1, 0, 1, 2, 3], np.int32))
    got = jnp.power(base, jnp.asarray(np.array([-1, -3, 2, -5, 10, 0], np.int32)))
    np.testing.assert_array_equal(np.asarray(got), [0, -1, 0, 1, 1024, 1])
    with pytest.raises(TypeError, match="power"):  # JAX's error type
        jnp.power(base, -1)
    np.testing.assert_array_equal(np.asarray(jnp.power(base, 3)), np.asarray(base) ** 3)


def test_shifts_and_invert():
    rng = np.random.default_rng(5)
    x = rng.integers(-1000, 1000, 30).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(jnp.invert(x)), np.invert(x))
    np.testing.assert_array_equal(np.asarray(jnp.bitwise_not(x)), ~x)
    b = rng.random(10) < 0.5
    np.testing.assert_array_equal(np.asarray(jnp.invert(b)), ~b)
    u = rng.integers(0, 2**31, 30).astype(np.uint32)
    np.testing.assert_array_equal(np.asarray(jnp.right_shift(u, np.uint32(3))), u >> 3)
    with pytest.raises(TypeError, match="bitwise_and"):
        jnp.bitwise_and(np.ones(3, np.float32), 1)


# ---------------------------------------------------------------------------------------------------------
# Promotion (JAX's weak types) and broadcasting errors

PROMOTION = [
    (np.int32, 2.5, np.float32), (np.float32, 2, np.float32), (np.int8, 3, np.int8),
    (np.int8, 3.0, np.float32), (np.float16, 3.0, np.float16), (np.uint8, np.int8, np.int16),
    (np.int32, np.float16, np.float16), (bool, 1, np.int32), (np.int8, np.int32, np.int32),
    (np.uint32, np.int32, np.int64), (np.float32, np.float64, np.float64),
]


@pytest.mark.parametrize("a,b,want", PROMOTION, ids=[f"{np.dtype(a).name}-{b}" for a, b, _ in PROMOTION])
def test_add_promotes_like_jax(request, a, b, want):
    if np.dtype(want).itemsize == 8:
        request.getfixturevalue("x64")
    x = jnp.asarray(np.ones(3, a))
    y = jnp.asarray(np.ones(3, b)) if isinstance(b, type) else b
    got = jnp.add(x, y)
    assert got.dtype == np.dtype(want)
    addend = 1.0 if isinstance(b, type) else float(b)
    np.testing.assert_array_equal(np.asarray(got).astype(np.float64), 1.0 + addend)


def test_python_scalars_stay_weak():
    assert jnp.add(1.0, 2.0).weak_type
    assert not jnp.add(jnp.asarray(np.float32(1)), 2.0).weak_type


@pytest.mark.parametrize("fn", [jnp.add, jnp.arctan2, jnp.less, jnp.logical_and])
def test_incompatible_shapes_raise(fn):
    # JAX's classes (bug, issue 32, fuzzer: always ValueError): operands of one rank reach lax, which
    # raises TypeError; of different ranks, jnp's broadcast raises ValueError
    with pytest.raises(TypeError, match=r"\(3,\).*\(4,\)"):
        fn(np.ones(3, np.float32), np.ones(4, np.float32))
    with pytest.raises(ValueError, match=r"\(4, 4\).*\(3,\)"):
        fn(np.ones((4, 4), np.float32), np.ones(3, np.float32))


@pytest.mark.parametrize("fn", [jnp.add, jnp.sin, jnp.maximum, jnp.where])
def test_string_arguments_raise_type_error(fn):
    args = {jnp.sin: ("abc",), jnp.where: (True, "a", 1)}.get(fn, ("abc", 1))
    with pytest.raises(TypeError):
        fn(*args)


# ---------------------------------------------------------------------------------------------------------
# clip, where, classification, nan_to_num, isclose family

def test_clip_bounds_and_keywords():
    rng = np.random.default_rng(21)
    x = rng.normal(size=(3, 4)).astype(np.float32)
    lo = rng.normal(size=(4,)).astype(np.float32) - 1
    np.testing.assert_array_equal(np.asarray(jnp.clip(x, lo, 0.5)), np.clip(x, lo, 0.5))
    np.testing.assert_array_equal(np.asarray(jnp.clip(x, min=-0.3)), np.maximum(x, -0.3))
    np.testing.assert_array_equal(np.asarray(jnp.clip(x, a_max=0.2)), np.minimum(x, 0.2))
    xi = rng.integers(-10, 10, 20).astype(np.int32)
    got = jnp.clip(xi, -3, 4)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), np.clip(xi, -3, 4))
    with pytest.raises(TypeError, match="clip"):
        jnp.clip(x, 0.0, min=0.0)


def test_where_three_and_one_argument_forms():
    rng = np.random.default_rng(8)
    c = rng.random((3, 4)) < 0.5
    x = rng.normal(size=(3, 4)).astype(np.float32)
    y = rng.integers(-5, 5, (4,)).astype(np.int32)
    got = jnp.where(c, x, y)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(got), np.where(c, x, y))
    got = jnp.where(np.array([2, 0, -1], np.int32), 1.0, 0.0)
    np.testing.assert_array_equal(np.asarray(got), [1.0, 0.0, 1.0])
    (idx,) = jnp.where(np.array([0, 3, 0, 1], np.int32))
    np.testing.assert_array_equal(np.asarray(idx), [1, 3])
    with pytest.raises(TypeError, match="where"):
        jnp.where(c, x)


def test_where_one_argument_under_jit_raises_concretization_error():
    with pytest.raises(kiln.errors.ConcretizationTypeError):
        kiln.jit(lambda c: jnp.where(c))(np.array([True, False]))


SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.0, 3e38], np.float32)
CLASSIFY = [("isnan", np.isnan), ("isinf", np.isinf), ("isfinite", np.isfinite), ("isposinf", np.isposinf),
            ("isneginf", np.isneginf), ("signbit", np.signbit)]


@pytest.mark.parametrize("name,ref", CLASSIFY, ids=[c[0] for c in CLASSIFY])
def test_classification(name, ref):
    rng = np.random.default_rng(2)
    x = np.concatenate([SPECIALS, rng.normal(size=8).astype(np.float32)])
    got = getattr(jnp, name)(x)
    assert got.dtype == np.bool_
    want = ref(x)
    if name == "signbit":
        want[0] = False  # the sign of a nan is not observable in kiln; keep the test to ordered values
        np.testing.assert_array_equal(np.asarray(got)[1:], want[1:])
    else:
        np.testing.assert_array_equal(np.asarray(got), want)
    xi = rng.integers(-5, 5, 10).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(getattr(jnp, name)(xi)), ref(xi))


def test_nan_to_num():
    x = np.concatenate([SPECIALS, np.random.default_rng(4).normal(size=5).astype(np.float32)])
    np.testing.assert_array_equal(np.asarray(jnp.nan_to_num(x)), np.nan_to_num(x))
    np.testing.assert_array_equal(np.asarray(jnp.nan_to_num(x, nan=-1.0, posinf=9.0, neginf=-9.0)),
                                  np.nan_to_num(x, nan=-1.0, posinf=9.0, neginf=-9.0))


def test_logical_not():
    x = np.random.default_rng(6).integers(-2, 3, 12).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(jnp.logical_not(x)), np.logical_not(x))


def test_logaddexp_infinities():
    a = np.array([-np.inf, np.inf, -np.inf, 1.0, np.nan], np.float32)
    b = np.array([-np.inf, np.inf, 3.0, -np.inf, 1.0], np.float32)
    with np.errstate(invalid="ignore"):
        want = np.logaddexp(a, b)
    np.testing.assert_array_equal(np.asarray(jnp.logaddexp(a, b)), want)


def test_ufuncs_under_jit_match_eager():
    rng = np.random.default_rng(12)
    x = rng.normal(size=(5,)).astype(np.float32)
    y = rng.normal(size=(5,)).astype(np.float32)
    f = lambda a, b: jnp.logaddexp(jnp.sin(a), jnp.mod(a, b)) + jnp.hypot(a, b)  # noqa: E731
    np.testing.assert_allclose(np.asarray(kiln.jit(f)(x, y)), np.asarray(f(x, y)), rtol=1e-6)


# ---------------------------------------------------------------------------------------------------------
# isclose family and shape queries

@pytest.mark.parametrize("rtol,atol,equal_nan", [(1e-5, 1e-8, False), (1e-2, 0.0, True), (0.0, 0.05, False)])
def test_isclose_allclose(rtol, atol, equal_nan):
    rng = np.random.default_rng(13)
    a = rng.normal(size=40).astype(np.float32)
    b = (a * (1 + rng.normal(size=40) * 10 ** rng.uniform(-7, -1, 40))).astype(np.float32)
    a[:6] = [np.inf, -np.inf, np.nan, np.nan, np.inf, 0.0]
    b[:6] = [np.inf, np.inf, np.nan, 1.0, 1e30, 1e-9]
    got = jnp.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
    np.testing.assert_array_equal(np.asarray(got), np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))
    for x, y in [(a, b), (a[6:], a[6:] * (1 + 1e-7))]:
        assert bool(jnp.allclose(x, y, rtol, atol, equal_nan)) == np.allclose(x, y, rtol, atol, equal_nan)


def test_array_equal_and_equiv():
    rng = np.random.default_rng(14)
    x = rng.integers(0, 3, (2, 3)).astype(np.int32)
    y = x.copy()
    assert bool(jnp.array_equal(x, y))
    y[1, 2] += 1
    assert not bool(jnp.array_equal(x, y))
    assert not bool(jnp.array_equal(x, x[:1]))
    assert bool(jnp.array_equal(x, x.astype(np.float32)))
    f = np.array([1.0, np.nan], np.float32)
    assert not bool(jnp.array_equal(f, f)) and bool(jnp.array_equal(f, f, equal_nan=True))
    assert bool(jnp.array_equiv(x[:1], np.broadcast_to(x[:1], (4, 3))))
    assert not bool(jnp.array_equiv(x, np.ones(4, np.int32)))


def test_shape_queries():
    x = jnp.asarray(np.zeros((2, 3, 4), np.float32))
    assert jnp.shape(x) == (2, 3, 4) and jnp.ndim(x) == 3 and jnp.size(x) == 24 and jnp.size(x, -1) == 4
    assert jnp.shape([[1, 2]]) == (1, 2) and jnp.ndim(3.0) == 0 and jnp.size([1, 2, 3]) == 3
    for scalar in (2, 2.5, True, np.float32(1), jnp.asarray(np.float32(1)), np.array(3)):
        assert jnp.isscalar(scalar), scalar
    for not_scalar in (x, [1], np.ones(2), "a", None):
        assert not jnp.isscalar(not_scalar), not_scalar
    with pytest.raises(ValueError, match="axis"):
        jnp.size(x, 3)


@pytest.mark.parametrize("name", ["sin", "cos", "tan"])
def test_float32_trig_of_large_arguments_is_accurate(name):
    # |x| from 1 to 3e38: the argument reduction is exact over float32's whole range (JAX's numbers)
    rng = np.random.default_rng(7)
    x = (np.exp(rng.uniform(0.0, 88.0, 20000)) * rng.choice([-1.0, 1.0], 20000)).astype(np.float32)
    got = np.asarray(kiln.jit(getattr(jnp, name))(x)).astype(np.float64)
    want = getattr(np, name)(x.astype(np.float64))
    ulp = np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    assert ulp.max() <= 4.0


# ---- issue 32: silent wrong answers and dtypes (expected values pinned from JAX 0.10.2) ----

def test_float_power_keeps_the_promoted_inexact_dtype():
    # guards issue 32: float_power converted to float32 (float64 under x64) as NumPy does, so a complex
    # base lost its imaginary part (float_power(1+2j, 2) gave 1.0) and float16/bfloat16 became float32
    got = jnp.float_power(1 + 2j, 2)
    assert got.dtype == np.complex64
    np.testing.assert_allclose(complex(got), -3 + 4j, rtol=1e-6)
    for dt in (np.float16, jnp.bfloat16):
        got = jnp.float_power(jnp.asarray([2.0, 3.0], dt), 2)
        assert got.dtype == np.dtype(dt) and np.asarray(got).astype(float).tolist() == [4.0, 9.0]
    assert jnp.float_power(jnp.array([1, 2], np.int8), 2).dtype == np.float32
    assert jnp.float_power(jnp.array([1.5], np.float16), 2 + 0j).dtype == np.complex64


def test_heaviside_of_nan_is_nan():
    # guards issue 32: heaviside(nan, h) gave h
    got = np.asarray(jnp.heaviside(jnp.array([np.nan, 0.0, -np.inf, 2.0]), jnp.array([0.5, np.nan, 1.0, 0.5])))
    np.testing.assert_array_equal(got, [np.nan, np.nan, 0.0, 1.0])


_B = np.array([True, False])
_BOOL_NUMERIC = [  # name, f, JAX's values (all int32: JAX computes bools as int32 here)
    ("power", lambda a, b: jnp.power(a, b), [1, 0]),
    ("power by int", lambda a, b: jnp.power(a, 2), [1, 0]),
    ("power by 0", lambda a, b: a ** 0, [1, 1]),
    ("floor_divide", lambda a, b: a // b, [1, 0]),
    ("divmod", lambda a, b: jnp.divmod(a, b)[1], [0, 0]),
    ("remainder", lambda a, b: jnp.remainder(a, b), [0, 0]),
    ("fmod", lambda a, b: jnp.fmod(a, b), [0, 0]),
]


@pytest.mark.parametrize("name", [c[0] for c in _BOOL_NUMERIC])
def test_bool_arithmetic_computes_in_int32(name):
    # guards issue 32: bool power stayed bool, floor_divide/divmod/remainder gave int8, fmod raised
    f, want = {c[0]: c[1:] for c in _BOOL_NUMERIC}[name]
    got = f(jnp.asarray(_B), jnp.asarray(np.array([True, True])))
    assert got.dtype == np.int32 and np.asarray(got).tolist() == want


def test_integer_division_by_zero_as_jax():
    # guards issue 32: JAX gives x % 0 == 0 (remainder, fmod) and x // 0 == -1 - (x != 0) for signed ints;
    # kiln gave x and -1
    for dt in (np.int8, np.int32):
        x, z = jnp.array([5, -5, 0], dt), jnp.zeros(3, dt)
        assert np.asarray(x // z).tolist() == [-2, -2, -1]
        assert np.asarray(x % z).tolist() == [0, 0, 0]
        assert np.asarray(jnp.fmod(x, z)).tolist() == [0, 0, 0]
    u = jnp.array([5, 0], np.uint8)
    assert np.asarray(u // jnp.zeros(2, np.uint8)).tolist() == [255, 255]
    assert np.asarray(u % jnp.zeros(2, np.uint8)).tolist() == [0, 0]
    assert np.asarray(jnp.array([3, 1, 2], np.int8) % jnp.array([True, False, True])).tolist() == [0, 0, 0]


def test_power_dtypes_as_jax():
    # guards issue 32: a concrete integer exponent promotes the base alone (bool -> int32); an int base
    # with a negative concrete exponent raises TypeError, as in JAX
    assert jnp.power(True, 2).dtype == np.int32
    assert jnp.power(jnp.array([True, False]), np.int8(3)).dtype == np.int32
    assert jnp.power(jnp.array([2, 3], np.int8), 2).dtype == np.int8
    assert np.asarray(jnp.power(jnp.array([2.0, 0.0]), jnp.int32(3))).tolist() == [8.0, 0.0]
    assert np.asarray(jnp.power(jnp.array([True, False]), 2.0)).tolist() == [1.0, 0.0]
    with pytest.raises(TypeError):
        jnp.power(jnp.int32(2), -1)


def test_ldexp_with_a_bool_exponent():
    # guards issue 32: the exponent was added to frexp's in its own dtype (bool: `or`), so ldexp(3, True)
    # gave 1.5; JAX converts it to the result's float type first
    got = jnp.ldexp(jnp.array([3, 1, 2], np.int8), jnp.array([True, False, True]))
    assert got.dtype == np.float32 and np.asarray(got).tolist() == [6.0, 1.0, 4.0]
    assert np.asarray(jnp.ldexp(1.5, jnp.array([True, False]))).tolist() == [3.0, 1.5]


def test_shifts_outer_and_einsum_on_bools():
    # bug (issue 32): `>>`/`<<` on bool arrays raised TypeError (JAX shifts them as the default int),
    # jnp.outer of bools and einsum reductions of bools ('ij->i') raised "requires a numeric (non-bool)
    # dtype" (JAX multiplies bools with and, sums them with or)
    b = jnp.asarray(np.array([True, False, True]))
    got = b >> b
    assert got.dtype == np.int32 and np.asarray(got).tolist() == [0, 0, 0]
    got = b << 1
    assert got.dtype == np.int32 and got.weak_type and np.asarray(got).tolist() == [2, 0, 2]
    assert (b >> jnp.asarray(np.array([1, 0, 1], np.int8))).dtype == np.int8
    got = jnp.outer(np.array([True, False]), np.array([True, True]))
    assert got.dtype == np.bool_ and np.asarray(got).tolist() == [[True, True], [False, False]]
    x = (np.arange(12).reshape(3, 4) % 3).astype(bool)
    assert np.asarray(jnp.einsum('ij->i', x)).tolist() == [True, True, True]
    assert bool(jnp.einsum('ij->', x)) and jnp.einsum('ij->j', x).dtype == np.bool_


def test_square_of_bool_and_any_all_of_complex_as_jax():
    # guards issue 32: square(bool) stayed bool (JAX: int32); any/all of complex tested both parts, where
    # JAX converts to bool, which reads the real part only (any(1j) is False)
    got = jnp.square(jnp.array([True, False]))
    assert got.dtype == np.int32 and np.asarray(got).tolist() == [1, 0]
    assert not bool(jnp.any(jnp.array([1j])))
    assert not bool(jnp.all(jnp.array([1 + 1j, 0.5j])))
    assert np.asarray(jnp.any(jnp.array([[1j, 0], [2, 0]]), axis=1)).tolist() == [False, True]
    assert bool(jnp.array([1j]).astype(bool)[0])  # astype tests != 0 (as JAX's)


def test_weak_operands_give_jax_weak_results(x64):
    # bug (issue 32, fuzzer): floor_divide (and reciprocal, imag and angle of reals, nextafter) turned a
    # weakly typed operand's result strong through their constants; JAX keeps it weak there, and is
    # strong for log2, hypot, heaviside, logical_and (weak types pinned from JAX 0.10.2)
    w = jnp.asarray(np.array([1, 2, -3], np.int8)) + 0.5
    assert w.weak_type and w.dtype == np.float64
    for f, weak in [(lambda x: x // 2.0, True), (lambda x: jnp.floor_divide(x, x), True), (jnp.reciprocal, True),
                    (jnp.imag, True), (jnp.angle, True), (lambda x: jnp.nextafter(x, 2.0), True),
                    (jnp.log2, False), (lambda x: jnp.hypot(x, 2.0), False), (lambda x: jnp.heaviside(x, 2.0), False),
                    (lambda x: jnp.logical_and(x, x), False), (lambda x: x % 2.0, True), (jnp.sum, False)]:
        assert f(w).weak_type == weak, f
    got = jnp.asarray(np.array([[-3]], np.int32)) // jnp.asarray(np.array(4, np.uint64))
    assert got.dtype == np.float64 and got.weak_type and np.asarray(got).tolist() == [[-1.0]]
    assert np.asarray(w // 2.0).tolist() == [0.0, 1.0, -2.0]
