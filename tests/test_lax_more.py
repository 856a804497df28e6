"""kiln.lax's extra names (kiln/lax/more.py) against NumPy/SciPy references in float64: XLA gather and scatter
with every kind of dimension number and mode (against explicit loops over the XLA semantics), top_k, the
bit-level ops, cumlogsumexp, the special functions, the shape helpers, locally connected convolution,
ragged_dot and the implicitly differentiated solvers; gradients against finite differences."""

import math

import numpy as np
import pytest
import scipy.special as sp

import kiln
import kiln.numpy as jnp
from kiln import lax


def _fd_grad(f, x, eps=1e-6):
    x = np.asarray(x, np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (float(f(x + e)) - float(f(x - e))) / (2 * eps)
    return g


# ---------------------------------------------------------------------------------------------------------
# gather / scatter: references that walk XLA's definition element by element

def _gather_ref(x, idx, dn, sizes, mode, fill=np.nan):
    batch_shape = idx.shape[:-1]
    window = [d for d in range(x.ndim) if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims]
    out_rank = len(batch_shape) + len(dn.offset_dims)
    batch_out = [i for i in range(out_rank) if i not in dn.offset_dims]
    out_shape = [0] * out_rank
    for o, n in zip(batch_out, batch_shape):
        out_shape[o] = n
    for o, d in zip(dn.offset_dims, window):
        out_shape[o] = sizes[d]
    out = np.empty(out_shape, x.dtype)
    for pos in np.ndindex(*out_shape):
        b = tuple(pos[o] for o in batch_out)
        start, ok = [0] * x.ndim, True
        for k, d in enumerate(dn.start_index_map):
            s = int(idx[b + (k,)])
            lim = x.shape[d] - sizes[d]
            ok &= 0 <= s <= lim
            start[d] = min(max(s, 0), lim)
        for d, bd in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
            start[d] = b[bd]
        full = list(start)
        for o, d in zip(dn.offset_dims, window):
            full[d] += pos[o]
        out[pos] = x[tuple(full)] if ok or mode != "fill" else fill
    return out


def _scatter_ref(x, idx, upd, dn, op, mode):
    out = x.copy()
    window = [d for d in range(x.ndim) if d not in dn.inserted_window_dims and d not in dn.operand_batching_dims]
    scatter_dims = [i for i in range(upd.ndim) if i not in dn.update_window_dims]
    sizes = [1] * x.ndim
    for d, u in zip(window, dn.update_window_dims):
        sizes[d] = upd.shape[u]
    for pos in np.ndindex(*upd.shape):
        b = tuple(pos[i] for i in scatter_dims)
        start, ok = [0] * x.ndim, True
        for k, d in enumerate(dn.scatter_dims_to_operand_dims):
            s = int(idx[b + (k,)])
            lim = x.shape[d] - sizes[d]
            ok &= 0 <= s <= lim
            start[d] = min(max(s, 0), lim) if mode == "clip" else s
        if not ok and mode != "clip":
            continue
        for d, bd in zip(dn.operand_batching_dims, dn.scatter_indices_batching_dims):
            start[d] = b[bd]
        for d, u in zip(window, dn.update_window_dims):
            start[d] += pos[u]
        t = tuple(start)
        out[t] = {"add": lambda a, v: a + v, "mul": lambda a, v: a * v, "min": min, "max": max,
                  "sub": lambda a, v: a - v}[op](out[t], upd[pos])
    return out


GATHER_CASES = [  # (operand shape, indices shape, dimension numbers, slice sizes)
    ((5, 6, 7), (4, 3, 2), lax.GatherDimensionNumbers((2,), (0, 1), (0, 1)), (1, 1, 7)),
    ((5, 6, 7), (4, 3, 2), lax.GatherDimensionNumbers((0, 2), (1,), (2, 1)), (3, 1, 2)),
    ((5, 6, 7), (5, 4, 1), lax.GatherDimensionNumbers((2,), (1,), (1,), (0,), (0,)), (1, 1, 7)),
    ((6, 4), (3, 1), lax.GatherDimensionNumbers((1, 2), (), (0,)), (2, 4)),
]


@pytest.mark.parametrize("case", range(len(GATHER_CASES)))
@pytest.mark.parametrize("mode", ["clip", "fill", None])
def test_gather_follows_xla_semantics_out_of_bounds_included(x64, case, mode):
    shape, ishape, dn, sizes = GATHER_CASES[case]
    rng = np.random.default_rng(case)
    x = rng.normal(size=shape)
    idx = rng.integers(-2, max(shape) + 1, size=ishape)
    if dn.operand_batching_dims:
        idx = np.clip(idx, 0, shape[1] - 1)
    got = lax.gather(x, idx, dn, sizes, mode=mode)
    np.testing.assert_array_equal(np.asarray(got), _gather_ref(x, idx, dn, sizes, mode or "clip"))


def test_gather_as_numpy_take_rows_with_fill_value_and_int_fill(x64):
    x = np.arange(20).reshape(5, 4)
    idx = np.array([[0], [4], [7], [-1]])
    dn = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
    got = np.asarray(lax.gather(x, idx, dn, (1, 4), mode="fill"))
    np.testing.assert_array_equal(got[:2], x[[0, 4]])
    assert np.all(got[2:] == np.iinfo(got.dtype).min)  # JAX's default fill for signed integers
    got = lax.gather(x, idx, dn, (1, 4), mode="fill", fill_value=-7)
    np.testing.assert_array_equal(np.asarray(got)[2:], -7)


def test_gather_gradient_jit_and_vmap(x64):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 3))
    idx = np.array([[1], [0], [1], [3]])
    dn = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))

    def f(v):
        return (lax.gather(v, idx, dn, (1, 3)) ** 2).sum()
    np.testing.assert_allclose(np.asarray(kiln.grad(f)(x)), _fd_grad(f, x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(np.asarray(kiln.jit(lambda v, i: lax.gather(v, i, dn, (1, 3)))(x, idx)), x[idx[:, 0]])
    batched = kiln.vmap(lambda v: lax.gather(v, idx, dn, (1, 3)))(np.stack([x, -x]))
    np.testing.assert_allclose(np.asarray(batched), np.stack([x[idx[:, 0]], -x[idx[:, 0]]]))


SCATTER_CASES = [  # (operand shape, indices shape, updates shape, dimension numbers)
    ((5, 6, 7), (4, 3, 2), (4, 3, 7), lax.ScatterDimensionNumbers((2,), (0, 1), (0, 1))),
    ((5, 6, 7), (4, 3, 2), (3, 4, 2, 3), lax.ScatterDimensionNumbers((0, 2), (1,), (2, 1))),
    ((5, 6, 7), (5, 4, 1), (5, 4, 7), lax.ScatterDimensionNumbers((2,), (1,), (1,), (0,), (0,))),
]


@pytest.mark.parametrize("case", range(len(SCATTER_CASES)))
@pytest.mark.parametrize("op,mode", [("add", None), ("add", "clip"), ("mul", "drop"), ("min", None),
                                     ("max", "clip"), ("sub", None)])
def test_scatter_family_follows_xla_semantics(x64, case, op, mode):
    shape, ishape, ushape, dn = SCATTER_CASES[case]
    rng = np.random.default_rng(10 + case)
    x = rng.normal(size=shape)
    idx = rng.integers(-2, max(shape) + 1, size=ishape)
    if dn.operand_batching_dims:
        idx = np.clip(idx, 0, shape[1] - 1)
    upd = rng.normal(size=ushape)
    got = getattr(lax, f"scatter_{op}")(x, idx, upd, dn, mode=mode)
    np.testing.assert_allclose(np.asarray(got), _scatter_ref(x, idx, upd, dn, op, mode), rtol=1e-12)


def test_scatter_sets_unique_indices_and_scatter_apply_repeats_per_hit(x64):
    x = np.arange(10.0)
    dn = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                     scatter_dims_to_operand_dims=(0,))
    idx = np.array([[7], [2], [11]])
    np.testing.assert_array_equal(np.asarray(lax.scatter(x, idx, np.array([-1.0, -2.0, -3.0]), dn)),
                                  [0, 1, -2, 3, 4, 5, 6, -1, 8, 9])
    twice = np.array([[3], [3], [5]])  # func runs once per hit, as XLA applies a scatter's combiner
    got = lax.scatter_apply(x, twice, lambda v: v * 2 + 1, dn, update_shape=(3,))
    np.testing.assert_array_equal(np.asarray(got), [0, 1, 2, 15, 4, 11, 6, 7, 8, 9])


def test_scatter_add_gradient_drops_out_of_bounds_updates(x64):
    dn = lax.ScatterDimensionNumbers((1,), (0,), (0,))
    idx = np.array([[1], [7], [1]])
    w = np.arange(8.0).reshape(4, 2)

    def f(u):
        return (lax.scatter_add(np.ones((4, 2)), idx, u.reshape(3, 2), dn) * w).sum()
    g = np.asarray(kiln.grad(f)(np.ones(6)))
    np.testing.assert_allclose(g, [2, 3, 0, 0, 2, 3])


def test_index_take_wraps_negative_indices(x64):
    x = np.arange(60.0).reshape(3, 4, 5)
    got = lax.index_take(x, (np.array([0, -1]), np.array([4, -2])), (0, 2))
    np.testing.assert_array_equal(np.asarray(got), x[[0, 2], :, [4, 3]])


# ---------------------------------------------------------------------------------------------------------
# top_k and friends

def test_top_k_descending_ties_lower_index_first(x64):
    rng = np.random.default_rng(4)
    x = rng.integers(0, 4, size=(3, 9)).astype(np.float64)
    vals, idx = lax.top_k(x, 4)
    order = np.argsort(-x, axis=-1, kind="stable")[:, :4]
    np.testing.assert_array_equal(np.asarray(idx), order)
    np.testing.assert_array_equal(np.asarray(vals), np.take_along_axis(x, order, -1))
    assert idx.dtype == np.int32
    v0, i0 = lax.top_k(x, 2, axis=0)
    np.testing.assert_array_equal(np.asarray(i0), np.argsort(-x, axis=0, kind="stable")[:2])
    lo, lo_idx = lax.approx_min_k(x, 3)
    np.testing.assert_array_equal(np.asarray(lo_idx), np.argsort(x, axis=-1, kind="stable")[:, :3])
    with pytest.raises(ValueError, match="nonnegative"):
        lax.top_k(x, -1)


def test_top_k_of_integers_including_the_minimum():
    x = np.array([5, np.iinfo(np.int32).min, 7, -3], np.int32)
    vals, idx = lax.top_k(x, 4)
    np.testing.assert_array_equal(np.asarray(vals), [7, 5, -3, np.iinfo(np.int32).min])
    np.testing.assert_array_equal(np.asarray(idx), [2, 0, 3, 1])


def test_dynamic_index_in_dim_counts_negative_indices_from_the_end(x64):
    x = np.arange(24.0).reshape(4, 6)
    np.testing.assert_array_equal(np.asarray(lax.dynamic_index_in_dim(x, -2, 1, keepdims=False)), x[:, -2])
    traced = kiln.jit(lambda v, i: lax.dynamic_index_in_dim(v, i, 0))(x, np.int32(-1))
    np.testing.assert_array_equal(np.asarray(traced), x[-1:])
    got = lax.dynamic_update_index_in_dim(x, np.zeros(4), -1, 1)
    want = x.copy()
    want[:, -1] = 0
    np.testing.assert_array_equal(np.asarray(got), want)


def test_cumlogsumexp_matches_logaddexp_accumulate_and_gradient(x64):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(3, 6)) * 20
    np.testing.assert_allclose(np.asarray(lax.cumlogsumexp(x, 1)), np.logaddexp.accumulate(x, 1), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(lax.cumlogsumexp(x, 0, reverse=True)),
                               np.logaddexp.accumulate(x[::-1], 0)[::-1], rtol=1e-12)
    edge = np.array([-np.inf, -np.inf, 0.0, np.inf])
    np.testing.assert_array_equal(np.asarray(lax.cumlogsumexp(edge)), np.logaddexp.accumulate(edge))
    v = x[0] / 20

    def f(u):
        return (lax.cumlogsumexp(u) * np.arange(6)).sum()
    np.testing.assert_allclose(np.asarray(kiln.grad(f)(v)), _fd_grad(f, v), rtol=1e-6)


