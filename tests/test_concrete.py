"""Concrete tracing: grad/jvp/vjp called outside jit record with values, so Python control flow on
values, float() and printing work inside the differentiated function, as in JAX; under jit (or
vmap) the same code raises the tracer errors."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.errors import TracerBoolConversionError


def piecewise(x):
    if x > 0:  # Python branch on a value
        return jnp.sin(x) * x
    return x ** 3


def fd(f, x, eps=1e-3):
    return (float(f(x + eps)) - float(f(x - eps))) / (2 * eps)


@pytest.mark.parametrize("x", [1.3, -0.7])
def test_if_on_values_under_grad(x):
    np.testing.assert_allclose(float(kiln.grad(piecewise)(x)), fd(piecewise, x), rtol=2e-3)


def test_for_and_while_on_values_and_float_and_print(capsys):
    def f(x):
        s = jnp.zeros(())
        for i in range(int(x)):  # trip count from a value
            s = s + x * i
        while float(s) < 50.0:  # loop condition on a value
            s = s * 2.0
        print("s =", s)
        return s
    g = float(kiln.grad(f)(4.0))
    # int(4.0) = 4 -> s = 6x = 24 -> doubled twice -> 24x ... = 96; ds/dx = 6 * 4 = 24
    assert g == pytest.approx(24.0)
    assert "s =" in capsys.readouterr().out


def test_value_and_grad_jvp_vjp_with_control_flow():
    x = jnp.asarray(0.8)
    v, g = kiln.value_and_grad(piecewise)(x)
    assert float(v) == pytest.approx(np.sin(0.8) * 0.8, rel=1e-6)
    assert float(g) == pytest.approx(np.cos(0.8) * 0.8 + np.sin(0.8), rel=1e-5)
    _, t = kiln.jvp(piecewise, (x,), (jnp.asarray(1.0),))
    assert float(t) == pytest.approx(float(g), rel=1e-6)
    _, back = kiln.vjp(piecewise, x)
    assert float(back(jnp.asarray(1.0))[0]) == pytest.approx(float(g), rel=1e-6)


def test_nested_grad_with_control_flow():
    x = 1.1
    want = -np.sin(x) * x + 2 * np.cos(x)  # d2/dx2 of x sin x
    assert float(kiln.grad(kiln.grad(piecewise))(x)) == pytest.approx(want, rel=1e-4)


def test_array_branch_per_call_retraces():
    def f(w):
        return jnp.sum(w * w) if float(jnp.max(w)) > 1 else jnp.sum(3 * w)
    np.testing.assert_allclose(np.asarray(kiln.grad(f)(jnp.asarray([2.0, 0.5]))), [4.0, 1.0])
    np.testing.assert_allclose(np.asarray(kiln.grad(f)(jnp.asarray([0.2, 0.5]))), [3.0, 3.0])


def test_under_jit_the_same_code_raises():
    with pytest.raises(TracerBoolConversionError, match="lax.cond"):
        kiln.jit(kiln.grad(piecewise))(1.0)
    with pytest.raises(TracerBoolConversionError):
        kiln.vmap(kiln.grad(piecewise))(jnp.ones(3))
    assert float(kiln.grad(piecewise)(1.0)) == pytest.approx(np.cos(1.0) + np.sin(1.0), rel=1e-5)
