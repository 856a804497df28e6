"""complex64/complex128 against NumPy in complex128: creation and JAX's promotion (weak complex),
elementwise ops off their branch cuts, reductions and products, shapes and indexing, jit/vmap and
control flow with complex carries, autodiff by JAX's convention (grad of a real f of z = x + iy is
df/dx - i df/dy; holomorphic grad/jvp/vjp/jac unconjugated), and the errors for ordered ops."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax

# (the x64 fixture is in conftest.py)

TOL = {np.complex64: 1e-5, np.complex128: 1e-12, np.float32: 1e-5, np.float64: 1e-12}


def rng():
    return np.random.default_rng()


def rand_c(shape, dtype=np.complex64, scale=2.0):
    """Points with |re| and |im| in [0.1, scale], random signs: off every branch cut of log, sqrt
    and the inverse trig/hyperbolic functions (all cuts lie on the axes)."""
    r = rng()
    parts = r.uniform(0.1, scale, size=(2,) + tuple(np.atleast_1d(shape)))
    parts *= r.choice([-1.0, 1.0], size=parts.shape)
    return (parts[0] + 1j * parts[1]).astype(dtype)


def check(got, want, dtype=None, tol=None):
    """got is a kiln Array of `dtype` (want's dtype if None) close to want (computed in 128 bits)."""
    assert isinstance(got, kiln.Array), type(got)
    want = np.asarray(want)
    dtype = np.dtype(dtype if dtype is not None else want.dtype)
    assert got.dtype == dtype, (got.dtype, dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    tol = TOL[dtype.type] if tol is None else tol
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol)


@pytest.fixture(params=[np.complex64, np.complex128], ids=["c64", "c128"])
def cdt(request):
    """Each complex dtype; complex128 runs under x64 (it canonicalizes to complex64 otherwise)."""
    if request.param is np.complex128:
        request.getfixturevalue("x64")
    return request.param


# ---------------------------------------------------------------------------- creation, promotion

def test_asarray_round_trip_is_exact(cdt):
    a = rand_c((3, 4), cdt)
    x = jnp.asarray(a)
    assert x.dtype == cdt and x.shape == (3, 4) and not x.weak_type
    assert jnp.iscomplexobj(x) and not jnp.isrealobj(x) and jnp.issubdtype(x.dtype, jnp.complexfloating)
    back = np.asarray(x)
    assert back.dtype == cdt
    np.testing.assert_array_equal(back, a)
    assert complex(x[1, 2]) == complex(a[1, 2])


def test_complex128_input_narrows_without_x64():
    a = np.array([1.5 + 2.25j, -3 - 0.5j])
    x = jnp.asarray(a)
    assert x.dtype == np.complex64
    np.testing.assert_array_equal(np.asarray(x), a.astype(np.complex64))


def test_python_complex_scalar_is_weak():
    s = jnp.asarray(1.5 - 2j)
    assert s.dtype == np.complex64 and s.weak_type and s.shape == ()
    assert complex(s) == 1.5 - 2j
    assert complex(jnp.asarray(np.complex64(0.25 + 4j))) == 0.25 + 4j
    with pytest.raises(TypeError):
        complex(jnp.asarray(np.array([1j, 2j], np.complex64)))


def test_zeros_ones_full(cdt):
    np.testing.assert_array_equal(np.asarray(jnp.zeros((2, 3), cdt)), np.zeros((2, 3), cdt))
    np.testing.assert_array_equal(np.asarray(jnp.ones(4, cdt)), np.ones(4, cdt))
    f = jnp.full((2, 2), 3 - 1.25j, cdt)
    assert f.dtype == cdt
    np.testing.assert_array_equal(np.asarray(f), np.full((2, 2), 3 - 1.25j, cdt))
    y = jnp.ones(3, jnp.complex64) * 1j
    assert y.dtype == np.complex64
    np.testing.assert_array_equal(np.asarray(y), [1j, 1j, 1j])
    assert jnp.full(2, 1 + 1j).dtype == (np.complex128 if cdt is np.complex128 else np.complex64)


def test_promotion_without_x64():
    f32, i32 = jnp.ones(3, jnp.float32), jnp.ones(3, jnp.int32)
    assert (f32 + 1j).dtype == np.complex64 and not (f32 + 1j).weak_type
    np.testing.assert_array_equal(np.asarray(f32 + 1j), [1 + 1j] * 3)
    z = i32 + 1j  # int32 joins complex* at complex*: the result stays weak (as in JAX)
    assert z.dtype == np.complex64
    assert z.weak_type, "int32 array + 1j must be weakly typed complex64 as in JAX"
    assert (jnp.ones(2, jnp.complex64) * jnp.ones(2, jnp.float32)).dtype == np.complex64
    assert (jnp.float32(2) * jnp.asarray(np.ones(2, np.complex64))).dtype == np.complex64
    assert jnp.result_type(jnp.float32, jnp.complex64) == np.complex64
    assert jnp.promote_types(jnp.float32, jnp.complex64) == np.complex64


def test_promotion_with_x64(x64):
    f64 = jnp.ones(2, jnp.float64)
    assert (f64 + 1j).dtype == np.complex128
    assert (jnp.ones(2, jnp.float32) + 1j).dtype == np.complex64  # weak complex keeps the width
    assert (jnp.ones(2, jnp.complex64) * f64).dtype == np.complex128
    s = jnp.asarray(2j)
    assert s.dtype == np.complex128 and s.weak_type
    assert jnp.promote_types(jnp.float64, jnp.complex64) == np.complex128


def test_repr_and_str():
    x = jnp.asarray(np.array([1 + 2j, 3 - 4j], np.complex64))
    assert repr(x) == "Array([1.+2.j, 3.-4.j], dtype=complex64)"
    assert str(x) == str(np.array([1 + 2j, 3 - 4j], np.complex64))
    assert repr(jnp.asarray(1 + 2j)) == "Array(1.+2.j, dtype=complex64, weak_type=True)"


def test_real_imag_conj_attributes(cdt):
    a = rand_c((2, 3), cdt)
    x = jnp.asarray(a)
    check(x.real, a.real)
    check(x.imag, a.imag)
    check(x.conj(), a.conj())
    check(x.conjugate(), a.conj())
    r = jnp.asarray(np.float32([1.5, -2]))  # real arrays: real is itself, imag is zeros
    check(r.real, np.float32([1.5, -2]))
    check(r.imag, np.float32([0, 0]))


# ---------------------------------------------------------------------------- elementwise

UNARY = ["negative", "square", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin", "cos",
         "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh",
         "reciprocal", "sign", "absolute", "angle", "real", "imag", "conj"]


@pytest.mark.parametrize("name", UNARY)
def test_unary_against_numpy(cdt, name):
    a = rand_c((4, 5), cdt)
    got = getattr(jnp, name)(jnp.asarray(a))
    want = getattr(np, name)(a.astype(np.complex128))
    dt = np.float32 if cdt is np.complex64 else np.float64
    check(got, want, dtype=dt if name in ("absolute", "angle", "real", "imag") else cdt)


@pytest.mark.parametrize("name", ["exp", "sin", "cosh", "arcsin", "log", "sqrt", "tanh"])
def test_unary_under_jit(cdt, name):
    a = rand_c(7, cdt)
    check(kiln.jit(getattr(jnp, name))(a), getattr(np, name)(a.astype(np.complex128)), cdt)


def test_unary_special_points(x64):
    z = jnp.asarray(np.array([0j, -0.0 + 0j, 1e300 + 1e300j, 3e-310 + 4e-310j, -2 + 0j]))
    check(jnp.sign(z[:1]), [0j])
    check(jnp.abs(z[2:4]), np.abs(np.array([1e300 + 1e300j, 3e-310 + 4e-310j])), np.float64)  # no overflow
    inf_parts = np.array([complex(np.inf, 1), complex(1, -np.inf), complex(-np.inf, 0)])
    check(jnp.abs(jnp.asarray(inf_parts)), [np.inf] * 3, np.float64)
    check(jnp.angle(z[4:]), [np.pi], np.float64)
    check(jnp.angle(z[4:], deg=True), [180.0], np.float64)
    check(jnp.exp(jnp.asarray(np.array([1j * np.pi]))), [-1 + 0j], tol=1e-15)


# Extreme magnitudes, where the naive formulas (|z|^2, z + sqrt(z^2 + 1), log(1 + z)) overflow or
# cancel; JAX (XLA's complex kernels) keeps full relative accuracy on all of these.
BIG = {np.complex64: [1e20 + 1e20j, -3e37 + 2e38j, 3e38 - 3e38j, -1e25 - 4e20j],
       np.complex128: [1e200 + 1e200j, 1e307 - 1e308j, -1e250 + 3e200j]}
SMALL = {np.complex64: [1e-4 + 1e-5j, -3e-6 + 2e-5j, 1e-20 - 1e-20j, -2e-12 - 1e-13j],
         np.complex128: [1e-10 + 1e-11j, -3e-9 + 2e-12j, 1e-100 - 1e-100j]}


def _check_rel(got, want, tol):
    """Relative error in the complex norm, element by element."""
    got, want = np.asarray(got).astype(np.complex128), np.asarray(want)
    err = np.abs(got - want) / np.abs(want)
    assert np.all(err <= tol), list(zip(got, want, err))


@pytest.mark.parametrize("name", ["log", "log10", "sqrt", "arcsinh", "arcsin", "arccos", "arccosh", "arctan",
                                  "arctanh", "tanh", "tan"])
def test_unary_large_arguments_keep_relative_accuracy(cdt, name):
    a = np.array(BIG[cdt], cdt)
    with np.errstate(all="ignore"):
        want = getattr(np, name)(a.astype(np.complex128))
    _check_rel(getattr(jnp, name)(jnp.asarray(a)), want, TOL[cdt])


@pytest.mark.parametrize("name", ["log1p", "expm1", "sin", "tan", "sinh", "tanh", "sqrt", "arcsinh", "arcsin",
                                  "arctan", "arctanh"])
def test_unary_small_arguments_keep_relative_accuracy(cdt, name):
    a = np.array(SMALL[cdt], cdt)
    z = a.astype(np.complex128)
    series = {"log1p": z - z * z / 2 + z ** 3 / 3, "expm1": z + z * z / 2 + z ** 3 / 6}  # numpy's cancel
    want = series[name] if name in series else getattr(np, name)(z)
    _check_rel(getattr(jnp, name)(jnp.asarray(a)), want, TOL[cdt])


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide"])
def test_binary_against_numpy(cdt, op):
    a, b = rand_c((3, 4), cdt, 3.0), rand_c((3, 4), cdt, 3.0)
    want = getattr(np, op)(a.astype(np.complex128), b.astype(np.complex128))
    check(getattr(jnp, op)(a, b), want, cdt)
    check(getattr(jnp, op)(a, b[0]), getattr(np, op)(a.astype(np.complex128), b[0].astype(np.complex128)), cdt)
    r = rng().uniform(0.5, 2, (3, 4)).astype(np.float32 if cdt is np.complex64 else np.float64)
    check(getattr(jnp, op)(r, b), getattr(np, op)(r.astype(np.float64), b.astype(np.complex128)), cdt)
    check(getattr(jnp, op)(a, 2.5), getattr(np, op)(a.astype(np.complex128), 2.5), cdt)
    check(getattr(jnp, op)(a, 0.5 - 1j), getattr(np, op)(a.astype(np.complex128), 0.5 - 1j), cdt)


@pytest.mark.parametrize("dtype,num,den", [
    (np.complex128, 1 + 1j, 1e-300 + 1e-300j),
    (np.complex128, 1 + 1j, 1e300 + 1e300j),
    (np.complex128, 1e300 + 1e300j, 1e300 - 1e-300j),
    (np.complex128, 2e-10 - 3e-10j, 1e-310 + 0j),  # subnormal divisor
    (np.complex128, 1 + 2j, 4e-200 + 3e200j),
    (np.complex64, 1 + 1j, 1e-30 + 2e-30j),  # |den|^2 underflows in float32
    (np.complex64, 1 + 1j, 1e30 - 3e30j),  # |den|^2 overflows in float32
    (np.complex64, 3e30 + 1e30j, 1e30 + 1e30j),
])
def test_division_without_overflow(request, dtype, num, den):
    if dtype is np.complex128:
        request.getfixturevalue("x64")
    n, d = np.array([num], dtype), np.array([den], dtype)
    # scaled by a power of two first: numpy's own division overflows on a subnormal divisor
    s = 2.0 ** -np.clip(np.round(np.log2(np.abs(den))), -1000, 1000)
    want = (n.astype(np.complex128) * s) / (d.astype(np.complex128) * s)
    got = jnp.asarray(n) / jnp.asarray(d)
    assert np.all(np.isfinite(np.asarray(got))), got
    check(got, want, dtype)
    check(kiln.jit(lambda p, q: p / q)(n, d), want, dtype)


@pytest.mark.parametrize("k", [0, 1, 2, 3, 5, -1, -2, -3])
def test_integer_power(cdt, k):
    a = rand_c(6, cdt, 1.5)
    want = a.astype(np.complex128) ** k
    check(jnp.asarray(a) ** k, want, cdt)
    check(lax.integer_pow(jnp.asarray(a), k), want, cdt)
    check(jnp.power(a, k), want, cdt)


def test_complex_power(cdt):
    a, b = rand_c(6, cdt, 1.5), rand_c(6, cdt, 1.5)
    a128, b128 = a.astype(np.complex128), b.astype(np.complex128)
    check(jnp.power(a, b), a128 ** b128, cdt, tol=2e-5 if cdt is np.complex64 else 1e-11)
    check(jnp.asarray(a) ** (0.5 - 0.25j), a128 ** (0.5 - 0.25j), cdt)
    check(jnp.asarray(a) ** 0.5, np.sqrt(a128), cdt)
    check(lax.pow(jnp.asarray(a), jnp.asarray(b)), a128 ** b128, cdt, tol=2e-5 if cdt is np.complex64 else 1e-11)


def test_complex_power_special_values_as_jax():
    """Issue 32: x ** 0 is 1 for every x (kiln gave NaN for inf ** 0.0, exp(0 * log inf)), 1 ** y is 1,
    inf ** c is inf / 0 for real c > 0 / < 0, 0 ** y is NaN unless y is real and >= 0. Pinned from JAX 0.10.2
    (XLA's complex pow: |x|^c e^(-d arg x) (cos q + i sin q), q = c arg x + d log|x|)."""
    inf, nan = np.inf, np.nan
    cases = [  # (x, y, JAX's x ** y)
        (complex(inf, 0), 0, 1), (complex(inf, inf), 0, 1), (complex(nan, nan), 0, 1), (complex(0, inf), 0, 1),
        (complex(-inf, 0), 0, 1), (1, complex(nan, 0), 1), (1, complex(inf, 0), 1),
        (complex(inf, 0), 0.5, complex(inf, 0)), (complex(inf, 0), inf, complex(inf, 0)), (complex(inf, 0), -1, 0),
        (0, 0, 1), (0, 0.5, 0), (0, -1, complex(nan, nan)), (0, 1j, complex(nan, nan)),
        (0, 1.5 + 0.5j, complex(nan, nan)), (complex(-0.0, 0), -0.5, complex(nan, nan)),
    ]
    x = jnp.array([c[0] for c in cases], jnp.complex64)
    y = jnp.array([c[1] for c in cases], jnp.complex64)
    want = np.array([c[2] for c in cases], np.complex64)
    for got in (lax.pow(x, y), kiln.jit(lax.pow)(x, y)):
        np.testing.assert_array_equal(np.asarray(got), want)
    assert complex(jnp.power(jnp.complex64(complex(inf, 0)), 0.0)) == 1  # the case
    got = jnp.power(jnp.array([2 + 3j], jnp.complex64), jnp.array([1.5 + 0.5j, -2j], jnp.complex64))
    np.testing.assert_allclose(np.asarray(got), [-2.1700148582458496 + 3.5824015140533447j,
                                                 -5.984694004058838 - 3.892334461212158j], rtol=1e-6)


def test_division_and_sqrt_special_values_as_jax():
    """Issue 32: Smith's division gave NaN + NaN i where JAX (XLA through MLIR's complex division, C99
    Annex G) gives a value: over a zero divisor, an infinite dividend, an infinite divisor; and sqrt(0)
    was NaN (so were asin(1), acos(1), acosh(1), asinh(1j), built on it). Pinned from JAX 0.10.2."""
    inf, nan = np.inf, np.nan
    cases = [  # (x, y, JAX's x / y)
        (1, 0, complex(inf, nan)), (1, complex(-0.0, 0), complex(-inf, nan)), (3 + 0.5j, 0, complex(inf, inf)),
        (3 + 0.5j, complex(-0.0, 0), complex(-inf, -inf)), (1j, 0, complex(nan, inf)), (-2 - 1j, 0, complex(-inf, -inf)),
        (complex(inf, inf), 1, complex(inf, inf)), (complex(inf, inf), 1j, complex(inf, -inf)),
        (complex(-inf, 1), 0, complex(-inf, inf)), (3 + 0.5j, complex(inf, inf), 0j), (0, complex(inf, inf), 0j),
        (complex(nan, nan), 0, complex(nan, nan)), (2 + 2j, 1 + 1j, 2 + 0j),
    ]
    x = jnp.array([c[0] for c in cases], jnp.complex64)
    y = jnp.array([c[1] for c in cases], jnp.complex64)
    want = np.array([c[2] for c in cases], np.complex64)
    for got in (x / y, kiln.jit(lax.div)(x, y)):
        np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(np.asarray(1 / jnp.array([0j, complex(inf, inf)], jnp.complex64)),
                                  np.array([complex(inf, nan), 0j], np.complex64))
    z = jnp.array([0j, complex(0, inf), complex(inf, inf), complex(-inf, 1), 4 + 0j], jnp.complex64)
    np.testing.assert_array_equal(np.asarray(jnp.sqrt(z)), np.array(
        [0j, complex(inf, inf), complex(inf, inf), complex(0, inf), 2 + 0j], np.complex64))
    one = jnp.array([1 + 0j], jnp.complex64)
    np.testing.assert_allclose(np.asarray(jnp.arcsin(one)), [np.pi / 2], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jnp.arccos(one)), [0], atol=1e-7)
    np.testing.assert_allclose(np.asarray(jnp.arccosh(one)), [0], atol=1e-7)
    np.testing.assert_allclose(np.asarray(jnp.arcsinh(jnp.array([1j], jnp.complex64))), [np.pi / 2 * 1j], rtol=1e-6)


