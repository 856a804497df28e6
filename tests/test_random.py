"""kiln.random reproduces JAX's numbers (threefry-2x32, partitionable layout). The expected values
were produced by jax 0.10.2 on the CPU (jax.random with the same keys)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln import random as kr

JAX = {
    "split": [[1797259609, 2579123966], [928981903, 3453687069]],
    "split3_42": [[1832780943, 270669613], [64467757, 2916123636], [2465931498, 255383827]],
    "bits": [[4070199207, 4202968722, 1427181096], [2012915765, 2447653815, 710830403]],
    "uniform": [0.947667, 0.9785799, 0.33229148, 0.46866846, 0.5698887],
    "normal": [1.6226422, 2.0252647, -0.43359444, -0.07861735, 0.1760909],
    "fold_in_7": [2716826189, 292468403],
    "vmap_uniform": [[0.8423141, 0.18237865], [0.00729382, 0.02089119], [0.9024495, 0.91229284]],
    "bernoulli_03": [False, False, False, False, False, True],
    "gumbel": [2.9233725, 3.8326178, -0.09689324],
    "uniform_7_m2_3": [[1.3704495, 2.8730845], [-0.48578215, 0.2197926]],
}


@pytest.mark.parametrize("wrap", ["eager", "jit"])
def test_keys_and_bits_match_jax_exactly(wrap):
    w = kiln.jit if wrap == "jit" else (lambda f: f)
    k = kr.PRNGKey(0)
    np.testing.assert_array_equal(np.asarray(kr.PRNGKey(42)), [0, 42])
    np.testing.assert_array_equal(np.asarray(kr.PRNGKey(-1)), [0, 4294967295])
    np.testing.assert_array_equal(np.asarray(w(kr.split)(k)), JAX["split"])
    np.testing.assert_array_equal(np.asarray(w(lambda kk: kr.split(kk, 3))(kr.PRNGKey(42))), JAX["split3_42"])
    np.testing.assert_array_equal(np.asarray(w(lambda kk: kr.bits(kk, (2, 3)))(k)), JAX["bits"])
    np.testing.assert_array_equal(np.asarray(w(lambda kk: kr.fold_in(kk, 7))(k)), JAX["fold_in_7"])


@pytest.mark.parametrize("wrap", ["eager", "jit"])
def test_samplers_match_jax(wrap):
    w = kiln.jit if wrap == "jit" else (lambda f: f)
    k = kr.PRNGKey(0)
    np.testing.assert_allclose(np.asarray(w(lambda kk: kr.uniform(kk, (5,)))(k)), JAX["uniform"], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(w(lambda kk: kr.normal(kk, (5,)))(k)), JAX["normal"], rtol=2e-6, atol=2e-7)
    np.testing.assert_array_equal(np.asarray(w(lambda kk: kr.bernoulli(kk, 0.3, (6,)))(k)), JAX["bernoulli_03"])
    np.testing.assert_allclose(np.asarray(w(lambda kk: kr.gumbel(kk, (3,)))(k)), JAX["gumbel"], rtol=2e-6)
    got = w(lambda kk: kr.uniform(kk, (2, 2), minval=-2, maxval=3))(kr.PRNGKey(7))
    np.testing.assert_allclose(np.asarray(got), JAX["uniform_7_m2_3"], rtol=1e-6)


def test_vmap_over_keys_and_traced_seed():
    got = kiln.vmap(lambda kk: kr.uniform(kk, (2,)))(kr.split(kr.PRNGKey(0), 3))
    np.testing.assert_allclose(np.asarray(got), JAX["vmap_uniform"], rtol=1e-6)  # (printed decimals)
    np.testing.assert_array_equal(np.asarray(kiln.jit(kr.PRNGKey)(-1)), [0, 4294967295])


def test_statistics_of_a_large_draw():
    u = np.asarray(kr.uniform(kr.PRNGKey(1), (200_000,)))
    n = np.asarray(kr.normal(kr.PRNGKey(2), (200_000,)))
    assert u.min() >= 0.0 and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.005
    assert abs(n.mean()) < 0.01 and abs(n.std() - 1.0) < 0.01


def test_errors_name_the_function():
    with pytest.raises(TypeError, match="split"):
        kr.split(jnp.ones(2))
    with pytest.raises(ValueError, match="uniform: dtype must be a float"):
        kr.uniform(kr.PRNGKey(0), (2,), jnp.int32)


def test_bitcast_convert_type():
    x = np.array([1.0, -2.5, 0.0, np.inf], np.float32)
    b = lax.bitcast_convert_type(jnp.asarray(x), jnp.uint32)
    np.testing.assert_array_equal(np.asarray(b), x.view(np.uint32))
    np.testing.assert_array_equal(np.asarray(kiln.jit(lambda v: lax.bitcast_convert_type(v, jnp.float32))(b)), x)
    assert lax.bitcast_convert_type(jnp.ones(2), jnp.int8).shape == (2, 4)  # a narrower dtype: a new axis (JAX)
    with pytest.raises(TypeError, match="bitcast_convert_type"):
        lax.bitcast_convert_type(jnp.ones(2), jnp.bool_)


def test_draws_take_the_default_float_width_as_jax_does(x64):
    # under jax_enable_x64 JAX draws float64 from 64-bit fields (two threefry words side by side)
    u = kr.uniform(kr.PRNGKey(3), (4,))
    assert u.dtype == np.float64
    b = np.asarray(kr.bits(kr.PRNGKey(3), (4,), np.uint64))
    assert b.dtype == np.uint64 and len(set(b.tolist())) == 4
    want = (b >> np.uint64(12) | np.float64(1.0).view(np.uint64)).view(np.float64) - 1.0  # JAX's construction
    np.testing.assert_array_equal(np.asarray(u), want)
    n = np.asarray(kr.normal(kr.PRNGKey(4), (50_000,)))
    assert n.dtype == np.float64 and abs(n.mean()) < 0.02 and abs(n.std() - 1.0) < 0.02
