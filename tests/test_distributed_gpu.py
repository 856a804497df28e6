"""Collectives between the GPUs of several processes (NCCL across processes): 2 Python processes on
loopback, one or two GPUs each (local_device_ids), initialize through kiln.distributed and run
shard_map over a mesh of every GPU: psum, pmax, all_gather, psum_scatter, ppermute, all_to_all, on
four GPUs psum over either axis of a 2 x 2 mesh, and a data-parallel gradient step, checked against
NumPy. The GPU cases need two and four GPUs; the same program runs on simulated CPU devices
everywhere."""
import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln

GPUS = kiln.devices("gpu") if kiln.default_backend() == "gpu" else []
TWO_GPUS = [pytest.mark.gpu, pytest.mark.skipif(len(GPUS) < 2, reason="needs two or more GPUs")]
FOUR_GPUS = [pytest.mark.gpu, pytest.mark.skipif(len(GPUS) < 4, reason="needs four or more GPUs")]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import kiln, kiln.numpy as jnp
    from kiln import distributed, lax
    from kiln.sharding import Mesh, NamedSharding, PartitionSpec as P
    args, platform, per = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    distributed.initialize(**args, initialization_timeout=30, shutdown_timeout_seconds=30)
    me, n = kiln.process_index(), len(kiln.devices())
    assert [d.platform for d in kiln.devices()] == [platform] * n and len(kiln.local_devices()) == per, kiln.devices()
    mesh = Mesh(np.array(kiln.devices()), ("x",))  # position = global device id
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n * 4, 6)).astype(np.float32)  # every process makes the same global value
    xs = kiln.device_put(x, NamedSharding(mesh, P("x")))
    def smap(f, m=mesh, spec=P("x")):
        return kiln.shard_map(f, mesh=m, in_specs=spec, out_specs=spec, check_vma=False)
    def mine(a):  # this process's shards, by device id
        return {str(s.device.id): np.asarray(s.data).tolist() for s in a.addressable_shards}
    perm = [(i, (i + 1) % n) for i in range(n)]
    out = {
        "psum": mine(smap(lambda v: lax.psum(v, "x"))(xs)),
        "pmax": mine(smap(lambda v: lax.pmax(v, "x"))(xs)),
        "gather": mine(smap(lambda v: lax.all_gather(v, "x", tiled=True))(xs)),
        "scatter": mine(smap(lambda v: lax.psum_scatter(v, "x", tiled=True))(xs)),
        "ppermute": mine(smap(lambda v: lax.ppermute(v, "x", perm))(xs)),
        "all_to_all": mine(smap(lambda v: lax.all_to_all(v, "x", 0, 0, tiled=True))(xs)),
        "again": mine(smap(lambda v: lax.psum(v * 2, "x"))(xs)),  # the cached communicator
    }
    if n == 4:  # a 2 x 2 mesh: groups inside a process ("b") and across processes ("a")
        m2 = Mesh(np.array(kiln.devices()).reshape(2, 2), ("a", "b"))
        x2 = kiln.device_put(x, NamedSharding(m2, P(("a", "b"))))
        out["psum_b"] = mine(smap(lambda v: lax.psum(v, "b"), m2, P(("a", "b")))(x2))
        out["psum_a"] = mine(smap(lambda v: lax.psum(v, "a"), m2, P(("a", "b")))(x2))
    w = rng.standard_normal((6, 3)).astype(np.float32)
    y = rng.standard_normal((n * 4, 3)).astype(np.float32)
    ws = kiln.device_put(w, NamedSharding(mesh, P()))
    ys = kiln.device_put(y, NamedSharding(mesh, P("x")))
    def step(w, x, y):
        g = kiln.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
        return w - 0.1 * lax.pmean(g, "x")
    f = kiln.jit(kiln.shard_map(step, mesh=mesh, in_specs=(P(), P("x"), P("x")), out_specs=P(), check_vma=False))
    out["step"] = np.asarray(f(ws, xs, ys)).tolist()
    print(json.dumps({"me": me, "n": n, "out": out}))
    distributed.shutdown()
""")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("platform,per", [
    pytest.param("gpu", 1, marks=TWO_GPUS), pytest.param("gpu", 2, marks=FOUR_GPUS), ("cpu", 1), ("cpu", 2)])
def test_collectives_between_the_devices_of_two_processes(platform, per):
    """The GPU cases are the point (NCCL across processes; with two GPUs a process, groups inside one
    process and across both); the CPU ones (simulated devices, collectives over TCP) check the same
    program where CI runs."""
    nproc, port = 2, _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_PLATFORM", "KILN_NUM_CPU_DEVICES")}
    env.update({"PYTHONPATH": os.pathsep.join(sys.path), "NCCL_NVLS_ENABLE": "0"})
    if platform == "cpu":
        env.update({"KILN_PLATFORM": "cpu", "KILN_NUM_CPU_DEVICES": str(per)})
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(
        {"coordinator_address": f"127.0.0.1:{port}", "num_processes": nproc, "process_id": p,
         "local_device_ids": list(range(p * per, p * per + per)) if platform == "gpu" else None}), platform, str(per)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT) for p in range(nproc)]
    done = []
    try:
        for p in procs:
            done.append(p.communicate(timeout=120))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    failed = [f"process {k}:\n{err[-2500:]}" for k, (p, (_, err)) in enumerate(zip(procs, done)) if p.returncode]
    assert not failed, "\n".join(failed)
    reports = [json.loads(out.strip().splitlines()[-1]) for out, _ in done]
    n = nproc * per
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n * 4, 6)).astype(np.float32)
    w = rng.standard_normal((6, 3)).astype(np.float64)
    y = rng.standard_normal((n * 4, 3)).astype(np.float64)
    blocks = np.split(x, n)
    seen = set()
    for r in reports:
        assert r["n"] == n
        out = r["out"]
        for key in out["psum"]:
            d = int(key)
            seen.add(d)
            got = {k: np.array(v[key], np.float32) for k, v in out.items() if k != "step"}
            np.testing.assert_allclose(got["psum"], sum(blocks), rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(got["pmax"], np.maximum.reduce(blocks))
            np.testing.assert_array_equal(got["gather"], x)
            np.testing.assert_allclose(got["scatter"], np.split(sum(blocks), n)[d], rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(got["ppermute"], blocks[(d - 1) % n])
            np.testing.assert_array_equal(got["all_to_all"], np.concatenate([np.split(b, n)[d] for b in blocks]))
            np.testing.assert_allclose(got["again"], 2 * sum(blocks), rtol=1e-5, atol=1e-5)
            if n == 4:  # mesh [[0, 1], [2, 3]]: "b" sums devices 2a, 2a+1; "a" sums b, 2+b
                a, b = divmod(d, 2)
                np.testing.assert_allclose(got["psum_b"], blocks[2 * a] + blocks[2 * a + 1], rtol=1e-5, atol=1e-5)
                np.testing.assert_allclose(got["psum_a"], blocks[b] + blocks[2 + b], rtol=1e-5, atol=1e-5)
    assert seen == set(range(n))
    g = sum(2 * b.T @ (b @ w - yb) / yb.size for b, yb in zip(np.split(x.astype(np.float64), n), np.split(y, n))) / n
    for r in reports:  # the same replicated weights everywhere (TF32 products on a GPU)
        np.testing.assert_allclose(np.array(r["out"]["step"]), w - 0.1 * g, rtol=2e-2, atol=2e-3)