def test_compare_and_classify():
    a = np.array([1 + 2j, 3 - 1j, np.inf + 0j, 1 + np.nan * 1j, -np.inf * 1j, 0j], np.complex64)
    b = np.array([1 + 2j, 3 + 1j, np.inf + 0j, 1 + 2j, 2 + 0j, -0.0 + 0j], np.complex64)
    x, y = jnp.asarray(a), jnp.asarray(b)
    for name in ("equal", "not_equal"):
        np.testing.assert_array_equal(np.asarray(getattr(jnp, name)(x, y)), getattr(np, name)(a, b))
    np.testing.assert_array_equal(np.asarray(x == y), a == b)
    np.testing.assert_array_equal(np.asarray(x != y), a != b)
    for name in ("isfinite", "isnan", "isinf"):
        got = getattr(jnp, name)(x)
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(np.asarray(got), getattr(np, name)(a), err_msg=name)
    np.testing.assert_array_equal(np.asarray(jnp.equal(x, 1 + 2j)), a == 1 + 2j)


def test_where_and_select(cdt):
    a, b = rand_c((3, 4), cdt), rand_c((3, 4), cdt)
    m = rng().random((3, 4)) < 0.5
    check(jnp.where(m, a, b), np.where(m, a, b))
    check(lax.select(jnp.asarray(m), jnp.asarray(a), jnp.asarray(b)), np.where(m, a, b))
    check(jnp.where(m, a, 0.5j), np.where(m, a, 0.5j).astype(cdt))
    check(jnp.where(m, a, 2.0), np.where(m, a, 2.0).astype(cdt))
    check(lax.select_n(jnp.asarray(m), jnp.asarray(a), jnp.asarray(b)), np.where(m, b, a))


