"""Multi-process start-up (kiln.distributed): 2-4 Python processes on loopback initialize through
explicit arguments and each launcher's variables, exchange values through the coordination
service, meet at barriers and agree on the global device list. Ports come from the OS."""
import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

import kiln
from kiln._src import distributed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Each child: initialize (arguments from argv[1] as JSON, the rest from its environment), then
# exchange values through the store, barrier, and print what it saw as one JSON line.
CHILD = textwrap.dedent("""
    import json, sys
    import kiln
    from kiln import distributed
    distributed.initialize(**json.loads(sys.argv[1]), initialization_timeout=15, shutdown_timeout_seconds=15)
    c = distributed.client()
    me, n = kiln.process_index(), kiln.process_count()
    c.key_value_set(f"hello/{me}", f"from {me}")
    got = [c.blocking_key_value_get(f"hello/{p}", 10000) for p in range(n)]
    c.wait_at_barrier("after-hello", 10000)
    c.barrier("after-hello", 10)  # the same name again meets the others' second call
    remote = [d for d in kiln.devices() if d.process_index != me]
    errors = []
    if remote:
        try:
            kiln.device_put(kiln.numpy.ones(2), remote[0])  # a single device of another process
        except ValueError as e:
            errors.append(str(e))
        mesh = kiln.make_mesh((len(kiln.devices()),), ("x",))  # a mesh over every process's devices
        y = kiln.shard_map(lambda a: a * 2, mesh=mesh, in_specs=kiln.P("x"), out_specs=kiln.P("x"))(
            kiln.numpy.arange(float(len(kiln.devices()))))
        assert [float(s.data[0]) for s in y.addressable_shards] == [2.0 * d.id for d in kiln.local_devices()]
    local = kiln.numpy.arange(3.0) * 2 + me  # computing on this process's devices still works
    print(json.dumps({"me": me, "n": n, "got": got, "errors": errors, "local_sum": float(local.sum()),
                      "devices": [(d.id, d.process_index) for d in kiln.devices()],
                      "local": [(d.id, d.process_index) for d in kiln.local_devices()],
                      "repr": repr(kiln.devices()[-1]), "launcher": distributed.global_state.launcher}))
    distributed.shutdown()
    assert not distributed.is_initialized() and kiln.process_count() == 1
""")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child_env(extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "OMPI_", "KILN_COORDINATOR", "JAX_COORDINATOR"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update({"PYTHONPATH": os.pathsep.join(sys.path), "KILN_PLATFORM": "cpu", "KILN_NUM_CPU_DEVICES": "2"})
    env.update(extra)
    return env


def _run(n, args_of, env_of):
    """Starts n children (process p gets args_of(p) and env_of(p)) and returns their reports."""
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(args_of(p))], env=_child_env(env_of(p)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
             for p in range(n)]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, f"child failed:\n{err}"
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return sorted(outs, key=lambda r: r["me"])


