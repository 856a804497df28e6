"""lax.cond / switch / fori_loop / scan / map / while_loop, eagerly and under jit, grad and vmap,
against Python evaluations."""
import collections

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


def branchy(x):
    return lax.cond(jnp.sum(x) > 0, lambda v: jnp.sin(v) * 2, lambda v: v ** 2, x)


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("wrap", ["eager", "jit"])
def test_cond_values(sign, wrap):
    x = np.random.default_rng(0).uniform(0.1, 1.0, 4).astype(np.float32) * sign
    want = np.sin(x) * 2 if x.sum() > 0 else x ** 2
    f = kiln.jit(branchy) if wrap == "jit" else branchy
    np.testing.assert_allclose(np.asarray(f(jnp.asarray(x))), want, rtol=1e-6)


@pytest.mark.parametrize("x", [0.7, -0.7])
def test_cond_gradient_is_the_taken_branch(x):
    f = lambda v: lax.cond(v > 0, jnp.sin, lambda u: jnp.log(-u), v)  # log(-v) is NaN for v > 0
    want = np.cos(x) if x > 0 else 1.0 / x
    assert float(kiln.jit(kiln.grad(f))(x)) == pytest.approx(want, rel=1e-5)
    assert float(kiln.grad(f)(x)) == pytest.approx(want, rel=1e-5)


def test_cond_under_vmap_and_type_errors():
    got = kiln.vmap(lambda v: lax.cond(v > 0, lambda u: u * 3, lambda u: -u, v))(jnp.asarray([-1.0, 2.0, 0.5]))
    np.testing.assert_allclose(np.asarray(got), [1.0, 6.0, 1.5])
    with pytest.raises(TypeError, match="cond branches must have equal output types"):
        kiln.jit(lambda v: lax.cond(v > 0, lambda u: u, lambda u: jnp.stack([u, u]), v))(1.0)
    with pytest.raises(TypeError, match="scalar"):
        kiln.jit(lambda v: lax.cond(v > 0, lambda u: u, lambda u: u, v))(jnp.ones(2))


@pytest.mark.parametrize("index,want", [(-3, 4.0), (0, 4.0), (1, 30.0), (2, -3.0), (7, -3.0)])
def test_switch_clamps_the_index(index, want):
    branches = [lambda v: v + 1, lambda v: v * 10, lambda v: -v]
    assert float(kiln.jit(lambda i, x: lax.switch(i, branches, x))(index, 3.0)) == want
    assert float(lax.switch(index, branches, 3.0)) == want


def test_fori_loop_with_at_set_and_grad():
    g = kiln.jit(lambda z: lax.fori_loop(0, 10, lambda i, a: a.at[i].set(2.0 * i), z))
    want = np.zeros(12, np.float32)
    want[:10] = 2.0 * np.arange(10)
    np.testing.assert_array_equal(np.asarray(g(jnp.zeros(12))), want)
    power = lambda x: lax.fori_loop(0, 5, lambda i, v: v * x, jnp.ones(()))  # x ** 5
    assert float(kiln.jit(kiln.grad(power))(1.3)) == pytest.approx(5 * 1.3 ** 4, rel=1e-5)


def test_scan_and_map_against_python():
    xs = np.random.default_rng(1).standard_normal((6, 3)).astype(np.float32)
    step = lambda c, x: (c + x, c * x)
    carry, ys = kiln.jit(lambda a: lax.scan(step, jnp.zeros(3), a))(jnp.asarray(xs))
    c, want = np.zeros(3, np.float32), []
    for x in xs:
        c, y = step(c, x)
        want.append(y)
    np.testing.assert_allclose(np.asarray(carry), c, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ys), np.stack(want), rtol=1e-6)
    _, ys_rev = lax.scan(step, jnp.zeros(3), jnp.asarray(xs), reverse=True)
    c, want = np.zeros(3, np.float32), [None] * 6
    for i in reversed(range(6)):
        c, want[i] = step(c, xs[i])
    np.testing.assert_allclose(np.asarray(ys_rev), np.stack(want), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(lax.map(lambda v: v * 2, jnp.asarray(xs))), xs * 2)


def test_traced_loops_are_loop_equations():
    # a traced condition and traced bounds: one while equation each; static bounds: one scan
    assert float(kiln.jit(lambda v: lax.while_loop(lambda u: u < 10, lambda u: u * 2, v))(1.0)) == 16.0
    assert float(kiln.jit(lambda n, v: lax.fori_loop(0, n, lambda i, u: u + i, v))(5, 0.5)) == 10.5
    assert float(kiln.jit(lambda v: lax.fori_loop(0, 10_000, lambda i, u: u + 1, v))(0.0)) == 10_000.0
    for f, prim in ((lambda v: lax.while_loop(lambda u: u < 10, lambda u: u * 2, v), "while["),
                    (lambda v: lax.fori_loop(0, 10_000, lambda i, u: u + 1, v), "scan[")):
        text = str(kiln.make_jaxpr(f)(1.0))
        assert text.count(prim) == 1 and len(text) < 2000  # the size does not grow with the trip count
    # concrete loops still run as Python, also inside grad outside jit
    assert float(lax.while_loop(lambda u: u < 10, lambda u: u * 2, 1.0)) == 16.0
    assert float(kiln.grad(lambda v: lax.while_loop(lambda u: u < 10, lambda u: u * 2, v))(1.0)) == 16.0


def test_while_loop_values_against_python():
    rng = np.random.default_rng(12)
    x = rng.uniform(0.5, 4.0, 5).astype(np.float32)

    def newton(a, tol):  # square roots to a tolerance: the trip count depends on the values
        def body(c):
            r, k = c
            return 0.5 * (r + a / r), k + 1
        return lax.while_loop(lambda c: jnp.max(jnp.abs(c[0] * c[0] - a)) > tol, body, (a, 0))

    r, k = kiln.jit(newton)(x, 1e-5)
    np.testing.assert_allclose(np.asarray(r), np.sqrt(x.astype(np.float64)), rtol=1e-5)
    want_k, v = 0, x.astype(np.float32)
    while np.max(np.abs(v * v - x)) > 1e-5:
        v, want_k = np.float32(0.5) * (v + x / v), want_k + 1
    assert int(k) == want_k and want_k > 2
    # zero trips, pytree carries, dtypes kept
    P = collections.namedtuple("P", "n acc")
    f = kiln.jit(lambda n, acc: lax.while_loop(lambda s: s.n > 0, lambda s: P(s.n - 1, {"v": s.acc["v"] * 1.5}),
                                               P(n, {"v": acc})))
    out = f(np.int32(3), x)
    assert int(out.n) == 0 and np.asarray(out.acc["v"]).dtype == np.float32
    np.testing.assert_allclose(np.asarray(out.acc["v"]), x * 1.5 ** 3, rtol=1e-6)
    out = f(np.int32(0), x)
    np.testing.assert_array_equal(np.asarray(out.acc["v"]), x)


