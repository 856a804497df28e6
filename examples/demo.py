"""kiln demo: a jitted 2-D heat-diffusion simulation, checked against the same code in NumPy, then a small
MLP trained with kiln.jit + kiln.value_and_grad and inspected with kiln.vmap.

    PYTHONPATH=python python3 examples/demo.py      (or: make demo)

Part 1: the same stencil (examples/heat.py) runs with kiln.numpy under kiln.jit and with plain NumPy; the
demo prints the device, physical checks (heat conserved, spread growing as 4*alpha*t), the agreement between
the two runs, and the time per step of each.
Part 2 (examples/mlp.py): SGD on synthetic spirals; prints the falling loss, the time per training step and
the held-out accuracy, and checks the gradient against finite differences and vmap against batched code.
The demo exits non-zero if any check of either part fails.
"""

import os
import sys
import time

import numpy as np

import kiln
import kiln.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heat  # noqa: E402
import mlp  # noqa: E402

N = 512             # grid cells per side
ALPHA = 0.2         # dt / dx^2, stable for <= 0.25
STEPS = 500         # total time steps
CHUNK = 25          # steps per timed chunk; the reported time per step is the median over chunks


def main():
    print(f"kiln {kiln.__version__} on {kiln.devices()} (backend: {kiln.default_backend()})")
    print(f"heat diffusion on a {N}x{N} grid, alpha={ALPHA}, {STEPS} steps, one jitted call per step")

    u0 = heat.initial_condition(N)

    # kiln: the jitted step is one fused kernel; the Python loop only dispatches calls (asynchronously).
    # (One step per call: tracing several steps into one program currently makes kiln's fusion
    # recompute shared intermediates, so compile time grows exponentially with the steps per call.)
    advance = kiln.jit(lambda u: heat.step(jnp, u, ALPHA))
    u = jnp.asarray(u0)
    t0 = time.perf_counter()
    u = advance(u).block_until_ready()          # first call: trace + compile + run
    first_call = time.perf_counter() - t0
    done, chunks = 1, []
    while done < STEPS:
        n = min(CHUNK, STEPS - done)
        t0 = time.perf_counter()
        for _ in range(n):
            u = advance(u)
        u.block_until_ready()
        chunks.append((time.perf_counter() - t0) / n)
        done += n
    kiln_step = float(np.median(chunks))
    u_kiln = np.asarray(u)

    # NumPy: the very same stencil code, step by step.
    v, done, chunks = u0.copy(), 0, []
    while done < STEPS:
        n = min(CHUNK, STEPS - done)
        t0 = time.perf_counter()
        for _ in range(n):
            v = heat.step(np, v, ALPHA)
        chunks.append((time.perf_counter() - t0) / n)
        done += n
    numpy_step = float(np.median(chunks))

    heat0, heat1 = float(u0.astype(np.float64).sum()), float(u_kiln.astype(np.float64).sum())
    s0, s1 = heat.spread(u0), heat.spread(u_kiln)
    expected = 4.0 * ALPHA * STEPS
    print()
    print(f"total heat: {heat0:.6e} -> {heat1:.6e}  (conserved to {abs(heat1 - heat0) / heat0 * 100:.2e} %)")
    print(f"max temperature: {u0.max():.2f} -> {u_kiln.max():.2f}; min stays {u_kiln.min():.3g} (>= 0)")
    print(f"spread (variance about the centre): {s0:.1f} -> {s1:.1f} cells^2, grew {s1 - s0:.2f}; "
          f"diffusion theory 4*alpha*t = {expected:.2f} ({abs(s1 - s0 - expected) / expected * 100:.2f} % off)")
    diff = float(np.max(np.abs(u_kiln.astype(np.float64) - v.astype(np.float64))))
    print(f"kiln vs NumPy: max abs difference {diff:.2e} (temperatures up to {u0.max():.0f})")
    print()
    print(f"first kiln call (trace + compile + one step): {first_call * 1e3:.1f} ms")
    print(f"time per step (median over chunks of {CHUNK}): kiln {kiln_step * 1e3:.3f} ms, "
          f"NumPy {numpy_step * 1e3:.3f} ms -> NumPy/kiln = {numpy_step / kiln_step:.2f}x")

    ok = (abs(heat1 - heat0) / heat0 < 1e-4 and diff < 1e-3 and abs(s1 - s0 - expected) / expected < 0.02)
    print("heat checks:", "all passed" if ok else "FAILED")

    print()
    mlp_ok = mlp.run()
    print()
    print("demo:", "all checks passed" if ok and mlp_ok else
          "FAILED (" + ", ".join(n for n, good in (("heat", ok), ("MLP", mlp_ok)) if not good) + ")")
    return 0 if ok and mlp_ok else 1


if __name__ == "__main__":
    sys.exit(main())
