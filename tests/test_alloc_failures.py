"""A failed allocation while compiling is a MemoryError, never an abort, and leaves kiln usable.

Every allocation of kiln's core goes through one hook (ir/alloc.h); _kiln.alloc_fail_at(n)
makes the nth one from then on fail. The sweep below fails each allocation a CPU compile makes
(the pass pipeline, the fusion plan, codegen's kernels and MLIR text, the JIT's bookkeeping),
one per compile.
"""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import _kiln

X = np.arange(64, dtype=np.float32).reshape(8, 8) / 64


PROGRAMS = {
    # fused kernels only (the 8x8 product is small enough to be computed inside the kernel)
    "kernels": (lambda c: lambda v: jnp.sum(jnp.tanh(v @ v.T) * c, axis=0),
                lambda c, x: np.sum(np.tanh(x.astype(np.float64) @ x.T.astype(np.float64)) * c, axis=0)),
    # a library call (sort) between kernels
    "library": (lambda c: lambda v: jnp.sort(v * c, axis=1) + 1,
                lambda c, x: np.sort(x * np.float32(c), axis=1) + 1),
}


def _builder(c, program="kernels"):
    # The constant c is part of the kernels' text, so each c is a module that the in-memory
    # JIT cache (codegen/cpujit.c) has not seen: the whole of codegen and LLVM runs.
    return kiln.make_jaxpr(PROGRAMS[program][0](c))(X)._traced.builder


def _expected(c, program="kernels"):
    return PROGRAMS[program][1](c, X).ravel()


def _run(exe):
    (buf,) = exe(kiln.numpy.asarray(X)._buf)
    buf.block_until_ready()
    return np.frombuffer(buf, dtype=np.float32).copy()  # flat


_constants = iter(2.0 + i / 1024 for i in range(1 << 20))


@pytest.mark.parametrize("program", sorted(PROGRAMS))
@pytest.mark.parametrize("target", ["cpu", "ptx"])
def test_failed_allocations_while_compiling(monkeypatch, program, target):
    """Fails each allocation of a compile in turn (compile() for the CPU; gpu_ptx(), which needs
    no GPU, for codegen's GPU half): MemoryError or a right result, and kiln keeps working."""
    monkeypatch.setenv("KILN_CACHE_DIR", "off")  # no disk cache: every compile generates code

    def compile_(b):
        return b.compile() if target == "cpu" else b.gpu_ptx(90)

    b = _builder(next(_constants), program)
    before = _kiln.alloc_count()
    compile_(b)
    total = _kiln.alloc_count() - before
    assert total > 10, total  # codegen's allocations go through the hook
    failures = 0
    for n in range(1, total + 8):
        c = next(_constants)
        b = _builder(c, program)  # traced before arming: only compiling is swept
        _kiln.alloc_fail_at(n)
        try:
            out = compile_(b)
        except MemoryError as e:
            failures += 1
            assert "memory" in str(e), (n, str(e))
            continue
        finally:
            _kiln.alloc_fail_at(0)
        # an allocation whose failure is not fatal (a cache miss, say): the result is still right
        if target == "cpu":
            np.testing.assert_allclose(_run(out), _expected(c, program), rtol=1e-5, err_msg=f"allocation {n} failed")
        else:
            assert out == compile_(_builder(c, program)), f"allocation {n} failed"
    assert failures > total // 2, (failures, total)
    # kiln still compiles and runs, both a new module and one the JIT already holds
    for c in (next(_constants), 2.0):
        np.testing.assert_allclose(_run(_builder(c, program).compile()), _expected(c, program), rtol=1e-5)


def test_failed_allocation_then_the_same_program_compiles(monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", "off")
    c = next(_constants)
    b = _builder(c)
    _kiln.alloc_fail_at(1)
    try:
        with pytest.raises(MemoryError):
            b.compile()
    finally:
        _kiln.alloc_fail_at(0)
    np.testing.assert_allclose(_run(b.compile()), _expected(c), rtol=1e-5)