def test_nested_while_loops_and_closures():
    m = np.random.default_rng(3).standard_normal((3, 3)).astype(np.float32) * 0.3

    def f(n, v):
        def outer(c):
            i, u = c
            inner = lax.while_loop(lambda d: d[0] < i, lambda d: (d[0] + 1, m @ d[1] + 0.1), (0, u))
            return i + 1, inner[1]
        return lax.while_loop(lambda c: c[0] < n, outer, (0, v))[1]

    v = np.ones(3, np.float32)
    got = np.asarray(kiln.jit(f)(4, v))
    want = v.astype(np.float64)
    for i in range(4):
        for _ in range(i):
            want = m.astype(np.float64) @ want + 0.1
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_while_loop_errors_and_what_is_not_supported_yet():
    with pytest.raises(TypeError, match=r"cond_fun must return a boolean scalar, but got output type\(s\) "
                                        r"\[ShapedArray\(float32\[\]\)\]"):
        kiln.jit(lambda x: lax.while_loop(lambda c: c, lambda c: c, x))(1.0)
    with pytest.raises(TypeError, match=r"input carry component loop_carry\[2\] has type float32\[2\] but the "
                                        r"corresponding output carry component has type float32\[1\]"):
        kiln.jit(lambda n, x: lax.fori_loop(0, n, lambda i, v: v[:1], x))(3, np.ones(2, np.float32))
    loop = lambda x: lax.while_loop(lambda c: c < 3.0, lambda c: c * c + c, x)  # noqa: E731
    with pytest.raises(NotImplementedError, match="reverse-mode derivative of a while_loop again"):
        kiln.jit(kiln.grad(kiln.grad(loop)))(1.0)
    assert float(kiln.jit(loop)(1.0)) == 6.0  # the library keeps working


def test_vmap_of_while_loops_runs_each_example_its_own_trip_count():
    def newton(a):
        return lax.while_loop(lambda c: jnp.abs(c[0] * c[0] - a) > 1e-5,
                              lambda c: (0.5 * (c[0] + a / c[0]), c[1] + 1), (a, 0))

    xs = np.array([0.5, 2.0, 9.0, 100.0, 1e4], np.float32)
    r, k = kiln.jit(kiln.vmap(newton))(xs)
    for i, a in enumerate(xs):  # the same as a Python loop per example, trip counts included
        want_r, want_k = newton(a)
        assert float(r[i]) == float(want_r) and int(k[i]) == int(want_k)
    assert len(set(np.asarray(k).tolist())) > 2
    # batched and unbatched bounds, closures over batched values, pytree carries
    f = kiln.jit(kiln.vmap(lambda x, n: lax.fori_loop(0, n, lambda i, v: {"v": v["v"] * 2.0 + i}, {"v": x})["v"],
                           in_axes=(0, None)))
    np.testing.assert_allclose(np.asarray(f(jnp.arange(3.0), 5)), [26.0, 58.0, 90.0])
    g = kiln.jit(kiln.vmap(lambda x, n: lax.fori_loop(0, n, lambda i, v: v * x, 1.0)))
    np.testing.assert_allclose(np.asarray(g(jnp.asarray([1.0, 2.0, 3.0, 0.5]), jnp.arange(4))),
                               [1.0, 2.0, 9.0, 0.125])
    h = kiln.vmap(kiln.vmap(lambda a: newton(a)[1]))  # nested vmap
    np.testing.assert_array_equal(np.asarray(kiln.jit(h)(xs.reshape(1, 5))), np.asarray(k).reshape(1, 5))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13])
@pytest.mark.parametrize("reverse", [False, True])
def test_associative_scan_matches_a_python_prefix(n, reverse):
    rng = np.random.default_rng(n)
    m = rng.standard_normal((n, 2, 2)).astype(np.float32)  # matmul: associative, not commutative
    got = np.asarray(lax.associative_scan(jnp.matmul, m, reverse=reverse))
    order = list(range(n))[::-1] if reverse else list(range(n))
    acc, want = None, {}
    for i in order:
        acc = m[i].astype(np.float64) if acc is None else acc @ m[i]
        want[i] = acc
    np.testing.assert_allclose(got, np.stack([want[i] for i in range(n)]), rtol=1e-4, atol=1e-5)


def test_associative_scan_pytrees_axes_jit_grad_vmap():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 7)).astype(np.float32)

    def add(a, b):
        return {"s": a["s"] + b["s"], "m": jnp.maximum(a["m"], b["m"])}

    got = kiln.jit(lambda x: lax.associative_scan(add, {"s": x, "m": x}, axis=-1))(x)
    np.testing.assert_allclose(np.asarray(got["s"]), np.cumsum(x.astype(np.float64), 1), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(got["m"]), np.maximum.accumulate(x, 1))
    v = np.arange(1.0, 6.0, dtype=np.float32)
    g = kiln.grad(lambda v: lax.associative_scan(jnp.multiply, v)[-1])(v)
    np.testing.assert_allclose(np.asarray(g), np.prod(v) / v, rtol=1e-6)
    got = kiln.vmap(lambda r: lax.associative_scan(jnp.add, r, reverse=True))(x)
    np.testing.assert_allclose(np.asarray(got), np.stack([np.cumsum(r[::-1])[::-1] for r in x]), rtol=1e-5,
                               atol=1e-6)
    with pytest.raises(ValueError, match="same first dimension"):
        lax.associative_scan(add, {"s": x, "m": x[:, :3]}, axis=1)


@pytest.mark.parametrize("n,bs", [(7, 3), (8, 4), (2, 5), (6, 1)])
def test_map_with_batch_size_matches_python(n, bs):
    xs = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)

    def f(r):
        return {"s": jnp.sum(r * r), "t": jnp.tanh(r)}

    for fn in (lambda xs: lax.map(f, xs, batch_size=bs), kiln.jit(lambda xs: lax.map(f, xs, batch_size=bs))):
        got = fn(xs)
        np.testing.assert_allclose(np.asarray(got["s"]), (xs.astype(np.float64) ** 2).sum(1), rtol=1e-5)
        np.testing.assert_allclose(np.asarray(got["t"]), np.tanh(xs), rtol=1e-5, atol=1e-6)


def test_scan_of_length_zero_returns_the_carry_and_empty_ys():
    for fn in (lambda xs: lax.scan(lambda c, x: (c + x.sum(), {"y": c * x}), 1.5, xs),
               kiln.jit(lambda xs: lax.scan(lambda c, x: (c + x.sum(), {"y": c * x}), 1.5, xs))):
        c, ys = fn(np.zeros((0, 3), np.float32))
        assert float(c) == 1.5
        assert ys["y"].shape == (0, 3) and ys["y"].dtype == np.float32