def test_lax_parts_and_complex(cdt):
    a = rand_c((2, 5), cdt)
    x = jnp.asarray(a)
    rdt = np.float32 if cdt is np.complex64 else np.float64
    check(lax.real(x), a.real, rdt)
    check(lax.imag(x), a.imag, rdt)
    check(lax.conj(x), a.conj(), cdt)
    check(lax.complex(lax.real(x), lax.imag(x)), a, cdt)
    re, im = a.real.copy(), a.imag.copy()
    check(lax.complex(re, im), a, cdt)
    check(lax.complex(re, rdt(0.5)), re + 0.5j, cdt)
    check(jnp.real(re), re, rdt)
    check(jnp.imag(re), np.zeros_like(re), rdt)
    check(jnp.conj(re), re, rdt)
    with pytest.raises(TypeError):
        lax.complex(np.int32([1]), np.int32([2]))


def test_convert_element_type(x64):
    a = rand_c(5, np.complex128)
    x = jnp.asarray(a)
    check(lax.convert_element_type(x, np.complex64), a.astype(np.complex64), np.complex64, 0)
    check(lax.convert_element_type(x, np.float64), a.real, np.float64, 0)  # drops the imaginary part
    check(lax.convert_element_type(x, np.float32), a.real.astype(np.float32), np.float32, 0)
    check(lax.convert_element_type(x.astype(np.complex64), np.complex128), a.astype(np.complex64).astype(np.complex128),
          np.complex128, 0)
    r = rng().standard_normal(4).astype(np.float32)
    check(lax.convert_element_type(r, np.complex64), r + 0j, np.complex64, 0)
    check(lax.convert_element_type(r, np.complex128), r.astype(np.float64) + 0j, np.complex128, 0)
    check(x.astype(np.float64), a.real, np.float64, 0)
    z = jnp.asarray(np.array([0j, 1j, 2 + 0j, -0.0 + 0j, 0.5 - 3j]))
    b = z.astype(bool)
    assert b.dtype == np.bool_
    np.testing.assert_array_equal(np.asarray(b), [False, True, True, False, True])