def _check(reports, n, launcher=None):
    every = [(i, i // 2) for i in range(2 * n)]  # 2 CPU devices per process, ids global
    for p, r in enumerate(reports):
        assert r["me"] == p and r["n"] == n
        assert r["got"] == [f"from {q}" for q in range(n)]
        assert [tuple(d) for d in r["devices"]] == every
        assert [tuple(d) for d in r["local"]] == [(2 * p, p), (2 * p + 1, p)]
        assert r["repr"] == f"CpuDevice(id={2 * n - 1}, process_index={n - 1})"
        assert r["local_sum"] == 6.0 + 3 * p
        assert len(r["errors"]) == 1 and "belongs to process" in r["errors"][0]
        assert launcher is None or launcher in (r["launcher"] or "")


def test_two_processes_with_explicit_arguments():
    port = _free_port()
    reports = _run(2, lambda p: {"coordinator_address": f"127.0.0.1:{port}", "num_processes": 2,
                                 "process_id": p}, lambda p: {})
    _check(reports, 2)


def test_four_processes_from_torchrun_variables():
    port = _free_port()
    reports = _run(4, lambda p: {}, lambda p: {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                                               "RANK": str(p), "WORLD_SIZE": "4", "LOCAL_RANK": str(p)})
    _check(reports, 4, "torchrun")


def test_open_mpi_variables_with_kiln_coordinator_address():
    port = _free_port()
    reports = _run(2, lambda p: {}, lambda p: {"OMPI_COMM_WORLD_RANK": str(p), "OMPI_COMM_WORLD_SIZE": "2",
                                               "OMPI_COMM_WORLD_LOCAL_RANK": str(p),
                                               "KILN_COORDINATOR_ADDRESS": f"localhost:{port}"})
    _check(reports, 2, "Open MPI")


def test_slurm_variables_coordinator_is_first_host_of_compressed_node_list():
    port = _free_port()
    reports = _run(2, lambda p: {}, lambda p: {"SLURM_PROCID": str(p), "SLURM_NTASKS": "2", "SLURM_LOCALID": str(p),
                                               "SLURM_JOB_ID": "1234", "KILN_COORDINATOR_PORT": str(port),
                                               "SLURM_STEP_NODELIST": "127.0.0.[1-2]"})
    _check(reports, 2, "Slurm")


def test_missing_coordinator_raises_within_the_timeout():
    port = _free_port()  # nothing listens there
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=f"could not reach the coordinator at 127.0.0.1:{port}"):
        kiln.distributed.initialize(f"127.0.0.1:{port}", 2, 1, initialization_timeout=1)
    assert time.monotonic() - t0 < 5
    assert not kiln.distributed.is_initialized() and kiln.process_count() == 1
    assert kiln.devices()[0].id == 0 and "process_index" not in repr(kiln.devices()[0])


def test_missing_peer_times_out_at_the_initialize_barrier():
    port = _free_port()
    with pytest.raises(TimeoutError, match=r"barrier 'kiln/initialize#0': process\(es\) \[1\] did not arrive"):
        kiln.distributed.initialize(f"127.0.0.1:{port}", 2, 0, initialization_timeout=0.5)
    assert not kiln.distributed.is_initialized()
    with socket.socket() as s:  # the failed initialize stopped its service: the port is free again
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_slurm_host_list_expansion():
    ex = distributed.expand_hostlist
    assert ex("node[01-03,07]") == ["node01", "node02", "node03", "node07"]
    assert ex("gpu5,node[9-11],login") == ["gpu5", "node9", "node10", "node11", "login"]
    assert ex("rack[1-2]-n[08-09]") == ["rack1-n08", "rack1-n09", "rack2-n08", "rack2-n09"]
    assert ex("localhost") == ["localhost"]
    with pytest.raises(ValueError, match="unbalanced"):
        ex("node[01-03")
    with pytest.raises(ValueError, match="not a number"):
        ex("node[a-b]")


def test_resolution_order_and_errors_name_what_is_missing():
    r = distributed.resolve
    env = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}
    assert r(env=env) == (("10.0.0.1", 29500), 8, 3, 1, "torchrun (RANK/WORLD_SIZE)")
    assert r("h:1", 4, 2, env=env)[:3] == (("h", 1), 4, 2)  # explicit arguments first
    assert r(env={**env, "JAX_COORDINATOR_ADDRESS": "c:7"})[0] == ("c", 7)  # then the *_COORDINATOR_ADDRESS
    slurm = {"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "5",
             "SLURM_JOB_NODELIST": "n[07-08]", "SLURM_STEP_NODELIST": "n[03-04]"}
    assert r(env=slurm)[:4] == (("n03", 61005), 4, 1, 0)
    with pytest.raises(ValueError, match="coordinator_address.*Open MPI gives no address"):
        r(env={"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"})
    with pytest.raises(ValueError, match="num_processes.*process_id.*no launcher"):
        r("h:1", env={})
    with pytest.raises(ValueError, match="process_id=5 is out of range"):
        r("h:1", 2, 5, env={})
    with pytest.raises(ValueError, match="not 'host:port'"):
        r("h", 2, 0, env={})


def test_single_process_run_with_the_store():
    """num_processes=1: the store, barriers and get timeouts work within one process."""
    port = _free_port()
    kiln.distributed.initialize(f"127.0.0.1:{port}", 1, 0, initialization_timeout=5)
    try:
        c = kiln.distributed.client()
        c.set("t/k", b"\x00\x01")
        assert c.get("t/k", 1) == b"\x00\x01" and c.try_get("t/absent") is None
        with pytest.raises(kiln.distributed.CoordinationError, match="already set"):
            c.set("t/k", b"x")
        c.set("t/k", "y", allow_overwrite=True)
        c.set("t/j", "z")
        assert c.key_value_dir_get("t/") == [("t/j", "z"), ("t/k", "y")]
        c.delete("t/")
        assert c.key_value_dir_get("t/") == []
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="get\\('never'\\)"):
            c.get("never", 0.2)
        assert time.monotonic() - t0 < 3
        c.barrier("b")
        assert kiln.local_devices() == kiln.devices()
    finally:
        kiln.distributed.shutdown()
    assert not kiln.distributed.is_initialized()


