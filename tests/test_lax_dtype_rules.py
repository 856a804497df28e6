"""lax's dtype rule, pinned from JAX 0.10.2: the operands of an n-ary lax function keep their own
dtypes (a Python scalar has its kind's default dtype, 64-bit with x64, weakly typed; a NumPy value
its canonical dtype) and must share one; nothing is promoted. Bug (issue 32, fuzzer D3/D4): a
scalar took the other operand's dtype, so lax.add(uint16 array, 1) computed where JAX raises
TypeError, and dynamic_slice took start indices of different integer dtypes. kiln.numpy, built on
the same functions, still promotes."""
import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax

rng = np.random.default_rng()
BF16 = np.dtype(ml_dtypes.bfloat16)


def arr(dtype, shape=(3,)):
    """A fresh random array of `dtype` (values that every op below keeps in range)."""
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        return jnp.asarray(rng.integers(1, 5, shape).astype(dt))
    if dt.kind == "c":
        return jnp.asarray((rng.uniform(0.5, 2, shape) + 1j * rng.uniform(0.5, 2, shape)).astype(dt))
    host = rng.uniform(0.5, 2, shape).astype(np.float32)
    return jnp.asarray(host, dtype=dt) if dt == BF16 else jnp.asarray(host.astype(dt))


# (op, x dtype, scalar, x64) -> the dtype JAX computes in, or the dtypes its TypeError names
SCALAR_CASES = [
    (lax.add, np.float32, 2.0, False, "float32"),
    (lax.add, np.float16, 2.0, False, "float16, float32"),
    (lax.add, BF16, 2.0, False, "bfloat16, float32"),
    (lax.mul, np.int8, 3, False, "int8, int32"),
    (lax.add, np.uint16, 1, False, "uint16, int32"),
    (lax.add, np.int32, 1, False, "int32"),
    (lax.add, np.float32, 1, False, "float32, int32"),
    (lax.add, np.int32, 1.0, False, "int32, float32"),
    (lax.add, np.complex64, 1j, False, "complex64"),
    (lax.add, np.float32, 1j, False, "float32, complex64"),
    (lax.sub, np.float16, 3.25, True, "float16, float64"),
    (lax.add, np.float32, 2.0, True, "float32, float64"),
    (lax.add, np.int32, 1, True, "int32, int64"),
    (lax.add, np.complex64, 1j, True, "complex64, complex128"),
    (lax.add, np.float64, 2.0, True, "float64"),
    (lax.eq, np.int8, 2, False, "int8, int32"),
    (lax.max, np.float16, 1.0, False, "float16, float32"),
    (lax.atan2, np.float16, 1.0, False, "float16, float32"),
    (lax.nextafter, np.float32, 1.0, False, "float32"),
    (lax.nextafter, np.float32, 1.0, True, "float32, float64"),
    (lax.shift_left, np.int8, 1, False, "int8, int32"),
    (lax.bitwise_or, np.uint8, 1, False, "uint8, int32"),
    (lax.bitwise_and, np.bool_, True, False, "bool"),
    (lax.rem, np.int8, 2, False, "int8, int32"),
]
# JAX's tip names the kiln.numpy function that promotes; ops without one (rem, or, lt) have none
TIPS = {lax.add: "jnp.add", lax.sub: "jnp.subtract", lax.mul: "jnp.multiply", lax.eq: "jnp.equal",
        lax.max: "jnp.maximum", lax.atan2: "jnp.arctan2", lax.nextafter: "jnp.nextafter",
        lax.shift_left: "jnp.left_shift"}


@pytest.fixture
def x64_mode():
    """Sets jax_enable_x64 for the test, restored afterwards."""
    old = kiln.config.jax_enable_x64
    yield lambda on: kiln.config.update("jax_enable_x64", on)
    kiln.config.update("jax_enable_x64", old)


