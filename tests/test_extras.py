"""JAX's top-level extras: custom_gradient, linear_transpose, closure_convert, disable_jit, typeof,
named_call/named_scope, checking_leaks, kiln.ops segment reductions, kiln.typing; against the
math (finite differences, NumPy loops)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp

rng = np.random.default_rng()


def test_custom_gradient():
    @kiln.custom_gradient
    def clip_grad(x):
        return jnp.sin(x), lambda g: (jnp.clip(g * 10.0, -1.0, 1.0),)

    x = np.float32(0.3)
    assert abs(float(clip_grad(x)) - np.sin(0.3)) < 1e-6
    assert float(kiln.grad(clip_grad)(x)) == 1.0  # the custom rule, not cos(x)
    assert float(kiln.grad(lambda x: 0.01 * clip_grad(x))(x)) == pytest.approx(0.1)

    @kiln.custom_gradient
    def f(x, y):
        return x * y, lambda g: (g * y, g * x * 2.0)
    gx, gy = kiln.grad(f, argnums=(0, 1))(2.0, 3.0)
    assert float(gx) == 3.0 and float(gy) == 4.0
    v = kiln.jit(kiln.grad(lambda x: f(x, x)))(1.5)
    assert float(v) == pytest.approx(1.5 + 3.0)


def test_linear_transpose_and_closure_convert():
    m = rng.standard_normal((3, 4)).astype(np.float32)
    f_t = kiln.linear_transpose(lambda x: jnp.asarray(m) @ x, kiln.ShapeDtypeStruct((4,), np.float32))
    ct = rng.standard_normal(3).astype(np.float32)
    (got,) = f_t(ct)
    np.testing.assert_allclose(np.asarray(got), m.T @ ct, rtol=1e-5, atol=1e-6)
    g_t = kiln.linear_transpose(lambda x, y: (x + 2 * y, jnp.sum(x)), np.zeros(2, np.float32), np.zeros(2, np.float32))
    a, b = g_t((np.ones(2, np.float32), np.float32(3)))
    np.testing.assert_allclose(np.asarray(a), [4, 4])
    np.testing.assert_allclose(np.asarray(b), [2, 2])

    def outer(w):
        def inner(x):
            return jnp.sin(x * w)
        conv, consts = kiln.closure_convert(inner, 1.0)
        seen.append(len(consts))
        return conv(0.5, *consts)
    seen = []
    np.testing.assert_allclose(float(outer(2.0)), np.sin(1.0), rtol=1e-6)
    np.testing.assert_allclose(float(kiln.grad(outer)(2.0)), 0.5 * np.cos(1.0), rtol=1e-5)
    assert seen == [0, 1]  # a Python float is a literal; grad's tracer of w is hoisted


def test_disable_jit_and_typeof():
    calls = []

    @kiln.jit
    def f(x):
        calls.append(type(x).__name__)
        return x + 1
    f(jnp.ones(2))
    f(jnp.ones(2))
    assert len(calls) == 1  # traced once, then cached
    with kiln.disable_jit():
        np.testing.assert_array_equal(np.asarray(f(jnp.ones(2))), [2, 2])
        assert calls[-1] == "Array"  # ran as plain Python on the concrete array
        n = len(calls)
        f(jnp.ones(2))
        assert len(calls) == n + 1
    f(jnp.ones(2))  # compiled again outside the block
    t = kiln.typeof(jnp.ones((2, 3), jnp.float32))
    assert t.shape == (2, 3) and t.dtype == np.float32 and str(t) == "float32[2,3]"
    assert kiln.typeof(1.0).weak_type and repr(kiln.typeof(1.0)) == "ShapedArray(float32[], weak_type=True)"
    assert kiln.named_call(len) is len
    with kiln.named_scope("layer1"), kiln.checking_leaks():
        assert float(jnp.sum(jnp.ones(3))) == 3


@pytest.mark.parametrize("name", ["segment_sum", "segment_prod", "segment_max", "segment_min"])
def test_segment_reductions(name):
    data = rng.standard_normal((7, 2)).astype(np.float32)
    ids = np.array([0, 2, 2, 0, 4, -1, 9], np.int32)  # -1 and 9 are dropped; 1 and 3 are empty
    fn = getattr(kiln.ops, name)
    got = np.asarray(fn(data, ids, num_segments=5))
    red = {"segment_sum": np.sum, "segment_prod": np.prod, "segment_max": np.max, "segment_min": np.min}[name]
    empty = {"segment_sum": 0, "segment_prod": 1, "segment_max": -np.inf, "segment_min": np.inf}[name]
    for s in range(5):
        rows = data[ids == s]
        want = red(rows, axis=0) if len(rows) else np.full(2, empty, np.float32)
        np.testing.assert_allclose(got[s], want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.jit(lambda d, i: fn(d, i, num_segments=5))(data, ids)), got)
    assert fn(data, np.array([0, 1, 1, 0, 3, 3, 0], np.int32)).shape == (4, 2)  # num_segments from the ids
    ints = np.asarray(kiln.ops.segment_max(np.arange(4, dtype=np.int32), np.array([0, 0, 2, 2]), 3))
    np.testing.assert_array_equal(ints, [1, np.iinfo(np.int32).min, 3])


def test_segment_sum_gradient_and_typing():
    data = rng.standard_normal(5).astype(np.float32)
    ids = np.array([1, 0, 1, 2, 0], np.int32)
    w = rng.standard_normal(3).astype(np.float32)
    g = kiln.grad(lambda d: jnp.sum(kiln.ops.segment_sum(d, ids, 3) * w))(data)
    np.testing.assert_allclose(np.asarray(g), w[ids], rtol=1e-6)
    from kiln.typing import ArrayLike, DTypeLike  # noqa: F401

    def f(x: ArrayLike, dt: DTypeLike = None):
        return x
    assert f(1) == 1


def test_debug_nans_and_infs_name_the_primitive():
    f = kiln.jit(lambda x: jnp.exp(jnp.log(x) * 3.0) + 1.0)
    ok = np.asarray(f(np.full(2, 2.0, np.float32)))
    np.testing.assert_allclose(ok, 9.0, rtol=1e-5)
    # (a jitted call's results are checked: a NaN or inf that does not reach them goes unseen there)
    for option, arg, what, prim in (("jax_debug_nans", -1.0, "nan", "log"), ("jax_debug_infs", 1e30, "inf", "exp")):
        kiln.config.update(option, True)
        try:
            np.testing.assert_allclose(np.asarray(f(np.full(2, 2.0, np.float32))), 9.0, rtol=1e-5)
            with pytest.raises(FloatingPointError, match=f"invalid value \\({what}\\) encountered in {prim}"):
                f(np.full(2, arg, np.float32))
        finally:
            kiln.config.update(option, False)
    assert np.isnan(np.asarray(f(np.full(2, -1.0, np.float32)))).all()  # off again: no check


def test_ensure_compile_time_eval():
    seen = []

    @kiln.jit
    def f(x):
        with kiln.ensure_compile_time_eval():
            c = jnp.asarray(np.arange(3.0)) * 2 + jnp.arange(3)
            n = int(jnp.sum(c))  # a concrete value: a Python int inside jit
            y = x * 2  # still traced: it reads the argument
        seen.append((type(c).__name__, n, type(y).__name__))
        return y + c
    np.testing.assert_allclose(np.asarray(f(jnp.ones(3))), [2, 5, 8])
    assert seen == [("Array", 9, "Tracer")]
    g = kiln.jit(lambda x: x + jnp.arange(3))  # outside the block: staged as before
    np.testing.assert_allclose(np.asarray(g(jnp.zeros(3))), [0, 1, 2])


def test_sinc_derivatives_at_zero():
    # every derivative of sinc at 0 is right (JAX's Maclaurin rule): f'' = -pi^2/3, f'''' = pi^4/5
    d2 = kiln.grad(kiln.grad(jnp.sinc))(0.0)
    d4 = kiln.grad(kiln.grad(kiln.grad(kiln.grad(jnp.sinc))))(0.0)
    assert float(kiln.grad(jnp.sinc)(0.0)) == 0.0
    assert float(d2) == pytest.approx(-np.pi ** 2 / 3, rel=1e-6)
    assert float(d4) == pytest.approx(np.pi ** 4 / 5, rel=1e-5)
    x = np.array([0.0, 0.25, -1.5], np.float32)
    np.testing.assert_allclose(np.asarray(jnp.sinc(x)), np.sinc(x), rtol=1e-6)


def test_debug_nans_checks_eager_operations():
    x = jnp.asarray(np.array([1.0, -1.0], np.float32))
    with kiln.debug_nans():
        with pytest.raises(FloatingPointError, match=r"invalid value \(nan\) encountered in log"):
            jnp.log(x)
        with pytest.raises(FloatingPointError, match="encountered in mul"):
            x * np.float32(np.nan)  # the C fast path's operators too
        with pytest.raises(FloatingPointError, match="sqrt"):
            kiln.grad(lambda v: jnp.sqrt(v))(-1.0)
        np.testing.assert_allclose(np.asarray(jnp.log(jnp.asarray([2.0]))), [np.log(2.0)], rtol=1e-6)
    assert np.isnan(np.asarray(jnp.log(x))[1])  # off again
