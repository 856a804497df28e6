"""custom_vjp with symbolic_zeros: which inputs are perturbed (JAX's CustomVJPPrimal.perturbed: the
value depends on what is being differentiated), residuals that are not arrays, SymbolicZero
tangents from a custom_jvp rule, and reverse mode through a scatter-set in a tangent rule (what
equinox's filter_custom_vjp and checkpointed while loops need: diffrax's gradients; issue 33)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.custom_derivatives import SymbolicZero


def _rand(*shape):
    return np.random.default_rng().standard_normal(shape).astype(np.float32)


def _probe():
    """A custom_vjp identity on (a, b) recording the perturbed flags its fwd saw."""
    seen = []

    @kiln.custom_vjp
    def f(a, b):
        return a * b

    def fwd(a, b):
        seen.append((a.perturbed, b.perturbed))
        return a.value * b.value, (a.value, b.value, a.perturbed, b.perturbed)

    def bwd(res, ct):
        a, b, pa, pb = res
        assert isinstance(pa, bool) and isinstance(pb, bool)  # non-array residuals stay Python values
        return (ct * b if pa else None, ct * a if pb else None)
    f.defvjp(fwd, bwd, symbolic_zeros=True)
    return f, seen


def test_perturbed_follows_the_differentiated_arguments():
    f, seen = _probe()
    a, b = _rand(3), _rand(3)
    g = kiln.grad(lambda x, y: jnp.sum(f(x, y)), argnums=0)(a, b)
    np.testing.assert_allclose(g, b, rtol=1e-6)
    assert seen[-1] == (True, False)
    g = kiln.grad(lambda y: jnp.sum(f(jnp.asarray(a), y * 2)))(b)
    np.testing.assert_allclose(g, 2 * a, rtol=1e-6)
    assert seen[-1] == (False, True)
    ga, gb = kiln.grad(lambda x, y: jnp.sum(f(x, y)), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(ga, b, rtol=1e-6)
    np.testing.assert_allclose(gb, a, rtol=1e-6)
    assert seen[-1] == (True, True)
    g = kiln.jit(kiln.grad(lambda x, y: jnp.sum(f(x, y))))(a, b)  # inside a jit inside grad
    np.testing.assert_allclose(g, b, rtol=1e-6)
    assert seen[-1] == (True, False)


def test_perturbed_inside_loops_and_branches():
    f, seen = _probe()
    a, b = _rand(3), _rand(3)

    def through_scan(x, y):  # y is a closure constant of the body, x a carry
        c, _ = kiln.lax.scan(lambda c, _: (f(c, y), None), x, None, length=2)
        return jnp.sum(c)
    np.testing.assert_allclose(kiln.grad(through_scan)(a, b), b * b, rtol=1e-5)
    assert seen[-1] == (True, False)

    def unperturbed_carry_becomes_perturbed(x, y):
        # the carry c starts from a constant, and the body adds x to it: JAX's fixed point makes
        # c perturbed, so bwd must be asked for its cotangent
        def body(i, c):
            return f(c, y) + x
        return jnp.sum(kiln.lax.fori_loop(0, 3, body, jnp.ones(3)))
    g = kiln.grad(unperturbed_carry_becomes_perturbed)(a, b)
    np.testing.assert_allclose(g, 1 + b + b * b, rtol=1e-5)
    assert seen[-1] == (True, False)

    def through_cond(x, y):
        return jnp.sum(kiln.lax.cond(x[0] > 100, lambda: x, lambda: f(y, x)))
    np.testing.assert_allclose(kiln.grad(through_cond)(a, b), b, rtol=1e-6)
    assert seen[-1] == (False, True)


def test_custom_jvp_rule_may_return_symbolic_zeros_and_none_subtrees():
    @kiln.custom_jvp
    def f(d):
        return d

    @f.defjvp
    def rule(primals, tangents):
        (d,), (t,) = primals, tangents
        return d, {"a": t["a"] * 3, "b": SymbolicZero(None), "c": None}
    a, b = _rand(3), _rand(2)
    g = kiln.grad(lambda x, y: jnp.sum(f({"a": x, "b": y, "c": None})["a"] + jnp.sum(f({"a": x, "b": y, "c": None})["b"])),
                  argnums=(0, 1))(a, b)
    np.testing.assert_allclose(g[0], np.full(3, 3.0), rtol=1e-6)
    np.testing.assert_allclose(g[1], np.zeros(2), atol=0)


def test_custom_jvp_symbolic_zeros_rule_sees_symbolic_zero_tangents():
    """Issue 33 (equinox's filter_custom_jvp turns SymbolicZero into None): with
    defjvp(symbolic_zeros=True) an argument no derivative reaches (a constant, an integer) gets a
    SymbolicZero tangent of its tangent aval; a differentiated one a real tangent."""
    seen = []

    @kiln.custom_jvp
    def f(x, y, n):
        return x * y * n

    def rule(primals, tangents):
        (x, y, n), (tx, ty, tn) = primals, tangents
        seen.append((type(tx).__name__, type(ty).__name__, type(tn).__name__))
        assert isinstance(tn, SymbolicZero) and tn.aval.str_short() == "float0[]"
        t = (0 if isinstance(tx, SymbolicZero) else tx * y * n) + (0 if isinstance(ty, SymbolicZero) else ty * x * n)
        return f(x, y, n), t
    f.defjvp(rule, symbolic_zeros=True)
    x, y = float(_rand(1)[0]), float(_rand(1)[0])
    out, t = kiln.jvp(lambda v: f(v, jnp.float32(y), jnp.int32(3)), (x,), (1.0,))
    np.testing.assert_allclose(float(t), 3 * y, rtol=1e-6)
    assert seen[-1][1:] == ("SymbolicZero", "SymbolicZero") and seen[-1][0] != "SymbolicZero"
    g = kiln.grad(lambda w: f(jnp.float32(x), w, jnp.int32(2)))(y)
    np.testing.assert_allclose(float(g), 2 * x, rtol=1e-6)
    assert seen[-1][0] == "SymbolicZero" and seen[-1][1] != "SymbolicZero"


def test_reverse_mode_through_a_scatter_set_on_tangents():
    """A tangent rule that writes with .at[].set (equinox's buffers): reverse mode transposes the
    scatter-set (the operand's written positions cleared, each update the cotangent where it stayed)."""
    idx = np.array([1, 3, 1])  # position 1 written twice: the last update stays

    @kiln.custom_jvp
    def f(x, u):
        return x.at[idx].set(u)

    @f.defjvp
    def rule(primals, tangents):
        (x, u), (tx, tu) = primals, tangents
        return f(x, u), tx.at[idx].set(tu)
    x, u, w = _rand(5), _rand(3), _rand(5)
    gx, gu = kiln.grad(lambda x, u: jnp.sum(f(x, u) * w), argnums=(0, 1))(x, u)
    want_x = w.copy()
    want_x[[1, 3]] = 0
    np.testing.assert_allclose(gx, want_x, rtol=1e-6)
    np.testing.assert_allclose(gu, [0.0, w[3], w[1]], rtol=1e-6)
    tx = kiln.linear_transpose(lambda t: t.at[idx].set(jnp.zeros(3)), x)(jnp.asarray(w))[0]
    np.testing.assert_allclose(tx, want_x, rtol=1e-6)


def test_a_jaxpr_made_under_grad_and_evaluated_again_keeps_the_rule_honest():
    """equinox's checkpointed loops trace their body with make_jaxpr inside a grad and evaluate the
    jaxpr once per iteration: the custom_vjp inside was called on make_jaxpr's inputs, which stand
    for any values, so its inputs count as perturbed there (bwd then gives every cotangent)."""
    from kiln import core as jcore
    f, seen = _probe()
    k, y0 = _rand(1)[0], _rand(3)

    def run(k):
        body = lambda y: f(y, k)  # noqa: E731
        closed = kiln.make_jaxpr(body)(jnp.zeros(3))
        y = jnp.asarray(y0)
        for _ in range(3):  # the carry is constant at first, perturbed later: the jaxpr serves both
            y = jcore.eval_jaxpr(closed.jaxpr, closed.consts, y)[0]
        return jnp.sum(y)
    np.testing.assert_allclose(kiln.grad(run)(k), 3 * k ** 2 * np.sum(y0), rtol=1e-5)
    assert seen and all(s == (True, True) for s in seen)


def test_custom_jvp_rule_inside_a_while_body_under_forward_mode():
    # the rule's tangents in a while body's JVP (an untagged build): segfaulted before
    @kiln.custom_jvp
    def f(x):
        return jnp.sin(x)
    f.defjvp(lambda p, t: (f(p[0]), 2 * t[0]))

    def loop(x):
        return kiln.lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, f(c[1])), (0, x))[1]
    x = np.float32(np.random.default_rng().uniform(0.1, 1.0))
    y, t = kiln.jvp(loop, (jnp.float32(x),), (jnp.float32(1.0),))
    np.testing.assert_allclose(y, np.sin(np.sin(np.sin(x))), rtol=1e-6)
    np.testing.assert_allclose(t, 8.0, rtol=1e-6)


def test_stop_gradient_keeps_a_nondifferentiable_rule_from_running():
    @kiln.custom_jvp
    def nondiff(x):
        return x

    @nondiff.defjvp
    def rule(p, t):
        raise RuntimeError("differentiated")
    x = _rand(3)
    g = kiln.grad(lambda v: jnp.sum(v * nondiff(kiln.lax.stop_gradient(v * 2))))(x)
    np.testing.assert_allclose(g, 2 * x, rtol=1e-6)
    with pytest.raises(RuntimeError, match="differentiated"):
        kiln.grad(lambda v: jnp.sum(nondiff(v)))(x)


def test_custom_vjp_fwd_takes_nondiff_arguments_in_place():
    # as JAX: fwd has the function's signature; bwd takes the nondiff arguments first (flax's
    # lift.custom_vjp relies on it)
    import functools
    seen = []

    @functools.partial(kiln.custom_vjp, nondiff_argnums=(1,))
    def f(x, n, y):
        return x * n + y

    def fwd(x, n, y):
        seen.append(n)
        return f(x, n, y), (x,)

    def bwd(n, res, g):
        return (g * n, g)
    f.defvjp(fwd, bwd)
    x, y = _rand(3), _rand(3)
    gx, gy = kiln.grad(lambda a, b: jnp.sum(f(a, 3, b)), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, np.full(3, 3.0))
    np.testing.assert_allclose(gy, np.ones(3))
    assert seen == [3]