@pytest.mark.parametrize("case", SCALAR_CASES, ids=lambda c: f"{c[0].__name__}-{np.dtype(c[1]).name}-{c[2]!r}-x64={c[3]}")
def test_python_scalar_has_its_default_dtype(case, x64_mode):
    op, dtype, scalar, x64, want = case
    x64_mode(x64)
    x = arr(dtype)
    if "," in want:
        for a, b in ((x, scalar), (scalar, x)):
            with pytest.raises(TypeError) as e:
                op(a, b)
            names = want if a is x else ", ".join(reversed(want.split(", ")))
            prim = {"or_": "or", "and_": "and"}.get(op.__name__, op.__name__)
            assert f"lax.{prim} requires arguments to have the same dtypes, got {names}." in str(e.value)
            if op in TIPS:
                assert f"(Tip: {TIPS[op]} is a similar function" in str(e.value)
            else:
                assert "Tip" not in str(e.value)
        with pytest.raises(TypeError, match="same dtypes"):  # under jit too
            kiln.jit(lambda v: op(v, scalar))(x)
        return
    out = op(x, scalar)
    assert out.dtype == np.dtype(want)
    assert not out.weak_type
    ref = {lax.add: np.add, lax.mul: np.multiply, lax.bitwise_and: np.bitwise_and}.get(op)
    if ref is not None:
        np.testing.assert_allclose(np.asarray(out), ref(np.asarray(x), scalar), rtol=1e-6)


def test_two_scalars_and_weak_arrays(x64_mode):
    x64_mode(False)
    out = lax.add(1, 2)
    assert (out.dtype, out.weak_type, int(out)) == (np.int32, True, 3)
    out = lax.add(1.5, 2.0)
    assert (out.dtype, out.weak_type, float(out)) == (np.float32, True, 3.5)
    with pytest.raises(TypeError, match="got int32, float32"):
        lax.add(1, 2.0)
    # a weakly typed array counts with its dtype, as a Python scalar does
    with pytest.raises(TypeError, match="got float16, float32"):
        lax.add(arr(np.float16), jnp.asarray(2.0))
    with pytest.raises(TypeError, match="got int32, int8"):
        lax.add(jnp.asarray(1), arr(np.int8))
    # NumPy values are canonicalized (float64 is float32 with x64 off), then compared
    x = arr(np.float32)
    v = rng.uniform(size=3)
    np.testing.assert_allclose(np.asarray(lax.add(x, v)), np.asarray(x) + v.astype(np.float32), rtol=1e-6)
    assert lax.add(x, np.float64(2)).dtype == np.float32
    with pytest.raises(TypeError, match="got float16, float32"):
        lax.add(arr(np.float16), np.float64(2))
    x64_mode(True)
    out = lax.add(1, 2)
    assert (out.dtype, out.weak_type) == (np.int64, True)
    with pytest.raises(TypeError, match="got float32, float64"):
        lax.add(arr(np.float32), v)
    with pytest.raises(TypeError, match="got int64, int32"):
        lax.add(np.array([1]), arr(np.int32))


def test_two_arrays_of_different_dtypes_name_both():
    for a, b in ((np.float32, np.float16), (np.int32, np.int8), (np.uint8, np.int8)):
        with pytest.raises(TypeError, match=f"lax.sub requires arguments to have the same dtypes, got "
                                            f"{np.dtype(a).name}, {np.dtype(b).name}"):
            lax.sub(arr(a), arr(b))
    with pytest.raises(TypeError, match=r"lax.lt requires arguments to have the same dtypes, got float32, int32\.$"):
        lax.lt(arr(np.float32), arr(np.int32))


def test_pow_takes_an_integer_exponent_of_any_dtype(x64_mode):
    x64_mode(False)
    x = arr(np.float16)
    np.testing.assert_allclose(np.asarray(lax.pow(x, 2)).astype(np.float64), np.asarray(x).astype(np.float64) ** 2,
                               rtol=2e-3)
    assert lax.pow(x, arr(np.uint8)).dtype == np.float16
    out = lax.pow(2.0, 3)  # both weak: weak, as JAX
    assert (out.dtype, out.weak_type, float(out)) == (np.float32, True, 8.0)
    assert not lax.pow(2.0, arr(np.int8)).weak_type
    c = arr(np.complex64)
    assert lax.pow(c, 0.5 + 0.25j).dtype == np.complex64
    msg = "two inexact dtypes must match, but got {} and {} respectively"
    with pytest.raises(TypeError, match=msg.format("float16", "float32")):
        lax.pow(x, 2.0)
    with pytest.raises(TypeError, match=msg.format("complex64", "float32")):
        lax.pow(c, arr(np.float32))
    with pytest.raises(TypeError, match=msg.format("float32", "complex64")):
        lax.pow(arr(np.float32), 1j)
    x64_mode(True)
    with pytest.raises(TypeError, match=msg.format("complex64", "complex128")):
        lax.pow(jnp.asarray(np.complex64(-5.1 + 1.2j)), -0.5 + 0.25j)  # the fuzzer's D3 repro


