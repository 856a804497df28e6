"""Several devices on the CPU (KILN_NUM_CPU_DEVICES=8, set by conftest.py before kiln is imported):
devices and committed arrays, meshes and sharded arrays, the collectives inside shard_map on
several mesh shapes (against NumPy in float64), their gradients (against finite differences of the
sum over devices: shard_map's unmapped semantics), vmap inside a body, pmap and a data-parallel
training step (against the single-device gradient), and the error messages."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.sharding import Mesh, NamedSharding, PartitionSpec as P

N = len(kiln.devices())
pytestmark = pytest.mark.skipif(N < 8 or kiln.default_backend() != "cpu",
                                reason="needs 8 simulated CPU devices (KILN_NUM_CPU_DEVICES=8)")

MESHES = [((8,), ("i",)), ((2, 4), ("x", "y")), ((4, 2), ("x", "y"))]


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.fixture(autouse=True)
def _x64():
    old = kiln.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", True)
    yield
    kiln.config.update("jax_enable_x64", old)


# ---- devices ----

def test_devices_and_committed_arrays():
    devs = kiln.devices()
    assert [d.id for d in devs] == list(range(N)) and repr(devs[3]) == "CpuDevice(id=3)"
    assert kiln.device_count() == N and kiln.local_devices() == devs
    assert kiln.process_index() == 0 and kiln.process_count() == 1
    x = kiln.device_put(jnp.arange(4.0), devs[3])
    assert x.devices() == {devs[3]} and x.sharding.device is devs[3] and x.committed
    y = kiln.jit(lambda a: a * 2)(x)  # runs on device 3, its result committed there
    assert y.devices() == {devs[3]}
    assert (x + jnp.ones(4)).devices() == {devs[3]}  # an uncommitted operand follows
    z = kiln.device_put(y, devs[5])
    assert z.devices() == {devs[5]}
    np.testing.assert_array_equal(np.asarray(z), [0, 2, 4, 6])


def test_arguments_on_different_devices_raise():
    devs = kiln.devices()
    a, b = kiln.device_put(jnp.ones(3), devs[1]), kiln.device_put(jnp.ones(3), devs[2])
    with pytest.raises(ValueError, match="incompatible devices"):
        kiln.jit(lambda u, v: u + v)(a, b)
    with pytest.raises(ValueError, match="incompatible devices"):  # eager chains run when read
        np.asarray(jnp.sin(a) + b)


# ---- shardings ----

@pytest.mark.parametrize("shape,names", MESHES)
def test_device_put_named_sharding_splits_and_reads_whole(shape, names):
    mesh = kiln.make_mesh(shape, names)
    x = _rand(8, 4)
    spec = P(names[0]) if len(names) == 1 else P(names[0], names[1])
    s = kiln.device_put(jnp.asarray(x), NamedSharding(mesh, spec))
    assert s.sharding == NamedSharding(mesh, spec) and len(s.devices()) == 8
    shards = s.addressable_shards
    assert len(shards) == 8
    for sh in shards:
        assert sh.data.devices() == {sh.device}
        np.testing.assert_array_equal(np.asarray(sh.data), x[sh.index])
    np.testing.assert_array_equal(np.asarray(s), x)
    np.testing.assert_allclose(np.asarray(kiln.jit(lambda v: jnp.sin(v) * 2)(s)), np.sin(x) * 2)
    assert "[" in str(s + 1)


def test_make_array_from_callback_and_single_device_arrays():
    mesh = kiln.make_mesh((4, 2), ("x", "y"))
    sharding = NamedSharding(mesh, P("x"))
    x = _rand(8, 6)
    a = kiln.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])
    np.testing.assert_array_equal(np.asarray(a), x)
    assert a.sharding == sharding
    pieces = [kiln.device_put(jnp.asarray(x[idx]), d) for d, idx in sharding.devices_indices_map(x.shape).items()]
    b = kiln.make_array_from_single_device_arrays(x.shape, sharding, pieces)
    np.testing.assert_array_equal(np.asarray(b), x)
    replicated = [s for s in b.addressable_shards if s.replica_id == 1]
    assert len(replicated) == 4


# ---- collectives in shard_map ----

def _smap(f, mesh, in_specs, out_specs, check_vma=True):
    return kiln.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=check_vma)


def _blocks(x, mesh, names):
    """The per-device pieces of x split over `names` along axis 0 (row-major over the mesh)."""
    return x.reshape((mesh.size, -1) + x.shape[1:])


@pytest.mark.parametrize("shape,names", MESHES)
@pytest.mark.parametrize("op,ref", [("psum", np.sum), ("pmax", np.max), ("pmin", np.min)])
def test_all_reduce_over_every_axis(shape, names, op, ref):
    mesh = kiln.make_mesh(shape, names)
    x = _rand(16, 3)
    f = _smap(lambda a: getattr(lax, op)(a, names), mesh, P(names), P(names))
    got = np.asarray(f(jnp.asarray(x)))
    want = np.tile(ref(x.reshape(8, 2, 3), axis=0), (8, 1))
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("shape", [(2, 4), (4, 2)])
def test_psum_over_one_axis_of_two(shape):
    mesh = kiln.make_mesh(shape, ("x", "y"))
    x = _rand(shape[0] * 2, shape[1] * 3)
    f = _smap(lambda a: lax.psum(a, "y"), mesh, P("x", "y"), P("x", None))
    want = x.reshape(shape[0] * 2, shape[1], 3).sum(1)
    np.testing.assert_allclose(np.asarray(f(jnp.asarray(x))), want, rtol=1e-12)
    g = _smap(lambda a: lax.pmean(a, "x"), mesh, P("x", "y"), P(None, "y"))
    np.testing.assert_allclose(np.asarray(g(jnp.asarray(x))), x.reshape(shape[0], 2, -1).mean(0), rtol=1e-12)


def test_axis_index_and_size():
    mesh = kiln.make_mesh((2, 4), ("x", "y"))
    f = _smap(lambda: (lax.axis_index("x")[None, None], lax.axis_index("y")[None, None],
                       lax.axis_index(("x", "y"))[None, None] * 0 + lax.axis_size(("x", "y"))), mesh, (),
              (P("x", "y"), P("x", "y"), P("x", "y")))
    ix, iy, size = f()
    np.testing.assert_array_equal(np.asarray(ix), np.repeat(np.arange(2)[:, None], 4, 1))
    np.testing.assert_array_equal(np.asarray(iy), np.repeat(np.arange(4)[None], 2, 0))
    assert (np.asarray(size) == 8).all()


@pytest.mark.parametrize("shape,names", MESHES)
@pytest.mark.parametrize("tiled", [True, False])
def test_all_gather(shape, names, tiled):
    mesh = kiln.make_mesh(shape, names)
    x = _rand(16, 3)
    # all_gather's result is typed varying (as in JAX): replicated out_specs need check_vma=False
    f = _smap(lambda a: lax.all_gather(a, names, axis=1 if tiled else 0, tiled=tiled), mesh, P(names), P(),
              check_vma=False)
    got = np.asarray(f(jnp.asarray(x)))
    blocks = x.reshape(8, 2, 3)
    want = np.concatenate(list(blocks), axis=1) if tiled else blocks
    np.testing.assert_allclose(got, want)


@pytest.mark.parametrize("tiled", [True, False])
def test_psum_scatter(tiled):
    mesh = kiln.make_mesh((8,), ("i",))
    x = _rand(8 * 8, 2)  # each device: 8 rows
    f = _smap(lambda a: lax.psum_scatter(a if tiled else a.reshape(8, 1, 2), "i", scatter_dimension=0, tiled=tiled),
              mesh, P("i"), P("i"))
    total = x.reshape(8, 8, 2).sum(0)  # the sum over devices of their 8 x 2 blocks
    got = np.asarray(f(jnp.asarray(x)))
    np.testing.assert_allclose(got.reshape(8, 2), total, rtol=1e-12)


@pytest.mark.parametrize("shape,names", MESHES)
def test_ppermute_ring(shape, names):
    mesh = kiln.make_mesh(shape, names)
    axis = names[-1]
    n = mesh.shape[axis]
    x = _rand(8, 3)
    f = _smap(lambda a: lax.ppermute(a, axis, [(i, (i + 1) % n) for i in range(n)]), mesh, P(names), P(names))
    blocks = x.reshape(mesh.axis_sizes + (1, 3))
    want = np.roll(blocks, 1, axis=len(names) - 1).reshape(8, 3)
    np.testing.assert_allclose(np.asarray(f(jnp.asarray(x))), want)
    half = _smap(lambda a: lax.ppermute(a, axis, [(0, 1)]), mesh, P(names), P(names))(jnp.asarray(x))
    b = np.zeros_like(blocks)
    idx = [slice(None)] * len(names)
    idx[-1] = 1
    src = [slice(None)] * len(names)
    src[-1] = 0
    b[tuple(idx)] = blocks[tuple(src)]
    np.testing.assert_allclose(np.asarray(half), b.reshape(8, 3))


@pytest.mark.parametrize("tiled", [True, False])
def test_all_to_all(tiled):
    mesh = kiln.make_mesh((4,), ("i",), devices=kiln.devices()[:4])
    x = _rand(4 * 4, 6)  # device d: rows 4d..4d+3
    if tiled:
        f = _smap(lambda a: lax.all_to_all(a, "i", 0, 1, tiled=True), mesh, P("i"), P("i"))
        got = np.asarray(f(jnp.asarray(x))).reshape(4, 1, 24)
        blocks = x.reshape(4, 4, 6)  # [source, row, col]
        want = np.stack([np.concatenate([blocks[s, d:d + 1] for s in range(4)], axis=1) for d in range(4)])
        np.testing.assert_allclose(got, want)
    else:
        f = _smap(lambda a: lax.all_to_all(a, "i", 0, 0), mesh, P("i"), P("i"))
        got = np.asarray(f(jnp.asarray(x))).reshape(4, 4, 6)
        blocks = x.reshape(4, 4, 6)
        np.testing.assert_allclose(got, blocks.transpose(1, 0, 2))


# ---- axis_index_groups: the collective runs within each group of positions ----

GROUPS = [[0, 1, 2, 3], [4, 5, 6, 7]], [[0, 2, 4, 6], [1, 3, 5, 7]], [[7, 0], [3, 4], [1, 6], [2, 5]]


def _group_of(groups, n):
    """Per position: (its group's members in order, its place there)."""
    out = [None] * n
    for g in groups:
        for k, p in enumerate(g):
            out[p] = (g, k)
    return out


@pytest.mark.parametrize("groups", GROUPS)
@pytest.mark.parametrize("op,ref", [("psum", np.sum), ("pmax", np.max), ("pmin", np.min), ("pmean", np.mean)])
def test_reductions_within_axis_index_groups(groups, op, ref):
    mesh = kiln.make_mesh((8,), ("i",))
    x = _rand(16, 3, seed=5)
    f = _smap(lambda a: getattr(lax, op)(a, "i", axis_index_groups=groups), mesh, P("i"), P("i"), check_vma=False)
    blocks = x.reshape(8, 2, 3)
    want = np.concatenate([ref(blocks[g], axis=0) for g, _ in _group_of(groups, 8)])
    np.testing.assert_allclose(np.asarray(f(jnp.asarray(x))), want, rtol=1e-12)


@pytest.mark.parametrize("groups", GROUPS)
@pytest.mark.parametrize("tiled", [True, False])
def test_all_gather_and_psum_scatter_within_axis_index_groups(groups, tiled):
    mesh = kiln.make_mesh((8,), ("i",))
    m = len(groups[0])
    x = _rand(8 * m, 2, seed=6)  # each device: m rows
    blocks = x.reshape(8, m, 2)
    gat = _smap(lambda a: lax.all_gather(a, "i", axis_index_groups=groups, tiled=tiled), mesh, P("i"), P("i"),
                check_vma=False)
    got = np.asarray(gat(jnp.asarray(x))).reshape(8, -1)
    want = np.stack([blocks[g].reshape(-1) for g, _ in _group_of(groups, 8)])
    np.testing.assert_allclose(got, want)
    sc = _smap(lambda a: lax.psum_scatter(a if tiled else a.reshape(m, 1, 2), "i", axis_index_groups=groups,
                                          tiled=tiled), mesh, P("i"), P("i"), check_vma=False)
    got = np.asarray(sc(jnp.asarray(x))).reshape(8, 2)
    want = np.stack([blocks[g].sum(0)[k] for g, k in _group_of(groups, 8)])
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_all_to_all_within_axis_index_groups():
    mesh = kiln.make_mesh((8,), ("i",))
    groups = [[0, 3], [1, 2], [4, 7], [5, 6]]
    x = _rand(8 * 2, 3, seed=7)  # device d: rows 2d, 2d+1; chunk j of a device goes to member j of its group
    f = _smap(lambda a: lax.all_to_all(a, "i", 0, 0, axis_index_groups=groups, tiled=True), mesh, P("i"), P("i"),
              check_vma=False)
    blocks = x.reshape(8, 2, 3)
    want = np.stack([np.stack([blocks[s, k] for s in g]) for g, k in _group_of(groups, 8)])
    np.testing.assert_allclose(np.asarray(f(jnp.asarray(x))).reshape(8, 2, 3), want)


def test_axis_index_groups_over_two_mesh_axes_and_under_grad():
    """Groups over the positions of (x, y) on a 2 x 4 mesh, and the gradient of a grouped psum
    (its transpose: the same grouped psum) against finite differences."""
    mesh = kiln.make_mesh((2, 4), ("x", "y"))
    groups = [[0, 5], [1, 4], [2, 7], [3, 6]]
    x = _rand(8, 2, seed=8)
    w = _rand(8, 2, seed=9)
    f = _smap(lambda a: lax.psum(a, ("x", "y"), axis_index_groups=groups), mesh, P(("x", "y")), P(("x", "y")),
              check_vma=False)
    want = np.concatenate([x.reshape(8, 1, 2)[g].sum(0) for g, _ in _group_of(groups, 8)])
    np.testing.assert_allclose(np.asarray(f(jnp.asarray(x))), want, rtol=1e-12)

    def local(a, wv):
        return jnp.sum((lax.psum(jnp.sin(a), ("x", "y"), axis_index_groups=groups) * wv) ** 2)

    g = _smap(lambda a, wv: kiln.grad(local)(a, wv), mesh, (P(("x", "y")), P(("x", "y"))), P(("x", "y")),
              check_vma=False)(jnp.asarray(x), jnp.asarray(w))

    def total(xv):
        s = np.sin(xv).reshape(8, 1, 2)
        return sum(np.sum((s[gr].sum(0) * w[d]) ** 2) for d, (gr, _) in enumerate(_group_of(groups, 8)))
    np.testing.assert_allclose(np.asarray(g), _fd_grad(total, x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["psum", "all_gather", "psum_scatter", "all_to_all"])
def test_axis_index_groups_under_grad_and_make_jaxpr_around_shard_map(op):
    """shard_map traced inside grad or make_jaxpr runs as the mesh's program on one device: grouped
    collectives there give the values they give on the devices, and their gradients."""
    mesh = kiln.make_mesh((2, 4), ("x", "y"))
    groups = [[3, 0], [1, 2]]  # positions along y

    def body(a):
        if op == "psum":
            return lax.psum(jnp.sin(a), "y", axis_index_groups=groups)
        if op == "all_gather":
            return lax.all_gather(jnp.sin(a), "y", axis_index_groups=groups, tiled=True)[1:]
        if op == "psum_scatter":
            return lax.psum_scatter(jnp.sin(a), "y", axis_index_groups=groups, tiled=True)
        return lax.all_to_all(jnp.sin(a), "y", 0, 0, axis_index_groups=groups, tiled=True)

    f = _smap(body, mesh, P(("x", "y")), P(("x", "y")), check_vma=False)
    x = _rand(16, 2, seed=10)
    on_devices = np.asarray(f(jnp.asarray(x)))
    traced = kiln.make_jaxpr(f)(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(kiln.jit(lambda a: f(a) * 1.0)(jnp.asarray(x))), on_devices, rtol=1e-12)
    assert traced is not None
    w = _rand(*on_devices.shape, seed=11)
    g = kiln.grad(lambda a: jnp.sum(f(a) * w))(jnp.asarray(x))

    def total(xv):
        return float(np.sum(np.asarray(f(jnp.asarray(xv))) * w))
    np.testing.assert_allclose(np.asarray(g), _fd_grad(total, x), rtol=1e-5, atol=1e-6)
    # the emulated program (under grad: same values) against the devices' run
    np.testing.assert_allclose(np.asarray(kiln.vmap(lambda a: f(a), in_axes=None, axis_size=1)(jnp.asarray(x))[0]),
                               on_devices, rtol=1e-12)


def test_vmap_with_an_axis_name_inside_a_shard_map_body():
    """Inside a body: a psum over the mesh axis and a pmean over the vmap's axis, side by side."""
    mesh = kiln.make_mesh((4,), ("d",), devices=kiln.devices()[:4])
    x = _rand(8, 4, seed=12)

    def body(a):  # (2, 4) a device
        return kiln.vmap(lambda v: lax.psum(v, "d") - lax.pmean(v, "b"), axis_name="b")(a)
    got = np.asarray(kiln.jit(_smap(body, mesh, P("d"), P("d"), check_vma=False))(jnp.asarray(x)))
    blocks = x.reshape(4, 2, 4)
    want = np.concatenate([blocks.sum(0) - blocks[d].mean(0, keepdims=True) for d in range(4)])
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_all_gather_to_invarying_types_and_transposes_as_jax():
    """all_gather(to="invarying"): the result may leave through a replicated out_spec under
    check_vma, and its transpose is each device's slice of the (same) cotangent, where the varying
    one's is a reduce_scatter (the sum over devices: 8 times as much here)."""
    mesh = kiln.make_mesh((8,), ("x",))
    a = _rand(64, 2, seed=15)
    w = _rand(8, 2, seed=16)
    s = a.reshape(8, 8, 2).sum(0)

    def inner(v, to):
        return lax.all_gather(jnp.sin(lax.psum_scatter(v, "x", tiled=True)), "x", tiled=True, to=to)
    f = kiln.jit(_smap(lambda v: inner(v, "invarying"), mesh, P("x"), P()))
    np.testing.assert_allclose(np.asarray(f(jnp.asarray(a))), np.sin(s), rtol=1e-12)
    with pytest.raises(ValueError, match="out_specs which require replication"):
        kiln.jit(_smap(lambda v: inner(v, "varying"), mesh, P("x"), P()))(jnp.asarray(a))
    for to, scale in (("invarying", 1), ("varying", 8)):
        g = kiln.jit(_smap(lambda v, wv: kiln.grad(lambda u: jnp.sum(inner(u, to) * wv))(v), mesh, (P("x"), P()),
                           P("x")))(jnp.asarray(a), jnp.asarray(w))
        np.testing.assert_allclose(np.asarray(g), np.tile(scale * np.cos(s) * w, (8, 1)), rtol=1e-10)
    # untiled along axis 1: (1, 8, 2); the transpose takes this device's (1, 1, 2) and drops the axis
    g = kiln.jit(_smap(lambda v, wv: kiln.grad(lambda u: jnp.sum(lax.all_gather(
        jnp.sin(lax.psum_scatter(u, "x", tiled=True)), "x", axis=1, to="invarying")[0] * wv))(v), mesh,
        (P("x"), P()), P("x")))(jnp.asarray(a), jnp.asarray(w))
    np.testing.assert_allclose(np.asarray(g), np.tile(np.cos(s) * w, (8, 1)), rtol=1e-10)
    with pytest.raises(NotImplementedError, match="to='reduced'"):
        _smap(lambda v: lax.all_gather(v, "x", to="reduced"), mesh, P("x"), P("x"))(jnp.asarray(a))
    with pytest.raises(ValueError, match="unexpected `to` value 'both'"):
        _smap(lambda v: lax.all_gather(v, "x", to="both"), mesh, P("x"), P("x"))(jnp.asarray(a))


def test_devices_taking_different_paths_raise_instead_of_hanging():
    """SPMD programs whose devices reach different collectives (a trip count or branch that differs
    per device) raise naming the cause, where they would wait forever; the library keeps working."""
    mesh = kiln.make_mesh((4,), ("d",), devices=kiln.devices()[:4])

    def loop(a):
        limit = 1.0 + lax.axis_index("d")
        return lax.while_loop(lambda c: c[0] < limit, lambda c: (c[0] + 1.0, lax.psum(c[1], "d")),
                              (jnp.zeros(()), a))[1]

    def branch(a):
        return lax.cond(lax.axis_index("d") % 2 == 0, lambda v: lax.psum(v, "d"),
                        lambda v: lax.all_gather(v, "d", tiled=True)[:1], a)
    x = jnp.asarray(_rand(4, 2))
    with pytest.raises(RuntimeError, match="finished its program while the others wait at a collective"):
        np.asarray(kiln.jit(_smap(loop, mesh, P("d"), P("d"), check_vma=False))(x))  # (raised when waited for)
    with pytest.raises(RuntimeError, match="reached different collectives at once: device 0: psum of 16 bytes, "
                                           "device 1: all_gather of 16 bytes"):
        np.asarray(kiln.jit(_smap(branch, mesh, P("d"), P("d"), check_vma=False))(x))
    np.testing.assert_allclose(np.asarray(_smap(lambda a: lax.psum(a, "d"), mesh, P("d"), P("d"))(x)),
                               np.tile(np.asarray(x).sum(0), (4, 1)), rtol=1e-12)


def test_collectives_over_a_vmap_axis_inside_a_pmap_body_under_that_vmap():
    """vmap(pmap(f), axis_name="v") whose f reduces over both the pmap's axis and the vmap's, and
    pmap(vmap(f)) the other way round: JAX's values."""
    x = _rand(2, 4, seed=17)
    body = lambda v: lax.psum(v, "p") - lax.pmean(v, "v")  # noqa: E731
    got = kiln.vmap(kiln.pmap(body, axis_name="p"), axis_name="v")(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(got), x.sum(1, keepdims=True) - x.mean(0, keepdims=True), rtol=1e-12)
    got = kiln.pmap(kiln.vmap(body, axis_name="v"), axis_name="p")(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(got), x.sum(0, keepdims=True) - x.mean(1, keepdims=True), rtol=1e-12)
    both = kiln.vmap(kiln.pmap(lambda v: lax.pmax(v, ("p", "v")) + lax.psum(1, ("v", "p")), axis_name="p"),
                     axis_name="v")(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(both), np.full(x.shape, x.max() + 8), rtol=1e-12)


def test_axis_index_groups_errors():
    mesh = kiln.make_mesh((8,), ("i",))
    x = jnp.asarray(_rand(8, 2))

    def run(groups, op=lax.psum):
        return _smap(lambda a: op(a, "i", axis_index_groups=groups), mesh, P("i"), P("i"), check_vma=False)(x)
    with pytest.raises(ValueError, match="psum: axis_index_groups must cover all indices exactly once"):
        run([[0, 1], [2, 3]])
    with pytest.raises(ValueError, match="exactly once"):
        run([[0, 1, 2, 3], [3, 4, 5, 6, 7]])
    with pytest.raises(NotImplementedError, match="pmax: axis_index_groups of different sizes"):
        run([[0, 1, 2], [3, 4, 5, 6, 7]], lax.pmax)
    with pytest.raises(TypeError, match="list of lists of int"):
        run([[0.5, 1]])
    np.testing.assert_allclose(np.asarray(run([[i] for i in range(8)])), np.asarray(x))  # groups of one: itself


# ---- gradients (unmapped semantics: the gradient of the sum over devices) ----

def _fd_grad(total, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(*x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (total(x + d) - total(x - d)) / (2 * eps)
    return g


@pytest.mark.parametrize("which", ["psum", "all_gather", "ppermute", "psum_scatter"])
def test_grad_through_collectives_matches_finite_differences(which):
    mesh = kiln.make_mesh((8,), ("i",))
    x = _rand(8, 2)
    w = _rand(8, 2, seed=1)  # a per-device weight, so the devices' results differ

    def local(a, wv):
        if which == "psum":
            y = lax.psum(jnp.sin(a), "i") * wv
        elif which == "all_gather":
            y = lax.all_gather(jnp.sin(a), "i", tiled=True)[::3] * wv.sum()
        elif which == "ppermute":
            y = lax.ppermute(jnp.sin(a), "i", [(k, (k + 1) % 8) for k in range(8)]) * wv
        else:
            y = lax.psum_scatter(jnp.tile(jnp.sin(a), (8, 1)), "i", tiled=True) * wv
        return jnp.sum(y ** 2)

    g = _smap(lambda a, wv: kiln.grad(local)(a, wv), mesh, (P("i"), P("i")), P("i"))(jnp.asarray(x), jnp.asarray(w))

    def total(xv):  # the sum over devices of their local results, in NumPy
        s = np.sin(xv).reshape(8, 1, 2)
        wb = w.reshape(8, 1, 2)
        if which == "psum":
            return sum(np.sum((s.sum(0) * wb[d]) ** 2) for d in range(8))
        if which == "all_gather":
            return sum(np.sum((s.reshape(8, 2)[::3] * wb[d].sum()) ** 2) for d in range(8))
        if which == "ppermute":
            return sum(np.sum((s[(d - 1) % 8] * wb[d]) ** 2) for d in range(8))
        return sum(np.sum((s.sum(0) * wb[d]) ** 2) for d in range(8))
    np.testing.assert_allclose(np.asarray(g), _fd_grad(total, x), rtol=1e-5, atol=1e-6)


def test_vmap_inside_a_shard_map_body():
    mesh = kiln.make_mesh((2, 4), ("x", "y"))
    x = _rand(2, 4 * 3, 5)  # vmapped over axis 0 inside the body

    def body(a):  # a: (2, 3, 5)
        return kiln.vmap(lambda r: lax.psum(r, "y") + lax.all_gather(r, "y", tiled=True)[:3])(a)
    f = _smap(body, mesh, P(None, "y"), P(None, None), check_vma=False)
    got = np.asarray(f(jnp.asarray(x)))
    blocks = x.reshape(2, 4, 3, 5)
    want = blocks.sum(1) + blocks[:, 0]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_repeated_calls_on_sharded_results_take_their_shards_directly():
    # the second call on arrays laid out as in_specs say skips re-sharding; a training loop feeds
    # results back; a differently laid out argument of the same structure still gets the right answer
    mesh = kiln.make_mesh((4, 2), ("x", "y"))
    f = _smap(lambda w, a: (w + lax.psum(a.sum(0), ("x", "y")), a * 2), mesh, (P(), P(("x", "y"))), (P(), P(("x", "y"))))
    w0, a0 = _rand(3), _rand(8, 3, seed=1)
    w, a = jnp.asarray(w0), kiln.device_put(a0, NamedSharding(mesh, P(("x", "y"))))
    w_ref, a_ref = w0.copy(), a0.copy()
    for _ in range(3):
        w, a = f(w, a)
        w_ref, a_ref = w_ref + a_ref.sum(0), a_ref * 2
        np.testing.assert_allclose(np.asarray(w), w_ref, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(a), a_ref, rtol=1e-12)
    assert len(f._fast) == 1
    other = kiln.device_put(a0, NamedSharding(mesh, P(("y", "x"))))  # same shapes, other pieces per device
    w2, a2 = f(jnp.asarray(w0), other)
    np.testing.assert_allclose(np.asarray(w2), w0 + a0.sum(0), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(a2), a0 * 2, rtol=1e-12)


def test_jit_of_a_function_calling_shard_map_runs_it_as_written():
    mesh = kiln.make_mesh((8,), ("i",))
    x = _rand(16, 3)
    inner = _smap(lambda a: lax.psum(jnp.sin(a), "i"), mesh, P("i"), P())

    @kiln.jit
    def step(v):
        return inner(v) * 2 + v[:2].sum()
    want = np.sin(x).reshape(8, 2, 3).sum(0) * 2 + x[:2].sum()
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(step(jnp.asarray(x))), want, rtol=1e-12)
    g = kiln.grad(lambda v: inner(v).sum())(jnp.asarray(x))  # grad around it: the mesh's program traced
    np.testing.assert_allclose(np.asarray(g), np.cos(x), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(inner(jnp.asarray(x))), np.sin(x).reshape(8, 2, 3).sum(0), rtol=1e-12)


# ---- shard_map inside a traced function (grad, vmap, make_jaxpr around it): the mesh's program traced ----

_EMU_MESH_CASES = {
    "psum": (lambda a: lax.psum(jnp.sin(a), "y"), P("x", "y"), P("x"), True),
    "pmax over both axes": (lambda a: lax.pmax(a * a, ("x", "y")), P("x", "y"), P(), True),
    "all_gather tiled": (lambda a: lax.all_gather(jnp.tanh(a), "y", axis=1, tiled=True) * 2, P("x", "y"), P("x"), False),
    "all_gather stacked": (lambda a: lax.all_gather(a, "x", axis=0) + 1, P("x", "y"), P(None, None, "y"), False),
    "psum_scatter": (lambda a: lax.psum_scatter(a * a, "y", scatter_dimension=0, tiled=True), P(None, "y"), P("y"), True),
    "ppermute": (lambda a: lax.ppermute(jnp.sin(a), "y", [(i, (i + 1) % 4) for i in range(3)]), P("x", "y"),
                 P("x", "y"), True),
    "all_to_all": (lambda a: lax.all_to_all(a * a, "y", 0, 1, tiled=True), P("x", "y"), P("x", "y"), True),
    "axis_index": (lambda a: a * lax.axis_index("y"), P("x", "y"), P("x", "y"), True),
}


@pytest.mark.parametrize("name", sorted(_EMU_MESH_CASES))
def test_grad_vmap_and_make_jaxpr_around_shard_map(name):
    body, ins, outs, check = _EMU_MESH_CASES[name]
    mesh = kiln.make_mesh((2, 4), ("x", "y"))
    f = kiln.shard_map(body, mesh=mesh, in_specs=ins, out_specs=outs, check_vma=check)
    x = _rand(8, 12)
    with kiln.experimental.enable_x64():
        xa = jnp.asarray(x)
        concrete = np.asarray(f(xa))  # the real launch on the 8 devices
        primal, pullback = kiln.vjp(f, xa)  # traced: the mesh's program, replayed
        np.testing.assert_allclose(np.asarray(primal), concrete, rtol=1e-12, atol=1e-12)
        loss = lambda v: jnp.sum(f(v) ** 2)  # noqa: E731
        g = np.asarray(kiln.grad(loss)(xa))
        d = _rand(8, 12, seed=5)
        eps = 1e-6
        fd = (float(loss(jnp.asarray(x + eps * d))) - float(loss(jnp.asarray(x - eps * d)))) / (2 * eps)
        np.testing.assert_allclose(np.sum(g * d), fd, rtol=1e-6, atol=1e-8)
        batch = np.stack([x, 2 * x, -x])
        got = np.asarray(kiln.vmap(f)(jnp.asarray(batch)))
        want = np.stack([np.asarray(f(jnp.asarray(b))) for b in batch])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        assert "reduce" in str(kiln.make_jaxpr(f)(xa)) or name in ("ppermute", "all_to_all", "axis_index",
                                                                    "all_gather tiled", "all_gather stacked")


def test_grad_around_shard_map_with_check_vma_and_a_closure():
    # the body's grad (check_vma: summed over devices) inside, an outer grad around, and a body that
    # closes over the outer function's traced value
    mesh = kiln.make_mesh((8,), ("d",))
    x, w = _rand(16, 3), _rand(3, 2, seed=1)

    def outer(wv):
        inner = kiln.shard_map(lambda a: lax.psum(jnp.sum(jnp.tanh(a @ wv)), "d"), mesh=mesh, in_specs=P("d"),
                               out_specs=P())
        return inner(jnp.asarray(x))
    with kiln.experimental.enable_x64():
        for scale in (1.0, 2.0):  # the closure's tracer is not kept between traces
            wv = jnp.asarray(scale * w)
            t = np.tanh(x @ (scale * w))
            np.testing.assert_allclose(np.asarray(kiln.grad(outer)(wv)), x.T @ (1 - t ** 2), rtol=1e-10)
        f = kiln.shard_map(lambda a, v: kiln.grad(lambda u: jnp.sum(jnp.tanh(a @ u)))(v), mesh=mesh,
                           in_specs=(P("d"), P()), out_specs=P())
        h = kiln.jacfwd(lambda v: f(jnp.asarray(x), v))(jnp.asarray(w))
        eps = 1e-6
        col = (np.asarray(f(jnp.asarray(x), jnp.asarray(w + eps * np.eye(3)[:, :1] * np.array([[1, 0]])))) -
               np.asarray(f(jnp.asarray(x), jnp.asarray(w - eps * np.eye(3)[:, :1] * np.array([[1, 0]]))))) / (2 * eps)
        np.testing.assert_allclose(np.asarray(h)[:, :, 0, 0], col, rtol=1e-5, atol=1e-7)


def test_grad_around_a_shard_map_of_megatron_custom_vjps():
    """Megatron's tensor-parallel pair: f (identity forward, psum backward) and g (psum forward,
    identity backward) as custom_vjps in a check_vma=False shard_map, grad around it. JAX's
    convention there: a replicated output's cotangent reaches every device divided by their count,
    each runs the bwd rules, and a replicated input's cotangents are summed (the reference below
    reproduces JAX 0.10's numbers to 1e-6)."""
    n = 4
    mesh = kiln.make_mesh((n,), ("d",), devices=kiln.devices()[:n])

    @kiln.custom_vjp
    def g(v):
        return lax.psum(v, "d")
    g.defvjp(lambda v: (lax.psum(v, "d"), None), lambda _, ct: (ct,))

    @kiln.custom_vjp
    def f(v):
        return v
    f.defvjp(lambda v: (v, None), lambda _, ct: (lax.psum(ct, "d"),))

    def body(xv, wv):  # a column-parallel then a row-parallel product
        return g(jnp.tanh(f(xv) @ wv) @ wv.T)
    x, w, c = _rand(3, 4, seed=21), _rand(4, 2 * n, seed=22), _rand(3, 4, seed=23)
    sm = _smap(body, mesh, (P(), P(None, "d")), P(), check_vma=False)
    gx, gw = kiln.grad(lambda a, b: jnp.sum(sm(a, b) * c), argnums=(0, 1))(jnp.asarray(x), jnp.asarray(w))
    s, gws = 0, []
    for k in range(n):
        wk = w[:, 2 * k:2 * k + 2]
        a = np.tanh(x @ wk)
        ch = (c / n @ wk) * (1 - a ** 2)
        gws.append((c / n).T @ a + x.T @ ch)
        s = s + ch @ wk.T
    np.testing.assert_allclose(np.asarray(gw), np.concatenate(gws, 1), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(gx), n * s, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(sm(x, w)), sum(np.tanh(x @ w[:, 2 * k:2 * k + 2]) @ w[:, 2 * k:2 * k + 2].T
                                                          for k in range(n)), rtol=1e-10)
    # f alone before a plain psum: JAX gives the same with and without check_vma (checked against
    # JAX 0.10 in float64), and so does kiln (with check_vma its grad runs the body's own transpose)
    s, gws = 0, []
    for k in range(n):
        wk = w[:, 2 * k:2 * k + 2]
        a = np.tanh(x @ wk)
        ch = (c @ wk) * (1 - a ** 2)
        gws.append(c.T @ a + x.T @ ch)
        s = s + ch @ wk.T
    for check_vma in (True, False):
        sm = _smap(lambda xv, wv: lax.psum(jnp.tanh(f(xv) @ wv) @ wv.T, "d"), mesh, (P(), P(None, "d")), P(),
                   check_vma=check_vma)
        gx, gw = kiln.grad(lambda a, b: jnp.sum(sm(a, b) * c), argnums=(0, 1))(jnp.asarray(x), jnp.asarray(w))
        np.testing.assert_allclose(np.asarray(gw), np.concatenate(gws, 1), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(np.asarray(gx), n * s, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("check_vma", [True, False])
def test_grad_and_jvp_around_a_shard_map_of_a_custom_jvp_with_collectives(check_vma):
    """A global norm as a custom_jvp whose function and rule psum over the mesh: x / |x| split over
    four devices, reverse and forward mode around the shard_map, against the closed form."""
    mesh = kiln.make_mesh((4,), ("d",), devices=kiln.devices()[:4])

    @kiln.custom_jvp
    def norm(v):
        return jnp.sqrt(lax.psum(jnp.sum(v * v), "d"))

    @norm.defjvp
    def norm_jvp(primals, tangents):
        (v,), (dv,) = primals, tangents
        r = norm(v)
        return r, lax.psum(jnp.sum(v * dv), "d") / r
    sm = _smap(lambda v: v / norm(v), mesh, P("d"), P("d"), check_vma=check_vma)
    x, c, t = _rand(8, seed=24), _rand(8, seed=25), _rand(8, seed=26)
    r = np.linalg.norm(x)
    y = x / r
    np.testing.assert_allclose(np.asarray(sm(jnp.asarray(x))), y, rtol=1e-12)
    g = kiln.grad(lambda v: jnp.sum(sm(v) * c))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(g), (c - y * (y @ c)) / r, rtol=1e-10, atol=1e-12)
    _, tan = kiln.jvp(sm, (jnp.asarray(x),), (jnp.asarray(t),))
    np.testing.assert_allclose(np.asarray(tan), (t - y * (y @ t)) / r, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["fori_ring", "scan_xs", "while_per_device", "cond_shared", "cond_per_device",
                                  "checkpoint"])
def test_grad_vmap_and_jaxpr_around_a_shard_map_whose_loops_run_collectives(kind):
    """Loops, conds and checkpoints whose bodies run collectives, under grad (against finite
    differences of the devices' own run), vmap and make_jaxpr around the shard_map: the replay
    builds the same construct over stacked values."""
    mesh = kiln.make_mesh((4,), ("d",), devices=kiln.devices()[:4])
    ring = [(k, (k + 1) % 4) for k in range(4)]

    def body(a):  # a: (2, 3) a device
        if kind == "fori_ring":  # a ring pass, as collective matmuls write it
            return lax.fori_loop(0, 3, lambda i, c: jnp.sin(lax.ppermute(c, "d", ring)) + c * i, a)
        if kind == "scan_xs":
            def step(c, x):
                s = lax.psum(c * x, "d")
                return c + jnp.tanh(s), s.sum()
            c, ys = lax.scan(step, a[0], a)
            return c[None] + ys[:, None]
        if kind == "while_per_device":  # a condition computed per device (the same on all: SPMD)
            limit = 3.0 + 0.0 * lax.axis_index("d")

            def cond(cv):
                return cv[0] < limit

            def step(cv):
                return cv[0] + 1.0, cv[1] * 0.5 + jnp.sin(lax.pmean(cv[1], "d"))
            return lax.while_loop(cond, step, (jnp.zeros(()), a))[1]
        if kind == "cond_shared":
            return lax.cond(lax.psum(a.sum(), "d") > 0, lambda v: lax.psum(v * v, "d"), lambda v: -v, a)
        if kind == "cond_per_device":  # a predicate computed per device (the same on all: SPMD)
            pred = lax.psum(a.sum(), "d") * (1.0 + 0.0 * lax.axis_index("d")) > 0
            return lax.cond(pred, lambda v: lax.psum(jnp.sin(v), "d"), lambda v: lax.pmax(v, "d") * v, a)
        return kiln.checkpoint(lambda v: jnp.sin(lax.psum(v, "d")) * v)(a)

    f = _smap(body, mesh, P("d"), P("d"), check_vma=False)
    x = _rand(8, 3, seed=13)
    on_devices = np.asarray(f(jnp.asarray(x)))
    w = _rand(*on_devices.shape, seed=14)
    g = kiln.grad(lambda a: jnp.sum(f(a) * w))(jnp.asarray(x))

    def total(xv):
        return float(np.sum(np.asarray(f(jnp.asarray(xv))) * w))
    np.testing.assert_allclose(np.asarray(g), _fd_grad(total, x), rtol=1e-5, atol=1e-6)
    replayed = kiln.vmap(lambda a: f(a), in_axes=None, axis_size=1)(jnp.asarray(x))[0]
    np.testing.assert_allclose(np.asarray(replayed), on_devices, rtol=1e-12)
    assert kiln.make_jaxpr(f)(jnp.asarray(x)) is not None


# ---- check_vma typing (shard_map's default): gradients of replicated values are summed over devices ----

def _local_loss_grad(w, xb):
    """d/dw of sum(tanh(xb @ w)) + 0.1 sum(w^2), in float64."""
    t = np.tanh(xb @ w)
    return xb.T @ (1 - t ** 2) + 0.2 * w


@pytest.mark.parametrize("check_vma", [True, False])
def test_grad_of_a_replicated_parameter_follows_check_vma(check_vma):
    # JAX: with check_vma=True a replicated w meets the batch-split x through an implicit pvary, whose
    # transpose sums the devices' gradients; with check_vma=False (and in pmap) each device keeps its own
    mesh = kiln.make_mesh((4,), ("d",))
    w, x = _rand(8, 3), _rand(16, 8, seed=1)

    def loss(wv, xv):
        return jnp.sum(jnp.tanh(xv @ wv)) + 0.1 * jnp.sum(wv ** 2)
    per_device = [_local_loss_grad(w, xb) for xb in x.reshape(4, 4, 8)]
    g = _smap(lambda wv, xv: kiln.grad(loss)(wv, xv)[None], mesh, (P(), P("d")), P("d"), check_vma=check_vma)(
        jnp.asarray(w), jnp.asarray(x))
    want = [sum(per_device)] * 4 if check_vma else per_device
    np.testing.assert_allclose(np.asarray(g), np.stack(want), rtol=1e-5, atol=1e-6)
    # pmean of a gradient that is already summed (check_vma) leaves it as it is; of the per-device ones, averages
    gm = _smap(lambda wv, xv: lax.pmean(kiln.grad(loss)(wv, xv), "d"), mesh, (P(), P("d")), P(),
               check_vma=check_vma)(jnp.asarray(w), jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(gm), sum(per_device) / (1 if check_vma else 4), rtol=1e-5, atol=1e-6)


def test_check_vma_second_derivative_and_psum_of_a_replicated_value():
    mesh = kiln.make_mesh((4,), ("d",))
    w, x = _rand(8, 3), _rand(16, 8, seed=1)

    def loss(wv, xv):
        return jnp.sum(jnp.tanh(xv @ wv)) + 0.1 * jnp.sum(wv ** 2)

    # psum of a replicated value is n times it; the gradient of psum(loss) is the sum of the devices'
    f = _smap(lambda wv, xv: (lax.psum(wv, "d"), kiln.grad(lambda v: lax.psum(loss(v, xv), "d"))(wv)), mesh,
              (P(), P("d")), (P(), P()))
    s, g = f(jnp.asarray(w), jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(s), 4 * w, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(g), sum(_local_loss_grad(w, xb) for xb in x.reshape(4, 4, 8)), rtol=1e-5,
                               atol=1e-6)
    # grad of grad: the inner gradient (summed over devices) is itself differentiated; finite differences
    h = _smap(lambda wv, xv: kiln.grad(lambda v: jnp.sum(kiln.grad(loss)(v, xv) ** 2))(wv), mesh, (P(), P("d")), P())
    got = np.asarray(h(jnp.asarray(w), jnp.asarray(x)))
    total = lambda wv: np.sum(sum(_local_loss_grad(wv, xb) for xb in x.reshape(4, 4, 8)) ** 2)  # noqa: E731
    np.testing.assert_allclose(got, _fd_grad(total, w), rtol=1e-4, atol=1e-4)


def test_check_vma_typing_reaches_jit_and_vmap_inside_the_body():
    # the traces of a jit or vmap inside the body are typed from the values they take
    mesh = kiln.make_mesh((4,), ("d",))
    w, x = _rand(8, 3), _rand(16, 8, seed=1)

    def loss(wv, xv):
        return jnp.sum(jnp.tanh(xv @ wv)) + 0.1 * jnp.sum(wv ** 2)
    t = np.tanh(x @ w)
    data = x.T @ (1 - t ** 2)  # the sum over all rows of the data term's gradient
    bodies = {  # body, its JAX value (the vmap's: 16 per-row gradients, each with the 0.2 w term, summed)
        "jit": (lambda wv, xv: kiln.jit(kiln.grad(loss))(wv, xv), data + 4 * 0.2 * w),
        "vmap": (lambda wv, xv: kiln.vmap(lambda r: kiln.grad(loss)(wv, r[None]))(xv).sum(0), data + 16 * 0.2 * w),
    }
    for name, (body, want) in bodies.items():
        got = _smap(body, mesh, (P(), P("d")), P())(jnp.asarray(w), jnp.asarray(x))
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5, err_msg=name)


def test_check_vma_rejects_a_varying_result_with_a_replicated_out_spec():
    mesh = kiln.make_mesh((4,), ("d",))
    x = jnp.asarray(_rand(8, 2))
    with pytest.raises(ValueError, match=r"out_specs which require replication.*'d'.*check_vma=False"):
        _smap(lambda a: a * 2, mesh, P("d"), P())(x)
    # reduced over the axis first, or with check_vma=False (replica 0's value), it is accepted
    np.testing.assert_allclose(np.asarray(_smap(lambda a: lax.psum(a, "d"), mesh, P("d"), P())(x)),
                               np.asarray(x).reshape(4, 2, 2).sum(0), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(_smap(lambda a: a * 2, mesh, P("d"), P(), check_vma=False)(x)),
                               2 * np.asarray(x)[:2], rtol=1e-12)
    assert _smap(lambda a: a * 2, mesh, P("d"), P())  # the library keeps working
    np.testing.assert_allclose(np.asarray(_smap(lambda a: a + 1, mesh, P("d"), P("d"))(x)), np.asarray(x) + 1)


# ---- pmap ----

def test_pmap_forward_and_collectives():
    x = _rand(8, 3)
    out = kiln.pmap(lambda a: a * 2 + lax.psum(a, "b"), axis_name="b")(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(out), x * 2 + x.sum(0), rtol=1e-12)
    assert out.shape == (8, 3) and len(out.devices()) == 8
    out2 = kiln.pmap(lambda a, s: a * s, in_axes=(0, None))(jnp.asarray(x[:4]), 3.0)
    np.testing.assert_allclose(np.asarray(out2), x[:4] * 3)
    st = kiln.pmap(lambda a, k: a ** k, static_broadcasted_argnums=1)(jnp.asarray(x[:2]), 2)
    np.testing.assert_allclose(np.asarray(st), x[:2] ** 2)
    col = kiln.pmap(lambda a: a.sum(), out_axes=0)(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(col), x.sum(1))
    assert kiln.jit(kiln.pmap(lambda a: a)) is not None


def test_pmap_over_one_device_gives_plain_arrays_and_lowers():
    """Issue 33 (equinox's pmap tests compare result types with jnp.array's): a pmap over one
    device returns plain Arrays (JAX has one Array type whatever the sharding); pmap(f).lower(x)
    has as_text() and compile() (a jax.stages.Lowered / Compiled), the compiled call f's values."""
    x = _rand(1, 3)
    out = kiln.pmap(lambda a: a * 2 + lax.psum(a, "b"), axis_name="b")(jnp.asarray(x))
    assert type(out) is type(jnp.asarray(x)) and type(kiln.device_put(out)) is type(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(out), x * 3, rtol=1e-12)
    f = kiln.pmap(lambda a, s: jnp.sin(a) * s, in_axes=(0, None))
    lowered = f.lower(jnp.asarray(x), 2.0)
    assert isinstance(lowered, kiln.stages.Lowered) and "sin" in lowered.as_text()
    compiled = lowered.compile()
    assert isinstance(compiled, kiln.stages.Compiled)
    np.testing.assert_allclose(np.asarray(compiled(jnp.asarray(x), 2.0)), np.sin(x) * 2, rtol=1e-12)


def test_data_parallel_training_step_matches_single_device():
    rng = np.random.default_rng(3)
    X, Y = rng.standard_normal((32, 5)), rng.standard_normal((32, 2))
    params = {"w": rng.standard_normal((5, 2)), "b": np.zeros(2)}

    def loss(p, xb, yb):
        return jnp.mean((jnp.tanh(xb @ p["w"] + p["b"]) - yb) ** 2)

    def step(p, xb, yb):
        g = kiln.grad(loss)(p, xb, yb)
        g = lax.pmean(g, "data")
        return kiln.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g)

    p_rep = kiln.tree_util.tree_map(lambda a: jnp.stack([jnp.asarray(a)] * 8), params)
    new = kiln.pmap(step, axis_name="data")(p_rep, jnp.asarray(X.reshape(8, 4, 5)), jnp.asarray(Y.reshape(8, 4, 2)))
    g1 = kiln.grad(loss)(kiln.tree_util.tree_map(jnp.asarray, params), jnp.asarray(X), jnp.asarray(Y))
    for k in params:
        want = params[k] - 0.1 * np.asarray(g1[k])
        for d in range(8):
            np.testing.assert_allclose(np.asarray(new[k])[d], want, rtol=1e-10, atol=1e-12)


def test_jit_with_out_shardings_places_results():
    mesh = kiln.make_mesh((4, 2), ("x", "y"))
    sh = NamedSharding(mesh, P("x"))
    x = kiln.device_put(jnp.asarray(_rand(8, 2)), sh)
    y = kiln.jit(lambda a: a * 3, in_shardings=sh, out_shardings=sh)(x)
    assert y.sharding == sh
    np.testing.assert_allclose(np.asarray(y), np.asarray(x) * 3)


# ---- errors ----

def test_error_messages_name_the_argument_and_the_fix():
    mesh = kiln.make_mesh((2, 4), ("x", "y"))
    f = _smap(lambda a, b: a + b, mesh, (P("x"), P("z")), P("x"))
    with pytest.raises(ValueError, match=r"args\[1\].*'z'.*\('x', 'y'\)"):
        f(jnp.ones(4), jnp.ones(4))
    g = _smap(lambda a: a, mesh, P("y"), P("y"))
    with pytest.raises(ValueError, match=r"args\[0\] of shape \(6,\).*4 devices.*multiple of 4"):
        g(jnp.ones(6))
    with pytest.raises(NameError, match="unbound axis name: q"):
        _smap(lambda a: lax.psum(a, "q"), mesh, P("x"), P("x"))(jnp.ones(4))
    with pytest.raises(ValueError, match="only 8 devices"):
        kiln.pmap(lambda a: a)(jnp.ones((9, 2)))
    with pytest.raises(ValueError, match="needs 16 devices"):
        kiln.make_mesh((4, 4), ("x", "y"))
    np.testing.assert_array_equal(np.asarray(kiln.grad(lambda v: _smap(lambda a: a, mesh, P("x"), P("x"))(v).sum())(
        jnp.ones(4))), np.ones(4))
    with pytest.raises(NameError, match="unbound axis name"):
        lax.psum(jnp.ones(3), "i")


def test_with_sharding_constraint_places_jit_outputs():
    """Issue 33 (equinox's filter_shard inside filter_jit): a jit-compiled function's output that
    is a value under with_sharding_constraint comes back placed as the constraint says (split
    over the mesh), the same values; unconstrained outputs stay where they were; a repeated call
    (the cached program) places them too."""
    mesh = kiln.make_mesh((8,), ("i",))
    s = NamedSharding(mesh, P("i"))
    x = _rand(16)

    @kiln.jit
    def f(a):
        return lax.with_sharding_constraint(a + 1, s), (a * 2, lax.with_sharding_constraint({"k": a - 1}, {"k": s}))

    for _ in range(2):
        placed, (plain, d) = f(x)
        assert placed.sharding == s and d["k"].sharding == s and plain.sharding != s
        np.testing.assert_allclose(np.asarray(placed), x + 1)
        np.testing.assert_allclose(np.asarray(d["k"]), x - 1)
        np.testing.assert_allclose(np.asarray(plain), x * 2)
    # a prefix tree of placements, None leaving its subtree where it is (as device_put's)
    u, w = kiln.jit(lambda a: lax.with_sharding_constraint((a * 3, [a - 2]), (None, s)))(x)
    assert w[0].sharding == s and u.sharding != s
    np.testing.assert_allclose(np.asarray(w[0]), x - 2)
