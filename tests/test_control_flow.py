"""lax.cond / switch / fori_loop / scan / map / while_loop, eagerly and under jit, grad and vmap,
against Python evaluations."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


def branchy(x):
    return lax.cond(jnp.sum(x) > 0, lambda v: jnp.sin(v) * 2, lambda v: v ** 2, x)


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("wrap", ["eager", "jit"])
def test_cond_values(sign, wrap):
    x = np.random.default_rng(0).uniform(0.1, 1.0, 4).astype(np.float32) * sign
    want = np.sin(x) * 2 if x.sum() > 0 else x ** 2
    f = kiln.jit(branchy) if wrap == "jit" else branchy
    np.testing.assert_allclose(np.asarray(f(jnp.asarray(x))), want, rtol=1e-6)


@pytest.mark.parametrize("x", [0.7, -0.7])
def test_cond_gradient_is_the_taken_branch(x):
    f = lambda v: lax.cond(v > 0, jnp.sin, lambda u: jnp.log(-u), v)  # log(-v) is NaN for v > 0
    want = np.cos(x) if x > 0 else 1.0 / x
    assert float(kiln.jit(kiln.grad(f))(x)) == pytest.approx(want, rel=1e-5)
    assert float(kiln.grad(f)(x)) == pytest.approx(want, rel=1e-5)


def test_cond_under_vmap_and_type_errors():
    got = kiln.vmap(lambda v: lax.cond(v > 0, lambda u: u * 3, lambda u: -u, v))(jnp.asarray([-1.0, 2.0, 0.5]))
    np.testing.assert_allclose(np.asarray(got), [1.0, 6.0, 1.5])
    with pytest.raises(TypeError, match="cond branches must have equal output types"):
        kiln.jit(lambda v: lax.cond(v > 0, lambda u: u, lambda u: jnp.stack([u, u]), v))(1.0)
    with pytest.raises(TypeError, match="scalar"):
        kiln.jit(lambda v: lax.cond(v > 0, lambda u: u, lambda u: u, v))(jnp.ones(2))


@pytest.mark.parametrize("index,want", [(-3, 4.0), (0, 4.0), (1, 30.0), (2, -3.0), (7, -3.0)])
def test_switch_clamps_the_index(index, want):
    branches = [lambda v: v + 1, lambda v: v * 10, lambda v: -v]
    assert float(kiln.jit(lambda i, x: lax.switch(i, branches, x))(index, 3.0)) == want
    assert float(lax.switch(index, branches, 3.0)) == want


def test_fori_loop_with_at_set_and_grad():
    g = kiln.jit(lambda z: lax.fori_loop(0, 10, lambda i, a: a.at[i].set(2.0 * i), z))
    want = np.zeros(12, np.float32)
    want[:10] = 2.0 * np.arange(10)
    np.testing.assert_array_equal(np.asarray(g(jnp.zeros(12))), want)
    power = lambda x: lax.fori_loop(0, 5, lambda i, v: v * x, jnp.ones(()))  # x ** 5
    assert float(kiln.jit(kiln.grad(power))(1.3)) == pytest.approx(5 * 1.3 ** 4, rel=1e-5)


def test_scan_and_map_against_python():
    xs = np.random.default_rng(1).standard_normal((6, 3)).astype(np.float32)
    step = lambda c, x: (c + x, c * x)
    carry, ys = kiln.jit(lambda a: lax.scan(step, jnp.zeros(3), a))(jnp.asarray(xs))
    c, want = np.zeros(3, np.float32), []
    for x in xs:
        c, y = step(c, x)
        want.append(y)
    np.testing.assert_allclose(np.asarray(carry), c, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ys), np.stack(want), rtol=1e-6)
    _, ys_rev = lax.scan(step, jnp.zeros(3), jnp.asarray(xs), reverse=True)
    c, want = np.zeros(3, np.float32), [None] * 6
    for i in reversed(range(6)):
        c, want[i] = step(c, xs[i])
    np.testing.assert_allclose(np.asarray(ys_rev), np.stack(want), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(lax.map(lambda v: v * 2, jnp.asarray(xs))), xs * 2)


def test_unsupported_traced_loops_raise_clearly():
    with pytest.raises(NotImplementedError, match="while_loop"):
        kiln.jit(lambda v: lax.while_loop(lambda u: u < 10, lambda u: u * 2, v))(1.0)
    with pytest.raises(NotImplementedError, match="traced bounds"):
        kiln.jit(lambda n, v: lax.fori_loop(0, n, lambda i, u: u + 1, v))(3, 0.0)
    with pytest.raises(NotImplementedError, match="unrolled"):
        kiln.jit(lambda v: lax.fori_loop(0, 10_000, lambda i, u: u + 1, v))(0.0)
    # concrete loops still work, also inside grad outside jit
    assert float(lax.while_loop(lambda u: u < 10, lambda u: u * 2, 1.0)) == 16.0
    assert float(kiln.grad(lambda v: lax.while_loop(lambda u: u < 10, lambda u: u * 2, v))(1.0)) == 16.0
