"""Typed PRNG keys (kiln.random.key) behave as JAX 0.10.2's: kiln.Array instances with the extended
dtype key<fry>, pytree leaves to users, passed through jit, vmap, grad, the loops, eval_shape and
kiln.numpy's structural functions as keys (kiln lowers them to their uint32 data at each boundary
and rebuilds them), with the same numbers as raw keys. Expected values were produced by jax 0.10.2
on the CPU; the tests marked `jax` draw fresh seeds and compare with JAX directly.

Bug guarded (issue 33): keys were not kiln.Array instances, issubdtype(k.dtype, prng_key) raised,
and tree_leaves gave their uint32 data, so flax refused kiln's keys."""
import pickle

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import dtypes, lax
from kiln import random as kr

JAX = {
    "split4_42": [[1832780943, 270669613], [64467757, 2916123636], [2465931498, 255383827],
                  [3134548294, 894150801]],
    "fold_in_42_7": [2547012911, 1371500959],
    "vmap_uniform_42": [0.5302608013153076, 0.7276642322540283, 0.6672406196594238, 0.38901209831237793],
    "scan_carry_42": [1773327481, 1441649378],
    "scan_ys_42": [0.48870956897735596, 0.5302608013153076, 0.23582494258880615],
}


def data(k):
    return np.asarray(kr.key_data(k))


def test_key_is_an_array_and_not_a_tracer():
    k = kr.key(0)
    assert isinstance(k, kiln.Array) and isinstance(k, jnp.ndarray)
    assert not isinstance(k, kiln.core.Tracer)
    assert isinstance(jnp.ones(2), kiln.Array) and not isinstance(np.ones(2), kiln.Array)
    assert not isinstance(kr.PRNGKey(0), kr.PRNGKeyArray)  # legacy keys stay uint32 arrays
    seen = []
    kiln.jit(lambda x: seen.append(isinstance(x, kiln.Array) and isinstance(x, kiln.core.Tracer)) or x)(1.0)
    assert seen == [True]


def test_key_dtype_is_an_extended_dtype():
    k, k2 = kr.key(0), kr.key(5)
    d = k.dtype
    assert str(d) == repr(d) == d.name == "key<fry>"
    assert d == k2.dtype and hash(d) == hash(k2.dtype) and len({d, k2.dtype}) == 1
    assert d != np.dtype(np.uint32) and d != "uint32"
    assert d.type is dtypes.prng_key and d.itemsize == 8
    for issub in (dtypes.issubdtype, jnp.issubdtype):
        assert issub(d, dtypes.prng_key) and issub(d, dtypes.extended) and issub(d, d)
        assert issub(d, np.generic)  # as JAX: extended is under np.generic
        assert not issub(d, np.floating) and not issub(d, np.integer) and not issub(d, np.uint32)
        assert not issub(np.float32, dtypes.prng_key) and not issub(np.float32, dtypes.extended)
        assert issub(dtypes.prng_key, dtypes.extended) and issub(np.float32, np.floating)
    with pytest.raises(TypeError):
        np.dtype(d)
    assert pickle.loads(pickle.dumps(d)) == d


def test_keys_are_pytree_leaves():
    k = kr.key(3)
    tree = {"a": k, "b": [1.0, k]}
    leaves = kiln.tree_util.tree_leaves(tree)
    assert len(leaves) == 3 and leaves[0] is k and leaves[2] is k
    assert str(kiln.tree_util.tree_structure(k)) == "PyTreeDef(*)"
    assert kiln.tree.map(lambda x: type(x).__name__, tree) == {"a": "PRNGKeyArray", "b": ["float", "PRNGKeyArray"]}
    assert kiln.tree_util.tree_leaves(kiln.tree_util.tree_map(lambda x: x, tree))[0] is k
    assert kiln.tree_map is kiln.tree_util.tree_map and kiln.tree.leaves({"k": k})[0] is k
    assert kiln.tree_util.all_leaves([k, 1.0]) and not kiln.tree_util.is_tree_node(kr.PRNGKeyArray)
    from kiln._src.tree_util import _registry  # what flax nnx asks (jax._src.tree_util._registry)
    assert kr.PRNGKeyArray not in _registry and dict in _registry
    paths = kiln.tree_util.tree_leaves_with_path({"a": k})
    assert len(paths) == 1 and paths[0][1] is k