# ---------------------------------------------------------------------------- reductions, products

@pytest.mark.parametrize("axis,keepdims", [(None, False), (0, False), (1, True), ((0, 2), False), (-1, True)])
def test_sum_mean(cdt, axis, keepdims):
    a = rand_c((3, 4, 5), cdt)
    a128 = a.astype(np.complex128)
    check(jnp.sum(a, axis=axis, keepdims=keepdims), a128.sum(axis=axis, keepdims=keepdims), cdt)
    check(jnp.mean(a, axis=axis, keepdims=keepdims), a128.mean(axis=axis, keepdims=keepdims), cdt)
    check(jnp.asarray(a).sum(axis=axis), a128.sum(axis=axis), cdt)


def test_var_std_are_real(cdt):
    a = rand_c((4, 6), cdt)
    a128 = a.astype(np.complex128)
    rdt = np.float32 if cdt is np.complex64 else np.float64
    check(jnp.var(a), a128.var(), rdt)
    check(jnp.var(a, axis=0, ddof=1), a128.var(axis=0, ddof=1), rdt)
    check(jnp.std(a, axis=1, keepdims=True), a128.std(axis=1, keepdims=True), rdt)


def test_cumsum(cdt):
    a = rand_c((3, 7), cdt)
    for axis in (0, 1, None):
        check(jnp.cumsum(a, axis=axis), np.cumsum(a.astype(np.complex128), axis=axis), cdt)


def test_dot_matmul_einsum(cdt):
    a, b, v = rand_c((4, 3), cdt), rand_c((3, 5), cdt), rand_c(3, cdt)
    A, B, V = (t.astype(np.complex128) for t in (a, b, v))
    check(jnp.dot(a, b), A @ B, cdt)
    check(jnp.matmul(a, b), A @ B, cdt)
    check(jnp.asarray(a) @ jnp.asarray(v), A @ V, cdt)
    check(jnp.dot(v, v), V @ V, cdt)  # no conjugation (numpy's dot)
    check(jnp.einsum("ij,jk->ik", a, b), A @ B, cdt)
    ba, bb = rand_c((2, 4, 3), cdt), rand_c((2, 3, 5), cdt)
    want = np.einsum("bij,bjk->bik", ba.astype(np.complex128), bb.astype(np.complex128))
    check(lax.dot_general(jnp.asarray(ba), jnp.asarray(bb), (((2,), (1,)), ((0,), (0,)))), want, cdt)
    check(jnp.matmul(ba, bb), want, cdt)


def test_vdot_conjugates_the_first_argument(cdt):
    u, v = rand_c(5, cdt), rand_c(5, cdt)
    check(jnp.vdot(u, v), np.vdot(u.astype(np.complex128), v.astype(np.complex128)), cdt)
    check(jnp.vdot(v, v), np.complex128(np.sum(np.abs(v.astype(np.complex128)) ** 2)), cdt)


def test_mixed_real_complex_products(cdt):
    rdt = np.float32 if cdt is np.complex64 else np.float64
    a, r = rand_c((4, 3), cdt), rng().standard_normal((3, 2)).astype(rdt)
    check(jnp.dot(a, r), a.astype(np.complex128) @ r, cdt)
    check(jnp.matmul(r.T, a.T), r.T @ a.T.astype(np.complex128), cdt)
    check(jnp.einsum("ij,jk->ik", a, r), a.astype(np.complex128) @ r, cdt)


# ---------------------------------------------------------------------------- shapes, indexing

def test_shape_ops(cdt):
    a, b = rand_c((2, 3, 4), cdt), rand_c((2, 3, 4), cdt)
    x = jnp.asarray(a)
    check(x.reshape(6, 4), a.reshape(6, 4))
    check(jnp.transpose(x, (2, 0, 1)), a.transpose(2, 0, 1))
    check(x.T, a.T)
    check(jnp.concatenate([a, b], axis=1), np.concatenate([a, b], axis=1))
    check(jnp.stack([a, b], axis=-1), np.stack([a, b], axis=-1))
    check(jnp.flip(x, 1), np.flip(a, 1))
    check(jnp.broadcast_to(a[0, 0], (5, 4)), np.broadcast_to(a[0, 0], (5, 4)))
    check(jnp.pad(x, ((1, 0), (0, 2), (1, 1)), constant_values=2 - 3j),
          np.pad(a, ((1, 0), (0, 2), (1, 1)), constant_values=2 - 3j))
    check(lax.pad(x, jnp.asarray(1j, cdt), ((0, 1, 1), (1, 0, 0), (0, 0, 0))),
          np.asarray(lax.pad(jnp.asarray(a.real), 0.0, ((0, 1, 1), (1, 0, 0), (0, 0, 0))))
          + 1j * np.asarray(lax.pad(jnp.asarray(a.imag), 1.0, ((0, 1, 1), (1, 0, 0), (0, 0, 0)))), cdt)


def test_indexing_and_updates(cdt):
    a = rand_c((5, 4), cdt)
    x = jnp.asarray(a)
    check(x[1:4:2, ::-1], a[1:4:2, ::-1])
    check(x[2], a[2])
    idx = np.array([3, 0, 0, 2])
    check(x[idx], a[idx])
    check(x[jnp.asarray(idx), 1], a[idx, 1])
    check(jnp.take(x, idx, axis=1), np.take(a, idx, axis=1))
    want = a.copy()
    want[1] = 2 + 5j
    check(x.at[1].set(2 + 5j), want)
    want = a.copy()
    np.add.at(want, (idx, 2), 1j)
    check(x.at[idx, 2].add(1j), want)
    want = a.copy()
    want[:, 0] *= 2j
    check(x.at[:, 0].multiply(2j), want)
    check(lax.dynamic_slice(x, (1, 2), (3, 2)), a[1:4, 2:4])
    i = jnp.asarray(3)
    check(kiln.jit(lambda v, k: lax.dynamic_slice(v, (k, 0), (2, 4)))(x, i), a[3:5])
    u = rand_c((2, 2), cdt)
    want = a.copy()
    want[2:4, 1:3] = u
    check(lax.dynamic_update_slice(x, jnp.asarray(u), (2, 1)), want)
    np.testing.assert_array_equal(np.asarray(x), a)  # updates copy