def test_clamp_select_and_complex(x64_mode):
    x64_mode(False)
    b = jnp.asarray(np.array([6.9, -3.0], np.float32), dtype=jnp.bfloat16)
    with pytest.raises(TypeError, match=r"lax.clamp requires arguments to have the same dtypes, got float32, "
                                        r"bfloat16, float32\.$"):
        lax.clamp(-1.5, b, -0.0)
    x = arr(np.float32)
    np.testing.assert_array_equal(np.asarray(lax.clamp(0.75, x, 1.25)), np.clip(np.asarray(x), 0.75, 1.25))
    assert lax.clamp(0.0, 1.0, 2.0).weak_type
    with pytest.raises(TypeError, match="got int32, int8, int32"):
        lax.clamp(0, arr(np.int8), 2)
    with pytest.raises(TypeError, match=r"min.shape == operand.shape or min.shape == \(\)"):
        lax.clamp(jnp.zeros(2), jnp.ones(3), 2.0)
    with pytest.raises(TypeError, match="lax.select requires arguments to have the same dtypes, got float16, "
                                        "float32. \\(Tip: jnp.where"):
        lax.select_n(jnp.asarray(np.array([True, False, True])), arr(np.float16), x)
    with pytest.raises(TypeError, match="got float32, float32, float16"):
        lax.select_n(jnp.int32(2), x, x, arr(np.float16))
    # which may be any integer dtype (JAX's rule), not float
    y = arr(np.float32)
    w = rng.integers(0, 2, 3).astype(np.uint8)
    np.testing.assert_array_equal(np.asarray(lax.select_n(jnp.asarray(w), x, y)),
                                  np.where(w != 0, np.asarray(y), np.asarray(x)))
    w3 = rng.integers(0, 3, 3).astype(np.int8)
    np.testing.assert_array_equal(np.asarray(lax.select_n(jnp.asarray(w3), x, y, x + y)),
                                  np.choose(w3, [np.asarray(x), np.asarray(y), np.asarray(x + y)]))
    with pytest.raises(TypeError, match="select `which` must be boolean or integer type, got float32"):
        lax.select_n(jnp.float32(1), x, y)
    assert lax.complex(x, 2.0).dtype == np.complex64
    x64_mode(True)
    with pytest.raises(TypeError, match="lax.complex requires arguments to have the same dtypes, got float32, float64"):
        lax.complex(arr(np.float32), 2.0)
    with pytest.raises(TypeError, match="got float32, float32, float64"):
        lax.clamp(arr(np.float32), arr(np.float32), 2.0)


