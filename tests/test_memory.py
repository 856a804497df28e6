"""Memory you can see (issue 12): Device.memory_stats, Array.delete/is_deleted, live_arrays,
clear_caches and empty_cache, on the default backend (the GPU where there is one) and the CPU."""
import gc
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import _kiln, lax

KEYS = ("bytes_in_use", "peak_bytes_in_use", "bytes_limit", "num_allocs", "largest_alloc_size", "pool_bytes")


def _quiet():
    """No queued work holding buffers, no garbage: the counters stand still."""
    gc.collect()
    _kiln.synchronize()
    gc.collect()


def _devices():
    return [d for d in {kiln.devices()[0], kiln.devices("cpu")[0]}]


@pytest.mark.parametrize("device", _devices(), ids=str)
def test_memory_stats_count_live_buffers(device):
    rng = np.random.default_rng(0)
    host = rng.standard_normal((1024, 1024)).astype(np.float32)  # 4 MiB
    _quiet()
    s0 = device.memory_stats()
    assert set(KEYS) <= set(s0) and all(isinstance(s0[k], int) for k in KEYS)
    assert s0["bytes_limit"] > 1 << 30 and s0["peak_bytes_in_use"] >= s0["bytes_in_use"] >= 0
    x = kiln.device_put(host, device)
    y = (x * 2.0 + 1.0).block_until_ready()
    s1 = device.memory_stats()
    # y at least (x may be the host array itself, wrapped without a copy, on the CPU)
    assert s1["bytes_in_use"] - s0["bytes_in_use"] >= host.nbytes, (s0, s1)
    assert s1["num_allocs"] >= s0["num_allocs"] + 1 and s1["largest_alloc_size"] >= host.nbytes
    assert s1["peak_bytes_in_use"] >= s1["bytes_in_use"]
    np.testing.assert_allclose(np.asarray(y), host.astype(np.float64) * 2 + 1, rtol=1e-6)
    del x, y
    _quiet()
    s2 = device.memory_stats()
    assert s2["bytes_in_use"] <= s1["bytes_in_use"] - host.nbytes + 4096, (s1, s2)
    assert s2["peak_bytes_in_use"] >= s1["bytes_in_use"]  # the peak stays
    device.reset_peak_memory_stats()
    s3 = device.memory_stats()
    assert s3["peak_bytes_in_use"] <= s3["bytes_in_use"] and s3["peak_bytes_in_use"] < s1["bytes_in_use"], (s1, s3)


@pytest.mark.parametrize("device", _devices(), ids=str)
def test_empty_cache_gives_pooled_memory_back(device):
    x = kiln.device_put(np.ones((2048, 1024), np.float32), device)  # 8 MiB
    (x + 1.0).block_until_ready()
    del x
    _quiet()
    before = device.memory_stats()
    kiln.empty_cache(device.platform)
    after = device.memory_stats()
    assert after["pool_bytes"] <= before["pool_bytes"], (before, after)
    if device.platform == "cpu":
        assert before["pool_bytes"] >= 8 << 20 and after["pool_bytes"] == 0, (before, after)
    assert after["bytes_in_use"] <= before["bytes_in_use"], (before, after)
    z = kiln.device_put(np.arange(6.0, dtype=np.float32), device) * 2.0  # memory comes again
    np.testing.assert_array_equal(np.asarray(z), np.arange(6.0) * 2)
    with pytest.raises(ValueError, match="empty_cache: unknown backend 'tpu'"):
        kiln.empty_cache("tpu")


