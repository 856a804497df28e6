"""The GPU backend: device discovery, transfers, asynchronous launches, kernels against NumPy,
memory that does not leak, and the CPU fallback. Tests marked `gpu` need an NVIDIA GPU and are
skipped elsewhere; the PTX tests run everywhere (code generation needs no GPU)."""
import gc
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import _kiln
from kiln._src import api

HAS_GPU = kiln.default_backend() == "gpu"
_needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU")


def gpu(test):
    """Marks a test `gpu` (select them with `pytest -m gpu`) and skips it without a GPU."""
    return pytest.mark.gpu(_needs_gpu(test))


def _ptx(f, *args, cc=90):
    return kiln.make_jaxpr(f)(*args)._traced.builder.gpu_ptx(cc)


# ---- code generation (no GPU needed) ----

PTX_CASES = {
    "elementwise": (lambda x: 1.05 * jnp.where(x > 0, x, 1.67 * jnp.exp(x) - 1.67), [(1 << 12,)], np.float32),
    "full_sum": (lambda x: jnp.sum(x * x), [(1 << 14,)], np.float32),
    "row_softmax": (lambda a: kiln.nn.softmax(a, axis=-1), [(8, 300)], np.float32),
    "column_sum": (lambda a: a.sum(0), [(16, 40)], np.float32),
    "row_max": (lambda a: a.max(1), [(16, 40)], np.float32),
    "bool_any": (lambda a: (a > 0).any(), [(16, 40)], np.float32),
    "half_sum": (lambda a: (a * 2).sum(-1), [(16, 40)], np.float16),
    "math": (lambda a: jnp.tanh(a) + jnp.log1p(jnp.abs(a)) + jnp.sin(a) + jax_erf(a), [(4, 50)], np.float32),
    "int_divmod": (lambda a: (a // 3 % 5).sum(), [(16, 10)], np.int32),
    "float64": (lambda a: jnp.exp(a).sum(0), [(16, 10)], np.float64),
    "gather": (lambda a: a[:, np.array([3, 0, 3])] * 2, [(16, 10)], np.float32),
    "dynamic_slice": (lambda a: kiln.lax.dynamic_slice(a, (jnp.int32(a.shape[0] // 2), jnp.int32(2)), (4, 5)), [(16, 10)], np.float32),
    "dynamic_update_slice": (lambda a: a.at[2:5, 1].set(7.0), [(16, 10)], np.float32),
    "scatter_set": (lambda a: a.at[np.array([1, 1, 4])].set(a[0]), [(16, 10)], np.int32),
    "scatter_add": (lambda a: a.at[:, np.array([0, 2, 0])].add(1.0), [(16, 10)], np.float64),
    "scatter_add_atomic": (lambda a: a.at[np.arange(5000) % 7].add(jnp.ones((5000, 10), a.dtype)), [(16, 10)],
                           np.float32),
    "argmax": (lambda a: jnp.argmax(a, axis=1) + jnp.argmin(a, axis=0), [(16, 16)], np.float32),
    "cumsum_reverse": (lambda a: kiln.lax.cumsum(a, axis=0, reverse=True), [(16, 10)], np.int32),
    "cummax": (lambda a: kiln.lax.cummax(a, axis=1), [(16, 10)], np.float64),
}


def jax_erf(a):
    return kiln.scipy.special.erf(a)


@pytest.mark.parametrize("name", sorted(PTX_CASES))
def test_every_kernel_kind_lowers_to_self_contained_ptx(name, x64):
    f, shapes, dt = PTX_CASES[name]
    args = [np.ones(s, dt) for s in shapes]
    ptx = _ptx(f, *args)
    assert ".entry" in ptx and ".target sm_90" in ptx
    if name.startswith("scatter"):
        assert ptx.count(".entry") >= 2  # copy, then the updates
    if name == "scatter_add_atomic":
        assert "atom.global.add.f32" in ptx or "red.global.add.f32" in ptx
    assert ".extern" not in ptx  # math is inline polynomials: no libdevice calls to resolve


def test_elementwise_kernel_reads_through_the_noncoherent_cache():
    ptx = _ptx(lambda x: x * 2 + 1, np.ones(1024, np.float32))
    assert "ld.global.nc.f32" in ptx


def test_kernel_planning_is_linear_in_a_deep_shared_dag():
    """Threefry's rounds reuse every value twice: a fused kernel is a DAG whose paths number 2^rounds.
    The GPU planner's walks must visit each value once (a categorical draw under jit hung in the
    search for a transposed read). Run in a child so a regression fails rather than hangs."""
    code = (
        "import numpy as np, kiln, kiln.numpy as jnp\n"
        "def f(x):\n"
        "    a, b = x, x * 3 + 1\n"
        "    for i in range(48):\n"
        "        a = a + b\n"
        "        b = ((b << 13) | (b >> 19)) ^ a\n"
        "    return (a ^ b).astype(jnp.float32) + x.T.astype(jnp.float32)\n"
        "x = np.arange(512 * 512, dtype=np.uint32).reshape(512, 512)\n"
        "ptx = kiln.make_jaxpr(f)(x)._traced.builder.gpu_ptx(90)\n"
        "assert '.entry' in ptx\n"
    )
    env = dict(os.environ, KILN_PLATFORM="cpu")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_ptx_for_other_compute_capabilities():
    assert ".target sm_80" in _ptx(lambda x: jnp.exp(x), np.ones(8, np.float32), cc=80)


def test_library_calls_generate_no_kernel():
    assert _ptx(lambda a, b: a @ b, np.ones((4, 64), np.float32), np.ones((64, 4), np.float32)) == ""


def test_small_contraction_products_are_computed_inside_kernels():
    # a classifier layer's k = 10 gradient product is fused into the kernel that consumes it
    ptx = _ptx(lambda g, w, s: (g @ w.T) * (s > 0), np.ones((64, 10), np.float32), np.ones((32, 10), np.float32),
               np.ones((64, 32), np.float32))
    assert ptx.count(".entry") == 1 and ".extern" not in ptx


@pytest.mark.parametrize("shapes,dims", [(((6, 3), (3, 5)), (((1,), (0,)))), (((6, 3), (5, 3)), (((1,), (1,)))),
                                         (((3, 6), (3, 5)), (((0,), (0,)))), (((2, 7, 2), (2, 4, 2)), (((0, 2), (0, 2))))])
def test_small_contraction_products_match_numpy(shapes, dims, x64):
    rng = np.random.default_rng(9)
    a, b = (rng.standard_normal(s) for s in shapes)
    got = kiln.jit(lambda a, b: jnp.exp(kiln.lax.dot_general(a, b, (dims, ((), ())))))(a, b)
    ref = np.exp(np.tensordot(a, b, axes=(list(dims[0]), list(dims[1]))))
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-12)


# ---- the fallback ----

def test_devices_and_default_backend_agree():
    devs = kiln.devices()
    assert devs[0].platform == kiln.default_backend()
    assert kiln.devices("cpu")[0].platform == "cpu"
    if not HAS_GPU:
        with pytest.raises(RuntimeError, match="no GPU"):
            kiln.devices("gpu")


def test_arrays_live_on_the_default_device():
    x = jnp.arange(5.0)
    assert x.device == kiln.devices()[0]


# ---- on the GPU ----

@gpu
def test_gpu_is_listed_first_with_its_name():
    d = kiln.devices()[0]
    assert d.platform == "gpu" and repr(d) == "CudaDevice(id=0)"
    assert "H100" in d.device_kind or "H200" in d.device_kind or d.device_kind


@gpu
def test_device_put_moves_between_cpu_and_gpu():
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    g = kiln.device_put(x)
    assert g._buf.device == 1
    c = kiln.device_put(g, kiln.devices("cpu")[0])
    assert c._buf.device == 0 and c.device.platform == "cpu"
    np.testing.assert_array_equal(np.asarray(c), x)
    back = kiln.device_put(c, kiln.devices()[0])
    np.testing.assert_array_equal(np.asarray(back), x)


@gpu
@pytest.mark.parametrize("nbytes", [(8 << 20) + 12, (40 << 20) + 4 * 12345, 100 << 20])
def test_large_transfers_through_pinned_staging_are_exact(nbytes):
    """Transfers of 8 MiB or more go through page-locked chunks of 16 MiB, both ways."""
    rng = np.random.default_rng()
    x = rng.standard_normal(nbytes // 4).astype(np.float32)
    want = x.copy()
    g = kiln.device_put(x)
    x[:] = 0  # the source may be reused as soon as device_put returns
    np.testing.assert_array_equal(np.asarray(g * 2), 2 * want)  # read back through the buffer protocol
    ref = rng.standard_normal(nbytes // 4).astype(np.float32)
    back = np.asarray(kiln.device_put(kiln.device_put(ref), kiln.devices("cpu")[0]))
    np.testing.assert_array_equal(back, ref)


@gpu
@pytest.mark.parametrize("n", [1, 7, 1000, 1 << 20])
def test_elementwise_and_reductions_match_numpy(n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    f = kiln.jit(lambda x: (1.05 * jnp.where(x > 0, x, 1.67 * jnp.exp(x) - 1.67), jnp.sum(x * x), jnp.max(x)))
    y, s, m = f(x)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(np.asarray(y), 1.05 * np.where(x64 > 0, x64, 1.67 * np.exp(x64) - 1.67), rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(float(s), np.sum(x64 * x64), rtol=1e-5)
    assert float(m) == x.max()


@gpu
@pytest.mark.parametrize("shape", [(3, 5), (64, 1000), (100, 4096), (7, 3)])
def test_row_kernels_softmax_layernorm_match_numpy(shape):
    rng = np.random.default_rng(1)
    a = rng.standard_normal(shape).astype(np.float32) * 4
    sm = np.asarray(kiln.jit(lambda a: kiln.nn.softmax(a, axis=-1))(a))
    e = np.exp(a - a.max(-1, keepdims=True))
    np.testing.assert_allclose(sm, e / e.sum(-1, keepdims=True), rtol=2e-5, atol=1e-7)
    ln = np.asarray(kiln.jit(lambda x: (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5))(a))
    ref = (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(ln, ref, rtol=1e-4, atol=1e-4)


@gpu
@pytest.mark.parametrize("shape", [(16, 33), (64, 1000), (5, 1024), (3, 8192), (2, 8193), (4, 3, 100)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_row_kernels_in_registers_match_numpy(shape, dtype):
    # rows up to 8,192 elements live in registers (ragged ends masked); longer ones loop
    rng = np.random.default_rng(7)
    a = (rng.standard_normal(shape) * 3).astype(dtype)
    a64 = np.asarray(a, np.float64)
    sm, lse = kiln.jit(lambda a: (kiln.nn.softmax(a, axis=-1), kiln.nn.logsumexp(a, axis=-1, keepdims=True) - a))(a)
    e = np.exp(a64 - a64.max(-1, keepdims=True))
    tol = 2e-5 if dtype == "float32" else 1e-2
    np.testing.assert_allclose(np.asarray(sm, np.float64), e / e.sum(-1, keepdims=True), rtol=tol, atol=tol * 1e-2)
    ref = np.log(e.sum(-1, keepdims=True)) + a64.max(-1, keepdims=True) - a64
    np.testing.assert_allclose(np.asarray(lse, np.float64), ref, rtol=tol, atol=tol * 10)


@gpu
@pytest.mark.parametrize("t", [64, 1000])
def test_causal_attention_gradients_match_numpy(t):
    # the softmax backward's row kernel recomputes the probabilities from the scores
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, 3, t, 16)).astype(np.float32) for _ in range(3))

    def attn(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / 4.0
        s = jnp.where(jnp.tril(jnp.ones((t, t), dtype=bool)), s, -1e9)
        return jnp.einsum("bhqk,bhkd->bhqd", kiln.nn.softmax(s, axis=-1), v)

    grads = kiln.jit(kiln.grad(lambda q, k, v: jnp.sum(attn(q, k, v) ** 2), argnums=(0, 1, 2)))(q, k, v)
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = np.where(np.tril(np.ones((t, t), bool)), q @ k.swapaxes(-1, -2) / 4.0, -1e9)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    do = 2 * (p @ v)
    dp = do @ v.swapaxes(-1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    want = (ds @ k / 4.0, ds.swapaxes(-1, -2) @ q / 4.0, p.swapaxes(-1, -2) @ do)
    for g, w in zip(grads, want):  # TF32 products by default: compare at its precision
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=2e-2, atol=2e-2 * np.abs(w).max())


@gpu
def test_reductions_over_every_axis_pattern_and_dtype():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, 7, 300)).astype(np.float32)
    for axes in [0, 1, 2, (0, 1), (1, 2), (0, 2), None]:
        np.testing.assert_allclose(np.asarray(jnp.sum(a, axis=axes)), a.astype(np.float64).sum(axis=axes), rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(np.asarray(jnp.min(a, axis=axes)), a.min(axis=axes))
    i = rng.integers(-50, 50, (9, 33)).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(jnp.sum(i, axis=1)), i.sum(axis=1))
    np.testing.assert_array_equal(np.asarray(jnp.max(i)), i.max())
    b = i > 40
    assert bool(jnp.any(b)) == b.any() and bool(jnp.all(b)) == b.all()
    np.testing.assert_array_equal(np.asarray(jnp.any(b, axis=1)), b.any(axis=1))


@gpu
@pytest.mark.parametrize("shape,axes", [((4096, 333), 0), ((100, 30), 0), ((64, 50, 40), (0, 2)), ((2000, 3, 5), (0, 1))])
def test_column_reductions_split_over_blocks_match_numpy(shape, axes):
    rng = np.random.default_rng(7)
    a = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(np.asarray(kiln.jit(lambda a: a.sum(axes))(a)), a.astype(np.float64).sum(axes), rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(np.asarray(kiln.jit(lambda a: a.max(axes))(a)), a.max(axes))
    np.testing.assert_array_equal(np.asarray(kiln.jit(lambda a: (a > 2.5).any(axes))(a)), (a > 2.5).any(axes))


@gpu
def test_nan_propagates_through_gpu_max():
    x = np.arange(1000, dtype=np.float32)
    x[517] = np.nan
    assert np.isnan(float(jnp.max(x)))
    assert np.isnan(np.asarray(jnp.max(x.reshape(10, 100), axis=1))[5])


@gpu
def test_matmul_and_linalg_fall_back_correctly():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal((32, 16)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(kiln.jit(lambda a, b: jnp.tanh(a @ b))(a, b)), np.tanh(a @ b), rtol=1e-4, atol=1e-5)
    m = rng.standard_normal((8, 8)) + 8 * np.eye(8)
    np.testing.assert_allclose(np.asarray(jnp.linalg.inv(m.astype(np.float32))), np.linalg.inv(m), rtol=1e-4, atol=1e-5)


@gpu
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "batched", "einsum"])
def test_matmul_through_cublas_matches_numpy_at_highest_precision(layout):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 70, 50)).astype(np.float32)
    b = rng.standard_normal((3, 50, 40)).astype(np.float32)
    hi = kiln.lax.Precision.HIGHEST
    f = {"nn": lambda a, b: jnp.matmul(a[0], b[0], precision=hi),
         "tn": lambda a, b: jnp.matmul(a[0].T.T, b[0], precision=hi) + jnp.dot(a[0].T.T, b[0], precision=hi),
         "nt": lambda a, b: jnp.dot(a[0], b[0].T.T, precision=hi),
         "batched": lambda a, b: jnp.matmul(a, b, precision=hi),
         "einsum": lambda a, b: jnp.einsum("bmk,bnk->bmn", a, jnp.swapaxes(b, 1, 2), precision=hi)}[layout]
    ref = {"nn": a[0] @ b[0], "tn": 2 * (a[0] @ b[0]), "nt": a[0] @ b[0], "batched": a @ b, "einsum": a @ b}[layout]
    np.testing.assert_allclose(np.asarray(kiln.jit(f)(a, b)), ref.astype(np.float64), rtol=1e-5, atol=1e-4)


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m,k,n", [(1024, 1024, 1024), (512, 2048, 1024), (1536, 768, 1024)])
def test_large_tn_products_transposed_first_are_exact(m, k, n, dtype, request):
    """Weight-gradient products (contracting axis 0 of both operands) large enough that cuBLAS
    runs them on a transposed copy of the left operand."""
    if dtype == "float64":
        request.getfixturevalue("x64")
    rng = np.random.default_rng()
    a = rng.standard_normal((k, m)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    dn = (((0,), (0,)), ((), ()))
    f = kiln.jit(lambda a, b: kiln.lax.dot_general(a, b, dn, precision=kiln.lax.Precision.HIGHEST))
    ref = a.astype(np.float64).T @ b.astype(np.float64)
    out = f(a, b)
    assert out.dtype == dtype
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-4 if dtype == "float32" else 1e-12,
                               atol=1e-3 if dtype == "float32" else 1e-9)


@gpu
def test_default_precision_may_use_tf32_and_highest_does_not():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((256, 256)).astype(np.float32)
    b = rng.standard_normal((256, 256)).astype(np.float32)
    ref = a.astype(np.float64) @ b
    hi = np.asarray(jnp.dot(a, b, precision="highest"))
    lo = np.asarray(jnp.dot(a, b, precision="default"))
    assert np.abs(hi - ref).max() < 1e-3
    assert np.abs(lo - ref).max() < 0.5  # TF32 keeps 10 mantissa bits


@gpu
def test_integer_matmul_runs_on_the_host_and_is_exact():
    i = np.arange(12, dtype=np.int32).reshape(3, 4)
    np.testing.assert_array_equal(np.asarray(jnp.dot(i, i.T)), i @ i.T)


@gpu
def test_grad_and_vmap_run_on_the_gpu():
    rng = np.random.default_rng(4)
    w = rng.standard_normal((5, 3)).astype(np.float32)
    xs = rng.standard_normal((10, 5)).astype(np.float32)
    g = kiln.jit(kiln.vmap(kiln.grad(lambda w, x: jnp.sum(jnp.tanh(x @ w) ** 2)), in_axes=(None, 0)))(w, xs)
    for i in range(10):
        t = np.tanh(xs[i] @ w)
        np.testing.assert_allclose(np.asarray(g[i]), np.outer(xs[i], 2 * t * (1 - t * t)), rtol=1e-4, atol=1e-5)


@gpu
def test_launches_are_asynchronous_and_block_until_ready_waits():
    x = jnp.ones((4096, 4096))
    f = kiln.jit(lambda x: jnp.sin(x) * 2 + jnp.cos(x))
    f(x).block_until_ready()
    ys = [f(x) for _ in range(20)]
    assert not ys[-1].is_ready()  # 20 x 64 MB of work cannot be done by the time the calls return
    ys[-1].block_until_ready()
    assert ys[-1].is_ready()
    np.testing.assert_allclose(np.asarray(ys[-1])[0, :3], np.sin(1) * 2 + np.cos(1), rtol=1e-6)


@gpu
def test_reading_a_result_does_not_wait_for_later_launches():
    small = kiln.jit(lambda x: x * 2.0)
    big = kiln.jit(lambda x: jnp.sin(jnp.cos(jnp.sin(x))) * 2 + jnp.cos(x))
    x, w = jnp.ones(8), jnp.ones((4096, 4096))
    small(x).block_until_ready()
    big(w).block_until_ready()
    y = small(x)
    zs = [big(w) for _ in range(30)]  # ~30 ms of queued work after y
    np.testing.assert_array_equal(np.asarray(y), 2.0)
    assert not zs[-1].is_ready()  # the read of y did not wait for the queue behind it
    zs[-1].block_until_ready()


@gpu
def test_out_of_memory_is_an_exception_and_the_process_stays_usable():
    with pytest.raises(MemoryError, match="out of GPU memory"):
        jnp.zeros((1 << 40,), jnp.float32) + 1
    np.testing.assert_array_equal(np.asarray(jnp.arange(3) + 1), [1, 2, 3])


@gpu
def test_device_memory_does_not_grow_over_a_million_calls():
    f = kiln.jit(lambda x: x * 0.5 + 1)
    x = jnp.ones((1000,))
    for _ in range(100):
        x = f(x)
        x = x * 0.5 + 0.5  # eager, fused
    x.block_until_ready()
    gc.collect()
    before = kiln.devices("gpu")[0].memory_stats()["bytes_in_use"]
    for _ in range(1000000):
        x = f(x)
    for _ in range(100000):
        x = x * 0.5 + 0.5
    x.block_until_ready()
    gc.collect()
    assert kiln.devices("gpu")[0].memory_stats()["bytes_in_use"] <= before
    np.testing.assert_allclose(np.asarray(x), 1.0, rtol=1e-6)  # both maps converge to 2 and 1


@gpu
def test_a_second_process_compiles_nothing(tmp_path):
    import os
    import subprocess
    import sys
    code = ("import kiln, kiln.numpy as jnp; from kiln import _kiln\n"
            "f = kiln.jit(lambda x: kiln.nn.softmax(jnp.tanh(x) * 3.0, axis=-1).sum(0))\n"
            "f(jnp.ones((64, 300))).block_until_ready(); print(*_kiln.gpu_compile_stats())")
    env = dict(os.environ, KILN_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.path.dirname(os.path.dirname(kiln.__file__)))
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    c1, d1, _ = map(int, first.stdout.split())
    c2, d2, _ = map(int, second.stdout.split())
    assert c1 >= 1 and d1 == 0
    assert c2 == 0 and d2 == c1  # device code came from the disk cache


@gpu
def test_a_second_compile_of_the_same_program_loads_cached_code():
    f = lambda x: jnp.cos(x) * 3.25 - 1  # noqa: E731
    kiln.jit(f)(jnp.ones(17)).block_until_ready()
    compiled, disk, mem = _kiln.gpu_compile_stats()
    kiln.jit(f)(jnp.ones(17)).block_until_ready()  # a new jit object traces and compiles again
    c2, d2, m2 = _kiln.gpu_compile_stats()
    assert c2 == compiled and m2 == mem + 1


# ---- fusion: how many launches a program makes (both backends) ----

def _steps(f, *args):
    jf = kiln.jit(f)
    jf(*args).block_until_ready()
    (entry,) = jf._cache.values()
    return entry.exe.num_steps


def test_fused_programs_launch_one_kernel_per_fusion_group():
    x = np.random.default_rng(8).standard_normal(1 << 16).astype(np.float32)
    a = x.reshape(64, 1024)
    w, b = np.ones((1024, 32), np.float32), np.ones(32, np.float32)
    assert _steps(lambda x: 1.05 * jnp.where(x > 0, x, 1.67 * jnp.exp(x) - 1.67), x) == 1
    assert _steps(lambda a: kiln.nn.softmax(a, axis=-1), a) == 1
    assert _steps(lambda a: (a - a.mean(-1, keepdims=True)) / jnp.sqrt(a.var(-1, keepdims=True) + 1e-5), a) == 1
    # a full reduction is one kernel on the CPU, partials + combine (two kernels) on the GPU
    assert _steps(lambda x: jnp.sum(x * x), x) == (2 if HAS_GPU else 1)
    assert _steps(lambda a, w, b: jnp.tanh(a @ w + b), a, w, b) == 2  # the matmul, then one fused kernel


@gpu
@pytest.mark.parametrize("dtype", ["float32", "int32", "bool", "float16"])
def test_gathers_slices_and_scatters_run_as_kernels_and_match_numpy(dtype):
    rng = np.random.default_rng()
    a = (rng.standard_normal((64, 33)) * 10).astype(dtype)
    idx = rng.integers(-5, 70, size=200)  # out of range: gathers clamp, scatters drop
    x = jnp.asarray(a)
    got = np.asarray(kiln.jit(lambda x, i: x[jnp.clip(i, 0, 63)])(x, idx))
    np.testing.assert_array_equal(got, a[np.clip(idx, 0, 63)])
    s = kiln.jit(lambda x, i, j: kiln.lax.dynamic_slice(x, (i, j), (10, 7)))
    for i, j in [(3, 4), (60, 30), (-4, 2)]:  # a negative start counts from the end; starts clamp so the box fits
        ci, cj = min(i % 64, 54), min(j % 33, 26)
        np.testing.assert_array_equal(np.asarray(s(x, i, j)), a[ci:ci + 10, cj:cj + 7])
    upd = (rng.standard_normal((10, 7)) * 10).astype(dtype)
    u = kiln.jit(lambda x, v, i: kiln.lax.dynamic_update_slice(x, v, (i, jnp.int32(5))))
    want = a.copy()
    want[20:30, 5:12] = upd
    np.testing.assert_array_equal(np.asarray(u(x, upd, 20)), want)
    vals = (rng.standard_normal((200, 33)) * 10).astype(dtype)
    got = np.asarray(kiln.jit(lambda x, i, v: x.at[i].set(v))(x, idx, vals))
    want = a.copy()
    for k, row in zip(idx, vals):  # duplicates: the last one wins; negative: from the end; past: dropped
        if -64 <= k < 64:
            want[k] = row
    np.testing.assert_array_equal(got, want)
    if dtype in ("float32", "int32"):
        got = np.asarray(kiln.jit(lambda x, i, v: x.at[i].add(v))(x, idx, vals))
        want = a.astype(np.float64)
        for k, row in zip(idx, vals):
            if -64 <= k < 64:
                want[k] += row
        np.testing.assert_allclose(got, want.astype(dtype), rtol=1e-5, atol=1e-4)
        cols = idx[:40] % 33  # along axis 1, with duplicates
        v2 = (rng.standard_normal((64, 40)) * 10).astype(dtype)
        got = np.asarray(kiln.jit(lambda x, c, v: x.at[:, c].max(v))(x, cols, v2))
        want = a.copy()
        for j, c in enumerate(cols):
            want[:, c] = np.maximum(want[:, c], v2[:, j])
        np.testing.assert_array_equal(got, want)


@gpu
def test_arg_and_cumulative_ops_run_as_kernels_and_match_numpy():
    rng = np.random.default_rng()
    a = rng.integers(-4, 5, size=(37, 50)).astype(np.float32)  # ties
    a[3, 7] = a[10, 0] = np.nan
    x = jnp.asarray(a)
    for axis in (0, 1):
        np.testing.assert_array_equal(np.asarray(jnp.argmax(x, axis=axis)), np.argmax(a, axis=axis))
        np.testing.assert_array_equal(np.asarray(jnp.argmin(x, axis=axis)), np.argmin(a, axis=axis))
        np.testing.assert_array_equal(np.asarray(kiln.lax.cummax(x, axis=axis)), np.maximum.accumulate(a, axis=axis))
        np.testing.assert_array_equal(np.asarray(kiln.lax.cummin(x, axis=axis, reverse=True)),
                                      np.flip(np.minimum.accumulate(np.flip(a, axis), axis=axis), axis))
        f = rng.standard_normal((37, 50)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(jnp.cumsum(jnp.asarray(f), axis=axis)),
                                   np.cumsum(f.astype(np.float64), axis=axis), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(np.asarray(jnp.cumprod(jnp.asarray(f[:, :8] * 0.5 + 1), axis=axis)),
                                   np.cumprod(f[:, :8].astype(np.float64) * 0.5 + 1, axis=axis), rtol=1e-4)
    i = rng.integers(-1000, 1000, size=(20, 30)).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(kiln.lax.cumsum(jnp.asarray(i), axis=1, reverse=True)),
                                  np.flip(np.cumsum(np.flip(i, 1), axis=1), 1))
    u = rng.integers(0, 255, size=(9, 40)).astype(np.uint8)
    np.testing.assert_array_equal(np.asarray(jnp.argmax(jnp.asarray(u), axis=1)), np.argmax(u, axis=1))
    b = rng.random((9, 40)) > 0.7
    np.testing.assert_array_equal(np.asarray(jnp.argmax(jnp.asarray(b), axis=1)), np.argmax(b, axis=1))
    long = rng.standard_normal(100000).astype(np.float32)  # too long for one thread: the host routine
    assert int(jnp.argmax(jnp.asarray(long))) == int(np.argmax(long))


_MATH = ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "tanh", "sin", "cos", "tan", "sinh", "cosh",
         "arcsin", "arccos", "arctan", "arcsinh", "arccosh", "arctanh", "cbrt"]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_every_math_function_lowers_without_externs_with_or_without_libdevice(dtype, x64):
    def f(a):
        out = [getattr(jnp, n)(a) for n in _MATH]
        out += [kiln.scipy.special.erf(a), kiln.scipy.special.erfc(a), kiln.scipy.special.erfinv(a),
                kiln.scipy.special.gammaln(a), kiln.scipy.special.digamma(a), jnp.power(a, a), jnp.arctan2(a, a)]
        return sum(o.astype(dtype) for o in out)
    ptx = _ptx(f, np.ones(64, dtype))
    assert ".entry" in ptx and ".extern" not in ptx  # every libdevice function called was linked


def test_libdevice_is_used_where_found_and_can_be_turned_off():
    code = ("import hashlib, numpy as np, kiln, kiln.numpy as jnp\n"
            "print(kiln._kiln.gpu_libdevice())\n"
            "j = kiln.make_jaxpr(lambda x: jnp.exp(x))(np.ones(64, np.float32))\n"
            "print(hashlib.sha256(j._traced.builder.gpu_ptx(90).encode()).hexdigest())\n")
    runs = [subprocess.run([sys.executable, "-c", code], env=dict(os.environ, KILN_LIBDEVICE=v, KILN_CACHE_DIR="off"),
                           capture_output=True, text=True, timeout=120) for v in ("0", "")]
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    (off_path, off_ptx), (on_path, on_ptx) = (r.stdout.split() for r in runs)
    assert off_path == "None"
    assert on_path == str(_kiln.gpu_libdevice())
    if on_path != "None":
        assert on_ptx != off_ptx  # libdevice's exp, not kiln's polynomial
    # kiln's own math in GPU kernels (f32 trig's exact reduction a branch taken only for |x| > 1e5)
    code = ("import numpy as np, kiln, kiln.numpy as jnp\n"
            "f = lambda a: jnp.sin(a) + jnp.cos(a) * jnp.tan(a) + jnp.exp(a)\n"
            "p = kiln.make_jaxpr(f)(np.ones(64, np.float32))._traced.builder.gpu_ptx(90)\n"
            "print(p.count('.entry'), p.count('.extern'), p.count('bra'))\n")
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, KILN_LIBDEVICE="0", KILN_CACHE_DIR="off"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    entries, externs, branches = map(int, r.stdout.split())
    assert entries == 1 and externs == 0 and branches >= 6


@gpu
@pytest.mark.parametrize("dtype", ["float32", "int32", "float64"])
def test_large_scatter_adds_use_atomics_and_match_numpy(dtype, request):
    """Embedding-style gradients: many more updates than rows (atomic adds on the GPU)."""
    if dtype == "float64":
        request.getfixturevalue("x64")
    rng = np.random.default_rng()
    idx = rng.integers(-3, 103, size=20000)  # past the end: dropped; negative: from the end
    if dtype == "int32":
        w, g = rng.integers(-9, 9, size=(100, 16)).astype(dtype), rng.integers(-9, 9, size=(20000, 16)).astype(dtype)
    else:
        w, g = rng.standard_normal((100, 16)).astype(dtype), rng.standard_normal((20000, 16)).astype(dtype)
    got = np.asarray(kiln.jit(lambda w, i, g: w.at[i].add(g))(w, idx, g))
    want = w.astype(np.float64)
    keep = idx < 100
    np.add.at(want, idx[keep], g[keep].astype(np.float64))
    if dtype == "int32":
        np.testing.assert_array_equal(got, want.astype(dtype))
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == "float32" else 1e-12, atol=1e-3)
    grad = kiln.grad(lambda w: jnp.sum(jnp.tanh(w[jnp.clip(jnp.asarray(idx), 0, 99)])))(jnp.asarray(w)) \
        if dtype != "int32" else None
    if grad is not None:
        t = 1 - np.tanh(w.astype(np.float64)) ** 2
        cnt = np.bincount(np.clip(idx, 0, 99), minlength=100)[:, None]
        np.testing.assert_allclose(np.asarray(grad), t * cnt, rtol=1e-4, atol=1e-3)


# ---- whole programs stay on the device ----

def _transformer():
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
    try:
        import transformer
    finally:
        sys.path.pop(0)
    return transformer


def _only_entry(jf):
    (entry,) = jf._cache.values()
    return entry.exe


def test_attention_products_are_batched_gemms_with_no_host_step_in_the_ptx_compile():
    # the legalize pass puts non-leading batch dims first: the GPU compile has no host step
    q = np.ones((2, 8, 4, 16), np.float32)
    jf = kiln.jit(lambda q, k: jnp.einsum("bqhd,bkhd->bhqk", q, k))
    jf(q, q)
    exe = _only_entry(jf)
    assert exe.host_steps == []


@gpu
@pytest.mark.parametrize("layers", [1, 2])
def test_transformer_step_runs_on_the_device_with_no_host_step(layers, tmp_path):
    tr = _transformer()
    step = tr.make_step(kiln, jnp)
    params, toks = tr.init_params(layers, seed=layers), tr.tokens(seed=layers)
    new, loss = step(params, toks)
    assert _only_entry(step).device == 1 and _only_entry(step).host_steps == []
    # the same step on the CPU backend, in a process of its own
    code = ("import sys, numpy as np, kiln, kiln.numpy as jnp; sys.path.insert(0, {ex!r}); import transformer as tr\n"
            "new, loss = tr.make_step(kiln, jnp)(tr.init_params({L}, seed={L}), tr.tokens(seed={L}))\n"
            "np.savez({out!r}, loss=np.asarray(loss), *[np.asarray(a) for a in kiln.tree_util.tree_leaves(new)])\n")
    out = str(tmp_path / "ref.npz")
    ex = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
    subprocess.run([sys.executable, "-c", code.format(ex=ex, L=layers, out=out)], check=True,
                   env=dict(os.environ, KILN_PLATFORM="cpu"))
    ref = np.load(out)
    np.testing.assert_allclose(float(loss), float(ref["loss"]), rtol=2e-3)
    leaves = kiln.tree_util.tree_leaves(new)
    assert len(leaves) == len(ref.files) - 1
    for i, a in enumerate(leaves):
        np.testing.assert_allclose(np.asarray(a), ref[f"arr_{i}"], rtol=2e-2, atol=2e-3)


@gpu
@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint16, np.bool_])
def test_integer_products_run_on_the_device(dtype):
    rng = np.random.default_rng(3)
    a = (rng.integers(0, 2, (3, 5, 7)) if dtype == np.bool_ else rng.integers(-9, 9, (3, 5, 7)) % 50).astype(dtype)
    b = (rng.integers(0, 2, (7, 3, 4)) if dtype == np.bool_ else rng.integers(-9, 9, (7, 3, 4)) % 50).astype(dtype)
    jf = kiln.jit(lambda a, b: kiln.lax.dot_general(a, b, (((2,), (0,)), ((0,), (1,)))))
    got = np.asarray(jf(a, b))
    if dtype == np.bool_:
        want = np.einsum("bik,kbj->bij", a.astype(np.int64), b.astype(np.int64)) > 0
    else:
        want = np.einsum("bik,kbj->bij", a.astype(np.int64), b.astype(np.int64)).astype(dtype)
    np.testing.assert_array_equal(got, want)
    assert _only_entry(jf).host_steps == []


@gpu
def test_a_program_of_many_steps_runs_as_a_graph_with_fresh_inputs_every_call():
    # 40 scans are 40+ steps: the executable is captured into a CUDA graph once; each call copies
    # its inputs in and its outputs out, so every call sees its own data
    def f(x, y):
        for i in range(40):
            x = jnp.cumsum(x * 0.5 + y, axis=0) / (i + 2)
        return x, y, x.sum()

    def ref(x, y):
        for i in range(40):
            x = np.cumsum(x * 0.5 + y, axis=0) / (i + 2)
        return x, y, x.sum()

    jf = kiln.jit(f)
    rng = np.random.default_rng(11)
    outs = []
    for _ in range(4):
        x, y = rng.standard_normal((2, 64, 3)).astype(np.float32)
        got = jf(x, y)
        outs.append(got)
        for g, w in zip(got, ref(x.astype(np.float64), y.astype(np.float64))):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-5)
    assert _only_entry(jf).num_steps >= 32
    # outputs of earlier calls are still intact (they were copied out of the graph's arena)
    assert not np.allclose(np.asarray(outs[0][0]), np.asarray(outs[1][0]))