def test_indexing_reshape_and_numpy_structural_functions():
    ks = kr.split(kr.key(42), 4)
    assert ks.shape == (4,) and ks.ndim == 1 and ks.size == 4 and len(ks) == 4
    np.testing.assert_array_equal(data(ks), JAX["split4_42"])
    np.testing.assert_array_equal(data(ks[1]), JAX["split4_42"][1])
    np.testing.assert_array_equal(data(kr.split(kr.key(42), 4)[3]), JAX["split4_42"][3])
    assert ks[None].shape == (1, 4) and ks[..., None].shape == (4, 1) and ks[1:3].shape == (2,)
    r = ks.reshape(2, 2)
    assert r.shape == (2, 2) and data(r).shape == (2, 2, 2)
    np.testing.assert_array_equal(data(r.T), np.swapaxes(data(r), 0, 1))
    assert r.ravel().shape == (4,) and ks.reshape((1, 4)).squeeze().shape == (4,)
    st = jnp.stack([ks[0], ks[2]])
    np.testing.assert_array_equal(data(st), np.array(JAX["split4_42"])[[0, 2]])
    np.testing.assert_array_equal(data(jnp.stack([ks, ks], axis=-1)), np.stack([data(ks)] * 2, axis=1))
    cat = jnp.concatenate([ks, ks[:1]], axis=-1)
    np.testing.assert_array_equal(data(cat), np.array(JAX["split4_42"])[[0, 1, 2, 3, 0]])
    assert jnp.asarray(ks) is ks or np.array_equal(data(jnp.asarray(ks)), data(ks))
    assert isinstance(jnp.asarray(ks), kr.PRNGKeyArray)
    with pytest.raises(TypeError, match="key"):
        jnp.stack([ks[0], jnp.zeros(())])
    with pytest.raises(TypeError, match="key_data"):
        np.asarray(ks)
    with pytest.raises(TypeError):
        ks.astype(np.uint32)
    with pytest.raises(TypeError):
        len(kr.key(0))
    assert [type(k) for k in ks] == [kr.PRNGKeyArray] * 4
    np.testing.assert_array_equal(np.asarray(ks == ks), [True] * 4)
    assert bool(kr.key(1) == kr.key(1)) and not bool(kr.key(1) != kr.key(1))


def test_jit_takes_and_returns_keys():
    k = kr.key(42)
    out = kiln.jit(lambda k: kr.split(k, 4))(k)
    assert isinstance(out, kr.PRNGKeyArray) and out.dtype == k.dtype
    np.testing.assert_array_equal(data(out), JAX["split4_42"])
    same = kiln.jit(lambda t: t)({"k": k, "x": jnp.ones(2)})
    assert isinstance(same["k"], kr.PRNGKeyArray)
    np.testing.assert_array_equal(data(same["k"]), data(k))
    np.testing.assert_array_equal(data(kiln.jit(kr.fold_in)(k, 7)), JAX["fold_in_42_7"])
    np.testing.assert_array_equal(data(kr.fold_in(k, 7)), JAX["fold_in_42_7"])
    assert float(kiln.jit(kr.uniform)(k)) == float(kr.uniform(k))
    assert isinstance(kiln.device_put(k), kr.PRNGKeyArray)
    np.testing.assert_array_equal(data(kiln.device_put({"k": k})["k"]), data(k))


def test_vmap_maps_key_arrays():
    ks = kr.split(kr.key(42), 4)
    np.testing.assert_allclose(np.asarray(kiln.vmap(lambda k: kr.uniform(k))(ks)), JAX["vmap_uniform_42"], rtol=1e-6)
    out = kiln.vmap(lambda k: kr.split(k, 3), out_axes=1)(ks)
    assert out.shape == (3, 4) and data(out).shape == (3, 4, 2)
    out_neg = kiln.vmap(lambda k: kr.split(k, 3), out_axes=-1)(ks)
    assert out_neg.shape == (3, 4)
    np.testing.assert_array_equal(data(out_neg), data(out))
    grid = ks.reshape(2, 2)
    col = kiln.vmap(lambda k: kr.key_data(k), in_axes=-1)(grid)
    np.testing.assert_array_equal(np.asarray(col), np.swapaxes(data(grid), 0, 1))
    both = kiln.vmap(lambda x, k: x * kr.uniform(k), in_axes=(None, 0))(2.0, ks)
    np.testing.assert_allclose(np.asarray(both), 2 * np.array(JAX["vmap_uniform_42"]), rtol=1e-6)
    batched = kiln.vmap(lambda k: k)(ks)
    assert isinstance(batched, kr.PRNGKeyArray) and batched.shape == (4,)