def test_deleted_arrays_raise_jaxs_error_everywhere():
    x = jnp.asarray(np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32))
    y = x + 1.0
    assert not x.is_deleted()
    x.delete()
    assert x.is_deleted() and x.shape == (2, 3) and x.dtype == np.float32
    x.delete()  # twice is fine, as in JAX
    msg = r"^Array has been deleted with shape=float32\[2,3\]\.$"
    for use in (lambda: x + 1, lambda: jnp.sin(x), lambda: x.sum(), lambda: kiln.jit(lambda a: a * 2)(x),
                lambda: kiln.grad(lambda a: a.sum())(x), lambda: kiln.vmap(jnp.sin)(x), lambda: x[0],
                lambda: x.at[0].set(1.0), lambda: np.asarray(x), lambda: repr(x), lambda: x.block_until_ready()):
        with pytest.raises(RuntimeError, match=msg):
            use()
    s = jnp.float32(3.0) * 2
    s.delete()
    with pytest.raises(RuntimeError, match=r"^Array has been deleted with shape=float32\[\]\.$"):
        float(s)
    np.testing.assert_allclose(np.asarray(y * 2), (np.asarray(y)) * 2)  # the rest keeps working


@pytest.mark.parametrize("device", _devices(), ids=str)
def test_delete_gives_the_memory_back(device):
    x = kiln.device_put(jnp.ones((1024, 1024), np.float32) * 2.0, device)  # 4 MiB kiln owns
    kiln.block_until_ready(x)
    _quiet()
    before = device.memory_stats()["bytes_in_use"]
    x.delete()
    _quiet()
    assert device.memory_stats()["bytes_in_use"] <= before - (4 << 20)


def test_delete_of_a_pending_result_and_of_a_jit_output():
    a = jnp.ones(8) * 3.0 + 1.0  # an eager chain not yet launched
    a.delete()
    assert a.is_deleted()
    f = kiln.jit(lambda v: (v * 2, v + 1))
    p, q = f(jnp.arange(4.0))
    p.delete()
    np.testing.assert_array_equal(np.asarray(q), np.arange(4.0) + 1)
    with pytest.raises(RuntimeError, match="deleted"):
        f(p)
    np.testing.assert_array_equal(np.asarray(f(q)[0]), (np.arange(4.0) + 1) * 2)


def test_live_arrays_lists_what_is_alive():
    x = jnp.arange(5.0) * 7.0
    y = jnp.ones((3, 3))
    live = kiln.live_arrays()
    assert any(a is x for a in live) and any(a is y for a in live)
    assert all(type(a) is kiln._src.core.Array for a in live)  # the concrete class (kiln.Array is abstract)
    y.delete()
    assert not any(a is y for a in kiln.live_arrays())
    platform = kiln.devices()[0].platform
    assert any(a is x for a in kiln.live_arrays(platform))
    other = "cpu" if platform == "gpu" else "gpu"
    assert not any(a is x for a in kiln.live_arrays(other))
    with pytest.raises(ValueError, match="live_arrays: unknown platform"):
        kiln.live_arrays("tpu")


def test_clear_caches_drops_compiled_programs():
    f = kiln.jit(lambda v: jnp.tanh(v) * 2.0)
    x = jnp.asarray(np.linspace(-2, 2, 7).astype(np.float32))
    r1 = np.asarray(f(x))
    g = kiln.grad(lambda v: jnp.sum(jnp.sin(v)))
    np.asarray(g(x))
    assert f._cache_size() == 1
    kiln.clear_caches()
    assert f._cache_size() == 0
    from kiln._src import ad
    assert len(ad._compiled) == 0
    np.testing.assert_allclose(np.asarray(f(x)), r1)  # compiled again, same numbers
    assert f._cache_size() == 1
    np.testing.assert_allclose(np.asarray(g(x)), np.cos(np.linspace(-2, 2, 7)), rtol=1e-6)


def _sgd(params, grads, lr=0.1):
    return kiln.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)