@gpu
@pytest.mark.parametrize("case", ["square", "ragged", "batched", "moved_batch", "float64", "int32"])
def test_transposed_reads_through_shared_memory_tiles_match_numpy(case):
    # elementwise kernels reading an operand transposed (its last axis moved) go through 32x32
    # tiles in shared memory; sizes that are not multiples of 32 exercise the edges
    rng = np.random.default_rng(12)
    if case == "square":
        a = rng.standard_normal((512, 512)).astype(np.float32)
        f = lambda np_, a: a.T + a  # noqa: E731
    elif case == "ragged":
        a = rng.standard_normal((333, 517)).astype(np.float32)
        f = lambda np_, a: np_.exp(a.T * 0.5) - 1.0  # noqa: E731
    elif case == "batched":
        a = rng.standard_normal((3, 130, 250)).astype(np.float32)
        f = lambda np_, a: np_.transpose(a, (0, 2, 1)) * 2 - np_.sin(np_.transpose(a, (0, 2, 1)))  # noqa: E731
    elif case == "moved_batch":
        a = rng.standard_normal((70, 3, 400)).astype(np.float32)
        f = lambda np_, a: np_.transpose(a, (2, 1, 0)) + 1.0  # noqa: E731
    elif case == "float64":
        a = rng.standard_normal((300, 260)).astype(np.float64)
        f = lambda np_, a: a.T * a.T + 3.0  # noqa: E731
    else:
        a = rng.integers(-100, 100, (260, 300)).astype(np.int32)
        f = lambda np_, a: a.T * 3 - 7  # noqa: E731
    got = np.asarray(kiln.jit(lambda a: f(jnp, a))(a))
    want = f(np, a)
    if a.dtype == np.float64 and got.dtype == np.float32:  # x64 off
        want = want.astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-6 if got.dtype == np.float64 else 2e-6, atol=1e-6)


