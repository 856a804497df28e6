"""The C fast path of the eager operators + - * / (python/ext/array.c) against the Python road
(kiln.numpy's functions) and NumPy: values, dtypes, weak types, errors, tracing, lifetime."""
import gc
import operator
import sys
import weakref

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln._src import core

OPS = [(operator.add, jnp.add), (operator.sub, jnp.subtract), (operator.mul, jnp.multiply),
       (operator.truediv, jnp.true_divide)]


def _rand(rng, dtype, shape):
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -20), min(info.max, 20), size=shape).astype(dtype)


def _same(fast, slow):
    assert type(fast) is core.Array
    assert fast.shape == slow.shape and fast.dtype == slow.dtype
    assert bool(fast.weak_type) == bool(slow.weak_type)
    np.testing.assert_array_equal(np.asarray(fast), np.asarray(slow))


@pytest.mark.parametrize("dtype", ["float32", "int32", "int8", "uint8", "float16"])
@pytest.mark.parametrize("op,fn", OPS, ids=["add", "sub", "mul", "div"])
def test_array_array_matches_python_road_and_numpy(dtype, op, fn):
    rng = np.random.default_rng()
    a, b = _rand(rng, dtype, (3, 5)), _rand(rng, dtype, (3, 5))
    if op is operator.truediv:
        b[b == 0] = 3
    x, y = jnp.asarray(a), jnp.asarray(b)
    fast = op(x, y)
    _same(fast, fn(x, y))
    want = op(a.astype(np.float64), b.astype(np.float64))
    if np.dtype(dtype).kind == "f":
        # float16: half an ulp relative, and half a subnormal's spacing (2^-25) for products that small
        np.testing.assert_allclose(np.asarray(fast, np.float64), want, rtol=2e-3 if dtype == "float16" else 1e-6,
                                   atol=2.0 ** -25 if dtype == "float16" else 0)
    elif op is not operator.truediv:
        np.testing.assert_array_equal(np.asarray(fast), op(a, b))  # wraps as NumPy does


@pytest.mark.parametrize("dtype", ["float32", "int32", "int8", "uint8"])
@pytest.mark.parametrize("op,fn", OPS, ids=["add", "sub", "mul", "div"])
@pytest.mark.parametrize("scalar", [3, -2, 2.5, 7.0])
def test_array_scalar_both_sides(dtype, op, fn, scalar):
    rng = np.random.default_rng()
    a = _rand(rng, dtype, (4,)) + (1 if np.dtype(dtype).kind != "f" else 0)
    x = jnp.asarray(a)
    for left, right in ((x, scalar), (scalar, x)):
        try:
            slow = fn(left, right)
        except Exception as e:  # noqa: BLE001 - the fast road must raise the same
            with pytest.raises(type(e)):
                op(left, right)
            continue
        _same(op(left, right), slow)
        with np.errstate(all="ignore"):
            ref = op(*(np.asarray(v, np.float64) if isinstance(v, core.Array) else v for v in (left, right)))
        if slow.dtype.kind == "f" and np.dtype(dtype).kind == "f":
            np.testing.assert_allclose(np.asarray(op(left, right), np.float64), ref, rtol=1e-6)


def test_weak_types_and_promotion_follow_jax():
    x = jnp.asarray(np.arange(4, dtype=np.float32))
    w = jnp.asarray(2.0)  # weak float
    assert (x * w).dtype == np.float32 and not (x * w).weak_type
    assert (w * w).weak_type
    i = jnp.asarray(np.arange(4, dtype=np.int32))
    assert (i * 2).dtype == np.int32 and (i / 2).dtype == np.float32  # true division of ints: slow road
    assert (i * 2.5).dtype == np.float32
    np.testing.assert_allclose(np.asarray(i * 2.5), np.arange(4) * 2.5)
    b = jnp.asarray(np.array([True, False]))
    np.testing.assert_array_equal(np.asarray(b + b), [True, False])  # bool add is logical or
    small = jnp.asarray(np.arange(3, dtype=np.int8)) + 1000  # JAX wraps a weak int: [-24, -23, -22]
    assert small.dtype == np.int8
    np.testing.assert_array_equal(np.asarray(small), [-24, -23, -22])
    big = jnp.asarray(np.arange(3, dtype=np.int64 if kiln.config.jax_enable_x64 else np.int32))
    with pytest.raises(OverflowError):
        big + 2 ** 70


