"""custom_jvp / custom_vjp / checkpoint: evaluation runs the primal function; differentiating
through a custom rule is not supported yet and must raise, never return the plain derivative."""
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


@pytest.mark.parametrize("make", [_log1pexp, _clip_gradient])
@pytest.mark.parametrize("transform", ["grad", "jit_grad", "jvp", "vjp"])
def test_differentiating_a_custom_rule_raises(make, transform):
    f = make()
    x = jnp.asarray(0.5)
    with pytest.raises(NotImplementedError, match="custom_(jvp|vjp)"):
        if transform == "grad":
            kiln.grad(f)(x)
        elif transform == "jit_grad":
            kiln.jit(kiln.grad(f))(x)
        elif transform == "jvp":
            kiln.jvp(f, (x,), (jnp.asarray(1.0),))
        else:
            kiln.vjp(f, x)
    assert float(kiln.grad(jnp.sin)(x)) == pytest.approx(np.cos(0.5), rel=1e-6)  # kiln keeps working


def test_custom_jvp_without_rule_is_an_error():
    f = kiln.custom_jvp(lambda x: x)
    with pytest.raises(AttributeError, match="defjvp"):
        f(1.0)


@pytest.mark.parametrize("policy", [None, kiln.checkpoint_policies.nothing_saveable,
                                    kiln.checkpoint_policies.everything_saveable])
def test_checkpoint_gives_the_same_values_and_gradients(policy):
    def f(w, x):
        return jnp.sum(jnp.tanh(x @ w) ** 2)
    g = kiln.checkpoint(f, policy=policy)
    rng = np.random.default_rng(1)
    w = jnp.asarray(rng.standard_normal((3, 2)).astype(np.float32))
    x = jnp.asarray(rng.standard_normal((4, 3)).astype(np.float32))
    np.testing.assert_allclose(float(g(w, x)), float(f(w, x)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.grad(g)(w, x)), np.asarray(kiln.grad(f)(w, x)), rtol=1e-6)
    assert kiln.remat is kiln.checkpoint