@pytest.mark.parametrize("device", _devices(), ids=str)
def test_donated_parameters_are_updated_in_their_own_memory(device):
    # params = step(params, grads) with donation never holds two copies of the parameters: each
    # output is written into its donated input's buffer, the donated arrays are deleted
    rng = np.random.default_rng(3)
    w = rng.standard_normal((1024, 2048)).astype(np.float32)  # 8 MiB
    b = rng.standard_normal(2048).astype(np.float32)
    g = {"w": rng.standard_normal(w.shape).astype(np.float32), "b": rng.standard_normal(b.shape).astype(np.float32)}
    params = {"w": kiln.device_put(w, device) * 1.0, "b": kiln.device_put(b, device) * 1.0}
    grads = {k: kiln.device_put(v, device) for k, v in g.items()}
    step = kiln.jit(_sgd, donate_argnums=0)
    kiln.block_until_ready(params)
    _quiet()
    s0 = device.memory_stats()
    for it in range(3):
        old = params
        params = step(params, grads)
        assert old["w"].is_deleted() and old["b"].is_deleted()
        with pytest.raises(RuntimeError, match=r"Array has been deleted with shape=float32\[1024,2048\]"):
            old["w"] + 1.0
        del old
    kiln.block_until_ready(params)
    _quiet()
    s1 = device.memory_stats()
    assert s1["bytes_in_use"] - s0["bytes_in_use"] < 1 << 20, (s0, s1)
    want_w = w.astype(np.float64) - 0.3 * g["w"]
    np.testing.assert_allclose(np.asarray(params["w"]), want_w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(params["b"]), b - 0.3 * g["b"].astype(np.float64), rtol=1e-5, atol=1e-5)
    assert not any(v.is_deleted() for v in grads.values())


def test_donation_that_cannot_be_used_warns_once_and_keeps_the_array():
    rng = np.random.default_rng(4)
    f = kiln.jit(lambda p: jnp.sum(p * 2.0), donate_argnums=0)  # no output of p's shape
    x = jnp.asarray(rng.standard_normal(5).astype(np.float32))
    with pytest.warns(UserWarning, match=r"Some donated buffers were not usable: float32\[5\]"):
        r = f(x)
    np.testing.assert_allclose(float(r), 2 * np.asarray(x, np.float64).sum(), rtol=1e-5)
    assert not x.is_deleted()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(x)  # once per signature
    t = kiln.jit(lambda p: p.T * 2.0, donate_argnums=0)  # a transposed read: not in place
    m = jnp.asarray(rng.standard_normal((3, 4)).astype(np.float32))
    with pytest.warns(UserWarning, match="not usable"):
        np.testing.assert_allclose(np.asarray(t(m)), np.asarray(m).T * 2.0)
    assert not m.is_deleted()


def test_donation_keeps_other_holders_and_argnames_and_numpy_inputs():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((4, 6)).astype(np.float32)
    x = jnp.asarray(a) + 0.0
    view = x.reshape(24)  # may share x's memory: then x's buffer is not written
    f = kiln.jit(lambda p, q: (p * 2.0 + q, q), donate_argnames="p")
    y, _ = f(x, jnp.ones((4, 6)))
    assert x.is_deleted()
    np.testing.assert_allclose(np.asarray(y), a * 2.0 + 1.0, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(view), a.reshape(24))  # untouched
    z, _ = f(p=a, q=np.ones((4, 6), np.float32))  # a NumPy argument: donated as its own copy
    np.testing.assert_allclose(np.asarray(z), a * 2.0 + 1.0, rtol=1e-6)
    np.testing.assert_allclose(a, rng.standard_normal((4, 6)).astype(np.float32) * 0 + a)  # NumPy's array unchanged
    with pytest.raises(ValueError, match="both static and donated"):
        kiln.jit(lambda p: p, static_argnums=0, donate_argnums=0)
    g = kiln.jit(lambda p, q: p + q, donate_argnums=(0, 1))  # one output: one of the two is reused
    u, v = jnp.ones(8) * 2.0, jnp.ones(8) * 3.0
    with pytest.warns(UserWarning, match=r"not usable: float32\[8\]"):
        np.testing.assert_array_equal(np.asarray(g(u, v)), np.full(8, 5.0))
    assert u.is_deleted() and not v.is_deleted()