def test_errors_name_the_operation_and_library_keeps_working():
    x = jnp.asarray(np.ones((3,), np.float32))
    y = jnp.asarray(np.ones((4,), np.float32))
    with pytest.raises((ValueError, TypeError), match=r"\(3,\).*\(4,\)|\(4,\).*\(3,\)"):
        x + y
    with pytest.raises(TypeError):
        x + "a"
    with pytest.raises(TypeError):
        None * x
    np.testing.assert_array_equal(np.asarray(x * 2), [2, 2, 2])


def test_broadcasting_and_mixed_dtypes_take_the_python_road():
    rng = np.random.default_rng()
    a, b = rng.standard_normal((3, 1)).astype(np.float32), rng.standard_normal((4,)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(jnp.asarray(a) - jnp.asarray(b)), a - b, rtol=1e-6)
    c = rng.standard_normal(4)
    r = jnp.asarray(b) * c  # a NumPy float64 operand
    np.testing.assert_allclose(np.asarray(r), b * c.astype(r.dtype), rtol=1e-6)
    r2 = c * jnp.asarray(b)
    np.testing.assert_allclose(np.asarray(r2), c.astype(r2.dtype) * b, rtol=1e-6)


def test_operators_on_tracers_and_constants_under_jit():
    rng = np.random.default_rng()
    c = jnp.asarray(rng.standard_normal(5).astype(np.float32))
    v = rng.standard_normal(5).astype(np.float32)

    def f(y):
        return (c * 2 - 1) / y + y * c

    np.testing.assert_allclose(np.asarray(kiln.jit(f)(v)), np.asarray(f(jnp.asarray(v))), rtol=1e-6)
    g = kiln.grad(lambda y: jnp.sum(f(y)))(jnp.asarray(v))
    cc = np.asarray(c, np.float64)
    np.testing.assert_allclose(np.asarray(g), -(cc * 2 - 1) / v.astype(np.float64) ** 2 + cc, rtol=1e-4)
    out = kiln.vmap(lambda y: y * 3 + c)(jnp.asarray(rng.standard_normal((2, 5)).astype(np.float32)))
    assert out.shape == (2, 5)


def test_cached_and_freed():
    x = jnp.asarray(np.arange(6, dtype=np.float32))
    x * 3 + 1
    before = kiln._kiln.compile_stats()[0]
    for _ in range(50):
        x * 3 + 1
    assert kiln._kiln.compile_stats()[0] == before  # no recompilation
    r = x * 2
    ref = weakref.ref(r)
    del r
    gc.collect()
    assert ref() is None
    m = memoryview(x * 2)  # the buffer protocol of the C base class
    assert m.tolist() == [0, 2, 4, 6, 8, 10]


@pytest.mark.parametrize("fast_first", [True, False])
def test_bind_and_the_fast_path_share_one_executable_cache(fast_first):
    # Issue 9 item 6: one eager dispatcher and one executable cache. The fast path's `x - y` and
    # core.bind("sub", ...) on the same avals compile one executable between them, whichever
    # comes first; bind on concrete arrays runs without entering Python.
    n = 37 if fast_first else 41  # shapes no other test uses: the first call compiles
    x = jnp.asarray(np.arange(n, dtype=np.float32))
    y = jnp.asarray(np.ones(n, dtype=np.float32))
    old = kiln._kiln.eager_fusion(False)  # launched by itself, the fast path needs an executable
    try:
        before = kiln._kiln.compile_stats()[0]
        first, second = (lambda: x - y), (lambda: core.bind("sub", [x, y])[0])
        if not fast_first:
            first, second = second, first
        a = first()
        assert kiln._kiln.compile_stats()[0] == before + 1
        calls = []
        sys.setprofile(lambda frame, event, arg: calls.append(frame.f_code.co_name) if event == "call" else None)
        try:
            b = second()
        finally:
            sys.setprofile(None)
        assert kiln._kiln.compile_stats()[0] == before + 1
        assert calls == ["<lambda>"], calls
        np.testing.assert_array_equal(np.asarray(a), np.arange(n, dtype=np.float32) - 1)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    finally:
        kiln._kiln.eager_fusion(old)


