"""kiln.profiler: jax.profiler's names, recording what kiln does.

A trace (`with trace(log_dir):`, or start_trace ... stop_trace) records on the host each jit trace
and compile (the function's name), each launch of an executable (its name, its steps), the CPU
executor's run of it and of each of its steps, the NVIDIA-library calls kiln makes (cuBLAS, cuDNN,
cuFFT, cuSOLVER, NCCL), TraceAnnotation / StepTraceAnnotation / annotate_function spans and
kiln.named_scope; on a GPU, through CUPTI's activity API, every kernel, copy and memset the GPU
ran with its device time, linked to the launch that queued it. stop_trace writes it as Chrome
trace-event JSON, gzipped, where JAX's profiler puts its trace:
log_dir/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<hostname>.trace.json.gz (ui.perfetto.dev and
chrome://tracing open it). Host rows are the process's threads; each GPU is a process of its own,
one row per stream. While no trace records, each hook in kiln costs one branch.

device_memory_profile() is a pprof profile (gzipped profile.proto) of the live arrays, as JAX's.
"""
import contextlib
import functools
import gzip
import json
import os
import socket
import threading
import time

from kiln import _kiln

__all__ = ["trace", "start_trace", "stop_trace", "TraceAnnotation", "StepTraceAnnotation", "annotate_function",
           "device_memory_profile", "save_device_memory_profile", "start_server", "ProfileOptions"]


class ProfileOptions:
    """jax.profiler.ProfileOptions: what a trace records. kiln reads device_tracer_level (0: no
    GPU rows); the host and Python levels are accepted (kiln's host events are always on in a
    trace, and it records no Python call stacks)."""

    def __init__(self):
        self.host_tracer_level = 2
        self.python_tracer_level = 0
        self.device_tracer_level = 1
        self.start_timestamp_ns = 0
        self.duration_ms = 0
        self.advanced_configuration = {}


class _Session:
    """The trace being recorded."""

    def __init__(self, log_dir, perfetto_trace, perfetto_link):
        self.log_dir, self.perfetto_trace, self.perfetto_link = log_dir, perfetto_trace, perfetto_link
        self.wall = time.time()
        self.start_ns = 0
        self.device = False  # CUPTI collects
        self.device_note = ""


_lock = threading.Lock()
_session = None
_last_trace = None  # the path of the last trace written (for tests and tools)


def start_trace(log_dir, create_perfetto_link=False, create_perfetto_trace=False, profiler_options=None):
    """Starts recording a trace written to log_dir by stop_trace(). One trace at a time, as JAX."""
    global _session
    s = _Session(os.fspath(log_dir), create_perfetto_trace or create_perfetto_link, create_perfetto_link)
    with _lock:
        if _session is not None:
            raise RuntimeError("Profile has already been started. Only one profile may be run at a time "
                               "(call kiln.profiler.stop_trace() to end the one recording)")
        from kiln._src import api
        if profiler_options is not None and getattr(profiler_options, "device_tracer_level", 1) == 0:
            s.device_note = "no device rows: ProfileOptions.device_tracer_level is 0"
        elif not api._gpus:
            s.device_note = "no device rows: kiln runs on the CPU here (no GPU in use)"
        else:
            why = _kiln.device_trace_start()
            s.device = why is None
            s.device_note = f"device rows from CUPTI ({_kiln.cupti_library()})" if s.device else f"no device rows: {why}"
        _kiln.trace_start()
        s.start_ns = _kiln.trace_now()
        _session = s


def stop_trace():
    """Stops the trace start_trace began and writes it (see the module's doc for where)."""
    global _session, _last_trace
    with _lock:
        s = _session
        if s is None:
            raise RuntimeError("No profile started: call kiln.profiler.start_trace(log_dir) (or use "
                               "`with kiln.profiler.trace(log_dir):`) before stop_trace()")
        _session = None
        try:
            _kiln.synchronize()  # the work queued inside the trace finishes inside it
        finally:
            if s.device:
                _kiln.device_trace_stop()
            _kiln.trace_stop()
        host, host_dropped = _kiln.trace_take()
        dev, dev_dropped = _kiln.device_trace_take() if s.device else ([], 0)
    _last_trace = _write(s, host, host_dropped, dev, dev_dropped)


@contextlib.contextmanager
def trace(log_dir, create_perfetto_link=False, create_perfetto_trace=False, profiler_options=None):
    """`with trace(log_dir):` records a trace of the block (start_trace, then stop_trace)."""
    start_trace(log_dir, create_perfetto_link, create_perfetto_trace, profiler_options)
    try:
        yield
    finally:
        stop_trace()


def _json_args(kwargs):
    """kwargs as the members of a JSON object (what the recorder keeps), or None."""
    return json.dumps(kwargs, default=str)[1:-1] if kwargs else None


class TraceAnnotation(contextlib.ContextDecorator):
    """A span named `name` (its kwargs as the event's args) in the trace being recorded; nothing
    while none is."""
    _cat = "annotation"

    def __init__(self, name, **kwargs):
        self.name, self.kwargs = name, kwargs
        self._starts = []  # (a decorator's instance is entered again by recursive calls)

    def __enter__(self):
        self._starts.append(_kiln.trace_begin())
        return self

    def __exit__(self, *exc):
        t0 = self._starts.pop()
        if t0:
            _kiln.trace_add(self._cat, str(self.name), t0, _json_args(self.kwargs))
        return False


