"""Sorting on the GPU (runtime/gpusort.c: kiln's radix sort kernels, written as PTX in
runtime/gpusort_ptx.c): jnp.sort, jnp.argsort, jnp.lexsort, lax.sort with several operands and
keys, lax.top_k, on every real dtype, single rows up to 2^24 elements and batches of rows along
any axis, against NumPy's stable sort bit for bit (NaN last, -0 equal to +0 and kept in its
place, NaN payloads kept); no step on the host; inside a lax.scan body (a CUDA graph, a
device-side loop); KILN_GPU_SORT=0 keeps the host routine. Tests marked `gpu` need an NVIDIA GPU
and are skipped elsewhere (tests/test_sort_ptx.py runs the same kernels on a PTX interpreter)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import _kiln

try:
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None

HAS_GPU = kiln.default_backend() == "gpu"
_needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU")


def gpu(test):
    """Marks a test `gpu` (select them with `pytest -m gpu`) and skips it without a GPU."""
    return pytest.mark.gpu(_needs_gpu(test))


def _on_device(jf):
    """The jitted function's one executable ran every step on the GPU (no host round trip)."""
    (entry,) = jf._cache.values()
    assert entry.exe.device == 1
    assert entry.exe.host_steps == [], entry.exe.host_steps


def _run(fn, *args):
    jf = kiln.jit(fn)
    out = jf(*args)
    _on_device(jf)
    return out