def test_programs_of_thousands_of_kernels_compile():
    # an RK4 integrator of 300 steps under jit: a program of thousands of equations
    def rk4(y, h=0.01):
        f = lambda y: jnp.stack([y[1], -jnp.sin(y[0])])  # noqa: E731
        for _ in range(300):
            k1 = f(y)
            k2 = f(y + h / 2 * k1)
            k3 = f(y + h / 2 * k2)
            k4 = f(y + h * k3)
            y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return y

    y0 = np.array([1.0, 0.0], np.float32)
    got = np.asarray(kiln.jit(rk4)(y0))
    y = y0.astype(np.float64)
    for _ in range(300):
        f = lambda y: np.array([y[1], -np.sin(y[0])])  # noqa: E731
        k1 = f(y); k2 = f(y + 0.005 * k1); k3 = f(y + 0.005 * k2); k4 = f(y + 0.01 * k3)  # noqa: E702
        y = y + 0.01 / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    np.testing.assert_allclose(got, y, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("reverse", [False, True])
def test_long_scans_under_jit_are_scan_equations(reverse):
    # a 2,000-step RNN: one scan equation
    rng = np.random.default_rng(8)
    w = (rng.standard_normal((6, 6)) * 0.4).astype(np.float32)
    u = (rng.standard_normal((3, 6)) * 0.4).astype(np.float32)
    xs = {"a": rng.standard_normal((2000, 3)).astype(np.float32), "b": np.arange(2000, dtype=np.int32)}

    def cell(h, x):
        h = jnp.tanh(h @ w + x["a"] @ u)
        return h, (h.sum(), x["b"] * 2)

    step = kiln.jit(lambda h, xs: lax.scan(cell, h, xs, reverse=reverse))
    assert str(kiln.make_jaxpr(lambda h, xs: lax.scan(cell, h, xs))(np.zeros(6, np.float32), xs)).count("scan[") == 1
    h, (s, b) = step(np.zeros(6, np.float32), xs)
    hh, want = np.zeros(6), [None] * 2000
    for i in (range(1999, -1, -1) if reverse else range(2000)):
        hh = np.tanh(hh @ w + xs["a"][i] @ u)
        want[i] = hh.sum()
    np.testing.assert_allclose(np.asarray(h), hh, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(s), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(np.asarray(b), xs["b"] * 2)
    assert np.asarray(b).dtype == np.int32
    with pytest.raises(TypeError, match="scan body function carry input and carry output must have equal types"):
        kiln.jit(lambda h, xs: lax.scan(lambda c, x: (c[:1], x), h, xs))(np.zeros(2, np.float32), xs["a"])


def test_forward_mode_through_while_equations_against_finite_differences():
    def newton(a, s):  # sqrt(a) * s, to a tolerance: the trip count depends on a
        r = lax.while_loop(lambda c: jnp.abs(c[0] * c[0] - a) > 1e-5 * a,
                           lambda c: (0.5 * (c[0] + a / c[0]), c[1] + 1), (a, 0))[0]
        return r * s

    a, s = np.float32(6.0), np.float32(1.5)
    out, tan = kiln.jit(lambda a, s: kiln.jvp(newton, (a, s), (np.float32(1.0), np.float32(0.5))))(a, s)
    fd = (np.sqrt(6.0 + 1e-3) * (1.5 + 5e-4) - np.sqrt(6.0 - 1e-3) * (1.5 - 5e-4)) / 2e-3
    assert float(out) == pytest.approx(np.sqrt(6.0) * 1.5, rel=1e-5)
    assert float(tan) == pytest.approx(fd, rel=1e-3)
    # jacfwd of a fori_loop with traced bounds: the tangent flows through the carry
    f = lambda x, n: lax.fori_loop(0, n, lambda i, v: jnp.sin(v) + v * 0.5, x)  # noqa: E731
    x = np.random.default_rng(6).uniform(-1, 1, 3).astype(np.float32)
    jac = np.asarray(kiln.jit(kiln.jacfwd(f), static_argnums=())(x, 4))
    v, d = x.astype(np.float64), np.ones(3)
    for _ in range(4):
        d = d * (np.cos(v) + 0.5)
        v = np.sin(v) + v * 0.5
    np.testing.assert_allclose(np.diag(jac), d, rtol=1e-5)
    np.testing.assert_allclose(jac - np.diag(np.diag(jac)), 0, atol=1e-7)
    # forward mode of a vmapped loop
    g = kiln.jit(kiln.vmap(lambda a: kiln.jvp(lambda a: newton(a, 1.0), (a,), (1.0,))[1]))
    xs = np.array([2.0, 4.0, 25.0], np.float32)  # (a = 1 runs no iteration: its derivative is 1, as in JAX)
    np.testing.assert_allclose(np.asarray(g(xs)), 0.5 / np.sqrt(xs), rtol=1e-3)


def _rnn(unroll=1, reverse=False):
    def f(h0, xs, w):
        def body(h, x):
            h2 = jnp.sin(h @ w + x["a"]) * h + x["k"] * 0.1
            return h2, {"s": (h2 ** 2).sum(), "k": x["k"] + 1}
        c, ys = lax.scan(body, h0, xs, unroll=unroll, reverse=reverse)
        return (c ** 2).sum() + (ys["s"] * jnp.arange(ys["s"].shape[0])).sum() + ys["k"].sum()
    return f


def _fd_grad(f, args, i, eps=1e-6):
    x = np.array(args[i], np.float64)
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[idx] += eps
        lo[idx] -= eps
        a_hi, a_lo = list(args), list(args)
        a_hi[i], a_lo[i] = hi, lo
        g[idx] = (float(f(*a_hi)) - float(f(*a_lo))) / (2 * eps)
    return g


@pytest.mark.parametrize("reverse", [False, True])
def test_grad_of_scan_equations_matches_finite_differences_and_unrolling(reverse, x64):
    rng = np.random.default_rng(21)
    h0, w = rng.standard_normal((2, 3)), rng.standard_normal((3, 3)) * 0.5
    xs = {"a": rng.standard_normal((6, 2, 3)), "k": np.arange(6, dtype=np.int32)}
    f, flat = _rnn(1, reverse), _rnn(True, reverse)
    assert "scan[" in str(kiln.make_jaxpr(kiln.grad(f, argnums=(0, 1, 2), allow_int=True))(h0, xs, w))
    for g in (kiln.jit(kiln.grad(f, argnums=(0, 1, 2), allow_int=True)), kiln.grad(f, argnums=(0, 1, 2), allow_int=True)):
        gh, gx, gw = g(h0, xs, w)
        ref = kiln.grad(flat, argnums=(0, 1, 2), allow_int=True)(h0, xs, w)
        np.testing.assert_allclose(np.asarray(gh), np.asarray(ref[0]), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(np.asarray(gx["a"]), np.asarray(ref[1]["a"]), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(np.asarray(gw), np.asarray(ref[2]), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(gw), _fd_grad(lambda *a: kiln.jit(f)(*a), (h0, xs, w), 2), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(gh), _fd_grad(lambda *a: kiln.jit(f)(*a), (h0, xs, w), 0), rtol=1e-6)


def test_scan_equations_compose_with_jvp_vmap_and_second_order(x64):
    rng = np.random.default_rng(22)
    h0, w = rng.standard_normal((2, 3)), rng.standard_normal((3, 3)) * 0.5
    xs = {"a": rng.standard_normal((5, 2, 3)), "k": np.arange(5, dtype=np.int32)}
    f, flat = _rnn(), _rnn(True)
    t = rng.standard_normal(w.shape)
    p1, t1 = kiln.jit(lambda w, t: kiln.jvp(lambda w: f(h0, xs, w), (w,), (t,)))(w, t)
    p2, t2 = kiln.jvp(lambda w: flat(h0, xs, w), (w,), (t,))
    assert float(p1) == pytest.approx(float(p2), rel=1e-12) and float(t1) == pytest.approx(float(t2), rel=1e-10)
    gw = lambda fn: kiln.grad(lambda w: fn(h0, xs, w))  # noqa: E731
    hvp = kiln.jit(kiln.grad(lambda w: jnp.sum(gw(f)(w) ** 2)))(w)  # reverse over reverse
    np.testing.assert_allclose(np.asarray(hvp), np.asarray(kiln.grad(lambda w: jnp.sum(gw(flat)(w) ** 2))(w)),
                               rtol=1e-9)
    hess = kiln.jit(kiln.jacfwd(gw(f)))(w)  # forward over reverse
    np.testing.assert_allclose(np.asarray(hess), np.asarray(kiln.jacfwd(gw(flat))(w)), rtol=1e-9, atol=1e-12)
    many = np.stack([xs["a"], 2 * xs["a"], -xs["a"]])
    per = kiln.jit(kiln.vmap(lambda a: kiln.grad(lambda w: f(h0, {"a": a, "k": xs["k"]}, w))(w)))(many)
    for i in range(3):
        want = kiln.grad(lambda w: flat(h0, {"a": many[i], "k": xs["k"]}, w))(w)
        np.testing.assert_allclose(np.asarray(per[i]), np.asarray(want), rtol=1e-10)


def test_nested_scans_closures_and_a_long_fori_loop_gradient():
    rng = np.random.default_rng(23)
    m = (rng.standard_normal((3, 3)) * 0.3).astype(np.float32)

    def f(v, s):
        def outer(c, x):
            inner, _ = lax.scan(lambda d, y: (jnp.tanh(m @ d * s + y), None), c, jnp.stack([x, -x]))
            return inner, inner.sum()
        return lax.scan(outer, v, jnp.linspace(0.0, 1.0, 4 * 3).reshape(4, 3))

    v = rng.standard_normal(3).astype(np.float32)
    c, ys = kiln.jit(f)(v, 0.7)
    want, sums = v.astype(np.float64), []
    for x in np.linspace(0.0, 1.0, 12).reshape(4, 3):
        for y in (x, -x):
            want = np.tanh(m @ want * 0.7 + y)
        sums.append(want.sum())
    np.testing.assert_allclose(np.asarray(c), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(ys), sums, rtol=1e-5, atol=1e-6)
    g = kiln.jit(kiln.grad(lambda s: f(v, s)[1].sum()))(0.7)
    fd = (float(f(v, 0.7 + 1e-2)[1].sum()) - float(f(v, 0.7 - 1e-2)[1].sum())) / 2e-2
    assert float(g) == pytest.approx(fd, rel=2e-3)
    # a 3,000-step fori_loop (a scan) differentiated: x * 1.0001 ** 3000
    power = kiln.jit(kiln.grad(lambda x: lax.fori_loop(0, 3000, lambda i, u: u * 1.0001 + 0.0 * i, x)))
    assert float(power(2.0)) == pytest.approx(1.0001 ** 3000, rel=1e-4)


def test_traced_cond_and_switch_are_cond_equations_with_gradients(x64):
    rng = np.random.default_rng(24)
    w = rng.standard_normal(3)

    def f(x):  # the false branch is NaN wherever the true one is taken
        return lax.cond(jnp.sum(x) > 0, lambda v: jnp.sin(v * w) * 2, lambda v: jnp.log(-v) * w, x)

    text = str(kiln.make_jaxpr(f)(np.ones(3)))
    assert text.count("cond[") == 1 and "select" not in text
    for sign in (1.0, -1.0):
        x = rng.uniform(0.1, 1.0, 3) * sign
        want = np.sin(x * w) * 2 if sign > 0 else np.log(-x) * w
        np.testing.assert_allclose(np.asarray(kiln.jit(f)(x)), want, rtol=1e-12)
        g = kiln.jit(kiln.grad(lambda x: jnp.sum(f(x) ** 2)))(x)
        np.testing.assert_allclose(np.asarray(g), _fd_grad(lambda x: np.sum(np.asarray(kiln.jit(f)(x)) ** 2), (x,), 0),
                                   rtol=1e-6)
        _, t = kiln.jit(lambda x, t: kiln.jvp(f, (x,), (t,)))(x, np.ones(3))
        d = 2 * np.cos(x * w) * w if sign > 0 else w / x
        np.testing.assert_allclose(np.asarray(t), d, rtol=1e-10)
    # gradients with respect to closed-over values of one branch, through vmap with a batched predicate
    xs = np.stack([rng.uniform(0.1, 1.0, 3), -rng.uniform(0.1, 1.0, 3)])
    gw = kiln.jit(kiln.vmap(kiln.grad(lambda w, x: jnp.sum(lax.cond(x[0] > 0, lambda v: v * w * w, lambda v: v, x)),
                                      argnums=0), in_axes=(None, 0)))(w, xs)
    np.testing.assert_allclose(np.asarray(gw), [2 * xs[0] * w, np.zeros(3)], rtol=1e-12)
    # switch: nested conds, each branch with its own consts; second order through them
    branches = [lambda v: v * v * w[0], lambda v: jnp.sin(v) * w[1], lambda v: -v * w[2]]
    h = kiln.jit(kiln.grad(kiln.grad(lambda v, i: lax.switch(i, branches, v))))
    for i, want in [(-1, 2 * w[0]), (0, 2 * w[0]), (1, -np.sin(0.3) * w[1]), (2, 0.0), (5, 0.0)]:
        assert float(h(0.3, i)) == pytest.approx(want, rel=1e-12, abs=1e-14)
    got = kiln.jit(kiln.vmap(lambda i, v: lax.switch(i, branches, v)))(jnp.arange(4), jnp.arange(4.0) + 0.5)
    np.testing.assert_allclose(np.asarray(got), [0.25 * w[0], np.sin(1.5) * w[1], -2.5 * w[2], -3.5 * w[2]], rtol=1e-12)


def test_reverse_mode_through_while_loops_matches_scan_and_finite_differences(x64):
    # JAX refuses this derivative; kiln records the trip count and recomputes from checkpoints
    rng = np.random.default_rng(25)
    m = rng.standard_normal((4, 4)) * 0.3
    step = lambda v, m: jnp.tanh(m @ v + 0.1) + v * 0.5  # noqa: E731

    def loop(x, m, n):
        return jnp.sum(lax.while_loop(lambda c: c[1] < n, lambda c: (step(c[0], m), c[1] + 1), (x, 0))[0] ** 2)

    def scanned(x, m, n):
        return jnp.sum(lax.scan(lambda v, _: (step(v, m), None), x, None, length=n)[0] ** 2)

    x = rng.standard_normal(4)
    for n in (0, 1, 2, 5, 16, 17, 50):  # checkpoint strides 1..8, segments of every length
        got = kiln.jit(kiln.grad(loop, argnums=(0, 1)), static_argnums=2)(x, m, n)
        want = kiln.grad(scanned, argnums=(0, 1))(x, m, n) if n else (2 * x, np.zeros((4, 4)))
        np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.asarray(got[1]), _fd_grad(lambda x, m: loop(x, m, 50), (x, m), 1), rtol=1e-6)

    def newton(a):  # a data-dependent trip count
        return lax.while_loop(lambda c: jnp.abs(c * c - a) > 1e-12 * a, lambda c: 0.5 * (c + a / c), a)

    a = np.array([0.5, 2.0, 9.0, 100.0])
    np.testing.assert_allclose(np.asarray(kiln.jit(kiln.vmap(kiln.grad(newton)))(a)), 0.5 / np.sqrt(a), rtol=1e-9)
    np.testing.assert_allclose(np.asarray(kiln.jit(kiln.grad(lambda a: jnp.sum(kiln.vmap(newton)(a))))(a)),
                               0.5 / np.sqrt(a), rtol=1e-9)
    assert float(kiln.grad(lambda a: kiln.jit(newton)(a))(9.0)) == pytest.approx(1 / 6, rel=1e-9)

    def power(a, w):  # per-example trip counts under vmap of grad: w ** a + ... + 1
        return lax.while_loop(lambda c: c[1] < a, lambda c: (c[0] * w + 1.0, c[1] + 1.0), (1.0, 0.0))[0]

    got = kiln.jit(kiln.vmap(kiln.grad(power, argnums=1), in_axes=(0, None)))(jnp.array([1.0, 2.0, 3.0]), 2.0)
    np.testing.assert_allclose(np.asarray(got), [1.0, 5.0, 17.0])


def test_loops_updating_a_carry_in_place_compute_the_functional_result():
    # the body reads the old carry (z[i - 1], z[i]) before updating it: the update runs in place
    # in the carry's buffer only because those reads come first
    n = 300
    z0 = np.random.default_rng(26).standard_normal(n).astype(np.float32)

    def body(i, z):
        return z.at[i].set(z[i - 1] * 0.5 + z[i] + i)

    got = np.asarray(kiln.jit(lambda z: lax.fori_loop(1, n, body, z))(z0))
    want = z0.astype(np.float64).copy()
    for i in range(1, n):
        want[i] = want[i - 1] * 0.5 + want[i] + i
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # out-of-range traced indices drop the update, mode="clip" clamps, as in JAX
    f = kiln.jit(lambda z, k: lax.fori_loop(0, 4, lambda i, z: z.at[k + i].add(1.0).at[-(k + i) - 1].add(10.0), z))
    np.testing.assert_array_equal(np.asarray(f(np.zeros(5, np.float32), 3)), [10, 10, 0, 1, 1])
    g = kiln.jit(lambda z, k: lax.fori_loop(0, 3, lambda i, z: z.at[k + i].add(1.0, mode="clip"), z))
    np.testing.assert_array_equal(np.asarray(g(np.zeros(4, np.float32), 2)), [0, 0, 1, 2])
    # a while loop filling rows of a matrix carry
    h = kiln.jit(lambda m: lax.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, c[1].at[c[0], 1:3].set(c[0] * 2.0)),
                                          (0, m))[1])
    want = np.zeros((5, 4), np.float32)
    want[:4, 1:3] = np.arange(4)[:, None] * 2.0
    np.testing.assert_array_equal(np.asarray(h(np.zeros((5, 4), np.float32))), want)


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_unroll_runs_k_steps_per_trip_with_the_same_values(reverse, x64):
    rng = np.random.default_rng(27)
    w = rng.standard_normal((3, 3)) * 0.5

    def f(h0, xs, unroll):
        def body(h, x):
            h = jnp.tanh(h @ w + x["a"]) + x["k"]
            return h, {"s": h.sum(), "h": h}
        return lax.scan(body, h0, xs, unroll=unroll, reverse=reverse)

    h0 = rng.standard_normal(3)
    for n in (5, 7, 12):
        xs = {"a": rng.standard_normal((n, 3)), "k": np.arange(n) * 0.1}
        ref = f(h0, xs, True)  # fully unrolled
        for u in (2, 3, 5):
            text = str(kiln.make_jaxpr(lambda h, x: f(h, x, u))(h0, xs))
            if u < n:  # else unrolled fully, as JAX does
                assert f"length={n // u} " in text and text.count("tanh") == u + n % u
            got = kiln.jit(lambda h, x: f(h, x, u))(h0, xs)
            for a, b in zip(kiln.tree_util.tree_leaves(got), kiln.tree_util.tree_leaves(ref)):
                np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-13, atol=1e-14)
            g = kiln.jit(kiln.grad(lambda h: f(h, xs, u)[1]["s"].sum()))(h0)
            np.testing.assert_allclose(np.asarray(g), np.asarray(kiln.grad(lambda h: f(h, xs, True)[1]["s"].sum())(h0)),
                                       rtol=1e-12)


