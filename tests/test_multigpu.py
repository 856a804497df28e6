"""Several GPUs: device_put between GPUs, committed arrays, shard_map collectives over NCCL and a
pmap data-parallel step, against NumPy. Skipped unless kiln sees two or more GPUs (the integrator
runs them on a multi-GPU machine: `PYTHONPATH=python python3 -m pytest -q tests/test_multigpu.py`)."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.sharding import Mesh, NamedSharding, PartitionSpec as P

GPUS = kiln.devices("gpu") if kiln.default_backend() == "gpu" else []
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(len(GPUS) < 2, reason="needs two or more GPUs")]
SIZES = [n for n in (2, 4, 8) if n <= len(GPUS)]


def mesh_of(n):
    return Mesh(np.array(GPUS[:n]), ("x",))


def smap(f, mesh, in_specs, out_specs, check_vma=True):
    return kiln.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=check_vma)


def test_devices_are_every_gpu():
    assert [d.id for d in GPUS] == list(range(len(GPUS)))
    assert repr(GPUS[1]) == "CudaDevice(id=1)"


def test_device_put_between_gpus_and_committed_compute():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = kiln.device_put(x, GPUS[1])
    assert a.devices() == {GPUS[1]}
    b = kiln.device_put(a, GPUS[0])
    assert b.devices() == {GPUS[0]}
    np.testing.assert_array_equal(np.asarray(b), x)
    y = jnp.sin(a) * 2 + a  # runs on GPU 1, committed there
    assert y.devices() == {GPUS[1]}
    np.testing.assert_allclose(np.asarray(y), np.sin(x) * 2 + x, rtol=1e-6)
    z = kiln.jit(lambda u: u @ u.T)(a)  # cuBLAS on GPU 1
    assert z.devices() == {GPUS[1]}
    np.testing.assert_allclose(np.asarray(z), x @ x.T, rtol=1e-5)
    with pytest.raises(ValueError, match="incompatible devices"):
        np.asarray(a + kiln.device_put(x, GPUS[0]))


@pytest.mark.parametrize("n", SIZES)
def test_psum_pmax_pmin(n):
    x = np.random.default_rng(0).standard_normal((n * 3, 5)).astype(np.float32)
    for op, ref in ((lax.psum, np.sum), (lax.pmax, np.max), (lax.pmin, np.min)):
        f = smap(lambda v: op(v, "x"), mesh_of(n), P("x"), P("x"))
        out = np.asarray(f(x)).reshape(n, 3, 5)
        want = ref(x.reshape(n, 3, 5), axis=0)
        for k in range(n):
            np.testing.assert_allclose(out[k], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("axis", [0, 1])
def test_all_gather(n, axis):
    x = np.arange(n * 2 * 3, dtype=np.float32).reshape(n * 2, 3)
    # all_gather's result is typed varying, as in JAX: a replicated out_spec needs check_vma=False
    f = smap(lambda v: lax.all_gather(v, "x", axis=axis, tiled=True), mesh_of(n), P("x"), P(), check_vma=False)
    pieces = np.split(x, n, axis=0)
    np.testing.assert_array_equal(np.asarray(f(x)), np.concatenate(pieces, axis=axis))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("axis", [0, 1])
def test_psum_scatter(n, axis):
    x = np.random.default_rng(1).standard_normal((n * n, n * 4)).astype(np.float32)  # local blocks (n, 4 n)
    f = smap(lambda v: lax.psum_scatter(v, "x", scatter_dimension=axis, tiled=True), mesh_of(n), P("x"), P("x"))
    total = x.reshape(n, n, n * 4).sum(0)
    want = np.concatenate(np.split(total, n, axis=axis), axis=0)
    np.testing.assert_allclose(np.asarray(f(x)), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", SIZES)
def test_ppermute_ring(n):
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    perm = [(i, (i + 1) % n) for i in range(n)]
    f = smap(lambda v: lax.ppermute(v, "x", perm), mesh_of(n), P("x"), P("x"))
    np.testing.assert_array_equal(np.asarray(f(x)), np.roll(x, 1, axis=0))


@pytest.mark.parametrize("n", SIZES)
def test_all_to_all(n):
    x = np.arange(n * n * 2 * 3, dtype=np.float32).reshape(n * n, 2 * 3)
    f = smap(lambda v: lax.all_to_all(v, "x", 0, 1, tiled=True), mesh_of(n), P("x"), P("x"))
    cpu = kiln.devices("cpu")
    want = None
    if len(cpu) >= n:  # the simulated CPU devices' answer (tested against NumPy elsewhere)
        want = np.asarray(smap(lambda v: lax.all_to_all(v, "x", 0, 1, tiled=True), Mesh(np.array(cpu[:n]), ("x",)),
                               P("x"), P("x"))(kiln.device_put(x, cpu[0])))
    else:  # member k's block: chunk pos of every member, concatenated along axis 1
        blocks = np.split(x, n, axis=0)
        want = np.concatenate([np.concatenate([np.split(b, n, axis=0)[pos] for b in blocks], axis=1)
                               for pos in range(n)], axis=0)
    np.testing.assert_array_equal(np.asarray(f(x)), want)


@pytest.mark.parametrize("n", SIZES)
def test_axis_index_groups(n):
    """Groups listed out of order (each NCCL communicator set ranks its GPUs as the group lists
    them): pairs [1, 0], [3, 2], ... (one reversed pair on 2 GPUs) and, from 4 GPUs, evens and odds."""
    x = np.random.default_rng(2).standard_normal((n * 2, 3)).astype(np.float32)
    blocks = x.reshape(n, 2, 3)
    layouts = [[[k + 1, k] for k in range(0, n, 2)]] + ([[list(range(0, n, 2)), list(range(1, n, 2))]] if n >= 4 else [])
    for groups in layouts:
        where = {p: (g, k) for g in groups for k, p in enumerate(g)}
        f = smap(lambda v: lax.psum(v, "x", axis_index_groups=groups), mesh_of(n), P("x"), P("x"), check_vma=False)
        want = np.concatenate([blocks[where[d][0]].sum(0) for d in range(n)])
        np.testing.assert_allclose(np.asarray(f(x)), want, rtol=1e-5, atol=1e-5)
        f = smap(lambda v: lax.all_gather(v, "x", axis_index_groups=groups, tiled=True), mesh_of(n), P("x"), P("x"),
                 check_vma=False)
        want = np.concatenate([np.concatenate(list(blocks[where[d][0]])) for d in range(n)])
        np.testing.assert_array_equal(np.asarray(f(x)), want)


@pytest.mark.parametrize("n", SIZES)
def test_all_gather_invarying_and_its_transpose(n):
    """all_gather(to="invarying") leaves through a replicated out_spec, and the gradient inside
    the body takes each GPU's slice of the cotangent (against NumPy)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((n * n, 2)).astype(np.float32)
    w = rng.standard_normal((n, 2)).astype(np.float32)
    s = a.reshape(n, n, 2).sum(0)

    def inner(v):
        return lax.all_gather(jnp.sin(lax.psum_scatter(v, "x", tiled=True)), "x", tiled=True, to="invarying")
    f = kiln.jit(smap(inner, mesh_of(n), P("x"), P()))
    np.testing.assert_allclose(np.asarray(f(a)), np.sin(s), rtol=1e-5, atol=1e-5)
    g = kiln.jit(smap(lambda v, wv: kiln.grad(lambda u: jnp.sum(inner(u) * wv))(v), mesh_of(n), (P("x"), P()),
                      P("x")))(a, w)
    np.testing.assert_allclose(np.asarray(g), np.tile(np.cos(s) * w, (n, 1)), rtol=1e-4, atol=1e-5)


