"""custom_jvp / custom_vjp / checkpoint: evaluation runs the primal function; differentiation
applies the custom rules exactly (custom_vjp in reverse mode only, as in JAX), and differentiating
again differentiates the rules themselves, as JAX does."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp


def _log1pexp():
    @kiln.custom_jvp
    def f(x):
        return jnp.log1p(jnp.exp(x))

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return f(x), t * kiln.nn.sigmoid(x)
    return f


def _clip_gradient():
    @kiln.custom_vjp
    def g(x):
        return x * 2.0

    g.defvjp(lambda x: (x * 2.0, None), lambda res, ct: (jnp.clip(ct, -1.0, 1.0),))
    return g


@pytest.mark.parametrize("make", [_log1pexp, _clip_gradient])
def test_custom_functions_evaluate_eagerly_under_jit_and_vmap(make):
    f = make()
    x = np.random.default_rng(0).standard_normal(5).astype(np.float32)
    want = np.asarray(f.fun(jnp.asarray(x)))
    np.testing.assert_allclose(np.asarray(f(jnp.asarray(x))), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.jit(f)(jnp.asarray(x))), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.vmap(f)(jnp.asarray(x))), want, rtol=1e-6)


def _scaled_rule():
    # a rule that deliberately differs from the true derivative: the result shows which is used
    @kiln.custom_jvp
    def f(x):
        return jnp.sin(x)

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return f(x), 3.0 * jnp.cos(x) * t
    return f


@pytest.mark.parametrize("transform", ["grad", "jit_grad", "jvp", "vjp", "vmap_grad", "jacrev"])
def test_custom_jvp_rule_is_what_gets_differentiated(transform):
    f = _scaled_rule()
    x = np.random.default_rng(2).standard_normal(4).astype(np.float32)
    want = 3.0 * np.cos(x.astype(np.float64))
    kx = jnp.asarray(x)
    if transform == "grad":
        got = kiln.grad(lambda v: jnp.sum(f(v)))(kx)
    elif transform == "jit_grad":
        got = kiln.jit(kiln.grad(lambda v: jnp.sum(f(v))))(kx)
    elif transform == "jvp":
        got = kiln.jvp(f, (kx,), (jnp.ones(4),))[1]
    elif transform == "vjp":
        got = kiln.vjp(f, kx)[1](jnp.ones(4))[0]
    elif transform == "vmap_grad":
        got = kiln.vmap(kiln.grad(f))(kx)
    else:
        got = jnp.diagonal(kiln.jacrev(f)(kx))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(f(kx)), np.sin(x), rtol=1e-6)


def test_custom_jvp_log1pexp_gradient_is_finite_where_the_plain_one_is_not():
    f = _log1pexp()
    g = kiln.grad(lambda v: jnp.sum(f(v)))(jnp.asarray([0.0, 50.0, -50.0]))
    np.testing.assert_allclose(np.asarray(g), [0.5, 1.0, 0.0], atol=1e-6)


@pytest.mark.parametrize("transform", ["grad", "jit_grad", "vjp", "jacrev", "value_and_grad"])
def test_custom_vjp_rule_is_applied_in_reverse_mode(transform):
    g = _clip_gradient()  # bwd clips the cotangent to [-1, 1]: nonlinear, so it must run backwards
    x = jnp.asarray(np.array([0.5, -1.5, 2.0], np.float32))
    loss = lambda v: jnp.sum(g(v) * jnp.asarray([0.5, 3.0, -4.0]))
    want = np.array([0.5, 1.0, -1.0])
    if transform == "grad":
        got = kiln.grad(loss)(x)
    elif transform == "jit_grad":
        got = kiln.jit(kiln.grad(loss))(x)
    elif transform == "vjp":
        got = kiln.vjp(g, x)[1](jnp.asarray([0.5, 3.0, -4.0]))[0]
    elif transform == "jacrev":
        got = jnp.diagonal(kiln.jacrev(g)(x))  # unit cotangents are within the clip range
        want = np.ones(3)
    else:
        v, got = kiln.value_and_grad(loss)(x)
        assert float(v) == pytest.approx(float(np.sum(np.asarray(x) * 2 * [0.5, 3.0, -4.0])), rel=1e-6)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


def test_custom_vjp_with_residuals_two_arguments_and_closure():
    scale = jnp.asarray(3.0)

    @kiln.custom_vjp
    def f(x, y):
        return jnp.sin(x) * y

    def f_fwd(x, y):
        return f(x, y), (jnp.cos(x), jnp.sin(x), y)

    def f_bwd(res, ct):
        c, s, y = res
        return (c * ct * y * scale, s * ct)  # the x cotangent is deliberately scaled by a closure
    f.defvjp(f_fwd, f_bwd)
    gx, gy = kiln.grad(f, argnums=(0, 1))(1.0, 2.0)
    assert float(gx) == pytest.approx(3 * np.cos(1.0) * 2.0, rel=1e-5)
    assert float(gy) == pytest.approx(np.sin(1.0), rel=1e-5)
    assert float(f(1.0, 2.0)) == pytest.approx(np.sin(1.0) * 2.0, rel=1e-6)


def test_forward_mode_through_custom_vjp_raises_as_in_jax():
    g = _clip_gradient()
    with pytest.raises(NotImplementedError, match="custom_vjp"):
        kiln.jvp(g, (jnp.ones(2),), (jnp.ones(2),))
    assert float(kiln.grad(jnp.sin)(0.5)) == pytest.approx(np.cos(0.5), rel=1e-6)  # kiln keeps working
    # linearize gives the values (equinox's test_forward reads them), as JAX's; f_jvp raises
    x = np.random.default_rng().standard_normal(2).astype(np.float32)
    out, f_jvp = kiln.linearize(lambda v: g(jnp.sin(v)) * 2, jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(out), np.sin(x) * 4, rtol=1e-6)  # (g doubles)
    with pytest.raises(NotImplementedError, match="custom_vjp"):
        np.asarray(f_jvp(jnp.ones(2)))


def test_custom_jvp_without_rule_is_an_error():
    f = kiln.custom_jvp(lambda x: x)
    with pytest.raises(AttributeError, match="defjvp"):
        f(1.0)


@pytest.mark.parametrize("policy", [None, kiln.checkpoint_policies.nothing_saveable,
                                    kiln.checkpoint_policies.everything_saveable,
                                    kiln.checkpoint_policies.dots_saveable,
                                    kiln.checkpoint_policies.dots_with_no_batch_dims_saveable])
def test_checkpoint_gives_the_same_values_and_gradients(policy):
    def f(w, x):
        return jnp.sum(jnp.tanh(x @ w) ** 2)
    g = kiln.checkpoint(f, policy=policy)
    rng = np.random.default_rng(1)
    w = jnp.asarray(rng.standard_normal((3, 2)).astype(np.float32))
    x = jnp.asarray(rng.standard_normal((4, 3)).astype(np.float32))
    np.testing.assert_allclose(float(g(w, x)), float(f(w, x)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.grad(g)(w, x)), np.asarray(kiln.grad(f)(w, x)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.jit(kiln.grad(g))(w, x)), np.asarray(kiln.grad(f)(w, x)), rtol=1e-6)
    assert kiln.remat is kiln.checkpoint


def _count(fun, *args, name):
    return str(kiln.make_jaxpr(fun)(*args)).count(f" {name} ")


def test_checkpoint_recomputes_the_forward_ops_in_reverse_mode():
    # as in JAX: the backward pass recomputes sin(x) from x (behind optimization_barrier, so CSE
    # does not merge it back) instead of keeping the forward pass's value
    f = lambda x: jnp.sin(jnp.sin(x))
    assert _count(kiln.value_and_grad(f), 1.0, name="sin") == 2
    assert _count(kiln.value_and_grad(kiln.checkpoint(f)), 1.0, name="sin") == 3
    assert _count(kiln.value_and_grad(kiln.checkpoint(f)), 1.0, name="optimization_barrier") == 1
    assert _count(kiln.value_and_grad(kiln.remat(f, prevent_cse=False)), 1.0, name="optimization_barrier") == 0
    v, g = kiln.value_and_grad(kiln.checkpoint(f))(1.0)
    assert float(v) == pytest.approx(np.sin(np.sin(1.0)), rel=1e-6)
    assert float(g) == pytest.approx(np.cos(np.sin(1.0)) * np.cos(1.0), rel=1e-6)
    # forward mode has nothing to recompute
    assert _count(lambda x: kiln.jvp(kiln.checkpoint(f), (x,), (1.0,)), 1.0, name="optimization_barrier") == 0


def test_checkpoint_policy_decides_what_the_backward_pass_recomputes():
    rng = np.random.default_rng(0)
    w1 = jnp.asarray(rng.standard_normal((3, 4)).astype(np.float32))
    w2 = jnp.asarray(rng.standard_normal((4, 2)).astype(np.float32))
    x = jnp.asarray(rng.standard_normal((5, 3)).astype(np.float32))
    layer = lambda w, h: jnp.tanh(h @ w)

    def loss_with(policy):
        lay = layer if policy == "plain" else kiln.checkpoint(layer, policy=policy)
        return lambda ws, x: jnp.sum(lay(ws[1], lay(ws[0], x)) ** 2)
    counts = {}
    for name, policy in [("plain", "plain"), ("nothing", None), ("dots", kiln.checkpoint_policies.checkpoint_dots),
                         ("everything", kiln.checkpoint_policies.everything_saveable)]:
        fn = kiln.grad(loss_with(policy))
        jaxpr = str(kiln.make_jaxpr(fn)((w1, w2), x))
        counts[name] = (jaxpr.count(" dot_general["), jaxpr.count(" tanh "))
        for a, b in zip(fn((w1, w2), x), kiln.grad(loss_with("plain"))((w1, w2), x)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    assert counts["plain"] == counts["everything"] == (5, 2)
    assert counts["nothing"] == (7, 4)  # both forward matmuls and tanhs again
    assert counts["dots"] == (5, 4)     # the matmuls are kept, the tanhs recomputed


def test_checkpoint_static_argnums_kwargs_pytrees_and_closures():
    def f(x, n, scale=1.0):
        for _ in range(n):
            x = jnp.sin(x) * scale
        return {"a": x, "b": x * 2}
    cf = kiln.checkpoint(f, static_argnums=(1,))
    x = jnp.asarray([0.1, 0.5, 0.9])
    want = kiln.grad(lambda v: f(v, 3, scale=2.0)["b"].sum())(x)
    np.testing.assert_allclose(np.asarray(kiln.grad(lambda v: cf(v, 3, scale=2.0)["b"].sum())(x)), np.asarray(want),
                               rtol=1e-6)

    def outer(a):  # the checkpointed function closes over a value of the enclosing trace
        c = a * 3
        return kiln.checkpoint(lambda y: jnp.sin(y * c))(a).sum()
    a = jnp.arange(3.0)
    np.testing.assert_allclose(np.asarray(kiln.grad(outer)(a)), 6 * np.arange(3.0) * np.cos(3 * np.arange(3.0) ** 2),
                               rtol=1e-5)


def test_checkpoint_composes_with_jit_vmap_and_higher_order(x64):
    g = kiln.checkpoint(lambda v: kiln.checkpoint(jnp.sin)(v) * jnp.cos(v))  # nested
    plain = lambda v: jnp.sin(v) * jnp.cos(v)
    x = jnp.asarray([0.2, 0.7, 1.3])
    for t in [lambda h: kiln.jit(kiln.grad(lambda v: h(v).sum())),
              lambda h: kiln.vmap(kiln.grad(h)),
              lambda h: kiln.grad(lambda v: kiln.vmap(h)(v).sum()),
              lambda h: kiln.vmap(kiln.grad(kiln.grad(h))),
              lambda h: kiln.hessian(lambda v: h(v).sum()),
              lambda h: kiln.jacfwd(h),
              lambda h: kiln.jacrev(h)]:
        np.testing.assert_allclose(np.asarray(t(g)(x)), np.asarray(t(plain)(x)), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(kiln.vmap(kiln.grad(kiln.grad(g)))(x)), -2 * np.sin(2 * np.asarray(x)),
                               rtol=1e-12)


def test_optimization_barrier_is_the_identity_that_cse_does_not_see_through():
    f = lambda x: (jnp.sin(x), jnp.sin(kiln.lax.optimization_barrier(x)))
    assert _count(f, 1.0, name="sin") == 2
    a, b = kiln.jit(f)(2.0)
    assert float(a) == float(b) == pytest.approx(np.sin(2.0), rel=1e-6)
    assert float(kiln.grad(lambda x: f(x)[1])(1.0)) == pytest.approx(np.cos(1.0), rel=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.vmap(f)(jnp.ones(2))[1]), np.sin(np.ones(2)), rtol=1e-6)


# vmap of custom rules, inside and outside differentiation

def _sin_doubled_vjp():
    @kiln.custom_vjp
    def g(x):
        return jnp.sin(x)
    g.defvjp(lambda x: (jnp.sin(x), jnp.cos(x)), lambda c, ct: (2.0 * c * ct,))  # a doubled derivative
    return g


def test_vmap_of_custom_vjp_inside_and_outside_grad():
    g = _sin_doubled_vjp()
    x = jnp.asarray(np.linspace(-1, 1, 4).astype(np.float32))
    want = 2 * np.cos(np.asarray(x))
    np.testing.assert_allclose(np.asarray(kiln.grad(lambda v: kiln.vmap(g)(v).sum())(x)), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.vmap(kiln.grad(g))(x)), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.jit(kiln.vmap(kiln.grad(g)))(x)), want, rtol=1e-6)
    got = kiln.grad(lambda v: kiln.vmap(kiln.vmap(g))(v).sum())(x.reshape(2, 2))
    np.testing.assert_allclose(np.asarray(got), want.reshape(2, 2), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.vmap(g)(x)), np.sin(np.asarray(x)), rtol=1e-6)


def test_vmap_of_custom_vjp_with_a_shared_argument_sums_its_cotangent():
    @kiln.custom_vjp
    def h(w, v):
        return jnp.sum(w * v)
    h.defvjp(lambda w, v: (jnp.sum(w * v), (w, v)), lambda r, ct: (3.0 * r[1] * ct, r[0] * ct))
    w = jnp.asarray(np.arange(3.0, dtype=np.float32))
    v = jnp.asarray(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    # loop over the examples: the shared w's gradient is the sum of the per-example ones
    want = sum(np.asarray(kiln.grad(h)(w, v[i])) for i in range(2))
    np.testing.assert_allclose(np.asarray(kiln.grad(lambda u: kiln.vmap(h, in_axes=(None, 0))(u, v).sum())(w)), want)
    gw, gv = kiln.vmap(kiln.grad(h, argnums=(0, 1)), in_axes=(None, 0))(w, v)
    np.testing.assert_allclose(np.asarray(gw), 3 * np.asarray(v))
    np.testing.assert_allclose(np.asarray(gv), np.broadcast_to(np.asarray(w), (2, 3)))


def test_vmap_of_custom_jvp_inside_and_outside_grad():
    f = _scaled_rule()
    x = jnp.asarray(np.linspace(-1, 1, 4).astype(np.float32))
    want = 3 * np.cos(np.asarray(x))
    np.testing.assert_allclose(np.asarray(kiln.grad(lambda v: kiln.vmap(f)(v).sum())(x)), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.vmap(kiln.grad(f))(x)), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.vmap(kiln.grad(kiln.grad(f)))(x)), -3 * np.sin(np.asarray(x)), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(kiln.jacrev(kiln.vmap(f))(x)), np.diag(want), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.jacfwd(kiln.vmap(f))(x)), np.diag(want), rtol=1e-6)


# Reference numbers from JAX 0.10.2 (float64), by hand.

def test_grad_of_grad_differentiates_the_custom_jvp_rule():
    f = _scaled_rule()  # rule: 3 cos(x) t, so d2/dx2 = -3 sin(x) (the plain one would be -sin(x))
    assert float(kiln.grad(kiln.grad(f))(0.3)) == pytest.approx(-3 * np.sin(0.3), rel=1e-5)
    assert float(kiln.grad(kiln.grad(kiln.grad(f)))(0.3)) == pytest.approx(-3 * np.cos(0.3), rel=1e-5)


def test_hessian_through_custom_jvp_uses_the_rule_for_the_outputs_derivative_too(x64):
    # d2/dv2 f(v)^2 = 2 f'(v)^2 + 2 f(v) f''(v) with f' = 3 cos: the enclosing level must see the rule
    f = _scaled_rule()
    v = jnp.asarray([0.3, -0.7])
    want = np.diag(18 * np.cos(v) ** 2 - 6 * np.sin(v) ** 2)
    np.testing.assert_allclose(np.asarray(kiln.hessian(lambda u: jnp.sum(f(u) ** 2))(v)), want, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(kiln.jacrev(kiln.jacfwd(lambda u: jnp.sum(f(u) ** 2)))(v)), want,
                               rtol=1e-10)
    jj = kiln.jacfwd(kiln.jacrev(lambda u: f(u) * u))(v)
    np.testing.assert_allclose(np.asarray(jj)[[0, 1], [0, 1], [0, 1]], [5.46605075, 3.23619598], rtol=1e-8)


def test_second_derivative_of_log1pexp_stays_finite(x64):
    f = _log1pexp()
    got = kiln.vmap(kiln.grad(kiln.grad(f)))(jnp.asarray([0.0, 2.0, -50.0]))
    np.testing.assert_allclose(np.asarray(got), [0.25, 1.04993585e-01, 1.92874985e-22], rtol=1e-8)
    h = kiln.hessian(lambda v: jnp.sum(f(v) ** 2))(jnp.asarray([0.5, 100.0]))
    np.testing.assert_allclose(np.asarray(h), [[1.23273465, 0.0], [0.0, 2.0]], rtol=1e-8)


def test_grad_of_grad_differentiates_custom_vjp_fwd_and_bwd():
    g = _clip_gradient()  # grad of sum(g(v)^2) is clip(4 v): slope 4 inside the clip range, 0 outside
    gg = kiln.grad(kiln.grad(lambda v: jnp.sum(g(v) ** 2)))
    assert float(gg(jnp.asarray(0.1))) == pytest.approx(4.0)
    assert float(gg(jnp.asarray(0.3))) == 0.0


def test_hessian_through_custom_vjp(x64):
    @kiln.custom_vjp
    def h(x):
        return jnp.sin(x)
    h.defvjp(lambda x: (jnp.sin(x), jnp.cos(x)), lambda c, ct: (2.0 * c * ct,))  # a doubled derivative
    assert float(kiln.grad(kiln.grad(lambda v: h(v) ** 2))(0.4)) == pytest.approx(2.786826837388662, rel=1e-12)
    hess = kiln.hessian(lambda v: jnp.sum(h(v) ** 2))(jnp.asarray([0.4, 1.1]))
    np.testing.assert_allclose(np.asarray(hess), [[2.78682684, 0.0], [0.0, -2.35400447]], rtol=1e-8)


def test_differentiating_a_forward_mode_derivative_of_custom_vjp_raises():
    g = _clip_gradient()
    with pytest.raises(NotImplementedError, match="custom_vjp"):
        kiln.jacrev(kiln.jacfwd(lambda v: jnp.sum(g(v) ** 2)))(jnp.ones(2))


def test_retraced_equal_rules_reuse_cached_executables():
    # regression guard: grad outside jit re-traces custom_vjp and checkpoint bodies on every call;
    # equations own their bodies now, and equal bodies must key the same eager executables, so
    # repeated calls neither recompile nor grow the caches
    from kiln import _kiln
    g = _sin_doubled_vjp()
    h = kiln.checkpoint(lambda v: jnp.sin(v) * 2)
    x = jnp.ones(3)
    step = kiln.grad(lambda v: (g(v) + h(v)).sum())
    step(x)
    compiles = _kiln.compile_stats()[0]
    for _ in range(5):
        np.testing.assert_allclose(np.asarray(step(x)), 4 * np.cos(np.ones(3)), rtol=1e-6)
    assert _kiln.compile_stats()[0] == compiles


def test_take_body_moves_the_program_out():
    from kiln import _kiln
    b = _kiln.Builder()
    x = b.add_input((3,), "float32", False)
    (y,) = b.add_eqn("neg", (x,), None)
    b.set_outputs((y[0],))
    body = b.take_body()
    assert body.counts() == (1, 1, 1) and b.counts() == (0, 0, 0)


def test_derivative_programs_through_custom_rules_are_clean():
    # what make_jaxpr shows after simplification: only the rules' own work remains (no leftover
    # call equations, dead forward values, zeros or identity ops)
    f, g = _scaled_rule(), _sin_doubled_vjp()
    x = jnp.ones(3)
    cases = [(kiln.grad(lambda v: f(v).sum()), x, 3),   # cos, literal 3, mul
             (kiln.grad(lambda v: g(v).sum()), x, 3),   # cos, literal 2, mul
             (kiln.grad(lambda v: kiln.checkpoint(jnp.sin)(v).sum()), x, 2),  # barrier, cos
             (kiln.grad(kiln.grad(f)), 0.7, 4),          # sin, neg, literal 3, mul
             (kiln.grad(kiln.grad(g)), 0.7, 4)]
    for fn, arg, n in cases:
        jaxpr = kiln.make_jaxpr(fn)(arg)
        assert jaxpr.num_eqns == n, str(jaxpr)
        assert "call" not in str(jaxpr) and "checkpoint" not in str(jaxpr), str(jaxpr)


def test_custom_jvp_function_and_rule_see_values_under_grad_outside_jit():
    # as in JAX's eager mode: Python control flow on values inside the function and its rule
    @kiln.custom_jvp
    def f(x):
        return jnp.sin(x) if x > 0 else x

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return f(x), (2 * jnp.cos(x) if x > 0 else 1.0) * t
    assert float(kiln.grad(f)(0.5)) == pytest.approx(2 * np.cos(0.5), rel=1e-6)
    assert float(kiln.grad(f)(-0.5)) == 1.0
    assert float(kiln.grad(kiln.grad(f))(0.5)) == pytest.approx(-2 * np.sin(0.5), rel=1e-6)
    with pytest.raises(kiln.errors.TracerBoolConversionError):
        kiln.jit(kiln.grad(f))(0.5)


def test_custom_jvp_zero_tangent_of_a_bool_output_under_strict_promotion():
    """Issue 33 (diffrax's events): a custom_jvp rule leaving a bool output's tangent None made
    kiln compute `bool * 0`, which strict dtype promotion refuses; the zero is of the output's dtype."""
    x0 = float(np.random.default_rng().uniform(0.5, 2))

    @kiln.custom_jvp
    def f(x):
        return x * 2, x > 0

    @f.defjvp
    def f_jvp(p, t):
        return f(p[0]), (t[0] * 2, None)
    with kiln.numpy_dtype_promotion("strict"):
        assert float(kiln.grad(lambda x: f(x)[0])(x0)) == 2.0
        np.testing.assert_array_equal(kiln.vmap(kiln.grad(lambda x: f(x)[0]))(jnp.full(2, x0)), [2.0, 2.0])


def _named(x):
    from kiln.ad_checkpoint import checkpoint_name
    a = checkpoint_name(jnp.sin(x), "a")
    b = checkpoint_name(jnp.cos(a), "b")
    return jnp.sum(jnp.exp(b) * a)


@pytest.mark.parametrize("policy,sins,coss", [
    (None, 3, 3),
    (kiln.checkpoint_policies.save_only_these_names("a"), 2, 3),
    (kiln.checkpoint_policies.save_only_these_names("a", "b"), 2, 2),
    (kiln.checkpoint_policies.save_any_names_but_these("a"), 3, 2),
    (kiln.checkpoint_policies.save_from_both_policies(kiln.checkpoint_policies.save_only_these_names("b"),
                                                      kiln.checkpoint_policies.dots_saveable), 3, 2),
    (kiln.checkpoint_policies.save_from_both_policies(kiln.checkpoint_policies.save_only_these_names("a"),
                                                      kiln.checkpoint_policies.save_any_names_but_these("a", "b")),
     2, 3),
    (kiln.checkpoint_policies.save_and_offload_only_these_names(names_which_can_be_saved=["a"],
                                                                 names_which_can_be_offloaded=["b"]), 2, 2),
])
def test_checkpoint_names_decide_what_is_kept(policy, sins, coss):
    """Issue 34: checkpoint_name and the names policies as JAX's: a named value the policy saves is
    not recomputed in the backward pass (counted in the differentiated program: sin once for the
    forward pass, once for cos's derivative, once more when a is recomputed); values and gradients
    never change."""
    x = jnp.asarray(np.random.default_rng(5).uniform(-1, 1, 7).astype(np.float32))
    g = kiln.grad(kiln.checkpoint(_named, policy=policy))
    text = kiln.jit(g).lower(x).as_text()
    assert (text.count("= sin "), text.count("= cos ")) == (sins, coss), text
    xs = np.asarray(x, np.float64)
    want = np.exp(np.cos(np.sin(xs))) * np.cos(xs) * (1 - np.sin(np.sin(xs)) * np.sin(xs))
    np.testing.assert_allclose(np.asarray(g(x)), want, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(kiln.jit(g)(x)), want, rtol=1e-5)


def test_checkpoint_name_outside_differentiation_and_under_vmap():
    from kiln.ad_checkpoint import checkpoint_name
    x = jnp.asarray(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    assert checkpoint_name(x, "x") is x  # a concrete value is returned as it is
    out = kiln.vmap(kiln.jit(lambda v: checkpoint_name(v * 2, "y") + 1))(x)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x) * 2 + 1)
    tree = checkpoint_name({"a": x, "b": 1.0}, "t")
    assert tree["b"] == 1.0
    with pytest.raises(TypeError, match="checkpoint_name: the name must be a str"):
        kiln.jit(lambda v: checkpoint_name(v, 3))(x)