def test_compile_log_shows_loops_as_loops():
    import os
    import subprocess
    import sys
    code = ("import numpy as np, kiln, kiln.numpy as jnp\n"
            "f = kiln.jit(lambda h, xs: kiln.lax.scan(lambda c, x: (jnp.tanh(c + x), c.sum()), h, xs))\n"
            "f(np.zeros(4, np.float32), np.ones((10, 4), np.float32))\n")
    env = dict(os.environ, KILN_LOG_COMPILES="1",
               PYTHONPATH=os.path.dirname(os.path.dirname(kiln.__file__)))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "1 loops (scan of 10 trips over a body of" in p.stderr, p.stderr


def test_loops_with_hundreds_of_carries_differentiate():
    # a pytree of 300 leaves carried through fori_loop (a scan) and while_loop, under grad
    ps = [np.float32(1.0 + i * 0.001) for i in range(300)]
    want = sum(p * 1.01 ** 5 + sum(1.01 ** k for k in range(5)) for p in ps)

    def scanned(x):
        return sum(lax.fori_loop(0, 5, lambda i, c: [v * 1.01 + x for v in c], [x * p for p in ps]))

    def looped(x):
        body = lambda c: (c[0] + 1, [v * 1.01 + x for v in c[1]])  # noqa: E731
        return sum(lax.while_loop(lambda c: c[0] < 5, body, (0, [x * p for p in ps]))[1])

    for f in (scanned, looped):
        assert float(kiln.jit(kiln.grad(f))(0.5)) == pytest.approx(want, rel=1e-5)


