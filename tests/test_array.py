"""kiln.Array as a Python object: facts (shape, dtype, ...), operators (plain, reflected,
comparisons, unary), basic indexing against NumPy, host conversions, repr, immutability
and `.at`, hashing, pickling, devices, 0-size / 0-d arrays, 16-bit floats and x64 mode."""

import copy
import math
import operator
import pickle

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp


# (the x64 fixture is in conftest.py)


def rng():
    return np.random.default_rng()


def randf(shape, dtype=np.float32):
    return rng().normal(size=shape).astype(dtype)


def randi(shape, lo=-20, hi=20, dtype=np.int32):
    return rng().integers(lo, hi, size=shape).astype(dtype)


def check(out, want, rtol=1e-6, atol=1e-6):
    assert isinstance(out, kiln.Array), type(out)
    want = np.asarray(want)
    assert out.shape == want.shape, (out.shape, want.shape)
    assert out.dtype == want.dtype, (out.dtype, want.dtype)
    np.testing.assert_allclose(np.asarray(out).astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------- facts

def test_facts():
    a = randf((2, 3, 4))
    x = jnp.asarray(a)
    assert isinstance(x, kiln.Array)
    assert x.shape == (2, 3, 4) and isinstance(x.shape, tuple)
    assert x.dtype == np.float32 and isinstance(x.dtype, np.dtype)
    assert x.ndim == 3 and x.size == 24 and len(x) == 2
    assert x.itemsize == 4 and x.nbytes == 96
    assert x.weak_type is False
    assert jnp.asarray(2.0).weak_type is True
    assert jnp.asarray(2).weak_type is True
    assert jnp.asarray(True).weak_type is False


def test_transpose_and_reshape_variants():
    a = randf((2, 3, 4))
    x = jnp.asarray(a)
    check(x.T, a.T)
    check(x.transpose(), a.transpose())
    check(x.transpose(2, 0, 1), a.transpose(2, 0, 1))
    check(x.transpose((1, 0, 2)), a.transpose((1, 0, 2)))
    check(x.mT, np.swapaxes(a, -1, -2))
    for shape in [(6, 4), (24,), (-1,), (4, -1), (2, 3, 2, 2), (1, 24, 1)]:
        check(x.reshape(shape), a.reshape(shape))
        check(x.reshape(*shape), a.reshape(*shape))
    check(x.reshape(6, 4, order="F"), a.reshape(6, 4, order="F"))
    check(x.ravel(), a.ravel())
    check(x.flatten(), a.flatten())
    with pytest.raises((ValueError, TypeError)):
        x.reshape(5, 5)


@pytest.mark.parametrize("src,dst", [
    (np.float32, np.int32), (np.float32, np.float16), (np.float32, "bfloat16"), (np.int32, np.float32),
    (np.int32, np.uint8), (np.float32, np.bool_), (np.bool_, np.float32), (np.int32, np.int8)])
def test_astype(src, dst):
    a = (randf((3, 5)) * 50).astype(src)
    if dst in (np.uint8, np.int8):
        a = np.abs(a) % 100
    out = jnp.asarray(a).astype(dst)
    want = a.astype(jnp.dtype(dst)) if hasattr(jnp, "dtype") else a.astype(dst)
    assert out.dtype == np.dtype(want.dtype)
    np.testing.assert_array_equal(np.asarray(out).astype(np.float64), want.astype(np.float64))


# ---------------------------------------------------------------------------- operators

BINOPS_FLOAT = [operator.add, operator.sub, operator.mul, operator.truediv, operator.pow,
                operator.floordiv, operator.mod]
BINOPS_INT = [operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod,
              operator.and_, operator.or_, operator.xor, operator.lshift, operator.rshift]
CMPOPS = [operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge]


@pytest.mark.parametrize("op", BINOPS_FLOAT, ids=lambda o: o.__name__)
def test_float_binary_operators(op):
    a = randf((3, 4))
    b = randf((3, 4))
    if op is operator.pow:
        a = np.abs(a) + 0.5
    if op in (operator.truediv, operator.floordiv, operator.mod):
        b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
    x, y = jnp.asarray(a), jnp.asarray(b)
    want = op(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    check(op(x, y), want, rtol=2e-5, atol=2e-5)
    # Array op NumPy array and NumPy array op Array (reflected) both give kiln arrays.
    check(op(x, b), want, rtol=2e-5, atol=2e-5)
    # Python scalars are weak: the result keeps float32.
    s = 1.5
    check(op(x, s), op(a.astype(np.float64), s).astype(np.float32), rtol=2e-5, atol=2e-5)
    check(op(s, x), op(s, a.astype(np.float64)).astype(np.float32), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("op", BINOPS_INT, ids=lambda o: o.__name__)
def test_int_binary_operators(op):
    a = randi((3, 4))
    b = randi((3, 4))
    if op in (operator.floordiv, operator.mod):
        b = np.where(b == 0, 3, b).astype(np.int32)
    if op in (operator.lshift, operator.rshift):
        b = np.abs(b) % 8
    x, y = jnp.asarray(a), jnp.asarray(b)
    check(op(x, y), op(a, b))
    check(op(x, 3), op(a, np.int32(3)))
    if op not in (operator.lshift, operator.rshift):
        check(op(7, x if op not in (operator.floordiv, operator.mod) else y),
              op(np.int32(7), a if op not in (operator.floordiv, operator.mod) else b))


def test_divmod():
    a, b = randf((5,)), randf((5,)) + 3
    q, r = divmod(jnp.asarray(a), jnp.asarray(b))
    check(q, np.floor_divide(a, b), rtol=1e-5)
    check(r, np.mod(a, b), rtol=1e-5, atol=1e-5)
    q, r = divmod(10.0, jnp.asarray(b))
    check(q, np.floor_divide(np.float32(10), b), rtol=1e-5)


def test_bool_operators():
    a = rng().random((4, 5)) < 0.5
    b = rng().random((4, 5)) < 0.5
    x, y = jnp.asarray(a), jnp.asarray(b)
    check(x & y, a & b)
    check(x | y, a | b)
    check(x ^ y, a ^ b)
    check(~x, ~a)
    check(x & True, a & True)


@pytest.mark.parametrize("op", CMPOPS, ids=lambda o: o.__name__)
def test_comparisons(op):
    a = randi((4, 5), -3, 3).astype(np.float32)
    b = randi((4, 5), -3, 3).astype(np.float32)
    x, y = jnp.asarray(a), jnp.asarray(b)
    check(op(x, y), op(a, b))
    check(op(x, 1.0), op(a, 1.0))
    check(op(1.0, x), op(1.0, a))
    check(op(x, b), op(a, b))


def test_matmul():
    a, b, v = randf((3, 4)), randf((4, 5)), randf((4,))
    x, y = jnp.asarray(a), jnp.asarray(b)
    f32 = lambda t: np.asarray(t, np.float32)  # noqa: E731
    check(x @ y, f32(a.astype(np.float64) @ b), rtol=1e-5, atol=1e-5)
    check(x @ jnp.asarray(v), f32(a.astype(np.float64) @ v), rtol=1e-5, atol=1e-5)
    check(jnp.asarray(v) @ jnp.asarray(v), f32(v.astype(np.float64) @ v), rtol=1e-5)
    check(a @ y, f32(a.astype(np.float64) @ b), rtol=1e-5, atol=1e-5)  # reflected (__rmatmul__)
    c = randf((2, 3, 4))
    check(jnp.asarray(c) @ y, f32(c.astype(np.float64) @ b), rtol=1e-5, atol=1e-5)
    with pytest.raises((TypeError, ValueError)):
        x @ x


def test_unary_operators():
    a = randf((3, 4))
    x = jnp.asarray(a)
    check(-x, -a)
    check(+x, +a)
    check(abs(x), np.abs(a))
    i = randi((6,))
    check(~jnp.asarray(i), ~i)
    check(-jnp.asarray(i), -i)
    check(abs(jnp.asarray(i)), np.abs(i))
    r = round(jnp.asarray(np.array([0.4, 1.6, -2.2, 3.5], np.float32)))
    np.testing.assert_array_equal(np.asarray(r), [0.0, 2.0, -2.0, 4.0])


def test_operators_with_unknown_types():
    x = jnp.asarray([1.0, 2.0])
    with pytest.raises(TypeError):
        x + "a"
    with pytest.raises(TypeError):
        x + object()
    assert (x == None) is False  # noqa: E711  (Python's identity fallback, as in JAX)
    assert (x != None) is True  # noqa: E711


def test_comparison_defers_to_unknown_objects():
    x = jnp.asarray(3.0)
    assert (x == object()) is False
    assert (x != object()) is True
    assert x == pytest.approx(3.0)


def test_broadcasting_operators():
    a, b = randf((3, 1, 4)), randf((5, 1))
    check(jnp.asarray(a) * jnp.asarray(b), a * b)
    check(jnp.asarray(a) - jnp.asarray(b), a - b)


# ---------------------------------------------------------------------------- indexing

IDX = [0, -1, 2, (1, 2), (1, -1, 3), slice(None), slice(1, 3), slice(None, None, 2), slice(None, None, -1),
       slice(-2, None), slice(None, -1, -2), slice(10, 0, -3), slice(-100, 100), (slice(None), 1),
       (Ellipsis, 0), (Ellipsis, slice(None, None, -1)), (0, Ellipsis), None, (None, 1), (Ellipsis, None),
       (slice(None), None, slice(1, 3)), (1, None, Ellipsis, None), (), Ellipsis,
       (slice(3, 1), slice(None)), (-3, -4, -5)]


@pytest.mark.parametrize("idx", IDX, ids=repr)
def test_basic_indexing_matches_numpy(idx):
    a = randf((3, 4, 5))
    out = jnp.asarray(a)[idx]
    want = a[idx]
    assert out.shape == want.shape
    np.testing.assert_array_equal(np.asarray(out), want)


def test_indexing_errors():
    x = jnp.asarray(randf((3, 4)))
    with pytest.raises(IndexError):
        x[1, 2, 3]
    with pytest.raises(IndexError):
        x[..., ...]


def test_integer_index_from_array():
    x = jnp.asarray(np.arange(10, dtype=np.float32))
    i = jnp.asarray(3)
    assert float(x[i]) == 3.0
    assert [10, 20, 30][jnp.asarray(1)] == 20  # __index__
    with pytest.raises(TypeError):
        [1, 2][jnp.asarray(1.0)]


# ---------------------------------------------------------------------------- host conversions

def test_array_protocol():
    a = randf((2, 3))
    x = jnp.asarray(a)
    h = np.asarray(x)
    assert isinstance(h, np.ndarray) and h.dtype == np.float32
    np.testing.assert_array_equal(h, a)
    np.testing.assert_array_equal(np.asarray(x, dtype=np.float64), a.astype(np.float64))
    assert np.asarray(x, dtype=np.float64).dtype == np.float64
    np.testing.assert_array_equal(np.array(x), a)
    assert float(np.sum(x)) == pytest.approx(float(a.sum()), rel=1e-5)
    np.testing.assert_array_equal(x.tolist(), a.tolist())


def test_buffer_protocol():
    """Regression: memoryview(Array) raised TypeError on Python 3.11 (no PEP 688 there); the
    C base type kiln._kiln.ArrayBase now exports the buffer."""
    a = randf((2, 3))
    m = memoryview(jnp.asarray(a))
    assert m.shape == (2, 3) and m.format == "f"
    np.testing.assert_array_equal(np.frombuffer(m, np.float32).reshape(2, 3), a)


def test_scalar_conversions():
    assert float(jnp.asarray(2.5)) == 2.5
    assert float(jnp.asarray([2.5])) == 2.5
    assert int(jnp.asarray(7)) == 7 and isinstance(int(jnp.asarray(7)), int)
    assert int(jnp.asarray(-7.9)) == -7
    assert bool(jnp.asarray(1)) is True and bool(jnp.asarray(0.0)) is False
    assert bool(jnp.asarray([[True]])) is True
    assert complex(jnp.asarray(1.5)) == 1.5
    assert jnp.asarray(3.25).item() == 3.25
    assert f"{jnp.asarray(3.14159):.2f}" == "3.14"
    with pytest.raises(TypeError):
        float(jnp.asarray([1.0, 2.0]))
    with pytest.raises(TypeError):
        int(jnp.asarray([1, 2]))
    with pytest.raises(ValueError):
        bool(jnp.asarray([1, 2]))
    with pytest.raises(TypeError):
        operator.index(jnp.asarray(1.0))
    with pytest.raises(TypeError):
        operator.index(jnp.asarray([1]))


def test_len_and_iteration():
    a = randf((3, 2))
    x = jnp.asarray(a)
    assert len(x) == 3
    rows = list(x)
    assert len(rows) == 3 and all(isinstance(r, kiln.Array) and r.shape == (2,) for r in rows)
    for r, w in zip(rows, a):
        np.testing.assert_array_equal(np.asarray(r), w)
    rev = list(reversed(x))
    np.testing.assert_array_equal(np.asarray(rev[0]), a[-1])
    assert [int(v) for v in jnp.asarray([4, 5, 6])] == [4, 5, 6]
    z = jnp.asarray(1.0)
    with pytest.raises(TypeError):
        len(z)
    with pytest.raises(TypeError):
        iter(z)
    assert list(jnp.zeros((0, 3))) == []


# ---------------------------------------------------------------------------- repr

@pytest.mark.parametrize("value,dtype,text", [
    ([1.0, 2.0], None, "Array([1., 2.], dtype=float32)"),
    ([1, 2, 3], None, "Array([1, 2, 3], dtype=int32)"),
    ([True, False], None, "Array([ True, False], dtype=bool)"),
    ([[1.5, 2.0], [3.0, 4.25]], None, "Array([[1.5 , 2.  ],\n       [3.  , 4.25]], dtype=float32)"),
    (2.0, None, "Array(2., dtype=float32, weak_type=True)"),
    (3, None, "Array(3, dtype=int32, weak_type=True)"),
    (np.float32(2.0), None, "Array(2., dtype=float32)"),
    ([1, 2], "uint8", "Array([1, 2], dtype=uint8)"),
    ([0.5, 2.0], "float16", "Array([0.5, 2. ], dtype=float16)"),
])
def test_repr_like_jax(value, dtype, text):
    assert repr(jnp.asarray(value, dtype=dtype)) == text


def test_repr_zero_size():
    assert repr(jnp.zeros((0, 3))) == "Array([], shape=(0, 3), dtype=float32)"


def test_repr_bfloat16():
    assert repr(jnp.asarray([1.5, 2.0], dtype=jnp.bfloat16)) == "Array([1.5, 2], dtype=bfloat16)"


def test_str_is_numpy_str():
    a = np.array([1.0, 2.5], np.float32)
    assert str(jnp.asarray(a)) == str(a)


# ---------------------------------------------------------------------------- immutability, .at

def test_item_assignment_raises():
    x = jnp.asarray([1.0, 2.0])
    with pytest.raises(TypeError, match=r"\.at"):
        x[0] = 3.0
    with pytest.raises(TypeError, match=r"\.at"):
        x[:] = 0
    np.testing.assert_array_equal(np.asarray(x), [1.0, 2.0])
    with pytest.raises(ValueError):  # the host view is read-only
        np.asarray(x)[0] = 5.0
    np.testing.assert_array_equal(np.asarray(x), [1.0, 2.0])


AT_IDX = [1, -1, (0, 2), (slice(None), 1), slice(1, None, 2), (Ellipsis, -1), np.array([0, 2])]


@pytest.mark.parametrize("idx", AT_IDX, ids=repr)
def test_at_updates(idx):
    a = randf((3, 4))
    x = jnp.asarray(a)
    shape = a[idx].shape
    v = randf(shape)
    for method, npfun in [("set", lambda t, u: u), ("add", np.add), ("multiply", np.multiply),
                          ("min", np.minimum), ("max", np.maximum)]:
        want = a.copy()
        want[idx] = npfun(want[idx], v)
        out = getattr(x.at[idx], method)(v)
        check(out, want)
        # scalar updates broadcast
        want = a.copy()
        want[idx] = npfun(want[idx], np.float32(0.25))
        check(getattr(x.at[idx], method)(0.25), want)
    np.testing.assert_array_equal(np.asarray(x.at[idx].get()), a[idx])
    np.testing.assert_array_equal(np.asarray(x), a)  # x itself unchanged


def test_at_duplicate_indices_accumulate():
    x = jnp.zeros(4)
    out = x.at[np.array([1, 1, 3])].add(1.0)
    np.testing.assert_array_equal(np.asarray(out), [0, 2, 0, 1])


def test_hash_raises():
    x = jnp.asarray([1.0])
    with pytest.raises(TypeError):
        hash(x)
    with pytest.raises(TypeError):
        {x: 1}
    with pytest.raises(TypeError):
        hash(jnp.asarray(1.0))


# ---------------------------------------------------------------------------- pickling, copying

@pytest.mark.parametrize("value,dtype", [(randf((3, 4)), None), (randi((5,)), None), (np.array(2.5), None),
                                          (np.zeros((0, 2), np.float32), None),
                                          ([1.5, -2.0], "bfloat16"),
                                          ([True, False], None)])
def test_pickle_round_trip(value, dtype):
    x = jnp.asarray(value, dtype=dtype)
    y = pickle.loads(pickle.dumps(x))
    assert isinstance(y, kiln.Array)
    assert y.shape == x.shape and y.dtype == x.dtype and y.weak_type == x.weak_type
    np.testing.assert_array_equal(np.asarray(y).astype(np.float64), np.asarray(x).astype(np.float64))
    w = pickle.loads(pickle.dumps(jnp.asarray(2.0)))
    assert w.weak_type


def test_copy():
    x = jnp.asarray(randf((3,)))
    for y in (copy.copy(x), copy.deepcopy(x), x.copy()):
        np.testing.assert_array_equal(np.asarray(y), np.asarray(x))


# ---------------------------------------------------------------------------- devices

def test_devices_and_transfers():
    devs = kiln.devices()
    assert len(devs) >= 1 and kiln.device_count() == len(devs)
    a = randf((2, 3))
    x = kiln.device_put(a)
    assert isinstance(x, kiln.Array)
    np.testing.assert_array_equal(np.asarray(x), a)
    assert x.devices() == {devs[0]}
    tree = kiln.device_put({"a": a, "b": [np.int32(3), a[0]]})
    assert isinstance(tree["a"], kiln.Array) and isinstance(tree["b"][0], kiln.Array)
    back = kiln.device_get({"a": x, "b": (x, 1)})
    assert isinstance(back["a"], np.ndarray)
    np.testing.assert_array_equal(back["b"][0], a)
    assert back["b"][1] == 1
    y = kiln.device_put(x, devs[0])
    np.testing.assert_array_equal(np.asarray(y), a)


def test_block_until_ready():
    x = jnp.asarray(randf((4,))) * 2
    assert x.block_until_ready() is x
    assert x.is_ready()
    t = {"a": x, "b": [x + 1]}
    assert kiln.block_until_ready(t) is t


# ---------------------------------------------------------------------------- 0-size, 0-d

def test_zero_size_arrays():
    x = jnp.zeros((0, 3))
    assert x.shape == (0, 3) and x.size == 0 and len(x) == 0
    assert np.asarray(x).shape == (0, 3)
    assert x.T.shape == (3, 0)
    assert (x + 1).shape == (0, 3)
    check(x.sum(0), np.zeros(3, np.float32))
    check(x.sum(), np.float32(0))
    assert x.reshape(3, 0, 5).shape == (3, 0, 5)
    assert jnp.asarray(np.zeros((2, 0), np.int32))[1:].shape == (1, 0)
    assert jnp.asarray([]).shape == (0,)


def test_zero_d_arrays():
    x = jnp.asarray(np.float32(3.5))
    assert x.shape == () and x.ndim == 0 and x.size == 1
    assert float(x) == 3.5
    assert x[()].shape == () and float(x[()]) == 3.5
    assert x[None].shape == (1,)
    assert x[...].shape == ()
    check(x * 2, np.float32(7.0))
    check(x.reshape(1, 1), np.full((1, 1), 3.5, np.float32))
    assert x.T.shape == ()
    with pytest.raises(IndexError):
        x[0]


# ---------------------------------------------------------------------------- 16-bit floats

BF16_FROM_NUMPY_BUG = ("jnp.asarray(np.array(..., dtype=bfloat16)) raises TypeError 'kiln arrays cannot hold "
                       "strings or bytes (got dtype bfloat16)': core._check_host_array rejects dtype kind 'V', "
                       "which is ml_dtypes' bfloat16 kind")


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
def test_16_bit_floats_round_trip(dt):
    ndt = jnp.dtype(dt) if hasattr(jnp, "dtype") else np.dtype(dt)
    vals = np.array([0.0, 1.0, -2.5, 0.333, 1000.0, 1e-3, np.inf, -np.inf], np.float32)
    h = vals.astype(ndt)
    x = jnp.asarray(h)
    assert x.dtype == ndt
    back = np.asarray(x)
    assert back.dtype == ndt
    np.testing.assert_array_equal(back.view(np.uint16), h.view(np.uint16))  # bit exact
    y = jnp.asarray(vals, dtype=dt)
    np.testing.assert_array_equal(np.asarray(y).view(np.uint16), h.view(np.uint16))
    z = (x * 2).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(z), (h.astype(np.float32) * 2).astype(ndt).astype(np.float32))
    assert math.isnan(float(jnp.asarray(np.array(np.nan, ndt))))
    p = pickle.loads(pickle.dumps(x))
    np.testing.assert_array_equal(np.asarray(p).view(np.uint16), h.view(np.uint16))


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
def test_16_bit_floats_from_python_values(dt):
    vals = [0.0, 1.0, -2.5, 0.333, 1000.0, 1e-3, float("inf")]
    x = jnp.asarray(vals, dtype=dt)
    assert x.dtype == np.dtype(dt)
    h = np.asarray(vals, np.float32).astype(np.dtype(dt))
    np.testing.assert_array_equal(np.asarray(x).view(np.uint16), h.view(np.uint16))
    check((x + x).astype(np.float32), (h.astype(np.float32) * 2).astype(np.dtype(dt)).astype(np.float32))


# ---------------------------------------------------------------------------- x64

def test_x64_defaults(x64):
    assert jnp.asarray(1.0).dtype == np.float64
    assert jnp.asarray([1.0, 2.0]).dtype == np.float64
    assert jnp.asarray([1, 2]).dtype == np.int64
    assert jnp.zeros(3).dtype == np.float64
    third = jnp.asarray(np.float64(1) / 3)
    assert third.dtype == np.float64 and float(third) == 1 / 3
    a = rng().normal(size=(3,))
    check(jnp.asarray(a) * 3.0, a * 3.0, rtol=1e-15, atol=0)
    assert (jnp.asarray(np.float32([1.0])) * 2.0).dtype == np.float32  # weak scalars stay weak
    assert repr(jnp.asarray([0.5])) == "Array([0.5], dtype=float64)"


def test_x64_off_by_default():
    assert not kiln.config.jax_enable_x64
    assert jnp.asarray(1.0).dtype == np.float32
    assert jnp.asarray(np.arange(3, dtype=np.int64)).dtype == np.int32
    assert jnp.asarray(np.float64(1) / 3).dtype == np.float32
