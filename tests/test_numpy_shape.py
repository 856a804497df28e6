"""kiln.numpy shape, joining, splitting, ordering and selection functions against NumPy
on fresh random inputs (float64 under x64, plus dtype preservation for int32/float32),
their traced paths under kiln.jit, and the errors for bad axes, shapes and permutations."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp


# (the x64 fixture is in conftest.py)


def _rand(rng, shape, dtype=np.float64):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(-9, 10, size=shape).astype(dtype)
    return rng.normal(size=shape).astype(dtype)


def _check(got, exp):
    if isinstance(exp, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(exp)
        for g, e in zip(got, exp):
            _check(g, e)
        return
    g = np.asarray(got)
    assert g.shape == np.shape(exp), (g.shape, np.shape(exp))
    np.testing.assert_allclose(g, exp, rtol=1e-12, atol=1e-12)


# (id, f(m, *arrays) called with m = kiln.numpy and m = numpy, input shapes)
CASES = [
    ("reshape_-1", lambda m, x: m.reshape(x, (4, -1)), [(2, 3, 4)]),
    ("reshape_F", lambda m, x: m.reshape(x, (6, 4), order="F"), [(2, 3, 4)]),
    ("reshape_int", lambda m, x: m.reshape(x, -1), [(2, 3)]),
    ("ravel", lambda m, x: m.ravel(x), [(2, 3, 4)]),
    ("transpose", lambda m, x: m.transpose(x), [(2, 3, 4)]),
    ("transpose_axes", lambda m, x: m.transpose(x, (1, -1, 0)), [(2, 3, 4)]),
    ("swapaxes", lambda m, x: m.swapaxes(x, 0, -1), [(2, 3, 4)]),
    ("moveaxis", lambda m, x: m.moveaxis(x, 0, -1), [(2, 3, 4)]),
    ("moveaxis_multi", lambda m, x: m.moveaxis(x, (0, 1), (2, 0)), [(2, 3, 4)]),
    ("squeeze_all", lambda m, x: m.squeeze(x), [(1, 3, 1, 2)]),
    ("squeeze_axis", lambda m, x: m.squeeze(x, (0, -2)), [(1, 3, 1, 2)]),
    ("expand_dims", lambda m, x: m.expand_dims(x, (0, -1, 2)), [(2, 3)]),
    ("broadcast_to", lambda m, x: m.broadcast_to(x, (4, 2, 3)), [(2, 1)]),
    ("broadcast_arrays", lambda m, x, y: m.broadcast_arrays(x, y), [(2, 1), (3,)]),
    ("atleast_1d", lambda m, x: m.atleast_1d(x), [()]),
    ("atleast_2d", lambda m, x, y: m.atleast_2d(x, y), [(3,), ()]),
    ("atleast_3d", lambda m, x, y, z: m.atleast_3d(x, y, z), [(3,), (2, 3), ()]),
    ("concatenate", lambda m, x, y: m.concatenate([x, y], axis=1), [(2, 3), (2, 4)]),
    ("concatenate_neg", lambda m, x, y: m.concatenate((x, y), axis=-1), [(2, 3), (2, 1)]),
    ("concatenate_none", lambda m, x, y: m.concatenate([x, y], axis=None), [(2, 3), (4,)]),
    ("stack", lambda m, x, y: m.stack([x, y], axis=-1), [(2, 3), (2, 3)]),
    ("hstack_1d", lambda m, x, y: m.hstack([x, y]), [(2,), (3,)]),
    ("hstack_2d", lambda m, x, y: m.hstack([x, y]), [(2, 3), (2, 1)]),
    ("vstack", lambda m, x, y: m.vstack([x, y]), [(3,), (2, 3)]),
    ("dstack", lambda m, x, y: m.dstack([x, y]), [(2, 3), (2, 3)]),
    ("column_stack", lambda m, x, y: m.column_stack([x, y]), [(3,), (3, 2)]),
    ("split", lambda m, x: m.split(x, 3, axis=1), [(2, 6)]),
    ("split_idx", lambda m, x: m.split(x, [1, 4, 9]), [(6, 2)]),
    ("array_split", lambda m, x: m.array_split(x, 4), [(10,)]),
    ("hsplit", lambda m, x: m.hsplit(x, 2), [(3, 4)]),
    ("vsplit", lambda m, x: m.vsplit(x, [1]), [(3, 4)]),
    ("tile", lambda m, x: m.tile(x, 3), [(2, 3)]),
    ("tile_more", lambda m, x: m.tile(x, (2, 1, 2)), [(2, 3)]),
    ("repeat", lambda m, x: m.repeat(x, 3), [(2, 3)]),
    ("repeat_axis", lambda m, x: m.repeat(x, 2, axis=-1), [(2, 3)]),
    ("repeat_each", lambda m, x: m.repeat(x, [1, 0, 3], axis=1), [(2, 3)]),
    ("flip", lambda m, x: m.flip(x), [(2, 3, 4)]),
    ("flip_axes", lambda m, x: m.flip(x, (0, 2)), [(2, 3, 4)]),
    ("fliplr", lambda m, x: m.fliplr(x), [(2, 3)]),
    ("flipud", lambda m, x: m.flipud(x), [(2, 3)]),
    ("roll", lambda m, x: m.roll(x, 2), [(3, 4)]),
    ("roll_axis", lambda m, x: m.roll(x, -5, axis=1), [(3, 4)]),
    ("roll_tuple", lambda m, x: m.roll(x, (1, 2), axis=(0, 1)), [(3, 4)]),
    *[(f"rot90_k{k}", (lambda k: lambda m, x: m.rot90(x, k, axes=(2, 0)))(k), [(2, 3, 4)])
      for k in (-1, 0, 1, 2, 3)],
    ("tril", lambda m, x: m.tril(x), [(2, 4, 3)]),
    ("tril_k", lambda m, x: m.tril(x, -1), [(4, 3)]),
    ("triu_k", lambda m, x: m.triu(x, 2), [(4, 5)]),
    ("diag_vec", lambda m, x: m.diag(x), [(3,)]),
    ("diag_vec_k", lambda m, x: m.diag(x, -2), [(3,)]),
    ("diag_mat", lambda m, x: m.diag(x, 1), [(3, 4)]),
    ("diagonal", lambda m, x: m.diagonal(x), [(3, 4)]),
    ("diagonal_off", lambda m, x: m.diagonal(x, -1, 2, 0), [(4, 2, 3)]),
    ("diagonal_far", lambda m, x: m.diagonal(x, 7), [(3, 4)]),
    ("diagflat", lambda m, x: m.diagflat(x, 1), [(2, 2)]),
    ("trace", lambda m, x: m.trace(x, 1), [(3, 4)]),
    ("trace_axes", lambda m, x: m.trace(x, 0, 1, 2), [(2, 3, 3)]),
    ("take_clip", lambda m, x: m.take(x, np.array([[0, 5], [-1, 2]]), axis=1, mode="clip"), [(2, 4)]),
    ("take_wrap", lambda m, x: m.take(x, np.array([0, 5, -1, -7]), mode="wrap"), [(2, 4)]),
    ("take_along", lambda m, x: m.take_along_axis(x, np.array([[0, 2], [1, 1], [2, 0]]), axis=1), [(3, 3)]),
    ("take_along_bcast", lambda m, x: m.take_along_axis(x, np.array([[[0], [2]]]), axis=2), [(2, 2, 3)]),
    ("sort", lambda m, x: m.sort(x), [(3, 5)]),
    ("sort_axis0", lambda m, x: m.sort(x, axis=0), [(3, 5)]),
    ("sort_none", lambda m, x: m.sort(x, axis=None), [(3, 5)]),
    ("argsort", lambda m, x: m.argsort(x, axis=0), [(4, 5)]),
    ("lexsort", lambda m, x, y: m.lexsort((np.round(x), np.round(y))), [(9,), (9,)]),
    ("searchsorted_left", lambda m, a, v: m.searchsorted(m.sort(a), v), [(7,), (2, 3)]),
    ("searchsorted_right", lambda m, a, v: m.searchsorted(m.sort(a), v, side="right"), [(7,), (4,)]),
    ("append", lambda m, x, y: m.append(x, y), [(2, 3), (4,)]),
    ("append_axis", lambda m, x, y: m.append(x, y, axis=0), [(2, 3), (1, 3)]),
    ("insert_scalar", lambda m, x: m.insert(x, 1, 7.0, axis=1), [(2, 3)]),
    ("insert_multi", lambda m, x: m.insert(x, np.array([0, 2, 2, -1]), np.array([1.0, 2.0, 3.0, 4.0])), [(5,)]),
    ("insert_rows", lambda m, x, v: m.insert(x, 2, v, axis=0), [(3, 2), (2,)]),
    ("delete", lambda m, x: m.delete(x, np.array([0, -1]), axis=1), [(2, 4)]),
    ("delete_slice", lambda m, x: m.delete(x, slice(1, None, 2)), [(2, 4)]),
    ("resize_grow", lambda m, x: m.resize(x, (3, 4)), [(5,)]),
    ("resize_shrink", lambda m, x: m.resize(x, (2,)), [(2, 3)]),
    ("copy", lambda m, x: m.copy(x), [(2, 3)]),
    ("select", lambda m, x, y: m.select([x > 0.5, x < -0.5], [x, y], default=-1.0), [(3, 4), (4,)]),
]

PADS = [
    (mode, width) for mode in ("constant", "edge", "reflect", "symmetric", "wrap", "maximum",
                               "minimum", "mean")
    for width in (2, (1, 3), ((0, 1), (2, 0)), ((4, 5),))
]


@pytest.mark.parametrize("name,fn,shapes", CASES, ids=[c[0] for c in CASES])
def test_against_numpy(x64, name, fn, shapes):
    rng = np.random.default_rng()
    args = [_rand(rng, s) for s in shapes]
    _check(fn(jnp, *[jnp.asarray(a) for a in args]), fn(np, *args))


@pytest.mark.parametrize("mode,width", PADS)
def test_pad(x64, mode, width):
    x = _rand(np.random.default_rng(), (3, 4))
    _check(jnp.pad(jnp.asarray(x), width, mode=mode), np.pad(x, width, mode=mode))


def test_pad_constant_values_per_axis(x64):
    x = _rand(np.random.default_rng(), (2, 3))
    vals = ((1.0, 2.0), (3.0, 4.0))
    _check(jnp.pad(jnp.asarray(x), ((1, 2), (2, 1)), constant_values=vals),
           np.pad(x, ((1, 2), (2, 1)), constant_values=vals))


DTYPE_CASES = [c for c in CASES if c[0] in (
    "reshape_-1", "transpose_axes", "concatenate", "stack", "tile_more", "repeat_each", "flip",
    "roll_tuple", "rot90_k1", "tril", "diag_vec_k", "diagonal_off", "sort", "delete", "resize_grow")]


@pytest.mark.parametrize("dtype", ["int32", "float32", "bool"])
@pytest.mark.parametrize("name,fn,shapes", DTYPE_CASES, ids=[c[0] for c in DTYPE_CASES])
def test_dtype_preserved(name, fn, shapes, dtype):
    rng = np.random.default_rng()
    args = [_rand(rng, s, dtype) for s in shapes]
    got = fn(jnp, *[jnp.asarray(a) for a in args])
    exp = fn(np, *args)
    got, exp = (got, exp) if isinstance(exp, (list, tuple)) else ([got], [exp])
    for g, e in zip(got, exp):
        assert np.asarray(g).dtype == e.dtype
        np.testing.assert_array_equal(np.asarray(g), e)


def test_concatenate_promotes():
    out = jnp.concatenate([jnp.asarray(np.ones(2, np.int32)), jnp.asarray(np.ones(2, np.float32))])
    assert out.dtype == np.float32


def test_stable_argsort_and_descending(x64):
    x = np.random.default_rng().integers(0, 3, size=(4, 20)).astype(np.float64)
    _check(jnp.argsort(jnp.asarray(x), axis=1), np.argsort(x, axis=1, kind="stable"))
    exp = np.argsort(-x, axis=1, kind="stable")
    _check(jnp.argsort(jnp.asarray(x), axis=1, descending=True), exp)
    _check(jnp.sort(jnp.asarray(x), axis=1, descending=True), -np.sort(-x, axis=1))


def test_sort_treats_signed_zeros_as_equal(x64):
    # As NumPy and jax.lax.sort: -0.0 == 0.0, so a stable sort keeps their input order.
    x = np.array([0.0, -0.0, 1.0, 0.0, -0.0, -1.0])
    np.testing.assert_array_equal(np.asarray(jnp.argsort(jnp.asarray(x))), np.argsort(x, kind="stable"))
    keys = (np.array([1.0, 0.0, 1.0, 0.0]), np.array([0.0, -0.0, -0.0, 0.0]))
    np.testing.assert_array_equal(np.asarray(jnp.lexsort([jnp.asarray(k) for k in keys])), np.lexsort(keys))


def test_sort_and_searchsorted_nan(x64):
    a = np.array([3.0, np.nan, 1.0, 2.0, np.nan])
    _check(jnp.sort(jnp.asarray(a)), np.sort(a))
    s = np.sort(a)
    v = np.array([np.nan, 0.0, 2.0, 5.0])
    for side in ("left", "right"):
        _check(jnp.searchsorted(jnp.asarray(s), jnp.asarray(v), side=side), np.searchsorted(s, v, side=side))


def test_take_default_mode_fills(x64):
    x = _rand(np.random.default_rng(), (5,))
    got = np.asarray(jnp.take(jnp.asarray(x), jnp.asarray([0, 7, -1, -9])))
    np.testing.assert_array_equal(got, [x[0], np.nan, x[4], np.nan])
    got = np.asarray(jnp.take(jnp.asarray(np.arange(5, dtype=np.int32)), jnp.asarray([7]),
                              fill_value=-3))
    np.testing.assert_array_equal(got, [-3])
    ints = np.asarray(jnp.take(jnp.asarray(np.arange(5, dtype=np.int32)), jnp.asarray([9])))
    np.testing.assert_array_equal(ints, [np.iinfo(np.int32).min])


def test_nonzero_argwhere_unique_concrete(x64):
    rng = np.random.default_rng()
    x = rng.integers(0, 3, size=(4, 5))
    _check(jnp.nonzero(jnp.asarray(x)), np.nonzero(x))
    _check(jnp.flatnonzero(jnp.asarray(x)), np.flatnonzero(x))
    _check(jnp.argwhere(jnp.asarray(x)), np.argwhere(x))
    _check(jnp.unique(jnp.asarray(x)), np.unique(x))
    got = jnp.unique(jnp.asarray(x), return_index=True, return_inverse=True, return_counts=True)
    _check(got, np.unique(x, return_index=True, return_inverse=True, return_counts=True))


def test_traced_paths_under_jit(x64):
    rng = np.random.default_rng()
    x = rng.integers(0, 3, size=(4, 5)).astype(np.float64)
    xs = jnp.asarray(x)
    n = int(np.count_nonzero(x))
    got = kiln.jit(lambda a: jnp.nonzero(a, size=n + 2, fill_value=-1))(xs)
    exp = [np.concatenate([i, [-1, -1]]) for i in np.nonzero(x)]
    _check(got, exp)
    got = kiln.jit(lambda a: jnp.argwhere(a, size=n - 1))(xs)
    _check(got, np.argwhere(x)[: n - 1])
    u = np.unique(x)
    got = kiln.jit(lambda a: jnp.unique(a, size=len(u) + 1, return_index=True,
                                        return_inverse=True, return_counts=True))(xs)
    e_vals, e_idx, e_inv, e_cnt = np.unique(x, return_index=True, return_inverse=True,
                                            return_counts=True)
    _check(got[0], np.concatenate([e_vals, [e_vals.min()]]))
    _check(got[1][:-1], e_idx)
    _check(got[2], e_inv.reshape(x.shape))
    _check(got[3], np.concatenate([e_cnt, [0]]))
    _check(kiln.jit(lambda a, s: jnp.roll(a, s, axis=1))(xs, 7), np.roll(x, 7, axis=1))
    _check(kiln.jit(lambda a, s: jnp.roll(a, s, axis=0))(xs, -1), np.roll(x, -1, axis=0))
    idx = np.array([3, 0, 4, 4])
    _check(kiln.jit(lambda a, i: jnp.take(a, i, axis=1))(xs, jnp.asarray(idx)), np.take(x, idx, axis=1))
    reps = np.array([2, 0, 1, 3])
    got = kiln.jit(lambda a, r: jnp.repeat(a, r, axis=0, total_repeat_length=6))(xs, jnp.asarray(reps))
    _check(got, np.repeat(x, reps, axis=0))


def test_data_dependent_shape_needs_size():
    f = kiln.jit(lambda a: jnp.nonzero(a))
    with pytest.raises(kiln.errors.ConcretizationTypeError, match="size="):
        f(jnp.asarray(np.ones(3)))
    with pytest.raises(kiln.errors.ConcretizationTypeError, match="size="):
        kiln.jit(lambda a: jnp.unique(a))(jnp.asarray(np.ones(3)))


ERRORS = [
    (lambda x: jnp.reshape(x, (5, 5)), ValueError, r"\(2, 3, 4\).*\(5, 5\)"),
    (lambda x: jnp.reshape(x, (-1, -1)), ValueError, "one unknown dimension"),
    (lambda x: jnp.reshape(x, (5, -1)), ValueError, "cannot reshape"),
    (lambda x: jnp.transpose(x, (0, 0, 1)), ValueError, "not a permutation"),
    (lambda x: jnp.transpose(x, (0, 1)), ValueError, "not a permutation"),
    (lambda x: jnp.swapaxes(x, 0, 3), ValueError, "swapaxes"),
    (lambda x: jnp.moveaxis(x, (0, 1), 2), ValueError, "same number"),
    (lambda x: jnp.squeeze(x, 0), ValueError, "size not equal to one"),
    (lambda x: jnp.expand_dims(x, 5), ValueError, "expand_dims"),
    (lambda x: jnp.broadcast_to(x, (3, 4)), ValueError, r"\(2, 3, 4\).*\(3, 4\)"),
    (lambda x: jnp.concatenate([x, x[0]]), ValueError, "same shape"),
    (lambda x: jnp.concatenate([x[0, 0, 0], x[0, 0, 0]]), ValueError, "zero-dimensional"),
    (lambda x: jnp.stack([x, x[0]]), ValueError, "same shape"),
    (lambda x: jnp.split(x, 3, axis=2), ValueError, "equal division"),
    (lambda x: jnp.sort(x, axis=3), ValueError, "sort"),
    (lambda x: jnp.flip(x, -4), ValueError, "flip"),
    (lambda x: jnp.rot90(x, axes=(1, 1)), ValueError, "two different axes"),
    (lambda x: jnp.diagonal(x, 0, 1, 1), ValueError, "cannot be the same"),
    (lambda x: jnp.diag(x), ValueError, "1- or 2-d"),
    (lambda x: jnp.take_along_axis(x, jnp.asarray(np.zeros((2, 3), np.int32)), 1), ValueError, "same number"),
    (lambda x: jnp.take(x, jnp.asarray([1.0])), TypeError, "integers"),
    (lambda x: jnp.pad(x, -1), ValueError, "non-negative"),
    (lambda x: jnp.pad(x, 1, mode="linear_ramp"), NotImplementedError, "linear_ramp"),
    (lambda x: jnp.repeat(x, [1, 2], axis=1), ValueError, "repeats"),
    (lambda x: jnp.select([x > 0], [x, x]), ValueError, "same length"),
    (lambda x: jnp.insert(x, 9, 0.0, axis=0), IndexError, "out of bounds"),
    (lambda x: jnp.delete(x, np.array([4]), axis=1), IndexError, "out of bounds"),
]


@pytest.mark.parametrize("fn,exc,match", ERRORS)
def test_errors(fn, exc, match):
    x = jnp.asarray(np.zeros((2, 3, 4), np.float32))
    with pytest.raises(exc, match=match):
        fn(x)


def test_diagonal_of_tall_matrices():
    # bug (issue 32): jnp.trace of a non-square (4, 3) matrix and jnp.diag of an (n, 1) array raised
    # "slice: invalid range" (the k == 0 case sliced the short axis to the long one's length)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert float(jnp.trace(a.T)) == 15.0 and float(jnp.trace(a.T, -1)) == 18.0
    assert np.asarray(jnp.diag(a[:, :1])).tolist() == [0.0]
    assert np.asarray(jnp.diagonal(a.T, 1)).tolist() == [4.0, 9.0]
    assert np.asarray(jnp.linalg.diagonal(a.T)).tolist() == [0.0, 5.0, 10.0]


def test_tril_triu_need_2d_and_dtype_arguments_are_no_arrays():
    # bug (issue 32): jnp.tril/triu of a 1-d array broadcast it to a square (NumPy's rule; JAX raises
    # ValueError), and dtype=<an array> was read as the array's dtype (JAX raises ValueError)
    for fn in (jnp.tril, jnp.triu):
        with pytest.raises(ValueError, match="2D"):
            fn(jnp.ones(3))
    x = jnp.ones(2)
    for f in (lambda: x.astype(x), lambda: jnp.zeros_like(x, dtype=x), lambda: jnp.asarray(x, dtype=np.ones(1))):
        with pytest.raises(ValueError, match="dtype"):
            f()


def test_numpy_int64_operands_are_canonicalized_before_promotion():
    # bug (issue 32, fuzzer): without x64, an int64 NumPy operand of matmul/concatenate went straight to
    # the promoted float32, keeping 4e9, where JAX first makes it int32 (wrapping), as jnp.add does
    # (values pinned from JAX 0.10.2)
    b = np.array([7, 4000000000], np.int64)
    a = np.array([1.5, 0.25], np.float32)
    assert float(jnp.matmul(a, b)) == -73741816.0
    assert np.asarray(jnp.concatenate([a, b])).tolist() == [1.5, 0.25, 7.0, -294967296.0]
    assert np.asarray(jnp.add(a, b)).tolist() == [8.5, -294967296.0]
