"""Host callbacks: kiln.debug.print / debug.callback and kiln.pure_callback, eagerly, under jit,
vmap, grad and in loops, against the values computed in NumPy; their errors."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax

rng = np.random.default_rng()


def _lines(capsys):
    kiln.effects_barrier()
    return capsys.readouterr().out.strip().splitlines()


def test_debug_print_eager_and_jit(capsys):
    x = rng.standard_normal(3).astype(np.float32)
    kiln.debug.print("eager {}", x)
    assert _lines(capsys) == [f"eager {np.asarray(x)}"]

    @kiln.jit
    def f(x):
        kiln.debug.print("x={x}", x=x)
        y = x * 2
        kiln.debug.print("y={} twice", y)
        kiln.debug.print("y={} twice", y)  # two identical calls print twice (never merged)
        kiln.debug.print("no values")
        return y + 1
    for v in (x, x + 1):
        np.testing.assert_allclose(np.asarray(f(v)), v * 2 + 1)
        out = _lines(capsys)
        assert out == [f"x={v}", f"y={v * 2} twice", f"y={v * 2} twice", "no values"], out


def test_debug_print_vmap_grad_and_loops(capsys):
    kiln.vmap(lambda v: (kiln.debug.print("v {}", v), v * 2)[1])(jnp.arange(3.0))
    assert _lines(capsys) == ["v 0.0", "v 1.0", "v 2.0"]  # once per element, in order (JAX's)
    g = kiln.grad(lambda v: (kiln.debug.print("g {}", v), jnp.sin(v))[1])(1.0)
    assert _lines(capsys) == ["g 1.0"] and abs(float(g) - np.cos(1.0)) < 1e-6
    g = kiln.jit(kiln.grad(lambda v: (kiln.debug.print("jg {}", v), jnp.sin(v))[1]))(0.5)
    assert _lines(capsys) == ["jg 0.5"] and abs(float(g) - np.cos(0.5)) < 1e-6
    lax.fori_loop(0, 3, lambda i, c: (kiln.debug.print("i={} c={}", i, c), c + 1.0)[1], 0.0)
    assert _lines(capsys) == ["i=0 c=0.0", "i=1 c=1.0", "i=2 c=2.0"]

    def body(c):
        kiln.debug.print("w {}", c)
        return c * 2
    out = kiln.jit(lambda c: lax.while_loop(lambda c: c < 20, body, c))(3)
    assert int(out) == 24 and _lines(capsys) == ["w 3", "w 6", "w 12"]
    ys = lax.scan(lambda c, x: (c + x, (kiln.debug.print("s {} {}", c, x), c)[1]), 0.0, jnp.arange(1.0, 4.0))[1]
    np.testing.assert_allclose(np.asarray(ys), [0, 1, 3])
    assert _lines(capsys) == ["s 0.0 1.0", "s 1.0 2.0", "s 3.0 3.0"]
    kiln.jit(lambda p, x: lax.cond(p, lambda x: (kiln.debug.print("true {}", x), x)[1],
                                   lambda x: (kiln.debug.print("false {}", x), x)[1], x))(False, 7.0)
    assert _lines(capsys) == ["false 7.0"]


def test_debug_callback_pytrees_and_complex():
    seen = []
    z = (rng.standard_normal(2) + 1j * rng.standard_normal(2)).astype(np.complex64)
    tree = {"a": jnp.arange(4).reshape(2, 2), "z": z}

    @kiln.jit
    def f(t):
        kiln.debug.callback(lambda t, scale: seen.append((t, scale)), t, scale=2)
        return t["a"].sum()
    assert int(f(tree)) == 6
    kiln.effects_barrier()
    (t, scale), = seen
    assert scale == 2 and t["z"].dtype == np.complex64
    np.testing.assert_array_equal(t["a"], np.arange(4).reshape(2, 2))
    np.testing.assert_array_equal(t["z"], z)


def test_pure_callback_jit_vmap_and_errors():
    def host_sin(a):
        return np.sin(a).astype(a.dtype)
    x = rng.standard_normal(5).astype(np.float32)
    spec = kiln.ShapeDtypeStruct((5,), np.float32)
    np.testing.assert_allclose(np.asarray(kiln.pure_callback(host_sin, spec, x)), np.sin(x), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.jit(lambda x: kiln.pure_callback(host_sin, spec, x) * 2)(x)),
                               2 * np.sin(x), rtol=1e-6)
    xs = rng.standard_normal((3, 5)).astype(np.float32)
    calls = []

    def counted(a):
        calls.append(a.shape)
        return np.sin(a).astype(a.dtype)
    for method, want_calls in (("sequential", [(5,)] * 3), ("expand_dims", [(3, 5)]), ("broadcast_all", [(3, 5)])):
        calls.clear()
        f = kiln.vmap(lambda v: kiln.pure_callback(counted, kiln.ShapeDtypeStruct(v.shape, v.dtype), v,
                                                   vmap_method=method))
        np.testing.assert_allclose(np.asarray(f(xs)), np.sin(xs), rtol=1e-6)
        kiln.effects_barrier()
        assert calls == want_calls, (method, calls)
    with pytest.raises(NotImplementedError, match="vmap_method"):
        kiln.vmap(lambda v: kiln.pure_callback(host_sin, kiln.ShapeDtypeStruct(v.shape, v.dtype), v))(xs)
    with pytest.raises(NotImplementedError, match="custom_jvp"):
        kiln.grad(lambda v: kiln.pure_callback(host_sin, kiln.ShapeDtypeStruct((), np.float32), v))(1.0)
    bad = kiln.jit(lambda v: kiln.pure_callback(lambda a: np.zeros(4, np.float32), spec, v))
    with pytest.raises(RuntimeError, match="declared"):
        np.asarray(bad(x))
    with pytest.raises(TypeError, match="declared"):
        kiln.pure_callback(lambda a: np.zeros(4, np.float32), spec, x)  # eagerly: at once
    with pytest.raises(ValueError, match="vmap_method"):
        kiln.pure_callback(host_sin, spec, x, vmap_method="sideways")
    np.testing.assert_allclose(np.asarray(kiln.jit(lambda x: kiln.pure_callback(host_sin, spec, x))(x)),
                               np.sin(x), rtol=1e-6)  # still works after the errors


def test_a_failing_debug_callback_fails_the_call():
    def boom(v):
        raise ValueError("no thanks")
    f = kiln.jit(lambda v: (kiln.debug.callback(boom, v), v + 1)[1])
    with pytest.raises(RuntimeError, match="no thanks"):
        np.asarray(f(1.0))
        kiln.effects_barrier()
    assert float(kiln.jit(lambda v: v + 1)(1.0)) == 2.0
    # on the CPU the call itself raises (JAX's CPU client runs a program with host callbacks
    # before the call returns; equinox's error_if under grad relies on it): no result is read here
    if kiln.default_backend() == "cpu":
        def checked(v):
            bad = lax.cond(v < 0, lambda: kiln.pure_callback(boom, jax_struct(v), v), lambda: v)
            return jnp.sin(bad)
        g = kiln.jit(checked)
        np.testing.assert_allclose(float(g(0.5)), np.sin(0.5), rtol=1e-6)
        with pytest.raises(RuntimeError, match="no thanks"):
            g(-0.5)
        with pytest.raises(RuntimeError, match="no thanks"):
            f(2.0)
        assert float(g(0.25)) == pytest.approx(np.sin(0.25), rel=1e-6)


def jax_struct(v):
    return kiln.ShapeDtypeStruct(v.shape, v.dtype)


def test_prints_inside_conds_and_loops_are_kept_and_stay_inside(capsys):
    # a cond whose only work is a print (no results) and a loop whose result is unused still run;
    # a print of values from outside a branch runs only when the branch does
    f = kiln.jit(lambda x: lax.cond(x > 0, lambda x: kiln.debug.print("A {x}", x=x), lambda x: None, x))
    f(1.0)
    f(-1.0)
    assert _lines(capsys) == ["A 1.0"]
    g = kiln.jit(lambda x: lax.cond(x > 0, lambda: (kiln.debug.print("B {x}", x=x), x + 1)[1], lambda: x - 1))
    assert float(g(-1.0)) == -2.0 and float(g(2.0)) == 3.0
    assert _lines(capsys) == ["B 2.0"]
    lax.cond(jnp.asarray(-1.0) > 0, lambda: (kiln.debug.print("C"), 1.0)[1], lambda: 0.0)  # eager: untaken
    assert _lines(capsys) == []
    h = kiln.jit(lambda x: (lax.fori_loop(0, 2, lambda i, c: (kiln.debug.print("D {i}", i=i), c)[1], x), 0)[1])
    h(1.0)
    assert _lines(capsys) == ["D 0", "D 1"]


def test_a_callback_of_many_complex_operands():
    """Issue 33 (diffrax's complex solves): a pure_callback with more than 8 operands, complex ones
    among them, compiles (the complex pass took at most 8 operands of a library call)."""
    rng = np.random.default_rng()
    xs = [jnp.asarray(rng.standard_normal(3) + 1j * rng.standard_normal(3), jnp.complex64) for _ in range(6)]
    xs += [jnp.asarray(rng.standard_normal(2), jnp.float32) for _ in range(6)]

    def host(*vs):
        return np.asarray(sum(np.sum(v) for v in vs), np.complex64)
    got = kiln.jit(lambda *v: kiln.pure_callback(host, kiln.ShapeDtypeStruct((), jnp.complex64), *v))(*xs)
    np.testing.assert_allclose(got, host(*[np.asarray(x) for x in xs]), rtol=1e-5)


def test_prints_of_a_loop_still_running_at_exit_are_not_lost(tmp_path):
    """Issue 33 (equinox's checkpointed while loop tests read a loop's debug.print output): a
    jitted loop that prints, launched and not waited for when the program ends, finishes its
    callbacks before the interpreter exits, as JAX waits for its effects (kiln dropped them)."""
    import os
    import subprocess
    import sys
    n = int(np.random.default_rng().integers(2, 6))
    script = tmp_path / "exit.py"
    script.write_text(
        "import kiln, kiln.numpy as jnp\n"
        "def body(c):\n"
        "    kiln.debug.print('trip {}', c[0])\n"
        "    return c[0] + 1, jnp.sin(c[1])\n"
        f"kiln.jit(lambda x: kiln.lax.while_loop(lambda c: c[0] < {n}, body, (0, x)))(0.5)\n")
    python = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
    p = subprocess.run([sys.executable, str(script)], env=dict(os.environ, PYTHONPATH=python), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert [ln for ln in p.stdout.splitlines() if ln.startswith("trip")] == [f"trip {i}" for i in range(n)]


def test_debug_callbacks_run_once_under_differentiation():
    """Issue 33 (equinox's checkpointed while loop prints its steps): as JAX's, a debug callback in
    a differentiated function runs once per primal evaluation: in a loop under grad outside jit (the
    concrete trace computed the loop, and the program ran it again), in vjp's backward (it ran the
    program twice), and in linearize's f_jvp (each call ran it)."""
    rng = np.random.default_rng()
    x0 = float(rng.uniform(0.2, 1.0))
    seen = []

    def body(x):
        kiln.debug.callback(lambda v: seen.append(round(float(v), 5)), x)
        return jnp.sin(x)
    xs = [round(x0, 5), round(float(np.float32(np.sin(np.float32(x0)))), 5)]
    cases = {
        "grad fori": (lambda: kiln.grad(lambda x: lax.fori_loop(0, 2, lambda i, c: body(c), x))(x0), xs),
        "grad scan": (lambda: kiln.grad(lambda x: lax.scan(lambda c, _: (body(c), None), x, None, length=2)[0])(x0), xs),
        "vjp": (lambda: kiln.vjp(body, x0)[1](1.0), xs[:1]),
        "jit vjp": (lambda: kiln.jit(lambda g: kiln.vjp(body, g)[1](1.0))(x0), xs[:1]),
        "loop of vjp": (lambda: kiln.jit(lambda g: lax.fori_loop(0, 2, lambda i, c: kiln.vjp(body, c)[1](1.0)[0], g))(x0),
                        None),
        "linearize": (lambda: (lambda f: [f(t) for t in (1.0, 2.0)])(kiln.linearize(body, x0)[1]), xs[:1]),
    }
    for name, (run, want) in cases.items():
        seen.clear()
        run()
        kiln.effects_barrier()
        if want is None:
            assert len(seen) == 2, (name, seen)
        else:
            assert seen == want, (name, seen, want)


def test_io_callback_runs_once_under_grad():
    """Issue 33 (equinox's progress meter starts its bar with an io_callback): under grad outside
    jit, an io_callback on values no derivative reaches runs once, as in JAX (the concrete trace ran
    it, and the gradient program ran it again); its result is used; jit(grad) runs it once per
    call; on a differentiated value it still refuses, as JAX's does."""
    from kiln.experimental import io_callback
    calls = []

    def side(v):
        calls.append(float(v))
        return np.asarray(v * 3, np.float32)

    def f(p, q):
        s = io_callback(side, kiln.ShapeDtypeStruct((), jnp.float32), q)
        return p * p * s
    p, q = (float(v) for v in np.random.default_rng().uniform(0.5, 2.0, 2))
    for run in (kiln.grad(f), kiln.jit(kiln.grad(f))):
        calls.clear()
        g = run(np.float32(p), np.float32(q))
        kiln.effects_barrier()
        assert calls == [float(np.float32(q))]
        np.testing.assert_allclose(float(g), 2 * p * 3 * q, rtol=1e-5)
    with pytest.raises(ValueError, match="io_callback is not differentiable"):
        kiln.grad(f, argnums=1)(np.float32(p), np.float32(q))


def test_replayed_prints_stay_in_the_trace_that_replays_them(capfd):
    """Issue 33 (equinox's checkpointed loop resolves its symbolic zeros with jax.eval_shape over a
    linearize/vjp of the body's jaxpr): a print replayed from a recorded program (eval_jaxpr, an
    inlined linearize or vjp) inside eval_shape belongs to eval_shape's discarded trace, as in JAX's
    dynamic tracing; it never runs from the enclosing jit program, nor at once under eager grad.
    And a jitted CPU program with prints has printed them when its call returns (JAX's CPU client
    does too), so output captured right after the call is complete, loops included."""
    x0 = float(rng.uniform(0.2, 1.0))

    def body(x):
        kiln.debug.print("b {}", x)
        return jnp.sin(x) * 2
    jp = kiln.make_jaxpr(body)(1.0)

    def replayed(x):
        return kiln.core.eval_jaxpr(jp.jaxpr, jp.consts, x)[0]

    @kiln.custom_vjp
    def f(x):
        return x * 3

    def f_fwd(x):
        kiln.eval_shape(lambda: kiln.linearize(replayed, x)[1](x))
        kiln.eval_shape(lambda: kiln.jvp(replayed, (x,), (x,)))
        return x * 3, x

    def f_bwd(r, g):
        kiln.eval_shape(lambda: kiln.vjp(replayed, r)[1](g))
        return (g * 3,)
    f.defvjp(f_fwd, f_bwd)
    for name, run in {"jit grad": kiln.jit(kiln.grad(f)), "grad": kiln.grad(f)}.items():
        g = run(x0)
        kiln.effects_barrier()
        np.testing.assert_allclose(float(g), 3.0, rtol=1e-6)
        assert capfd.readouterr().out == "", name

    @kiln.jit
    def loop(x):
        return lax.fori_loop(0, 50, lambda i, c: (kiln.debug.print("i {}", i), jnp.sin(c) + c * 1e-3)[1], x)
    for _ in range(2):
        out = loop(jnp.ones(4096, jnp.float32))
        assert capfd.readouterr().out.split() == [t for i in range(50) for t in ("i", str(i))]
        assert out.shape == (4096,)


KILN_IN_CALLBACK = r"""
import numpy as np
import kiln as jax, kiln.numpy as jnp
from kiln import lax

def inner(x):  # a host callback that computes with kiln: jit, eager ops, a loop
    a = jnp.asarray(x)
    y = jax.jit(lambda v: jnp.sin(v) * 2)(a) + jnp.cos(a)
    y = lax.fori_loop(0, 3, lambda i, c: c + 1.0, y)
    return np.asarray(y, np.float32)

spec = lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype)
x = np.random.default_rng(0).standard_normal(5).astype(np.float32)
want = np.sin(x) * 2 + np.cos(x) + 3
f = jax.jit(lambda v: jax.pure_callback(inner, spec(v), v) + 1)
print("jit", np.allclose(f(x), want + 1, rtol=1e-5))
g = jax.jit(lambda v: lax.fori_loop(0, 2, lambda i, c: jax.pure_callback(inner, spec(c), c * 0 + v), v))
print("loop", np.allclose(g(x), want, rtol=1e-5))
seen = []
h = jax.jit(lambda v: (jax.debug.callback(lambda a: seen.append(float(jnp.sum(jnp.asarray(a) * 2))), v), v)[1] * 3)
print("debug", np.allclose(h(x), x * 3), abs(seen[0] - 2 * float(np.sum(x))) < 1e-4 if seen else False)
print("eager", np.allclose(jax.pure_callback(inner, spec(x), x), want, rtol=1e-5))
"""


@pytest.mark.parametrize("platform", ["cpu", pytest.param("gpu", marks=[pytest.mark.gpu, pytest.mark.skipif(
    kiln.default_backend() != "gpu", reason="needs an NVIDIA GPU")])])
def test_kiln_inside_a_host_callback(platform, tmp_path):
    """A host callback that computes with kiln (a jitted function, eager ops, a loop) inside a
    jitted program: its launches run at once on the thread making the callback (queued, they
    waited behind the program waiting for them: the process hung), in a loop too; values
    checked against NumPy. In a subprocess with a time limit: a regression hangs, not the suite."""
    import os
    import subprocess
    import sys
    script = tmp_path / "in_callback.py"
    script.write_text(KILN_IN_CALLBACK)
    python = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
    p = subprocess.run([sys.executable, str(script)], env=dict(os.environ, PYTHONPATH=python, KILN_PLATFORM=platform),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert [ln for ln in p.stdout.splitlines() if ln.split()[0] in ("jit", "loop", "debug", "eager")] == \
        ["jit True", "loop True", "debug True True", "eager True"], p.stdout