class StepTraceAnnotation(TraceAnnotation):
    """A training step's span: StepTraceAnnotation("train", step_num=i)."""
    _cat = "step"

    def __init__(self, name, **kwargs):
        super().__init__(name, **kwargs)


def annotate_function(func=None, name=None, **kwargs):
    """Decorator: every call of func is a span named `name` (default: func's qualified name)."""
    if func is None:
        return functools.partial(annotate_function, name=name, **kwargs)
    name = name or getattr(func, "__qualname__", None) or getattr(func, "__name__", "function")

    @functools.wraps(func)
    def wrapper(*args, **kw):
        with TraceAnnotation(name, **kwargs):
            return func(*args, **kw)
    return wrapper


def start_server(port):
    raise NotImplementedError("profiler.start_server: kiln has no profiler server; record a trace with "
                              "kiln.profiler.trace(log_dir) and open it in ui.perfetto.dev")


# ---- writing a trace ----

_HOST_PID = 1
_GPU_PID = 100  # + the CUDA device id
_PREFIX = {"trace": "trace ", "compile": "compile ", "launch": "launch ", "execute": "execute "}
_COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
               10: "PtoP"}


def _args(text):
    if not text:
        return {}
    try:
        return json.loads("{" + text + "}")
    except ValueError:  # (cut at the recorder's limit)
        return {"args": text}


def _thread_names(tids, executors):
    names = {}
    main = threading.main_thread().native_id
    py = {t.native_id: t.name for t in threading.enumerate()}
    for tid in tids:
        if tid == main:
            names[tid] = "Python main thread"
        elif tid in py:
            names[tid] = f"Python thread {py[tid]}"
        elif tid in executors:
            names[tid] = "kiln CPU executor"
        else:
            try:
                with open(f"/proc/self/task/{tid}/comm") as f:
                    names[tid] = f"{f.read().strip()} ({tid})"
            except OSError:
                names[tid] = f"thread {tid}"
    return names


def _events(s, host, dev):
    """The trace's events: metadata rows, host slices, device slices, and flows from a launch to
    what it queued."""
    base = s.start_ns

    def us(t):
        return round((t - base) / 1000.0, 3)

    out, launches = [], {}
    for cat, name, t0, t1, tid, lid, args in host:
        ev = {"ph": "X", "cat": cat, "name": _PREFIX.get(cat, "") + name, "pid": _HOST_PID, "tid": tid, "ts": us(t0),
              "dur": round((t1 - t0) / 1000.0, 3), "args": _args(args)}
        if lid:
            ev["args"]["launch_id"] = lid
            if cat == "launch":
                launches[lid] = ev
        out.append(ev)
    flows = []

    def flow(src, pid, tid, ts):
        fid = len(flows) // 2 + 1
        flows.append({"ph": "s", "id": fid, "cat": "launch", "name": "launch", "pid": src["pid"], "tid": src["tid"],
                      "ts": src["ts"]})
        flows.append({"ph": "f", "bp": "e", "id": fid, "cat": "launch", "name": "launch", "pid": pid, "tid": tid,
                      "ts": ts})

    for ev in out:  # the CPU executor's runs, when another thread queued them
        src = launches.get(ev["args"].get("launch_id")) if ev["cat"] == "execute" else None
        if src is not None and src["tid"] != ev["tid"]:
            flow(src, ev["pid"], ev["tid"], ev["ts"])
    gpus, streams = set(), set()
    for kind, name, start, end, device, stream, corr, lid, nbytes, copy_kind, grid, block in dev:
        args = {"correlation_id": corr, "device": device, "stream": stream}
        if kind == "kernel":
            args.update(grid=list(grid), block=list(block))
        else:
            name = f"{kind} {_COPY_KINDS.get(copy_kind, '')}".strip() if kind == "memcpy" else "memset"
            args["bytes"] = nbytes
        if lid:
            args["launch_id"] = lid
        ev = {"ph": "X", "cat": kind, "name": name, "pid": _GPU_PID + device, "tid": stream, "ts": us(start),
              "dur": round((end - start) / 1000.0, 3), "args": args}
        out.append(ev)
        gpus.add(device)
        streams.add((device, stream))
        if lid in launches:
            flow(launches[lid], ev["pid"], stream, ev["ts"])
    tids = sorted({ev["tid"] for ev in out if ev["pid"] == _HOST_PID} | {threading.main_thread().native_id})
    executors = {ev["tid"] for ev in out if ev["pid"] == _HOST_PID and ev["cat"] in ("execute", "cpu_step")}
    meta = [{"ph": "M", "name": "process_name", "pid": _HOST_PID, "args": {"name": f"Host (kiln, pid {os.getpid()})"}},
            {"ph": "M", "name": "process_sort_index", "pid": _HOST_PID, "args": {"sort_index": 0}}]
    for tid, tname in _thread_names(tids, executors).items():
        meta.append({"ph": "M", "name": "thread_name", "pid": _HOST_PID, "tid": tid, "args": {"name": tname}})
    for d in sorted(gpus):
        meta.append({"ph": "M", "name": "process_name", "pid": _GPU_PID + d, "args": {"name": f"GPU {d}"}})
        meta.append({"ph": "M", "name": "process_sort_index", "pid": _GPU_PID + d, "args": {"sort_index": 1 + d}})
    for d, st in sorted(streams):
        meta.append({"ph": "M", "name": "thread_name", "pid": _GPU_PID + d, "tid": st, "args": {"name": f"stream {st}"}})
    return meta + out + flows