@gpu
def test_a_graph_program_called_from_several_threads_gives_each_call_its_own_result():
    # the graph's arena is shared by the calls of one executable: each call's copies and launch
    # are enqueued together, so another thread's inputs never overwrite them
    import threading

    def f(x):
        for i in range(40):
            x = jnp.cumsum(x * 0.5, axis=0) / (i + 2)
        return x

    def ref(x):
        for i in range(40):
            x = np.cumsum(x * 0.5, axis=0) / (i + 2)
        return x

    jf = kiln.jit(f)
    xs = [np.random.default_rng(20 + i).standard_normal((64, 3)).astype(np.float32) for i in range(8)]
    jf(xs[0]).block_until_ready()
    got = [None] * len(xs)

    def work(i):
        for _ in range(5):
            got[i] = np.asarray(jf(xs[i]))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, x in enumerate(xs):
        np.testing.assert_allclose(got[i], ref(x.astype(np.float64)), rtol=1e-4, atol=1e-5)


@gpu
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_runs_on_the_device_and_its_gradient_matches_numpy(reverse):
    # an RNN scan: its body's kernels and cuBLAS calls queued on the GPU, no host step
    rng = np.random.default_rng(31)
    w = (rng.standard_normal((16, 16)) * 0.3).astype(np.float32)
    xs = rng.standard_normal((300, 4, 16)).astype(np.float32)

    def loss(w, xs):
        def cell(h, x):
            h = jnp.tanh(jnp.dot(h, w, precision="highest") + x)
            return h, h.sum()
        h, ys = kiln.lax.scan(cell, jnp.zeros((4, 16)), xs, reverse=reverse)
        return (h ** 2).sum() + ys.sum()

    jf = kiln.jit(kiln.value_and_grad(loss))
    val, g = jf(w, xs)
    assert _only_entry(jf).host_steps == []
    w64, hs, h = w.astype(np.float64), [], np.zeros((4, 16))
    order = range(299, -1, -1) if reverse else range(300)
    for i in order:
        hs.append(h)
        h = np.tanh(h @ w64 + xs[i])
    want = (h ** 2).sum() + sum(np.tanh(hh @ w64 + xs[i]).sum() for hh, i in zip(hs, order))
    assert float(val) == pytest.approx(want, rel=1e-4)
    dh, gw = 2 * h, np.zeros_like(w64)  # backward by hand
    for hh, i in reversed(list(zip(hs, order))):
        hn = np.tanh(hh @ w64 + xs[i])
        da = (dh + 1.0) * (1 - hn * hn)
        gw += hh.T @ da
        dh = da @ w64.T
    np.testing.assert_allclose(np.asarray(g), gw, rtol=2e-3, atol=2e-4)