PEAK_SCRIPTS = {"params": """
import numpy as np, kiln, kiln.numpy as jnp
d = kiln.devices(BACKEND)[0]
w = kiln.device_put(np.ones((4096, 4096), np.float32), d) * 1.0  # 64 MiB of parameters
g = kiln.device_put(np.full((4096, 4096), 0.5, np.float32), d) * 1.0
kiln.block_until_ready((w, g))
d.reset_peak_memory_stats()
before = d.memory_stats()
step = kiln.jit(lambda p, q: p - 0.1 * q, donate_argnums=0)
for _ in range(5):
    w = step(w, g)
kiln.block_until_ready(w)
after = d.memory_stats()
assert abs(float(w[7, 9]) - 0.75) < 1e-6
print(after["peak_bytes_in_use"] - before["bytes_in_use"], before["peak_bytes_in_use"] - before["bytes_in_use"])
""", "updates": """
import numpy as np, kiln, kiln.numpy as jnp
d = kiln.devices(BACKEND)[0]
z = kiln.device_put(np.zeros(1 << 24, np.float32), d) + 0.0  # 64 MiB, updated in place 10,000 times
kiln.block_until_ready(z)
d.reset_peak_memory_stats()
before = d.memory_stats()
put = kiln.jit(lambda z, i: z.at[i].set(2.0 * i), donate_argnums=0)
for i in range(10000):
    z = put(z, i)
kiln.block_until_ready(z)
after = d.memory_stats()
host = np.asarray(z)
assert (host[:10000] == 2.0 * np.arange(10000, dtype=np.float32)).all() and not host[10000:].any()
print(after["peak_bytes_in_use"] - before["bytes_in_use"], before["peak_bytes_in_use"] - before["bytes_in_use"])
"""}


@pytest.mark.parametrize("backend", sorted({kiln.devices()[0].platform, "cpu"}))
@pytest.mark.parametrize("what", sorted(PEAK_SCRIPTS))
def test_donated_updates_never_hold_two_copies(backend, what):
    # fresh process: the peak counts from its start; a 64 MiB parameter updated 5 times with
    # donation, and a 64 MiB array updated by 10,000 donated .at[i].set calls, each peak at most
    # 1/10 above what the inputs take (no update copies its operand)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", PEAK_SCRIPTS[what].replace("BACKEND", repr(backend))], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    grew, before = (int(v) for v in out.stdout.split()[-2:])
    assert before == 0 and grew <= (64 << 20) // 10, out.stdout


def test_cpu_launches_wait_for_a_full_queue():
    # 500 updates of an 8 MiB array without donation, called faster than the CPU copies: the
    # queued launches' outputs stay under KILN_CPU_QUEUE_MB (64 here), not 500 copies
    script = PEAK_SCRIPTS["updates"].replace(", donate_argnums=0", "").replace("1 << 24", "1 << 21").replace(
        "range(10000)", "range(500)").replace("host[:10000]", "host[:500]").replace("np.arange(10000", "np.arange(500").replace(
        "host[10000:]", "host[500:]")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), KILN_CPU_QUEUE_MB="64")
    out = subprocess.run([sys.executable, "-c", script.replace("BACKEND", "'cpu'")], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    grew, before = (int(v) for v in out.stdout.split()[-2:])
    assert before == 0 and grew <= (64 << 20) + 3 * (8 << 20), out.stdout


def test_checkpoint_lowers_the_peak_of_a_training_step():
    # examples/transformer.py's step with jax.checkpoint on every layer: the same loss and
    # parameters, at a peak at least a third lower (activations recomputed, not kept)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
    try:
        import transformer
    finally:
        sys.path.pop(0)
    params, toks = transformer.init_params(6), transformer.tokens()
    d = kiln.devices()[0]
    peaks, results = [], []
    for remat in (False, True):
        step = transformer.make_step(kiln, jnp, remat=remat)
        p, t = kiln.device_put(params), kiln.device_put(toks)
        _quiet()  # the first call: what the program keeps (a CUDA graph's arena) counts too
        d.reset_peak_memory_stats()
        before = d.memory_stats()["bytes_in_use"]
        out = step(p, t)
        kiln.block_until_ready(out)
        peaks.append(d.memory_stats()["peak_bytes_in_use"] - before)
        results.append(out)
    np.testing.assert_allclose(float(results[1][1]), float(results[0][1]), rtol=1e-5)
    for a, b in zip(kiln.tree_util.tree_leaves(results[0][0]), kiln.tree_util.tree_leaves(results[1][0])):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=2e-4, atol=2e-5)
    assert peaks[1] <= peaks[0] * 2 / 3, peaks