def _floats(rng, shape, dtype):
    """Normal floats with duplicates, NaNs (a negative one, one with a payload), infinities and
    both zeros sprinkled in."""
    n = int(np.prod(shape))
    x = rng.standard_normal(n)
    x[rng.integers(0, n, n // 4 + 1)] = np.round(x[rng.integers(0, n, n // 4 + 1)])
    k = min(n, 8 + n // 1000)
    x[rng.integers(0, n, k)] = rng.choice([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, -0.0], k)
    x = x.astype(dtype)
    if n > 40 and np.dtype(dtype) in (np.float32, np.float64):
        bits = x.view(np.uint32 if np.dtype(dtype) == np.float32 else np.uint64)
        bits[n // 2] = 0x7FC00123 if np.dtype(dtype) == np.float32 else 0x7FF8000000000123
    return x.reshape(shape)


def _data(rng, shape, dtype):
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        x = rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
        return x if rng.random() < 0.5 else x // dt.type(max(2, min(1009, int(info.max) // 4)))  # many ties
    return _floats(rng, shape, np.float32 if dt.itemsize < 4 else dt).astype(dt)


_BF16 = np.dtype(ml_dtypes.bfloat16) if ml_dtypes is not None else None


def _key(a):
    """A NumPy-sortable key with kiln's order (floats, bfloat16 among them, through float64)."""
    return a.astype(np.float64) if a.dtype.kind == "f" or a.dtype == _BF16 else a


def _perm(got, perm):
    """NumPy's permutation in the index dtype kiln returned (int32, or int64 under x64)."""
    return perm.astype(np.asarray(got).dtype)


def _np_sort(ops, num_keys=1, axis=-1):
    keys = [_key(o) for o in ops[:num_keys]]
    perm = np.lexsort(keys[::-1], axis=axis) if num_keys > 1 else np.argsort(keys[0], axis=axis, kind="stable")
    return [np.take_along_axis(o, perm, axis=axis) for o in ops], perm


def _same_bits(got, want):
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    g = got.reshape(got.size, -1).view(np.uint8) if got.size else got
    w = want.reshape(want.size, -1).view(np.uint8) if want.size else want
    if not np.array_equal(g, w):
        bad = np.nonzero((g != w).reshape(got.size, -1).any(axis=1))[0]
        raise AssertionError(f"{bad.size} of {got.size} differ, first at {bad[:4]}: {got.reshape(-1)[bad[:4]]} "
                             f"!= {want.reshape(-1)[bad[:4]]}")


DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.float16,
          "bfloat16", np.float32, np.float64]


def _dtype(d, request):
    if d == "bfloat16":
        if ml_dtypes is None:
            pytest.skip("needs ml_dtypes")
        return np.dtype(ml_dtypes.bfloat16)
    d = np.dtype(d)
    if d.itemsize == 8:
        request.getfixturevalue("x64")
    return d


@gpu
@pytest.mark.parametrize("n", [1, 7, 1000, 2 ** 16 + 3])
@pytest.mark.parametrize("dtype", DTYPES)
def test_sort_and_argsort_match_numpy_bit_for_bit(dtype, n, request):
    dt = _dtype(dtype, request)
    rng = np.random.default_rng(n + 17 * DTYPES.index(dtype))
    x = _data(rng, (n,), dt)
    (want,), perm = _np_sort([x])
    _same_bits(_run(jnp.sort, x), want)
    got = _run(lambda a: jnp.argsort(a), x)
    _same_bits(got, _perm(got, perm))


@gpu
@pytest.mark.parametrize("op", ["sort", "argsort"])
def test_two_to_the_24_floats(op):
    rng = np.random.default_rng(24)
    x = _floats(rng, (1 << 24,), np.float32)
    (want,), perm = _np_sort([x])
    if op == "sort":
        _same_bits(_run(jnp.sort, x), want)
    else:
        got = _run(jnp.argsort, x)
        _same_bits(got, _perm(got, perm))


@gpu
@pytest.mark.parametrize("shape,axis", [((1000, 1000), -1), ((1000, 1000), 0), ((4096, 33), -1), ((33, 4096), 0),
                                        ((3, 5000, 2), 1), ((2, 70000), -1)])
def test_batched_rows_along_any_axis(shape, axis):
    rng = np.random.default_rng(sum(shape))
    x = _floats(rng, shape, np.float32)
    (want,), perm = _np_sort([x], axis=axis)
    _same_bits(_run(lambda a: jnp.sort(a, axis=axis), x), want)
    got = _run(lambda a: jnp.argsort(a, axis=axis), x)
    _same_bits(got, _perm(got, perm))


@gpu
@pytest.mark.parametrize("n", [300, 5000])
def test_lax_sort_with_several_operands_and_keys(n, x64):
    rng = np.random.default_rng(n)
    a = rng.integers(-3, 3, (4, n)).astype(np.int16)
    b = _floats(rng, (4, n), np.float64)
    b[:, : n // 3] = b[:, n // 3: 2 * (n // 3)]  # ties on both keys
    c = rng.standard_normal((4, n)).astype(np.float32)
    d = rng.integers(0, 2, (4, n)).astype(np.bool_)
    for num_keys in (1, 2, 3):
        want, _ = _np_sort([a, b, c, d], num_keys=num_keys)
        got = _run(lambda *o: kiln.lax.sort(o, dimension=1, num_keys=num_keys), a, b, c, d)
        for g, w in zip(got, want):
            _same_bits(g, w)
    keys = [rng.integers(0, 4, n).astype(np.int32), _floats(rng, (n,), np.float32), rng.integers(0, 3, n)]
    got = _run(lambda *k: jnp.lexsort(k), *keys)
    _same_bits(got, _perm(got, np.lexsort([_key(k) for k in keys])))


@gpu
def test_top_k_on_the_device():
    rng = np.random.default_rng(5)
    x = _floats(rng, (64, 3000), np.float32)
    vals, idx = _run(lambda a: kiln.lax.top_k(a, 10), x)
    # XLA's TopK order: IEEE total order (+NaN first, -NaN last, +0 above -0), ties by index
    i = np.broadcast_to(np.arange(3000), x.shape)
    b = x.view(np.uint32).astype(np.int64)
    total = np.where(b >> 31, 0xFFFFFFFF - b, b + 0x80000000)
    order = np.lexsort((-i, total), axis=-1)[:, ::-1][:, :10]
    _same_bits(idx, order.astype(np.int32))
    _same_bits(vals, np.take_along_axis(x, order, axis=-1))


@gpu
def test_eager_sort_and_its_gradient():
    rng = np.random.default_rng(6)
    x = rng.standard_normal(10000).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(jnp.sort(jnp.asarray(x))), np.sort(x))
    g = kiln.jit(kiln.grad(lambda a: (jnp.sort(a) * jnp.arange(a.size)).sum()))(x)
    want = np.empty_like(x)
    want[np.argsort(x, kind="stable")] = np.arange(x.size)
    np.testing.assert_array_equal(np.asarray(g), want)


@gpu
def test_sort_inside_a_scan_body_is_captured_into_a_cuda_graph():
    # each trip sorts its slice: the sort kernels are captured, either with the whole program into
    # one CUDA graph (what a short scan should get: on an H200 these 80 trips were no device-side
    # loop, and that they were a graph is not yet confirmed there) or as the body of a
    # device-side loop; no step runs on the host
    rng = np.random.default_rng(7)
    xs = _floats(rng, (80, 3, 3000), np.float32)

    def body(c, x):
        s = jnp.sort(x + c, axis=-1)
        return c + 1.0, (s, jnp.argsort(x, axis=-1))

    g0, _, l0 = _kiln.gpu_graph_stats()
    jf = kiln.jit(lambda xs: kiln.lax.scan(body, np.float32(0.0), xs))
    c, (ss, ii) = jf(xs)
    _on_device(jf)
    g1, _, l1 = _kiln.gpu_graph_stats()
    assert (g1, l1) != (g0, l0), "the scan ran step by step from the host"
    want = np.sort(xs + np.arange(80, dtype=np.float32)[:, None, None], axis=-1, kind="stable")
    np.testing.assert_array_equal(np.asarray(ss), want)
    _same_bits(ii, _perm(ii, np.argsort(xs, axis=-1, kind="stable")))


@gpu
def test_the_host_routine_stays_behind_a_switch():
    code = ("import numpy as np, kiln, kiln.numpy as jnp\n"
            "jf = kiln.jit(jnp.sort)\nx = np.random.default_rng(0).standard_normal(5000).astype(np.float32)\n"
            "assert np.array_equal(np.asarray(jf(x)), np.sort(x))\n"
            "(e,) = jf._cache.values()\nprint(e.exe.host_steps)\n")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, KILN_GPU_SORT="0"), capture_output=True,
                         text=True, check=True).stdout
    assert "sort" in out
    log = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, KILN_LOG_COMPILES="1"),
                         capture_output=True, text=True, check=True)
    assert "[]" in log.stdout and "sort: radix sort" in log.stderr, log.stderr


