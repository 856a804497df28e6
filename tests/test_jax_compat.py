"""The public names JAX's libraries import (issue 33, part 1): jax.flatten_util, jax.test_util,
jax.experimental.io_callback, every jax.config option (strict dtype promotion and rank promotion
honoured), ShapeDtypeStruct's sharding and like, typeof(x).sharding, PartitionSpec.UNCONSTRAINED.
Expected values are JAX 0.10.2's."""
import pickle
import warnings

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import flatten_util, test_util
from kiln.experimental import io_callback


@pytest.fixture
def promotion():
    yield kiln.config
    kiln.config.update("jax_numpy_dtype_promotion", "standard")
    kiln.config.update("jax_numpy_rank_promotion", "allow")


# ---- flatten_util ----

def test_ravel_pytree_round_trip_and_dtypes():
    rng = np.random.default_rng()
    a = rng.standard_normal((2, 3)).astype(np.float32)
    tree = {"a": jnp.asarray(a), "b": [jnp.arange(4), 2.0], "c": (jnp.ones((), jnp.bfloat16),)}
    flat, unravel = flatten_util.ravel_pytree(tree)
    assert flat.dtype == np.float32 and flat.shape == (12,)  # int32, bfloat16 and weak float promote to float32
    np.testing.assert_array_equal(np.asarray(flat[:6]), a.reshape(-1))
    np.testing.assert_array_equal(np.asarray(flat[6:10]), [0, 1, 2, 3])
    back = unravel(flat)
    assert kiln.tree_util.tree_structure(back) == kiln.tree_util.tree_structure(tree)
    assert back["b"][0].dtype == np.int32 and back["c"][0].dtype == jnp.bfloat16 and back["a"].shape == (2, 3)
    np.testing.assert_array_equal(np.asarray(back["a"]), a)
    # hashable and equal for equal layouts (a static argument), as JAX's HashablePartial
    assert unravel == flatten_util.ravel_pytree(tree)[1] and hash(unravel) == hash(flatten_util.ravel_pytree(tree)[1])
    with pytest.raises(TypeError, match="unravel function given array of dtype float16, but expected dtype float32"):
        unravel(flat.astype(jnp.float16))
    # one dtype: the unravel is dtype-polymorphic
    f2, u2 = flatten_util.ravel_pytree([jnp.ones(2), jnp.zeros((1, 2))])
    assert u2(f2.astype(jnp.float16))[1].dtype == np.float16
    empty, u3 = flatten_util.ravel_pytree({})
    assert empty.dtype == np.float32 and empty.shape == (0,) and u3(empty) == {}
    c, u4 = flatten_util.ravel_pytree([jnp.ones(2, jnp.complex64), jnp.ones(2)])
    assert c.dtype == np.complex64 and u4(c)[1].dtype == np.float32


def test_ravel_pytree_under_transformations():
    rng = np.random.default_rng()
    w, b = rng.standard_normal((3, 2)).astype(np.float32), rng.standard_normal(2).astype(np.float32)
    flat, unravel = flatten_util.ravel_pytree((jnp.asarray(w), jnp.asarray(b)))
    g = kiln.grad(lambda v: jnp.sum(unravel(v)[0] ** 2) + jnp.sum(unravel(v)[1]))(flat)
    np.testing.assert_allclose(np.asarray(g), np.concatenate([2 * w.reshape(-1), np.ones(2)]), rtol=1e-6)
    out = kiln.jit(lambda t: flatten_util.ravel_pytree(t)[0])((jnp.asarray(w), jnp.asarray(b)))
    np.testing.assert_array_equal(np.asarray(out), np.concatenate([w.reshape(-1), b]))


# ---- test_util ----

def test_check_grads_passes_and_catches_a_wrong_rule():
    x = np.random.default_rng().standard_normal(5).astype(np.float32)
    test_util.check_grads(lambda x: jnp.sum(jnp.sin(x) * x ** 2), (x,), order=2)
    test_util.check_grads(jnp.exp, (0.5,), order=3, modes=("fwd", "rev", "lin"))
    test_util.check_grads(lambda c: jnp.abs(c) ** 2, (np.complex64(1 + 2j),), order=1)

    @kiln.custom_jvp
    def wrong(x):
        return jnp.sin(x)
    wrong.defjvp(lambda p, t: (jnp.sin(p[0]), 2 * t[0]))
    with pytest.raises(AssertionError, match="JVP tangent"):
        test_util.check_grads(wrong, (x,), order=1, modes=["fwd"])


# ---- io_callback ----