def test_axis_index():
    n = len(GPUS)
    f = smap(lambda v: v + lax.axis_index("x"), mesh_of(n), P("x"), P("x"))
    np.testing.assert_array_equal(np.asarray(f(np.zeros(n, np.int32))), np.arange(n))


@pytest.mark.parametrize("n", SIZES)
def test_pmap_data_parallel_grad_step(n):
    rng = np.random.default_rng(2)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    xs = rng.standard_normal((n, 8, 4)).astype(np.float32)
    ys = rng.standard_normal((n, 8, 3)).astype(np.float32)

    def loss(w, x, y):
        return jnp.mean((x @ w - y) ** 2)

    def step(w, x, y):
        g = kiln.grad(loss)(w, x, y)
        return w - 0.1 * lax.pmean(g, "i")

    out = kiln.pmap(step, axis_name="i", in_axes=(None, 0, 0))(w, xs, ys)
    g = np.mean([np.asarray(kiln.grad(loss)(w, xs[k], ys[k])) for k in range(n)], axis=0)
    for k in range(n):
        np.testing.assert_allclose(np.asarray(out[k]), w - 0.1 * g, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype,mib", [(np.float32, 5), (np.float32, 17), (np.float64, 5)])
def test_big_psum_on_copy_engines(dtype, mib, request):
    """Sums of 4 MiB or more over two GPUs of one process go over their copy engines
    (runtime/peer.c; up to 16 MiB the sum kernel also stores into the other GPU, above it a second
    copy brings the other half): odd lengths, several in one program between small NCCL ones, one
    feeding the next, repeated calls; both GPUs get the same bits, equal to the pairwise sum."""
    if dtype == np.float64:
        request.getfixturevalue("x64")
    rng = np.random.default_rng(7)
    m = (mib << 20) // np.dtype(dtype).itemsize + 3  # just over mib MiB, not a multiple of 64
    a = rng.standard_normal((2, m)).astype(dtype)
    b = rng.standard_normal((2, 7)).astype(dtype)

    def body(u, v):
        s = lax.psum(u, "x")
        t = lax.psum(v, "x")
        return lax.psum(s * 2 + u, "x"), t, lax.pmean(u, "x")
    f = kiln.jit(smap(body, mesh_of(2), (P("x"), P("x")), (P("x"), P("x"), P("x"))))
    s = a[0] + a[1]
    want = (s * 2 + a[0]) + (s * 2 + a[1])
    for _ in range(3):
        out, small, mean = (np.asarray(o) for o in f(a, b))
        np.testing.assert_array_equal(out[0], out[1])
        np.testing.assert_allclose(out[0], want, rtol=1e-6)
        np.testing.assert_allclose(small, np.tile(b.sum(0), (2, 1)), rtol=1e-6)
        np.testing.assert_array_equal(mean[0], mean[1])
        np.testing.assert_allclose(mean[0], s / 2, rtol=1e-6)


@pytest.mark.parametrize("host_loop", [False, True])
def test_big_psum_in_a_loop(host_loop, monkeypatch):
    """A 5 MiB psum in a fori_loop's body on two GPUs: in a device-side loop (a captured graph,
    where the sum goes through NCCL) and in a loop run from the host (each trip's sum on the copy
    engines), against NumPy."""
    if host_loop:
        monkeypatch.setenv("KILN_GPU_HOST_WHILE", "1")
    rng = np.random.default_rng(8)
    m = (5 << 20) // 4 + 3
    a = rng.standard_normal((2, m)).astype(np.float32)

    def body(u):
        return lax.fori_loop(0, 3, lambda i, v: lax.psum(v, "x") * 0.5 + i.astype(v.dtype), u)
    f = kiln.jit(smap(body, mesh_of(2), P("x"), P("x")))
    out = np.asarray(f(a)).reshape(2, m)
    want = (a[0] + a[1]) * 0.5 + 3
    np.testing.assert_array_equal(out[0], out[1])
    np.testing.assert_allclose(out[0], want, rtol=1e-5, atol=1e-5)