def test_dynamic_slice_start_indices_share_one_integer_dtype(x64_mode):
    x64_mode(False)
    host = rng.standard_normal((4, 5)).astype(np.float32)
    x = jnp.asarray(host)
    i8, i32 = jnp.asarray(np.int8(1)), jnp.asarray(np.int32(1))
    for idx in ((i8, i8), (1, 2), (i32, 2), (np.int32(1), i32), (np.int64(1), i32)):
        np.testing.assert_array_equal(np.asarray(lax.dynamic_slice(x, idx, (2, 3))),
                                      host[int(idx[0]):int(idx[0]) + 2, int(idx[1]):int(idx[1]) + 3])
    for idx, names in (((i8, 1), "int8, int32"), ((jnp.asarray(np.uint32(1)), i32), "uint32, int32"),
                       ((np.int16(1), i32), "int16, int32"), ((1.0, 1), "float32, int32"),
                       ((True, 1), "bool, int32")):
        with pytest.raises(TypeError, match=f"index arguments to dynamic_slice must be integers of the same type, "
                                            f"got: {names}$"):
            lax.dynamic_slice(x, idx, (2, 3))
    with pytest.raises(TypeError, match="got: int8, int32"):
        kiln.jit(lambda v, i: lax.dynamic_slice(v, (i, 1), (2, 3)))(x, i8)
    u = jnp.asarray(rng.standard_normal((2, 3)).astype(np.float32))
    with pytest.raises(TypeError, match="index arguments to dynamic_update_slice must be integers of the same "
                                        "type, got int8, int32$"):
        lax.dynamic_update_slice(x, u, (i8, 1))
    with pytest.raises(TypeError, match="lax.dynamic_update_slice requires arguments to have the same dtypes, got "
                                        "float32, float16"):
        lax.dynamic_update_slice(x, arr(np.float16, (2, 3)), (1, 1))
    with pytest.raises(TypeError, match="update must have the same rank as operand"):
        lax.dynamic_update_slice(x, 1.0, (1, 1))
    want = host.copy()
    want[2:4, 1:4] = np.asarray(u)
    np.testing.assert_array_equal(np.asarray(lax.dynamic_update_slice(x, u, (i8 + i8, i8))), want)
    # the in_dim forms make their other start indices in the index's dtype, as JAX's
    np.testing.assert_array_equal(np.asarray(lax.dynamic_slice_in_dim(x, i8 + i8, 2, 0)), host[2:4])
    np.testing.assert_array_equal(np.asarray(lax.dynamic_update_slice_in_dim(x, u, i8, 0)[1:3, :3]), np.asarray(u))
    np.testing.assert_array_equal(np.asarray(lax.dynamic_index_in_dim(x, np.int16(-1), 1, False)), host[:, -1])
    x64_mode(True)
    x = jnp.asarray(np.array([[0.3], [-0.1]], np.float16))
    with pytest.raises(TypeError, match="got: int32, int64"):  # the fuzzer's D4 repro
        lax.dynamic_slice(x, (jnp.asarray(np.int32(0)), 1), (2, 0))
    assert lax.dynamic_slice(x, (0, 1), (2, 0)).shape == (2, 0)
    # the vmap of a batched index with Python-int companions
    idx = np.array([0, 1], np.int64)
    np.testing.assert_array_equal(np.asarray(kiln.vmap(lambda i: lax.dynamic_slice(x, (i, 0), (1, 1)))(idx)),
                                  np.asarray(x)[:, None, :1])


def test_pad_concatenate_scatter_and_special_functions(x64_mode):
    x64_mode(False)
    x = arr(np.float32, (2, 3))
    assert lax.pad(x, 0.0, [(0, 0, 0), (1, 0, 0)]).shape == (2, 4)
    with pytest.raises(TypeError, match="pad operand and padding_value must be same dtype: got float32 and int32"):
        lax.pad(x, 0, [(0, 0, 0), (1, 0, 0)])
    with pytest.raises(TypeError, match="lax.concatenate requires arguments to have the same dtypes, got float32, "
                                        "float16. \\(Tip: jnp.concatenate"):
        lax.concatenate([x, arr(np.float16, (2, 3))], 0)
    dn = lax.ScatterDimensionNumbers((), (0,), (0,))
    with pytest.raises(TypeError, match="lax.scatter requires arguments to have the same dtypes, got float16, float32"):
        lax.scatter_add(arr(np.float16, (4,)), jnp.asarray(np.array([[1]])), arr(np.float32, (1,)), dn)
    with pytest.raises(TypeError, match="lax.igamma requires arguments to have the same dtypes, got float32, float16"):
        lax.igamma(arr(np.float32), arr(np.float16))
    with pytest.raises(TypeError, match="lax.regularized_incomplete_beta requires arguments to have the same dtypes, "
                                        "got float16, float32, float32"):
        lax.betainc(arr(np.float16), arr(np.float32), 0.5)
    with pytest.raises(TypeError, match="lax.mulhi requires arguments to have the same dtypes, got uint32, int32"):
        lax.mulhi(arr(np.uint32), 7)
    x64_mode(True)
    with pytest.raises(TypeError, match="got float32 and float64"):
        lax.pad(x, 0.0, [(0, 0, 0), (1, 0, 0)])
    with pytest.raises(TypeError, match="lax.igamma requires arguments to have the same dtypes, got float32, float64"):
        lax.igamma(arr(np.float32), 1.0)


