"""The key-value coordination service of a multi-process run (kiln.distributed): process 0 serves
it over TCP; every process (process 0 included) is a client. It carries what processes must agree
on before they compute together: device lists, barriers, and later NCCL's unique id.

Standard library only; must not import the rest of kiln (it runs before devices are known).

Protocol: every message is a frame `!I length` + body. A request body is an opcode byte then
length-prefixed (`!I`) fields; a reply body is a status byte (OK, MISSING, TIMEOUT, ERROR) then
fields. One request is answered before the next is read, so a connection is a simple RPC pipe;
blocking waits (get, barrier) wait on the server with the deadline the client sent, and the
client's socket waits a little longer, so no call can hang forever.
"""

import socket
import socketserver
import struct
import threading
import time

# opcodes
HELLO, SET, GET, TRY_GET, DIR_GET, DELETE, BARRIER, HEARTBEAT, GOODBYE = range(1, 10)
OP_NAMES = {HELLO: "hello", SET: "set", GET: "get", TRY_GET: "try_get", DIR_GET: "dir_get", DELETE: "delete",
            BARRIER: "barrier", HEARTBEAT: "heartbeat", GOODBYE: "goodbye"}
# reply statuses
OK, MISSING, TIMEOUT, ERROR = range(4)

MAX_FRAME = 64 << 20  # a frame larger than this is a protocol error (a stray client, not kiln)
_SLACK = 5.0  # seconds a client's socket waits beyond a server-side deadline


class CoordinationError(RuntimeError):
    """The coordination service refused a request or a peer failed (the message names which)."""


# ---------------------------------------------------------------------------------------------------------
# framing

def _recv_exact(sock, n):
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the connection was closed by the other side")
        data += chunk
    return bytes(data)


def _send_frame(sock, head, fields):
    body = bytearray([head])
    for f in fields:
        if isinstance(f, str):
            f = f.encode()
        body += struct.pack("!I", len(f)) + f
    sock.sendall(struct.pack("!I", len(body)) + bytes(body))


def _recv_frame(sock):
    (n,) = struct.unpack("!I", _recv_exact(sock, 4))
    if n < 1 or n > MAX_FRAME:
        raise ConnectionError(f"malformed frame of {n} bytes (not a kiln coordination peer?)")
    body = _recv_exact(sock, n)
    fields, i = [], 1
    while i < n:
        (k,) = struct.unpack_from("!I", body, i)
        fields.append(body[i + 4:i + 4 + k])
        i += 4 + k
    return body[0], fields


def _ms(seconds):
    return str(int(seconds * 1000)).encode()


# ---------------------------------------------------------------------------------------------------------
# server (process 0)

class _State:
    """What the service holds; every field is guarded by `cond`."""

    def __init__(self, num_processes):
        self.num_processes = num_processes
        self.cond = threading.Condition()
        self.store = {}  # key (str) -> value (bytes)
        self.connected = {}  # process id -> number of open connections it has
        self.left = set()  # process ids that said goodbye
        self.lost = {}  # process id -> why its connection ended without a goodbye
        self.barriers = {}  # barrier name -> set of process ids arrived
        self.last_seen = {}  # process id -> time.monotonic() of its last request