# ---------------------------------------------------------------------------- transforms, control flow

def _mix(z, w):
    return jnp.sum(jnp.exp(z) * w - jnp.sin(w) / (z * z + 2) + jnp.conj(z) * 1j, axis=0)


def test_jit_matches_eager(cdt):
    z, w = rand_c((3, 4), cdt, 1.0), rand_c((3, 4), cdt, 1.0)
    eager = _mix(jnp.asarray(z), jnp.asarray(w))
    check(kiln.jit(_mix)(z, w), np.asarray(eager), cdt, tol=10 * TOL[cdt])
    Z, W = z.astype(np.complex128), w.astype(np.complex128)
    check(eager, np.sum(np.exp(Z) * W - np.sin(W) / (Z * Z + 2) + np.conj(Z) * 1j, axis=0), cdt)


def test_vmap_matches_loop(cdt):
    z, w = rand_c((5, 3, 4), cdt, 1.0), rand_c((3, 4), cdt, 1.0)
    got = kiln.vmap(_mix, in_axes=(0, None))(z, w)
    check(got, np.stack([np.asarray(_mix(jnp.asarray(zi), jnp.asarray(w))) for zi in z]), cdt, tol=10 * TOL[cdt])
    got = kiln.vmap(lambda v: jnp.dot(v, w[:, 0]), in_axes=1)(z[0])
    check(got, z[0].T.astype(np.complex128) @ w[:, 0].astype(np.complex128), cdt)


def test_fori_loop_and_while_loop(cdt):
    z = rand_c(3, cdt, 1.0)
    rot = np.exp(0.3j)
    want = z.astype(np.complex128) * rot ** 6
    check(lax.fori_loop(0, 6, lambda i, c: c * rot, jnp.asarray(z)), want, cdt)
    check(kiln.jit(lambda v: lax.fori_loop(0, 6, lambda i, c: c * rot, v))(z), want, cdt)
    out = lax.while_loop(lambda c: jnp.abs(c[0]) < 50.0, lambda c: (c[0] * (1 + 1j), c[1] + 1),
                         (jnp.asarray(1 + 0j, cdt), 0))
    assert int(out[1]) == 12  # |1 + i|^12 = 64
    check(out[0], np.complex128((1 + 1j) ** 12), cdt)


def test_scan_with_complex_carry(cdt):
    xs = rand_c((6, 2), cdt, 1.0)

    def step(c, x):
        c = c * x + 1j
        return c, jnp.conj(c)

    carry, ys = lax.scan(step, jnp.ones(2, cdt), xs)
    c, want = np.ones(2, np.complex128), []
    for x in xs.astype(np.complex128):
        c = c * x + 1j
        want.append(np.conj(c))
    check(carry, c, cdt)
    check(ys, np.stack(want), cdt)


def test_cond_with_complex_operands(cdt):
    z = rand_c(4, cdt)
    for pred in (True, False):
        got = lax.cond(pred, lambda v: v * 1j, lambda v: jnp.conj(v), jnp.asarray(z))
        check(got, z * 1j if pred else z.conj())
        got = kiln.jit(lambda p, v: lax.cond(p, lambda u: u * 1j, lambda u: jnp.conj(u), v))(pred, z)
        check(got, z * 1j if pred else z.conj())


# ---------------------------------------------------------------------------- autodiff

def _fd_wirtinger(f, z, eps=1e-6):
    """df/dx - i df/dy for real-valued f, each element by central differences."""
    g = np.zeros_like(z)
    for idx in np.ndindex(z.shape):
        d = np.zeros_like(z)
        d[idx] = eps
        dx = (f(z + d) - f(z - d)) / (2 * eps)
        dy = (f(z + 1j * d) - f(z - 1j * d)) / (2 * eps)
        g[idx] = dx - 1j * dy
    return g


REAL_FUNS = {
    "abs2": (lambda z: jnp.sum(jnp.abs(z) ** 2), lambda z: np.sum(np.abs(z) ** 2)),
    "abs": (lambda z: jnp.sum(jnp.abs(z)), lambda z: np.sum(np.abs(z))),
    "real_sq": (lambda z: jnp.sum(jnp.real(z * z)), lambda z: np.sum((z * z).real)),
    "imag_exp": (lambda z: jnp.sum(jnp.imag(jnp.exp(z) * z)), lambda z: np.sum((np.exp(z) * z).imag)),
    "abs_sin_log": (lambda z: jnp.sum(jnp.abs(jnp.sin(z)) + jnp.angle(z) * jnp.real(jnp.log(z))),
                    lambda z: np.sum(np.abs(np.sin(z)) + np.angle(z) * np.log(z).real)),
    "conj_div": (lambda z: jnp.real(jnp.sum(jnp.conj(z) / (z + 3) * jnp.sqrt(z))),
                 lambda z: np.real(np.sum(np.conj(z) / (z + 3) * np.sqrt(z)))),
    "dot": (lambda z: jnp.abs(jnp.dot(z, z[::-1])), lambda z: np.abs(np.dot(z, z[::-1]))),
    "cumsum_var": (lambda z: jnp.var(jnp.cumsum(z)) + jnp.sum(jnp.real(z) * jnp.imag(z)),
                   lambda z: np.var(np.cumsum(z)) + np.sum(z.real * z.imag)),
}


@pytest.mark.parametrize("name", sorted(REAL_FUNS))
def test_grad_real_valued_against_finite_differences(x64, name):
    f, ref = REAL_FUNS[name]
    z = rand_c(4, np.complex128, 1.5)
    g = kiln.grad(f)(z)
    check(g, _fd_wirtinger(ref, z), np.complex128, tol=1e-6)
    check(kiln.jit(kiln.grad(f))(z), np.asarray(g), np.complex128)


def test_grad_convention_pins(x64):
    check(kiln.grad(lambda z: jnp.abs(z) ** 2)(3 + 4j), 6 - 8j, np.complex128)
    check(kiln.grad(lambda z: jnp.real(z))(1 + 2j), 1 + 0j, np.complex128)
    check(kiln.grad(lambda z: jnp.imag(z))(1 + 2j), -1j, np.complex128)  # df/dx - i df/dy = -i
    check(kiln.grad(lambda z: jnp.real(z * z))(1 + 2j), 2 + 4j, np.complex128)
    # a real parameter feeding a complex intermediate gets a real gradient
    check(kiln.grad(lambda x: jnp.abs(lax.complex(x, 2 * x)) ** 2)(1.5), 15.0, np.float64)
    check(kiln.grad(lambda x: jnp.real(jnp.exp(1j * x)))(0.7), -np.sin(0.7), np.float64)
    v, g = kiln.value_and_grad(lambda z: jnp.abs(z) ** 2)(jnp.asarray(np.complex64(1 - 1j)))
    assert g.dtype == np.complex64
    check(v, 2.0, np.float32)
    check(g, 2 + 2j, np.complex64)


