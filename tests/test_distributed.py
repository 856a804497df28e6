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
            kiln.device_put(kiln.numpy.ones(2), remote[0])
        except NotImplementedError as e:
            errors.append(str(e))
        mesh = kiln.make_mesh((len(kiln.devices()),), ("x",))
        try:
            kiln.shard_map(lambda a: a, mesh=mesh, in_specs=kiln.P("x"), out_specs=kiln.P("x"))(
                kiln.numpy.ones(len(kiln.devices())))
        except NotImplementedError as e:
            errors.append(str(e))
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
        assert len(r["errors"]) == 2 and all("cross-process collectives" in e for e in r["errors"])
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