@gpu
def test_while_and_fori_loops_run_on_the_device():
    def newton(a):
        return kiln.lax.while_loop(lambda c: jnp.max(jnp.abs(c[0] * c[0] - a)) > 1e-4,
                                   lambda c: (0.5 * (c[0] + a / c[0]), c[1] + 1), (a, 0))

    x = np.random.default_rng(32).uniform(0.5, 50.0, 1000).astype(np.float32)
    jf = kiln.jit(newton)
    r, k = jf(x)
    assert _only_entry(jf).host_steps == []
    np.testing.assert_allclose(np.asarray(r), np.sqrt(x), rtol=1e-5)
    assert int(k) > 3
    upd = kiln.jit(lambda z: kiln.lax.fori_loop(0, 1000, lambda i, z: z.at[i].set(2.0 * i), z))
    got = np.asarray(upd(jnp.zeros(1 << 16)))
    want = np.zeros(1 << 16, np.float32)
    want[:1000] = 2.0 * np.arange(1000)
    np.testing.assert_array_equal(got, want)
    assert _only_entry(upd).host_steps == []


def test_kernels_read_a_bounded_number_of_buffers():
    # a sum of 600 arrays (a big pytree's leaves): the GPU takes at most 4 KB of kernel parameters,
    # so the plan materializes partial sums rather than writing a kernel of 601 arguments
    xs = [np.full(3, i, np.float32) for i in range(600)]
    ptx = _ptx(lambda xs: sum(xs), xs)
    widest = max(e.split(")")[0].count(".param") for e in ptx.split(".entry")[1:])
    assert widest <= 257
    np.testing.assert_array_equal(np.asarray(kiln.jit(lambda xs: sum(xs))(xs)), np.full(3, sum(range(600)), np.float32))