def test_common_cases_do_not_enter_python():
    x = jnp.asarray(np.arange(6, dtype=np.float32))
    y = jnp.asarray(np.ones(6, dtype=np.float32))
    exprs = [lambda: x * 2 + 1, lambda: 1.5 - x / y, lambda: x * y - x]
    for e in exprs:
        e()  # compile and cache
    calls = []
    sys.setprofile(lambda frame, event, arg: calls.append(frame.f_code.co_name) if event == "call" else None)
    try:
        for e in exprs:
            e()
    finally:
        sys.setprofile(None)
    assert calls == ["<lambda>"] * len(exprs), calls


def test_jit_calls_of_a_known_signature_run_in_c():
    rng = np.random.default_rng()
    a, b = rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    x, y = jnp.asarray(a), jnp.asarray(b)
    c = jnp.asarray(rng.standard_normal(5).astype(np.float32))  # a constant of the program
    f = kiln.jit(lambda x, y: (x + y * c, {"p": x * y}))
    g = kiln.jit(lambda x: x - c)
    f(x, y), g(x)
    calls = []
    sys.setprofile(lambda frame, event, arg: calls.append(frame.f_code.co_name) if event == "call" else None)
    try:
        s, d = f(x, y)
        r = g(x)
    finally:
        sys.setprofile(None)
    assert calls[0] == "tree_unflatten" and not {"_call", "_signature", "run", "bind"} & set(calls), calls
    cc = np.asarray(c)
    np.testing.assert_allclose(np.asarray(s), a + b * cc, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(d["p"]), a * b, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(r), a - cc, rtol=1e-6)
    # other signatures, keywords, static arguments and non-array leaves take the Python road
    np.testing.assert_allclose(np.asarray(f(x=x, y=y)[0]), a + b * cc, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g(a)), a - cc, rtol=1e-6)
    h = kiln.jit(lambda x, n: x * n, static_argnums=1)
    np.testing.assert_allclose(np.asarray(h(x, 3)), a * 3, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(h(x, 4)), a * 4, rtol=1e-6)
    with pytest.raises((TypeError, ValueError)):
        g(jnp.asarray(np.ones(3, np.float32)))  # (3,) against c's (5,)


def test_configuration_change_drops_cached_calls():
    x = jnp.asarray(np.arange(1, 5, dtype=np.int32))
    f = kiln.jit(lambda x: x + jnp.arange(4))  # arange's default integer follows the setting
    assert f(x).dtype == np.int32
    try:
        kiln.config.update("jax_enable_x64", True)
        assert f(x).dtype == np.int64
        np.testing.assert_array_equal(np.asarray(f(x)), np.arange(1, 5) + np.arange(4))
        np.testing.assert_allclose(np.asarray(x * 2.5), np.arange(1, 5) * 2.5)
    finally:
        kiln.config.update("jax_enable_x64", False)
    assert f(x).dtype == np.int32


# ---- eager fusion: chains of the fast path's operations run as one launch ----

def _launches():
    return kiln._kiln.eager_stats()[0]


@pytest.fixture
def fusion():
    old = kiln._kiln.eager_fusion(True)  # on unless KILN_EAGER_FUSION=0
    yield
    kiln._kiln.eager_fusion(old)


def test_chains_fuse_into_one_launch_and_match_unfused_and_numpy(fusion):
    rng = np.random.default_rng()
    a, b = rng.standard_normal((4, 33)).astype(np.float32), rng.uniform(1, 2, (4, 33)).astype(np.float32)
    x, y = jnp.asarray(a), jnp.asarray(b)

    def chain(x, y):
        t = x * 2 - y
        return (t * t + 3) / y - (1.5 - t) * x

    before = _launches()
    fused = chain(x, y)
    assert _launches() == before  # nothing ran yet
    got = np.asarray(fused)
    assert _launches() == before + 1
    old = kiln._kiln.eager_fusion(False)
    try:
        unfused = np.asarray(chain(x, y))
    finally:
        kiln._kiln.eager_fusion(old)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(got, chain(a64, b64), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, unfused, rtol=1e-6, atol=1e-6)


