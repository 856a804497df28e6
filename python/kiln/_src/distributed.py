"""Multi-process start-up (jax.distributed): which process this is, where the coordinator is, and
the global device list, exchanged through the coordination service (coordination.py); then the
connections the collectives of the CPU devices use across processes.

Arguments come from the caller, else the environment: KILN_/JAX_COORDINATOR_ADDRESS, then the
launcher that started the process (torchrun, Open MPI, Slurm). With several processes, each opens
a listening socket on the address it reaches the coordinator from, publishes host:port in the
coordination store and connects to every other process (a full mesh of TCP connections,
runtime/collective_net.c): shard_map and pmap over a mesh of CPU devices of several processes then
run the body on this process's devices, their collectives meeting the other processes' over those
connections (each collective waits at most KILN_COLLECTIVE_TIMEOUT seconds, default 300, for a
silent peer; a peer that exits or fails makes the others raise at once). GPU meshes that span
processes run the same way, their collectives through NCCL (one communicator per collective group,
its id passed over those connections: codegen/lower/collective.c).
"""

import atexit
import json
import os
import re

from kiln._src import coordination


class _GlobalState:
    """What initialize set up (jax._src.distributed.global_state); process_id 0 and
    num_processes 1 until then."""

    def __init__(self):
        self.process_id = 0
        self.num_processes = 1
        self.local_rank = None  # the launcher's local rank (LOCAL_RANK, SLURM_LOCALID, ...), if any
        self.coordinator_address = None
        self.service = None  # coordination.Service, on process 0
        self.client = None  # coordination.Client, on every process
        self.launcher = None  # which environment the missing arguments came from
        self.shutdown_timeout = 60.0  # seconds shutdown() waits for the other processes


global_state = _GlobalState()


# ---------------------------------------------------------------------------------------------------------
# Slurm host lists

def expand_hostlist(text):
    """Slurm's compressed host list as a list of names: 'node[01-03,07],gpu5' -> node01 node02
    node03 node07 gpu5 (zero padding kept; several bracket groups in one name multiply out)."""
    hosts = []
    for item in _split_top_level(text.strip()):
        hosts.extend(_expand_item(item, text))
    return hosts


def _split_top_level(text):
    items, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [s.strip() for s in items if s.strip()]


def _expand_item(item, whole):
    m = re.match(r"([^\[\]]*)\[([^\[\]]*)\](.*)$", item)
    if m is None:
        if "[" in item or "]" in item:
            raise ValueError(f"Slurm host list {whole!r}: unbalanced brackets in {item!r}")
        return [item]
    prefix, ranges, rest = m.groups()
    out = []
    for r in ranges.split(","):
        r = r.strip()
        lo, sep, hi = r.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"Slurm host list {whole!r}: {r!r} in {item!r} is not a number or a range a-b")
        width = len(lo)
        for k in range(int(lo), int(hi if sep else lo) + 1):
            out.extend(prefix + str(k).zfill(width) + tail for tail in _expand_item(rest, whole))
    return out


# ---------------------------------------------------------------------------------------------------------
# arguments from the environment

def _env_int(env, name):
    v = env.get(name)
    if v is None or v.strip() == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"kiln.distributed.initialize: environment variable {name}={v!r} is not an integer") from None


def _slurm_port(env):
    """KILN_COORDINATOR_PORT, else one derived from the job id (every task of a job derives the same)."""
    port = _env_int(env, "KILN_COORDINATOR_PORT")
    if port is not None:
        return port
    job = _env_int(env, "SLURM_JOB_ID") or 0
    return 61000 + job % 4000


def _launcher(env):
    """(name, address or None, num_processes, process_id, local_rank) from the first launcher whose
    variables are set, or None."""
    if env.get("RANK") is not None and env.get("WORLD_SIZE") is not None:
        addr = None
        if env.get("MASTER_ADDR"):
            if not env.get("MASTER_PORT"):
                raise ValueError("kiln.distributed.initialize: MASTER_ADDR is set but MASTER_PORT is not (torchrun "
                                 "sets both); set MASTER_PORT or pass coordinator_address='host:port'")
            addr = f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
        return ("torchrun (RANK/WORLD_SIZE)", addr, _env_int(env, "WORLD_SIZE"), _env_int(env, "RANK"),
                _env_int(env, "LOCAL_RANK"))
    if env.get("OMPI_COMM_WORLD_SIZE") is not None:
        return ("Open MPI (OMPI_COMM_WORLD_*)", None, _env_int(env, "OMPI_COMM_WORLD_SIZE"),
                _env_int(env, "OMPI_COMM_WORLD_RANK"), _env_int(env, "OMPI_COMM_WORLD_LOCAL_RANK"))
    if env.get("SLURM_NTASKS") is not None and env.get("SLURM_PROCID") is not None:
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
        addr = f"{expand_hostlist(nodes)[0]}:{_slurm_port(env)}" if nodes else None
        return ("Slurm (SLURM_*)", addr, _env_int(env, "SLURM_NTASKS"), _env_int(env, "SLURM_PROCID"),
                _env_int(env, "SLURM_LOCALID"))
    return None