def test_reverse_mode_scan_saves_residuals_unless_the_body_is_checkpointed(x64):
    # as JAX: the backward scan reads the forward scan's residuals (no primal work left in it);
    # checkpointing the body trades those residuals for recomputation in the backward scan
    rng = np.random.default_rng(28)
    w, h0 = rng.standard_normal((4, 4)) * 0.4, rng.standard_normal(4)
    xs = rng.standard_normal((9, 4))

    def loss(w, remat):
        def cell(h, x):
            h = jnp.tanh(w @ h + x)
            return h, h.sum()
        body = kiln.checkpoint(cell) if remat else cell
        return lax.scan(body, h0, xs)[1].sum()

    plain = str(kiln.make_jaxpr(kiln.grad(lambda w: loss(w, False)))(w))
    remat = str(kiln.make_jaxpr(kiln.grad(lambda w: loss(w, True)))(w))
    assert plain.count("tanh") == 1 and remat.count("tanh") == 2
    g1, g2 = kiln.jit(kiln.grad(lambda w: loss(w, False)))(w), kiln.jit(kiln.grad(lambda w: loss(w, True)))(w)
    np.testing.assert_allclose(np.asarray(g2), np.asarray(g1), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(g1), _fd_grad(lambda w: loss(w, False), (w,), 0), rtol=1e-6)


