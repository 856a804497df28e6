"""x[idx] and x.at[idx].set/add/... against NumPy on fresh random inputs: basic, advanced
(NumPy's placement of advanced dims), boolean and traced indices; JAX's out-of-bounds rules
(gathers clamp, scatters drop, negative indices wrap); and the errors for bad indices."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln._src.numpy import indexing


# (the x64 fixture is in conftest.py)


# Both the Array operators and the module's functions must implement the same rules.
@pytest.fixture(params=["operator", "function"])
def access(request):
    if request.param == "operator":
        return (lambda x, i: x[i]), (lambda x: x.at)
    return indexing.getitem, indexing._AtIndexer


def _x(shape=(3, 4, 5), dtype=np.float64):
    return np.random.default_rng().normal(size=shape).astype(dtype)


B = np.array([True, False, True])
GET = [
    0, -1, (1, 2), (2, -1, 0), slice(None), slice(None, None, -1), (slice(1, None, 2), None, Ellipsis, -2),
    (Ellipsis, slice(4, 0, -3)), (slice(-100, 100, 2),), (slice(10, None),), (None, None),
    Ellipsis, (), (Ellipsis, None, 1), np.array([0, 2]), np.array([[0, 1], [2, 2]]), (slice(None), [0, 1], [1, 2]),
    (slice(None), 0, [1, 2]), (0, slice(None), [1, 2]), ([[0], [1]], None, [0, 2, 1]),
    ([0], None, 0), ([0, 1], [0, 1], [0, 1]), (Ellipsis, [4, -1]), ([-3, -1],), np.array([], np.int32),
    (slice(None, None, -2), [1, 3], slice(3, 0, -1)), np.array([2, 0]), (np.int32(1), np.int64(-2)),
    B, (slice(None), np.array([True, False, False, True])), (B, slice(1, 3), [4, 0]),
    (1, np.ones((4, 5), bool)), ([[0, 2]], slice(None), [[1], [3]]),
]


@pytest.mark.parametrize("idx", GET, ids=[repr(i)[:40] for i in GET])
def test_getitem_matches_numpy(x64, access, idx):
    get, _ = access
    x = _x()
    out = get(jnp.asarray(x), idx)
    exp = x[idx]
    assert np.asarray(out).shape == exp.shape
    np.testing.assert_array_equal(np.asarray(out), exp)


def test_getitem_preserves_dtype(access):
    get, _ = access
    for dt in (np.int32, np.float32, np.bool_):
        x = (_x((3, 4)) * 5).astype(dt)
        for idx in [1, (slice(None), [0, 3]), (Ellipsis, slice(None, None, -1))]:
            out = get(jnp.asarray(x), idx)
            assert out.dtype == dt
            np.testing.assert_array_equal(np.asarray(out), x[idx])


def test_array_indices_clamp_out_of_bounds(x64, access):
    get, _ = access
    x = _x((5, 3))
    idx = np.array([0, 7, -1, -9, 4])
    # JAX: negatives wrap first, then the gather clamps into range.
    expect = x[np.clip(np.where(idx < 0, idx + 5, idx), 0, 4)]
    np.testing.assert_array_equal(np.asarray(get(jnp.asarray(x), idx)), expect)


def test_get_fill_mode(x64, access):
    _, at = access
    x = _x((5, 3))
    idx = np.array([0, 7, -1, -9])
    out = np.asarray(at(jnp.asarray(x))[idx, 1].get(mode="fill", fill_value=-2.0))
    np.testing.assert_array_equal(out, [x[0, 1], -2.0, x[4, 1], -2.0])
    out = np.asarray(at(jnp.asarray(x))[9].get(mode="fill"))
    assert np.isnan(out).all() and out.shape == (3,)


def test_traced_indices_under_jit(x64, access):
    get, _ = access
    x = _x()
    xs = jnp.asarray(x)
    f = kiln.jit(lambda a, i, j: get(a, (i, slice(None), j)))
    for i in (0, 2, -1):
        j = np.array([[4, 0], [1, -2]])
        np.testing.assert_array_equal(np.asarray(f(xs, i, jnp.asarray(j))), x[i, :, j])
    # A traced scalar out of range clamps like dynamic_slice (no error possible under jit).
    np.testing.assert_array_equal(np.asarray(f(xs, 7, jnp.asarray([1]))), x[2, :, [1]])


def test_traced_boolean_mask_raises(access):
    get, _ = access
    xs = jnp.asarray(_x((3,)))
    with pytest.raises(kiln.errors.NonConcreteBooleanIndexError, match="boolean"):
        kiln.jit(lambda a, m: get(a, m))(xs, jnp.asarray(B))


def test_out_of_bounds_static_ints_clamp_as_jax(access):
    # jnp.arange(10.)[11] is 9.0 in JAX, and [-12] is 0.0, eagerly and under jit
    get, _ = access
    x = _x(dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(get(jnp.asarray(x), 7)), x[2])
    np.testing.assert_array_equal(np.asarray(get(jnp.asarray(x), (0, -5))), x[0, 0])
    np.testing.assert_array_equal(np.asarray(kiln.jit(lambda a: get(a, (9, 1)))(jnp.asarray(x))), x[2, 1])
    np.testing.assert_array_equal(np.asarray(get(jnp.arange(10.0), 11)), 9.0)
    np.testing.assert_array_equal(np.asarray(get(jnp.arange(10.0), -12)), 0.0)


BAD = [
    ((0, 0, 0, 0), IndexError, "too many indices"),
    ((Ellipsis, 0, Ellipsis), IndexError, "single ellipsis"),
    (1.5, IndexError, "valid indices"),
    (np.array([1.0]), IndexError, "integer or boolean"),
    ([0, 1], TypeError, "non-tuple sequence"),  # as JAX: x[[0, 1]] is refused (x[np.array([0, 1])] is fine)
    (np.array([True, False]), IndexError, "boolean index did not match"),
    ("a", IndexError, "valid indices"),
]


@pytest.mark.parametrize("idx,exc,match", BAD, ids=[repr(b[0]) for b in BAD])
def test_bad_indices(access, idx, exc, match):
    get, _ = access
    with pytest.raises(exc, match=match):
        get(jnp.asarray(_x()), idx)


# ---------------------------------------------------------------------------
# Updates. NumPy's ufunc.at gives the duplicate-combining reference.

UPD = [
    0, -1, (1, 2), (slice(None, None, -1),), (slice(1, None, 2), None, Ellipsis, -2),
    (slice(3, 0, -1), slice(None), slice(None, None, -1)), (slice(None, None, 2), 1), np.array([0, 2]),
    (slice(None), [0, 1], [1, 2]), (slice(None), 0, [1, 2]), (0, slice(None), [1, 2]),
    ([[0], [1]], None, [0, 2, 1]), (Ellipsis, [4, -1, 4]), ([0, 0, 2],),
    (slice(None), np.array([True, False, True, True])), Ellipsis,
]
NP_AT = {"add": np.add, "multiply": np.multiply, "min": np.minimum, "max": np.maximum,
         "subtract": np.subtract, "divide": np.divide, "power": np.power}


@pytest.mark.parametrize("op", ["set", *NP_AT])
@pytest.mark.parametrize("idx", UPD, ids=[repr(i)[:40] for i in UPD])
def test_update_matches_numpy(x64, access, idx, op):
    _, at = access
    rng = np.random.default_rng()
    x = rng.uniform(0.5, 2.0, size=(3, 4, 5))
    target_shape = x[idx].shape
    v = rng.uniform(0.5, 2.0, size=target_shape)
    exp = x.copy()
    if op == "set":
        flat = np.arange(x.size).reshape(x.shape)[idx].ravel()
        if len(set(flat)) != len(flat):
            pytest.skip("set with duplicate indices picks an unspecified winner")
        exp[idx] = v
    else:
        NP_AT[op].at(exp, idx, v)
    out = getattr(at(jnp.asarray(x))[idx], op)(jnp.asarray(v))
    np.testing.assert_allclose(np.asarray(out), exp, rtol=1e-12)


def test_update_broadcasts_and_casts_values(access):
    _, at = access
    x = np.zeros((3, 4), np.int32)
    out = at(jnp.asarray(x))[:, 1:3].set(7.9)
    assert out.dtype == np.int32
    exp = x.copy()
    exp[:, 1:3] = 7
    np.testing.assert_array_equal(np.asarray(out), exp)
    out = at(jnp.asarray(x))[np.array([0, 2])].add(np.arange(4, dtype=np.int32))
    exp = x.copy()
    exp[[0, 2]] += np.arange(4)
    np.testing.assert_array_equal(np.asarray(out), exp)
    with pytest.raises(ValueError, match=r"\(3, 3\).*\(3, 4\)"):
        at(jnp.asarray(x))[np.array([0, 1, 2])].set(np.ones((3, 3), np.int32))


def test_update_out_of_bounds_dropped(x64, access):
    _, at = access
    x = _x((5,))
    xs = jnp.asarray(x)
    np.testing.assert_array_equal(np.asarray(at(xs)[7].set(1.0)), x)
    exp = x.copy()
    exp[[0, 4]] = [10.0, 30.0]
    out = at(xs)[np.array([0, 9, -1, -9])].set(jnp.asarray([10.0, 20.0, 30.0, 40.0]))
    np.testing.assert_array_equal(np.asarray(out), exp)
    clipped = at(xs)[np.array([9])].set(5.0, mode="clip")
    exp = x.copy()
    exp[4] = 5.0
    np.testing.assert_array_equal(np.asarray(clipped), exp)


def test_update_apply_and_traced(x64, access):
    _, at = access
    x = _x((4, 3))
    exp = x.copy()
    exp[1:3, [0, 2]] = np.sin(exp[1:3, [0, 2]])
    np.testing.assert_allclose(np.asarray(at(jnp.asarray(x))[1:3, [0, 2]].apply(jnp.sin)), exp)
    f = kiln.jit(lambda a, i, v: at(a)[i, [0, 2]].add(v))
    for i in (1, -1, 4):
        exp = x.copy()
        if -4 <= i < 4:
            exp[i, [0, 2]] += 2.0
        np.testing.assert_allclose(np.asarray(f(jnp.asarray(x), i, 2.0)), exp)


def test_traced_mask_update_with_scalar(x64, access):
    # Beyond JAX (which raises): the shape does not depend on the mask, so kiln selects.
    _, at = access
    x = _x((4, 3))
    f = kiln.jit(lambda a: (at(a)[a > 0].set(0.0), at(a)[a[:, 0] > 0].add(2.0)))
    got_set, got_add = f(jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(got_set), np.where(x > 0, 0.0, x))
    np.testing.assert_array_equal(np.asarray(got_add), np.where(x[:, :1] > 0, x + 2.0, x))
    with pytest.raises(kiln.errors.NonConcreteBooleanIndexError):
        kiln.jit(lambda a: at(a)[a > 0].set(jnp.ones(12)))(jnp.asarray(x))


@pytest.mark.parametrize("op", ["set", "add", "mul", "min", "max"])
@pytest.mark.parametrize("mode", [None, "clip", "drop"])
def test_traced_scalar_index_updates_match_static_ones(op, mode):
    # x.at[i] with a traced i: one scatter along that axis (whole extents elsewhere) or a
    # box-sized dynamic_update_slice; out-of-range indices drop (or clamp with mode="clip")
    rng = np.random.default_rng(30)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    for idx, vshape in [(lambda i: (i,), (6,)), (lambda i: (slice(None), i), (5,)), (lambda i: (i, 2), ()),
                        (lambda i: (i, slice(1, 4)), (3,))]:
        for i in (-7, -5, -1, 0, 3, 4, 5, 9):
            v = rng.standard_normal(vshape).astype(np.float32)
            got = kiln.jit(lambda x, i, v: getattr(x.at[idx(i)], op)(v, mode=mode))(x, i, v)
            want = getattr(jnp.asarray(x).at[idx(i)], op)(v, mode=mode)  # a static index
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_apply_runs_once_per_occurrence_as_jax():
    # JAX: jnp.zeros(3).at[jnp.array([0, 0, 1])].apply(lambda v: v + 1) is [2, 1, 0]
    np.testing.assert_array_equal(np.asarray(jnp.zeros(3).at[jnp.array([0, 0, 1])].apply(lambda v: v + 1)), [2, 1, 0])
    f = kiln.jit(lambda x, i: x.at[i].apply(lambda v: v * 2 + 1))
    np.testing.assert_array_equal(np.asarray(f(jnp.ones(4), jnp.array([3, 3, 3, 0]))), [3, 1, 1, 15])


def test_at_power_on_integer_and_bool_arrays():
    # bug (issue 32): x.at[i].power(v) on int/uint arrays raised "pow requires a floating dtype" (it
    # called lax.pow; JAX uses jnp.power's integer rules); bool updates into bool arrays add or
    # multiply only where JAX raises TypeError
    x = jnp.asarray(np.array([2, 3, 1, 0], np.int32))
    got = x.at[np.array([0, 1, 1])].power(jnp.asarray(np.array([3, 2, 2], np.int32)))
    assert got.dtype == np.int32 and np.asarray(got).tolist() == [8, 81, 1, 0]
    got = jnp.asarray(np.array([2, 3, 1, 0], np.uint8)).at[:].power(3)
    assert got.dtype == np.uint8 and np.asarray(got).tolist() == [8, 27, 1, 0]
    b = jnp.asarray(np.array([True, False, True]))
    for op in ("add", "multiply", "divide", "power"):
        with pytest.raises(TypeError, match="bool"):
            getattr(b.at[np.array([0, 1])], op)(True)
    assert np.asarray(b.at[np.array([0, 1])].max(True)).tolist() == [True, True, True]


def test_updates_and_takes_on_zero_size_axes():
    # bug (issue 32): x.at[idx].set/add with an index array into a zero-size axis raised "take: cannot index
    # axis 0 of size 0" (JAX drops every update); jnp.where(c, size=n) raised NotImplementedError
    for shape in [(0,), (0, 3)]:
        a = jnp.zeros(shape)
        for op in ("set", "add", "multiply", "min", "max"):
            got = getattr(a.at[jnp.asarray(np.array([0, 1]))], op)(1.0)
            assert got.shape == shape
        with pytest.raises(IndexError):  # an int index into an empty axis raises, as JAX
            a.at[0].set(1.0)
        with pytest.raises(IndexError):  # as JAX, whatever the mode
            jnp.take(a, jnp.asarray(np.array([0, 1])), axis=0, mode="clip")
    assert kiln.ops.segment_sum(jnp.ones((2, 3)), jnp.asarray(np.array([0, 1])), 0).shape == (0, 3)
    assert jnp.zeros((3, 0)).at[:, jnp.asarray(np.array([0]))].add(1.0).shape == (3, 0)
    got = jnp.where(jnp.asarray(np.array([0., 2, 0, 3])) > 0, size=3, fill_value=-1)
    assert np.asarray(got[0]).tolist() == [1, 3, -1]


def test_updates_combine_in_the_promoted_dtype_as_jax():
    # guards issue 32: int arrays with float updates converted each update first, so
    # zeros(int).at[[0, 0, 1]].add(1.7) gave [2, 1, 0]; JAX promotes the array and the updates together,
    # scatters in that dtype and converts back (pinned from JAX 0.10.2)
    i32 = jnp.zeros(3, np.int32)
    dup = jnp.array([0, 0, 1])
    cases = [
        (i32.at[dup].add(1.7), [3, 1, 0]),
        (jnp.ones(3, np.int32).at[dup].multiply(1.7), [2, 1, 1]),
        (jnp.array([5, 0, 3]).at[jnp.array([1, 1])].add(jnp.array([1.7, -2.6])), [5, 0, 3]),
        (jnp.array([5, 0, 3]).at[jnp.array([1, 1])].multiply(jnp.array([1.7, -2.6])), [5, 0, 3]),
        (jnp.array([5, 0, 3]).at[jnp.array([1, 1])].subtract(1.7), [5, -3, 3]),
        (jnp.array([5, 0, 3], np.uint8).at[0].subtract(True), [4, 0, 3]),
        (jnp.array([True, False]).at[0].add(2), [True, False]),
        (jnp.array([True, False]).at[1].multiply(0.5), [True, False]),
        (kiln.jit(lambda a: a.at[dup].add(1.7))(i32), [3, 1, 0]),
        (kiln.lax.fori_loop(0, 3, lambda i, a: a.at[i].add(0.6), jnp.array([5, 0, 3])), [5, 0, 3]),
    ]
    for got, want in cases:
        assert np.asarray(got).tolist() == want
        assert got.dtype == (np.bool_ if isinstance(want[0], bool) else np.int32) or got.dtype == np.uint8
    # float16 arrays take float32 updates in float32
    h = jnp.array([1.0, 2.0], np.float16).at[jnp.array([0, 0, 0])].add(jnp.array([1e-3] * 3, np.float32))
    assert h.dtype == np.float16 and float(h[0]) == float(np.float16(1.003))


def test_getitem_out_of_bounds_array_index_passes_no_gradient():
    # bug (issue 32, fuzzer): x[i] with an out-of-range index array read the clamped element (right)
    # and sent the gradient there too; JAX's getitem gathers in promise_in_bounds mode, whose
    # transpose drops out-of-range positions, so their gradient is 0 (values pinned from JAX 0.10.2).
    # mode='clip' and traced scalar indices (dynamic_slice) still send it to the clamped element.
    x = jnp.asarray(np.array([[1.6, 2.0], [3.0, 4.0]], np.float32))

    def g(f, *a):
        return np.asarray(kiln.jit(kiln.grad(f))(x, *a)).tolist()

    assert g(lambda x, i: jnp.sum(x[:, i]), jnp.array([6, 0, -1, -3])) == [[1, 1], [1, 1]]
    assert g(lambda x, i: jnp.sum(x[i, jnp.array([0, 5])]), jnp.array([1, 0])) == [[0, 0], [1, 0]]
    assert g(lambda x, i: jnp.sum(x.at[i].get(mode="promise_in_bounds")), jnp.array([1, 5])) == [[0, 0], [1, 1]]
    assert g(lambda x, i: jnp.sum(x.at[i].get(mode="clip")), jnp.array([1, 5])) == [[0, 0], [2, 2]]
    assert g(lambda x, i: jnp.sum(x[i]), jnp.int32(6)) == [[0, 0], [1, 1]]
    vg = kiln.vmap(kiln.grad(lambda x, i: jnp.sum(x[i])), in_axes=(None, 0))(x[0], np.array([[6], [6], [1]]))
    assert np.asarray(vg).tolist() == [[0, 0], [0, 0], [0, 1]]
    assert np.asarray(x[jnp.array([6, -6])]).tolist() == np.asarray(x)[[1, 0]].tolist()  # reads clamp
