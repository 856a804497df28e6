"""The copy log (kiln_log_copies / KILN_LOG_COPIES=1) and the forbid-copies option (issue 12):
every functional update that copies its operand is named with its source line, or raises
kiln.errors.CopyError; updates that run in place say nothing."""
import inspect
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


@pytest.fixture
def log_copies():
    kiln.config.update("kiln_log_copies", True)
    yield
    kiln.config.update("kiln_log_copies", False)


@pytest.fixture
def forbid_copies():
    kiln.config.update("kiln_forbid_copies", True)
    yield
    kiln.config.update("kiln_forbid_copies", False)


def _line(fn, text):
    """The source line of fn holding text, as the log names it."""
    lines, start = inspect.getsourcelines(fn)
    return f"{inspect.getsourcefile(fn)}:{start + next(i for i, l in enumerate(lines) if text in l)}"


def _copies(capfd):
    kiln.block_until_ready(0)
    return [l for l in capfd.readouterr().err.splitlines() if l.startswith("kiln: copy:")]


def _fill(i, z):
    return z.at[i].set(i * 2.0)  # updated in place: the loop keeps one buffer


def test_an_update_loop_in_place_logs_nothing_and_passes_forbid(capfd, log_copies, forbid_copies):
    n = 1 << 20
    z = jnp.zeros(n, jnp.float32)
    f = kiln.jit(lambda z: lax.fori_loop(0, 1000, _fill, z))
    r = np.asarray(f(z))
    want = np.zeros(n, np.float32)
    want[:1000] = np.arange(1000) * 2.0
    np.testing.assert_array_equal(r, want)
    step = kiln.jit(lambda z, i: z.at[i].add(1.0), donate_argnums=0)  # a donated update loop
    z = jnp.zeros(100, jnp.float32) + 0.0
    for i in range(10000):
        z = step(z, i % 100)
    np.testing.assert_array_equal(np.asarray(z), np.full(100, 100, np.float32))
    g = kiln.jit(lambda x, w: (x @ w).at[0].set(1.0) * 2.0)  # a dying temporary, updated in place
    x = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    ref = x.astype(np.float64) @ x
    ref[0] = 1
    np.testing.assert_allclose(np.asarray(g(x, x)), ref * 2, rtol=1e-5, atol=1e-5)
    assert _copies(capfd) == []


def _reads_old(i, z):
    return z.at[i].set(1.0) + z[0]  # reads z after the update: the carry cannot be overwritten


def test_the_log_names_each_update_that_copies(capfd, log_copies):
    z = jnp.zeros(256, jnp.float32)
    kiln.jit(lambda z: lax.fori_loop(0, 4, _reads_old, z))(z)
    copies = _copies(capfd)
    assert len(copies) == 1 and "scatter of float32[256]" in copies[0] and _line(_reads_old, "z.at[i]") in copies[0]
    assert "per loop trip" in copies[0] and "old value" in copies[0], copies

    def upd(z, i):
        return z.at[i].set(5.0)

    kiln.jit(upd)(z, 3)  # an argument not donated
    copies = _copies(capfd)
    assert len(copies) == 1 and _line(upd, "z.at[i]") in copies[0] and "donate_argnums" in copies[0], copies
    w = z.at[2].set(1.0)  # eager: always a new array
    line = f"{__file__}:{inspect.currentframe().f_lineno - 1}"
    copies = _copies(capfd)
    assert len(copies) == 1 and line in copies[0] and "1.0 KiB" in copies[0], copies
    assert float(w[2]) == 1.0 and float(z[2]) == 0.0

    def both(z):
        y = z * 2.0
        return y.at[0].set(1.0), y  # y is a result too

    kiln.jit(both)(z)
    copies = _copies(capfd)
    assert len(copies) == 1 and "also a result" in copies[0] and _line(both, "y.at[0]") in copies[0], copies
    kiln.jit(lambda z: lax.dynamic_update_slice(z * 2.0, jnp.ones(4), (3,)))(z)  # in place
    assert _copies(capfd) == []
    donating = kiln.jit(upd, donate_argnums=0)
    held = jnp.zeros(256, jnp.float32) + 0.0
    view = np.asarray(held)  # NumPy holds the buffer: it cannot be donated
    donating(held, 1)
    copies = _copies(capfd)
    assert len(copies) == 1 and "could not be" in copies[0], copies
    del view


def test_forbidden_copies_raise_and_the_library_keeps_working(forbid_copies):
    z = jnp.zeros(16, jnp.float32)

    def upd(z, i):
        return z.at[i].set(5.0)

    with pytest.raises(kiln.errors.CopyError, match=r"scatter of float32\[16\] at .*test_copies.py:\d+ copies its "
                                                     r"operand \(64 bytes\).*kiln_forbid_copies"):
        kiln.jit(upd)(z, 3)
    with pytest.raises(kiln.errors.CopyError, match="dynamic_update_slice of float32\\[16\\]"):
        lax.dynamic_update_slice(z, jnp.ones(2), (1,))
    with pytest.raises(RuntimeError):  # a RuntimeError, as JAX's runtime errors
        kiln.jit(lambda z: lax.fori_loop(0, 3, _reads_old, z))(z)
    kiln.config.update("kiln_forbid_copies", False)
    np.testing.assert_array_equal(np.asarray(kiln.jit(upd)(z, 3))[3], 5.0)


def test_the_location_stays_out_of_the_program_and_through_transformations(capfd, log_copies):
    f = lambda x: (x * 2.0).at[1].set(0.0).sum()
    assert "loc" not in str(kiln.make_jaxpr(f)(jnp.ones(4)))
    x = np.random.default_rng(1).standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(np.asarray(kiln.jit(kiln.grad(f))(x)), [2.0, 0.0, 2.0, 2.0])
    np.testing.assert_allclose(np.asarray(kiln.jit(kiln.vmap(f))(np.stack([x, x]))), [2 * (x.sum() - x[1])] * 2, rtol=1e-5)
    assert _copies(capfd) == []  # all of these update temporaries in place
    kiln.vmap(lambda z: z.at[0].set(1.0))(jnp.zeros((3, 4)))  # eager under vmap: copies, still the user's line
    copies = _copies(capfd)
    assert len(copies) == 1 and "test_copies.py" in copies[0], copies


def test_the_environment_variable_turns_the_log_on():
    code = "import kiln, kiln.numpy as jnp\nz = jnp.zeros(8)\nz.at[1].set(2.0).block_until_ready()\n"
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, KILN_LOG_COPIES="1"), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "kiln: copy: dynamic_update_slice of float32[8] at <string>:3 copies its operand" in out.stderr, out.stderr


def test_a_donated_update_loop_is_read_only_after_its_last_step():
    """Regression: each step of a donated loop writes the same buffer; when the host queued a step
    before the one before it had finished, that one's completion marked the buffer ready under
    the later step, and reading it right after the loop could see the last updates half done."""
    w = jnp.asarray(np.random.default_rng().standard_normal(1 << 17).astype(np.float32))
    # each step also sums sin(w) (times 0): slow enough that the host queues steps ahead of them
    step = kiln.jit(lambda z, i, w: z.at[i].add(1.0 + 0.0 * jnp.sum(jnp.sin(w))), donate_argnums=0)
    for _ in range(3):
        z = jnp.zeros(64, jnp.float32) + 0.0
        for i in range(64 * 5):
            z = step(z, i % 64, w)
        np.testing.assert_array_equal(np.asarray(z), np.full(64, 5, np.float32))