@pytest.mark.parametrize("x64", [False, True])
def test_kiln_numpy_still_promotes(x64, x64_mode):
    """The same mixtures through kiln.numpy promote as JAX's jnp (regression guard: kiln.numpy calls
    these lax functions with operands it has promoted itself)."""
    x64_mode(x64)
    u16, f16, b = arr(np.uint16), arr(np.float16), jnp.asarray(np.array([6.9, -3.0], np.float32), dtype=jnp.bfloat16)
    assert jnp.add(u16, 1).dtype == np.uint16
    np.testing.assert_array_equal(np.asarray(jnp.add(u16, 1)), np.asarray(u16) + 1)
    assert jnp.subtract(f16, 3.25).dtype == np.float16
    assert jnp.clip(b, -1.5, -0.0).dtype == BF16
    assert jnp.power(arr(np.complex64), -0.5 + 0.25j).dtype == np.complex64
    assert jnp.nextafter(arr(np.float32), 1.0).dtype == np.float32
    assert (u16 == 2).dtype == np.bool_
    x = arr(np.float32, (4, 5))
    assert x[jnp.asarray(np.int8(1)):].shape == (3, 5)
    assert jnp.take(x, jnp.asarray(np.int8(2)), axis=1).shape == (4,)
    assert kiln.jit(lambda v, i: v[i, 1:3])(x, jnp.asarray(np.int8(1))).shape == (2,)


def test_einsum_contracts_operands_of_two_dtypes_as_jax(x64_mode):
    """JAX's einsum does not promote its operands: each contraction is a dot_general with the result
    type (preferred_element_type, else the operands' promotion), which converts operands of other
    dtypes to it before multiplying. Bug (issue 32): kiln promoted first, so float32 . float16 as
    int32 computed in float32 and truncated only the sum."""
    x64_mode(False)
    a = rng.uniform(-4, 4, (2, 3)).astype(np.float32)
    b = rng.uniform(-4, 4, (3, 2)).astype(np.float16)
    ka, kb = jnp.asarray(a), jnp.asarray(b)
    out = jnp.einsum("ij,jk->ik", ka, kb, preferred_element_type=np.int32)
    assert out.dtype == np.int32 and not out.weak_type
    np.testing.assert_array_equal(np.asarray(out), np.trunc(a).astype(np.int32) @ np.trunc(b).astype(np.int32))
    v = rng.uniform(-4, 4, 3).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(jnp.einsum("ij,j->i", kb.T, jnp.asarray(v), preferred_element_type=np.int8)),
                                  (np.trunc(b.T).astype(np.int8) @ np.trunc(v).astype(np.int8)).astype(np.int8))
    # the same dtype twice computes in it and converts the sum (dot_general's own rule)
    a2 = rng.uniform(-4, 4, (3, 2)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(jnp.einsum("ij,jk->ik", ka, jnp.asarray(a2), preferred_element_type=np.int32)),
                                  np.trunc((a.astype(np.float64) @ a2)).astype(np.int32))
    # no preferred type: the promotion, the narrow operand converted exactly
    i8 = rng.integers(-3, 4, (3, 2)).astype(np.int8)
    out = jnp.einsum("ij,jk->ik", ka, jnp.asarray(i8))
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.asarray(out), a.astype(np.float64) @ i8, rtol=1e-5, atol=1e-5)
    # int8 x uint8 as int8: JAX computes (the uint8 operand wraps into int8); kiln raised TypeError
    s8, u8 = rng.integers(-3, 4, (2, 3)).astype(np.int8), rng.integers(0, 4, (3, 2)).astype(np.uint8)
    np.testing.assert_array_equal(np.asarray(jnp.einsum("ij,jk->ik", jnp.asarray(s8), jnp.asarray(u8),
                                                        preferred_element_type=np.int8)),
                                  (s8.astype(np.int64) @ u8.astype(np.int64)).astype(np.int8))
    # a later contraction of the int8 result with an int32 operand narrows: TypeError, as JAX
    i32 = rng.integers(-3, 4, (2, 2)).astype(np.int32)
    with pytest.raises(TypeError, match="must not be narrower"):
        jnp.einsum("ij,jk,kl->il", jnp.asarray(rng.integers(-3, 4, (2, 3)).astype(np.int32)),
                   jnp.asarray(a2), jnp.asarray(i32), preferred_element_type=np.int8)
    # a sum over one operand converts it first when the result type is wider: bools count
    m = rng.integers(0, 2, (3, 4)).astype(bool)
    for pet in (np.float32, np.int8, np.float16):
        out = jnp.einsum("ij->i", jnp.asarray(m), preferred_element_type=pet)
        assert out.dtype == np.dtype(pet)
        np.testing.assert_array_equal(np.asarray(out), m.sum(1).astype(pet))
    out = jnp.einsum("ij->i", jnp.asarray(m))  # bool result: any, as JAX's
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(np.asarray(out), m.any(1))