class _Handler(socketserver.BaseRequestHandler):
    def handle(self):
        st = self.server.state
        pid = None
        sock = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        clean = False
        try:
            while True:
                try:
                    op, fields = _recv_frame(sock)
                except (ConnectionError, OSError):
                    return
                try:
                    if op == HELLO:
                        pid = self._hello(st, fields)
                        reply = (OK, [])
                    elif pid is None:
                        reply = (ERROR, [f"{OP_NAMES.get(op, op)} before hello: not a kiln client?"])
                    else:
                        st.last_seen[pid] = time.monotonic()
                        if op == GOODBYE:
                            clean = True
                            with st.cond:
                                st.left.add(pid)
                                st.cond.notify_all()
                            reply = (OK, [])
                        else:
                            reply = self._serve(st, op, fields, pid)
                except CoordinationError as e:
                    reply = (ERROR, [str(e)])
                except (ValueError, IndexError, struct.error) as e:
                    reply = (ERROR, [f"malformed {OP_NAMES.get(op, op)} request: {e}"])
                try:
                    _send_frame(sock, reply[0], reply[1])
                except OSError:
                    return
        finally:
            if pid is not None:
                with st.cond:
                    st.connected[pid] -= 1
                    if not clean and st.connected[pid] == 0 and pid not in st.left:
                        st.lost[pid] = "its connection to the coordinator closed without kiln.distributed.shutdown()"
                    st.cond.notify_all()

    @staticmethod
    def _hello(st, fields):
        pid, n = int(fields[0]), int(fields[1])
        first = fields[2] == b"1"  # the process's main connection (not its heartbeat one)
        if n != st.num_processes:
            raise CoordinationError(f"process {pid} says num_processes={n} but the coordinator was started with "
                                    f"num_processes={st.num_processes}: every process must pass the same number")
        if not 0 <= pid < n:
            raise CoordinationError(f"process_id={pid} is out of range for num_processes={n}")
        with st.cond:
            if first and st.connected.get(pid, 0) > 0:
                raise CoordinationError(f"process_id={pid} is already connected: two processes were given the same "
                                        "process_id (check RANK / SLURM_PROCID / OMPI_COMM_WORLD_RANK)")
            st.connected[pid] = st.connected.get(pid, 0) + 1
            if first:  # a process (re)joining; a late heartbeat connection must not undo a goodbye
                st.lost.pop(pid, None)
                st.left.discard(pid)
        return pid

    @staticmethod
    def _serve(st, op, fields, pid):
        cond = st.cond
        if op == HEARTBEAT:
            return OK, []
        key = fields[0].decode()
        if op == SET:
            overwrite = fields[2] == b"1"
            with cond:
                if key in st.store and not overwrite:
                    return ERROR, [f"key {key!r} is already set (pass allow_overwrite=True to replace it)"]
                st.store[key] = fields[1]
                cond.notify_all()
            return OK, []
        if op == TRY_GET:
            with cond:
                return (OK, [st.store[key]]) if key in st.store else (MISSING, [])
        if op == DIR_GET:
            with cond:
                items = sorted((k, v) for k, v in st.store.items() if k.startswith(key))
            return OK, [x for kv in items for x in (kv[0].encode(), kv[1])]
        if op == DELETE:
            with cond:
                for k in [k for k in st.store if k == key or (key.endswith("/") and k.startswith(key))]:
                    del st.store[k]
            return OK, []
        deadline = time.monotonic() + int(fields[1]) / 1000
        if op == GET:
            with cond:
                while key not in st.store:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return TIMEOUT, []
                    cond.wait(left)
                return OK, [st.store[key]]
        if op == BARRIER:
            with cond:
                arrived = st.barriers.setdefault(key, set())
                arrived.add(pid)
                cond.notify_all()
                while len(arrived) < st.num_processes:
                    gone = sorted((set(st.lost) | st.left) - arrived)
                    if gone:
                        return ERROR, [f"barrier {key!r}: process(es) {gone} left the run before reaching it"]
                    left = deadline - time.monotonic()
                    if left <= 0:
                        missing = sorted(set(range(st.num_processes)) - arrived)
                        return TIMEOUT, [f"barrier {key!r}: process(es) {missing} did not arrive"]
                    cond.wait(left)
            return OK, []
        return ERROR, [f"unknown opcode {op}"]


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class Service:
    """The coordination service process 0 runs: a threaded TCP server on (host, port)."""

    def __init__(self, host, port, num_processes):
        try:
            self._server = _Server((host, port), _Handler)
        except OSError as e:
            raise CoordinationError(f"kiln.distributed: process 0 could not listen on {host or '*'}:{port} for the "
                                    f"coordination service ({e}); choose a free port in coordinator_address") from e
        self._server.state = _State(num_processes)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="kiln-coordinator", daemon=True)
        self._thread.start()

    def stop(self):
        self._server.shutdown()
        self._server.server_close()


# ---------------------------------------------------------------------------------------------------------
# client (every process)