# ---------------------------------------------------------------------------------------------------------
# Bit-level ops

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nextafter_matches_numpy_at_zeros_infinities_nans_and_subnormals(x64, dtype):
    f = np.array([0., -0., 1., -1., np.inf, -np.inf, np.nan, 1e-45, 3e38, 2.0, 0.0], dtype)
    g = np.array([1., -1., 0., -2., 0., 0., 1., 0., np.inf, 2.0, -0.0], dtype)
    got = np.asarray(lax.nextafter(f, g))
    want = np.nextafter(f, g)
    np.testing.assert_array_equal(got.view(np.dtype(f"u{f.itemsize}")), want.view(np.dtype(f"u{f.itemsize}")))


INT_DTYPES = [np.int8, np.uint8, np.int16, np.int32, np.uint32, np.int64, np.uint64]


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_population_count_clz_and_mulhi_against_python_integers(x64, dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(6)
    a = rng.integers(info.min, info.max, size=40, dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, size=40, dtype=dtype, endpoint=True)
    a[:2] = [info.min, info.max]
    bits = info.bits
    unsigned = [int(v) % (1 << bits) for v in a]
    np.testing.assert_array_equal(np.asarray(lax.population_count(a)), [bin(u).count("1") for u in unsigned])
    np.testing.assert_array_equal(np.asarray(lax.clz(a)), [bits - u.bit_length() for u in unsigned])
    hi = [((int(u) * int(v)) >> bits) for u, v in zip(a, b)]
    want = np.array([h % (1 << bits) for h in hi], dtype=np.dtype(f"u{info.bits // 8}")).view(dtype)
    np.testing.assert_array_equal(np.asarray(lax.mulhi(a, b)), want)


def test_reduce_precision_rounds_like_a_narrower_float(x64):
    import ml_dtypes
    rng = np.random.default_rng(7)
    x = (rng.normal(size=200) * 10.0 ** rng.integers(-3, 4, size=200)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(lax.reduce_precision(x, 8, 7)),
                                  x.astype(ml_dtypes.bfloat16).astype(np.float32))
    x = x[np.abs(x) >= np.finfo(np.float16).tiny]  # XLA flushes the narrower type's subnormals to zero
    np.testing.assert_array_equal(np.asarray(lax.reduce_precision(x, 5, 10)), x.astype(np.float16).astype(np.float32))
    big = np.array([1e6, -1e6, 1e-6, np.nan, np.inf], np.float32)  # past float16's normal range: inf, 0
    got = np.asarray(lax.reduce_precision(big, 5, 10))
    np.testing.assert_array_equal(got[:3], [np.inf, -np.inf, 0.0])
    assert np.isnan(got[3]) and got[4] == np.inf


def test_reduce_precision_gradient_rounds_the_cotangent():
    # bug (issue 32, fuzzer): the bit-level rounding had a zero gradient; JAX treats reduce_precision as
    # linear, so grad is the cotangent rounded the same way (values pinned from JAX 0.10.2)
    x = np.array([-1.084, 0.524, 3.0], np.float32)
    w = np.array([1.0, 1.1, 1.3], np.float32)

    def f(x):
        return jnp.sum(lax.reduce_precision(x, 5, 10) * w)

    want = [1.0, 1.0996094, 1.2998047]
    for g in (kiln.grad(f), kiln.jit(kiln.grad(f)), kiln.grad(kiln.jit(f))):
        np.testing.assert_array_equal(np.asarray(g(x)), np.array(want, np.float32))
    np.testing.assert_array_equal(np.asarray(kiln.vmap(kiln.grad(f))(x[None]))[0], np.array(want, np.float32))
    _, t = kiln.jvp(lambda x: lax.reduce_precision(x, 8, 7), (x,), (x * 3.3,))
    np.testing.assert_array_equal(np.asarray(t), np.array([-3.578125, 1.7265625, 9.875], np.float32))


def test_reduce_xor_over_axes():
    x = np.random.default_rng(8).integers(0, 1000, size=(3, 5)).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(lax.reduce_xor(x, (1,))), np.bitwise_xor.reduce(x, axis=1))