def resolve(coordinator_address=None, num_processes=None, process_id=None, env=None):
    """(address, num_processes, process_id, local_rank, launcher name): each from the argument,
    else the environment; raises naming what is missing and where it may come from."""
    env = os.environ if env is None else env
    found = _launcher(env)
    launcher, l_addr, l_n, l_pid, local_rank = found if found else (None, None, None, None, None)
    addr = (coordinator_address or env.get("KILN_COORDINATOR_ADDRESS") or env.get("JAX_COORDINATOR_ADDRESS")
            or l_addr)
    n = num_processes if num_processes is not None else (_env_int(env, "KILN_NUM_PROCESSES") or l_n)
    pid = process_id if process_id is not None else _env_int(env, "KILN_PROCESS_ID")
    pid = pid if pid is not None else l_pid
    where = f" (found {launcher})" if launcher else " (no launcher's variables are set)"
    missing = []
    if addr is None:
        missing.append("coordinator_address: pass coordinator_address='host:port' or set KILN_COORDINATOR_ADDRESS"
                       + (" (Open MPI gives no address)" if found and "MPI" in launcher else
                          "; torchrun sets MASTER_ADDR/MASTER_PORT, Slurm SLURM_STEP_NODELIST"))
    if n is None:
        missing.append("num_processes: pass num_processes= or launch with torchrun (WORLD_SIZE), Open MPI "
                       "(OMPI_COMM_WORLD_SIZE) or Slurm (SLURM_NTASKS)")
    if pid is None:
        missing.append("process_id: pass process_id= or launch with torchrun (RANK), Open MPI "
                       "(OMPI_COMM_WORLD_RANK) or Slurm (SLURM_PROCID)")
    if missing:
        raise ValueError("kiln.distributed.initialize: missing " + "; ".join(missing) + where)
    host, port = _split_address(addr)
    if n < 1:
        raise ValueError(f"kiln.distributed.initialize: num_processes={n}; it must be at least 1")
    if not 0 <= pid < n:
        raise ValueError(f"kiln.distributed.initialize: process_id={pid} is out of range for num_processes={n} "
                         "(process ids are 0 .. num_processes-1)")
    return (host, port), n, pid, local_rank, launcher


def _split_address(addr):
    host, sep, port = str(addr).rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"kiln.distributed.initialize: coordinator_address {addr!r} is not 'host:port'")
    return host.strip("[]"), int(port)


def _listen_host(host):
    """Process 0 listens on the coordinator's loopback address when it is one (nothing outside the
    machine can then connect), else on every interface, as the name may resolve to any of them."""
    if host == "localhost" or host.startswith("127.") or host == "::1":
        return host
    return ""


# ---------------------------------------------------------------------------------------------------------
# initialize / shutdown

def initialize(coordinator_address=None, num_processes=None, process_id=None, local_device_ids=None,
               cluster_detection_method=None, initialization_timeout=300, coordinator_bind_address=None,
               heartbeat_timeout_seconds=None, shutdown_timeout_seconds=None, **ignored):
    """Joins this process to a multi-process run (jax.distributed.initialize).

    coordinator_address ('host:port'), num_processes and process_id default to the environment:
    KILN_COORDINATOR_ADDRESS / JAX_COORDINATOR_ADDRESS (and KILN_NUM_PROCESSES / KILN_PROCESS_ID),
    then torchrun's MASTER_ADDR+MASTER_PORT, WORLD_SIZE, RANK (LOCAL_RANK), Open MPI's
    OMPI_COMM_WORLD_SIZE / _RANK / _LOCAL_RANK (no address: give one), Slurm's SLURM_NTASKS,
    SLURM_PROCID, SLURM_LOCALID and the first host of SLURM_STEP_NODELIST / SLURM_JOB_NODELIST
    (port: KILN_COORDINATOR_PORT, else 61000 + job id % 4000). Process 0 runs the coordination
    service; every process connects (waiting up to initialization_timeout seconds for it), meets
    the others at a barrier and publishes its devices: kiln.devices() then lists every process's
    devices with global ids (process p's after those of processes < p), local_devices() this
    process's. local_device_ids limits which of this process's devices take part.
    coordinator_bind_address ('host:port') is where process 0 listens, if not the coordinator's.
    shutdown_timeout_seconds bounds shutdown()'s wait for the others (default 60).
    cluster_detection_method, heartbeat_timeout_seconds and other JAX arguments are accepted and
    ignored (kiln detects the launchers above and no others; a lost connection ends a barrier at
    once)."""
    del cluster_detection_method, heartbeat_timeout_seconds, ignored
    if global_state.client is not None:
        raise RuntimeError("kiln.distributed.initialize: already initialized (call kiln.distributed.shutdown() "
                           "first to start over)")
    from kiln._src import api
    (host, port), n, pid, local_rank, launcher = resolve(coordinator_address, num_processes, process_id)
    timeout = float(initialization_timeout)
    service = None
    if pid == 0:
        bhost, bport = _split_address(coordinator_bind_address) if coordinator_bind_address else (_listen_host(host),
                                                                                                  port)
        service = coordination.Service(bhost, bport, n)
    client = None
    try:
        client = coordination.Client((host, port), pid, n, timeout)
        client.barrier("kiln/initialize", timeout)
        local = api._local_device_table(local_device_ids)
        client.set(f"kiln/devices/{pid}", json.dumps(local))
        tables = [json.loads(client.get(f"kiln/devices/{p}", timeout)) for p in range(n)]
    except BaseException:
        if client is not None:
            client.close()
        if service is not None:
            service.stop()
        raise
    if n > 1:
        try:
            _connect_collectives(client, pid, n, timeout)
        except BaseException:
            client.close()
            if service is not None:
                service.stop()
            raise
    api._set_global_devices(tables, pid, local_device_ids)
    global_state.process_id, global_state.num_processes, global_state.local_rank = pid, n, local_rank
    global_state.coordinator_address = f"{host}:{port}"
    global_state.service, global_state.client, global_state.launcher = service, client, launcher
    global_state.shutdown_timeout = 60.0 if shutdown_timeout_seconds is None else float(shutdown_timeout_seconds)