def test_pending_results_work_everywhere_an_array_does(fusion):
    rng = np.random.default_rng()
    a = rng.standard_normal(16).astype(np.float32)
    x = jnp.asarray(a)
    p = x * 3 + 1
    q = p - 2
    assert p.shape == (16,) and p.dtype == np.float32
    np.testing.assert_allclose(np.asarray(jnp.sin(q)), np.sin(a * 3 - 1), rtol=1e-5, atol=1e-6)  # a slow-road op
    np.testing.assert_allclose(np.asarray(kiln.jit(lambda v: v * v)(x * 2)), (2 * a) ** 2, rtol=1e-6)
    c = x + 1  # a pending constant captured by a traced function
    np.testing.assert_allclose(np.asarray(kiln.jit(lambda v: v - c)(x)), -np.ones(16), rtol=1e-6)
    g = kiln.grad(lambda v: jnp.sum(v * (x * 2)))(x)
    np.testing.assert_allclose(np.asarray(g), 2 * a, rtol=1e-6)
    np.testing.assert_allclose(np.asarray((x * 2)[3:5]), 2 * a[3:5], rtol=1e-6)
    np.testing.assert_allclose(np.asarray((x + 0).at[0].set(5.0))[0], 5.0)
    r = x / 4
    assert r.block_until_ready() is r and r.is_ready()
    assert float(jnp.sum(x * 0 + 1)) == 16.0
    m = kiln.device_put(x * 2, kiln.devices("cpu")[0])
    np.testing.assert_allclose(np.asarray(m), 2 * a, rtol=1e-6)


def test_shared_and_held_intermediates_stay_correct(fusion):
    rng = np.random.default_rng()
    a = rng.standard_normal(8).astype(np.float32)
    x = jnp.asarray(a)
    y = x * 2
    z = y + y * y  # y used twice inside one chain
    w = y - 1
    np.testing.assert_allclose(np.asarray(z), 2 * a + 4 * a * a, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(w), 2 * a - 1, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(y), 2 * a, rtol=1e-6)  # held by the user, read last


def test_long_chains_are_cut_and_stay_exact(fusion):
    a = np.linspace(-1, 1, 10).astype(np.float32)
    x = jnp.asarray(a)
    ref = a.astype(np.float64)
    before = _launches()
    for i in range(100):
        x = x * 0.5 + 0.25
        ref = ref * 0.5 + 0.25
    np.testing.assert_allclose(np.asarray(x), ref, rtol=1e-5)
    assert 100 / 16 <= _launches() - before <= 100 / 8 + 1  # chains of up to 16 operations


def test_dropped_results_still_run_once(fusion):
    x = jnp.asarray(np.ones(5, np.float32))
    before = _launches()
    for _ in range(10):
        x * 2 + 1  # never read: each expression runs as one launch when it is dropped
    gc.collect()
    assert _launches() - before == 10