# ---------------------------------------------------------------------------------------------------------
# Computation across processes: each child joins a run of n processes (k CPU devices each), computes
# over a mesh of every process's devices, checks its own pieces of each result against NumPy (the
# global inputs are known to every child) and prints the names of the checks that passed.

COMPUTE = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import kiln as jax
    import kiln.numpy as jnp
    from kiln import distributed, lax
    from kiln.sharding import Mesh, NamedSharding, PartitionSpec as P
    a = json.loads(sys.argv[1])
    distributed.initialize(a["address"], a["n"], a["pid"], initialization_timeout=15, shutdown_timeout_seconds=15)
    me, devs = jax.process_index(), jax.devices()
    N, local = len(devs), jax.local_devices()
    mesh = Mesh(np.array(devs), ("x",))
    pos = {d: i for i, d in enumerate(devs)}  # each device's position on the mesh
    ok = []

    def sharded(glob, spec=P("x"), m=mesh):
        return jax.make_array_from_callback(glob.shape, NamedSharding(m, spec), lambda i: glob[i])

    def smap(f, out, ins=P("x"), m=mesh):
        return jax.shard_map(f, mesh=m, in_specs=ins, out_specs=out, check_vma=False)

    def check(name, got, want):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5, err_msg=name)
        ok.append(name)

    def check_shards(name, arr, want_of):  # want_of(mesh position) -> that device's piece
        shards = arr.addressable_shards
        assert [s.device for s in shards] == local, name
        for s in shards:
            np.testing.assert_allclose(np.asarray(s.data), want_of(pos[s.device]), rtol=1e-5, err_msg=name)
        ok.append(name)

    if a["case"] == "collectives":
        g = np.arange(N * 3, dtype=np.float32).reshape(N, 3) ** 1.5
        x = sharded(g)
        assert not x.is_fully_addressable and len(x.addressable_shards) == len(local)
        try:
            np.asarray(x)
        except RuntimeError as e:
            assert "non-addressable" in str(e)
            ok.append("asarray raises")
        check("psum", smap(lambda v: lax.psum(v, "x"), P())(x), g.sum(0, keepdims=True))
        check("pmean", smap(lambda v: lax.pmean(v, "x"), P())(x), g.mean(0, keepdims=True))
        check("pmax", smap(lambda v: lax.pmax(v, "x"), P())(x), g.max(0, keepdims=True))
        check("all_gather", smap(lambda v: lax.all_gather(v, "x", tiled=True), P())(x), g)
        check("all_gather stacked", smap(lambda v: lax.all_gather(v[0], "x"), P())(x), g)
        h = np.arange(N * N * 2, dtype=np.float32).reshape(N, N * 2)  # row d: device d's operand
        check_shards("psum_scatter", smap(lambda v: lax.psum_scatter(v[0], "x", tiled=True), P("x"))(sharded(h)),
                     lambda i: h.sum(0)[2 * i:2 * i + 2])
        perm = [(i, (i + 1) % N) for i in range(N)]
        check_shards("ppermute", smap(lambda v: lax.ppermute(v, "x", perm), P("x"))(x), lambda i: g[(i - 1) % N][None])
        t = np.arange(N * N * 2, dtype=np.float32).reshape(N * N, 2)  # device d: rows d*N .. d*N+N-1
        check_shards("all_to_all", smap(lambda v: lax.all_to_all(v, "x", 0, 0, tiled=True), P("x"))(sharded(t)),
                     lambda i: t.reshape(N, N, 2)[:, i])
        check_shards("axis_index", smap(lambda v: lax.axis_index("x")[None] + 0 * v[:, 0].astype(jnp.int32), P("x"))(x),
                     lambda i: np.array([i]))
        # a 2-D mesh: processes x their devices; psum over the processes only
        k = len(local)
        m2 = Mesh(np.array(devs).reshape(a["n"], k), ("p", "d"))
        g2 = np.arange(a["n"] * k * 2, dtype=np.float32).reshape(a["n"], k, 2)
        y = smap(lambda v: lax.psum(v, "p"), P(None, "d"), ins=P("p", "d"), m=m2)(sharded(g2, P("p", "d"), m2))
        check_shards("psum over one axis of a 2-D mesh", y, lambda i: g2.sum(0)[i % k][None, None])
        # device_put of a global value onto the mesh; a replicated input; pmap over every device
        z = jax.device_put(jnp.asarray(g), NamedSharding(mesh, P("x")))
        check("device_put + replicated input", smap(lambda v, w: lax.psum(v * w, "x"), P(), ins=(P("x"), P()))(
            z, jnp.asarray(2.0, jnp.float32)), 2 * g.sum(0, keepdims=True))
        mine = np.stack([g[pos[d]] for d in local])
        pm = jax.pmap(lambda v: (v - lax.pmean(v, "i"), lax.psum(v, "i")), axis_name="i", out_axes=(0, None))(mine)
        check("pmap mapped result", pm[0], mine - g.mean(0))
        check("pmap replicated result", pm[1], g.sum(0))
        check("jit partitioned over the mesh", jax.jit(lambda v: jnp.sum(v * 2, axis=0))(x), 2 * g.sum(0))
    elif a["case"] == "sgd":
        rng = np.random.default_rng(0)
        B, D = 8 * N, 5
        X = rng.standard_normal((B, D)).astype(np.float32)
        Y = (X @ np.arange(1.0, D + 1) + 0.5).astype(np.float32)

        def loss(p, xb, yb):
            return jnp.mean((xb @ p["w"] + p["b"] - yb) ** 2)

        def step(p, xb, yb):
            grads = lax.pmean(jax.grad(loss)(p, xb, yb), "x")
            return jax.tree_util.tree_map(lambda v, gr: v - 0.1 * gr, p, grads)
        dstep = jax.shard_map(step, mesh=mesh, in_specs=(P(), P("x"), P("x")), out_specs=P(), check_vma=False)
        p = {"w": jnp.zeros(D, jnp.float32), "b": jnp.zeros((), jnp.float32)}
        q = dict(p)
        xs, ys = sharded(X), sharded(Y)
        for _ in range(3):
            p = dstep(p, xs, ys)
            q = jax.tree_util.tree_map(lambda v, gr: v - 0.1 * gr, q, jax.grad(loss)(q, jnp.asarray(X), jnp.asarray(Y)))
        check("sgd w", p["w"], np.asarray(q["w"]))
        check("sgd b", p["b"], np.asarray(q["b"]))
    elif a["case"] == "multihost":
        from kiln.experimental import multihost_utils as mh
        g = np.arange(N * 3, dtype=np.float32).reshape(N, 3)
        check("process_allgather of a global array", mh.process_allgather(sharded(g)), g)
        check("process_allgather stacked", mh.process_allgather(np.full(2, me, np.float32)),
              np.repeat(np.arange(a["n"], dtype=np.float32)[:, None], 2, 1))
        check("broadcast_one_to_all", mh.broadcast_one_to_all(np.full(3, me + 7.0)), np.full(3, 7.0))
        mh.sync_global_devices("all here")
        # check_vma typing across processes: the replicated w's gradient is summed over every device
        w0 = np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2)
        xg = np.arange(N * 4 * 3, dtype=np.float32).reshape(N * 4, 3) / 10
        f = jax.shard_map(lambda w, xb: jax.grad(lambda v: jnp.sum(jnp.tanh(xb @ v)))(w), mesh=mesh,
                          in_specs=(P(), P("x")), out_specs=P())
        t = np.tanh(xg @ w0)
        check("check_vma gradient summed over processes", f(jnp.asarray(w0), sharded(xg)), xg.T @ (1 - t ** 2))
    elif a["case"] in ("exit", "hang"):
        x = sharded(np.ones((N, 2), np.float32))
        f = smap(lambda v: lax.psum(v, "x"), P())
        f(x).block_until_ready()  # one collective in step first
        if me == a["n"] - 1:
            if a["case"] == "exit":
                raise SystemExit(3)  # a process leaving (its exception ends it) while the others compute
            time.sleep(9)  # a process stuck elsewhere
        t0 = time.monotonic()
        try:
            np.asarray(f(x))
        except RuntimeError as e:
            ok.append({"error": str(e), "seconds": time.monotonic() - t0})
            if a["case"] == "exit":  # a survivor leaving at once could be what another survivor meets first
                time.sleep(1)
    print(json.dumps({"me": me, "ok": ok}))