class Client:
    """A process's connection to the coordination service; JAX's DistributedRuntimeClient names
    (key_value_set, blocking_key_value_get, wait_at_barrier, ...) plus short ones (set, get,
    barrier). Thread-safe: requests on the one connection are serialized. Values are bytes (the
    str forms encode/decode UTF-8). Timeouts are seconds in the short names, milliseconds in JAX's."""

    def __init__(self, address, process_id, num_processes, timeout, heartbeat_interval=10.0):
        self.address, self.process_id, self.num_processes = address, process_id, num_processes
        self._lock = threading.Lock()
        self._barrier_counts = {}
        self._sock = self._connect(timeout, main=True)
        self._stop = threading.Event()
        self._lost = None  # why heartbeats failed (the coordinator is gone), else None
        self._beat = None
        if heartbeat_interval:
            self._beat = threading.Thread(target=self._heartbeat, args=(heartbeat_interval,), daemon=True,
                                          name="kiln-heartbeat")
            self._beat.start()

    def _connect(self, timeout, main):
        host, port = self.address
        deadline = time.monotonic() + timeout
        last = None
        while True:
            left = deadline - time.monotonic()
            try:
                sock = socket.create_connection((host, port), timeout=max(0.1, min(left, 5.0)))
                break
            except OSError as e:  # not listening yet: process 0 may start after us
                last = e
            if left <= 0:
                raise TimeoutError(f"kiln.distributed: process {self.process_id} could not reach the coordinator at "
                                   f"{host}:{port} within {timeout:g} s ({last}); is process 0 running, listening on "
                                   "that address and reachable from this host? (initialization_timeout= sets the "
                                   "wait)") from None
            time.sleep(min(0.05, max(left, 0)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(timeout + _SLACK)
        self._exchange(sock, HELLO, [str(self.process_id), str(self.num_processes), "1" if main else "0"], "hello")
        return sock

    def _exchange(self, sock, op, fields, what, wait=0.0):
        try:
            sock.settimeout(wait + _SLACK)
            _send_frame(sock, op, fields)
            status, out = _recv_frame(sock)
        except (OSError, ConnectionError) as e:
            raise CoordinationError(f"kiln.distributed: {what}: lost the coordinator at {self.address[0]}:"
                                    f"{self.address[1]} ({e}); did process 0 exit or fail?") from None
        if status == ERROR:
            raise CoordinationError(f"kiln.distributed: {what}: {out[0].decode() if out else 'refused'}")
        return status, out

    def _call(self, op, fields, what, wait=0.0):
        if self._sock is None:
            raise CoordinationError(f"kiln.distributed: {what}: the client is shut down "
                                    "(call kiln.distributed.initialize first)")
        if self._lost is not None:
            raise CoordinationError(f"kiln.distributed: {what}: heartbeats to the coordinator failed: {self._lost}")
        with self._lock:
            return self._exchange(self._sock, op, fields, what, wait)

    def _heartbeat(self, interval):
        try:
            sock = self._connect(interval, main=False)
        except (OSError, CoordinationError, TimeoutError) as e:
            self._lost = str(e)
            return
        with sock:
            while not self._stop.wait(interval):
                try:
                    self._exchange(sock, HEARTBEAT, [], "heartbeat")
                except CoordinationError as e:
                    self._lost = str(e)
                    return

    # short names ---------------------------------------------------------------------------------------
    def set(self, key, value, allow_overwrite=False):
        """Stores value (bytes or str) under key; a key already set raises unless allow_overwrite."""
        self._call(SET, [key, value, "1" if allow_overwrite else "0"], f"set({key!r})")

    def get(self, key, timeout=60.0):
        """The bytes stored under key, waiting up to timeout seconds for some process to set it."""
        status, out = self._call(GET, [key, _ms(timeout)], f"get({key!r})", wait=timeout)
        if status == TIMEOUT:
            raise TimeoutError(f"kiln.distributed: get({key!r}): no process set the key within {timeout:g} s "
                               "(is the process that sets it running, and with the same key?)")
        return out[0]

    def try_get(self, key):
        """The bytes under key, or None when it is not set (does not wait)."""
        status, out = self._call(TRY_GET, [key], f"try_get({key!r})")
        return out[0] if status == OK else None

    def barrier(self, name, timeout=60.0):
        """Waits until every process has reached the barrier `name`. Each process may pass the same
        name again: the n-th call of a name meets the other processes' n-th call."""
        k = self._barrier_counts.get(name, 0)
        self._barrier_counts[name] = k + 1
        status, out = self._call(BARRIER, [f"{name}#{k}", _ms(timeout)], f"barrier({name!r})", wait=timeout)
        if status == TIMEOUT:
            raise TimeoutError(f"kiln.distributed: {out[0].decode()} within {timeout:g} s (a process is slow, "
                               "stuck, or skipped the barrier)")

    def dir_get(self, prefix):
        """Every (key, bytes) whose key starts with prefix, sorted by key."""
        _, out = self._call(DIR_GET, [prefix], f"dir_get({prefix!r})")
        return [(out[i].decode(), out[i + 1]) for i in range(0, len(out), 2)]

    def delete(self, key):
        """Removes key (a key ending in '/' removes every key under it)."""
        self._call(DELETE, [key], f"delete({key!r})")

    # JAX's names ----------------------------------------------------------------------------------------
    def key_value_set(self, key, value, allow_overwrite=False):
        self.set(key, value, allow_overwrite)

    key_value_set_bytes = key_value_set

    def blocking_key_value_get(self, key, timeout_in_ms):
        return self.get(key, timeout_in_ms / 1000).decode()

    def blocking_key_value_get_bytes(self, key, timeout_in_ms):
        return self.get(key, timeout_in_ms / 1000)

    def key_value_try_get(self, key):
        v = self.try_get(key)
        return None if v is None else v.decode()

    key_value_try_get_bytes = try_get

    def key_value_dir_get(self, prefix):
        return [(k, v.decode()) for k, v in self.dir_get(prefix)]

    key_value_dir_get_bytes = dir_get
    key_value_delete = delete

    def wait_at_barrier(self, barrier_id, timeout_in_ms, process_ids=None):
        if process_ids is not None:
            raise NotImplementedError("kiln.distributed: wait_at_barrier(process_ids=) (a barrier of some of the "
                                      "processes) is not supported yet by kiln; every process must take part")
        self.barrier(barrier_id, timeout_in_ms / 1000)

    def close(self):
        """Says goodbye (so barriers stop waiting for this process) and closes the connections."""
        self._stop.set()
        if self._sock is None:
            return
        try:
            self._call(GOODBYE, [], "shutdown")
        except CoordinationError:
            pass
        with self._lock:
            self._sock.close()
            self._sock = None
        if self._beat is not None:
            self._beat.join(timeout=1.0)