def test_the_memory_plan_is_in_kiln_dump(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_DUMP", str(tmp_path))
    f = kiln.jit(lambda p, g: jnp.tanh(p @ g) * 2.0 - p, donate_argnums=0)
    rng = np.random.default_rng(6)
    a, b = (rng.standard_normal((32, 32)).astype(np.float32) for _ in range(2))
    r = f(jnp.asarray(a) + 0.0, jnp.asarray(b))
    monkeypatch.delenv("KILN_DUMP")
    np.testing.assert_allclose(np.asarray(r), np.tanh(a.astype(np.float64) @ b) * 2 - a, rtol=1e-4, atol=1e-5)
    plans = [p.read_text() for p in sorted(tmp_path.glob("*-memory-plan.txt"))]
    plan = next(p for p in plans if "may take donated input 0" in p)  # the jitted program's
    assert "temp" in plan and "freed after step" in plan and "alive at most at once" in plan, plan


@pytest.mark.parametrize("what", ["elementwise", "update"])
def test_a_dying_temporary_gives_its_buffer_to_the_next_value(what):
    # inside a program, a result computed elementwise from a temporary at its last use, or an
    # update of it (x.at[i].set(v)), is written into the temporary's buffer: the 1 MiB product
    # and the 1 MiB result never exist at once
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((256, 1024)).astype(np.float32), rng.standard_normal((1024, 1024)).astype(np.float32) / 32
    if what == "elementwise":
        f = kiln.jit(lambda x, w: jnp.tanh(x @ w) * 2.0 - 1.0)
        ref = np.tanh(x.astype(np.float64) @ w) * 2 - 1
    else:
        f = kiln.jit(lambda x, w, i: (x @ w).at[i].set(0.5).at[:, 7].add(1.0) * 3.0)
        ref = x.astype(np.float64) @ w
        ref[5] = 0.5
        ref[:, 7] += 1
        ref *= 3
    args = kiln.device_put((x, w) if what == "elementwise" else (x, w, 5))
    kiln.block_until_ready(f(*args))  # compiled
    d = kiln.devices()[0]
    _quiet()
    d.reset_peak_memory_stats()
    before = d.memory_stats()["bytes_in_use"]
    r = f(*args)
    kiln.block_until_ready(r)
    grew = d.memory_stats()["peak_bytes_in_use"] - before
    np.testing.assert_allclose(np.asarray(r), ref, rtol=2e-4, atol=2e-4)
    assert grew <= (1 << 20) + (256 << 10), grew  # one 1 MiB buffer (two without the reuse)


def _fill_fori(i, z):
    return z.at[i].set(i * 2.0)


@pytest.mark.parametrize("loop", ["fori", "while", "scan"])
@pytest.mark.parametrize("start", ["temporary", "donated"])
def test_a_loop_updating_a_carry_in_place_starts_in_its_initial_buffer(loop, start):
    # the loop's result takes the initial carry's buffer when the program computed it and reads
    # it no more, or when it is a donated argument: one buffer, never a copy of it
    n = 1 << 20  # 4 MiB
    run = {"fori": lambda z: lax.fori_loop(0, 100, _fill_fori, z),
           "while": lambda z: lax.while_loop(lambda c: c[0] < 100, lambda c: (c[0] + 1, c[1].at[c[0]].set(c[0] * 2.0)),
                                             (z[0].astype(jnp.int32) * 0, z))[1],  # a traced counter: a loop
           "scan": lambda z: lax.scan(lambda c, i: (c.at[i].set(i * 2.0), None), z, jnp.arange(100.0).astype(jnp.int32))[0]}[loop]
    if start == "temporary":
        f, make = kiln.jit(lambda a: run(jnp.zeros(n, jnp.float32) + a)), lambda: 0.5
    else:
        f, make = kiln.jit(run, donate_argnums=0), lambda: jnp.zeros(n, jnp.float32) + 0.5
    kiln.block_until_ready(f(make()))
    d = kiln.devices()[0]
    arg = make()
    kiln.block_until_ready(arg)
    _quiet()
    d.reset_peak_memory_stats()
    before = d.memory_stats()["bytes_in_use"]
    r = f(arg)
    kiln.block_until_ready(r)
    grew = d.memory_stats()["peak_bytes_in_use"] - before
    want = np.full(n, 0.5, np.float32)
    want[:100] = np.arange(100) * 2.0
    np.testing.assert_array_equal(np.asarray(r), want)
    assert grew <= (4 << 20 if start == "temporary" else 0) + (64 << 10), grew


@pytest.mark.gpu
@pytest.mark.skipif(kiln.default_backend() != "gpu", reason="needs an NVIDIA GPU (a CUDA graph's arena)")
def test_the_gpu_arena_is_in_kiln_dump(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_DUMP", str(tmp_path))
    def layers(x, w):  # 80 launches: a program worth a CUDA graph
        for _ in range(40):
            x = jnp.tanh(x @ w)
        return x

    f = kiln.jit(layers)
    rng = np.random.default_rng(12)
    x, w = (rng.standard_normal((64, 64)).astype(np.float32) / 8 for _ in range(2))
    for _ in range(3):  # captured within the first calls
        r = f(x, w)
    kiln.block_until_ready(r)
    monkeypatch.delenv("KILN_DUMP")
    want = x.astype(np.float64)
    for _ in range(40):
        want = np.tanh(want @ w)
    np.testing.assert_allclose(np.asarray(r), want, rtol=1e-3, atol=1e-4)
    arenas = [p.read_text() for p in tmp_path.glob("*-gpu-arena.txt")]
    assert arenas and "graph arena:" in arenas[0] and "offset" in arenas[0], arenas


def test_a_donated_program_long_enough_for_a_cuda_graph():
    # 80 launches: on the GPU a CUDA graph, whose outputs are copied out of its arena, also into
    # a donated input's buffer (they were not: the parameters came back unchanged)
    def layers(p, x):
        for _ in range(40):
            x = jnp.tanh(x @ p)
        return p - 0.1 * x.sum() * p, x

    f = kiln.jit(layers, donate_argnums=0)
    rng = np.random.default_rng(13)
    p0, x = (rng.standard_normal((32, 32)).astype(np.float32) / 8 for _ in range(2))
    want_x = x.astype(np.float64)
    for _ in range(40):
        want_x = np.tanh(want_x @ p0)
    for _ in range(3):
        p = jnp.asarray(p0) + 0.0
        got_p, got_x = f(p, x)
        assert p.is_deleted()
        np.testing.assert_allclose(np.asarray(got_x), want_x, rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(np.asarray(got_p), p0 - 0.1 * want_x.sum() * p0, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("fn", ["softmax", "layernorm"])
def test_row_kernels_never_write_over_a_temporary_they_read(fn):
    # a row kernel writes its output row before its main loop reads the row (softmax stashes
    # exp(x - max) there): it must not be given the buffer of a temporary it reads
    rng = np.random.default_rng(14)
    a, b, w = (rng.standard_normal(s).astype(np.float32) for s in ((8, 300), (8, 512), (512, 300)))
    y = b.astype(np.float64) @ w
    a64 = a.astype(np.float64)
    if fn == "softmax":
        f = kiln.jit(lambda a, b, w: kiln.nn.softmax(a, axis=-1) * (b @ w))
        e = np.exp(a64 - a64.max(-1, keepdims=True))
        want = e / e.sum(-1, keepdims=True) * y
    else:
        f = kiln.jit(lambda a, b, w: (a - a.mean(-1, keepdims=True)) / jnp.sqrt(a.var(-1, keepdims=True) + 1e-5) * (b @ w))
        want = (a64 - a64.mean(-1, keepdims=True)) / np.sqrt(a64.var(-1, keepdims=True) + 1e-5) * y
    np.testing.assert_allclose(np.asarray(f(a, b, w)), want, rtol=2e-4, atol=2e-3)


def test_donation_of_handed_back_inputs_copies_and_python_scalars():
    """Issue 33 (equinox's donation tests): a donated input the program hands back unchanged is
    usable (its output is its memory, as JAX aliases them) and is deleted; jnp.copy and x.copy()
    are arrays of their own (deleting or donating one leaves the other); jnp.array of a Python
    scalar never hands out the constant eager operations share; a donated buffer's address is
    the output's (unsafe_buffer_pointer)."""
    rng = np.random.default_rng()
    w = rng.standard_normal((4, 3)).astype(np.float32)
    v = rng.standard_normal(1000).astype(np.float32)
    f = kiln.jit(lambda p: (p["w"], p["v"].at[0].add(1.0)), donate_argnums=0)
    p = {"w": jnp.asarray(w), "v": jnp.asarray(v)}
    addr = p["v"].unsafe_buffer_pointer()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every donation is usable: no warning
        w2, v2 = f(p)
    assert p["w"].is_deleted() and p["v"].is_deleted()
    np.testing.assert_array_equal(np.asarray(w2), w)
    np.testing.assert_array_equal(np.asarray(v2)[1:], v[1:])
    assert v2.unsafe_buffer_pointer() == addr

    a = jnp.asarray(v)
    for b in (jnp.copy(a), a.copy()):
        b.delete()
        np.testing.assert_array_equal(np.asarray(a), v)
    c = jnp.copy(a)
    kiln.jit(lambda x: x * 2, donate_argnums=0)(c)
    assert c.is_deleted() and not a.is_deleted()
    np.testing.assert_array_equal(np.asarray(a), v)

    k = int(rng.integers(10, 1000))
    s = jnp.array(k)
    s.delete()
    np.testing.assert_array_equal(np.asarray(jnp.ones(2, jnp.int32) + k), np.full(2, 1 + k))
    assert int(jnp.array(k)) == k
    d = jnp.array(float(k))
    out = kiln.jit(lambda x: x + 1, donate_argnums=0)(d)
    assert d.is_deleted() and float(out) == k + 1 and float(jnp.array(float(k))) == k


def test_donating_a_cached_scalar_keeps_it():
    """jnp.zeros(()) hands every caller one cached 0-d array: a call donating it must not delete
    it for the next caller (bench/models.py's optimizer step count met this)."""
    step = kiln.jit(lambda x, n: (x * 2, n + 1), donate_argnums=(0, 1))
    x = jnp.asarray(np.arange(4.0, dtype=np.float32))
    n = jnp.zeros((), jnp.float32)
    x, n1 = step(x, n)
    again = jnp.zeros((), jnp.float32)
    assert float(again + 1) == 1.0 and float(n1) == 1.0
    np.testing.assert_array_equal(np.asarray(x), np.arange(4.0) * 2)