""")


def _compute(n, k, case, extra_env=None, expect_rc=None):
    """Runs the COMPUTE child in n processes of k CPU devices each; their reports by process."""
    port = _free_port()
    env = _child_env({"KILN_NUM_CPU_DEVICES": str(k), **(extra_env or {})})
    procs = [subprocess.Popen([sys.executable, "-c", COMPUTE, json.dumps(
        {"address": f"127.0.0.1:{port}", "n": n, "pid": p, "case": case})], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd=ROOT) for p in range(n)]
    reports = {}
    try:
        for p, pr in enumerate(procs):
            out, err = pr.communicate(timeout=90)
            want = (expect_rc or {}).get(p, 0)
            assert pr.returncode == want, f"process {p} exited with {pr.returncode}:\n{err}"
            if want == 0:
                reports[p] = json.loads(out.strip().splitlines()[-1])["ok"]
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
    return reports


COLLECTIVE_CHECKS = ["asarray raises", "psum", "pmean", "pmax", "all_gather", "all_gather stacked", "psum_scatter",
                     "ppermute", "all_to_all", "axis_index", "psum over one axis of a 2-D mesh",
                     "device_put + replicated input", "pmap mapped result", "pmap replicated result",
                     "jit partitioned over the mesh"]


@pytest.mark.parametrize("n,k", [(2, 1), (2, 2), (4, 1), (4, 2)])
def test_collectives_across_processes_match_numpy(n, k):
    reports = _compute(n, k, "collectives")
    assert reports == {p: COLLECTIVE_CHECKS for p in range(n)}


def test_multihost_utils_and_check_vma_across_processes():
    assert _compute(2, 2, "multihost") == {p: ["process_allgather of a global array", "process_allgather stacked",
                                               "broadcast_one_to_all", "check_vma gradient summed over processes"]
                                           for p in range(2)}


@pytest.mark.parametrize("n,k", [(2, 2), (4, 1)])
def test_data_parallel_sgd_across_processes_matches_one_process(n, k):
    """Replicated parameters, the batch split over every process's devices, gradients pmean'd:
    three steps give what full-batch steps give in one process."""
    assert _compute(n, k, "sgd") == {p: ["sgd w", "sgd b"] for p in range(n)}


def test_a_process_that_exits_makes_the_others_raise_not_hang():
    reports = _compute(3, 2, "exit", expect_rc={2: 3})
    for p in (0, 1):
        (r,) = reports[p]
        assert r["error"].startswith("psum: ") and "process 2" in r["error"], r
        assert r["seconds"] < 20


def test_a_silent_process_times_out_the_collective():
    # (the timeout also bounds the first collective, where one process may still be compiling while
    # the other waits: 4 s leaves room for a loaded machine)
    reports = _compute(2, 1, "hang", extra_env={"KILN_COLLECTIVE_TIMEOUT": "4"})
    (r,) = reports[0]
    assert r["error"].startswith("psum: timed out after 4 s waiting for process(es) 1"), r
    assert r["seconds"] < 8
    # process 1 comes back to connections the failure closed: it raises naming process 0, unless
    # its send still went into its socket and it read process 0's whole frame (sent before the
    # timeout), which completes its psum with the right value
    for r in reports[1]:
        assert r["error"].startswith("psum: ") and ("process 0" in r["error"] or "earlier failure" in r["error"]), r


def test_gpu_mesh_spanning_processes_is_a_span_of_local_ranks():
    """A GPU mesh holding another process's GPU runs as a span (NCCL between the processes,
    tests/test_distributed_gpu.py): this process's mesh positions, and per position its process."""
    from kiln._src import api, spmd
    here, there = api.Device(0, "gpu", "H100"), api.Device(1, "gpu", "H100", process_index=1)
    here._kind = there._kind = 1
    there._ordinal = None  # as kiln.distributed numbers another process's device
    mesh = kiln.sharding.Mesh([here, there], ("x",))
    assert mesh.is_multi_process and not kiln.sharding.NamedSharding(mesh, kiln.P("x")).is_fully_addressable
    assert spmd._mesh_span(mesh, "shard_map") == ([0], [0, 1])
    with pytest.raises(ValueError, match="belongs to process 1"):
        api._check_local(there, "device_put")