def test_grad_through_loops_and_cond(x64):
    z = rand_c(3, np.complex128, 1.0)
    w = 0.9 * np.exp(0.4j)

    def f(v):
        v = lax.fori_loop(0, 4, lambda i, c: c * w + jnp.conj(c) * 0.1, v)
        v, _ = lax.scan(lambda c, x: (c * x, None), v, jnp.asarray(np.full((3, 3), 1.1 - 0.2j)))
        v = lax.cond(jnp.sum(jnp.abs(v)) > 0, lambda u: u * u, lambda u: u, v)
        return jnp.sum(jnp.abs(v) ** 2)

    def ref(v):
        for _ in range(4):
            v = v * w + np.conj(v) * 0.1
        for _ in range(3):
            v = v * (1.1 - 0.2j)
        return np.sum(np.abs(v * v) ** 2)

    check(kiln.grad(f)(z), _fd_wirtinger(ref, z), np.complex128, tol=1e-5)


def test_grad_holomorphic(cdt):
    z = rand_c((), cdt, 1.5)
    Z = complex(z)
    want = np.cos(Z) * Z + np.sin(Z)
    g = kiln.grad(lambda v: jnp.sin(v) * v, holomorphic=True)(jnp.asarray(z))
    check(g, np.complex128(want), cdt, tol=10 * TOL[cdt])
    g = kiln.grad(lambda v: jnp.exp(v) / (v + 3) + v ** 3, holomorphic=True)(jnp.asarray(z))
    check(g, np.complex128(np.exp(Z) / (Z + 3) - np.exp(Z) / (Z + 3) ** 2 + 3 * Z ** 2), cdt, tol=10 * TOL[cdt])


def test_jvp_and_vjp_holomorphic_are_unconjugated(cdt):
    z, t, c = rand_c(4, cdt, 1.5), rand_c(4, cdt), rand_c(4, cdt)
    Z, T, C = (a.astype(np.complex128) for a in (z, t, c))
    f = lambda v: jnp.log(v) * v ** 2  # f'(z) = z + 2 z log z
    fp = Z + 2 * Z * np.log(Z)
    y, dy = kiln.jvp(f, (jnp.asarray(z),), (jnp.asarray(t),))
    check(y, np.log(Z) * Z ** 2, cdt, tol=10 * TOL[cdt])
    check(dy, fp * T, cdt, tol=10 * TOL[cdt])
    y, f_vjp = kiln.vjp(f, jnp.asarray(z))
    (ct,) = f_vjp(jnp.asarray(c))
    check(ct, C * fp, cdt, tol=10 * TOL[cdt])  # c f'(z), not c conj(f'(z))


def test_jacobians_holomorphic(cdt):
    z = rand_c(3, cdt, 1.5)
    Z = z.astype(np.complex128)
    f = lambda v: jnp.tanh(v) * v[::-1]
    sech2 = 1 / np.cosh(Z) ** 2
    want = np.diag(sech2 * Z[::-1]) + np.tanh(Z)[:, None] * np.eye(3)[::-1]
    check(kiln.jacfwd(f, holomorphic=True)(z), want, cdt, tol=10 * TOL[cdt])
    check(kiln.jacrev(f, holomorphic=True)(z), want, cdt, tol=10 * TOL[cdt])


def test_autodiff_errors():
    z = jnp.asarray(1 + 2j)
    with pytest.raises(TypeError, match="holomorphic"):
        kiln.grad(lambda v: v * v)(z)
    with pytest.raises(TypeError, match="holomorphic"):
        kiln.jacrev(lambda v: v * v)(jnp.asarray([1 + 2j]))
    with pytest.raises(TypeError, match="holomorphic"):
        kiln.jacfwd(lambda v: v * v)(jnp.asarray([1 + 2j]))
    with pytest.raises(TypeError, match="holomorphic.*input"):
        kiln.grad(lambda x: x * (1 + 1j), holomorphic=True)(1.0)
    with pytest.raises(TypeError, match="holomorphic"):
        kiln.grad(lambda v: jnp.abs(v), holomorphic=True)(z)  # real output
    with pytest.raises(TypeError, match="holomorphic"):
        kiln.jacfwd(lambda x: x * 1j, holomorphic=True)(jnp.ones(2))
    check(kiln.grad(lambda v: v * v, holomorphic=True)(z), np.complex64(2 + 4j))  # still works


# ---------------------------------------------------------------------------- order (JAX's)
# JAX orders complex numbers lexicographically (real part first) in jnp.less & co., maximum/minimum,
# lax.max/min, max/min reductions, cummax/cummin and sort, and computes prod/cumprod; lax.lt, floor
# and argmin/argmax reject complex with a TypeError.

def _lex_key(z):
    return (z.real, z.imag)


def test_lexicographic_order_as_jax():
    a = np.array([1 + 2j, 1 + 1j, 0 + 5j, 2 - 1j, 2 - 1j], np.complex64)
    b = np.array([1 + 1j, 1 + 1j, 1 + 0j, 2 - 2j, 2 - 1j], np.complex64)
    x, y = jnp.asarray(a), jnp.asarray(b)
    lt = np.array([_lex_key(p) < _lex_key(q) for p, q in zip(a, b)])
    le = np.array([_lex_key(p) <= _lex_key(q) for p, q in zip(a, b)])
    np.testing.assert_array_equal(np.asarray(jnp.less(x, y)), lt)
    np.testing.assert_array_equal(np.asarray(x < y), lt)
    np.testing.assert_array_equal(np.asarray(jnp.less_equal(x, y)), le)
    np.testing.assert_array_equal(np.asarray(jnp.greater(x, y)), ~le)
    np.testing.assert_array_equal(np.asarray(jnp.greater_equal(x, y)), ~lt)
    np.testing.assert_array_equal(np.asarray(jnp.maximum(x, y)), np.where(lt, b, a))
    np.testing.assert_array_equal(np.asarray(lax.min(x, y)), np.where(lt, a, b))
    assert complex(jnp.max(x)) == max(a, key=_lex_key) and complex(jnp.min(x)) == min(a, key=_lex_key)
    np.testing.assert_array_equal(np.asarray(jnp.sort(x)), np.sort(a))  # numpy sorts lexicographically too
    np.testing.assert_array_equal(np.asarray(x[jnp.argsort(x)]), np.sort(a))


def test_complex_extrema_sorts_and_products_along_axes():
    g = rng()
    z = (g.standard_normal((4, 7, 5)) + 1j * g.standard_normal((4, 7, 5))).astype(np.complex64)
    z[0, :, 0] = z[0, 0, 0].real + 1j * g.standard_normal(7)  # equal real parts: the imaginary decides
    x = jnp.asarray(z)
    zd = z.astype(np.complex128)
    assert complex(jnp.max(x)) == max(z.ravel(), key=_lex_key)
    u = z / np.abs(z)  # unit modulus: a product of 140 of them stays far from float32's underflow
    for axis in (0, 1, 2, (0, 2), None):
        np.testing.assert_allclose(np.asarray(jnp.prod(jnp.asarray(u), axis=axis)),
                                   np.prod(u.astype(np.complex128), axis=axis), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(jnp.max(x, axis=1)), np.sort(z, axis=1)[:, -1])
    np.testing.assert_array_equal(np.asarray(jnp.min(x, axis=2)), np.sort(z, axis=2)[:, :, 0])
    np.testing.assert_array_equal(np.asarray(jnp.sort(x, axis=1)), np.sort(z, axis=1))
    np.testing.assert_allclose(np.asarray(jnp.cumprod(x * 0.7, axis=1)), np.cumprod(zd * 0.7, axis=1), rtol=1e-4)
    np.testing.assert_allclose(np.asarray(kiln.jit(lambda v: jnp.prod(v, axis=0))(x)), np.prod(zd, axis=0), rtol=1e-4)
    assert complex(jnp.prod(jnp.zeros((0,), jnp.complex64))) == 1