def test_gradients_through_loops_nested_in_loops_and_checkpointed(x64):
    rng = np.random.default_rng(29)
    w, xs = rng.standard_normal((3, 3)) * 0.5, rng.standard_normal((6, 3))

    def nested(w):  # a scan in a while_loop in a scan
        def outer(c, x):
            step = lambda s: (lax.scan(lambda a, _: (jnp.sin(w @ a), None), s[0], None, length=2)[0], s[1] + 1)  # noqa: E731
            inner = lax.while_loop(lambda s: s[1] < 2, step, (c, 0))[0]
            return inner + x, inner.sum()
        return lax.scan(outer, jnp.ones(3), xs)[1].sum()

    def unrolled(w):
        c, total = jnp.ones(3), 0.0
        for x in xs:
            a = c
            for _ in range(4):
                a = jnp.sin(w @ a)
            total, c = total + a.sum(), a + x
        return total

    want = np.asarray(kiln.grad(unrolled)(w))
    np.testing.assert_allclose(np.asarray(kiln.jit(kiln.grad(nested))(w)), want, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(kiln.jit(kiln.grad(kiln.checkpoint(nested)))(w)), want, rtol=1e-12, atol=1e-14)


def test_a_scan_with_no_operands_stacks_its_constant_outputs():
    # no carry, no xs, a body of constants: a scan equation of no operands
    got = kiln.jit(lambda: lax.scan(lambda c, _: (c, jnp.arange(3.0) * 2), None, None, length=4)[1])()
    np.testing.assert_array_equal(np.asarray(got), np.tile(np.arange(3.0) * 2, (4, 1)))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_compiled_loops_every_trip_count_and_passed_through_carries(n):
    """Fixed-length loops without xs run as one compiled loop on the CPU (a driver over the
    body's bindings per carry set): every trip count picks its bindings right; carries passed
    through unchanged and repeated outputs are copied where the binding says so."""
    rng = np.random.default_rng(n)
    x, c = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)

    def body(i, s):
        a, b, k = s
        return (a * 0.5 + b + i.astype(jnp.float32), b, a)  # b passes through, k takes a

    got = kiln.jit(lambda a, b: lax.fori_loop(0, n, body, (a, b, a * 0.0)))(x, c)
    a, b, k = x.copy(), c.copy(), np.zeros_like(x)
    for i in range(n):
        a, b, k = a * np.float32(0.5) + b + np.float32(i), b, a
    for g, w in zip(got, (a, b, k)):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6)

    def wbody(s):
        i, a, b = s
        return i + 1, a * 0.5 + b, b

    i, a2, b2 = kiln.jit(lambda a, b: lax.while_loop(lambda s: s[0] < n, wbody, (0, a, b)))(x, c)
    a = x.copy()
    for _ in range(n):
        a = a * np.float32(0.5) + c
    assert int(i) == n
    np.testing.assert_allclose(np.asarray(a2), a, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(b2), c)