def test_dot_general_preferred_bool_is_narrower_than_an_integer_operand():
    x, y = jnp.asarray(rng.integers(0, 3, (2, 2)).astype(np.int8)), jnp.asarray(rng.integers(0, 3, (2, 2)).astype(np.uint8))
    dn = (((1,), (0,)), ((), ()))
    with pytest.raises(TypeError, match="preferred_element_type of bool for result type of int8"):
        lax.dot_general(x, y, dn, preferred_element_type=np.bool_)
    with pytest.raises(TypeError, match="narrower"):
        lax.dot_general(x, y.astype(bool), dn, preferred_element_type=np.bool_)
    f = jnp.asarray(rng.uniform(-2, 2, (2, 2)).astype(np.float32))  # a float operand: allowed, as JAX
    assert lax.dot_general(f, y, dn, preferred_element_type=np.bool_).dtype == np.bool_


def test_complex_to_bool():
    """JAX: Array.astype(bool) and jnp.astype test both parts for nonzero; lax.convert_element_type,
    jnp.asarray(..., bool), jnp.array and jnp.bool_ of a complex array take the real part (0+1j is
    False), while a NumPy or Python complex host value converts by NumPy's rule (1j is True)."""
    re = rng.uniform(-2, 2, 8) * (rng.random(8) < 0.5)
    im = rng.uniform(-2, 2, 8) * (rng.random(8) < 0.5)
    re[:2], im[:2] = 0.0, [0.0, 1.5]
    host = (re + 1j * im).astype(np.complex64)
    c = jnp.asarray(host)
    either, real_part = host != 0, host.real != 0
    for got in (c.astype(bool), c.astype(jnp.bool_), jnp.astype(c, bool), kiln.jit(lambda v: v.astype(bool))(c),
                kiln.vmap(lambda v: v.astype(bool))(c), jnp.logical_not(jnp.logical_not(c))):
        np.testing.assert_array_equal(np.asarray(got), either)
    for got in (lax.convert_element_type(c, bool), lax.convert_element_type(c, np.bool_), jnp.bool_(c),
                jnp.asarray(c, dtype=bool), jnp.array(c, dtype=bool), kiln.jit(lambda v: lax.convert_element_type(v, bool))(c),
                kiln.vmap(lambda v: lax.convert_element_type(v, bool))(c), jnp.zeros(8, bool).at[:].set(c)):
        np.testing.assert_array_equal(np.asarray(got), real_part)
    assert not bool(jnp.bool_(c[1])) and bool(c[1].astype(bool))
    assert bool(lax.convert_element_type(np.complex64(1j), bool)) and bool(lax.convert_element_type(1j, bool))
    # the derivative through the real part: where(convert(x * 1j, bool), x, 0) is 0 everywhere
    g = kiln.grad(lambda x: jnp.sum(jnp.where(lax.convert_element_type(x * 1j, bool), x, 0.0)))(jnp.ones(3))
    np.testing.assert_array_equal(np.asarray(g), np.zeros(3, np.float32))


def test_conv_operands_share_a_dtype_and_argmax_takes_any_integer_index_dtype():
    x = jnp.asarray(rng.standard_normal((1, 1, 4, 4)).astype(np.float32))
    k = jnp.asarray(rng.standard_normal((1, 1, 2, 2)).astype(np.float16))
    with pytest.raises(TypeError, match="lax.conv_general_dilated requires arguments to have the same dtypes, got "
                                        "float32, float16"):
        lax.conv(x, k, (1, 1), "VALID")
    with pytest.raises(TypeError, match="got int8, int16"):  # a preferred type does not lift the rule (JAX)
        lax.conv_general_dilated(x.astype(jnp.int8), k.astype(jnp.int16), (1, 1), "VALID",
                                 preferred_element_type=np.int32)
    host = rng.standard_normal((3, 5)).astype(np.float32)
    for dt in (np.int8, np.uint8, np.int16, np.uint32):
        out = lax.argmax(jnp.asarray(host), 1, dt)
        assert out.dtype == np.dtype(dt)
        np.testing.assert_array_equal(np.asarray(out), host.argmax(1))
        np.testing.assert_array_equal(np.asarray(lax.argmin(jnp.asarray(host), 0, dt)), host.argmin(0))
    with pytest.raises(TypeError, match="index_dtype must be an integer type, but got float32"):
        lax.argmax(jnp.asarray(host), 0, np.float32)