@gpu
def test_conds_inside_a_scan_run_as_conditional_nodes_of_its_graph():
    # a scan whose body branches on its data (a cond with a reduction's temporaries, a branch
    # passing its operand through): the loop is captured whole into one CUDA graph, each cond two
    # conditional nodes that run only the taken branch, no predicate read per trip
    rng = np.random.default_rng(41)
    xs = rng.standard_normal((200, 64)).astype(np.float32)
    c0 = rng.standard_normal(64).astype(np.float32)

    def body(c, x):
        c = kiln.lax.cond(x.sum() > 0.0, lambda v: v * 0.5 - x / (1.0 + jnp.abs(v).max()), lambda v: jnp.sin(v) + 0.3 * x, c)
        c = kiln.lax.cond(x[0] > 1.0, lambda v: v, lambda v: v * 0.9, c)
        return c, c.max()

    def step(c, x):
        c = c * 0.5 - x / (1.0 + np.abs(c).max()) if x.sum() > 0 else np.sin(c) + 0.3 * x
        return c if x[0] > 1.0 else c * 0.9

    def ref(c, xs, step=step):
        c, ys = c.astype(np.float64), []
        for x in xs.astype(np.float64):
            c = step(c, x)
            ys.append(c.max())
        return c, np.array(ys)

    jf = kiln.jit(lambda c, xs: kiln.lax.scan(body, c, xs))
    g0, b0, _ = _kiln.gpu_graph_stats()
    c, ys = jf(c0, xs)
    g1, b1, _ = _kiln.gpu_graph_stats()
    want_c, want_ys = ref(c0, xs)
    np.testing.assert_allclose(np.asarray(c), want_c, rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(np.asarray(ys), want_ys, rtol=2e-4, atol=2e-5)
    assert _only_entry(jf).host_steps == []
    assert (g1 - g0, b1 - b0) == (1, 2 * 200)  # one graph, every trip's conds in it
    c2, _ = jf(-c0, xs[::-1].copy())  # the graph again, other branches taken
    np.testing.assert_allclose(np.asarray(c2), ref(-c0, xs[::-1])[0], rtol=2e-4, atol=2e-5)
    assert _kiln.gpu_graph_stats()[0] == g1

    # a switch (nested conds: conditional nodes inside a conditional node's body) in the same
    # scan: still one graph, no host step, the switch's two conds per trip in it
    def body3(c, x):
        c, y = body(c, x)
        i = jnp.clip(jnp.floor(x[1] + 1.5), 0, 2).astype(jnp.int32)
        return kiln.lax.switch(i, [lambda v: v + 0.1, lambda v: jnp.tanh(v) * 2.0, lambda v: -v], c), y

    def step3(c, x):
        c = step(c, x)
        return [c + 0.1, np.tanh(c) * 2.0, -c][int(np.clip(np.floor(x[1] + 1.5), 0, 2))]

    jf3 = kiln.jit(lambda c, xs: kiln.lax.scan(body3, c, xs))
    g0, b0, _ = _kiln.gpu_graph_stats()
    c3, _ = jf3(c0, xs)
    g1, b1, _ = _kiln.gpu_graph_stats()
    np.testing.assert_allclose(np.asarray(c3), ref(c0, xs, step3)[0], rtol=2e-4, atol=2e-5)
    assert _only_entry(jf3).host_steps == []
    assert (g1 - g0, b1 - b0) == (1, 4 * 200)
    c4, _ = jf3(-c0, xs[::-1].copy())  # the graph again, other branches taken
    np.testing.assert_allclose(np.asarray(c4), ref(-c0, xs[::-1], step3)[0], rtol=2e-4, atol=2e-5)
    assert _kiln.gpu_graph_stats()[0] == g1


@gpu
def test_conditional_nodes_hold_cublas_products_and_deep_switches():
    # a branch with a matrix product (cuBLAS, queued on the branch's stream) and a switch of 18
    # branches (17 nested conds: past the 16 levels of conditional nodes, so from the host), each
    # inside a scan's graph; results against NumPy
    rng = np.random.default_rng(45)
    xs = rng.standard_normal((150, 8, 32)).astype(np.float32)
    w = (rng.standard_normal((32, 32)) / 6).astype(np.float32)
    h0 = rng.standard_normal((8, 32)).astype(np.float32)

    def body(h, x):
        h = kiln.lax.cond(x.sum() > 0.0, lambda v: jnp.tanh(jnp.dot(v, w, precision="highest") + x),
                          lambda v: v * 0.5 + x * 0.1, h)
        return h, h[0, 0]

    h, ys = (jf := kiln.jit(lambda h, xs: kiln.lax.scan(body, h, xs)))(h0, xs)
    hr, yr = h0.astype(np.float64), []
    for x in xs.astype(np.float64):
        hr = np.tanh(hr @ w + x) if x.sum() > 0 else hr * 0.5 + x * 0.1
        yr.append(hr[0, 0])
    np.testing.assert_allclose(np.asarray(h), hr, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ys), yr, rtol=1e-4, atol=1e-5)
    assert _only_entry(jf).host_steps == []

    branches = [(lambda k: lambda v: v * (1.0 - 0.01 * k) + 0.02 * k)(k) for k in range(18)]
    body2 = lambda c, x: (kiln.lax.switch(jnp.clip(jnp.floor(x[0, 0] * 6 + 9), 0, 17).astype(jnp.int32), branches, c),
                          None)
    c, _ = kiln.jit(lambda c, xs: kiln.lax.scan(body2, c, xs))(h0, xs)
    cr = h0.astype(np.float64)
    for x in xs.astype(np.float64):
        k = int(np.clip(np.floor(x[0, 0] * 6 + 9), 0, 17))
        cr = cr * (1.0 - 0.01 * k) + 0.02 * k
    np.testing.assert_allclose(np.asarray(c), cr, rtol=1e-4, atol=1e-5)


