"""kiln.profiler: traces at JAX's layout that Perfetto opens (gzipped Chrome trace-event JSON) with
the jit trace, compile and launch events of the functions run, annotations and named scopes nested
in time around them, the errors of starting and stopping (as JAX's), and device_memory_profile's
pprof protobuf (read here by a small protobuf reader) counting the live arrays. The GPU test
(marked `gpu`) checks CUPTI's kernel rows."""
import gzip
import json
import os
import re
import socket
import time

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import _kiln, profiler

HAS_GPU = kiln.default_backend() == "gpu"


def _load(log_dir, name=None):
    """The one trace under log_dir (JAX's layout), parsed."""
    runs = os.listdir(os.path.join(log_dir, "plugins", "profile"))
    assert len(runs) == 1, runs
    assert re.fullmatch(r"\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}", runs[0]), runs[0]
    path = os.path.join(log_dir, "plugins", "profile", runs[0], name or f"{socket.gethostname()}.trace.json.gz")
    with open(path, "rb") as f:
        data = f.read()
    assert data[:2] == b"\x1f\x8b"  # gzip
    return json.loads(gzip.decompress(data))


def _slices(doc, cat=None, name=None):
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and (cat is None or e["cat"] == cat)
            and (name is None or e["name"] == name)]


def _inside(inner, outer):
    """inner's span lies in outer's, on the same thread (the trace's microseconds are rounded to ns)."""
    return (inner["pid"], inner["tid"]) == (outer["pid"], outer["tid"]) and \
        outer["ts"] - 1e-3 <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 2e-3


def test_trace_of_a_jitted_function(tmp_path):
    @kiln.jit
    def mlp_step(w, x):
        return jnp.tanh(x @ w).sum(axis=1) + 1.0

    w, x = jnp.ones((32, 16)), jnp.ones((8, 32))
    t_start = time.perf_counter()
    with profiler.trace(str(tmp_path)):
        with profiler.TraceAnnotation("outer", phase="train"):
            with kiln.named_scope("body"):
                for i in range(3):
                    with profiler.StepTraceAnnotation("step", step_num=i):
                        out = mlp_step(w, x)
        out.block_until_ready()
    wall_us = (time.perf_counter() - t_start) * 1e6
    np.testing.assert_allclose(np.asarray(out), np.tanh(np.ones((8, 32)) @ np.ones((32, 16))).sum(1) + 1, rtol=1e-5)

    doc = _load(str(tmp_path))
    assert doc["otherData"]["host_events_dropped"] == 0
    for e in _slices(doc):  # complete events, in microseconds from the trace's start
        assert {"ts", "dur", "pid", "tid", "name", "cat", "args"} <= set(e), e
        assert 0 <= e["ts"] <= wall_us and 0 <= e["dur"] <= wall_us, e
    traces = _slices(doc, "trace", "trace jit(mlp_step)")
    compiles = _slices(doc, "compile", "compile jit(mlp_step)")
    launches = _slices(doc, "launch", "launch jit(mlp_step)")
    assert len(traces) == 1 and len(compiles) == 1 and len(launches) == 3  # traced and compiled once, run three times
    assert compiles[0]["args"]["steps"] >= 1 and compiles[0]["args"]["equations"] >= 3
    assert all(e["args"]["steps"] == compiles[0]["args"]["steps"] for e in launches)
    assert traces[0]["ts"] + traces[0]["dur"] <= compiles[0]["ts"] + 1e-3 <= launches[0]["ts"] + 1e-3
    assert sorted(e["ts"] for e in launches) == [e["ts"] for e in launches]

    outer, = _slices(doc, "annotation", "outer")
    scope, = _slices(doc, "named_scope", "body")
    steps = sorted(_slices(doc, "step", "step"), key=lambda e: e["ts"])
    assert outer["args"] == {"phase": "train"}
    assert [e["args"]["step_num"] for e in steps] == [0, 1, 2]
    assert _inside(scope, outer)
    for s, launch in zip(steps, launches):
        assert _inside(s, scope) and _inside(launch, s)
    assert _inside(traces[0], steps[0]) and _inside(compiles[0], steps[0])

    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert "Python main thread" in names
    if HAS_GPU:  # (the GPU's rows: test_gpu_trace_has_kernel_rows)
        assert {e["args"]["device"] for e in launches} == {"cuda"}
        return
    assert doc["otherData"]["device_trace"].startswith("no device rows")
    # the CPU ran each launch (on the executor thread, or on the caller for small work), tagged with it
    runs = _slices(doc, "execute", "execute jit(mlp_step)")
    assert sorted(e["args"]["launch_id"] for e in runs) == sorted(e["args"]["launch_id"] for e in launches)
    for run in runs:
        launch, = [e for e in launches if e["args"]["launch_id"] == run["args"]["launch_id"]]
        assert run["ts"] >= launch["ts"] - 1e-3
        kernels = [e for e in _slices(doc, "cpu_step") if e["args"]["launch_id"] == run["args"]["launch_id"]]
        assert len(kernels) == launch["args"]["steps"] and all(_inside(k, run) for k in kernels)