def test_grad_and_jvp_with_key_arguments():
    k = kr.key(42)
    u = float(kr.uniform(k))
    assert float(kiln.grad(lambda x, k: x * kr.uniform(k))(2.0, k)) == pytest.approx(u)
    with pytest.raises(TypeError, match="grad requires real- or complex-valued inputs .* got key<fry>"):
        kiln.grad(lambda x, k: x * kr.uniform(k), argnums=1)(2.0, k)
    float0 = kiln.dtypes.float0
    g = kiln.grad(lambda p: p["x"] * kr.uniform(p["k"]), allow_int=True)({"x": 2.0, "k": k})
    assert float(g["x"]) == pytest.approx(u)
    assert g["k"].dtype == float0 and g["k"].shape == ()  # JAX's tangent type of a key
    gk = kiln.grad(lambda x, ks: x * kr.uniform(ks[1]), argnums=(0, 1), allow_int=True)(2.0, kr.split(k, 3))
    assert gk[1].dtype == float0 and gk[1].shape == (3,)
    p, t = kiln.jvp(lambda x, k: x * kr.uniform(k), (2.0, k), (1.0, np.zeros((), float0)))
    assert float(p) == pytest.approx(2 * u) and float(t) == pytest.approx(u)
    (v, aux), g = kiln.value_and_grad(lambda x, k: (x * kr.uniform(k), kr.split(k)[0]), has_aux=True)(2.0, k)
    assert isinstance(aux, kr.PRNGKeyArray) and float(g) == pytest.approx(u)
    np.testing.assert_array_equal(data(aux), data(kr.split(k)[0]))
    assert float(kiln.checkpoint(lambda x, k: x * kr.uniform(k))(2.0, k)) == pytest.approx(2 * u)


def test_loop_and_cond_carries():
    k = kr.key(42)
    c, ys = lax.scan(lambda c, _: (kr.split(c)[0], kr.uniform(c)), k, None, length=3)
    assert isinstance(c, kr.PRNGKeyArray)
    np.testing.assert_array_equal(data(c), JAX["scan_carry_42"])
    np.testing.assert_allclose(np.asarray(ys), JAX["scan_ys_42"], rtol=1e-6)
    _, keys = lax.scan(lambda c, _: (kr.split(c)[0], c), k, None, length=3)
    assert isinstance(keys, kr.PRNGKeyArray) and keys.shape == (3,)
    np.testing.assert_array_equal(data(keys[0]), data(k))
    f = lax.fori_loop(0, 3, lambda i, c: kr.split(c)[0], k)
    np.testing.assert_array_equal(data(f), JAX["scan_carry_42"])
    w = lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, kr.split(c[1])[0]), (0, k))[1]
    np.testing.assert_array_equal(data(w), JAX["scan_carry_42"])
    for pred in (True, jnp.array(True)):
        out = kiln.jit(lambda p, k: lax.cond(p, lambda k: kr.split(k)[0], lambda k: k, k))(pred, k)
        np.testing.assert_array_equal(data(out), data(kr.split(k)[0]))
    out = lax.cond(False, lambda k: kr.split(k)[0], lambda k: k, k)
    assert isinstance(out, kr.PRNGKeyArray)
    np.testing.assert_array_equal(data(out), data(k))


def test_key_data_wrap_pickle_and_eval_shape():
    raw = np.array([7, 11], np.uint32)
    w = kr.wrap_key_data(raw)
    assert isinstance(w, kr.PRNGKeyArray) and w.shape == ()
    np.testing.assert_array_equal(data(w), raw)
    np.testing.assert_array_equal(np.asarray(kr.PRNGKey(5)), [0, 5])
    np.testing.assert_array_equal(data(kr.key(5)), np.asarray(kr.PRNGKey(5)))
    # the same numbers from a typed key and a raw key of the same data
    assert float(kr.normal(kr.key(9))) == float(kr.normal(kr.PRNGKey(9)))
    back = pickle.loads(pickle.dumps(kr.split(kr.key(42), 4)))
    np.testing.assert_array_equal(data(back), JAX["split4_42"])
    s = kiln.eval_shape(lambda k: kr.split(k), kr.key(0))
    assert isinstance(s, kiln.ShapeDtypeStruct) and s.shape == (2,) and s.dtype == kr.key(0).dtype
    spec = kiln.ShapeDtypeStruct((), kr.key(0).dtype)
    out = kiln.eval_shape(lambda k: (kr.uniform(k, (3,)), kr.split(k, 5)), spec)
    assert out[0].shape == (3,) and out[0].dtype == np.float32
    assert out[1].shape == (5,) and str(out[1].dtype) == "key<fry>"