@gpu
@pytest.mark.parametrize("reverse", [False, True])
def test_long_scans_run_as_device_side_loops(reverse):
    # 60,000 trips, past one graph's 50,000 launches: the trips are a device-side loop (a slice
    # mover, the body, a slice mover, the trip's end), slices of 12 bytes (moved bytewise) and of
    # 32 (vectors), two ys; its results match NumPy's, and a second call over other xs reuses it
    rng = np.random.default_rng(43)
    n = 60000
    xs = rng.standard_normal((n, 3)).astype(np.float32)
    xs2 = rng.standard_normal((n, 8)).astype(np.float32)
    c0 = rng.standard_normal(3).astype(np.float32)

    def body(c, x):
        a, b = x
        c = c * 0.999 + a * 0.001 + b[:3] * 0.0005
        return c, (c.sum(), c * 2.0)

    def ref(xs, xs2):
        cr, sr, yr = c0.astype(np.float64), np.empty(n), np.empty((n, 3))
        x64, x264 = xs.astype(np.float64), xs2.astype(np.float64)
        for i in (range(n - 1, -1, -1) if reverse else range(n)):
            cr = cr * 0.999 + x64[i] * 0.001 + x264[i, :3] * 0.0005
            sr[i], yr[i] = cr.sum(), cr * 2.0
        return cr, sr, yr

    jf = kiln.jit(lambda c, xs, xs2: kiln.lax.scan(body, c, (xs, xs2), reverse=reverse))
    l0 = _kiln.gpu_graph_stats()[2]
    c, (s, y2) = jf(c0, xs, xs2)
    assert _kiln.gpu_graph_stats()[2] == l0 + 1  # one device-side loop, no trip from the host
    for got, want in zip((c, s, y2), ref(xs, xs2)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    xs3 = rng.standard_normal((n, 3)).astype(np.float32)
    c3, (s3, _) = jf(c0, xs3, xs2)
    assert _kiln.gpu_graph_stats()[2] == l0 + 2
    cr, sr, _ = ref(xs3, xs2)
    np.testing.assert_allclose(np.asarray(c3), cr, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(s3), sr, rtol=1e-4, atol=1e-4)


@gpu
def test_device_side_loops_whose_bodies_branch():
    # a 60,000-trip scan and a while loop whose bodies hold a cond: the branches are bound before
    # the loop's body is captured, then conditional nodes inside the device-side loop
    rng = np.random.default_rng(44)
    n = 60000
    xs = rng.standard_normal((n, 4)).astype(np.float32)

    def body(c, x):
        c = kiln.lax.cond(x[0] > 0.3, lambda v: v * 0.99 + x * 0.01, lambda v: v * 0.995 - x * 0.002, c)
        return c, c[1]

    c0 = np.ones(4, np.float32)
    l0 = _kiln.gpu_graph_stats()[2]
    c, ys = kiln.jit(lambda c, xs: kiln.lax.scan(body, c, xs))(c0, xs)
    assert _kiln.gpu_graph_stats()[2] == l0 + 1
    cr, yr = c0.astype(np.float64), np.empty(n)
    for i, x in enumerate(xs.astype(np.float64)):
        cr = cr * 0.99 + x * 0.01 if x[0] > 0.3 else cr * 0.995 - x * 0.002
        yr[i] = cr[1]
    np.testing.assert_allclose(np.asarray(c), cr, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ys), yr, rtol=1e-4, atol=1e-5)

    def body4(s, x):  # four carries (the device loop's bindings hold consts, a, xs, then b, ys)
        c, k, t, m = s
        c = kiln.lax.cond(x[0] > 0.3, lambda v: v * 0.99 + x * 0.01, lambda v: v, c)
        return (c, k + (x[0] > 0.3), t + c[0], jnp.maximum(m, x[1])), c[1]

    l0 = _kiln.gpu_graph_stats()[2]
    (c, k, t, m), ys = kiln.jit(lambda s, xs: kiln.lax.scan(body4, s, xs))((c0, 0, 0.0, -10.0), xs)
    assert _kiln.gpu_graph_stats()[2] == l0 + 1
    cr, kr, tr, yr = c0.astype(np.float64), 0, 0.0, np.empty(n)
    for i, x in enumerate(xs.astype(np.float64)):
        if x[0] > 0.3:
            cr, kr = cr * 0.99 + x * 0.01, kr + 1
        tr += cr[0]
        yr[i] = cr[1]
    np.testing.assert_allclose(np.asarray(c), cr, rtol=1e-4, atol=1e-5)
    assert int(k) == kr and float(m) == xs[:, 1].max()
    np.testing.assert_allclose(float(t), tr, rtol=1e-3)
    np.testing.assert_allclose(np.asarray(ys), yr, rtol=1e-4, atol=1e-5)

    def collatz(v):  # a while loop whose body branches per trip
        return kiln.lax.while_loop(lambda s: s[0] != 1, lambda s: (kiln.lax.cond(s[0] % 2 == 0, lambda a: a // 2,
                                                                                lambda a: 3 * a + 1, s[0]), s[1] + 1),
                                   (v, 0))
    l1 = _kiln.gpu_graph_stats()[2]
    _, steps = kiln.jit(collatz)(jnp.int32(27))
    assert int(steps) == 111
    assert _kiln.gpu_graph_stats()[2] == l1 + 1

    def steps3(v):  # a while loop whose body holds a switch (nested conds) of three ways
        def step(s):
            a = kiln.lax.switch(s[0] % 3, [lambda a: a // 3, lambda a: 2 * a + 1, lambda a: a - 1], s[0])
            return a, s[1] + 1
        return kiln.lax.while_loop(lambda s: s[0] > 1, step, (v, 0))

    def steps3_ref(a, n=0):
        while a > 1:
            a, n = [a // 3, 2 * a + 1, a - 1][a % 3], n + 1
        return n
    l2 = _kiln.gpu_graph_stats()[2]
    for v in (1000, 77, 5):
        assert int(kiln.jit(steps3)(jnp.int32(v))[1]) == steps3_ref(v)
    assert _kiln.gpu_graph_stats()[2] == l2 + 3