@pytest.mark.parametrize("fn", [lax.lt, lambda a, b: jnp.floor(a), lambda a, b: jnp.argmax(a),
                                lambda a, b: jnp.argmin(a)])
def test_ordered_ops_jax_rejects(fn):
    x = jnp.asarray(np.array([1 + 2j, 3 - 1j], np.complex64))
    with pytest.raises(TypeError, match="complex"):
        fn(x, x)
    check(x + 1, np.array([2 + 2j, 4 - 1j], np.complex64))  # kiln still works


# Issue 32: complex inputs JAX computes on that kiln refused. Values pinned from JAX 0.10.2 (CPU).
_X32 = np.array([1 + 2j, 3 - 1j, 0.5 + 0j, 7 + 1j, -2 + 0.5j], np.complex64)
_Y32 = np.array([1 + 3j, 2 - 1j, 0.5 + 0j, 7 - 1j, -2 + 5j], np.complex64)


def test_complex_ordering_with_a_real_operand():
    # bug: x < True, jnp.minimum(x, 7), fmin/fmax with a real operand raised NotImplementedError
    # (the complex/complex fast path worked); JAX orders complex numbers real part first
    x = jnp.asarray(_X32)
    assert np.asarray(x < 7).tolist() == [True, True, True, False, True]
    assert np.asarray(x <= True).tolist() == [False, False, True, False, True]
    assert np.asarray(x > jnp.asarray(np.array([1, 3, 0.5, 8, -2], np.float32))).tolist() == \
        [True, False, False, False, True]
    assert np.asarray(jnp.less_equal(7, x)).tolist() == [False, False, False, True, False]
    check(jnp.minimum(x, 7), np.array([1 + 2j, 3 - 1j, 0.5, 7, -2 + 0.5j], np.complex64))
    check(jnp.maximum(x, 7), np.array([7, 7, 7, 7 + 1j, 7], np.complex64))
    check(jnp.fmin(x, 0.5), np.array([0.5, 0.5, 0.5, 0.5, -2 + 0.5j], np.complex64))
    check(jnp.fmax(3, x), np.array([3, 3, 3, 7 + 1j, 3], np.complex64))
    with pytest.raises(ValueError, match="complex"):  # JAX: complex values cannot be clipped
        jnp.clip(x, 1, 5)


def test_complex_rounding_angles_and_logaddexp():
    # bug: rint, round, deg2rad, rad2deg, logaddexp(2), arctan2 and nan_to_num raised TypeError
    # or NotImplementedError on complex inputs, which JAX computes
    x, y = jnp.asarray(_X32), jnp.asarray(_Y32)
    check(jnp.rint(x * 1.5), np.array([2 + 3j, 4 - 2j, 1, 10 + 2j, -3 + 1j], np.complex64))
    check(jnp.round(x / 3, 1), np.array([0.3 + 0.7j, 1 - 0.3j, 0.2, 2.3 + 0.3j, -0.7 + 0.2j], np.complex64))
    check(jnp.deg2rad(x), _X32.astype(np.complex128) * np.pi / 180, np.complex64)
    check(jnp.rad2deg(x), _X32.astype(np.complex128) * 180 / np.pi, np.complex64, tol=1e-4)
    check(jnp.logaddexp(x, y), np.array([1.5625629425048828 + 2.500000238418579j, 3.3132617473602295 - 1j,
                                         1.1931471824645996, 7.077520847320557,
                                         -1.7717914581298828 - 0.39159321784973145j], np.complex64))
    check(jnp.logaddexp2(x, y), np.array([1.9115643501281738 + 2.5j, 3.5849623680114746 - 1j, 1.5,
                                          7.621503829956055, -7.478435516357422 + 2.7499990463256836j],
                                         np.complex64), tol=1e-4)
    check(jnp.arctan2(x, y), np.array([0.6138862371444702 - 0.06706592440605164j,
                                       0.9569101929664612 + 0.06706608831882477j, 0.7853981852531433,
                                       0.7853981852531433 + 0.14384113252162933j,
                                       -2.8997700214385986 + 0.30303409695625305j], np.complex64))
    big = np.finfo(np.float32).max
    z = jnp.asarray(np.array([complex(np.nan, np.inf), complex(-np.inf, 1)], np.complex64))
    check(jnp.nan_to_num(z), np.array([complex(0, big), complex(-big, 1)], np.complex64))


def test_complex_activations_logsumexp_and_searches():
    # bug: kiln.nn's piecewise activations compared with lax.le (TypeError for complex), logsumexp and
    # cumlogsumexp called is_finite on complex, searchsorted/digitize/histogram used lax.lt, isclose and
    # nancumsum refused complex; JAX computes all of them (complex order: real part first)
    x, y = jnp.asarray(_X32), jnp.asarray(_Y32)
    check(kiln.nn.relu(x), np.array([1 + 2j, 3 - 1j, 0.5, 7 + 1j, 0], np.complex64))
    check(kiln.nn.hard_tanh(x), np.array([1, 1, 0.5, 1, -1], np.complex64))
    check(kiln.nn.leaky_relu(x), np.array([1 + 2j, 3 - 1j, 0.5, 7 + 1j, -0.02 + 0.005j], np.complex64))
    check(kiln.nn.elu(x), np.array([1 + 2j, 3 - 1j, 0.5, 7 + 1j,
                                    -0.8812321424484253 + 0.06488318741321564j], np.complex64))
    check(kiln.nn.softplus(x), np.array([0.9063237905502319 + 1.623828649520874j,
                                         3.027376174926758 - 0.9592256546020508j, 0.9740769863128662,
                                         7.000493049621582 + 0.9992330074310303j,
                                         0.1139068678021431 + 0.05793023109436035j], np.complex64))
    from kiln.scipy.special import logsumexp
    check(logsumexp(x), np.complex64(6.9947509765625 + 0.9840229153633118j))
    check(logsumexp(x, b=y), np.complex64(8.951311111450195 + 0.8546222448348999j))
    check(lax.cumlogsumexp(x), np.array([1 + 2.000000238418579j, 2.8563947677612305 - 0.9779503345489502j,
                                         2.910763740539551 - 0.9034497737884521j,
                                         6.994641304016113 + 0.9840805530548096j,
                                         6.9947509765625 + 0.984022855758667j], np.complex64), tol=1e-4)
    bins = jnp.sort(y)
    assert np.asarray(jnp.digitize(x, bins)).tolist() == [2, 4, 2, 5, 0]
    assert np.asarray(jnp.searchsorted(bins, x, side="right")).tolist() == [2, 4, 2, 5, 0]
    counts, edges = jnp.histogram(x, bins=3)
    check(counts, np.array([3, 1, 1], np.complex64))
    check(edges, np.array([-2 + 0.5j, 1.000000238418579 + 0.6666666269302368j,
                           4.000000476837158 + 0.8333333730697632j, 7 + 1j], np.complex64))
    assert np.asarray(jnp.isclose(x, x + 1e-6j)).all()
    assert np.asarray(jnp.isclose(x, y)).tolist() == [False, False, True, False, False]
    assert bool(jnp.allclose(x, x))
    w = jnp.asarray(np.array([1 + 1j, complex(np.nan, 1), 2 - 1j], np.complex64))
    check(jnp.nancumsum(w), np.array([1 + 1j, 1 + 1j, 3], np.complex64))