def test_perfetto_trace_file_and_functional_form(tmp_path):
    f = kiln.jit(lambda a: a * 2)
    profiler.start_trace(str(tmp_path), create_perfetto_trace=True)
    f(jnp.arange(4.0)).block_until_ready()
    profiler.stop_trace()
    host = _load(str(tmp_path))
    perfetto = _load(str(tmp_path), "perfetto_trace.json.gz")
    assert host == perfetto
    assert len(_slices(host, "launch", "launch jit(<lambda>)")) == 1


def test_start_stop_errors_and_the_library_keeps_working(tmp_path):
    with pytest.raises(RuntimeError, match=r"No profile started.*start_trace"):
        profiler.stop_trace()
    profiler.start_trace(str(tmp_path / "a"))
    try:
        with pytest.raises(RuntimeError, match="already been started.*stop_trace"):
            profiler.start_trace(str(tmp_path / "b"))
        with pytest.raises(RuntimeError, match="already been started"):
            with profiler.trace(str(tmp_path / "c")):
                pass
    finally:
        profiler.stop_trace()
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()
    with pytest.raises(RuntimeError, match="No profile started"):
        profiler.stop_trace()
    # an exception inside the block still ends the trace, which is written
    with pytest.raises(ZeroDivisionError):
        with profiler.trace(str(tmp_path / "d")):
            (jnp.ones(3) + 1).block_until_ready()
            1 / 0
    assert _slices(_load(str(tmp_path / "d")), "launch")
    assert float(kiln.jit(lambda a: a.sum())(jnp.ones(5))) == 5.0
    with profiler.trace(str(tmp_path / "e")):
        pass
    assert _load(str(tmp_path / "e"))["traceEvents"]


def test_nothing_is_recorded_while_off():
    assert _kiln.trace_begin() == 0
    _kiln.trace_take()
    g = kiln.jit(lambda a: a - 1)
    with profiler.TraceAnnotation("unseen"), kiln.named_scope("unseen"):
        g(jnp.ones(3)).block_until_ready()
    events, dropped = _kiln.trace_take()
    assert events == [] and dropped == 0


def test_annotate_function(tmp_path):
    @profiler.annotate_function
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)

    @profiler.annotate_function(name="named", tag=7)
    def g():
        return jnp.ones(2) * 3

    with profiler.trace(str(tmp_path)):
        assert fact(3) == 6
        g().block_until_ready()
    doc = _load(str(tmp_path))
    calls = sorted(_slices(doc, "annotation", "test_annotate_function.<locals>.fact"), key=lambda e: e["ts"])
    assert len(calls) == 3 and _inside(calls[1], calls[0]) and _inside(calls[2], calls[1])  # recursion nests
    named, = _slices(doc, "annotation", "named")
    assert named["args"] == {"tag": 7}


# ---- device_memory_profile: a tiny protobuf reader ----

def _varint(b, i):
    n = shift = 0
    while True:
        c = b[i]
        i += 1
        n |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return n, i


def _message(b):
    """field number -> list of values (ints for varints, bytes for length-delimited fields)."""
    out, i = {}, 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(b, i)
        elif wire == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise AssertionError(f"unexpected wire type {wire}")
        out.setdefault(num, []).append(v)
    return out


def _packed(b):
    vals, i = [], 0
    while i < len(b):
        v, i = _varint(b, i)
        vals.append(v)
    return vals


def _profile(data):
    """(sample types, {(device, label): (count, bytes)}) of a gzipped pprof profile."""
    p = _message(gzip.decompress(data))
    strings = [s.decode() for s in p[6]]
    assert strings[0] == ""
    types = [(strings[_message(t)[1][0]], strings[_message(t)[2][0]]) for t in p[1]]
    names = {}
    for fn in p.get(5, []):
        m = _message(fn)
        names[m[1][0]] = strings[m[2][0]]
    loc_fn = {}
    for loc in p.get(4, []):
        m = _message(loc)
        loc_fn[m[1][0]] = _message(m[4][0])[1][0]
    samples = {}
    for s in p.get(2, []):
        m = _message(s)
        stack = [names[loc_fn[i]] for i in _packed(m[1][0])]
        labels = {strings[_message(lb)[1][0]]: strings[_message(lb)[2][0]] for lb in m.get(3, [])}
        count, nbytes = _packed(m[2][0])
        assert stack[-1] == labels["device"] and stack[0].endswith(f"({labels['device']})")
        samples[(labels["device"], stack[0].rsplit(" (", 1)[0])] = (count, nbytes)
    return types, samples


