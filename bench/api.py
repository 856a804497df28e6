"""Issue 14's timed workloads against JAX, in one process and one run, on each library's default
backend (the GPU where there is one).

    python3 bench/api.py [--reps N] [--small]

- samplers: `randint`, `permutation`, `categorical` (100 classes) and `normal`, 10^7 samples each
  (--small: 10^6) under jit, key passed as an argument. Before timing, kiln's draws are compared
  with JAX's for the same key (bit for bit where JAX's are exact: randint, permutation,
  categorical; to 1e-6 for normal).
- debug_print: a jitted `x + 1` that calls `debug.print("{}", x[0])` once, called 200 times in a
  row; the time per call with its output going to /dev/null, then the time of the same function
  without the print (the print's own cost is the difference).

Prints one line per workload: the median time of each library and JAX's ratio to kiln's.
"""
import argparse
import contextlib
import os
import sys
import time

import numpy as np

from timing import timed


@contextlib.contextmanager
def stdout_to_null():
    """Both Python's and the C level's stdout go to /dev/null (JAX prints from C++)."""
    sys.stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(null)
        os.close(saved)


def samplers(top, n):
    r, jnp = top.random, top.numpy
    logits = jnp.asarray(np.random.default_rng(1).standard_normal(100).astype(np.float32))
    return {
        "randint": (top.jit(lambda k: r.randint(k, (n,), 0, 1000)), ()),
        "permutation": (top.jit(lambda k: r.permutation(k, n)), ()),
        "categorical": (top.jit(lambda k, lg: r.categorical(k, lg, shape=(n,))), (logits,)),
        "normal": (top.jit(lambda k: r.normal(k, (n,))), ()),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    n = 10 ** (6 if args.small else 7)
    import kiln
    import kiln.numpy  # noqa: F401
    libs = {"kiln": kiln}
    try:
        import jax
        import jax.numpy  # noqa: F401
        libs["jax"] = jax
    except ImportError:
        pass
    times, draws = {}, {}
    for name, top in libs.items():
        key = top.random.PRNGKey(42)
        sync = lambda x: x.block_until_ready()  # noqa: E731
        for w, (f, extra) in samplers(top, n).items():
            t0 = time.perf_counter()
            draws[name, w] = np.asarray(f(key, *extra))
            first = time.perf_counter() - t0
            times[name, w] = timed(lambda: f(key, *extra), sync, args.reps)
            print(f"  {name} {w}: first call {first * 1e3:.0f} ms, then {times[name, w] * 1e3:.2f} ms",
                  file=sys.stderr, flush=True)
        x = top.numpy.arange(16.0)
        p = top.jit(lambda x: (top.debug.print("{}", x[0]), x + 1)[1])
        q = top.jit(lambda x: x + 1)
        with stdout_to_null():
            times[name, "debug_print"] = timed(lambda: [p(x) for _ in range(200)][-1], sync, args.reps) / 200
            if name == "jax":
                top.effects_barrier()
        times[name, "no_print"] = timed(lambda: [q(x) for _ in range(200)][-1], sync, args.reps) / 200
    if "jax" in libs:
        for w in ("randint", "permutation", "categorical"):
            assert np.array_equal(draws["kiln", w], draws["jax", w]), w
        np.testing.assert_allclose(draws["kiln", "normal"], draws["jax", "normal"], rtol=1e-5, atol=1e-5)
    print(f"device: {kiln.devices()[0]}  samples: {n}", flush=True)
    for w in ("randint", "permutation", "categorical", "normal", "debug_print", "no_print"):
        k = times["kiln", w]
        unit, scale = ("us", 1e6) if w in ("debug_print", "no_print") else ("ms", 1e3)
        peers = "  ".join(f"{m} {times[m, w] * scale:8.2f} {unit} ({times[m, w] / k:4.2f}x kiln)"
                          for m in libs if m != "kiln")
        print(f"{w:12s} kiln {k * scale:8.2f} {unit}  {peers}", flush=True)


if __name__ == "__main__":
    main()