def collective_timeout():
    """Seconds a collective across processes waits for a silent peer (KILN_COLLECTIVE_TIMEOUT)."""
    v = os.environ.get("KILN_COLLECTIVE_TIMEOUT", "").strip()
    try:
        t = float(v) if v else 300.0
    except ValueError:
        raise ValueError(f"KILN_COLLECTIVE_TIMEOUT={v!r}: expected a number of seconds") from None
    if t <= 0:
        raise ValueError(f"KILN_COLLECTIVE_TIMEOUT={v!r}: expected a positive number of seconds")
    return t


def _connect_collectives(client, pid, n, timeout):
    """Connects this process to every other for the collectives (runtime/collective_net.c): it
    listens on the address its connection to the coordinator leaves from (an address the other
    processes can reach when they reach the coordinator), publishes it, and connects; process p
    dials the processes < p and accepts those > p."""
    from kiln import _kiln
    host = client._sock.getsockname()[0]
    port = _kiln.net_listen(host)
    client.set(f"kiln/net/{pid}", f"{host}:{port}")
    addrs = [client.get(f"kiln/net/{p}", timeout).decode().rpartition(":") for p in range(n)]
    _kiln.net_connect(pid, [a[0] for a in addrs], [int(a[2]) for a in addrs], timeout, collective_timeout())


def is_initialized():
    return global_state.client is not None


def shutdown(timeout=None):
    """Leaves the run (jax.distributed.shutdown): every process meets at a barrier first (so process
    0's service outlives the others' last requests), then disconnects; process 0 stops the service.
    Devices go back to this process's own. A no-op when not initialized; also run at exit."""
    from kiln._src import api
    client, service = global_state.client, global_state.service
    if client is None:
        return
    from kiln import _kiln
    try:
        # this process's part of its last collectives first (the others wait for it); then its
        # connections close before the barrier, so that the collectives of others still waiting
        # for this one (a process leaving after an error) fail at once rather than at the timeout
        _kiln.synchronize()
        _kiln.net_close()
        client.barrier("kiln/shutdown", global_state.shutdown_timeout if timeout is None else timeout)
    except (coordination.CoordinationError, TimeoutError):
        pass  # a peer is gone: leave anyway
    finally:
        _kiln.net_close()
        client.close()
        if service is not None:
            service.stop()
        global_state.__init__()
        api._set_global_devices(None, 0, None)


atexit.register(shutdown)


def client():
    """This process's coordination client (jax's distributed.global_state.client): key_value_set,
    blocking_key_value_get, wait_at_barrier, ... and set/get/barrier; raises when not initialized."""
    if global_state.client is None:
        raise RuntimeError("kiln.distributed.client(): not initialized; call kiln.distributed.initialize() first")
    return global_state.client


def remote_device_error(device, what):
    """What computing on another process's device alone raises (a single device of another process)."""
    return ValueError(
        f"{what}: {device!r} belongs to process {device.process_index}, not to this one (process "
        f"{global_state.process_id}); a process computes only on its own devices: put data on a mesh that spans "
        "processes with a NamedSharding (each process gives its own pieces), or use kiln.local_devices()")