def test_interpreter_exits_cleanly_with_pending_results(tmp_path):
    import subprocess
    code = ("import numpy as np, kiln.numpy as jnp\n"
            "x = jnp.asarray(np.ones(4, np.float32))\n"
            "keep = [x * i + 1 for i in range(50)]\n"
            "print(float(keep[3][0]))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "4.0"


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_unary_math_and_max_min_fuse_and_match_numpy(dtype, fusion, x64):
    rng = np.random.default_rng()
    if dtype == "int32":
        a = rng.integers(-50, 50, size=(6, 7)).astype(dtype)
    else:
        a = rng.uniform(0.1, 2.0, size=(6, 7)).astype(dtype)
    x = jnp.asarray(a)
    lax = kiln.lax
    before = _launches()
    if dtype == "int32":
        got = jnp.maximum(-x, 3) - jnp.abs(x) * 2 + jnp.minimum(x, x * 0)
        want = np.maximum(-a, 3) - np.abs(a) * 2 + np.minimum(a, 0)
        np.testing.assert_array_equal(np.asarray(got), want)
    else:
        got = (jnp.tanh(x * 2 - 1) + jnp.exp(-x) * jnp.log(x) - jnp.sqrt(x) + lax.rsqrt(x) + jnp.sin(x) * jnp.cos(x)
               + jnp.log1p(x) - jnp.expm1(-x) + kiln.nn.sigmoid(x) + jnp.maximum(x - 1, 0) + jnp.minimum(x, 1.5))
        f = a.astype(np.float64)
        want = (np.tanh(f * 2 - 1) + np.exp(-f) * np.log(f) - np.sqrt(f) + 1 / np.sqrt(f) + np.sin(f) * np.cos(f)
                + np.log1p(f) - np.expm1(-f) + 1 / (1 + np.exp(-f)) + np.maximum(f - 1, 0) + np.minimum(f, 1.5))
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5 if dtype == "float32" else 1e-12, atol=1e-6)
    assert got.dtype == dtype
    assert _launches() - before <= 3  # chains of up to 16 operations: one launch per chain
    old = kiln._kiln.eager_fusion(False)
    try:
        if dtype != "int32":
            np.testing.assert_allclose(np.asarray(jnp.tanh(x * 2 - 1)), np.tanh(a.astype(np.float64) * 2 - 1),
                                       rtol=1e-5 if dtype == "float32" else 1e-12)
    finally:
        kiln._kiln.eager_fusion(old)


def test_zero_dim_operands_and_unsupported_cases_take_the_right_road(fusion):
    x = jnp.asarray(np.arange(1, 5, dtype=np.float32))
    s = jnp.asarray(np.float32(3))  # a 0-d array of the same dtype: fused
    np.testing.assert_allclose(np.asarray(kiln.lax.max(x, s) + kiln.lax.mul(s, x)), [6, 9, 12, 16])
    u = jnp.asarray(np.arange(4, dtype=np.uint8))
    np.testing.assert_array_equal(np.asarray(-u), (-np.arange(4, dtype=np.uint8)))  # slow road, wraps
    i = jnp.asarray(np.arange(4, dtype=np.int32))
    np.testing.assert_allclose(np.asarray(jnp.exp(i)), np.exp(np.arange(4)), rtol=1e-6)  # promoted to float first
    with pytest.raises((TypeError, ValueError)):
        kiln.lax.max(x, jnp.asarray(np.ones(3, np.float32)))


def test_threads_sharing_pending_results_get_correct_values(fusion):
    import threading
    rng = np.random.default_rng()
    a = rng.standard_normal(64).astype(np.float32)
    x = jnp.asarray(a)
    shared = [jnp.tanh(x * 2 + 1) for _ in range(50)]  # pending, read by every thread
    want = np.tanh(a.astype(np.float64) * 2 + 1)
    errors = []

    def work(seed):
        try:
            r = np.random.default_rng(seed)
            for i in range(100):
                p = shared[int(r.integers(50))]
                y = (p - 1) * 3 + x * float(i % 5)  # chains on top of a shared pending value
                np.testing.assert_allclose(np.asarray(y), (want - 1) * 3 + a * (i % 5), rtol=1e-4, atol=1e-5)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    for p in shared:
        np.testing.assert_allclose(np.asarray(p), want, rtol=1e-5)


def test_memory_shared_with_other_libraries_is_never_read_late(fusion):
    """Another library may write memory shared through DLPack: work pending on it runs before
    the memory is exported, and work on imported memory is not deferred."""
    from kiln import dlpack
    rng = np.random.default_rng()
    a = rng.standard_normal(16).astype(np.float32)
    x = jnp.asarray(a)
    y = x * 2 + 1  # pending, reads x
    z = jnp.exp(x - 1)
    before = _launches()
    capsule = x.__dlpack__()  # x exported (to any library, on any device): y and z computed now
    assert _launches() - before == 2
    del capsule
    np.testing.assert_allclose(np.asarray(y), a * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(z), np.exp(a.astype(np.float64) - 1), rtol=1e-5)
    host = rng.standard_normal(16).astype(np.float32)
    imported = dlpack.from_dlpack(host)  # shares host's memory
    w = imported * 3  # runs at once: host may change after this line
    keep = host.copy()
    host[:] = -1
    np.testing.assert_allclose(np.asarray(w), keep * 3, rtol=1e-6)
