"""kiln.numpy array creation against NumPy: dtypes (JAX's defaults), shapes, values, and the errors for
negative or traced shapes."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp


# (the x64 fixture is in conftest.py)


def _float():
    return np.dtype(np.float64 if kiln.config.jax_enable_x64 else np.float32)


def _int():
    return np.dtype(np.int64 if kiln.config.jax_enable_x64 else np.int32)


def _same(got, want, dtype=None, rtol=0.0):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if dtype is not None:
        assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    if rtol:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=rtol)
    else:
        np.testing.assert_array_equal(got, want.astype(got.dtype))


# ---------------------------------------------------------------------------------------------------------
# array / asarray

def test_array_from_nested_lists_and_numpy():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 4))
    _same(jnp.array(x), x.astype(np.float32), np.float32)
    _same(jnp.array([[1, 2], [3, 4]]), [[1, 2], [3, 4]], _int())
    _same(jnp.array([1, 2.5]), [1, 2.5], _float())
    _same(jnp.array([True, False]), [True, False], bool)
    _same(jnp.asarray(x, dtype=np.int32), x.astype(np.int32), np.int32)
    _same(jnp.array(3.5, ndmin=2), [[3.5]], np.float32)


def test_array_float64_under_x64(x64):
    x = np.random.default_rng(2).normal(size=5)
    _same(jnp.array(x), x, np.float64)
    _same(jnp.asarray([1, 2]), [1, 2], np.int64)


def test_array_stacks_lists_of_arrays():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(2, 3)).astype(np.float32)
    got = jnp.array([jnp.asarray(a), jnp.asarray(b)])
    _same(got, np.stack([a, b]), np.float32)
    got = kiln.jit(lambda u, v: jnp.array([u, v, 1.0]))(np.float32(2), np.float32(3))
    _same(got, [2.0, 3.0, 1.0], np.float32)
    with pytest.raises(ValueError, match="ragged"):
        jnp.array([jnp.asarray(a), jnp.asarray(a[:2])])


@pytest.mark.parametrize("bad", ["abc", None, [1, "a"], object()])
def test_array_rejects_non_numbers(bad):
    with pytest.raises((TypeError, ValueError)):
        jnp.array(bad)


def test_asarray_copy_false_with_conversion_raises():
    with pytest.raises(ValueError, match="copy"):
        jnp.asarray(jnp.asarray(np.ones(3, np.float32)), dtype=np.int32, copy=False)


# ---------------------------------------------------------------------------------------------------------
# zeros / ones / full / empty and *_like

FILLED = [("zeros", lambda s, d: np.zeros(s, d)), ("ones", lambda s, d: np.ones(s, d)),
          ("empty", lambda s, d: np.zeros(s, d))]


@pytest.mark.parametrize("shape", [3, (2, 3), (), (0, 4), [2, 1, 3]], ids=str)
@pytest.mark.parametrize("dtype", [None, np.int32, bool, np.float32, "float16"], ids=str)
@pytest.mark.parametrize("name,ref", FILLED, ids=[f[0] for f in FILLED])
def test_filled(name, ref, shape, dtype):
    want_dtype = _float() if dtype is None else np.dtype(dtype)
    _same(getattr(jnp, name)(shape, dtype=dtype), ref(shape, want_dtype), want_dtype)


def test_full_and_full_like():
    rng = np.random.default_rng(4)
    v = float(rng.normal())
    _same(jnp.full((2, 3), v), np.full((2, 3), v, np.float32), np.float32)
    _same(jnp.full(4, 7), np.full(4, 7), _int())
    _same(jnp.full((2, 3), True), np.full((2, 3), True), bool)
    row = rng.normal(size=3).astype(np.float32)
    _same(jnp.full((2, 3), row), np.broadcast_to(row, (2, 3)), np.float32)
    _same(jnp.full((2,), 3, dtype=np.float32), [3.0, 3.0], np.float32)
    x = rng.integers(0, 5, (3, 2)).astype(np.int32)
    _same(jnp.full_like(x, 2.7), np.full_like(x, 2.7), np.int32)
    _same(jnp.full_like(x, 2.7, dtype=np.float32), np.full((3, 2), 2.7, np.float32), np.float32)


LIKE = [("zeros_like", np.zeros_like), ("ones_like", np.ones_like), ("empty_like", np.zeros_like)]


@pytest.mark.parametrize("name,ref", LIKE, ids=[n for n, _ in LIKE])
def test_like(name, ref):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 5)).astype(np.float32)
    _same(getattr(jnp, name)(x), ref(x), np.float32)
    _same(getattr(jnp, name)(jnp.asarray(x), dtype=np.int32), ref(x, dtype=np.int32), np.int32)
    _same(getattr(jnp, name)(x, shape=(3,)), ref(x, shape=(3,)), np.float32)


@pytest.mark.parametrize("fn", [jnp.zeros, jnp.ones, jnp.empty, lambda s: jnp.full(s, 1.0)])
def test_negative_dimension_raises(fn):
    with pytest.raises(ValueError, match=r"negative dimensions.*\(2, -1\)"):
        fn((2, -1))


def test_traced_shape_raises_concretization_error():
    with pytest.raises(kiln.errors.ConcretizationTypeError):
        kiln.jit(lambda n: jnp.zeros(n))(3)
    with pytest.raises(kiln.errors.ConcretizationTypeError):
        kiln.jit(lambda n: jnp.arange(n))(3)


def test_bad_shape_types():
    with pytest.raises(TypeError):
        jnp.zeros(2.5)
    with pytest.raises(TypeError):
        jnp.ones(("a", 2))


# ---------------------------------------------------------------------------------------------------------
# arange / linspace / logspace / geomspace

ARANGE = [((5,), None), ((2, 9), None), ((2, 9, 3), None), ((9, 2, -2), None), ((0, 1, 0.1), None),
          ((1.5,), None), ((-3, 3, 0.7), None), ((0, 10, 3), np.float32), ((0.0, 5.0), np.int32),
          ((3, 1), None)]


@pytest.mark.parametrize("args,dtype", ARANGE, ids=[str(a) for a, _ in ARANGE])
def test_arange(args, dtype):
    got = jnp.arange(*args, dtype=dtype)
    want = np.arange(*args, dtype=dtype)
    if dtype is None:
        want_dtype = _float() if any(isinstance(a, float) for a in args) else _int()
    else:
        want_dtype = np.dtype(dtype)
    _same(got, want, want_dtype, rtol=1e-6 if want_dtype.kind == "f" else 0)


def test_arange_x64_and_errors(x64):
    _same(jnp.arange(4), np.arange(4), np.int64)
    _same(jnp.arange(0.5, 3), np.arange(0.5, 3), np.float64)
    with pytest.raises(ValueError, match="step"):
        jnp.arange(0, 5, 0)
    with pytest.raises(TypeError):
        jnp.arange("5")


LINSPACE = [dict(num=7), dict(num=7, endpoint=False), dict(num=1), dict(num=0), dict(num=5, dtype=np.int32),
            dict(num=6, axis=1), dict(num=6, axis=-1), dict(num=4, retstep=True)]


@pytest.mark.parametrize("kwargs", LINSPACE, ids=str)
def test_linspace(kwargs):
    rng = np.random.default_rng(6)
    start = rng.normal(size=(3,)) * 5
    stop = rng.normal(size=(3,)) * 5 + 10
    if "axis" not in kwargs and "dtype" not in kwargs:
        start, stop = float(start[0]), float(stop[0])
    got = jnp.linspace(np.float32(start) if np.ndim(start) == 0 else start.astype(np.float32),
                       np.float32(stop) if np.ndim(stop) == 0 else stop.astype(np.float32), **kwargs)
    want = np.linspace(np.float32(start), np.float32(stop), **kwargs)
    if kwargs.get("retstep"):
        (got, got_step), (want, want_step) = got, want
        np.testing.assert_allclose(np.asarray(got_step), want_step, rtol=1e-5)
    dtype = kwargs.get("dtype", np.float32)
    _same(got, want, dtype, rtol=2e-5 if np.dtype(dtype).kind == "f" else 0)


def test_linspace_negative_num():
    with pytest.raises(ValueError, match="num"):
        jnp.linspace(0, 1, -2)


def test_logspace_geomspace():
    _same(jnp.logspace(-1.5, 2.0, 9), np.logspace(-1.5, 2.0, 9), np.float32, rtol=2e-5)
    _same(jnp.logspace(0.0, 3.0, 4, base=2.0, endpoint=False), np.logspace(0.0, 3.0, 4, base=2.0, endpoint=False),
          np.float32, rtol=2e-5)
    _same(jnp.geomspace(0.3, 700.0, 11), np.geomspace(0.3, 700.0, 11), np.float32, rtol=2e-5)
    _same(jnp.geomspace(-2.0, -50.0, 5), np.geomspace(-2.0, -50.0, 5), np.float32, rtol=2e-5)


# ---------------------------------------------------------------------------------------------------------
# eye / identity / tri / meshgrid / indices

EYE = [(4, None, 0), (3, 5, 1), (5, 3, -2), (4, 4, 7), (0, 2, 0)]


@pytest.mark.parametrize("N,M,k", EYE, ids=str)
@pytest.mark.parametrize("dtype", [None, np.int32, bool])
def test_eye_and_tri(N, M, k, dtype):
    want_dtype = _float() if dtype is None else np.dtype(dtype)
    _same(jnp.eye(N, M, k, dtype=dtype), np.eye(N, M, k, dtype=want_dtype), want_dtype)
    _same(jnp.tri(N, M, k, dtype=dtype), np.tri(N, M, k, dtype=want_dtype), want_dtype)


def test_identity_and_errors():
    _same(jnp.identity(3, dtype=np.int32), np.identity(3, dtype=np.int32), np.int32)
    with pytest.raises(ValueError, match="negative"):
        jnp.eye(-1)
    with pytest.raises(kiln.errors.ConcretizationTypeError):
        kiln.jit(lambda n: jnp.eye(n))(3)


@pytest.mark.parametrize("indexing", ["xy", "ij"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("nargs", [1, 2, 3])
def test_meshgrid(indexing, sparse, nargs):
    rng = np.random.default_rng(7)
    vecs = [rng.normal(size=n).astype(np.float32) for n in (2, 3, 4)[:nargs]]
    got = jnp.meshgrid(*vecs, indexing=indexing, sparse=sparse)
    want = np.meshgrid(*vecs, indexing=indexing, sparse=sparse)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        _same(g, w, np.float32)


def test_meshgrid_rejects_2d_and_bad_indexing():
    with pytest.raises(ValueError, match="1-D"):
        jnp.meshgrid(np.ones((2, 2)), np.ones(3))
    with pytest.raises(ValueError, match="indexing"):
        jnp.meshgrid(np.ones(2), indexing="yx")


@pytest.mark.parametrize("dims", [(2, 3), (4,), (2, 1, 3)], ids=str)
def test_indices(dims):
    _same(jnp.indices(dims), np.indices(dims), _int())
    for g, w in zip(jnp.indices(dims, sparse=True), np.indices(dims, sparse=True)):
        _same(g, w, _int())


def test_python_ints_convert_straight_to_the_requested_dtype():
    # bug (issue 32): jnp.take on uint32 data raised OverflowError (its fill value 2**32 - 1 went
    # through int32 in lax.full); jnp.array(300, int8) wrapped to 44 where JAX raises OverflowError
    from kiln import lax
    assert np.asarray(lax.full((2,), 2**32 - 1, np.uint32)).tolist() == [4294967295] * 2
    assert np.asarray(jnp.full((2,), 2**31, np.int32)).tolist() == [-2147483648] * 2  # wraps, as JAX
    assert np.asarray(jnp.full((1,), 300, np.int8)).tolist() == [44]
    assert np.asarray(jnp.asarray(2**32 - 1, np.uint32)) == 4294967295
    for value, dtype in [(300, np.int8), ([300, 1], np.int8), (-1, np.uint32), (-1.0, np.uint8),
                         ((1, 2**31), np.int32)]:
        with pytest.raises(OverflowError):
            jnp.array(value, dtype=dtype)
    data = jnp.asarray(np.arange(12, dtype=np.uint32).reshape(3, 4))
    idx = jnp.asarray(np.array([0, 2], np.int32))
    assert np.asarray(jnp.take(data, idx, axis=1)).tolist() == [[0, 2], [4, 6], [8, 10]]
    assert np.asarray(jnp.take_along_axis(data, jnp.asarray(np.array([[0], [2], [1]])), axis=1)).ravel().tolist() == [0, 6, 9]
    # a Python int operand must fit the default int first (JAX raises OverflowError, x64 off)
    x = jnp.zeros(2, np.uint32)
    for op in (lambda: x + (2**32 - 1), lambda: x * 2**31, lambda: jnp.add(x, 2**32 - 1)):
        with pytest.raises(OverflowError):
            op()
    assert np.asarray(jnp.zeros(1, np.uint8) + 300).tolist() == [44]
