"""kiln.vmap against a Python loop over the examples (each example run eagerly, results stacked
with jnp.stack), on fresh random float64 inputs: one or more cases per primitive family's batching
rule (transforms/vmap.c), with batched and unbatched operands mixed, the in_axes/out_axes forms,
composition with jit and grad, and the user errors."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax

B = 3  # batch size used throughout (small: every new shape compiles)


@pytest.fixture(autouse=True)
def _float64_everywhere(x64):
    """Every vmap check here runs in 64-bit mode (x64 fixture: conftest.py)."""
    yield


def rnd(*shape):
    return np.random.default_rng().standard_normal(shape)


def loop(f, args, in_axes=0, out_axes=0):
    """The reference: f on each example, outputs stacked along out_axes."""
    axes = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
    n = {np.shape(a)[ax] for a, ax in zip(args, axes) if ax is not None}.pop()
    outs = []
    for i in range(n):
        ex = [jnp.asarray(a) if ax is None else jnp.asarray(np.take(np.asarray(a), i, axis=ax))
              for a, ax in zip(args, axes)]
        outs.append(f(*ex))
    return kiln.tree_map(lambda *ys: jnp.stack(ys, axis=out_axes), *outs)


def check(f, *args, in_axes=0, out_axes=0, rtol=1e-12, atol=1e-12):
    got = kiln.vmap(f, in_axes=in_axes, out_axes=out_axes)(*args)
    want = loop(f, args, in_axes, out_axes)
    got_l, got_t = kiln.tree_flatten(got)
    want_l, want_t = kiln.tree_flatten(want)
    assert got_t == want_t
    for g, w in zip(got_l, want_l):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)
    return got


# ---- elementwise, select, convert, literals, iota ----

def test_unary_and_binary_elementwise():
    x, y = rnd(B, 4), rnd(B, 4)
    check(lambda a: jnp.sin(a) * jnp.exp(a) - jnp.abs(a), x)
    check(lambda a, b: a * b + 2.0, x, y)
    check(lambda a, b: lax.max(a, b) / (1.0 + b * b), x, y[0], in_axes=(0, None))
    check(lambda a, b: lax.atan2(a, b), x, y[0], in_axes=(0, None))
    check(lambda a: lax.integer_pow(a, 3), x)


def test_rank0_operands_mix_with_batched_and_unbatched_arrays():
    s, m = rnd(B), rnd(4, 5)
    check(lambda a, b: a * b, s, m, in_axes=(0, None))            # batched scalar x unbatched matrix
    check(lambda a, b: lax.sub(a, b), s[0], rnd(B, 4, 5), in_axes=(None, 0))  # unbatched scalar x batched matrix
    check(lambda a, b: lax.add(a, b), s, np.float64(1.5), in_axes=(0, None))  # rank 0 with rank 0
    check(lambda a, b: lax.mul(b, a), s[0], rnd(B, 2), in_axes=(None, 0))     # unbatched scalar x batched
    check(lambda a, b: lax.pow(lax.abs(a), b), rnd(B, 2), s, in_axes=(0, 0))  # batched (2,) with batched scalar


def test_compare_select_convert_clamp():
    x, y = rnd(B, 5), rnd(5)
    check(lambda a, b: jnp.where(a > b, a, b * 2), x, y, in_axes=(0, None))
    check(lambda a: jnp.where(a > 0, a, 0.0), x)
    check(lambda a: (a * 10).astype(jnp.int32), x)
    check(lambda a: lax.clamp(-0.5, a, 0.5), x)
    check(lambda p, a, b: lax.select(p, a, b), x > 0, x, y, in_axes=(0, 0, None))
    check(lambda p, a, b: lax.select(p, a, b), rnd(5) > 0, x, y, in_axes=(None, 0, None))


def test_literal_and_iota_are_unbatched_until_mixed():
    x = rnd(B, 4)
    check(lambda a: a + jnp.arange(4.0), x)
    check(lambda a: a * lax.broadcasted_iota(jnp.float64, (4,), 0) + 3, x)
    # an output that does not depend on the mapped input is broadcast to the batch
    check(lambda a: (a.sum(), jnp.arange(3)), x)


# ---- structural ----

def test_broadcast_reshape_transpose():
    x = rnd(B, 2, 3)
    check(lambda a: jnp.broadcast_to(a, (4, 2, 3)), x)
    check(lambda a: lax.broadcast_in_dim(a[:, 0], (2, 5), (0,)), x)
    check(lambda a: a.reshape(3, 2), x)
    check(lambda a: a.reshape(-1), x)
    check(lambda a: a.T, x)
    check(lambda a: lax.transpose(a[None], (2, 0, 1)), x)


def test_rev_slice_pad():
    x = rnd(B, 5, 4)
    check(lambda a: lax.rev(a, (1,)), x)
    check(lambda a: a[1:4, ::2], x)
    check(lambda a: lax.slice(a, (0, 1), (5, 4), (2, 2)), x)
    check(lambda a: lax.pad(a, 0.5, ((1, 2, 0), (0, 0, 1))), x)
    check(lambda a: lax.pad(a, -1.0, ((-1, 2, 1), (2, -1, 0))), x)


def test_pad_with_batched_padding_value():
    x, v = rnd(B, 4), rnd(B)
    check(lambda a, p: lax.pad(a, p, ((2, -1, 1),)), x, v)
    check(lambda a, p: lax.pad(a, p, ((1, 1, 0),)), x[0], v, in_axes=(None, 0))


def test_concatenate_mixed():
    x, y = rnd(B, 2, 3), rnd(4, 3)
    check(lambda a, b: jnp.concatenate([a, b, a]), x, y, in_axes=(0, None))
    check(lambda a, b: jnp.concatenate([b.T, a.T], axis=1), x, y, in_axes=(0, None))


# ---- reductions, cumulative, sort ----

def test_reductions_and_arg_reductions():
    x = rnd(B, 4, 5)
    check(lambda a: a.sum(axis=1), x)
    check(lambda a: (a.max(axis=0), a.min(), a.prod(axis=(0, 1))), x)
    check(lambda a: (jnp.all(a > -1, axis=0), jnp.any(a > 1)), x)
    check(lambda a: (jnp.argmax(a, axis=1), jnp.argmin(a, axis=0)), x)


def test_cumulative_ops():
    x = rnd(B, 4, 3)
    check(lambda a: jnp.cumsum(a, axis=0), x)
    check(lambda a: lax.cumprod(a, axis=1, reverse=True), x)
    check(lambda a: (lax.cummax(a, axis=0), lax.cummin(a, axis=1)), x)


def test_sort():
    x, y = rnd(B, 4, 6), rnd(4, 6)
    check(lambda a: jnp.sort(a, axis=0), x)
    check(lambda a: jnp.argsort(a, axis=-1), x)
    check(lambda a, b: lax.sort((a, b), dimension=1, num_keys=1), x, y, in_axes=(0, None))
    check(lambda a, b: lax.sort((b, a), dimension=0, num_keys=1), x, y, in_axes=(0, None))


# ---- dot_general ----

def test_batched_matvec_closure():
    M = jnp.asarray(rnd(4, 3))
    v = rnd(B, 3)
    got = kiln.vmap(lambda w: M @ w)(v)
    np.testing.assert_allclose(np.asarray(got), v @ np.asarray(M).T, rtol=1e-12)


def test_dot_general_batched_sides():
    a, b = rnd(B, 4, 3), rnd(B, 3, 2)
    check(lambda p, q: p @ q, a, b)                            # both
    check(lambda p, q: p @ q, a, b[0], in_axes=(0, None))      # lhs only
    check(lambda p, q: p @ q, a[0], b, in_axes=(None, 0))      # rhs only
    check(lambda p, q: jnp.dot(p, q), rnd(B, 3), b, in_axes=(0, 0))
    check(lambda p, q: p @ q, rnd(4, 3, B), rnd(3, 5), in_axes=(2, None), out_axes=1)


def test_dot_general_with_inner_batch_dims():
    a, b = rnd(B, 2, 4, 3), rnd(B, 2, 3, 5)
    dims = (((2,), (1,)), ((0,), (0,)))
    check(lambda p, q: lax.dot_general(p, q, dims), a, b)
    check(lambda p, q: lax.dot_general(p, q, dims), a, b[0], in_axes=(0, None))
    check(lambda p, q: lax.dot_general(p, q, dims), a[0], b, in_axes=(None, 0))
    check(lambda p, q: jnp.einsum("ij,kj->ik", p, q), rnd(B, 4, 3), rnd(5, 3), in_axes=(0, None))


# ---- dynamic_slice / dynamic_update_slice ----

def test_dynamic_slice_unbatched_and_batched_indices():
    x = rnd(B, 6, 5)
    check(lambda a: lax.dynamic_slice(a, (2, 1), (3, 2)), x)
    i = np.array([0, 4, 9], np.int32)      # 9 is clamped to 6 - 3
    j = np.array([-3, 1, 2], np.int32)     # -3 is clamped to 0
    check(lambda a, p, q: lax.dynamic_slice(a, (p, q), (3, 2)), x, i, j)
    check(lambda a, p: lax.dynamic_slice(a, (p, np.int32(1)), (3, 2)), x[0], i, in_axes=(None, 0))
    check(lambda a, p: lax.dynamic_slice(a, (p, np.int32(1)), (3, 4)), x, i, in_axes=(0, 0))


def test_batched_indices_of_wide_or_unsigned_dtypes_do_not_wrap():
    # regression guard: flattened-gather indices are int32; a uint32 start of 2**32-1 or an int64
    # start of 2**33 must clamp to the last window, not wrap around to a small index
    x = rnd(B, 6)
    u = np.array([2**32 - 1, 1, 0], np.uint32)
    check(lambda a, p: lax.dynamic_slice(a, (p,), (2,)), x, u)
    w = np.array([2**33, 3, -2**33], np.int64)
    check(lambda a, p: lax.dynamic_slice(a, (p,), (2,)), x, w)
    check(lambda a, i: lax._take(a, i, 0), x, np.array([[2**33], [2], [5]], np.int64))


def test_dynamic_update_slice_unbatched_and_batched_indices():
    x, u = rnd(B, 6, 5), rnd(B, 2, 3)
    check(lambda a, v: lax.dynamic_update_slice(a, v, (1, 2)), x, u)
    check(lambda a, v: lax.dynamic_update_slice(a, v, (1, 2)), x[0], u, in_axes=(None, 0))
    i = np.array([5, 0, 2], np.int32)
    check(lambda a, v, p: lax.dynamic_update_slice(a, v, (p, p)), x, u, i)
    check(lambda a, v, p: lax.dynamic_update_slice(a, v, (p, np.int32(0))), x[0], u[0], i, in_axes=(None, None, 0))


# ---- take / scatter (integer-array indexing) ----

def test_take_batched_operand_and_or_indices():
    x = rnd(B, 5, 4)
    idx = np.random.default_rng().integers(0, 5, size=(B, 2, 3)).astype(np.int32)
    check(lambda a, i: lax._take(a, i, 0), x, idx[0], in_axes=(0, None))
    check(lambda a, i: lax._take(a, i, 1), x[0], idx % 4, in_axes=(None, 0))
    check(lambda a, i: lax._take(a, i, 0), x, idx)
    check(lambda a, i: lax._take(a, i, 1), x, idx % 4)
    big = idx.copy()
    big[1, 0, 0] = 17   # clamped within its own example, not into the next one
    check(lambda a, i: lax._take(a, i, 0), x, big)
    check(lambda a, i: a[i], x, idx[:, 0])   # jnp fancy indexing


def test_scatter_batched_operand_and_or_indices():
    x = rnd(B, 5, 4)
    idx = np.array([[0, 3], [4, 4], [1, 7]], np.int32)  # duplicates; 7 is out of bounds (dropped)
    upd = rnd(B, 2, 4)
    for op in ("set", "add", "max"):
        f = lambda a, i, u, op=op: lax._scatter(a, i, u, 0, op)
        if op != "set":  # with duplicate indices, 'set' leaves the winner unspecified
            check(f, x, idx, upd)
            check(f, x[0], idx, upd, in_axes=(None, 0, 0))
        check(f, x, idx[0], upd, in_axes=(0, None, 0))
        check(f, x, idx[0], upd[0], in_axes=(0, None, None))
    check(lambda a, i, u: lax._scatter(a, i, u, 1, "add"), x, idx % 4, rnd(B, 5, 2))
    check(lambda a, i, u: a.at[i].add(u), x, idx[:, 0], rnd(B, 4))


# ---- linear algebra ----

def test_linalg_maps_over_leading_batch():
    a = rnd(B, 4, 4)
    spd = a @ np.swapaxes(a, 1, 2) + 4 * np.eye(4)
    check(lambda m: jnp.linalg.cholesky(m), spd, rtol=1e-10, atol=1e-10)
    check(lambda m, b: jnp.linalg.solve(m, b), spd, rnd(B, 4), rtol=1e-9, atol=1e-9)
    check(lambda m: jnp.linalg.eigh(m)[0], spd, rtol=1e-9, atol=1e-9)
    check(lambda m: lax.linalg.triangular_solve(m, m[:2], lower=True, left_side=False),
          np.tril(spd), rtol=1e-9, atol=1e-9)
    q, r = kiln.vmap(jnp.linalg.qr)(a)
    np.testing.assert_allclose(np.asarray(q @ r), a, rtol=1e-10, atol=1e-10)


# ---- in_axes / out_axes forms ----

def test_in_axes_negative_none_and_per_argument():
    x, y = rnd(4, B), rnd(2, B, 4)
    check(lambda a, b: a * b, x, y, in_axes=(-1, 1))
    check(lambda a, b: a + b, x, rnd(4), in_axes=(1, None))
    check(lambda a, b: a + b, x, rnd(4), in_axes=[1, None])   # a list works like a tuple


def test_in_axes_pytree_prefixes_and_kwargs():
    d = {"w": rnd(B, 3), "b": rnd(3)}
    xs = [rnd(3, B), rnd(B)]
    f = lambda p, q: p["w"] * q[0] + p["b"] + q[1][..., None]
    got = kiln.vmap(f, in_axes=({"w": 0, "b": None}, [1, 0]))(d, xs)
    want = np.stack([d["w"][i] * xs[0][:, i] + d["b"] + xs[1][i] for i in range(B)])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)
    g = kiln.vmap(lambda a, scale=None: a * scale, in_axes=None, axis_size=None)
    with pytest.raises(ValueError, match="non-None"):
        g(rnd(3), scale=None)
    h = kiln.vmap(lambda a, scale: a * scale, in_axes=(None,))
    got = h(rnd(4), scale=np.arange(B, dtype=np.float64))   # keyword arguments map over axis 0
    assert got.shape == (B, 4)


def test_out_axes_forms():
    x = rnd(B, 4)
    check(lambda a: jnp.outer(a, a), x, out_axes=1)
    check(lambda a: jnp.outer(a, a), x, out_axes=-1)
    got = kiln.vmap(lambda a, c: (a * 2, c + 1), in_axes=(0, None), out_axes=(1, None))(rnd(B, 4, 2), rnd(5))
    assert got[0].shape == (4, B, 2) and got[1].shape == (5,)
    got = kiln.vmap(lambda a: {"s": a.sum(), "m": a}, out_axes={"s": 0, "m": 1})(x)
    np.testing.assert_allclose(np.asarray(got["m"]), x.T, rtol=0)
    np.testing.assert_allclose(np.asarray(got["s"]), x.sum(1), rtol=1e-12)


def test_axis_size_with_all_inputs_unmapped():
    y = kiln.vmap(lambda c: c * 2, in_axes=None, axis_size=4)(jnp.arange(3.0))
    np.testing.assert_array_equal(np.asarray(y), np.tile(np.arange(3.0) * 2, (4, 1)))


# ---- composition ----

def test_vmap_of_vmap():
    x, y = rnd(B, 4, 5), rnd(4, 5)
    f = lambda a, b: jnp.sin(a) * b.sum()
    got = kiln.vmap(kiln.vmap(f, in_axes=(0, 0)), in_axes=(0, None))(x, y)
    want = np.stack([[np.sin(x[i, j]) * y[j].sum() for j in range(4)] for i in range(B)])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)
    got = kiln.vmap(kiln.vmap(lambda a: a @ a, in_axes=1), in_axes=2)(rnd(4, 2, B))
    assert got.shape == (B, 2)


def test_jit_of_vmap_and_vmap_of_jit():
    x = rnd(B, 4)
    f = lambda a: jnp.tanh(a) @ a
    want = loop(f, (x,))
    np.testing.assert_allclose(np.asarray(kiln.jit(kiln.vmap(f))(x)), np.asarray(want), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(kiln.vmap(kiln.jit(f))(x)), np.asarray(want), rtol=1e-12)
    # a closure over a jit tracer enters the vmapped program as an unbatched input
    g = kiln.jit(lambda c, a: kiln.vmap(lambda r: r * c)(a))
    np.testing.assert_allclose(np.asarray(g(2.5, x)), 2.5 * x, rtol=1e-12)


def test_per_example_gradients():
    w = rnd(3)
    xs, ys = rnd(B, 3), rnd(B)
    loss = lambda p, x, y: (jnp.tanh(x @ p) - y) ** 2
    got = kiln.vmap(kiln.grad(loss), in_axes=(None, 0, 0))(w, xs, ys)
    want = np.stack([np.asarray(kiln.grad(loss)(jnp.asarray(w), jnp.asarray(xs[i]), jnp.asarray(ys[i])))
                     for i in range(B)])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)
    # and against the closed form
    t = np.tanh(xs @ w)
    np.testing.assert_allclose(np.asarray(got), (2 * (t - ys) * (1 - t * t))[:, None] * xs, rtol=1e-10)


def test_grad_of_vmap():
    x = rnd(B, 3)
    g = kiln.grad(lambda a: kiln.vmap(lambda r: jnp.sum(jnp.sin(r)) ** 2)(a).sum())(x)
    want = 2 * np.sin(x).sum(1, keepdims=True) * np.cos(x)
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-10)


def test_executable_is_reused_across_calls():
    f = kiln.vmap(lambda a: a * 3.0)
    for _ in range(3):
        x = rnd(B, 2)
        np.testing.assert_allclose(np.asarray(f(x)), 3 * x, rtol=0)


# ---- errors ----

def test_inconsistent_sizes_name_the_arguments():
    with pytest.raises(ValueError, match=r"inconsistent sizes(.|\n)*argument a(.|\n)*size 3(.|\n)*argument b(.|\n)*size 4"):
        kiln.vmap(lambda a, b: a + b)(rnd(3, 2), rnd(4, 2))
    with pytest.raises(ValueError, match="axis_size is 5"):
        kiln.vmap(lambda a: a, axis_size=5)(rnd(3))


def test_in_axes_out_of_range_and_rank0():
    with pytest.raises(ValueError, match=r"axis 2.*rank.*at least 3.*only 2"):
        kiln.vmap(lambda a: a, in_axes=2)(rnd(3, 2))
    with pytest.raises(ValueError, match="only 0"):
        kiln.vmap(lambda a: a)(1.0)


def test_in_axes_structure_mismatch():
    with pytest.raises(ValueError, match=r"len\(in_axes\)=3, len\(args\)=2"):
        kiln.vmap(lambda a, b: a, in_axes=(0, 0, 0))(rnd(3), rnd(3))
    with pytest.raises(ValueError, match="tree prefix"):
        kiln.vmap(lambda d: d["a"], in_axes=({"b": 0},))({"a": rnd(3)})
    with pytest.raises(TypeError, match="in_axes must be an int, None"):
        kiln.vmap(lambda a: a, in_axes="0")


def test_out_axes_errors():
    with pytest.raises(ValueError, match="out_axes is None"):
        kiln.vmap(lambda a: a * 2, out_axes=None)(rnd(3))
    with pytest.raises(ValueError, match="out_axes entry 3 is out of range"):
        kiln.vmap(lambda a: a, out_axes=3)(rnd(3, 2))


def test_not_callable():
    with pytest.raises(TypeError, match="callable"):
        kiln.vmap(3)


def test_unmapped_python_values_pass_through_unchanged():
    # as JAX: in_axes None leaves that are not arrays reach the function as they are
    seen = []

    def f(x, n):
        seen.append(type(n))
        return x * n
    np.testing.assert_array_equal(np.asarray(kiln.vmap(f, in_axes=(0, None))(jnp.ones(3), 3)), [3, 3, 3])
    assert seen == [int]
    g = kiln.jit(lambda x, n: x * n, static_argnames="n")
    np.testing.assert_array_equal(np.asarray(kiln.vmap(lambda x, n: g(x, n=n), in_axes=(0, None))(jnp.arange(3.0), 4)),
                                  [0, 4, 8])


def test_matmul_shape_mismatch_is_a_type_error():
    with pytest.raises(TypeError, match="matmul"):
        jnp.ones((2, 3)) @ jnp.ones((2, 3))


def test_unmapped_concrete_array_stays_concrete_inside():
    # bug (issue 32, fuzzer): an in_axes=None array became a tracer of the vmap trace, so using it as a
    # boolean index raised NonConcreteBooleanIndexError; JAX passes unmapped arguments through as they
    # are (values pinned from JAX 0.10.2)
    x0 = np.array([[5, 2], [2, 5], [5, 2]], dtype=np.uint32)
    mask = kiln.numpy.asarray(np.array([True, False]))
    got = kiln.vmap(lambda x, m: x[m], in_axes=(0, None))(x0, mask)
    assert np.asarray(got).tolist() == [[5], [2], [5]]
    v = np.array([[1.8, 0.5], [0.5, 1.8]], dtype=np.float32)
    g = kiln.vmap(kiln.grad(lambda a, m: kiln.numpy.sum(a[m])), in_axes=(0, None))(v, mask)
    assert np.asarray(g).tolist() == [[1, 0], [1, 0]]
    got = kiln.jit(kiln.vmap(lambda a, b: a + b, in_axes=(None, 0)))(kiln.numpy.ones(2), v)
    np.testing.assert_allclose(np.asarray(got), v + 1)
