"""User batching rules under vmap (issue 33): jax.custom_batching.custom_vmap and the batching
rules of primitives libraries define (jax.extend.core.Primitive with
jax.interpreters.batching.primitive_batchers, as equinox's unvmap_* primitives). The rule decides
what the function means on a batch, so the expected values here are the rule's, not the
per-example function's; grad and jit see the function."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.custom_batching import custom_vmap, sequential_vmap
from kiln.extend.core import Primitive
from kiln.interpreters import ad, batching, mlir


def _rand(*shape):
    return np.random.default_rng().standard_normal(shape).astype(np.float32)


def _unvmap_any():
    p = Primitive("test_unvmap_any")
    p.def_impl(lambda x: jnp.any(x))
    mlir.register_lowering(p, mlir.lower_fun(lambda x: jnp.any(x), multiple_results=False))
    batching.primitive_batchers[p] = lambda args, dims: (jnp.any(args[0]), batching.not_mapped)
    return p


def test_library_primitive_rule_reduces_over_the_batch():
    p = _unvmap_any()
    x = np.zeros((4, 3), bool)
    x[2, 1] = True
    assert not p.bind(jnp.asarray(x[0]))
    for f in (kiln.vmap(p.bind), kiln.jit(kiln.vmap(p.bind)), kiln.vmap(kiln.jit(p.bind))):
        np.testing.assert_array_equal(f(jnp.asarray(x)), [True] * 4)  # the rule's meaning: any of the batch
    np.testing.assert_array_equal(kiln.vmap(p.bind)(jnp.asarray(np.zeros((4, 3), bool))), [False] * 4)
    assert not kiln.jit(p.bind)(jnp.asarray(x[0]))


def test_library_primitive_with_jvp_and_batching_rules_composes():
    q = Primitive("test_sin")
    q.def_impl(jnp.sin)
    ad.primitive_jvps[q] = lambda primals, tangents: (q.bind(primals[0]), jnp.cos(primals[0]) * tangents[0])
    seen = []

    def rule(args, dims):
        seen.append(tuple(dims))
        return q.bind(args[0]) * 1.0, dims[0]
    batching.primitive_batchers[q] = rule
    x = _rand(3, 5)
    np.testing.assert_allclose(kiln.vmap(q.bind)(x), np.sin(x), rtol=1e-6)
    np.testing.assert_allclose(kiln.vmap(q.bind, in_axes=1)(x), np.sin(x).T, rtol=1e-6)
    np.testing.assert_allclose(kiln.vmap(kiln.vmap(q.bind))(x), np.sin(x), rtol=1e-6)
    one = kiln.grad(lambda v: jnp.sum(q.bind(v)))
    for f in (kiln.vmap(one), kiln.jit(kiln.vmap(one)), kiln.grad(lambda v: jnp.sum(kiln.vmap(q.bind)(v)))):
        np.testing.assert_allclose(f(x), np.cos(x), rtol=1e-5, atol=1e-6)
    assert seen and all(d == (0,) for d in seen)


def test_primitive_rule_with_an_unbatched_operand_and_moved_result_axis():
    p = Primitive("test_scale")
    p.def_impl(lambda x, s: x * s)

    def rule(args, dims):
        x, s = args
        assert dims == [0, None]
        return jnp.swapaxes(x * s, 0, 1), 1  # the batch at axis 1: kiln moves it to 0
    batching.primitive_batchers[p] = rule
    x, s = _rand(4, 3), _rand(3)
    np.testing.assert_allclose(kiln.vmap(p.bind, in_axes=(0, None))(x, s), x * s, rtol=1e-6)


def test_primitive_without_a_batching_rule_raises_under_vmap():
    p = Primitive("test_norule")
    p.def_impl(jnp.sin)
    with pytest.raises(NotImplementedError, match="Batching rule for 'test_norule'"):
        kiln.vmap(p.bind)(_rand(2, 3))


def test_custom_vmap_rule_decides_the_batched_value():
    @custom_vmap
    def f(x, y):
        return x * y

    seen = []

    @f.def_vmap
    def rule(axis_size, in_batched, x, y):
        seen.append((axis_size, in_batched))
        return x * y + 100.0, True
    x, y = _rand(3), _rand(3)
    np.testing.assert_allclose(f(x[0], y[0]), x[0] * y[0], rtol=1e-6)
    np.testing.assert_allclose(kiln.vmap(f, in_axes=(0, None))(x, 2.0), x * 2.0 + 100.0, rtol=1e-6)
    assert seen[-1] == (3, [True, False])
    np.testing.assert_allclose(kiln.jit(kiln.vmap(f))(x, y), x * y + 100.0, rtol=1e-6)
    np.testing.assert_allclose(kiln.grad(lambda a: f(a, y[0]))(x[0]), y[0], rtol=1e-6)  # grad sees the function
    np.testing.assert_allclose(kiln.vmap(kiln.grad(f))(x, y), y, rtol=1e-6)


def test_custom_vmap_pytrees_and_unbatched_results():
    @custom_vmap
    def f(d):
        return {"s": d["a"] + d["b"], "n": jnp.sum(d["a"])}

    @f.def_vmap
    def rule(axis_size, in_batched, d):
        assert in_batched == [{"a": True, "b": False}]
        return {"s": d["a"] + d["b"], "n": jnp.sum(d["a"])}, {"s": True, "n": False}
    a, b = _rand(4, 2), _rand(2)
    out = kiln.vmap(f, in_axes=({"a": 0, "b": None},))({"a": a, "b": b})
    np.testing.assert_allclose(out["s"], a + b, rtol=1e-6)
    np.testing.assert_allclose(out["n"], np.full(4, a.sum()), rtol=1e-5)  # unbatched, broadcast by vmap


def test_custom_vmap_errors_name_the_function():
    @custom_vmap
    def f(x):
        return x

    with pytest.raises(AttributeError, match="No batching rule defined for custom_vmap function f"):
        f(1.0)

    @f.def_vmap
    def bad_shape(axis_size, in_batched, x):
        return x[0], True
    with pytest.raises(ValueError, match=r"custom_vmap function f.*result 0 is float32\[\], expected float32\[3\]"):
        kiln.vmap(f)(_rand(3))

    @f.def_vmap
    def raises(axis_size, in_batched, x):
        raise KeyError("from the rule")
    with pytest.raises(KeyError, match="from the rule"):
        kiln.vmap(f)(_rand(3))
    np.testing.assert_allclose(kiln.vmap(lambda v: v * 2)(np.ones(3, np.float32)), 2.0)  # still works after


def test_sequential_vmap_matches_a_python_loop():
    f = sequential_vmap(lambda a, b: jnp.sum(a * b))
    a, b = _rand(5, 3), _rand(3)
    np.testing.assert_allclose(kiln.vmap(f, in_axes=(0, None))(a, b), [np.sum(r * b) for r in a], rtol=1e-5)


def test_custom_vmap_agrees_with_jax():
    jax = pytest.importorskip("jax")
    x = _rand(4, 3)

    def build(lib, cv):
        @cv
        def f(v):
            return lib.numpy.sin(v)

        @f.def_vmap
        def rule(axis_size, in_batched, v):
            return lib.numpy.cos(v) * axis_size, in_batched[0]
        return f
    k = build(kiln, custom_vmap)
    j = build(jax, jax.custom_batching.custom_vmap)
    np.testing.assert_allclose(kiln.vmap(k)(x), jax.vmap(j)(x), rtol=1e-6)
    np.testing.assert_allclose(kiln.jit(kiln.vmap(kiln.vmap(k)))(x), jax.jit(jax.vmap(jax.vmap(j)))(x), rtol=1e-6)


def test_axis_and_fancy_batcher_registries_and_the_axis_name():
    """The registries equinox and older libraries fill (JAX 0.10's shims): axis_primitive_batchers
    rules take (axis_size, axis_name, trace, vals, dims); fancy ones (axis_data, vals, dims)."""
    seen = []
    a = Primitive("test_axis_rule")
    a.def_impl(lambda x: x + 1)

    def axis_rule(axis_size, axis_name, trace, vals, dims):
        seen.append((axis_size, axis_name))
        return vals[0] + axis_size, dims[0]
    batching.axis_primitive_batchers[a] = axis_rule
    f = Primitive("test_fancy_rule")
    f.def_impl(lambda x: x * 2)

    def fancy_rule(axis_data, vals, dims):
        seen.append((axis_data.size, axis_data.name))
        return vals[0] * axis_data.size, dims[0]
    batching.fancy_primitive_batchers[f] = fancy_rule
    x = _rand(3, 2)
    np.testing.assert_allclose(kiln.vmap(a.bind, axis_name="i")(x), x + 3, rtol=1e-6)
    np.testing.assert_allclose(kiln.vmap(f.bind)(x), x * 3, rtol=1e-6)
    assert seen == [(3, "i"), (3, None)]


def test_an_unbatched_rule_result_keeps_a_cond_predicate_unbatched():
    """equinox's error_if: cond(unvmap_any(pred), raise in a callback, identity). The rule's
    result is the same for every example, so the cond keeps one predicate and runs one branch."""
    p = _unvmap_any()

    def boom(v):
        raise AssertionError("the untaken branch ran")

    def f(v):
        pred = p.bind(v < -100)
        return kiln.lax.cond(pred, lambda: kiln.pure_callback(boom, kiln.ShapeDtypeStruct(v.shape, v.dtype), v,
                                                              vmap_method="sequential"),
                             lambda: v)
    x = np.abs(_rand(4, 3))
    for g in (kiln.vmap(f), kiln.jit(kiln.vmap(f))):
        np.testing.assert_array_equal(g(x), x)


def _nonbatchable():
    """equinox's nonbatchable: identity whose batching rule raises for a batched operand."""
    p = Primitive("test_nonbatchable")
    p.def_impl(lambda x: x)
    p.def_abstract_eval(lambda x: x)
    mlir.register_lowering(p, mlir.lower_fun(lambda x: x, multiple_results=False))

    def rule(args, dims):
        if dims[0] is not None:
            raise ValueError("test_nonbatchable: a batched operand")
        return args[0], None
    batching.primitive_batchers[p] = rule
    return p


def test_loops_keep_carries_the_batch_does_not_reach_unbatched():
    """Issue 33 (equinox's checkpointed while loop under vmap(grad)): as JAX, vmap batches only the
    carries the batch reaches; with a predicate the same for every example the while loop stays
    one loop, so a counter carry stays unbatched (a rule that refuses a batched operand passes),
    a cond's result is batched only where a branch batches it, and a scan's unbatched carry too."""
    nb, anyp = _nonbatchable(), _unvmap_any()
    rng = np.random.default_rng()
    x = rng.standard_normal((4, 3)).astype(np.float32)
    n = int(rng.integers(3, 7))

    def wl(v):  # runs while any example is below 10 (per example: masked), counting trips
        def cond(c):
            i, u = c
            return anyp.bind(jnp.any(u < 10.0)) & (nb.bind(i) < 100)

        def body(c):
            i, u = c
            return nb.bind(i) + 1, jnp.where(u < 10.0, u * 2.0 + 1.0, u)
        return kiln.lax.while_loop(cond, body, (0, v))

    def per_example(v):  # what the batched loop computes: trips until every example is done
        i, u = 0, v.copy()
        while (u < 10.0).any() and i < 100:
            i, u = i + 1, np.where(u < 10.0, u * 2 + 1, u)
        return i, u
    trips = max(per_example(np.abs(r))[0] for r in x)
    for g in (kiln.vmap(wl), kiln.jit(kiln.vmap(wl))):
        i, u = g(jnp.abs(x))
        assert np.shape(i) == (4,) and (np.asarray(i) == trips).all()  # unbatched inside, broadcast out
        np.testing.assert_allclose(u, np.stack([per_example(np.abs(r))[1] for r in x]) if trips else np.abs(x),
                                   rtol=1e-6)

    def sc(v):
        def step(c, t):
            k, s = c
            return (nb.bind(k) + t, s + jnp.sin(v) * t), s[0]
        return kiln.lax.scan(step, (0, jnp.zeros_like(v)), jnp.arange(n))
    for g in (kiln.vmap(sc), kiln.jit(kiln.vmap(sc))):
        (k, s), ys = g(x)
        ts = np.arange(n)
        np.testing.assert_array_equal(k, [ts.sum()] * 4)
        np.testing.assert_allclose(s, np.sin(x) * ts.sum(), rtol=1e-5, atol=1e-6)
        want_ys = np.stack([np.sin(x[:, 0]) * ts[:j].sum() for j in range(n)], 1)
        np.testing.assert_allclose(ys, want_ys, rtol=1e-5, atol=1e-6)

    def cd(v, flag):
        j, w = kiln.lax.cond(flag, lambda: (nb.bind(jnp.int32(n)), v * 2.0), lambda: (jnp.int32(1), v))
        return nb.bind(j) + 0, w
    for flag in (True, False):
        j, w = kiln.vmap(cd, in_axes=(0, None))(x, flag)
        np.testing.assert_array_equal(j, [n if flag else 1] * 4)
        np.testing.assert_allclose(w, x * 2 if flag else x, rtol=1e-6)
    # the loops' derivatives under vmap, against finite differences of the per-example loop
    f = lambda a: kiln.lax.fori_loop(0, n, lambda i, c: c * jnp.cos(a) + nb.bind(i).astype(jnp.float32), a)
    a = rng.standard_normal(5)
    got = kiln.vmap(kiln.grad(f))(jnp.asarray(a, jnp.float32))

    def f64(a):
        c = a
        for i in range(n):
            c = c * np.cos(a) + i
        return c
    np.testing.assert_allclose(got, (f64(a + 1e-6) - f64(a - 1e-6)) / 2e-6, rtol=2e-3, atol=2e-3)


def test_integer_values_are_never_perturbed():
    """custom_vjp(symbolic_zeros=True): an integer argument computed from the differentiated input
    is not perturbed (its tangent is float0, as JAX's); equinox asserts it (diffrax's solve under grad)."""
    from kiln.custom_derivatives import custom_vjp
    seen = []

    @custom_vjp
    def f(x, i):
        return x * i

    def fwd(x, i):
        seen.append((x.perturbed, i.perturbed))
        return f(x.value, i.value), i.value

    def bwd(i, g):
        return g * i, None
    f.defvjp(fwd, bwd, symbolic_zeros=True)
    x = float(np.random.default_rng().uniform(1, 2))
    g = kiln.grad(lambda x: f(x, jnp.floor(x * 3).astype(jnp.int32)))(x)
    assert seen == [(True, False)]
    assert float(g) == np.floor(x * 3)
    # ml_dtypes' floats (NumPy kind 'V') are floats: perturbed
    import ml_dtypes
    seen.clear()
    kiln.grad(lambda x: f(x.astype(ml_dtypes.bfloat16), jnp.int32(2)).astype(jnp.float32))(x)
    assert seen == [(True, False)]


def test_a_batching_rule_may_close_over_small_concrete_arrays():
    """Issue 33 (lineax's linear_solve, equinox's maybe_set under vmap): a rule that uses arrays
    from outside (module-level scalars, a small table) works; they are written into its program.
    A large one raises NotImplementedError naming the primitive."""
    rng = np.random.default_rng()
    scale = jnp.asarray(np.float32(rng.uniform(1, 2)))
    table = jnp.asarray(rng.standard_normal(3).astype(np.float32))
    flag = jnp.asarray(True)
    big = jnp.asarray(rng.standard_normal(5000).astype(np.float32))
    p = Primitive("test_closes_over")
    p.def_impl(lambda x: x * scale + table)
    p.def_abstract_eval(lambda x: x)

    def rule(args, dims):
        (x,), (d,) = args, dims
        x = jnp.moveaxis(x, d, 0)
        return jnp.where(flag, x * scale + table, x), 0
    batching.primitive_batchers[p] = rule
    x = rng.standard_normal((4, 3)).astype(np.float32)
    want = x * np.asarray(scale) + np.asarray(table)
    np.testing.assert_allclose(kiln.vmap(p.bind)(x), want, rtol=1e-6)
    np.testing.assert_allclose(kiln.jit(kiln.vmap(p.bind))(x), want, rtol=1e-6)
    q = Primitive("test_closes_over_big")
    q.def_impl(lambda x: x)
    q.def_abstract_eval(lambda x: x)
    batching.primitive_batchers[q] = lambda args, dims: (jnp.take(big, jnp.abs(args[0]).astype(jnp.int32)), dims[0])
    with pytest.raises(NotImplementedError, match="test_closes_over_big"):
        kiln.vmap(q.bind)(x)


def test_grad_of_vmap_gives_a_primitive_rule_symbolic_zeros():
    """Issue 33 (diffrax's grad of vmap through an event's root find: lineax's JVP rule asserts its
    solver state's tangent is a symbolic Zero): a batching rule that binds its primitive again runs
    under the differentiation, and the JVP rule it meets there gets ad.Zero for an operand no
    derivative reaches (stop_gradient), as JAX's does; a Zero tangent output passes through vmap."""
    from kiln import lax
    from kiln.core import ShapedArray
    p = Primitive("kiln_test_scale_by_state")
    p.def_impl(lambda a, s: a * s)
    p.def_abstract_eval(lambda a, s: ShapedArray(a.shape, a.dtype))
    seen = []

    def jvp(primals, tangents):
        (a, s), (ta, ts) = primals, tangents
        seen.append(type(ts).__name__)
        assert isinstance(ts, ad.Zero), ts
        return p.bind(a, s), ta * s

    def batch(vals, dims):
        a, s = (jnp.moveaxis(v, d, 0) if d is not None else v for v, d in zip(vals, dims))
        if dims[0] is None:
            a = jnp.broadcast_to(a, s.shape)
        if dims[1] is None:
            s = jnp.broadcast_to(s, a.shape)
        return p.bind(a, s), 0
    ad.primitive_jvps[p] = jvp
    batching.primitive_batchers[p] = batch
    x = np.random.default_rng().uniform(0.5, 2.0, 5).astype(np.float32)

    def loss(v):
        return jnp.sum(kiln.vmap(lambda xi: p.bind(xi, lax.stop_gradient(xi * 2 + 1)))(v) ** 2)
    g = kiln.grad(loss)(x)
    np.testing.assert_allclose(np.asarray(g), 2 * x * (2 * x + 1) ** 2, rtol=1e-5)
    assert seen and set(seen) == {"Zero"}
    g2 = kiln.vmap(kiln.grad(lambda xi: p.bind(xi, lax.stop_gradient(xi * 2 + 1)) ** 2))(x)
    np.testing.assert_allclose(np.asarray(g2), 2 * x * (2 * x + 1) ** 2, rtol=1e-5)
    assert kiln.tree_util.tree_leaves(ad.Zero(ShapedArray((2,), np.float32))) == []


def test_a_batching_rule_naming_one_value_many_times():
    """kl_splice (the vmap pass splicing a batching rule's program in) sized its operand buffer by
    the program's value count; an equation naming one value more times than the program has
    values (a concatenate of 40 copies) wrote past it (heap overflow: ASan, or a later free()
    abort; diffrax's grad of vmap through an event met it). The values are checked."""
    @custom_vmap
    def f(x):
        return jnp.concatenate([x] * 40)

    @f.def_vmap
    def rule(axis_size, in_batched, x):
        return jnp.concatenate([x] * 40, axis=1), True

    x = np.random.default_rng().standard_normal((3, 2)).astype(np.float32)
    out = kiln.vmap(f)(x)
    np.testing.assert_array_equal(np.asarray(out), np.concatenate([x] * 40, axis=1))
    g = kiln.grad(lambda v: jnp.sum(kiln.vmap(f)(v) ** 2))(x)
    np.testing.assert_allclose(np.asarray(g), 2 * 40 * x, rtol=1e-6)