def test_fresh_seeds_match_jax():
    jax = pytest.importorskip("jax")
    seed = int(np.random.default_rng().integers(0, 2 ** 31))
    k, jk = kr.key(seed), jax.random.key(seed)
    jd = lambda x: np.asarray(jax.random.key_data(x))  # noqa: E731
    np.testing.assert_array_equal(data(kr.split(k, 5)), jd(jax.random.split(jk, 5)), err_msg=f"seed {seed}")
    np.testing.assert_array_equal(data(kiln.jit(lambda k: kr.fold_in(k, 3))(k)), jd(jax.random.fold_in(jk, 3)))
    ks, jks = kr.split(k, 3), jax.random.split(jk, 3)
    np.testing.assert_allclose(np.asarray(kiln.vmap(lambda k: kr.normal(k, (2,)))(ks)),
                               np.asarray(jax.vmap(lambda k: jax.random.normal(k, (2,)))(jks)), rtol=1e-6)
    c, ys = lax.scan(lambda c, _: (kr.split(c)[1], kr.uniform(c)), k, None, length=4)
    jc, jys = jax.lax.scan(lambda c, _: (jax.random.split(c)[1], jax.random.uniform(c)), jk, None, length=4)
    np.testing.assert_array_equal(data(c), jd(jc))
    np.testing.assert_allclose(np.asarray(ys), np.asarray(jys), rtol=1e-6)
    assert jax.dtypes.issubdtype(jk.dtype, jax.dtypes.prng_key) == dtypes.issubdtype(k.dtype, dtypes.prng_key)
    assert len(jax.tree_util.tree_leaves({"a": jk})) == len(kiln.tree_util.tree_leaves({"a": k})) == 1


def test_samplers_take_out_sharding():
    """flax's layers pass out_sharding=None to the samplers (JAX 0.10.2's keyword)."""
    k = kr.key(int(np.random.default_rng().integers(0, 2 ** 31)))
    np.testing.assert_array_equal(np.asarray(kr.normal(k, (3,), out_sharding=None)), np.asarray(kr.normal(k, (3,))))
    assert bool(kr.bernoulli(k, 0.5, (4,), out_sharding=None).dtype == np.bool_)
    mesh = kiln.make_mesh((1,), ("x",))
    placed = kr.uniform(k, (4,), out_sharding=kiln.sharding.NamedSharding(mesh, kiln.sharding.PartitionSpec("x")))
    assert placed.sharding.spec == kiln.sharding.PartitionSpec("x")
    np.testing.assert_array_equal(np.asarray(placed), np.asarray(kr.uniform(k, (4,))))
    # flax's Dropout passes jax.typeof(inputs).sharding: the empty mesh's, which places nothing
    same = kr.bernoulli(k, 0.5, (4,), out_sharding=kiln.typeof(jnp.ones(4)).sharding)
    np.testing.assert_array_equal(np.asarray(same), np.asarray(kr.bernoulli(k, 0.5, (4,))))
    with pytest.raises(TypeError, match="out_sharding"):
        kr.normal(k, out_sharding=kiln.sharding.SingleDeviceSharding(kiln.devices()[0]))
    with pytest.raises(ValueError, match="mesh"):
        kr.normal(k, out_sharding=kiln.sharding.PartitionSpec())
    import inspect
    assert "out_sharding" in inspect.signature(kr.truncated_normal).parameters


def test_device_put_tree_with_none_and_jit_out_shardings_none():
    """flax nnx's jit passes out_shardings=(None, ...): a None leaves its subtree where it is (as JAX's
    device_put of a prefix tree of placements); keys inside are placed as keys."""
    x = jnp.asarray(np.random.default_rng().standard_normal(3).astype(np.float32))
    k = kr.key(4)
    out = kiln.device_put((x, {"a": x, "k": k}), (None, None))
    np.testing.assert_array_equal(np.asarray(out[1]["a"]), np.asarray(x))
    assert isinstance(out[1]["k"], kr.PRNGKeyArray)
    d = kiln.devices()[0]
    placed = kiln.device_put((x, k), (d, d))
    assert isinstance(placed[1], kr.PRNGKeyArray) and placed[0].devices() == {d}
    a, b = kiln.jit(lambda v, k: (v * 2, kr.split(k)[0]), out_shardings=(None, None))(x, k)
    np.testing.assert_allclose(np.asarray(a), 2 * np.asarray(x))
    np.testing.assert_array_equal(data(b), data(kr.split(k)[0]))
    with pytest.raises(ValueError, match="prefix"):
        kiln.device_put((x, x), (d, d, d))


def test_array_equal_of_typed_keys_compares_key_data():
    # blackjax checks that a step advanced its key with jnp.array_equal(new_key, old_key)
    k = kr.key(int(np.random.default_rng().integers(1 << 30)))
    assert bool(jnp.array_equal(k, k)) and not bool(jnp.array_equal(k, kr.split(k)[0]))