def test_device_memory_profile_counts_the_live_arrays(tmp_path):
    keep = [jnp.full((123, 7), float(i)) for i in range(3)] + [jnp.zeros((5,), jnp.int32)]
    alias = keep[0]  # (one buffer, counted once)
    types, samples = _profile(profiler.device_memory_profile())
    assert types == [("allocations", "count"), ("space", "bytes")]
    dev = str(keep[0].device)
    assert samples[(dev, "float32[123,7]")] == (3, 3 * 123 * 7 * 4)
    assert samples[(dev, "int32[5]")][1] >= 5 * 4
    # the whole profile is the live arrays' memory, each buffer once
    bufs = {(a._buf.device, a._buf.ordinal, a._buf.ptr): a._buf.nbytes for a in kiln.live_arrays()}  # (no name left holding one)
    assert sum(b for _, b in samples.values()) == sum(bufs.values())
    assert sum(c for c, _ in samples.values()) == len(bufs)
    path = tmp_path / "memory.prof"
    profiler.save_device_memory_profile(str(path))
    _, saved = _profile(path.read_bytes())
    assert saved[(dev, "float32[123,7]")] == (3, 3 * 123 * 7 * 4)
    del keep, alias
    _, after = _profile(profiler.device_memory_profile("cpu"))
    assert (dev, "float32[123,7]") not in after


# ---- the GPU (CUPTI) ----

@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU")
def test_gpu_trace_has_kernel_rows(tmp_path):
    """CUPTI's rows: kiln's kernels and cuBLAS's, each with a device duration, on a GPU process
    row, linked to the launch that queued it; the copy of device_put; cuBLAS's host call."""
    @kiln.jit
    def layer(w, x):
        return jnp.tanh(x @ w) * 2.0 + 1.0

    w_host = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
    x = jnp.ones((256, 512))
    layer(kiln.device_put(w_host), x).block_until_ready()  # compiled outside the trace
    with profiler.trace(str(tmp_path)):
        w = kiln.device_put(w_host)
        for _ in range(3):
            out = layer(w, x)
        out.block_until_ready()
    doc = _load(str(tmp_path))
    assert doc["otherData"]["device_trace"].startswith("device rows from CUPTI"), doc["otherData"]
    kernels = _slices(doc, "kernel")
    assert kernels, "no kernel rows"
    gpu_pids = {e["pid"] for e in kernels}
    host_pids = {e["pid"] for e in _slices(doc, "launch")}
    assert not gpu_pids & host_pids
    assert all(e["dur"] > 0 and e["ts"] >= 0 for e in kernels)
    launches = {e["args"]["launch_id"]: e for e in _slices(doc, "launch", "launch jit(layer)")}
    assert len(launches) == 3
    tagged = [e for e in kernels if e["args"].get("launch_id") in launches]
    assert tagged, "no kernel row is linked to a launch of jit(layer)"
    for e in tagged:  # the GPU ran it after the host queued it (one clock on both sides)
        assert e["ts"] >= launches[e["args"]["launch_id"]]["ts"] - 50
    assert {e["args"]["launch_id"] for e in tagged} == set(launches)
    # every kernel here was queued by a launch of jit(layer): kiln's through the driver API, cuBLAS's
    # through the runtime API (CUPTI tags both)
    assert len(tagged) == len(kernels), sorted({e["name"] for e in kernels if e not in tagged})
    assert len({e["name"] for e in kernels}) >= 2  # kiln's elementwise kernel and cuBLAS's own
    copies = _slices(doc, "memcpy")
    assert any(e["name"] == "memcpy HtoD" and e["args"]["bytes"] >= w_host.nbytes and e["dur"] > 0 for e in copies)
    assert [e for e in _slices(doc, "library") if e["name"].startswith("cublas")]
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert any(n.startswith("GPU ") for n in names)
    flows = [e for e in doc["traceEvents"] if e["ph"] in ("s", "f")]
    assert flows and len(flows) % 2 == 0
