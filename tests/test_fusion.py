"""Fusion at scale (transforms/fuse.c): a DAG of elementwise operations over one shape is one
kernel however many consumers its values have (kernels keep such values in registers), and the
row kernels of softmax/layernorm stay whole. Kernel counts are pinned here; results are checked
against NumPy in float64."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp


def _run(f, *args):
    jf = kiln.jit(f)
    out = jf(*args)
    (entry,) = jf._cache.values()
    return out, entry.exe.num_steps


def _chain(np_, x, n):
    for _ in range(n):
        x = np_.tanh(x * 1.01 + 0.5) - x * 0.1
    return x


@pytest.mark.parametrize("n", [1, 30, 200])
def test_an_unrolled_chain_with_two_uses_per_step_is_one_kernel(n):
    x = np.random.default_rng(n).standard_normal(16).astype(np.float32)
    out, steps = _run(lambda x: _chain(jnp, x, n), x)
    assert steps == 1
    np.testing.assert_allclose(np.asarray(out), _chain(np, x.astype(np.float64), n), rtol=1e-5, atol=1e-6)


def test_a_value_with_many_consumers_stays_in_registers():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 64, 33)).astype(np.float32)

    def f(np_, a, b):
        y = a * b
        z = np_.sin(y) + np_.cos(y) * y + np_.exp(-y * y)
        w = z * y - np_.tanh(z)
        return w * z + y

    out, steps = _run(lambda a, b: f(jnp, a, b), a, b)
    assert steps == 1
    np.testing.assert_allclose(np.asarray(out), f(np, a.astype(np.float64), b), rtol=2e-5, atol=2e-5)


def test_a_chain_over_a_large_array_is_one_kernel_too():
    x = np.random.default_rng(2).standard_normal((300, 500)).astype(np.float32)
    out, steps = _run(lambda x: _chain(jnp, x, 40), x)
    assert steps == 1
    np.testing.assert_allclose(np.asarray(out), _chain(np, x.astype(np.float64), 40), rtol=1e-5, atol=1e-5)


def test_values_read_at_other_elements_are_still_recomputed_or_stored():
    # x2 is read in place and through a reverse: two contexts, so the cost rule applies; the
    # result must be right either way
    x = np.random.default_rng(3).standard_normal(50).astype(np.float32)

    def f(np_, x):
        x2 = np_.exp(np_.sin(x) * 0.3)
        return x2 * x2[::-1] + x2

    out, _ = _run(lambda x: f(jnp, x), x)
    np.testing.assert_allclose(np.asarray(out), f(np, x.astype(np.float64)), rtol=1e-5)


@pytest.mark.parametrize("name,fn,want", [
    ("softmax", lambda a: kiln.nn.softmax(a, axis=-1), 1),
    ("log_softmax", lambda a: kiln.nn.log_softmax(a, axis=-1), 1),
    ("layernorm", lambda a: (a - a.mean(-1, keepdims=True)) / jnp.sqrt(a.var(-1, keepdims=True) + 1e-5), 1),
])
def test_row_kernels_stay_one_kernel(name, fn, want):
    a = np.random.default_rng(4).standard_normal((64, 300)).astype(np.float32)
    _, steps = _run(fn, a)
    assert steps == want, name


def test_repeated_layers_compile_their_kernels_once(tmp_path, monkeypatch):
    # identical layers give identical kernels: the module holds each once, every launch of a
    # repeat runs the same code
    monkeypatch.setenv("KILN_DUMP", str(tmp_path))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    rng = np.random.default_rng(5)
    ws = [rng.standard_normal((32, 32)).astype(np.float32) / 6 for _ in range(6)]
    x = rng.standard_normal((8, 32)).astype(np.float32)

    def net(np_, ws, x):
        for w in ws:
            h = x @ w
            x = x + np_.tanh(h - h.mean(-1, keepdims=True)) * 0.5
        return x

    out, steps = _run(lambda ws, x: net(jnp, ws, x), ws, x)
    np.testing.assert_allclose(np.asarray(out), net(np, [w.astype(np.float64) for w in ws], x), rtol=1e-4, atol=1e-5)
    (mlir,) = [p for p in tmp_path.iterdir() if p.name.endswith(("kernels.mlir", "kernels-gpu.mlir"))]
    functions = mlir.read_text().count("func.func @") + mlir.read_text().count("gpu.func @")
    assert steps >= 12 and functions <= 4, (steps, functions)  # GPU: partial sums have a second kernel


def test_repeated_layers_share_gpu_kernels_in_the_ptx():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((8, 32)).astype(np.float32)

    def net(x, n):
        for _ in range(n):
            x = x + jnp.tanh(x - x.mean(-1, keepdims=True)) * 0.5
        return x

    def entries(n):
        return kiln.make_jaxpr(lambda x: net(x, n))(x)._traced.builder.gpu_ptx(90).count(".entry")

    assert entries(8) == entries(2) > 0


def test_masked_attention_forward_is_two_products_and_one_row_kernel():
    rng = np.random.default_rng(7)
    q, k, v = rng.standard_normal((3, 2, 4, 16, 8)).astype(np.float32)

    def attn(np_, softmax, q, k, v):
        s = np_.einsum("bhqd,bhkd->bhqk", q, k) / 8.0
        s = np_.where(np_.tril(np_.ones((16, 16), dtype=bool)), s, -1e9)
        return np_.einsum("bhqk,bhkd->bhqd", softmax(s), v)

    def np_softmax(s):
        e = np.exp(s - s.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    out, steps = _run(lambda q, k, v: attn(jnp, lambda s: kiln.nn.softmax(s, axis=-1), q, k, v), q, k, v)
    assert steps == 3  # scores product, one row kernel (mask, scale, max, exp, sum, divide), output product
    want = attn(np, np_softmax, *(a.astype(np.float64) for a in (q, k, v)))
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-6)


def test_long_chains_in_several_programs_call_their_own_out_of_line_math():
    # kernels over few elements call tanh out of line past its 8th use; each module defines its
    # own copy (two programs loaded side by side must not clash)
    x = np.random.default_rng(8).standard_normal(16).astype(np.float32)
    for n in (20, 21, 40):
        out, steps = _run(lambda x, n=n: _chain(jnp, x, n), x)
        assert steps == 1
        np.testing.assert_allclose(np.asarray(out), _chain(np, x.astype(np.float64), n), rtol=1e-5, atol=1e-6)
    y = np.random.default_rng(9).standard_normal((3, 5)).astype(np.float64)
    out, _ = _run(lambda y: _chain(jnp, y, 25), y)  # float64 where x64 is on, else float32
    tol = 1e-12 if out.dtype == np.float64 else 1e-5
    np.testing.assert_allclose(np.asarray(out), _chain(np, y, 25), rtol=tol, atol=tol)


def test_masked_attention_gradient_computes_softmax_statistics_inside_its_row_kernels():
    # the gradient program needs softmax's max and sum in two places (the probabilities, and the
    # softmax backward); each row kernel computes them itself instead of reading buffers: six
    # products, the probabilities' row kernel, the backward's row kernel, and 2 * (p @ v)
    rng = np.random.default_rng(10)
    q, k, v = rng.standard_normal((3, 2, 2, 64, 8)).astype(np.float32)

    def attn(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / 8.0
        s = jnp.where(jnp.tril(jnp.ones((64, 64), dtype=bool)), s, -1e9)
        return jnp.einsum("bhqk,bhkd->bhqd", kiln.nn.softmax(s, axis=-1), v)

    loss = lambda q, k, v: jnp.sum(attn(q, k, v) ** 2)  # noqa: E731
    out, steps = _run(kiln.grad(loss, argnums=(0, 1, 2)), q, k, v)
    assert steps == 9

    def ref_loss(q, k, v):
        s = np.einsum("bhqd,bhkd->bhqk", q, k) / 8.0
        s = np.where(np.tril(np.ones((64, 64), dtype=bool)), s, -1e9)
        e = np.exp(s - s.max(-1, keepdims=True))
        return np.sum(np.einsum("bhqk,bhkd->bhqd", e / e.sum(-1, keepdims=True), v) ** 2)

    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    eps = 1e-6
    for which, arr in enumerate((q64, k64, v64)):  # a few finite differences per argument
        for idx in [(0, 0, 5, 1), (1, 1, 63, 7), (0, 1, 30, 4)]:
            plus, minus = [a.copy() for a in (q64, k64, v64)], [a.copy() for a in (q64, k64, v64)]
            plus[which][idx] += eps
            minus[which][idx] -= eps
            fd = (ref_loss(*plus) - ref_loss(*minus)) / (2 * eps)
            np.testing.assert_allclose(np.asarray(out[which])[idx], fd, rtol=2e-3, atol=2e-3)


def test_a_program_of_hundreds_of_distinct_kernels_compiles():
    # each step's kernel differs (its own constant), so none is shared; there is no limit on the
    # number of kernels in one program (there was one of 512: "too many kernels")
    x = np.random.default_rng(11).standard_normal((4, 8)).astype(np.float32)

    def f(np_, x):
        for i in range(600):
            x = np_.tanh(x - x.mean(-1, keepdims=True) * (1 + i * 1e-3))
        return x

    out, steps = _run(lambda x: f(jnp, x), x)
    assert steps > 512
    np.testing.assert_allclose(np.asarray(out), f(np, x.astype(np.float64)), rtol=1e-4, atol=1e-5)


def test_a_causal_mask_is_computed_in_the_kernel_never_stored():
    # under jit, iota is staged into the program (as in JAX): tril's mask is an expression of
    # two iotas that the row kernel computes, not a constant array captured from Python
    t = 16
    s = np.random.default_rng(12).standard_normal((2, t, t)).astype(np.float32)

    def f(s):
        return kiln.nn.softmax(jnp.where(jnp.tril(jnp.ones((t, t), dtype=bool)), s, -1e9), axis=-1)

    text = str(kiln.make_jaxpr(f)(s))
    assert "iota" in text and "bool[16,16]" not in text.split(".")[0]  # no mask among the inputs
    out, steps = _run(f, s)
    assert steps == 1
    m = np.where(np.tril(np.ones((t, t), bool)), s.astype(np.float64), -1e9)
    e = np.exp(m - m.max(-1, keepdims=True))
    np.testing.assert_allclose(np.asarray(out), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_iota_is_staged_under_jit_and_computed_at_once_outside():
    seen = []

    def f(x):
        i = kiln.lax.iota(np.int32, 3)
        seen.append(type(i).__name__)
        return x + i

    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(kiln.jit(f)(x)), x + np.arange(3))
    assert seen[-1] == "Tracer"
    np.testing.assert_array_equal(np.asarray(f(x)), x + np.arange(3))
    assert seen[-1] == "Array"
    g = kiln.grad(lambda x: jnp.sum(f(x) ** 2))(x)  # grad outside jit: concrete, computed at once
    np.testing.assert_allclose(np.asarray(g), 2 * (x + np.arange(3)))
    assert seen[-1] == "Array"


@pytest.mark.parametrize("shape,perm", [((3, 70, 45), (0, 2, 1)), ((2, 3, 33, 100), (0, 1, 3, 2)),
                                        ((4, 40, 3, 50), (0, 3, 2, 1)), ((2, 64, 4, 32), (0, 2, 1, 3))])
def test_transposed_reads_in_tiles_match_numpy(shape, perm):
    # elementwise kernels reading an operand transposed walk the last two dims in 32x32 tiles
    rng = np.random.default_rng(5)
    a = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(tuple(shape[p] for p in perm)).astype(np.float32)
    got = kiln.jit(lambda a, b: jnp.tanh(jnp.transpose(a, perm)) * 2 + b)(a, b)
    want = np.tanh(np.transpose(a.astype(np.float64), perm)) * 2 + b
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,new", [((8, 64, 256), (-1,)), ((6, 40, 50), (6, -1)), ((4, 33, 70), (-1, 4))])
def test_kernels_writing_a_reshape_iterate_in_the_computed_shape(shape, new):
    # the flattened log_softmax of a loss: loops over (8, 64, 256), stored as 131,072 elements
    rng = np.random.default_rng(9)
    x = rng.random(shape).astype(np.float32) + 0.1
    got = kiln.jit(lambda x: (x - jnp.log(x.sum(-1, keepdims=True))).reshape(new))(x)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(np.asarray(got), (x64 - np.log(x64.sum(-1, keepdims=True))).reshape(new), rtol=2e-6)
    got = kiln.jit(lambda x: (jnp.swapaxes(x, 1, 2) * 2).reshape(new))(x)
    np.testing.assert_allclose(np.asarray(got), (np.swapaxes(x64, 1, 2) * 2).reshape(new), rtol=1e-6)


def test_a_split_gradient_sums_its_pads_exactly():
    # the gradient of split is a sum of pads; CPU kernels compute each pad's operand only inside it
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 6, 96)).astype(np.float32)
    w = rng.standard_normal((4, 32, 6)).astype(np.float32)

    def loss(x):
        a, b, c = jnp.split(x, 3, axis=-1)
        return jnp.sum(a * jnp.swapaxes(w, 1, 2)) + 2 * jnp.sum(jnp.tanh(b)) - jnp.sum(c * c)

    g = np.asarray(kiln.jit(kiln.grad(loss))(x))
    x64 = x.astype(np.float64)
    want = np.concatenate([np.swapaxes(w, 1, 2), 2 * (1 - np.tanh(x64[..., 32:64]) ** 2), -2 * x64[..., 64:]], -1)
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
    z = np.asarray(kiln.jit(kiln.grad(lambda x: jnp.sum(jnp.split(x, 3, axis=-1)[1] * 0.0)))(x))
    assert np.all(z == 0) and not np.any(np.signbit(z[..., :32]))