@gpu
def test_permutation_sorts_by_random_keys_as_numpy_does():
    """random.permutation's sorts carry the random-keys hint: passes over the keys' high 24 bits,
    then ks_runs inside runs of equal ones. Each round must equal NumPy's stable sort by the same
    keys, rows of a vmap too."""
    from kiln import random as kr
    n = 3 * 10 ** 5
    key = kr.PRNGKey(3)
    got = np.asarray(kiln.jit(lambda k: kr.permutation(k, n))(key))
    want = np.arange(n, dtype=got.dtype)
    rounds = int(np.ceil(3 * np.log(n) / np.log(np.iinfo(np.uint32).max)))
    k = key
    for _ in range(rounds):
        sp = np.asarray(kr._split(k))
        k = sp[0]
        bits = np.asarray(kr._random_bits(sp[1], 32, (n,)))
        want = want[np.argsort(bits, kind="stable")]
    np.testing.assert_array_equal(got, want)
    keys = kr.split(kr.PRNGKey(4), 3)
    rows = np.asarray(kiln.jit(kiln.vmap(lambda k: kr.permutation(k, 9000)))(keys))
    for r, kk in zip(rows, keys):
        np.testing.assert_array_equal(r, np.asarray(kr.permutation(kk, 9000)))
        assert sorted(r) == list(range(9000))


@gpu
@pytest.mark.parametrize("highs", [2 ** 24, 300, 2])
def test_the_random_keys_hint_sorts_any_keys_right(highs):
    """The hint only makes ks_runs' work longer when keys are not random: runs of equal high bits
    of any length (up to the whole row, done serially) still sort stably."""
    from kiln import lax
    rng = np.random.default_rng(highs)
    n = 50_000
    hi = rng.integers(0, highs, n, dtype=np.uint64) * np.uint64(0x9E3779) & np.uint64(0xFFFFFF)
    x = (hi << np.uint64(8) | rng.integers(0, 7, n, dtype=np.uint64)).astype(np.uint32)
    v = rng.standard_normal(n).astype(np.float32)
    sx, sv = _run(lambda a, b: lax._sort_key_val_random(a, b, 0), x, v)
    (wx, wv), _ = _np_sort([x, v])
    _same_bits(sx, wx)
    _same_bits(sv, wv)
