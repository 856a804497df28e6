"""kiln.numpy reductions, cumulative ops, quantiles and differences against NumPy on fresh random inputs,
with JAX's result dtypes, where=/initial=/keepdims, and the errors for bad axes and empty reductions."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp


# (the x64 fixture is in conftest.py)


def _dtype(request, name):
    if name == "float64":
        request.getfixturevalue("x64")
    return np.dtype(name)


def _x64():
    return kiln.config.jax_enable_x64


def _int():
    return np.dtype(np.int64 if _x64() else np.int32)


def _rand(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(-9, 10, size=shape).astype(dtype)
    return rng.normal(size=shape).astype(dtype)


def _assert_close(got, want, dtype, rtol=None):
    got = np.asarray(got)
    assert got.dtype == np.dtype(dtype), (got.dtype, np.dtype(dtype))
    if np.dtype(dtype).kind == "f":
        rtol = rtol or (1e-5 if np.dtype(dtype) == np.float32 else 1e-12)
        np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=rtol,
                                   atol=rtol)
    else:
        np.testing.assert_array_equal(got, np.asarray(want).astype(dtype))


AXES = [(None, False), (0, True), (1, False), (-1, True), ((0, 2), False), ((2, 0, 1), True), (None, True)]


def _sum_dtype(dtype):
    if dtype.kind == "b" or (dtype.kind == "i" and dtype.itemsize < _int().itemsize):
        return _int()
    return dtype


def _float_of(dtype):
    if dtype.kind == "f":
        return dtype
    return np.dtype(np.float64 if dtype.itemsize > 4 else np.float32)


# (name, numpy reference, kiln result dtype from input dtype, dtypes)
REDUCTIONS = [
    ("sum", np.sum, _sum_dtype, ["float32", "float64", "int32", "bool", "int8"]),
    ("prod", np.prod, _sum_dtype, ["float32", "float64", "int32", "bool"]),
    ("max", np.max, lambda d: d, ["float32", "float64", "int32", "bool"]),
    ("min", np.min, lambda d: d, ["float32", "float64", "int32", "bool"]),
    ("amax", np.amax, lambda d: d, ["float32"]),
    ("amin", np.amin, lambda d: d, ["int32"]),
    ("mean", np.mean, _float_of, ["float32", "float64", "int32", "bool"]),
    ("var", np.var, _float_of, ["float32", "float64", "int32"]),
    ("std", np.std, _float_of, ["float32", "float64", "int32"]),
    ("all", np.all, lambda d: np.dtype(bool), ["float32", "int32", "bool"]),
    ("any", np.any, lambda d: np.dtype(bool), ["float32", "int32", "bool"]),
    ("ptp", np.ptp, lambda d: d, ["float32", "int32"]),
    ("count_nonzero", np.count_nonzero, lambda d: _int(), ["float32", "int32", "bool"]),
    ("median", np.median, _float_of, ["float32", "float64", "int32"]),
]
_CASES = [(n, r, o, d) for n, r, o, ds in REDUCTIONS for d in ds]


@pytest.mark.parametrize("axis,keepdims", AXES, ids=str)
@pytest.mark.parametrize("name,ref,out_dtype,dtype_name", _CASES, ids=[f"{c[0]}-{c[3]}" for c in _CASES])
def test_reduction_matches_numpy(request, name, ref, out_dtype, dtype_name, axis, keepdims):
    dtype = _dtype(request, dtype_name)
    rng = np.random.default_rng(len(name) * 100 + len(dtype_name))
    x = _rand(rng, (3, 4, 5), dtype)
    if dtype.kind == "b" and name in ("all", "any"):
        x[0] = True  # make all() not trivially False everywhere
    if name == "prod" and dtype.kind in "iu":
        x = np.clip(x, -3, 3)  # keep products inside int32
    if name == "count_nonzero" and axis is not None and not isinstance(axis, int):
        axis = tuple(sorted(a % 3 for a in axis))
    got = getattr(jnp, name)(jnp.asarray(x), axis=axis, keepdims=keepdims)
    ref_in = x.astype(np.float64) if dtype.kind == "f" or name in ("mean", "var", "std", "median") else x
    want = ref(ref_in, axis=axis, keepdims=keepdims)
    _assert_close(got, want, out_dtype(dtype), rtol=1e-4 if name == "prod" and dtype.kind == "f" else None)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("dtype_name", ["float32", "float64", "int32", "bool"])
def test_argmax_argmin(request, name, axis, dtype_name):
    dtype = _dtype(request, dtype_name)
    x = _rand(np.random.default_rng(31), (4, 6), dtype)
    got = getattr(jnp, name)(x, axis=axis)
    _assert_close(got, getattr(np, name)(x, axis=axis), _int())
    kept = getattr(jnp, name)(x, axis=axis, keepdims=True)
    np.testing.assert_array_equal(np.asarray(kept), getattr(np, name)(x, axis=axis, keepdims=True))


@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16", "int8", "int16", "int32", "uint8",
                                        "uint16", "uint32", "bool", "float64"])
@pytest.mark.parametrize("jit", [False, True])
def test_argmax_argmin_of_specials_and_ties_along_either_axis(request, dtype_name, jit):
    """argmax/argmin of operands of 32 bits or fewer run as one max-reduction over packed (order key,
    ~index) words (transforms/rules/reduce.c): the first index of the extreme value, NaN winning
    (its first), -0 equal to +0, every integer order (signed, unsigned, bool), against NumPy."""
    dtype = _dtype(request, dtype_name)
    rng = np.random.default_rng(7)
    if dtype.kind == "b":
        x = rng.random((9, 13)) < 0.5
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, (9, 13), endpoint=True).astype(dtype)
        x[:, 5] = info.max  # ties at the extremes
        x[:, 7] = info.max
        x[2, :] = info.min
    else:
        x = np.round(rng.standard_normal((9, 13)) * 2).astype(np.float32)  # many ties
        x[0, 3], x[0, 8] = np.nan, np.nan
        x[1, 0], x[1, 4] = -0.0, 0.0
        x[1, :] = np.where(x[1] == 0, x[1], -1.0)  # row 1: -0 and +0 are the largest, tied
        x[3, :] = np.inf
        x[4, 6] = -np.inf
        x = x.astype(dtype)
    ref = x.astype(np.float64) if dtype.kind == "V" or dtype_name == "bfloat16" else x
    for name in ("argmax", "argmin"):
        for axis in (0, 1):
            f = (lambda a, name=name, axis=axis: getattr(jnp, name)(a, axis=axis))
            got = np.asarray(kiln.jit(f)(x) if jit else f(x))
            np.testing.assert_array_equal(got, getattr(np, name)(ref, axis=axis), err_msg=f"{name} axis {axis}")


def test_argmax_of_a_categorical_draw_is_one_fused_reduction_on_the_gpu():
    """categorical's argmax over Gumbel draws plus logits fuses with them: the draws are never
    stored (one kernel computes and reduces them, a thread a row of 100 classes, no barrier)."""
    lg = np.random.default_rng(1).standard_normal(100).astype(np.float32)
    f = lambda k, lg: kiln.random.categorical(k, lg, shape=(100000,))  # noqa: E731
    ptx = kiln.make_jaxpr(f)(kiln.random.PRNGKey(0), lg)._traced.builder.gpu_ptx(90)
    kernels = ptx.split(".entry ")[1:]
    reducing = [k for k in kernels if "max.u64" in k]
    assert len(reducing) == 1, "not one kernel reducing the packed words"
    assert "bar.sync" not in reducing[0] and reducing[0].count("st.global") == 1  # only the indices are stored
    assert len(kernels) <= 2  # the key's split and the fused draw-and-reduce


def test_argmax_finds_first_nan_and_nanargmax_skips_it():
    x = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan], [2.0, 5.0, 4.0]], np.float32)
    np.testing.assert_array_equal(np.asarray(jnp.argmax(x, axis=1)), np.argmax(x, axis=1))
    np.testing.assert_array_equal(np.asarray(jnp.nanargmax(x, axis=1)), [2, -1, 1])
    np.testing.assert_array_equal(np.asarray(jnp.nanargmin(x, axis=1)), [0, -1, 0])


@pytest.mark.parametrize("ddof", [0, 1, 2])
def test_var_std_ddof(ddof):
    x = _rand(np.random.default_rng(ddof), (5, 7), np.float32)
    _assert_close(jnp.var(x, axis=1, ddof=ddof), np.var(x.astype(np.float64), axis=1, ddof=ddof), np.float32)
    _assert_close(jnp.std(x, axis=0, ddof=ddof), np.std(x.astype(np.float64), axis=0, ddof=ddof), np.float32)


# ---------------------------------------------------------------------------------------------------------
# where= / initial= / dtype=

@pytest.mark.parametrize("name,ref,extra", [
    ("sum", np.sum, {}), ("prod", np.prod, {}), ("mean", np.mean, {}), ("var", np.var, {}),
    ("max", np.max, {"initial": -10.0}), ("min", np.min, {"initial": 10.0}),
    ("nansum", np.nansum, {}), ("nanmean", np.nanmean, {}),
], ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("axis", [None, 1])
def test_where_mask(name, ref, extra, axis):
    rng = np.random.default_rng(17)
    x = rng.normal(size=(4, 6)).astype(np.float32)
    mask = rng.random((6,)) < 0.6
    mask[:2] = True
    got = getattr(jnp, name)(x, axis=axis, where=mask, **extra)
    want = ref(x.astype(np.float64), axis=axis, where=np.broadcast_to(mask, x.shape), **extra)
    _assert_close(got, want, np.float32)


def test_initial_and_dtype_arguments():
    x = _rand(np.random.default_rng(5), (3, 4), np.float32)
    _assert_close(jnp.sum(x, axis=0, initial=2.5), np.sum(x, axis=0, initial=2.5, dtype=np.float64), np.float32)
    _assert_close(jnp.max(x, initial=10.0), 10.0, np.float32)
    _assert_close(jnp.max(np.zeros((0, 3), np.float32), axis=0, initial=-1.0), [-1.0] * 3, np.float32)
    xi = _rand(np.random.default_rng(6), (3, 4), np.int32)
    _assert_close(jnp.sum(xi, dtype=np.float32), np.sum(xi), np.float32)
    _assert_close(jnp.mean(xi, axis=1, dtype=np.float32), np.mean(xi, axis=1), np.float32)
    assert jnp.sum(np.ones(3, np.uint8)).dtype == np.uint32


def test_sum_dtypes_under_x64(x64):
    assert jnp.sum(np.ones(3, np.int32)).dtype == np.int64
    assert jnp.mean(np.ones(3, np.int32)).dtype == np.float32
    assert jnp.mean(np.ones(3, np.int64)).dtype == np.float64
    assert jnp.argmax(np.ones(3, np.float32)).dtype == np.int64


# ---------------------------------------------------------------------------------------------------------
# nan-reductions

NAN_REDUCTIONS = [("nansum", np.nansum), ("nanprod", np.nanprod), ("nanmean", np.nanmean),
                  ("nanmax", np.nanmax), ("nanmin", np.nanmin), ("nanvar", np.nanvar), ("nanstd", np.nanstd),
                  ("nanmedian", np.nanmedian)]


@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("name,ref", NAN_REDUCTIONS, ids=[n for n, _ in NAN_REDUCTIONS])
def test_nan_reductions(name, ref, axis):
    rng = np.random.default_rng(len(name))
    x = rng.normal(size=(5, 6)).astype(np.float32)
    x[rng.random(x.shape) < 0.3] = np.nan
    x[:, 0] = 1.5  # no all-nan slices along either axis
    x[0, :] = -0.5
    got = getattr(jnp, name)(x, axis=axis)
    _assert_close(got, ref(x.astype(np.float64), axis=axis), np.float32)


def test_nanmax_all_nan_slice_is_nan():
    x = np.array([[np.nan, np.nan], [1.0, np.nan]], np.float32)
    np.testing.assert_array_equal(np.asarray(jnp.nanmax(x, axis=1)), [np.nan, 1.0])


def test_plain_reductions_propagate_nan():
    x = np.array([[1.0, np.nan, 2.0], [3.0, 4.0, 5.0]], np.float32)
    for name in ("sum", "max", "min", "mean", "median"):
        np.testing.assert_array_equal(np.asarray(getattr(jnp, name)(x, axis=1)), getattr(np, name)(x, axis=1))


# ---------------------------------------------------------------------------------------------------------
# quantiles

@pytest.mark.parametrize("method", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("axis,keepdims", [(None, False), (0, False), (1, True), ((0, 2), False)])
def test_quantile_matches_numpy(method, axis, keepdims):
    rng = np.random.default_rng(41)
    x = rng.normal(size=(4, 5, 3)).astype(np.float32)
    q = rng.random(3).astype(np.float32)
    q[0] = 0.5
    got = jnp.quantile(x, q, axis=axis, method=method, keepdims=keepdims)
    want = np.quantile(x.astype(np.float64), q.astype(np.float64), axis=axis, method=method, keepdims=keepdims)
    _assert_close(got, want, np.float32)
    got = jnp.percentile(x, 100 * q[1], axis=axis, method=method)
    want = np.percentile(x.astype(np.float64), 100 * float(q[1]), axis=axis, method=method)
    _assert_close(got, want, np.float32, rtol=1e-4)


def test_nanquantile_and_median_of_ints():
    rng = np.random.default_rng(43)
    x = rng.normal(size=(6, 7)).astype(np.float32)
    x[rng.random(x.shape) < 0.3] = np.nan
    x[:, 0] = 0.25
    _assert_close(jnp.nanquantile(x, 0.3, axis=1), np.nanquantile(x.astype(np.float64), 0.3, axis=1), np.float32)
    _assert_close(jnp.nanpercentile(x, 70, axis=1), np.nanpercentile(x.astype(np.float64), 70, axis=1),
                  np.float32, rtol=1e-4)
    xi = rng.integers(-50, 50, (4, 8)).astype(np.int32)
    _assert_close(jnp.median(xi, axis=1), np.median(xi, axis=1), np.float32)


def test_quantile_bad_method():
    with pytest.raises(ValueError, match="method"):
        jnp.quantile(np.ones(3, np.float32), 0.5, method="cubic")


# ---------------------------------------------------------------------------------------------------------
# average, cumulative ops, diff

def test_average_with_weights():
    rng = np.random.default_rng(51)
    x = rng.normal(size=(4, 5)).astype(np.float32)
    w = rng.random(5).astype(np.float32) + 0.1
    _assert_close(jnp.average(x, axis=1, weights=w), np.average(x.astype(np.float64), axis=1, weights=w), np.float32)
    w2 = rng.random((4, 5)).astype(np.float32) + 0.1
    avg, wsum = jnp.average(x, weights=w2, returned=True)
    want_avg, want_wsum = np.average(x.astype(np.float64), weights=w2, returned=True)
    _assert_close(avg, want_avg, np.float32)
    _assert_close(wsum, want_wsum, np.float32)
    _assert_close(jnp.average(x, axis=0), np.average(x.astype(np.float64), axis=0), np.float32)
    with pytest.raises(ValueError, match="average"):
        jnp.average(x, axis=1, weights=w[:3])


CUMULATIVE = [("cumsum", np.cumsum), ("cumprod", np.cumprod), ("nancumsum", np.nancumsum),
              ("nancumprod", np.nancumprod)]


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("dtype_name", ["float32", "float64", "int32", "bool"])
@pytest.mark.parametrize("name,ref", CUMULATIVE, ids=[n for n, _ in CUMULATIVE])
def test_cumulative(request, name, ref, dtype_name, axis):
    dtype = _dtype(request, dtype_name)
    rng = np.random.default_rng(61)
    x = _rand(rng, (3, 4), dtype)
    if dtype.kind == "f":
        x = (x * 0.5 + 1.0).astype(dtype)
        if name.startswith("nan"):
            x[1, 2] = np.nan
    got = getattr(jnp, name)(x, axis=axis)
    out = _int() if dtype.kind == "b" else dtype
    want = ref(x.astype(np.float64) if dtype.kind == "f" else x, axis=axis)
    _assert_close(got, want, out)


def test_cumsum_keeps_narrow_ints_and_cumulative_sum_initial():
    x = np.arange(1, 7, dtype=np.int8).reshape(2, 3)
    assert jnp.cumsum(x).dtype == np.int8
    # issue 32: cumulative_sum widens narrow ints like sum (JAX 0.10.2), cumsum does not
    _assert_close(jnp.cumulative_sum(x, axis=1, include_initial=True), [[0, 1, 3, 6], [0, 4, 9, 15]], _int())
    assert jnp.cumulative_sum(x.astype(np.uint8), axis=1).dtype == (np.uint64 if _x64() else np.uint32)
    assert jnp.cumulative_prod(x, axis=1).dtype == np.int8


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("axis", [0, -1])
def test_diff(n, axis):
    rng = np.random.default_rng(71 + n)
    x = rng.normal(size=(5, 6)).astype(np.float32)
    _assert_close(jnp.diff(x, n=n, axis=axis), np.diff(x.astype(np.float64), n=n, axis=axis), np.float32)
    _assert_close(jnp.diff(x, n=n, axis=axis, prepend=0.5, append=x[:1] if axis == 0 else x[:, :1]),
                  np.diff(x.astype(np.float64), n=n, axis=axis, prepend=0.5,
                          append=x[:1] if axis == 0 else x[:, :1]), np.float32)
    b = rng.random(8) < 0.5
    np.testing.assert_array_equal(np.asarray(jnp.diff(b)), np.diff(b))


def test_ediff1d():
    x = np.random.default_rng(81).integers(-20, 20, (3, 4)).astype(np.int32)
    _assert_close(jnp.ediff1d(x), np.ediff1d(x), np.int32)
    _assert_close(jnp.ediff1d(x, to_end=np.array([7, 8]), to_begin=-1), np.ediff1d(x, to_end=[7, 8], to_begin=-1),
                  np.int32)  # (JAX refuses a list to_end)


# ---------------------------------------------------------------------------------------------------------
# Errors

@pytest.mark.parametrize("fn", [jnp.sum, jnp.mean, jnp.max, jnp.argmax, jnp.cumsum, jnp.var, jnp.median])
def test_axis_out_of_range(fn):
    with pytest.raises(ValueError, match="axis 2 is out of bounds"):
        fn(np.ones((2, 3), np.float32), axis=2)


def test_duplicate_axis_and_non_integer_axis():
    with pytest.raises(ValueError, match="duplicate"):
        jnp.sum(np.ones((2, 3), np.float32), axis=(0, -2))
    with pytest.raises(TypeError, match="axis"):
        jnp.sum(np.ones((2, 3), np.float32), axis=1.5)


def test_empty_reductions():
    empty = np.zeros((0, 3), np.float32)
    _assert_close(jnp.sum(empty, axis=0), np.zeros(3), np.float32)
    with pytest.raises(ValueError, match="max"):
        jnp.max(empty, axis=0)
    with pytest.raises(ValueError, match="argmin"):
        jnp.argmin(empty)
    with pytest.raises(ValueError, match="initial"):
        jnp.max(np.ones(3, np.float32), where=np.array([True, False, True]))


def test_string_input_raises():
    with pytest.raises(TypeError, match="sum"):
        jnp.sum("abc")


def test_reductions_under_jit():
    x = _rand(np.random.default_rng(91), (4, 5), np.float32)
    f = lambda a: jnp.var(a, axis=1) + jnp.median(a, axis=1) + jnp.max(a, axis=1)  # noqa: E731
    np.testing.assert_allclose(np.asarray(kiln.jit(f)(x)), np.asarray(f(x)), rtol=1e-6)


def test_sum_and_prod_with_dtype_bool():
    # bug (issue 32): jnp.prod/sum/cumsum/cumprod(x, dtype=bool) raised "requires a numeric (non-bool)
    # dtype"; JAX reduces bools with or (sum) and and (prod)
    f = np.array([[0., 1, 2], [3, 0, 5]], np.float32)
    assert bool(jnp.prod(f, dtype=bool)) is False and bool(jnp.sum(f, dtype=bool)) is True
    assert np.asarray(jnp.prod(f, axis=1, dtype=bool)).tolist() == [False, False]
    got = jnp.cumsum(f, axis=1, dtype=bool)
    assert got.dtype == np.bool_ and np.asarray(got).tolist() == [[False, True, True], [True, True, True]]
    assert np.asarray(jnp.cumprod(f, axis=0, dtype=bool)).tolist() == [[False, True, True], [False, False, True]]


def test_list_arguments_raise_as_jax():
    # bug (issue 32): jnp.sum([1, 2, 3]) and every other kiln.numpy function took lists and tuples where
    # JAX's check_arraylike raises TypeError (so do lax functions, x[[0, 1]] and x == [1, 2]); sequences
    # of arrays (stack, concatenate, select, r_) and array constructors still take them
    from kiln import lax
    x = jnp.ones(2)
    for f in (lambda: jnp.sum([1, 2, 3]), lambda: jnp.add([1], [2]), lambda: jnp.where([True, False], 1, 2),
              lambda: jnp.outer([1, 2], [3, 4]), lambda: jnp.take(x, [0, 1]), lambda: jnp.insert(x, [0], 1.0),
              lambda: jnp.stack([[1, 2], [3, 4]]), lambda: lax.add([1.0], [2.0]), lambda: x[[0, 1]],
              lambda: x == [1, 2], lambda: x + [1, 2], lambda: jnp.linalg.norm([1.0, 2.0]),
              lambda: jnp.fft.fft([1.0, 2.0])):
        with pytest.raises(TypeError):
            f()
    assert np.asarray(jnp.stack([x, jnp.zeros(2)])).shape == (2, 2)
    assert np.asarray(jnp.concatenate([x, jnp.zeros(1)])).shape == (3,)
    assert np.asarray(jnp.r_[[1, 2], [3]]).tolist() == [1, 2, 3]
    assert np.asarray(jnp.array([1, 2])).tolist() == [1, 2] and int(jnp.sum(jnp.asarray([1, 2, 3]))) == 6
    assert np.asarray(x[np.array([0, 1])]).shape == (2,) and np.asarray(jnp.ones((2, 2))[:, [0, 1]]).shape == (2, 2)