def test_complex_refusals_match_jax():
    # bug: lax.top_k ranked complex numbers (JAX raises ValueError); median/quantile raised
    # NotImplementedError where JAX raises ValueError
    x = jnp.asarray(_X32)
    with pytest.raises(ValueError, match="complex"):
        lax.top_k(x, 2)
    for fn in (jnp.median, lambda v: jnp.quantile(v, 0.5), lambda v: jnp.percentile(v, 50)):
        with pytest.raises(ValueError, match="complex"):
            fn(x)


def test_complex_scatter_multiply_divide_min_max():
    # bug: x.at[i].multiply/divide/power/min/max on complex x raised NotImplementedError ("only set and
    # add combine complex updates"); JAX multiplies duplicates together and orders min/max
    # lexicographically (here two updates at index 2 share its real part 1, the operand's too)
    x = jnp.asarray(np.array([1 + 2j, 3 - 1j, 1 + 5j, 7 + 1j], np.complex64))
    u = jnp.asarray(np.array([1 + 7j, 1 - 2j, 2 + 1j, 0.5 - 0.5j], np.complex64))
    idx = np.array([2, 2, 0, 9])  # 9 is out of range: dropped
    check(x.at[idx].multiply(u), np.array([5j, 3 - 1j, -10 + 80j, 7 + 1j], np.complex64))
    check(x.at[idx].divide(u), np.array([0.8 + 0.6j, 3 - 1j, 0.16 + 0.28j, 7 + 1j], np.complex64))
    check(x.at[idx].min(u), np.array([1 + 2j, 3 - 1j, 1 - 2j, 7 + 1j], np.complex64))
    check(x.at[idx].max(u), np.array([2 + 1j, 3 - 1j, 1 + 7j, 7 + 1j], np.complex64))
    check(x.at[idx].power(u), np.array([-1.6401009559631348 + 0.20205019414424896j, 3 - 1j,
                                        -37995192 - 19392038j, 7 + 1j], np.complex64), tol=1e-4)
    check(kiln.jit(lambda a, b: a.at[idx].multiply(b))(x, u), np.array([5j, 3 - 1j, -10 + 80j, 7 + 1j], np.complex64))
    # the gradient through a complex scatter-multiply (its duplicate-count test compared complex numbers)
    g = kiln.grad(lambda v: jnp.abs(x.at[np.array([2, 1])].multiply(v)).sum())(u[:2])
    assert g.dtype == np.complex64 and np.isfinite(np.asarray(g)).all()


def test_numpy_complex_scalar_literal_keeps_its_imaginary_part():
    """Regression (issue 32): a NumPy complex64 scalar made a trace literal through float(), so
    lax.full((2,), np.complex64(1+2j)) under jit was 1+0j (with a ComplexWarning)."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = kiln.jit(lambda x: x + lax.full((2,), np.complex64(1 + 2j), jnp.complex64))(jnp.zeros(2, jnp.complex64))
        np.testing.assert_array_equal(np.asarray(out), np.array([1 + 2j, 1 + 2j], np.complex64))
        out = kiln.jit(lambda x: x * np.complex64(3 - 1j))(jnp.ones(2, jnp.complex64))
        np.testing.assert_array_equal(np.asarray(out), np.array([3 - 1j, 3 - 1j], np.complex64))


def test_inverse_trig_on_the_branch_cuts_take_jax_side():
    # bug (issue 32, fuzzer): asinh(0 - 1.9i) gave -1.257 - 1.571i (JAX: +1.257) and asin(1.5 + 0i)
    # 1.571 - 0.962i (JAX: + 0.962i): kiln's sqrt, as XLA's, ignores a zero imaginary part's sign,
    # which the formula relied on. JAX's side: a zero's sign is ignored, taken as +0 (values pinned
    # from JAX 0.10.2)
    z = np.array([0.0 - 1.9j, complex(-0.0, -1.9), 0.0 + 1.9j, 1e-3 - 1.9j, -1e-3 - 1.9j], np.complex64)
    want = np.array([1.2571958 - 1.5707964j, 1.2571958 - 1.5707964j, 1.2571958 + 1.5707964j,
                     1.2571961 - 1.5701773j, -1.2571961 - 1.5701773j], np.complex64)
    for f in (jnp.arcsinh, kiln.jit(jnp.arcsinh)):
        np.testing.assert_allclose(np.asarray(f(z)), want, rtol=2e-6)
    x = np.array([3 + 0j, complex(3, -0.0), -3 + 0j, complex(-3, -0.0), 1.5 + 0j, 0.5 + 0j], np.complex64)
    np.testing.assert_allclose(np.asarray(jnp.arcsin(x)),
                               np.array([1.5707964 + 1.7627472j, 1.5707964 + 1.7627472j, -1.5707964 + 1.7627472j,
                                         -1.5707964 + 1.7627472j, 1.5707964 + 0.9624237j, 0.5235988 + 0j],
                                        np.complex64), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(jnp.arccos(x[:4])),
                               np.array([-1.7627472j, -1.7627472j, 3.1415927 - 1.7627472j, 3.1415927 - 1.7627472j],
                                        np.complex64), rtol=2e-6, atol=1e-7)


def test_hyperbolic_and_trig_keep_zeros_and_huge_imaginary_parts():
    # bug (issue 32, fuzzer): sinh(inf + 0i) gave inf + nan i (cosh(inf) * sin(0)), and tanh(-2.5 + 3e38i)
    # nan (2 * 3e38 overflowed before the sine); values pinned from JAX 0.10.2
    z = np.array([complex(np.inf, 0.0), complex(-np.inf, 0.0)], np.complex64)
    assert np.asarray(jnp.sinh(z)).tolist() == [complex(np.inf, 0), complex(-np.inf, 0)]
    assert np.asarray(jnp.cosh(z)).tolist() == [complex(np.inf, 0), complex(np.inf, 0)]
    zi = np.array([complex(0.0, np.inf), complex(0.0, -np.inf)], np.complex64)
    assert np.asarray(jnp.sin(zi)).tolist() == [complex(0, np.inf), complex(0, -np.inf)]
    got = np.asarray(lax.tanh(jnp.asarray(np.array([complex(-2.5, 3e38), complex(1, 1e30)], np.complex64))))
    np.testing.assert_allclose(got, np.array([-1.0071143 - 0.01150156j, 1.0332003 + 0.27568984j], np.complex64),
                               rtol=1e-5)
