"""Collectives between the GPUs of several processes (NCCL across processes): 2 Python processes on
loopback, one GPU each (local_device_ids), initialize through kiln.distributed and run shard_map
over a mesh of both GPUs: psum, pmax, all_gather, psum_scatter, ppermute, all_to_all and a
data-parallel gradient step, checked against NumPy. The GPU case needs two GPUs; the same program
runs on one CPU device a process everywhere."""
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import kiln, kiln.numpy as jnp
    from kiln import distributed, lax
    from kiln.sharding import NamedSharding, PartitionSpec as P
    args, platform = json.loads(sys.argv[1]), sys.argv[2]
    distributed.initialize(**args, initialization_timeout=30, shutdown_timeout_seconds=30)
    me, n = kiln.process_index(), kiln.process_count()
    devs = kiln.devices()
    assert [d.platform for d in devs] == [platform] * n and len(kiln.local_devices()) == 1, devs
    mesh = kiln.make_mesh((n,), ("x",))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n * 4, 6)).astype(np.float32)  # every process makes the same global value
    xs = kiln.device_put(x, NamedSharding(mesh, P("x")))
    def smap(f, out=P("x")):
        return kiln.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=out, check_vma=False)
    def mine(a):  # this process's shard
        (s,) = a.addressable_shards
        return np.asarray(s.data).tolist()
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
    w = rng.standard_normal((6, 3)).astype(np.float32)
    y = rng.standard_normal((n * 4, 3)).astype(np.float32)
    ws = kiln.device_put(w, NamedSharding(mesh, P()))
    ys = kiln.device_put(y, NamedSharding(mesh, P("x")))
    def step(w, x, y):
        g = kiln.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
        return w - 0.1 * lax.pmean(g, "x")
    f = kiln.jit(kiln.shard_map(step, mesh=mesh, in_specs=(P(), P("x"), P("x")), out_specs=P(), check_vma=False))
    out["step"] = np.asarray(f(ws, xs, ys)).tolist()
    print(json.dumps({"me": me, "out": out}))
    distributed.shutdown()
""")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("platform", [pytest.param("gpu", marks=TWO_GPUS), "cpu"])
def test_collectives_between_the_devices_of_two_processes(platform):
    """The GPU case is the point (NCCL across processes); the CPU one (one simulated device a
    process, their collectives over TCP) checks the same program where CI runs."""
    n, port = 2, _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_PLATFORM", "KILN_NUM_CPU_DEVICES")}
    env.update({"PYTHONPATH": os.pathsep.join(sys.path), "NCCL_NVLS_ENABLE": "0"})
    if platform == "cpu":
        env.update({"KILN_PLATFORM": "cpu", "KILN_NUM_CPU_DEVICES": "1"})
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(
        {"coordinator_address": f"127.0.0.1:{port}", "num_processes": n, "process_id": p,
         "local_device_ids": [p] if platform == "gpu" else None}), platform],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT) for p in range(n)]
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
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n * 4, 6)).astype(np.float32)
    blocks = np.split(x, n)
    for r in reports:
        me, out = r["me"], {k: np.array(v, np.float32) for k, v in r["out"].items()}
        np.testing.assert_allclose(out["psum"], sum(blocks), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(out["pmax"], np.maximum.reduce(blocks))
        np.testing.assert_array_equal(out["gather"], x)
        np.testing.assert_allclose(out["scatter"], np.split(sum(blocks), n)[me], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(out["ppermute"], blocks[(me - 1) % n])
        np.testing.assert_array_equal(out["all_to_all"], np.concatenate([np.split(b, n)[me] for b in blocks]))
        np.testing.assert_allclose(out["again"], 2 * sum(blocks), rtol=1e-5, atol=1e-5)
    rng = np.random.default_rng(0)
    rng.standard_normal((n * 4, 6))
    w = rng.standard_normal((6, 3)).astype(np.float64)
    y = rng.standard_normal((n * 4, 3)).astype(np.float64)
    g = sum(2 * b.T @ (b @ w - yb) / yb.size for b, yb in zip(np.split(x.astype(np.float64), n), np.split(y, n))) / n
    for r in reports:  # the same replicated weights on both (TF32 products on the GPU)
        np.testing.assert_allclose(np.array(r["out"]["step"]), w - 0.1 * g, rtol=2e-2, atol=2e-3)