def test_compiled_loops_with_products_big_kernels_and_inner_loops():
    """Bodies whose steps are not small kernels (a product, a kernel worth threads, a nested
    loop) run those steps through the runtime from inside the compiled loop."""
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((16, 16)) / 4).astype(np.float32)
    big = rng.standard_normal(1 << 17).astype(np.float32)
    h0 = rng.standard_normal(16).astype(np.float32)

    def body(s):
        i, h, v = s
        inner = lax.while_loop(lambda t: t[0] < 3, lambda t: (t[0] + 1, t[1] * 0.9), (0, h))[1]
        return i + 1, jnp.tanh(inner @ w), v * 0.99 + 0.01

    i, h, v = kiln.jit(lambda h, v: lax.while_loop(lambda s: s[0] < 7, body, (0, h, v)))(h0, big)
    hh, vv = h0.astype(np.float64), big.astype(np.float64)
    for _ in range(7):
        hh = np.tanh((hh * 0.9 ** 3) @ w)
        vv = vv * 0.99 + 0.01
    assert int(i) == 7
    np.testing.assert_allclose(np.asarray(h), hh, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(v), vv, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("stop", [0, 1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17])
def test_while_loops_stop_after_any_trip(stop):
    """A while loop stops after exactly the trips its condition allows, whatever their number (on
    the GPU the loop runs device-side, several trips per pass of the loop node)."""
    f = kiln.jit(lambda x, s: lax.while_loop(lambda v: v[0][0] < s, lambda v: (v[0] + 1.0, v[1] * 2.0 + v[0][0]), x))
    a, b = f((jnp.zeros(3, jnp.float32), jnp.asarray(np.arange(5, dtype=np.float32))), float(stop))
    wa, wb = np.zeros(3, np.float32), np.arange(5, dtype=np.float32)
    while wa[0] < stop:
        wa, wb = wa + 1, wb * 2 + wa[0]
    np.testing.assert_array_equal(np.asarray(a), wa)
    np.testing.assert_array_equal(np.asarray(b), wb)


@pytest.mark.parametrize("through", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_scans_over_slices_of_any_size_against_python(n, reverse, through):
    """Scans over xs and ys compiled whole on the CPU point the body at each trip's slices (or copy
    them through staging buffers when a slice is not a multiple of 16 bytes): slices of 3, 4 and
    1 floats, with and without an x passed through as a y, a product in the body."""
    rng = np.random.default_rng(n)
    xs = rng.standard_normal((n, 4)).astype(np.float32)
    zs = rng.standard_normal((n, 3)).astype(np.float32)
    w = rng.standard_normal((4, 4)).astype(np.float32) / 2

    def body(c, x):
        a, z = x
        c = jnp.tanh(c @ w + a) + jnp.sum(z)
        return c, (c * 2.0, jnp.sum(c), z if through else z + 1.0)

    c, (y1, y2, y3) = kiln.jit(lambda c, xs, zs: lax.scan(body, c, (xs, zs), reverse=reverse))(np.ones(4, np.float32), xs, zs)
    cw, ys = np.ones(4), []
    for t in (range(n - 1, -1, -1) if reverse else range(n)):
        cw = np.tanh(cw @ w.astype(np.float64) + xs[t]) + zs[t].sum()
        ys.append((t, cw * 2.0, cw.sum()))
    np.testing.assert_allclose(np.asarray(c), cw, rtol=1e-5, atol=1e-5)
    for t, a, b in ys:
        np.testing.assert_allclose(np.asarray(y1)[t], a, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(y2)[t], b, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(y3), zs if through else zs + np.float32(1.0))


def test_nested_scans_keep_their_memory_between_runs_and_compute_the_same():
    """A small scan nested in another loop keeps its buffers and bindings from one outer trip to
    the next on the CPU (retargeted at each run's memory): values against Python, over two calls
    with different inputs, with carries in place, passed through and traded."""
    rng = np.random.default_rng(3)

    def inner(c, x):
        a, z, k = c
        return (a * 0.9 + x, z.at[0].add(x[0]), k), a[0]

    def outer(c, xs):
        c, ys = lax.scan(inner, c, xs)
        return c, ys.sum()

    f = kiln.jit(lambda c, xss: lax.scan(outer, c, xss))
    for _ in range(2):
        a0, z0, k0 = (rng.standard_normal(4).astype(np.float32) for _ in range(3))
        xss = rng.standard_normal((6, 5, 4)).astype(np.float32)
        (a, z, k), s = f((a0, z0, k0), xss)
        wa, wz, ws = a0.astype(np.float64), z0.astype(np.float64), []
        for xs in xss:
            tot = 0.0
            for x in xs:
                tot += wa[0]
                wa, wz = wa * 0.9 + x, wz + np.eye(4)[0] * x[0]
            ws.append(tot)
        np.testing.assert_allclose(np.asarray(a), wa, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(z), wz, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(np.asarray(k), k0)
        np.testing.assert_allclose(np.asarray(s), ws, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_slices_read_and_written_by_library_calls(reverse):
    """A scan body whose x slice feeds a product and whose y slice is the product's result: the
    compiled CPU loop points the library call's own arguments at each trip's slices."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 4)).astype(np.float32)
    xs = rng.standard_normal((7, 3, 4)).astype(np.float32)
    c, ys = kiln.jit(lambda c, xs: lax.scan(lambda c, x: (c * 0.5 + x.sum(0), x @ w), c, xs, reverse=reverse))(
        np.ones(4, np.float32), xs)
    cw = np.ones(4)
    for t in (range(6, -1, -1) if reverse else range(7)):
        cw = cw * 0.5 + xs[t].sum(0)
    np.testing.assert_allclose(np.asarray(ys), xs.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(c), cw, rtol=1e-6, atol=1e-6)


def test_conds_inside_compiled_loops_branch_in_the_loop_itself(x64):
    # conds whose branches are small kernels run inside the compiled loop (a branch passing its
    # operand through, one reducing, one whose operand is the scan's slice, a switch of nested
    # conds): the same numbers as NumPy's loop
    rng = np.random.default_rng(51)
    xs = rng.standard_normal((300, 5))
    c0 = rng.standard_normal(5)

    def body(c, x):
        c = lax.cond(c[0] > 0.0, lambda v: v * 0.5 + 0.25, lambda v: v, c)
        c = lax.cond(c.sum() > 1.0, lambda v: v - v.max() * 0.1, lambda v: v + 0.05, c)
        c = lax.cond(x[0] > 0.5, lambda v: v * 0.9 + x * 0.1, lambda v: v, c)
        i = jnp.clip(jnp.floor(c[1] + 1.5), 0, 2).astype(jnp.int32)
        c = lax.switch(i, [lambda v: v + 0.1, lambda v: jnp.tanh(v), lambda v: -v * 0.5], c)
        return c, c[2]

    def step(c, x):
        c = c * 0.5 + 0.25 if c[0] > 0 else c
        c = c - c.max() * 0.1 if c.sum() > 1.0 else c + 0.05
        c = c * 0.9 + x * 0.1 if x[0] > 0.5 else c
        return [c + 0.1, np.tanh(c), -c * 0.5][int(np.clip(np.floor(c[1] + 1.5), 0, 2))]

    c, ys = kiln.jit(lambda c, xs: lax.scan(body, c, xs))(c0, xs)
    w = kiln.jit(lambda c: lax.while_loop(lambda s: s[1] < 200, lambda s: (body(s[0], xs[0])[0], s[1] + 1), (c, 0)))(c0)
    cr, yr = c0.copy(), []
    for x in xs:
        cr = step(cr, x)
        yr.append(cr[2])
    np.testing.assert_allclose(np.asarray(c), cr, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(ys), yr, rtol=1e-12, atol=1e-12)
    wr = c0.copy()
    for _ in range(200):
        wr = step(wr, xs[0])
    np.testing.assert_allclose(np.asarray(w[0]), wr, rtol=1e-12, atol=1e-12)



def test_a_cond_in_a_nested_scan_keeps_its_branches_across_runs():
    # the inner scan runs once per outer trip; its cond's branches stay bound between runs (kept
    # per set of pointers): float32 results equal a float32 NumPy loop's exactly
    inner = lambda c: lax.scan(lambda d, _: (lax.cond(d[0] > 0.5, lambda v: v * 0.99, lambda v: v + 0.01, d), None),
                               c, None, length=10)[0]
    c0 = np.random.default_rng(52).uniform(0.2, 2.0, 4).astype(np.float32)
    c, ys = kiln.jit(lambda c: lax.scan(lambda c, _: (inner(c), c[0]), c, None, length=300))(c0)
    r, yr = c0.copy(), []
    for _ in range(300):
        yr.append(r[0])
        for _ in range(10):
            r = (r * np.float32(0.99) if r[0] > 0.5 else r + np.float32(0.01)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(c), r)
    np.testing.assert_array_equal(np.asarray(ys), np.array(yr, np.float32))


def test_a_long_while_loop_over_a_python_counter_is_one_loop_under_jit():
    # `(0, x)`: the condition is concrete at first; past a few trips the rest is one while
    # equation (one body traced), not 100,000 bodies unrolled into the program
    f = kiln.jit(lambda x: lax.while_loop(lambda c: c[0] < 100000, lambda c: (c[0] + 1, c[1] * 0.5 + 1.0), (0, x)))
    n, y = f(jnp.float32(3.0))
    assert int(n) == 100000 and abs(float(y) - 2.0) < 1e-6
    assert "while[" in str(kiln.make_jaxpr(lambda x: lax.while_loop(lambda c: c[0] < 100000, lambda c: (c[0] + 1, c[1]),
                                                                    (0, x)))(1.0))


def test_vmapped_while_whose_predicate_follows_a_runtime_step():
    """optax's Hungarian algorithm under vmap: the CPU loop driver read the predicate through a
    pointer defined inside a runtime step's scf.if ("generated MLIR does not parse: use of
    undeclared SSA value name")."""
    def f(v):
        def cond(c):
            i, arr = c
            idx = jnp.clip(i, 0, 2)[None, None] + jnp.zeros((1, 1), jnp.int32)
            return jnp.any(jnp.take(arr, idx.reshape(-1), axis=0) != 0)

        def body(c):
            i, arr = c
            return i + 1, arr.at[jnp.clip(i, 0, 2)].set(0)
        return lax.while_loop(cond, body, (jnp.int32(0), v))
    rng = np.random.default_rng()
    v = rng.integers(1, 9, size=(2, 3)).astype(np.int32)
    v[1, 1] = 0
    i, arr = kiln.jit(kiln.vmap(f))(v)
    np.testing.assert_array_equal(np.asarray(i), [3, 1])
    np.testing.assert_array_equal(np.asarray(arr), [[0, 0, 0], [0, 0, v[1, 2]]])
    i1, arr1 = kiln.vmap(f)(v[:1])
    np.testing.assert_array_equal(np.asarray(i1), [3])


def test_concrete_loops_trace_their_body_once():
    """A concrete scan/fori_loop/while_loop compiles, long or short: its body is traced (a few
    times: the carry's types are checked), not called per trip, as JAX's (flax nnx's scan tests
    count the calls); unroll=True calls it per trip, as JAX's unrolled trace."""
    calls = []
    xs = np.random.default_rng().standard_normal(300).astype(np.float32)

    def body(c, x):
        calls.append(1)
        return c + x, c * 2
    c, ys = kiln.lax.scan(body, np.float32(0), jnp.asarray(xs))
    np.testing.assert_allclose(c, xs.sum(), rtol=1e-4)
    np.testing.assert_allclose(ys, 2 * np.concatenate([[0], np.cumsum(xs)[:-1]]), rtol=1e-4, atol=1e-4)
    assert len(calls) < 10
    calls.clear()
    c, ys = kiln.lax.scan(body, np.float32(0), jnp.asarray(xs[:8]))
    assert len(calls) <= 2
    np.testing.assert_allclose(c, xs[:8].sum(), rtol=1e-5)
    calls.clear()
    kiln.lax.scan(body, np.float32(0), jnp.asarray(xs[:8]), unroll=True)
    assert len(calls) == 8
    calls.clear()
    v = kiln.lax.fori_loop(0, 5, lambda i, v: (calls.append(1), v * 2 + i)[1], jnp.float32(1))
    assert len(calls) <= 2 and float(v) == 32 + 26
    calls.clear()

    def wbody(s):
        calls.append(1)
        return s[0] + 1, s[1] * 3
    n, v = kiln.lax.while_loop(lambda s: s[0] < 4, wbody, (0, jnp.float32(1)))
    assert len(calls) <= 2 and int(n) == 4 and float(v) == 81
    assert int(kiln.lax.fori_loop(0, 1000, lambda i, v: v + i, 0)) == 499500
    n, v = kiln.lax.while_loop(lambda s: s[0] < 500, lambda s: (s[0] + 1, s[1] * 1.01), (0, jnp.float32(1.0)))
    assert int(n) == 500
    np.testing.assert_allclose(v, 1.01 ** 500, rtol=1e-3)


def test_cond_and_switch_results_take_branch_0s_weak_type():
    """Issue 33 (diffrax under strict promotion): as JAX's, a cond's results have its false
    branch's types and a switch's its branch 0's, weak types included, whichever branch runs and
    whether the predicate is traced or concrete (kiln took both-weak, or the taken branch's)."""
    import kiln
    rng = np.random.default_rng()
    v = float(rng.standard_normal())

    def weak():
        return jnp.asarray(v) * 0 + 1.0  # a Python scalar's weak float32

    def strong():
        return jnp.float32(v)
    for p in (True, False):
        for f in (lambda q: lax.cond(q, strong, weak), lambda q: lax.switch(q.astype(int), [weak, strong])):
            assert kiln.jit(f)(jnp.asarray(p)).weak_type
            assert f(jnp.asarray(p)).weak_type
            assert kiln.jit(lambda: f(jnp.asarray(p)))().weak_type  # a concrete predicate under a trace
        for f in (lambda q: lax.cond(q, weak, strong), lambda q: lax.switch(q.astype(int), [strong, weak, weak])):
            assert not kiln.jit(f)(jnp.asarray(p)).weak_type
            assert not f(jnp.asarray(p)).weak_type
    # the values are the taken branch's
    assert float(kiln.jit(lambda q: lax.switch(q, [strong, weak, lambda: jnp.float32(7)]))(2)) == 7
    assert float(kiln.jit(lambda q: lax.switch(q, [strong, weak, lambda: jnp.float32(7)]))(-3)) == np.float32(v)
    assert float(kiln.jit(lambda q: lax.switch(q, [strong, weak, lambda: jnp.float32(7)]))(1)) == 1.0