def test_jnp_equal_and_not_equal_of_typed_keys():
    ks = kr.split(kr.key(int(np.random.default_rng().integers(1 << 30))), 3)
    np.testing.assert_array_equal(jnp.equal(ks, ks[1]), [False, True, False])
    np.testing.assert_array_equal(jnp.not_equal(ks, ks), [False] * 3)


def test_shape_functions_take_typed_keys():
    # flax nnx's Rngs.broadcast: jnp.broadcast_to of a key array (it raised: a key array cannot
    # become a NumPy array); each shape function works on the key array's axes, as JAX's
    keys = kiln.random.split(kiln.random.key(int(np.random.default_rng().integers(1 << 30))), 6)
    data = np.asarray(kiln.random.key_data(keys))
    cases = [
        (lambda k: jnp.broadcast_to(k, (2, 6)), lambda d: np.broadcast_to(d, (2, 6, 2))),
        (lambda k: jnp.reshape(k, (2, 3)), lambda d: d.reshape(2, 3, 2)),
        (lambda k: jnp.transpose(jnp.reshape(k, (2, 3))), lambda d: d.reshape(2, 3, 2).transpose(1, 0, 2)),
        (lambda k: jnp.moveaxis(jnp.reshape(k, (2, 3)), -1, 0), lambda d: np.moveaxis(d.reshape(2, 3, 2), 1, 0)),
        (lambda k: jnp.expand_dims(k, -1), lambda d: d[:, None]),
        (lambda k: jnp.squeeze(jnp.expand_dims(k, 0)), lambda d: d),
        (lambda k: jnp.flip(k), lambda d: d[::-1]),
        (lambda k: jnp.roll(k, 2), lambda d: np.roll(d, 2, axis=0)),
        (lambda k: jnp.tile(k, 2), lambda d: np.concatenate([d, d])),
        (lambda k: jnp.repeat(k, 2), lambda d: np.repeat(d, 2, axis=0)),
        (lambda k: jnp.ravel(jnp.reshape(k, (3, 2))), lambda d: d),
    ]
    for f, ref in cases:
        for g in (f, kiln.jit(f)):
            out = g(keys)
            assert jnp.issubdtype(out.dtype, kiln.dtypes.prng_key)
            np.testing.assert_array_equal(np.asarray(kiln.random.key_data(out)), ref(data))
    b = kiln.vmap(lambda k: jnp.broadcast_to(k, (3,)))(keys)
    assert b.shape == (6, 3)
    np.testing.assert_array_equal(np.asarray(kiln.random.key_data(b)), np.broadcast_to(data[:, None], (6, 3, 2)))


def test_result_type_of_typed_keys_is_their_dtype():
    # flax's scan builds its key carries' ShapedArray from jnp.result_type(keys)
    keys = kiln.random.split(kiln.random.key(int(np.random.default_rng().integers(1 << 30))), 3)
    assert jnp.result_type(keys) == keys.dtype and jnp.result_type(keys, keys[0]) == keys.dtype
    with pytest.raises(TypeError, match="key<fry>.*float"):
        jnp.result_type(keys, 1.0)
    assert jnp.result_type(np.int8(1), 2.0) == np.float32  # (the lattice is untouched)


def test_where_picks_typed_keys_and_iscomplexobj_of_keys():
    """Issue 33 (diffrax's Brownian tree): jnp.where over typed key arrays picks keys, broadcasting
    as JAX's; jnp.iscomplexobj of a key array is False (it raised)."""
    rng = np.random.default_rng()
    k1 = kiln.random.split(kiln.random.key(int(rng.integers(1 << 30))), 4)
    k2 = kiln.random.split(kiln.random.key(int(rng.integers(1 << 30))), 4)
    c = rng.random(4) < 0.5
    want = np.where(c[:, None], kiln.random.key_data(k1), kiln.random.key_data(k2))
    for f in (jnp.where, kiln.jit(jnp.where)):
        w = f(c, k1, k2)
        assert w.dtype == k1.dtype and w.shape == (4,)
        np.testing.assert_array_equal(kiln.random.key_data(w), want)
    np.testing.assert_array_equal(kiln.random.key_data(jnp.where(True, k1[0], k2)),
                                  np.broadcast_to(kiln.random.key_data(k1[0]), (4, 2)))
    with pytest.raises(TypeError, match="keys"):
        jnp.where(c, k1, jnp.zeros(4))
    assert not jnp.iscomplexobj(k1)