# ---------------------------------------------------------------------------------------------------------
# Special functions (kiln.scipy.special underneath)

def test_special_functions_against_scipy(x64):
    rng = np.random.default_rng(9)
    a, x, b, t = rng.uniform(0.5, 4, 8), rng.uniform(0.1, 6, 8), rng.uniform(0.5, 3, 8), rng.uniform(0, 1, 8)
    np.testing.assert_allclose(np.asarray(lax.igamma(a, x)), sp.gammainc(a, x), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(lax.igammac(a, x)), sp.gammaincc(a, x), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(lax.betainc(a, b, t)), sp.betainc(a, b, t), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(lax.zeta(a + 1, x)), sp.zeta(a + 1, x), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(lax.polygamma(np.full(8, 2.0), x)), sp.polygamma(2, x), rtol=1e-9)
    np.testing.assert_allclose(np.asarray(lax.bessel_i0e(x - 3)), sp.i0e(x - 3), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(lax.bessel_i1e(x - 3)), sp.i1e(x - 3), rtol=1e-12)
    eps = 1e-6
    fd = (sp.gammainc(a + eps, x) - sp.gammainc(a - eps, x)) / (2 * eps)
    np.testing.assert_allclose(np.asarray(lax.igamma_grad_a(a, x)), fd, rtol=1e-6, atol=1e-9)
    u = sp.gammainc(a, x)  # x(a) at the fixed quantile u: dx/da by finite differences of gammaincinv
    fd = (sp.gammaincinv(a + eps, u) - sp.gammaincinv(a - eps, u)) / (2 * eps)
    np.testing.assert_allclose(np.asarray(lax.random_gamma_grad(a, x)), fd, rtol=1e-5)
    with pytest.raises(TypeError, match="lax.igamma requires arguments to have the same dtypes"):
        lax.igamma(np.ones(2, np.float32), np.ones(2, np.float64))