def _write(s, host, host_dropped, dev, dev_dropped):
    """Writes the trace at JAX's layout; returns the host file's path."""
    from kiln import version
    stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.localtime(s.wall))
    run = os.path.join(s.log_dir, "plugins", "profile", stamp)
    k = 0
    while os.path.exists(os.path.join(run, f"{socket.gethostname()}.trace.json.gz")):  # (two traces in one second)
        k += 1
        run = os.path.join(s.log_dir, "plugins", "profile", f"{stamp}_{k}")
    os.makedirs(run, exist_ok=True)
    doc = {"displayTimeUnit": "ns",
           "otherData": {"producer": f"kiln {version.kiln_version} (JAX {version.__version__} API)",
                         "device_trace": s.device_note,
                         "clock": "ts: microseconds since the trace started (CLOCK_MONOTONIC); GPU times moved into it",
                         "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(s.wall)),
                         "host_events_dropped": host_dropped, "device_records_dropped": dev_dropped},
           "traceEvents": _events(s, host, dev)}
    data = gzip.compress(json.dumps(doc, separators=(",", ":")).encode())
    path = os.path.join(run, f"{socket.gethostname()}.trace.json.gz")
    with open(path, "wb") as f:
        f.write(data)
    if s.perfetto_trace:
        with open(os.path.join(run, "perfetto_trace.json.gz"), "wb") as f:
            f.write(data)
    if s.perfetto_link:
        print(f"kiln: trace written to {os.path.join(run, 'perfetto_trace.json.gz')}: open https://ui.perfetto.dev "
              "and load that file (kiln serves no link)")
    return path


# ---- device memory profiles (pprof) ----

def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num, value):
    """A protobuf field: an int (varint) or bytes (length-delimited)."""
    if isinstance(value, int):
        return _varint(num << 3) + _varint(value)
    return _varint(num << 3 | 2) + _varint(len(value)) + value


def _packed(num, values):
    return _field(num, b"".join(_varint(v) for v in values))


def device_memory_profile(backend=None):
    """The live arrays (kiln.live_arrays(backend): every computed or pending Array not deleted;
    pending results are computed) as a gzipped pprof profile (profile.proto, as JAX's):
    sample types (allocations, count) and (space, bytes); one sample per (device, dtype and
    shape), its stack the label under the device, with the buffers it counts and their bytes.
    A buffer two arrays share counts once. Open it with `pprof`."""
    from kiln._src import api
    strings, index = [""], {"": 0}

    def s(text):
        if text not in index:
            index[text] = len(strings)
            strings.append(text)
        return index[text]

    groups, seen = {}, set()
    for a in api.live_arrays(backend):
        buf = a._buf
        key = (buf.device, buf.ordinal, buf.ptr)
        if buf.ptr and key in seen:
            continue
        seen.add(key)
        label = f"{a.dtype.name}[{','.join(str(d) for d in a.shape)}]"
        g = groups.setdefault((str(a.device), label), [0, 0])
        g[0] += 1
        g[1] += buf.nbytes
    functions, locations, samples = [], [], []
    frame_ids = {}

    def location(name):
        if name not in frame_ids:
            fid = len(frame_ids) + 1
            frame_ids[name] = fid
            functions.append(_field(1, fid) + _field(2, s(name)) + _field(3, s(name)))
            locations.append(_field(1, fid) + _field(4, _field(1, fid)))
        return frame_ids[name]

    for (device, label), (count, nbytes) in sorted(groups.items()):
        stack = [location(f"{label} ({device})"), location(device)]  # (leaf first)
        labels = _field(3, _field(1, s("device")) + _field(2, s(device))) + \
            _field(3, _field(1, s("kind")) + _field(2, s("buffer")))
        samples.append(_packed(1, stack) + _packed(2, [count, nbytes]) + labels)
    body = _field(1, _field(1, s("allocations")) + _field(2, s("count"))) + \
        _field(1, _field(1, s("space")) + _field(2, s("bytes")))
    body += b"".join(_field(2, x) for x in samples)
    body += b"".join(_field(4, x) for x in locations)
    body += b"".join(_field(5, x) for x in functions)
    body += _field(9, time.time_ns()) + _field(14, s("space"))
    body += b"".join(_field(6, t.encode()) for t in strings)
    return gzip.compress(body)


def save_device_memory_profile(filename, backend=None):
    """Writes device_memory_profile(backend) to filename."""
    data = device_memory_profile(backend)
    with open(filename, "wb") as f:
        f.write(data)