def test_io_callback_runs_for_its_effect():
    log = []

    def cb(x):
        log.append(np.asarray(x).copy())
        return np.asarray(x * 2, np.float32)
    spec = kiln.ShapeDtypeStruct((3,), jnp.float32)
    x = np.random.default_rng().standard_normal(3).astype(np.float32)
    np.testing.assert_allclose(np.asarray(kiln.jit(lambda x: io_callback(cb, spec, x) + 1)(x)), 2 * x + 1)
    assert len(log) == 1
    kiln.jit(lambda x: (io_callback(cb, spec, x), x)[1])(x).block_until_ready()
    assert len(log) == 2  # its result unused, it still runs (pure_callback's would be removed)
    out = kiln.vmap(lambda v: io_callback(cb, kiln.ShapeDtypeStruct((), jnp.float32), v))(x)
    np.testing.assert_allclose(np.asarray(out), 2 * x)
    assert len(log) == 5  # once per element, in order
    np.testing.assert_array_equal(np.stack(log[2:]), x)
    with pytest.raises(ValueError, match="ordered"):
        kiln.vmap(lambda v: io_callback(cb, kiln.ShapeDtypeStruct((), jnp.float32), v, ordered=True))(x)
    with pytest.raises(ValueError, match="not differentiable"):
        kiln.jit(kiln.grad(lambda v: io_callback(cb, kiln.ShapeDtypeStruct((), jnp.float32), v)))(1.0)
    assert io_callback(lambda v: log.append(v), None, jnp.ones(3)) is None


# ---- config: promotion options honoured ----

def test_strict_dtype_promotion(promotion):
    promotion.update("jax_numpy_dtype_promotion", "strict")
    assert (jnp.ones(3) + 1.0).dtype == np.float32 and (jnp.ones(3) + 1).dtype == np.float32
    assert (jnp.ones(3, jnp.float16) + jnp.asarray(1.0)).dtype == np.float16  # weak joins
    for f in (lambda: jnp.ones(3, "int32") + 1.0, lambda: jnp.ones(3) + jnp.ones(3, "float16"),
              lambda: jnp.ones(3, "int8") + jnp.ones(3, "int32"), lambda: jnp.ones(3) + 1j,
              lambda: jnp.ones(3, bool) + 1, lambda: jnp.result_type(jnp.float32, jnp.float16)):
        with pytest.raises(kiln.dtypes.TypePromotionError, match="jax_numpy_dtype_promotion=strict"):
            f()
    assert issubclass(kiln.dtypes.TypePromotionError, ValueError)
    with kiln.numpy_dtype_promotion("standard"):
        assert (jnp.ones(3, "int32") + 1.0).dtype == np.float32
    assert kiln.config.jax_numpy_dtype_promotion == "strict"


def test_rank_promotion(promotion):
    promotion.update("jax_numpy_rank_promotion", "raise")
    with pytest.raises(ValueError, match="jax_numpy_rank_promotion='raise'"):
        jnp.ones((2, 3)) + jnp.ones(3)
    assert (jnp.ones((2, 3)) + 1.0).shape == (2, 3) and (jnp.ones((2, 3)) * jnp.ones(())).shape == (2, 3)
    assert jnp.where(jnp.ones((2, 3)) > 0, jnp.ones(3), 0.0).shape == (2, 3)  # where does not check (JAX)
    promotion.update("jax_numpy_rank_promotion", "warn")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert (jnp.ones((2, 3)) + jnp.ones(3)).shape == (2, 3)
    assert any("rank promotion" in str(x.message) for x in w)


# ---- abstract values and shardings ----

def test_shape_dtype_struct_sharding_and_like():
    x = jnp.ones((2, 3))
    s = kiln.ShapeDtypeStruct((2, 3), jnp.float32)
    assert s.sharding is None and s == kiln.ShapeDtypeStruct.like(x)
    assert kiln.ShapeDtypeStruct.like(1.0) == kiln.ShapeDtypeStruct((), jnp.float32, weak_type=True)
    assert s != kiln.ShapeDtypeStruct((2, 3), jnp.float32, weak_type=True)  # JAX compares weak types
    t = kiln.ShapeDtypeStruct((4,), jnp.int32, sharding=x.sharding)
    assert t.sharding == x.sharding and t.update(shape=(5,)).shape == (5,)
    assert kiln.eval_shape(lambda v: v * 2, s) == s
    a = kiln.typeof(x)
    assert a.sharding.spec == kiln.sharding.PartitionSpec(None, None) and a.sharding.mesh.empty


def test_partition_spec_unconstrained():
    P = kiln.sharding.PartitionSpec
    spec = P(None, P.UNCONSTRAINED)
    assert spec[1] is kiln.sharding.UNCONSTRAINED and repr(spec) == "PartitionSpec(None, UNCONSTRAINED)"
    assert pickle.loads(pickle.dumps(spec)) == spec
