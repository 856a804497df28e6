"""Collectives over a vmap's axis_name (JAX's `vmap(f, axis_name=...)` with psum, pmean, pmax,
pmin, all_gather, psum_scatter, ppermute, all_to_all, axis_index inside): against NumPy over the
batch, under jit and grad (finite differences), nested vmaps, inside a shard_map body, and the
errors for what is not supported. Runs on the default device."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("op,ref", [("psum", np.sum), ("pmean", np.mean), ("pmax", np.max), ("pmin", np.min)])
def test_reductions_over_the_batch(op, ref):
    x = _rand(5, 3)
    f = kiln.vmap(lambda v: v - getattr(lax, op)(v, "b"), axis_name="b")
    np.testing.assert_allclose(np.asarray(f(x)), x - ref(x, axis=0), rtol=1e-5, atol=1e-6)
    # batch axis 1 in and out, an unbatched argument beside it
    y = _rand(3, seed=1)
    g = kiln.jit(kiln.vmap(lambda v, w: getattr(lax, op)(v * w, "b"), in_axes=(1, None), out_axes=1, axis_name="b"))
    r = ref(x * y[None, :], axis=0)  # (3,): the same for every element of the batch
    np.testing.assert_allclose(np.asarray(g(x.T, y)), np.repeat(r[:, None], 5, 1), rtol=1e-5, atol=1e-6)


def test_axis_index_size_and_constants():
    n = 6
    f = kiln.vmap(lambda v: (lax.axis_index("b"), lax.axis_size("b") + v * 0, lax.psum(1, "b") + v * 0,
                             lax.psum(2.0, "b") + v * 0), axis_name="b")
    i, size, s1, s2 = f(jnp.zeros(n))
    np.testing.assert_array_equal(np.asarray(i), np.arange(n))
    assert (np.asarray(size) == n).all() and (np.asarray(s1) == n).all() and (np.asarray(s2) == 2 * n).all()


@pytest.mark.parametrize("tiled", [False, True])
def test_all_gather_psum_scatter_ppermute_all_to_all(tiled):
    n = 4
    x = _rand(n, n * 2, seed=2)
    gat = kiln.vmap(lambda v: lax.all_gather(v, "b", tiled=tiled), axis_name="b")(x)
    want = x.reshape(-1) if tiled else x
    np.testing.assert_allclose(np.asarray(gat), np.broadcast_to(want, (n,) + want.shape))
    sc = kiln.vmap(lambda v: lax.psum_scatter(v if tiled else v.reshape(n, 2), "b", tiled=tiled), axis_name="b")(x)
    np.testing.assert_allclose(np.asarray(sc).reshape(n, 2), x.sum(0).reshape(n, 2), rtol=1e-5, atol=1e-6)
    pp = kiln.vmap(lambda v: lax.ppermute(v, "b", [(k, (k + 1) % n) for k in range(n)]), axis_name="b")(x)
    np.testing.assert_allclose(np.asarray(pp), np.roll(x, 1, axis=0))
    a2a = kiln.vmap(lambda v: lax.all_to_all(v.reshape(n, 2), "b", 0, 0, tiled=True), axis_name="b")(x)
    np.testing.assert_allclose(np.asarray(a2a), x.reshape(n, n, 2).transpose(1, 0, 2))


def test_axis_index_groups_over_the_batch():
    x = _rand(4, 3, seed=3)
    f = kiln.vmap(lambda v: lax.psum(v, "b", axis_index_groups=[[0, 3], [1, 2]]), axis_name="b")
    want = np.stack([x[[0, 3]].sum(0), x[[1, 2]].sum(0), x[[1, 2]].sum(0), x[[0, 3]].sum(0)])
    np.testing.assert_allclose(np.asarray(f(x)), want, rtol=1e-5, atol=1e-6)


def test_grad_of_and_inside_a_vmap_with_collectives():
    x = _rand(4, 3, seed=4).astype(np.float64)
    with kiln.config_context(jax_enable_x64=True) if hasattr(kiln, "config_context") else _x64():
        def total(a):
            return jnp.sum(kiln.vmap(lambda v: jnp.sin(v) * lax.psum(v, "b"), axis_name="b")(a))

        g = np.asarray(kiln.grad(total)(jnp.asarray(x)))
        s = x.sum(0)
        np.testing.assert_allclose(g, np.cos(x) * s + np.sin(x).sum(0), rtol=1e-10)
        # grad inside: JAX's unmapped semantics, the gradient of the sum over the batch (psum's
        # transpose is a psum): d/dv sum_b(v_b * mean(v)) = 2 mean(v)
        per = kiln.vmap(kiln.grad(lambda v: jnp.sum(v * lax.pmean(v, "b"))), axis_name="b")(jnp.asarray(x))
        np.testing.assert_allclose(np.asarray(per), np.broadcast_to(2 * x.mean(0), x.shape), rtol=1e-10)


class _x64:
    def __enter__(self):
        self.old = kiln.config.jax_enable_x64
        kiln.config.update("jax_enable_x64", True)

    def __exit__(self, *a):
        kiln.config.update("jax_enable_x64", self.old)


def test_loops_whose_bodies_run_collectives_over_the_batch():
    x = _rand(3, 2, seed=6)
    f = kiln.vmap(lambda v: lax.fori_loop(0, 2, lambda i, c: c + lax.psum(c, "b"), v), axis_name="b")
    want = x.copy()
    for _ in range(2):
        want = want + want.sum(0)
    np.testing.assert_allclose(np.asarray(f(x)), want, rtol=1e-5)
    g = kiln.vmap(lambda v: lax.cond(v.sum() > -100, lambda u: lax.pmax(u, "b"), lambda u: u, v), axis_name="b")
    np.testing.assert_allclose(np.asarray(g(x)), np.broadcast_to(x.max(0), x.shape))


def test_nested_vmaps_name_their_own_axes():
    x = _rand(3, 2, seed=5)
    f = kiln.vmap(kiln.vmap(lambda v: lax.psum(v, "j") + 10 * lax.psum(v, "i"), axis_name="i"), axis_name="j")
    want = x.sum(0)[None, :] + 10 * x.sum(1)[:, None]
    np.testing.assert_allclose(np.asarray(f(x)), want, rtol=1e-5)
    # a reduction over both: one after the other (pmean divides by both sizes)
    both = kiln.vmap(kiln.vmap(lambda v: lax.psum(v, ("i", "j")) + lax.pmean(v, ("j", "i")) * 0 +
                               lax.axis_size(("i", "j")), axis_name="i"), axis_name="j")(x)
    np.testing.assert_allclose(np.asarray(both), np.full(x.shape, x.sum() + 6), rtol=1e-5)
    mean = kiln.vmap(kiln.vmap(lambda v: lax.pmean(v, ("i", "j")), axis_name="i"), axis_name="j")(x)
    np.testing.assert_allclose(np.asarray(mean), np.full(x.shape, x.mean()), rtol=1e-5)


def test_errors_name_the_axis_and_the_limit():
    """An unknown name, and a gather (or grouped reduction) over two vmaps' axes at once (not
    supported; plain reductions are)."""
    with pytest.raises(NameError, match="unbound axis name: c"):
        kiln.vmap(lambda v: lax.psum(v, "c"), axis_name="b")(jnp.ones(3))
    with pytest.raises(NotImplementedError, match="different vmaps or of a vmap and a mesh"):
        kiln.vmap(kiln.vmap(lambda v: lax.all_gather(v, ("b", "c")), axis_name="b"), axis_name="c")(jnp.ones((2, 3)))
    with pytest.raises(NotImplementedError, match="axis_index_groups over the axes of both"):
        kiln.vmap(kiln.vmap(lambda v: lax.psum(v, ("b", "c"), axis_index_groups=[[0, 1]]), axis_name="b"),
                  axis_name="c")(jnp.ones((2, 3)))
    # the library keeps working, and a vmap whose function names no collective takes the batched path
    np.testing.assert_allclose(np.asarray(kiln.vmap(lambda v: v * 2, axis_name="b")(jnp.ones(3))), 2.0)


def test_pshuffle_and_pswapaxes():
    """pshuffle (sources per destination) and pswapaxes (all_to_all of one axis), over a vmap's
    axis and a mesh's."""
    x = _rand(4, 4, 3, seed=7)
    got = kiln.vmap(lambda v: lax.pshuffle(v, "b", [2, 0, 3, 1]), axis_name="b")(x)
    np.testing.assert_allclose(np.asarray(got), x[[2, 0, 3, 1]])
    sw = kiln.vmap(lambda v: lax.pswapaxes(v, "b", 0), axis_name="b")(x)
    np.testing.assert_allclose(np.asarray(sw), x.transpose(1, 0, 2))  # element b's row j: x[j, b]
    with pytest.raises(ValueError, match="pshuffle: `perm` does not represent a permutation"):
        kiln.vmap(lambda v: lax.pshuffle(v, "b", [0, 0, 1, 2]), axis_name="b")(x)
    cpus = kiln.devices("cpu")
    if len(cpus) >= 4:
        from kiln.sharding import Mesh, PartitionSpec as P
        mesh = Mesh(np.array(cpus[:4]), ("d",))
        f = kiln.shard_map(lambda v: lax.pswapaxes(v[0], "d", 0)[None], mesh=mesh, in_specs=P("d"), out_specs=P("d"))
        np.testing.assert_allclose(np.asarray(f(kiln.device_put(x, cpus[0]))), x.transpose(1, 0, 2))


def test_reductions_and_gathers_over_the_whole_batch_are_unmapped():
    """As JAX's batching rules: psum/pmax/pmin and all_gather over the vmap's axis give the same
    value to every element, unmapped, so out_axes=None may take them."""
    x = _rand(3, 2, seed=8)
    s = kiln.vmap(lambda v: lax.psum(v, "b"), axis_name="b", out_axes=None)(x)
    np.testing.assert_allclose(np.asarray(s), x.sum(0), rtol=1e-6)
    g = kiln.vmap(lambda v: lax.all_gather(v, "b"), axis_name="b", out_axes=None)(x)
    np.testing.assert_allclose(np.asarray(g), x)
    with pytest.raises(ValueError, match="mapped output but out_axes is None"):
        kiln.vmap(lambda v: lax.psum(v, "b") + v, axis_name="b", out_axes=None)(x)