# ---------------------------------------------------------------------------------------------------------
# Shapes, convolution helpers, ragged dot

def test_shape_helpers_match_numpy():
    x = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(np.asarray(lax.tile(x, (2, 1, 3))), np.tile(x, (2, 1, 3)))
    parts = lax.split(x, (1, 3), axis=2)
    np.testing.assert_array_equal(np.asarray(parts[1]), x[:, :, 1:])
    np.testing.assert_array_equal(np.asarray(lax.collapse(x, 1)), x.reshape(2, 12))
    np.testing.assert_array_equal(np.asarray(lax.stack(lax.unstack(x, 1), 2)), np.moveaxis(x, 1, 2))
    assert lax.broadcast_shapes((3, 1), (1, 4), ()) == (3, 4)
    assert lax.broadcast_to_rank(np.ones(3), 3).shape == (1, 1, 3)
    assert lax.empty((2, 3), np.int32).shape == (2, 3)
    assert lax.dtype(1.0) == lax.dtype(np.float64) == lax.dtype(np.ones(2)) == np.float32  # canonical, x64 off
    assert lax.dtype(jnp.int32) == np.int32
    with pytest.raises(ValueError, match="add up"):
        lax.split(x, (1, 2), axis=2)


@pytest.mark.parametrize("padding", ["SAME", "VALID", [(1, 0), (2, 1)]])
def test_conv_shape_tuples_agree_with_the_convolutions(padding):
    dn = ("NHWC", "HWIO", "NHWC")
    lhs, rhs = np.ones((2, 9, 8, 3), np.float32), np.ones((3, 2, 3, 4), np.float32)
    out = lax.conv_general_dilated(lhs, rhs, (2, 1), padding, dimension_numbers=dn)
    assert lax.conv_general_shape_tuple(lhs.shape, rhs.shape, (2, 1), padding, dn) == out.shape
    assert lax.conv_general_permutations(dn) == ((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
    if isinstance(padding, str):
        t = lax.conv_transpose(lhs, rhs, (2, 1), padding, dimension_numbers=dn)
        assert lax.conv_transpose_shape_tuple(lhs.shape, rhs.shape, (2, 1), padding, dn) == t.shape
    assert lax.reduce_window_shape_tuple((9, 8), (3, 2), (2, 1), ((1, 1), (0, 2)), (1, 2), (2, 1)) == (4, 16)


def test_conv_general_dilated_local_has_one_filter_per_position(x64):
    rng = np.random.default_rng(11)
    lhs = rng.normal(size=(2, 3, 6, 5))
    rhs = rng.normal(size=(4, 3 * 2 * 2, 5, 4))  # (out feature, in feature x window, output positions)
    got = np.asarray(lax.conv_general_dilated_local(lhs, rhs, (1, 1), "VALID", (2, 2),
                                                    dimension_numbers=("NCHW", "OIHW", "NCHW")))
    want = np.zeros((2, 4, 5, 4))
    for i in range(5):
        for j in range(4):
            patch = lhs[:, :, i:i + 2, j:j + 2].reshape(2, -1)  # (c, h, w) order, as the patches
            want[:, :, i, j] = patch @ rhs[:, :, i, j].T
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_ragged_dot_uses_each_rows_group(x64):
    rng = np.random.default_rng(12)
    a, b = rng.normal(size=(10, 4)), rng.normal(size=(3, 4, 5))
    sizes = np.array([3, 0, 5], np.int32)
    want = np.zeros((10, 5))
    want[:3], want[3:8] = a[:3] @ b[0], a[3:8] @ b[2]
    np.testing.assert_allclose(np.asarray(lax.ragged_dot(a, b, sizes)), want, rtol=1e-12)


def test_custom_root_and_custom_linear_solve_differentiate_implicitly(x64):
    def sqrt_by_newton(c):
        f = lambda y: y * y - c  # noqa: E731

        def solve(g, y0):
            return lax.fori_loop(0, 30, lambda i, y: y - g(y) / (2 * y), y0)
        return lax.custom_root(f, 1.0, solve, lambda g, y: y / g(1.0))
    assert abs(float(sqrt_by_newton(2.0)) - math.sqrt(2)) < 1e-12
    assert abs(float(kiln.grad(sqrt_by_newton)(2.0)) - 0.5 / math.sqrt(2)) < 1e-10
    rng = np.random.default_rng(13)
    A, b = rng.normal(size=(3, 3)) + 3 * np.eye(3), rng.normal(size=3)

    def solve(A, b):
        return lax.custom_linear_solve(lambda v: A @ v, b, lambda mv, r: jnp.linalg.solve(A, r))
    np.testing.assert_allclose(np.asarray(solve(A, b)), np.linalg.solve(A, b), rtol=1e-12)

    def loss(A):
        return solve(A, b).sum()
    np.testing.assert_allclose(np.asarray(kiln.grad(loss)(A)), _fd_grad(loss, A), rtol=1e-6, atol=1e-8)


def test_unsupported_and_api_only_names():
    with pytest.raises(NotImplementedError, match="stateful"):
        lax.rng_uniform(0.0, 1.0, (2,))
    key, bits = lax.rng_bit_generator(np.array([1, 2, 3, 4], np.uint32), (3, 2), np.uint8)
    assert key.shape == (4,) and bits.shape == (3, 2) and bits.dtype == np.uint8
    assert lax.with_sharding_constraint(3, None) == 3
    assert lax.platform_dependent(1.0, cpu=lambda v: v + 1, cuda=lambda v: v + 2, default=lambda v: v) in (2.0, 3.0)
    assert float(lax.composite(lambda v: v * 2, "double")(np.float32(3))) == 6.0


def test_bitcast_convert_type_across_widths():
    # bug (issue 32): bitcast_convert_type refused every width change and float16/bfloat16; JAX adds a
    # trailing axis of the width ratio going narrower (low byte first) and removes it going wider
    one = lax.bitcast_convert_type(jnp.float32(1.0), np.uint8)
    assert one.dtype == np.uint8 and np.asarray(one).tolist() == [0, 0, 128, 63]
    back = lax.bitcast_convert_type(jnp.asarray(np.array([[0, 0, 128, 63], [0, 0, 0, 192]], np.uint8)), np.float32)
    assert back.dtype == np.float32 and np.asarray(back).tolist() == [1.0, -2.0]
    x = np.array([1.5, -3.25, 7e-3], np.float32)
    for dt in (np.int16, np.float16, jnp.bfloat16, np.int8):
        out = lax.bitcast_convert_type(x, dt)
        np.testing.assert_array_equal(np.asarray(out).view(np.uint8).ravel(), x.view(np.uint8))
        np.testing.assert_array_equal(np.asarray(lax.bitcast_convert_type(out, np.float32)), x)
    h = lax.bitcast_convert_type(jnp.asarray(np.array([1.0, -0.5], np.float16)), np.uint16)
    assert np.asarray(h).tolist() == [15360, 47104]
    assert kiln.jit(kiln.vmap(lambda v: lax.bitcast_convert_type(v, np.uint16)))(jnp.ones((2, 3))).shape == (2, 3, 2)
    with pytest.raises(ValueError):
        lax.bitcast_convert_type(jnp.zeros((3, 2), np.uint8), np.float32)
    with pytest.raises(TypeError):
        lax.bitcast_convert_type(jnp.zeros((3,), np.float32), np.bool_)


def test_float16_and_bfloat16_bit_tricks():
    # bug (issue 32): spacing/nextafter/reduce_precision in float16 failed in bitcast_convert_type, and in
    # bfloat16 (numpy kind "V", not "f") cumlogsumexp, nextafter and segment_max refused the dtype
    x = jnp.asarray(np.array([1.0, -2.5, 0.0, 3e-3, np.inf], np.float32))
    f16, bf16 = np.float16, jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(jnp.spacing(x.astype(f16))).astype(np.float64),
                                  [0.0009765625, 0.001953125, 5.960464477539063e-08, 1.9073486328125e-06, np.nan])
    np.testing.assert_array_equal(np.asarray(jnp.nextafter(x.astype(f16), jnp.asarray(10, f16))).astype(np.float64),
                                  [1.0009765625, -2.498046875, 5.960464477539063e-08, 0.003002166748046875, 65504.0])
    np.testing.assert_array_equal(np.asarray(jnp.spacing(x.astype(bf16))).astype(np.float64),
                                  [0.0078125, -0.015625, 9.183549615799121e-41, 1.52587890625e-05, np.nan])
    np.testing.assert_array_equal(np.asarray(jnp.nextafter(x.astype(bf16), jnp.asarray(10, bf16))).astype(np.float64),
                                  [1.0078125, -2.484375, 9.183549615799121e-41, 0.003021240234375, 3.3895313892515355e+38])
    got = lax.cumlogsumexp(jnp.asarray([1., 2, 3], bf16))
    assert got.dtype == bf16 and np.asarray(got).astype(float).tolist() == [1.0, 2.3125, 3.40625]
    got = kiln.ops.segment_max(jnp.asarray([1., 2, 3], bf16), jnp.asarray([0, 0, 2]), 3)
    assert np.asarray(got).astype(float).tolist() == [2.0, -np.inf, 3.0]
    assert np.asarray(lax.reduce_precision(jnp.asarray([1.2345, 70000.], f16), 5, 2)).astype(float).tolist() == [1.25, np.inf]
    with pytest.raises(ValueError, match="floating"):  # as JAX: approx_min_k/approx_max_k take floats only
        lax.approx_min_k(jnp.asarray([3, 1, 2]), 1)
